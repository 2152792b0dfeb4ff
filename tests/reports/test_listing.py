"""``gpu-kpi runs`` filters: a time range (weeks, dates, times, in a zone), user, status, the
newest N; ``--json`` as ``--format json``; a range that ends before it starts is one line."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fakes import StoreTemplates, run_record

from reports.cli import main
from tracker.store import RunStore

MON_W47 = datetime(2026, 11, 16, tzinfo=UTC)


def fill(url: str) -> None:
    """Runs of alice and bob in W46 to W48, one across the W47/W48 edge, one failed."""
    with RunStore(url) as s:
        s.upsert_run(run_record("early", datetime(2026, 11, 10, 9, tzinfo=UTC), 2, user="alice"))
        s.upsert_run(run_record("w47", datetime(2026, 11, 17, 9, tzinfo=UTC), 2, user="bob"))
        # Sunday 23:00 to Monday 01:00: in W47 and in W48
        s.upsert_run(run_record("edge", datetime(2026, 11, 22, 23, tzinfo=UTC), 2, user="alice"))
        s.upsert_run(
            dataclasses.replace(
                run_record("w48", datetime(2026, 11, 24, 9, tzinfo=UTC), 1, user="alice"),
                status="failed",
            )
        )


@pytest.fixture
def url(tmp_path: Path, store_templates: StoreTemplates) -> str:
    """A store of :func:`fill`, the test's own (a copy of the module's)."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store_templates.made(url, "fill", fill)
    return url


