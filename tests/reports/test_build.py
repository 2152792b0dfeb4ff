"""`gpu-kpi report`: a real store, real files, hand-computed numbers; bad input writes nothing."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from clirun import gpu_kpi
from fakes import StoreTemplates, run_record

from reports.build import build, compute, render
from reports.data.scans import SampleScans
from reports.errors import ReportError
from reports.request import Request, resolve_week
from tracker.record import MinuteSample, RunRecord
from tracker.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
W47 = datetime(2026, 11, 16, tzinfo=UTC)
W48 = datetime(2026, 11, 23, tzinfo=UTC)


def record(id: str, start: datetime, hours: float, util: float | None, **kw: Any) -> RunRecord:
    return run_record(id, start, hours, util=util, **kw)


def fill(url: str) -> None:
    """W47's run, and W48's: busy, slow (no utilization, a name that is markup), sampled."""
    with RunStore(url) as s:
        s.upsert_run(record("last-week", W47 + timedelta(days=1), 2, 50.0, team="nlp"))
        s.upsert_run(record("busy", W48 + timedelta(days=1), 3, 90.0, team="nlp"))
        s.upsert_run(
            record(
                "slow",
                W48 + timedelta(days=2),
                1,
                None,
                team="vision",
                name="<script>alert(1)</script>",
            )
        )
        sampled = record("sampled", W48 + timedelta(days=3), 1, 30.0, team="vision")
        s.upsert_run(sampled)
        s.upsert_samples(
            [
                MinuteSample(
                    run_id="sampled",
                    minute=sampled.started_at + timedelta(minutes=i),
                    gpu="GPU-a",
                    covered_s=60.0,
                    util_pct=20.0 if i < 30 else 40.0,
                )
                for i in range(60)
            ]
        )


@pytest.fixture
def store(tmp_path: Path, store_templates: StoreTemplates) -> str:
    """A store of :func:`fill`, the test's own (a copy of the module's)."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store_templates.made(url, "fill", fill)
    return url


def test_json_and_csv_of_a_week(store: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = gpu_kpi(
        "report", "--week", "2026-W48", "--store", store, "--out", str(out), "--format", "json,csv"
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(out / "2026-W48.json"), str(out / "2026-W48.csv")]
    d = json.loads((out / "2026-W48.json").read_text())
    assert d["schema"] == "gpu-kpi.week/1" and d["week"] == "2026-W48"
    assert d["week_start"] == "2026-11-23T00:00:00+00:00"
    h = d["headline"]
    # busy 3 h at 90%, slow 1 h unknown, sampled 1 h: 30 min at 20% + 30 min at 40% = 30%
    assert h["gpu_hours"] == pytest.approx(5.0)
    assert h["known_gpu_hours"] == pytest.approx(4.0)
    assert h["utilization_pct"] == pytest.approx((3 * 90 + 1 * 30) / 4)
    assert h["spend_usd"] == pytest.approx(5 * 3.85)
    assert h["waste_usd"] == pytest.approx(3.85 * (1 - 30 / 85))
    assert h["runs"] == 3
    # last week: 2 h at $3.85
    assert d["previous"]["spend_usd"] == pytest.approx(7.70)
    assert d["change_pct"]["spend_usd"] == pytest.approx(100 * (19.25 - 7.70) / 7.70)
    teams = {row["team"]: row for row in d["by_team"]}
    assert teams["vision"]["gpu_hours"] == pytest.approx(2.0)
    runs = {r["run_id"]: r for r in d["runs"]}
    assert runs["slow"]["utilization_pct"] is None  # unknown, never 0
    assert runs["slow"]["name"] == "<script>alert(1)</script>"  # data, not markup
    assert [w["week"] for w in d["trend"]][-2:] == ["2026-W47", "2026-W48"]

    rows = list(csv.DictReader(io.StringIO((out / "2026-W48.csv").read_text())))
    spend = [r for r in rows if r["section"] == "headline" and r["metric"] == "spend_usd"]
    assert len(spend) == 1 and float(spend[0]["value"]) == pytest.approx(19.25)
    assert {r["key"] for r in rows if r["section"] == "team"} == {"nlp", "vision"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--week", "2026-W54"), "week '2026-W54' does not exist"),
        (("--week", "2026-48"), "bad week '2026-48'"),
        (("--week", "2030-W01"), "week 2030-W01 has not started yet"),
        (("--week", "2026-W48", "--tz", "Nowhere/City"), "unknown time zone 'Nowhere/City'"),
        (("--week", "2026-W48", "--format", "json,pdf"), "unknown format pdf"),
    ],
)
def test_bad_input_writes_nothing(
    store: str, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "out"
    p = gpu_kpi("report", "--store", store, "--out", str(out), *args)
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("gpu-kpi: error: ") and message in line
    assert not out.exists()


def test_an_empty_store_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    url = f"sqlite:///{tmp_path}/empty.db"
    RunStore(url).close()  # the tables, no run
    p = gpu_kpi(
        "report", "--week", "2026-W48", "--store", url, "--out", str(out), "--format", "json"
    )
    assert p.returncode == 2 and "has no runs: nothing to report" in p.stderr
    assert not out.exists()


def test_default_week_is_the_last_complete_one() -> None:
    now = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)  # a Monday morning
    assert resolve_week(None, UTC, now) == W48
    with pytest.raises(ReportError, match="has not started"):
        resolve_week("2026-W50", UTC, now)


