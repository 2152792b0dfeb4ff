"""Issue 11, weeks with a daylight-saving change: each bound is a local calendar Monday, so the
autumn week is 169 h and the spring week 167 h, and the 12-week window starts on the oldest
week's own Monday. Real SQLite stores, hand-placed runs, Europe/Berlin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from fakes import run_record

from reports.build import compute
from reports.request import Request
from reports.weeks import label_of, week_bounds
from tracker.record import MinuteSample
from tracker.store import RunStore

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 12, 1, tzinfo=UTC)
# 2026-W43: Monday 19 Oct 00:00 CEST (18 Oct 22:00 UTC) to Monday 26 Oct 00:00 CET (25 Oct 23:00
# UTC): 169 h; clocks went back on Sunday 25 Oct at 03:00 CEST
W43_END_UTC = datetime(2026, 10, 25, 23, tzinfo=UTC)


def test_the_autumn_week_has_169_hours() -> None:
    start, end = week_bounds(2026, 43, BERLIN)
    assert end.astimezone(UTC) - start.astimezone(UTC) == timedelta(hours=169)
    assert end.astimezone(UTC) == W43_END_UTC


def test_the_last_hour_of_the_autumn_week_is_read(tmp_path: object) -> None:
    """A summary-only run at Sunday 23:15 CET (22:15 UTC) for 30 min: 0.5 GPU-h in W43 (not W44).
    A sampled run 21:30-22:30 UTC at 40%: 60 minutes, all in W43 = 1.0 GPU-h. W43: 1.5 GPU-h,
    spend 1.5 x $3.85 = $5.775; utilization over GPU-time with a value = 40%."""
    url = f"sqlite:///{tmp_path}/runs.db"
    late = datetime(2026, 10, 25, 22, 15, tzinfo=UTC)
    sampled = datetime(2026, 10, 25, 21, 30, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("late", late, 0.5, util=None))
        s.upsert_run(run_record("sampled", sampled, 1.0, util=40.0))
        s.upsert_samples(
            [
                MinuteSample(
                    run_id="sampled",
                    minute=sampled + timedelta(minutes=m),
                    gpu="GPU-0",
                    covered_s=60.0,
                    util_pct=40.0,
                )
                for m in range(60)
            ]
        )
    w43 = compute(url, Request(week="2026-W43", tz=BERLIN), now=NOW).kpis
    assert w43.headline.gpu_hours == pytest.approx(1.5)
    assert w43.headline.spend_usd == pytest.approx(5.775)
    assert w43.headline.utilization_pct == pytest.approx(40.0)
    w44 = compute(url, Request(week="2026-W44", tz=BERLIN), now=NOW).kpis
    assert w44.headline.gpu_hours == 0.0
    assert w44.previous is not None and w44.previous.gpu_hours == pytest.approx(1.5)


def test_the_oldest_trend_week_keeps_its_first_hour(tmp_path: object) -> None:
    """W45's 12-week window starts with W34: Monday 17 Aug 00:00 CEST = 16 Aug 22:00 UTC. W45
    starts on 2 Nov 00:00 CET = 1 Nov 23:00 UTC, and 77 x 24 h before that is 16 Aug 23:00 UTC:
    an hour late. A run at 00:10 CEST (22:10 UTC) for 30 min: 0.5 GPU-h in W34's trend row."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("early", datetime(2026, 8, 16, 22, 10, tzinfo=UTC), 0.5))
        s.upsert_run(run_record("now", datetime(2026, 11, 3, 10, tzinfo=UTC), 1.0))
    k = compute(url, Request(week="2026-W45", tz=BERLIN), now=NOW).kpis
    trend = {label_of(w): h for w, h in zip(k.trend["week"], k.trend["gpu_hours"], strict=True)}
    assert next(iter(trend)) == "2026-W34" and len(trend) == 12
    assert trend["2026-W34"] == pytest.approx(0.5)
    assert trend["2026-W45"] == pytest.approx(1.0)