def ids(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> list[str]:
    assert main(["runs", "--store", url, "--format", "json", *args]) == 0
    return [r["id"] for r in json.loads(capsys.readouterr().out)]


def test_filters(capsys: pytest.CaptureFixture[str], url: str) -> None:
    assert ids(capsys, url) == ["w48", "edge", "w47", "early"]  # the newest first
    assert ids(capsys, url, "--since", "2026-W47", "--until", "2026-W47") == ["edge", "w47"]
    assert ids(capsys, url, "--since", "2026-11-23") == ["w48", "edge"]  # still going then
    assert ids(capsys, url, "--until", "2026-11-17T09:00") == ["early"]  # started before
    assert ids(capsys, url, "--until", "2026-11-17") == ["w47", "early"]  # a day: to its end
    assert ids(capsys, url, "--since", "2026-11-17", "--until", "2026-11-17") == ["w47"]
    # the edge run ends at 01:00 UTC = 02:00 in Berlin: a Berlin Monday 01:30 still sees it
    assert ids(capsys, url, "--since", "2026-11-23T01:30", "--tz", "Europe/Berlin") == [
        "w48",
        "edge",
    ]
    assert ids(capsys, url, "--user", "alice") == ["w48", "edge", "early"]
    assert ids(capsys, url, "--status", "failed") == ["w48"]
    assert ids(capsys, url, "--user", "alice", "--limit", "2") == ["w48", "edge"]
    assert main(["runs", "--store", url, "--json", "--limit", "1"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["w48"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--since", "2026-W48", "--until", "2026-W47"),
            "--until (2026-11-23 00:00) is not after --since (2026-11-23 00:00)",
        ),
        (
            ("--since", "yesterday"),
            "--since: expected YYYY-Www, YYYY-MM-DD or YYYY-MM-DDTHH:MM, got 'yesterday'",
        ),
        (
            ("--week", "2026-W48", "--since", "2026-W47"),
            "--week is one week; --since/--until a range: not both",
        ),
    ],
)
def test_a_bad_range_is_one_line(
    capsys: pytest.CaptureFixture[str], url: str, args: tuple[str, ...], message: str
) -> None:
    assert main(["runs", "--store", url, *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"gpu-kpi: error: {message}\n"


def test_limit_must_be_a_positive_number(capsys: pytest.CaptureFixture[str], url: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(["runs", "--store", url, "--limit", "0"])
    assert e.value.code == 2
    assert "--limit: expected a whole number >= 1, got '0'" in capsys.readouterr().err


def test_runs_shows_its_times_in_tz_and_refuses_a_zone_that_is_none(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    assert main(["runs", "--store", url, "--week", "2026-W48", "--tz", "Asia/Tokyo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the header names the zone; w48 started 09:00 UTC, 18:00 in Tokyo (UTC+9)
    assert lines[0].startswith("started (Asia/Tokyo)")
    (w48,) = [line for line in lines if " w48 " in line]
    assert w48.startswith("2026-11-24 18:00")
    assert main(["runs", "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[0] == "started" and out[1].startswith("2026-11-24 09:00")
    # "Europe" is a folder of zones, not one: refused, whether a range needs it or not
    assert main(["runs", "--store", url, "--tz", "Europe"]) == 2
    assert "unknown time zone 'Europe'" in capsys.readouterr().err


def test_a_run_on_an_owned_gpu_costs_the_same_in_runs_and_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run on an A100 80GB recorded at a rent price ($4.00/GPU-h: 4 h, $16.00, waste at 60%
    16 × (1 − 60/85) = $4.71) before ``[owned.A100-80GB]`` was configured. Amortized: 15000 ÷
    (4 × 8766) + 0.5 × 0.10 × 1.3 = $0.4928/GPU-h. ``gpu-kpi runs`` and the weekly report show
    the same $1.97 spend and $0.58 waste: one price per run."""
    from reports.build import compute
    from reports.cli import main
    from reports.request import Request
    from tracker.config import load_settings

    config = tmp_path / "gpu-kpi.toml"
    config.write_text(
        "[owned.A100-80GB]\npurchase_usd = 15000\nlife_years = 4\npower_w = 500\n"
        "usd_per_kwh = 0.10\npue = 1.3\n"
    )
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 24, 8, tzinfo=UTC)
    with RunStore(url) as store:
        store.upsert_run(
            run_record(
                "heavy",
                start,
                4,
                util=60.0,
                model="NVIDIA A100-SXM4-80GB",
                price=4.0,
                price_source="table",
                cost_usd=16.0,
                waste_usd=16 * (1 - 60 / 85),
                idle_usd=0.0,
            )
        )
    rate = 15000 / (4 * 8766) + 0.5 * 0.10 * 1.3
    assert main(["runs", "--store", url, "--config", str(config), "--format", "json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["price_per_gpu_hour"] == pytest.approx(rate)
    assert listed["price_source"] == "owned (amortized)"
    assert listed["cost_usd"] == pytest.approx(4 * rate)
    assert listed["waste_usd"] == pytest.approx(4 * rate * (1 - 60 / 85))

    settings = load_settings(str(config), store=url)
    req = Request.from_settings(settings, week="2026-W48", tz=UTC)
    k = compute(url, req, now=datetime(2026, 12, 1, tzinfo=UTC)).kpis
    (run,) = k.runs.to_dict("records")
    assert round(run["spend_usd"], 2) == round(listed["cost_usd"], 2) == 1.97
    assert round(run["waste_usd"], 2) == round(listed["waste_usd"], 2) == 0.58

    assert main(["runs", "--store", url]) == 0  # no config: the price the run ran with
    table = capsys.readouterr().out
    assert "16.00" in table and "4.71" in table


def test_runs_report_chargeback_and_budgets_agree_to_the_cent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run on two owned A100 80GB for 1 h in 2026-W48, recorded at the rent price ($2.00):
    amortized 15000 ÷ (4 × 8766) + 0.5 × 0.10 × 1.3 = $0.4928/GPU-h, so 2 GPU-h = $0.99 in
    ``gpu-kpi runs``, the weekly report, the chargeback CSV and vision's weekly budget."""
    import csv
    import io

    from reports.budgets import current_lines
    from reports.kpi.budgets import Budget
    from reports.request import Request
    from tracker.config import load_settings

    config = tmp_path / "gpu-kpi.toml"
    config.write_text(
        "[owned.A100-80GB]\npurchase_usd = 15000\nlife_years = 4\npower_w = 500\n"
        'usd_per_kwh = 0.10\npue = 1.3\n\n[[budgets]]\nteam = "vision"\nusd_per_week = 100\n'
    )
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as store:
        store.upsert_run(
            run_record(
                "pair",
                datetime(2026, 11, 25, 9, tzinfo=UTC),
                1,
                gpus=2,
                util=70.0,
                model="NVIDIA A100-SXM4-80GB",
                price=2.0,
                price_source="table",
                cost_usd=4.0,
                team="vision",
            )
        )
    spend = round(2 * (15000 / (4 * 8766) + 0.5 * 0.10 * 1.3), 2)
    assert spend == 0.99
    cfg = ["--store", url, "--config", str(config)]

    assert main(["runs", *cfg, "--format", "json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    out = tmp_path / "out"
    assert main(["report", *cfg, "--week", "2026-W48", "--format", "json", "--out", str(out)]) == 0
    capsys.readouterr()
    week = json.loads((out / "2026-W48.json").read_text())
    (run,) = week["runs"]
    assert main(["chargeback", *cfg, "--since", "2026-W48", "--until", "2026-W48"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    settings = load_settings(str(config), store=url)
    req = Request.from_settings(settings, week=None, tz=UTC)
    with RunStore(url) as store:
        (line,) = current_lines(
            store,
            req,
            [Budget(team="vision", usd_per_week=100)],
            now=datetime(2026, 11, 29, 23, tzinfo=UTC),
        )
    figures = {
        "runs": listed["cost_usd"],
        "report": run["spend_usd"],
        "report headline": week["headline"]["spend_usd"],
        "chargeback": sum(float(r["spend_usd"]) for r in rows),
        "budget": line.spend_usd,
    }
    assert {k: round(v, 2) for k, v in figures.items()} == dict.fromkeys(figures, spend)


def test_a_failed_run_is_failed_work_in_runs_and_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run on 4 H100 for 2 h at 30% that failed, recorded by its tracker with $20.00 of waste:
    ``gpu-kpi runs`` and the report say no waste, and the report's 8 GPU-h × $3.85 = $30.80 of
    failed work."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as store:
        store.upsert_run(
            dataclasses.replace(
                run_record(
                    "oom",
                    datetime(2026, 11, 25, 9, tzinfo=UTC),
                    2,
                    gpus=4,
                    util=30.0,
                    cost_usd=30.8,
                    waste_usd=20.0,
                    idle_usd=5.0,
                    team="nlp",
                ),
                status="failed",
            )
        )
    assert main(["runs", "--store", url, "--format", "json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["status"], listed["waste_usd"], listed["idle_usd"]) == ("failed", 0.0, 0.0)
    assert listed["cost_usd"] == pytest.approx(30.8)
    out = tmp_path / "out"
    assert (
        main(
            ["report", "--store", url, "--week", "2026-W48", "--format", "json", "--out", str(out)]
        )
        == 0
    )
    capsys.readouterr()
    week = json.loads((out / "2026-W48.json").read_text())
    h = week["headline"]
    assert (h["waste_usd"], h["idle_usd"]) == (0.0, 0.0)
    assert h["failed_usd"] == pytest.approx(8 * 3.85) and h["failed_gpu_hours"] == 8.0
    assert week["ledger"]["failed"] == {"gpu_hours": 8.0, "usd": pytest.approx(30.8)}
    (first,) = week["fix_first"]
    assert (first["cause"], first["usd"]) == ("failed", pytest.approx(30.8))


def test_a_throttled_run_is_the_machines_in_runs_and_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run on 2 H100 for 3 h at 92% whose GPUs were held below their clocks 1.5 of its 6
    GPU-hours (the violation counters): ``gpu-kpi runs`` lists it as its tracker recorded it
    (verdict throttled, the hours and how they were measured), and the report's ledger, headline
    and fix-first item say 1.5 GPU-h × $3.85 = $5.78, the machine's."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as store:
        store.upsert_run(
            run_record(
                "hot",
                datetime(2026, 11, 25, 9, tzinfo=UTC),
                3,
                gpus=2,
                util=92.0,
                cost_usd=6 * 3.85,
                waste_usd=0.0,
                team="vision",
                throttled_gpu_hours=1.5,
                throttle_source="counter",
                verdict="throttled",
            )
        )
    assert main(["runs", "--store", url, "--format", "json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["verdict"], listed["throttled_gpu_hours"]) == ("throttled", 1.5)
    assert listed["throttle_source"] == "counter"
    out = tmp_path / "out"
    args = ["report", "--store", url, "--week", "2026-W48", "--format", "json", "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    week = json.loads((out / "2026-W48.json").read_text())
    assert week["headline"]["throttled_usd"] == pytest.approx(1.5 * 3.85)
    assert week["ledger"]["throttled"] == {"gpu_hours": 1.5, "usd": pytest.approx(1.5 * 3.85)}
    assert week["ledger"]["useful"]["gpu_hours"] == pytest.approx(4.5)
    (first,) = week["fix_first"]
    assert (first["cause"], first["usd"]) == ("throttled", pytest.approx(1.5 * 3.85))
    (run,) = week["runs"]
    assert (run["throttled_hours"], run["throttle_source"]) == (1.5, "counter")
    html = ["report", "--store", url, "--week", "2026-W48", "--format", "html", "--out", str(out)]
    assert main(html) == 0
    page = (out / "2026-W48.html").read_text(encoding="utf-8")
    assert (
        "25% of this run&#39;s GPU-time and $5.78 were the machine (throttled 90 GPU-min, "
        "counter-exact), not your code"
    ) in page
    assert "Throttled $5.78" in page or "throttled $5.78" in page


def test_a_slice_and_a_shared_gpu_say_so_on_the_page_and_in_the_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notebook idle a day on a 1g.10gb of an A100 80GB (24 h × 1/7 = 3.43 GPU-h, $6.86 at
    $2.00) and a service on an H100 it shared with another pod, split evenly (nothing measured
    the pods' own work: 10 h × 1/2 = 5 GPU-h at the GPU's 30%): both runs to fix, each GPUs
    cell says what it held and how the share was had; the JSON carries the same."""
    url = f"sqlite:///{tmp_path}/runs.db"
    day = datetime(2026, 11, 24, tzinfo=UTC)
    with RunStore(url) as store:
        store.upsert_run(
            run_record(
                "nb",
                day,
                24,
                util=1.0,
                model="A100-80GB",
                price=2.00,
                gpu_hours=24 / 7,
                cost_usd=24 / 7 * 2.00,
                mig_profile="1g.10gb",
                team="research",
            )
        )
        store.upsert_run(
            run_record(
                "svc",
                day,
                10,
                util=30.0,
                gpu_hours=5.0,
                cost_usd=5 * 3.85,
                gpu_split="even",
                tags=("time-sliced",),
                team="web",
            )
        )
    out = tmp_path / "out"
    args = ["report", "--store", url, "--week", "2026-W48", "--format", "json,html"]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    week = json.loads((out / "2026-W48.json").read_text())
    runs = {r["name"]: r for r in week["runs"]}
    assert (runs["nb"]["mig_profile"], runs["nb"]["gpu_split"]) == ("1g.10gb", None)
    assert runs["nb"]["gpu_hours"] == pytest.approx(24 / 7)
    assert runs["nb"]["spend_usd"] == pytest.approx(24 / 7 * 2.00)
    assert (runs["svc"]["mig_profile"], runs["svc"]["gpu_split"]) == (None, "even")
    page = (out / "2026-W48.html").read_text(encoding="utf-8")
    assert "1 × A100-80GB MIG 1g.10gb" in page
    assert "1 × H100, time-sliced (split evenly: no per-process figure measured its share)" in page


def test_mfu_shows_its_peak_in_runs_on_the_page_and_in_the_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45: MFU with its denominator on every surface. A bf16 run (60% busy: a run to
    fix) at 41% of an H100's 989 TF/s beside OFU 45%; a run on a GPU the table lacks says so;
    a run whose FLOP rate was over the peak names the error, no figure."""
    url = f"sqlite:///{tmp_path}/runs.db"
    day = datetime(2026, 11, 24, tzinfo=UTC)
    peak = {"mfu_peak_tflops": 989.4, "mfu_dtype": "bf16", "mfu_dtype_from": "trainer"}
    error = "no MFU: the model FLOP rate is 1.20x the GPUs' peak (989 TF/s bf16 dense, H100 SXM)"
    with RunStore(url) as store:
        store.upsert_run(run_record("llm", day, 10, util=60.0, mfu=0.41, ofu=0.45, **peak))
        store.upsert_run(
            run_record("l20", day, 5, util=50.0, model="L20", price=1.0, mfu_note="no peak for L20")
        )
        store.upsert_run(run_record("twice", day, 5, util=80.0, mfu_note=error, **peak))
    assert main(["runs", "--store", url, "--since", "2026-11-20"]) == 0
    table = {
        cells[1]: cells
        for cells in (re.split(r"\s{2,}", line) for line in capsys.readouterr().out.splitlines())
    }
    assert table["llm"][-5] == "41% of 989 TF/s bf16"  # mfu, cost, waste, status, verdict
    assert table["l20"][-5] == "no peak" and table["twice"][-5] == "over the peak: an error"
    out = tmp_path / "out"
    args = ["report", "--store", url, "--week", "2026-W48", "--format", "json,html,csv"]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    runs = {r["name"]: r for r in json.loads((out / "2026-W48.json").read_text())["runs"]}
    assert (runs["llm"]["mfu"], runs["llm"]["mfu_peak_tflops"], runs["llm"]["ofu"]) == (
        0.41,
        989.4,
        0.45,
    )
    assert (runs["llm"]["mfu_dtype"], runs["llm"]["mfu_dtype_from"]) == ("bf16", "trainer")
    assert runs["l20"]["mfu"] is None and runs["l20"]["mfu_note"] == "no peak for L20"
    assert runs["twice"]["mfu"] is None and runs["twice"]["mfu_note"] == error
    page = (out / "2026-W48.html").read_text(encoding="utf-8")
    assert (
        "MFU 41% of 989 TF/s bf16 dense, H100 SXM · OFU 45% (tensor pipes active x SM clock)"
        in page
    )
    assert "MFU: no peak for L20" in page
    assert error.replace("'", "&#39;") in page  # Jinja2's escape of the quote
    csv_text = (out / "2026-W48.csv").read_text()
    assert ",run,llm,mfu_peak_tflops,989.4" in csv_text