@pytest.mark.slow  # every format through the CLI in a subprocess: ~4 s of CPU
def test_every_format_with_the_archive_link(store: str, tmp_path: Path) -> None:
    import email
    import email.policy

    out = tmp_path / "out"
    p = gpu_kpi(
        "report",
        "--week",
        "2026-W48",
        "--store",
        store,
        "--out",
        str(out),
        "--report-url",
        "https://kpi.example.com/weekly/",
    )
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in out.iterdir()) == [
        "2026-W48.csv",
        "2026-W48.eml",
        "2026-W48.html",
        "2026-W48.json",
        "index.html",
    ]
    page = "https://kpi.example.com/weekly/2026-W48.html"
    assert f'href="{page}"' in (out / "2026-W48.html").read_text()
    msg = email.message_from_bytes((out / "2026-W48.eml").read_bytes(), policy=email.policy.default)
    assert msg.get_content_type() == "multipart/alternative"
    text = msg.get_body(("plain",))
    assert text is not None and page in text.get_content() and "$19.25" in text.get_content()
    assert 'href="2026-W48.html"' in (out / "index.html").read_text()
    # a second week joins the index; the first stays
    p = gpu_kpi(
        "report", "--week", "2026-W47", "--store", store, "--out", str(out), "--format", "html"
    )
    assert p.returncode == 0, p.stderr
    index = (out / "index.html").read_text()
    assert 'href="2026-W47.html"' in index and 'href="2026-W48.html"' in index


def test_samples_are_scanned_into_a_frame_on_both_databases(store_url: str) -> None:
    from reports.kpi import SAMPLE_COLUMNS, SampleFrameBuilder

    with RunStore(store_url) as s:
        s.upsert_run(record("r", W48, 1, 50.0))
        s.upsert_samples(
            [
                MinuteSample(
                    run_id="r",
                    minute=W48 + timedelta(minutes=i),
                    gpu=f"GPU-{i % 2}",
                    covered_s=60.0,
                    util_pct=10.0 * i,
                    sm_active_pct=None,
                )
                for i in range(5)
            ]
        )
        chunks: list[int] = []
        builder = SampleFrameBuilder()

        def consume(rows: list[tuple[object, ...]]) -> None:
            chunks.append(len(rows))
            builder(rows)

        SampleScans(s).scan_samples(
            consume,
            columns=SAMPLE_COLUMNS,
            since=W48 + timedelta(minutes=1),
            until=W48 + timedelta(minutes=4),
            chunk_rows=2,
        )
    assert chunks == [2, 1]
    frame = builder.frame().sort_values("minute", ignore_index=True)
    assert frame["minute"].tolist() == [W48 + timedelta(minutes=i) for i in (1, 2, 3)]
    assert frame["util_pct"].tolist() == [10.0, 20.0, 30.0]
    assert frame["gpu"].astype(str).tolist() == ["GPU-1", "GPU-0", "GPU-1"]
    assert frame["sm_active_pct"].isna().all()


