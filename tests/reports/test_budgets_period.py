"""``gpu-kpi budgets --week`` and ``--month``: the budget lines of a chosen week or calendar
month, priced by :func:`reports.budgets.spend` as the report prices them, to the period's end
(to now for one under way); the week's and the month's lines the same as the weekly report's;
bad input as one line; the demo's closing command showing the demo's week."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from clirun import gpu_kpi
from fakes import StoreTemplates, minutes, run_record

from reports.budgets import period_lines
from reports.kpi.budgets import Budget
from reports.request import Request
from reports.weeks import label_of, week_start_of
from tracker.store import RunStore

W48 = datetime(2024, 11, 25, tzinfo=UTC)  # 2024-W48: Mon 25 Nov - Mon 2 Dec 2024, UTC
NOV = datetime(2024, 11, 1, tzinfo=UTC)
H100, L4 = 3.85, 1.25  # the run's own price; [prices] L4 for runs recorded with none
CONFIG = (
    "[prices]\nL4 = 1.25\n\n"
    '[[budgets]]\nteam = "vision"\nusd_per_week = 40\nusd_per_month = 100\n\n'
    '[[budgets]]\nteam = "nlp"\nusd_per_month = 200\n'
)


def fill(url: str) -> None:
    """vision: "cv", 2 H100 x 3 h on Tue 26 Nov (6 GPU-h); "edge", 1 H100 x 8 h from Sun 1 Dec
    20:00 (a summary: 4 GPU-h in W48, all 8 in December); "l4", 4 L4 x 2 h on Wed 27 Nov with
    no price of its own (8 GPU-h at [prices] L4); "bad", 250% utilization, left out. nlp:
    "smp", 120 minute samples of one GPU on Thu 28 Nov (2 GPU-h); "early", 4 H100 x 5 h on
    5 Nov (W45: 20 GPU-h); "oct", 1 H100 x 3 h from 31 Oct 22:00 (1 GPU-h in November)."""
    d26, d27, d28 = (W48 + timedelta(days=n, hours=10) for n in (1, 2, 3))
    with RunStore(url) as s:
        s.upsert_run(run_record("cv", d26, 3, gpus=2, team="vision"))
        s.upsert_run(run_record("edge", datetime(2024, 12, 1, 20, tzinfo=UTC), 8, team="vision"))
        s.upsert_run(run_record("l4", d27, 2, gpus=4, model="L4", price=None, team="vision"))
        s.upsert_run(run_record("bad", d27, 5, team="vision", util=250.0))
        s.upsert_run(run_record("smp", d28, 2, team="nlp"))
        s.upsert_samples(minutes("smp", d28, 120))
        s.upsert_run(run_record("early", datetime(2024, 11, 5, tzinfo=UTC), 5, gpus=4, team="nlp"))
        s.upsert_run(run_record("oct", datetime(2024, 10, 31, 22, tzinfo=UTC), 3, team="nlp"))


@pytest.fixture
def store(tmp_path: Path, store_templates: StoreTemplates) -> list[str]:
    """The filled store (a copy of the module's) and the config: ``--store URL --config
    FILE``."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store_templates.made(url, "fill", fill)
    cfg = tmp_path / "gpu-kpi.toml"
    cfg.write_text(CONFIG)
    return ["--store", url, "--config", str(cfg)]


def budgets(*args: str) -> list[dict[str, object]]:
    p = gpu_kpi("budgets", *args, "--json")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines: list[dict[str, object]] = json.loads(p.stdout)
    return lines


def test_a_past_week_by_hand(store: list[str]) -> None:
    """vision's W48: cv 6 GPU-h x $3.85 + edge's 4 GPU-h of W48 x $3.85 + l4 8 GPU-h x $1.25
    = $23.10 + $15.40 + $10.00 = $48.50 of $40 (121.25%); nlp has no weekly budget."""
    (line,) = budgets(*store, "--week", "2024-W48")
    assert (line["team"], line["period"], line["label"]) == ("vision", "week", "2024-W48")
    assert line["spend_usd"] == pytest.approx(6 * H100 + 4 * H100 + 8 * L4) == 48.50
    assert line["used_pct"] == pytest.approx(48.50 / 40 * 100) == 121.25
    assert (line["complete"], line["level"]) == (True, 100)
    assert (line["start"], line["end"], line["until"]) == (
        "2024-11-25T00:00:00+00:00",
        "2024-12-02T00:00:00+00:00",
        "2024-12-02T00:00:00+00:00",
    )
    assert line["runs"] == [
        {"name": "cv", "spend_usd": pytest.approx(6 * H100)},
        {"name": "edge", "spend_usd": pytest.approx(4 * H100)},
        {"name": "l4", "spend_usd": pytest.approx(8 * L4)},
    ]
    p = gpu_kpi("budgets", *store, "--week", "2024-W48")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[1].split() == [
        "vision",
        "week",
        "2024-W48",
        "$48.50",
        "$40.00",
        "121%",
        "—",
        "over",
        "budget",
    ]
    # the week before holds none of these runs: nlp's "early" is W45, which has no vision run
    (before,) = budgets(*store, "--week", "2024-W47")
    assert (before["label"], before["spend_usd"]) == ("2024-W47", 0.0)


def test_a_past_month_by_hand(store: list[str]) -> None:
    """November 2024. nlp: early 20 GPU-h x $3.85 + smp 2 GPU-h x $3.85 + oct's 1 GPU-h of
    November x $3.85 = $77.00 + $7.70 + $3.85 = $88.55 of $200. vision: cv $23.10 + l4 $10.00
    = $33.10 of $100 (edge runs in December: 8 GPU-h x $3.85 = $30.80 there)."""
    got = {b["team"]: b for b in budgets(*store, "--month", "2024-11")}
    assert list(got) == ["nlp", "vision"]
    nlp, vision = got["nlp"], got["vision"]
    assert nlp["spend_usd"] == pytest.approx(20 * H100 + 2 * H100 + 1 * H100) == 88.55
    assert nlp["runs"][0] == {"name": "early", "spend_usd": pytest.approx(77.0)}
    assert vision["spend_usd"] == pytest.approx(6 * H100 + 8 * L4) == 33.10
    assert {b["label"] for b in got.values()} == {"2024-11"}
    assert {(b["start"], b["end"], b["complete"]) for b in got.values()} == {
        ("2024-11-01T00:00:00+00:00", "2024-12-01T00:00:00+00:00", True)
    }
    (dec,) = [b for b in budgets(*store, "--month", "2024-12") if b["team"] == "vision"]
    assert dec["spend_usd"] == pytest.approx(8 * H100) == 30.80


def test_the_week_and_the_month_are_the_reports_lines(store: list[str], tmp_path: Path) -> None:
    """The report of 2024-W48 has vision's week and, as the week ends on 1 Dec, November whole:
    the same lines, every field, as ``--week 2024-W48`` and ``--month 2024-11``; and vision's
    week is the week's by-team spend."""
    out = tmp_path / "out"
    p = gpu_kpi("report", *store, "--week", "2024-W48", "--format", "json", "--out", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "2024-W48.json").read_text())
    report = {(b["team"], b["label"]): b for b in doc["budgets"]}
    (week,) = budgets(*store, "--week", "2024-W48")
    assert week == report[("vision", "2024-W48")]
    team_spend = next(t["spend_usd"] for t in doc["by_team"] if t["team"] == "vision")
    assert week["spend_usd"] == pytest.approx(team_spend) == 48.50
    month = budgets(*store, "--month", "2024-11")
    assert {line["team"] for line in month} == {t for t, label in report if label == "2024-11"}
    for line in month:
        assert line == report[(line["team"], "2024-11")]


