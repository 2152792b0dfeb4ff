"""A report reads the rows of its own week and of no earlier week whose KPIs a report kept and
nothing changed since: its trend is the same as when every week is read, and a write into a
kept week (a late import, a changed run, a rebuild) makes it read that week again. On SQLite and
PostgreSQL, with the weeks' figures computed by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fakes import StoreTemplates, run_record

import reports.build as build_module
from reports.build import compute
from reports.request import Request
from tracker.cost import Thresholds
from tracker.record import MinuteSample
from tracker.store import RunStore

W37 = datetime(2026, 9, 7, tzinfo=UTC)
W48 = W37 + timedelta(weeks=11)
NOW = W48 + timedelta(days=8)  # W48 complete, W49 under way
PRICE = 3.85
LABELS = [f"2026-W{n}" for n in range(37, 49)]


def week(n: int) -> datetime:
    """The start of 2026-W``n``."""
    return W37 + timedelta(weeks=n - 37)


def fill(url: str) -> None:
    """Week n (37..48) has one run of team ``nlp``, (n - 36) hours on one GPU at 50%, and W48
    a second of team ``cv``: 2 GPUs x 3 h; W46 also has a sampled run: 60 minutes at 40%."""
    with RunStore(url) as s:
        for n in range(37, 49):
            s.upsert_run(run_record(f"r{n}", week(n) + timedelta(days=1), n - 36, team="nlp"))
        s.upsert_run(run_record("cv", week(48) + timedelta(days=2), 3, gpus=2, team="cv"))
        s.upsert_run(run_record("s46", week(46) + timedelta(days=3), 1.0, team="nlp"))
        s.upsert_samples(
            [
                MinuteSample(
                    run_id="s46",
                    minute=week(46) + timedelta(days=3, minutes=i),
                    gpu="GPU-0",
                    util_pct=40.0,
                )
                for i in range(60)
            ]
        )


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many weeks each report read rows of."""
    seen: list[int] = []
    real = build_module.week_gpu_time

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(kw["weeks"])
        return real(*args, **kw)

    monkeypatch.setattr(build_module, "week_gpu_time", spy)
    return seen


def trend(url: str, **req: Any) -> dict[str, dict[str, Any]]:
    c = compute(url, Request(week="2026-W48", tz=UTC, **req), now=NOW)
    return {
        f"2026-W{row['week'].isocalendar()[1]}": {
            k: row[k] for k in ("gpu_hours", "spend_usd", "waste_usd", "utilization_pct", "runs")
        }
        for row in c.kpis.trend.to_dict("records")
    }


def expected_hours(extra: dict[int, float] | None = None) -> dict[str, float]:
    hours = {f"2026-W{n}": float(n - 36) for n in range(37, 49)}
    hours["2026-W48"] += 6.0  # cv: 2 GPUs x 3 h
    hours["2026-W46"] += 1.0  # s46: 60 sampled minutes
    for n, h in (extra or {}).items():
        hours[f"2026-W{n}"] += h
    return hours


def test_a_kept_week_is_read_again_only_when_written(
    store_url: str, reads: list[int], store_templates: StoreTemplates
) -> None:
    store_templates.made(store_url, "fill", fill)
    first = trend(store_url)
    assert {w: t["gpu_hours"] for w, t in first.items()} == pytest.approx(expected_hours())
    assert first["2026-W46"]["utilization_pct"] == pytest.approx((10 * 50 + 60 / 60 * 40) / 11)
    again = trend(store_url)
    assert reads == [12, 1]  # every week, then the reported one alone
    assert again == first

    # a late import into W45: 2 GPU-hours, and W45 to W48 are read again
    with RunStore(store_url) as s:
        s.put([run_record("late", week(45) + timedelta(days=4), 2, team="nlp")], [])
    late = trend(store_url)
    assert reads[-1] == 4
    assert {w: t["gpu_hours"] for w, t in late.items()} == pytest.approx(expected_hours({45: 2.0}))
    assert late["2026-W45"]["spend_usd"] == pytest.approx((9 + 2) * PRICE)

    # a run of W40 priced again (its record written): W40 on are read; its spend follows
    with RunStore(store_url) as s:
        s.upsert_run(run_record("r40", week(40) + timedelta(days=1), 4, price=10.0, team="nlp"))
    repriced = trend(store_url)
    assert reads[-1] == 9
    assert repriced["2026-W40"]["spend_usd"] == pytest.approx(4 * 10.0)
    assert trend(store_url) == repriced and reads[-1] == 1

    # other settings are other KPIs: every week read, the target in every week's waste
    override = trend(store_url, thresholds=Thresholds(target_util_pct=60.0))
    assert reads[-1] == 12
    assert override["2026-W39"]["waste_usd"] == pytest.approx(3 * PRICE * (1 - 50 / 60))
    assert repriced["2026-W39"]["waste_usd"] == pytest.approx(3 * PRICE * (1 - 50 / 85))
    assert trend(store_url) == repriced and reads[-1] == 1  # the first settings' still hold


