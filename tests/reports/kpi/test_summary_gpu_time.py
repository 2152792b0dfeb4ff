"""GPU-time from run summaries (:func:`reports.kpi.gputime.summary_gpu_time`, in columns)
against the rule said run by run: each run's GPU-hours shared among the weeks (or spans) it
overlaps by the time it spent in each."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pandas as pd
import pytest
from fakes import run_record

from reports.kpi import runs_frame
from reports.kpi.gputime import summary_gpu_time
from reports.weeks import week_spans

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)


def by_hand(runs: list, spans: list | None, tz) -> dict[tuple[str, datetime], tuple]:
    out = {}
    for r in runs:
        end = r.ended_at or r.heartbeat_at or NOW
        if not r.gpu_hours or end <= r.started_at:
            continue
        weeks = spans or week_spans(r.started_at, end, tz)
        idle = (
            min(r.idle_usd / r.price_per_gpu_hour, r.gpu_hours)
            if r.idle_usd and r.price_per_gpu_hour
            else 0.0
        )
        for a, b in weeks:
            part = (min(end, b) - max(r.started_at, a)).total_seconds()
            if part <= 0:
                continue
            share = part / (end - r.started_at).total_seconds()
            h = r.gpu_hours * share
            known = 0.0 if r.util_pct is None else h
            used = known * (r.util_pct or 0.0) / 100
            out[r.id, a.astimezone(UTC)] = (h, known, used, idle * share)
    return out


@pytest.mark.parametrize("tz", [UTC, ZoneInfo("Europe/Berlin"), ZoneInfo("Asia/Kolkata")])
@pytest.mark.parametrize("spans", [False, True])
def test_summaries_are_shared_among_weeks_as_the_rule_says_run_by_run(tz, spans: bool) -> None:
    rng = random.Random(7)
    runs = []
    for i in range(300):
        start = datetime(2026, 9, 1, tzinfo=UTC) + timedelta(minutes=rng.randrange(130_000))
        hours = rng.choice([0.0, 0.5, 3, 40, 200, 900])
        r = run_record(
            f"r{i}",
            start,
            hours,
            gpus=rng.choice([1, 8]),
            util=rng.choice([None, 0.0, 37.5, 100.0]),
            price=rng.choice([None, 0.0, 2.5]),
            idle_usd=rng.choice([None, 0.0, 4.0, 1e6]),
        )
        if i % 17 == 0:  # running: to its heartbeat, or now
            r = r.__class__(**{**r.__dict__, "ended_at": None, "status": "running"})
            if i % 2:
                r = r.__class__(**{**r.__dict__, "heartbeat_at": start + timedelta(hours=5)})
        runs.append(r)
    given = (
        [
            (datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)),
            (datetime(2026, 11, 5, tzinfo=UTC), datetime(2026, 11, 8, tzinfo=UTC)),
        ]
        if spans
        else None
    )
    got = summary_gpu_time(runs_frame(runs), sampled=["r3"], tz=tz, now=NOW, spans=given)
    want = by_hand([r for r in runs if r.id != "r3"], given, tz)
    assert len(got) == len(want) > 100
    assert (got["gpu"] == "*").all()
    for row in got.itertuples(index=False):
        h, known, used, idle = want[row.run_id, row.week.to_pydatetime()]
        assert row.gpu_hours == pytest.approx(h, rel=1e-12)
        assert row.known_hours == pytest.approx(known, rel=1e-12)
        assert row.used_hours == pytest.approx(used, rel=1e-12, abs=1e-12)
        assert row.idle_hours == pytest.approx(idle, rel=1e-12, abs=1e-12)
        assert row.idle_used_hours == 0.0
    # a run's shares add up to its GPU-hours where no span cuts it off
    if not spans:
        total = got.groupby("run_id")["gpu_hours"].sum()
        for r in runs:
            if r.id in total.index:
                assert total[r.id] == pytest.approx(r.gpu_hours, rel=1e-12)
    assert pd.api.types.is_datetime64_any_dtype(got["week"])