def test_a_period_under_way_counts_to_now(tmp_path: Path) -> None:
    """W48 at Wed 27 Nov 2024 12:00: cv (26 Nov, $23.10) and l4 (27 Nov 10:00-12:00, $10.00)
    are in; smp (28 Nov) and edge (1 Dec) have not run yet: $33.10 so far, of $40; to now, and
    not complete."""
    url = f"sqlite:///{tmp_path}/runs.db"
    fill(url)
    now = datetime(2024, 11, 27, 12, tzinfo=UTC)
    req = Request(week=None, tz=UTC, prices={"L4": L4})
    team_budgets = [Budget(team="vision", usd_per_week=40), Budget(team="nlp", usd_per_month=200)]
    with RunStore(url) as s:
        (line,) = period_lines(s, req, team_budgets, "week", W48, now=now)
        (nlp,) = period_lines(s, req, team_budgets, "month", NOV, now=now)
    assert (line.team, line.label, line.until) == ("vision", "2024-W48", now)
    assert not line.complete
    assert line.spend_usd == pytest.approx(6 * H100 + 8 * L4)
    assert nlp.spend_usd == pytest.approx(20 * H100 + 1 * H100)  # early and oct's November hour
    assert nlp.forecast_usd == pytest.approx(21 * H100 * 30 / 26.5)  # 26.5 of November's 30 days