def test_team_trends_and_a_running_run(
    store_url: str, reads: list[int], store_templates: StoreTemplates
) -> None:
    store_templates.made(store_url, "fill", fill)
    req = Request(week="2026-W48", tz=UTC)
    cold = compute(store_url, req, now=NOW).team(req, "nlp")
    warm = compute(store_url, req, now=NOW).team(req, "nlp")
    assert reads == [12, 1]
    assert cold is not None and warm is not None
    assert warm.trend.to_dict("records") == cold.trend.to_dict("records")
    assert warm.previous == cold.previous and warm.change_pct == cold.change_pct
    assert [round(h, 6) for h in warm.trend["gpu_hours"]] == [
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        11,
        11,
        12,
    ]  # nlp alone: W46 with s46's hour

    # a run still running since W44: its figures move with the clock, W44 on are read
    with RunStore(store_url) as s:
        running = run_record("open", week(44) + timedelta(days=1), 1, team="nlp")
        s.upsert_run(running.replace(status="running", ended_at=None, heartbeat_at=NOW))
    compute(store_url, req, now=NOW)
    compute(store_url, req, now=NOW)
    assert reads[-2:] == [5, 5]


def test_a_runs_first_samples_change_its_earlier_weeks(
    store_url: str, reads: list[int], store_templates: StoreTemplates
) -> None:
    """``long`` ran from W45 to W48 (2 GPUs, 4 x 168 h = 1,344 GPU-h in its summary, so 336 a
    week pro rata). Its first samples, one hour in W48, make it a sampled run: measured by its
    samples alone from then on, 0 GPU-h in W45 to W47, 1 in W48."""
    store_templates.made(store_url, "fill", fill)
    with RunStore(store_url) as s:
        s.upsert_run(run_record("long", week(45), 4 * 168, gpus=2, team="nlp"))
    before = trend(store_url)
    assert before["2026-W45"]["gpu_hours"] == pytest.approx(9 + 336)
    with RunStore(store_url) as s:
        s.upsert_samples(
            [
                MinuteSample(run_id="long", minute=week(48) + timedelta(minutes=m), gpu="GPU-0")
                for m in range(60)
            ]
        )
    after = trend(store_url)
    # W45 to W48, and W44: its idle rule reads 29 minutes into W45's first day
    assert reads[-1] == 5
    assert {w: t["gpu_hours"] for w, t in after.items()} == pytest.approx(expected_hours({48: 1.0}))


def test_what_is_kept_is_checked_and_a_rebuild_reads_all(
    store_url: str,
    reads: list[int],
    caplog: pytest.LogCaptureFixture,
    store_templates: StoreTemplates,
) -> None:
    store_templates.made(store_url, "fill", fill)
    first = trend(store_url)
    with RunStore(store_url) as s, s.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE gpu_kpi_week_cache SET headline = '{\"gpu_hours\": 1e999}' WHERE week = '2026-W40'"
            )
        )
    assert trend(store_url) == first  # a damaged row is no week kept
    assert reads[-1] == 9
    with RunStore(store_url) as s:
        s.rebuild_rollups()
    assert trend(store_url) == first
    assert reads[-1] == 12
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