def test_idle_stretches_across_the_week_edge_count_in_their_own_week(tmp_path: object) -> None:
    """A GPU at 1% from Sunday 23:40 to Monday 00:20 UTC (W47 into W48): every minute lies in a
    30-minute stretch under 5%, so all 40 are idle. W47 holds 20 of them: 20/60 h x $3.85 =
    $1.2833 idle, in its own report and as the next report's previous week; W48 the other 20."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 22, 23, 40, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("edge", start, 40 / 60, util=1.0))
        s.upsert_samples(
            [
                MinuteSample(
                    run_id="edge",
                    minute=start + timedelta(minutes=m),
                    gpu="GPU-0",
                    covered_s=60.0,
                    util_pct=1.0,
                )
                for m in range(40)
            ]
        )
    idle_20 = 20 / 60 * 3.85
    w47 = compute(url, Request(week="2026-W47", tz=UTC), now=NOW).kpis
    assert w47.headline.gpu_hours == pytest.approx(20 / 60)
    assert w47.headline.idle_usd == pytest.approx(idle_20)
    w48 = compute(url, Request(week="2026-W48", tz=UTC), now=NOW).kpis
    assert w48.headline.idle_usd == pytest.approx(idle_20)
    assert w48.previous is not None and w48.previous.idle_usd == pytest.approx(
        w47.headline.idle_usd
    )


def test_a_short_idle_blip_at_the_edge_is_not_idle(tmp_path: object) -> None:
    """The same GPU busy (90%) after 23:55: the low minutes 23:40-23:54 are only 15, and every
    30-minute window holding them averages over 5% -> no idle anywhere."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 22, 23, 40, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("blip", start, 40 / 60, util=40.0))
        s.upsert_samples(
            [
                MinuteSample(
                    run_id="blip",
                    minute=start + timedelta(minutes=m),
                    gpu="GPU-0",
                    covered_s=60.0,
                    util_pct=1.0 if m < 15 else 90.0,
                )
                for m in range(40)
            ]
        )
    for week in ("2026-W47", "2026-W48"):
        assert compute(url, Request(week=week, tz=UTC), now=NOW).kpis.headline.idle_usd == 0.0


NEW_YORK = ZoneInfo("America/New_York")


def test_new_york_weeks_are_169_and_167_hours() -> None:
    """Clocks go back on Sunday 1 Nov 2026 (the last day of 2026-W44) and forward on Sunday
    8 Mar 2026 (the last day of 2026-W10)."""
    start, end = week_bounds(2026, 44, NEW_YORK)
    assert start.astimezone(UTC) == datetime(2026, 10, 26, 4, tzinfo=UTC)  # 00:00 EDT
    assert end.astimezone(UTC) == datetime(2026, 11, 2, 5, tzinfo=UTC)  # 00:00 EST
    start, end = week_bounds(2026, 10, NEW_YORK)
    assert end.astimezone(UTC) - start.astimezone(UTC) == timedelta(hours=167)


def test_new_yorks_last_autumn_hour_and_an_owned_fleets_169_hours(tmp_path: object) -> None:
    """A run on Sunday 1 Nov 23:30 EST (2 Nov 04:30 UTC) for 20 min is in W44: start + 168 h
    would end W44 at 04:00 UTC and lose it. An owned H100 fleet of 2 pays for every one of the
    week's 169 hours: 2 x 169 x ($30,000 / (4 x 8766 h) + 0.7 kW x $0.12 x 1.3) = $326.095;
    the run's 1/3 GPU-h is priced at that amortized rate, $0.3216, not the $3.85 it ran with."""
    from tracker.owned import OwnedGpu

    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("late", datetime(2026, 11, 2, 4, 30, tzinfo=UTC), 1 / 3))
    owned = {
        "H100": OwnedGpu(
            model="H100",
            purchase_usd=30000,
            life_years=4,
            power_w=700,
            usd_per_kwh=0.12,
            pue=1.3,
            gpus=2,
        )
    }
    rate = 30000 / (4 * 8766) + 0.7 * 0.12 * 1.3
    k = compute(url, Request(week="2026-W44", tz=NEW_YORK, owned=owned), now=NOW).kpis
    assert label_of(k.week) == "2026-W44"
    assert k.headline.gpu_hours == pytest.approx(1 / 3)
    assert k.headline.spend_usd == pytest.approx(rate / 3)
    (line,) = k.rent_vs_own
    assert line.hours_in_period == 169.0
    assert line.owned_usd == pytest.approx(2 * 169 * rate) == pytest.approx(326.095, abs=0.001)
    assert line.rented_usd == pytest.approx(3.85 / 3)
    w45 = compute(url, Request(week="2026-W45", tz=NEW_YORK, owned=owned), now=NOW).kpis
    assert w45.headline.gpu_hours == 0.0 and w45.rent_vs_own[0].hours_in_period == 168.0