@pytest.mark.usefixtures("blank_charts")
def test_the_week_so_far_and_where_the_runs_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A new user trains on Tuesday of 2026-W49 and runs ``gpu-kpi report``: last week is empty,
    and the report says where the runs are. ``--week current`` reports the week so far: 2 h on
    an H100 at $3.85 = $7.70, marked "so far, to Tue 14:02", written as 2026-W49-so-far.* and
    not archived as the week (no 2026-W49.json; the index links it as the week under way)."""
    from reports.cli import main

    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as store:
        store.upsert_run(run_record("first", datetime(2026, 12, 1, 9, tzinfo=UTC), 2, util=80.0))
    now = datetime(2026, 12, 1, 14, 2, tzinfo=UTC)
    out = tmp_path / "out"
    c = compute(url, Request(week=None, tz=UTC), now=now)
    assert c.kpis.headline.gpu_hours == 0
    assert (
        c.kpis.hint
        == "no runs in this week; 1 run so far in 2026-W49: gpu-kpi report --week current"
    )

    written = build(
        url, Request(week="current", tz=UTC, formats=("html", "email", "json")), out, now=now
    )
    assert sorted(p.name for p in written) == [
        "2026-W49-so-far.eml",
        "2026-W49-so-far.html",
        "2026-W49-so-far.json",
        "index.html",
    ]
    data = json.loads((out / "2026-W49-so-far.json").read_text())
    assert data["headline"]["spend_usd"] == pytest.approx(2 * 3.85)
    # partial, and said so in the JSON and the CSV's first line
    assert data["partial_to"] == "2026-12-01T14:02:00+00:00"
    so_far = compute(url, Request(week="current", tz=UTC), now=now).kpis
    assert so_far.so_far is not None
    csv_text = bytes(render(so_far, Request(week="current", tz=UTC, formats=("csv",)))["csv"])
    assert csv_text.decode().splitlines()[1] == (
        "2026-W49,util,week,,partial_to,2026-12-01T14:02:00+00:00"
    )
    # the index lists no week yet, and links the week under way as such, never as a file of
    # someone else's
    index = (out / "index.html").read_text()
    assert 'week under way: <a href="2026-W49-so-far.html">2026-W49 so far</a>' in index
    assert "not gpu-kpi week reports" not in index and "No reports archived yet" in index
    page = (out / "2026-W49-so-far.html").read_text()
    assert "2026-W49 so far" in page and "so far, to Tue 14:02" in page
    eml = (out / "2026-W49-so-far.eml").read_text()
    assert "Subject: GPU efficiency 2026-W49 so far: $8 spend, 80.0% utilization" in eml
    assert not (out / "2026-W49.json").exists()

    # the CLI, on the clock's today: the empty last week says where the runs are (stderr), exit 0
    today = datetime.now(UTC)
    monday = today - timedelta(
        days=today.weekday(),
        hours=today.hour,
        minutes=today.minute,
        seconds=today.second,
        microseconds=today.microsecond,
    )
    url = f"sqlite:///{tmp_path}/today.db"
    with RunStore(url) as store:
        store.upsert_run(run_record("now", monday, 0.001, util=80.0))
    with caplog.at_level("WARNING", logger="gpu_kpi"):
        assert (
            main(["report", "--store", url, "--out", str(tmp_path / "cli"), "--format", "json"])
            == 0
        )
    said = [m for m in caplog.messages if "so far in" in m][-1]
    assert "1 run so far in " in said and said.endswith("gpu-kpi report --week current")
    assert main(["report", "--store", url, "--since", "current"]) == 2
    assert "--since takes a complete week" in capsys.readouterr().err


@pytest.mark.usefixtures("blank_charts")
def test_the_json_lists_the_runs_with_most_waste_and_the_csv_every_run(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A week of a million runs made a 685 MB JSON file. The JSON lists the runs with the most
    recoverable waste (here, cut to 2 of W48's 3), says how many it left out; the CSV keeps
    every run and the headline is the week's."""
    monkeypatch.setattr("reports.render.exports.MAX_JSON_RUNS", 2)
    out = tmp_path / "out"
    build(
        store,
        Request(week="2026-W48", tz=UTC, formats=("json", "csv")),
        out,
        now=W48 + timedelta(days=8),
    )
    d = json.loads((out / "2026-W48.json").read_text())
    assert (d["runs_count"], d["runs_left_out"], len(d["runs"])) == (3, 1, 2)
    waste = [r["waste_usd"] for r in d["runs"]]
    assert waste == sorted(waste, reverse=True)
    assert d["headline"]["runs"] == 3
    rows = list(csv.DictReader(io.StringIO((out / "2026-W48.csv").read_text())))
    assert len({r["key"] for r in rows if r["section"] == "run"}) == 3