def test_current_is_the_week_under_way(store: list[str]) -> None:
    before = label_of(week_start_of(datetime.now(UTC)))
    (line,) = budgets(*store, "--week", "current")
    if label_of(week_start_of(datetime.now(UTC))) != before:
        pytest.skip("a week began during the test")
    assert (line["label"], line["complete"], line["spend_usd"]) == (before, False, 0.0)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ("--week", "2024-W48", "--month", "2024-11"),
            "--week is one ISO week, --month one calendar month: not both",
        ),
        (("--week", "last week"), "bad week 'last week': use YYYY-Www, e.g. 2026-W48"),
        (("--week", "2024-W54"), "week '2024-W54' does not exist: 2024 has 52 ISO weeks"),
        (("--week", "9998-W01"), "week 9998-W01 has not started yet"),
        (("--month", "2024-13"), "--month '2024-13': expected YYYY-MM, e.g. 2026-11"),
        (("--month", "Nov 2024"), "--month 'Nov 2024': expected YYYY-MM, e.g. 2026-11"),
        (("--month", "9998-12"), "month 9998-12 has not started yet"),
    ],
)
def test_bad_input_is_one_line(store: list[str], args: tuple[str, ...], error: str) -> None:
    p = gpu_kpi("budgets", *store, *args)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"gpu-kpi: error: {error}\n")


def test_a_week_without_weekly_budgets(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    RunStore(url).close()
    cfg = tmp_path / "gpu-kpi.toml"
    cfg.write_text('[[budgets]]\nteam = "nlp"\nusd_per_month = 200\n')
    p = gpu_kpi("budgets", "--store", url, "--config", str(cfg), "--week", "2024-W48")
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (
        "gpu-kpi: error: --week: no [[budgets]] entry has usd_per_week "
        "(--month shows usd_per_month)\n"
    )


@pytest.mark.slow
def test_the_demos_budgets_command_shows_its_week(tmp_path: Path) -> None:
    """The demo's closing ``budgets`` command names the demo's week, and shows vision over its
    $150 week as the demo's report page does (the same line, every field)."""
    demo = gpu_kpi("demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    report_line = next(x for x in demo.stdout.splitlines() if x.startswith("the weekly report"))
    html = Path(report_line.rsplit(": ", 1)[1])
    command = next(x for x in demo.stdout.splitlines() if " budgets --config " in x)
    args = shlex.split(command.split(" budgets ", 1)[1])
    assert args[-2:] == ["--week", html.stem]
    p = gpu_kpi("budgets", *args, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (vision,) = json.loads(p.stdout)
    page = json.loads(html.with_suffix(".json").read_text())
    assert vision == next(b for b in page["budgets"] if b["period"] == "week")
    assert (vision["team"], vision["level"]) == ("vision", 100)
    assert vision["used_pct"] == pytest.approx(vision["spend_usd"] / 150 * 100)
    assert vision["used_pct"] > 100
