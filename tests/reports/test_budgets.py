"""Team budgets against a real store (SQLite and PostgreSQL): each team's spend in a week and a
month, priced as the report prices it, from the hourly rollups and the minute samples and pro
rata for summaries; the month the week ends in with its forecast and the month before it
whole; the lines in the report's JSON, CSV, HTML and email; ``gpu-kpi report`` reading
``[[budgets]]``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from fakes import isolate_user_dirs, minutes, run_record

from reports.budgets import current_lines
from reports.build import Computed, compute, render
from reports.cli import main
from reports.data.scans import SampleScans
from reports.kpi.budgets import Budget
from reports.request import Request
from tracker.store import RunStore

W49 = datetime(2026, 11, 30, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)
AFTER = datetime(2026, 12, 8, 8, tzinfo=UTC)
NLP = Budget(team="nlp", usd_per_week=500.0, usd_per_month=1000.0)
VISION = Budget(team="vision", usd_per_month=10.0)


def fill(url: str) -> None:
    """W49 (30 Nov - 6 Dec, UTC). nlp: "long", a summary of 2 GPUs for 48 h from 30 Nov 10:00
    (96 GPU-h: 14/48 of it in November = 28 GPU-h, 68 in December); "smp", 120 minute samples
    of one GPU on 3 Dec (2 GPU-h). vision: "cv", 5 GPU-h on 3 Dec. $3.85 per GPU-hour; a run
    at 250% utilization, left out of every figure."""
    d3 = datetime(2026, 12, 3, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("long", W49 + timedelta(hours=10), 48, gpus=2, team="nlp"))
        s.upsert_run(run_record("smp", d3, 2, team="nlp"))
        s.upsert_samples(minutes("smp", d3, 120))
        s.upsert_run(run_record("cv", d3, 5, team="vision"))
        s.upsert_run(run_record("bad", d3, 5, team="nlp", util=250.0))


def test_the_weeks_lines_by_hand(store_url: str) -> None:
    fill(store_url)
    req = Request(week="2026-W49", tz=UTC, budgets=(VISION, NLP))
    k = compute(store_url, req, now=AFTER).kpis
    got = {(b.team, b.label): b for b in k.parts["budgets"].lines}
    assert list(got) == [
        ("nlp", "2026-W49"),
        ("nlp", "2026-11"),
        ("nlp", "2026-12"),
        ("vision", "2026-11"),
        ("vision", "2026-12"),
    ]
    week = got[("nlp", "2026-W49")]  # (96 + 2) GPU-h x $3.85, the week's report figure
    assert week.spend_usd == pytest.approx(98 * 3.85)
    assert week.complete and week.level is None and week.used_pct == pytest.approx(75.46)
    assert week.runs == (("long", pytest.approx(369.6)), ("smp", pytest.approx(7.7)))
    nov = got[("nlp", "2026-11")]  # the month before, whole: 28 GPU-h
    assert nov.complete and nov.spend_usd == pytest.approx(28 * 3.85)
    dec = got[("nlp", "2026-12")]  # 1-6 Dec: 68 + 2 GPU-h = $269.50; x 31 / 6 = $1,392.42
    assert not dec.complete and dec.until == datetime(2026, 12, 7, tzinfo=UTC)
    assert dec.spend_usd == pytest.approx(70 * 3.85)
    assert dec.forecast_usd == pytest.approx(70 * 3.85 * 31 / 6)
    assert dec.runs == (("long", pytest.approx(261.8)), ("smp", pytest.approx(7.7)))
    vision = got[("vision", "2026-12")]  # 5 GPU-h = $19.25 of $10: over
    assert vision.spend_usd == pytest.approx(19.25) and vision.level == 100
    assert got[("vision", "2026-11")].spend_usd == 0.0


@pytest.fixture(scope="module")
def w49(tmp_path_factory: pytest.TempPathFactory) -> tuple[Request, Computed]:
    """W49 of :func:`fill` with nlp's and vision's budgets, in every format, computed once for
    the tests that only read it."""
    url = f"sqlite:///{tmp_path_factory.mktemp('w49')}/runs.db"
    req = Request(
        week="2026-W49", tz=UTC, formats=("json", "csv", "html", "email"), budgets=(NLP, VISION)
    )
    with pytest.MonkeyPatch.context() as mp:
        isolate_user_dirs(mp, tmp_path_factory.mktemp("xdg"))
        fill(url)
        return req, compute(url, req, now=AFTER)


def test_a_team_report_has_its_own_lines_only(w49: tuple[Request, Computed]) -> None:
    req, c = w49
    team = c.team(req, "vision")
    assert team is not None
    assert [(b.team, b.label) for b in team.parts["budgets"].lines] == [
        ("vision", "2026-11"),
        ("vision", "2026-12"),
    ]


def test_a_zone_whose_month_starts_off_the_hour(tmp_path: Path) -> None:
    """Asia/Kolkata (+05:30): December starts on 30 Nov 18:30 UTC, off the rollups' hours. A
    run sampled 30 Nov 18:00-20:00 UTC: 30 minutes in November there, 90 in December."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 30, 18, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("k", start, 2, team="nlp"))
        s.upsert_samples(minutes("k", start, 120))
    kolkata = ZoneInfo("Asia/Kolkata")
    req = Request(week="2026-W49", tz=kolkata, budgets=(Budget(team="nlp", usd_per_month=100),))
    lines = {b.label: b for b in compute(url, req, now=AFTER).kpis.parts["budgets"].lines}
    assert lines["2026-11"].spend_usd == pytest.approx(0.5 * 3.85)
    assert lines["2026-12"].spend_usd == pytest.approx(1.5 * 3.85)
    assert lines["2026-12"].start == datetime(2026, 12, 1, tzinfo=kolkata)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[datetime, datetime]]:
    """The spans the minute samples are summed over (``SampleScans.sample_totals``), in order."""
    spans: list[tuple[datetime, datetime]] = []
    real = SampleScans.sample_totals

    def spy(self: SampleScans, **kw: object) -> object:
        spans.append((kw["since"], kw["until"]))  # type: ignore[arg-type]
        return real(self, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(SampleScans, "sample_totals", spy)
    return spans


def test_whole_hours_come_from_the_rollups(
    tmp_path: Path, asked: list[tuple[datetime, datetime]]
) -> None:
    """Spend to now: the hours up to 10:00 from the rollups, the minutes since (10:00-10:25)
    from the samples; the two together equal the minutes' own sum."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = DEC + timedelta(hours=8)
    with RunStore(url) as s:
        s.upsert_run(run_record("r", start, 3, team="nlp").replace(ended_at=None, status="running"))
        s.upsert_samples(minutes("r", start, 150))  # 08:00-10:30
    now = DEC + timedelta(hours=10, minutes=25)
    with RunStore(url) as s:
        (line,) = current_lines(
            s, Request(week=None, tz=UTC), [Budget(team="nlp", usd_per_month=100.0)], now=now
        )
    assert asked == [(DEC + timedelta(hours=10), now)]
    assert line.spend_usd == pytest.approx(145 / 60 * 3.85)  # 08:00-10:25: 145 minutes
    assert line.label == "2026-12" and line.until == now and line.forecast_usd is None


def test_in_every_output(w49: tuple[Request, Computed]) -> None:
    req, c = w49
    files = render(c.kpis, req, images={})
    doc = json.loads(files["json"])
    dec = next(b for b in doc["budgets"] if (b["team"], b["label"]) == ("nlp", "2026-12"))
    assert dec == {
        "team": "nlp",
        "period": "month",
        "label": "2026-12",
        "start": "2026-12-01T00:00:00+00:00",
        "end": "2027-01-01T00:00:00+00:00",
        "until": "2026-12-07T00:00:00+00:00",
        "complete": False,
        "spend_usd": 269.5,
        "budget_usd": 1000.0,
        "used_pct": 26.95,
        "forecast_usd": pytest.approx(1392.416667),
        "forecast_pct": pytest.approx(139.241667),
        "level": None,
        "runs": [{"name": "long", "spend_usd": 261.8}, {"name": "smp", "spend_usd": 7.7}],
    }
    csv = bytes(files["csv"]).decode()
    assert "2026-W49,util,budget,vision,2026-12:level,100\r\n" in csv
    assert "2026-W49,util,budget,nlp,2026-W49:spend_usd,377.3\r\n" in csv
    html = files["html"].decode()
    assert '<h2 id="h-budgets">Budgets</h2>' in html
    assert (
        '<td class="name">vision</td><td class="nowrap">December 2026 to 6 Dec</td>'
        '<td class="num">$19.25</td><td class="num">$10.00</td>'
    ) in html
    assert '<td class="bad">over budget</td>' in html
    assert '<td class="warn">on course to exceed</td>' in html  # nlp's December: 139%
    text = (
        next(
            p
            for p in __import__("email").message_from_bytes(files["eml"]).walk()
            if p.get_content_type() == "text/plain"
        )
        .get_payload(decode=True)
        .decode()
    )
    assert (
        "- nlp, December 2026 to 6 Dec: $269.50 of $1,000.00 (27%), forecast $1,392.42 "
        "(139%) - on course to exceed"
    ) in text


def test_no_budgets_no_section(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    fill(url)
    req = Request(week="2026-W49", tz=UTC, formats=("json", "html"))
    files = render(compute(url, req, now=AFTER).kpis, req, images={})
    assert json.loads(files["json"])["budgets"] == []
    assert b"h-budgets" not in files["html"]


def test_the_report_command_reads_the_budgets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """W48 (23-29 Nov) ends in November: the month to 30 Nov 00:00 (29 of 30 days)."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("a", datetime(2026, 11, 24, tzinfo=UTC), 10, team="nlp"))
        s.upsert_run(run_record("b", datetime(2026, 11, 3, tzinfo=UTC), 20, team="nlp"))
    cfg = tmp_path / "gpu-kpi.toml"
    cfg.write_text('[[budgets]]\nteam = "nlp"\nusd_per_week = 50\nusd_per_month = 100\n')
    out = tmp_path / "out"
    assert (
        main(
            [
                "report",
                "--config",
                str(cfg),
                "--store",
                url,
                "--week",
                "2026-W48",
                "--out",
                str(out),
                "--format",
                "json",
            ]
        )
        == 0
    )
    lines = json.loads((out / "2026-W48.json").read_text())["budgets"]
    assert [(b["label"], b["spend_usd"], b["level"]) for b in lines] == [
        ("2026-W48", 38.5, None),
        ("2026-11", 115.5, 100),
    ]
    assert lines[1]["forecast_usd"] == pytest.approx(115.5 * 30 / 29)
    cfg.write_text('[[budgets]]\nteam = "nlp"\nusd_per_moth = 100\n')
    capsys.readouterr()
    assert (
        main(
            [
                "report",
                "--config",
                str(cfg),
                "--store",
                url,
                "--week",
                "2026-W48",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        "gpu-kpi: error: budgets[0].usd_per_moth: unknown setting (did you mean "
        "'usd_per_month'?); budgets[0]: needs usd_per_week or usd_per_month (or both)\n"
    )


def test_the_budgets_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run of 2 GPUs for 6 minutes at the start of this week or month (whichever is later):
    0.2 GPU-h x $3.85 = $0.77 in both periods so far."""
    from reports.weeks import month_start_of, week_start_of

    now = datetime.now(UTC)
    start = max(week_start_of(now), month_start_of(now))
    if now - start < timedelta(minutes=7):
        pytest.skip("a period began minutes ago")
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("r", start, 0.1, gpus=2, team="a\x1b[2J"))
    cfg = tmp_path / "gpu-kpi.toml"
    cfg.write_text('[[budgets]]\nteam = "a\\u001b[2J"\nusd_per_week = 1\nusd_per_month = 10\n')
    assert main(["budgets", "--config", str(cfg), "--store", url, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(b["period"], b["spend_usd"], b["used_pct"], b["level"]) for b in got] == [
        ("week", 0.77, 77.0, None),
        ("month", 0.77, 7.7, None),
    ]
    assert main(["budgets", "--config", str(cfg), "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["team", "period", "spend", "budget", "used", "forecast", "status"]
    assert out[1].startswith("a\\x1b[2J  week ")  # the terminal's escape shown, not run
    assert out[1].split()[3:6] == ["$0.77", "$1.00", "77%"]
    cfg.write_text("")
    assert main(["budgets", "--config", str(cfg), "--store", url]) == 2
    assert capsys.readouterr().err == (
        "gpu-kpi: error: no budgets: add [[budgets]] (team, "
        "usd_per_week or usd_per_month) to the config file\n"
    )


def test_a_run_with_samples_is_measured_by_them_only(tmp_path: Path) -> None:
    """A run of 96 GPU-h from 28 Nov whose sampler stopped after an hour on 28 Nov: the
    report counts its samples (1 GPU-h, in W48), never its summary; nor do the budgets, in
    November or in December."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 28, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("gap", start, 96, team="nlp"))
        s.upsert_samples(minutes("gap", start, 60))
    req = Request(week="2026-W49", tz=UTC, budgets=(NLP,))
    k = compute(url, req, now=AFTER).kpis
    assert {b.label: b.spend_usd for b in k.parts["budgets"].lines} == {
        "2026-W49": 0.0,
        "2026-11": pytest.approx(3.85),
        "2026-12": 0.0,
    }
    with RunStore(url) as s:
        now = datetime(2026, 12, 2, 12, tzinfo=UTC)
        got = current_lines(s, req, [NLP], now=now, previous=True)
    assert {(b.period, b.label): b.spend_usd for b in got} == {
        ("week", "2026-W48"): pytest.approx(3.85),
        ("month", "2026-11"): pytest.approx(3.85),
        ("week", "2026-W49"): 0.0,
        ("month", "2026-12"): 0.0,
    }


def test_off_the_hour_the_edges_come_from_the_samples(
    tmp_path: Path, asked: list[tuple[datetime, datetime]]
) -> None:
    """Kolkata's December so far at 10 Dec 10:25 UTC: 30 Nov 18:30-19:00 and 10:00-10:25 from
    the samples, the whole hours between from the rollups."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 30, 18, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("k", start, 2, team="nlp"))
        s.upsert_samples(minutes("k", start, 120))
    now = datetime(2026, 12, 10, 10, 25, tzinfo=UTC)
    req = Request(week=None, tz=ZoneInfo("Asia/Kolkata"))
    with RunStore(url) as s:
        (line,) = current_lines(s, req, [Budget(team="nlp", usd_per_month=100.0)], now=now)
    assert asked == [
        (datetime(2026, 11, 30, 18, 30, tzinfo=UTC), datetime(2026, 11, 30, 19, tzinfo=UTC)),
        (datetime(2026, 12, 10, 10, tzinfo=UTC), now),
    ]
    assert line.spend_usd == pytest.approx(1.5 * 3.85)  # 18:30-20:00


def test_the_current_week_counts_to_now(tmp_path: Path) -> None:
    """W49's report on 30 Nov at noon: November to now, not a December yet to come."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("r", datetime(2026, 11, 30, 2, tzinfo=UTC), 4, team="nlp"))
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    lines = (
        compute(url, Request(week="2026-W49", tz=UTC, budgets=(NLP,)), now=now)
        .kpis.parts["budgets"]
        .lines
    )
    assert [(b.label, b.until, b.complete, b.spend_usd) for b in lines] == [
        ("2026-W49", now, False, pytest.approx(15.4)),
        ("2026-11", now, False, pytest.approx(15.4)),
    ]