def test_a_week_under_way_is_compared_with_the_week_before_at_the_same_point(
    tmp_path: Path,
) -> None:
    # W48: 14 h on an H100 at 50%, $53.90; W49 so far (Tuesday 14:02): 2 h at 80%, $7.70. The
    # whole of W48 against a day and a half of W49 said "spend ▼ 86%"; at the same point W48
    # had spent 53.90 x (38 h 2 min / 168 h)
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as store:
        store.upsert_run(run_record("last", datetime(2026, 11, 24, 9, tzinfo=UTC), 14, util=50.0))
        store.upsert_run(run_record("now", datetime(2026, 12, 1, 9, tzinfo=UTC), 2, util=80.0))
    now = datetime(2026, 12, 1, 14, 2, tzinfo=UTC)
    k = compute(url, Request(week="current", tz=UTC), now=now).kpis
    share = (38 + 2 / 60) / 168
    assert k.previous is not None
    assert k.previous.spend_usd == pytest.approx(14 * 3.85 * share)
    assert k.change_pct["spend_usd"] == pytest.approx(100 * (7.70 / (53.90 * share) - 1))
    assert k.previous.utilization_pct == pytest.approx(50.0)  # a rate: as it was
    page = bytes(render(k, Request(week="current", tz=UTC, formats=("html",)), images={})["html"])
    assert b"last week to this point: $" in page
    # a team's page of the week under way: so far too, compared the same way
    team = compute(url, Request(week="current", tz=UTC), now=now).team(
        Request(week="current", tz=UTC), ""
    )
    assert team is not None and team.so_far is not None
    assert team.previous is not None
    assert team.previous.spend_usd == pytest.approx(14 * 3.85 * share)


def test_the_frames_let_go_change_no_figure(store: str) -> None:
    """A report that keeps neither the runs nor the GPU-time rows (``gpu-kpi report``) has the
    figures of one that keeps them (the service's, for team reports): the same headline
    (4 runs' GPU-hours: busy 3, slow 1, sampled 1 in W48), runs and sections; the frames it
    returns are empty, and a team's KPIs cannot be worked out from them."""
    req = Request(week="2026-W48", tz=UTC)
    now = W48 + timedelta(days=10)
    kept = compute(store, req, now=now)
    let_go = compute(store, req, now=now, keep_frames=False)
    assert let_go.kpis.headline == kept.kpis.headline
    assert let_go.kpis.headline.gpu_hours == pytest.approx(5.0)
    assert let_go.kpis.runs.equals(kept.kpis.runs)
    assert let_go.kpis.parts.keys() == kept.kpis.parts.keys()
    assert len(kept.runs) == 4 and len(kept.gpu_time) > 0
    assert (len(let_go.runs), len(let_go.gpu_time)) == (0, 0)
    assert list(let_go.runs.columns) == list(kept.runs.columns)
    assert kept.team(req, "nlp") is not None
    with pytest.raises(ValueError, match="not kept"):
        let_go.team(req, "nlp")
