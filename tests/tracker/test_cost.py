"""tracker.cost: the one copy of spend, waste, idle and the thresholds, checked by hand."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tracker.config import Settings
from tracker.cost import (
    IDLE_MARGIN_PCT,
    SM_ACTIVE_THRESHOLDS,
    GpuUse,
    IdleDetector,
    Thresholds,
    gpu_waste_usd,
    idle_flags,
    run_cost,
    spend_usd,
    waste_share,
    waste_usd,
    weighted_util_pct,
)


def test_defaults_are_the_design_ones_and_settings_share_them() -> None:
    t = Thresholds()
    assert (
        t.target_util_pct,
        t.alert_util_pct,
        t.underutilized_pct,
        t.idle_pct,
        t.idle_window_min,
        t.idle_window_s,
    ) == (85.0, 70.0, 50.0, 5.0, 30, 1800.0)
    assert Settings().thresholds == t
    assert (SM_ACTIVE_THRESHOLDS.target_util_pct, SM_ACTIVE_THRESHOLDS.underutilized_pct) == (
        60,
        30,
    )
    # flat names change the nested thresholds, nothing else
    s = Settings().replace(target_util_pct=80.0, interval_s=2.0)
    assert (s.thresholds.target_util_pct, s.thresholds.idle_pct, s.interval_s) == (80.0, 5.0, 2.0)


def test_waste_is_spend_times_the_shortfall_to_target() -> None:
    # 2 GPU-h of H100 at $3.85 = $7.70; at 60% against 85%: 7.70 x (1 - 60/85) = $2.2647
    assert spend_usd(2.0, 3.85) == pytest.approx(7.70)
    assert waste_usd(7.70, 60.0, 85.0) == pytest.approx(7.70 * 25 / 85)
    assert waste_usd(7.70, 95.0, 85.0) == 0.0  # over target: no waste, never negative
    assert waste_usd(7.70, None, 85.0) == 0.0  # no data is never waste


def test_waste_share_is_the_same_rule_on_arrays() -> None:
    util = np.array([0.0, 42.5, 85.0, 100.0, np.nan])
    got = waste_share(util, 85.0)
    assert got[:4].tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert np.isnan(got[4])
    series = waste_share(pd.Series([17.0]), 85.0)
    assert series.iloc[0] == pytest.approx(0.8)


def test_run_cost_is_per_gpu() -> None:
    """2 GPUs x 2 h x $3.85 = $15.40; one GPU at 20%, one at 100%: waste = 7.70 x (1 - 20/85)
    only (the busy GPU does not hide the idle one)."""
    c = run_cost(
        gpu_hours_each=2.0,
        gpu_count=2,
        usd_per_gpu_hour=3.85,
        target_util_pct=85.0,
        gpus=[
            GpuUse(known_s=7200.0, util_s=20.0 * 7200),
            GpuUse(known_s=7200.0, util_s=100.0 * 7200),
        ],
    )
    assert (c.spend_usd, c.waste_usd, c.idle_usd) == pytest.approx(
        (15.40, 7.70 * (1 - 20 / 85), 0.0)
    )


def test_idle_is_part_of_waste() -> None:
    """One GPU, 2 h at $3.85 = $7.70. 30 min idle at 2%, 90 min busy at 51%: the run's mean is
    (0.5 x 2 + 1.5 x 51) / 2 = 38.75%. Idle $ = 0.5 h x 3.85 = $1.925, counted in full; the
    busy 1.5 h cost $5.775 and waste 5.775 x (1 - 51/85) = $2.31. Waste = $4.235 >= idle.
    (The old rule, 7.70 x (1 - 38.75/85) = $4.1897, was not a sum of the two.)"""
    use = GpuUse(
        known_s=7200.0, util_s=1800 * 2.0 + 5400 * 51.0, idle_s=1800.0, idle_util_s=1800 * 2.0
    )
    c = run_cost(
        gpu_hours_each=2.0, gpus=[use], gpu_count=1, usd_per_gpu_hour=3.85, target_util_pct=85.0
    )
    assert (c.spend_usd, c.idle_usd) == pytest.approx((7.70, 1.925))
    assert c.waste_usd == pytest.approx(1.925 + 5.775 * (1 - 51 / 85))
    assert c.waste_usd == pytest.approx(4.235)
    # all idle: waste = spend = idle
    all_idle = GpuUse(known_s=7200.0, util_s=7200.0, idle_s=7200.0, idle_util_s=7200.0)
    c = run_cost(
        gpu_hours_each=2.0,
        gpus=[all_idle],
        gpu_count=1,
        usd_per_gpu_hour=3.85,
        target_util_pct=85.0,
    )
    assert c.waste_usd == pytest.approx(c.idle_usd) == pytest.approx(7.70)
    # arrays: idle share 0.25 and busy util 42.5 against 85 -> 0.25 + 0.75 x 0.5 = 0.625
    assert waste_share(np.array([42.5]), 85.0, np.array([0.25]))[0] == pytest.approx(0.625)
    assert waste_usd(8.0, None, 85.0, idle_share=0.25) == 2.0  # unknown rest: idle only


def test_idle_detector_counts_minutes_in_a_quiet_window_only() -> None:
    d = IdleDetector(window=3, threshold_pct=5.0)
    for util in (1.0, 2.0, 3.0):  # a window averaging 2%: three idle minutes
        d.add_minute(util, 60.0)
    assert d.idle_s == 180.0
    d.add_minute(50.0, 60.0)  # a busy minute is never idle
    d.add_minute(None, 60.0)  # no data breaks the stretch
    d.add_minute(1.0, 60.0)
    d.add_minute(1.0, 60.0)
    assert d.idle_s == 180.0  # two quiet minutes after a gap: no full window yet
    d.add_minute(1.0, 30.0)
    assert d.idle_s == 180.0 + 150.0
    assert d.idle_util_s == 60 * (1 + 2 + 3) + 60 + 60 + 30


def idle_by_definition(
    utils: list[float | None], covered_s: list[float], minutes: list[int], pct: float, window: int
) -> list[bool]:
    """The idle rule read literally, in exact rationals: every window of ``window`` rows of
    consecutive minutes, all with a value, Σ util × s < limit × Σ s with Σ s > 0, the limit
    being ``pct`` less :data:`IDLE_MARGIN_PCT`."""
    limit = pct - IDLE_MARGIN_PCT
    n = len(utils)
    quiet = []
    for k in range(n - window + 1):
        rows = range(k, k + window)
        us = [utils[i] for i in rows]
        if None in us or minutes[k + window - 1] - minutes[k] != window - 1:
            continue
        s = sum(Fraction(covered_s[i]) for i in rows)
        used = sum(Fraction(utils[i] or 0.0) * Fraction(covered_s[i]) for i in rows)
        if s > 0 and used < Fraction(limit) * s:
            quiet.append(k)
    return [
        u is not None and u < limit and any(k <= j < k + window for k in quiet)
        for j, u in enumerate(utils)
    ]


MINUTE_ROWS = st.lists(
    st.tuples(
        st.one_of(
            st.none(),
            st.sampled_from([0.0, 4.9, 5.0, 5.1, 40.0]),
            st.integers(0, 100).map(lambda x: x / 10),
            st.floats(0.0, 100.0),
        ),
        st.one_of(
            st.sampled_from([60.0, 0.0, 0.1, 20.0]),
            st.integers(0, 60_000).map(lambda x: x / 1000),
            st.floats(0.0, 60.0),
        ),
        st.sampled_from([1] * 12 + [2, 7]),  # minutes since the row before: some with no row
    ),
    max_size=60,
)


@settings(max_examples=examples(300), deadline=None)
@given(rows=MINUTE_ROWS, window=st.sampled_from([1, 2, 3, 5, 30]))
def test_idle_flags_are_the_rule_read_literally(
    rows: list[tuple[float | None, float, int]], window: int
) -> None:
    utils = [u for u, _, _ in rows]
    covered = [c for _, c, _ in rows]
    minutes = list(itertools.accumulate(step for _, _, step in rows))
    got = idle_flags(utils, covered, threshold_pct=5.0, window=window, minutes=minutes)
    assert got == idle_by_definition(utils, covered, minutes, 5.0, window)
    # streamed, a window at a time: the same minutes, counted once each
    d = IdleDetector(window=window, threshold_pct=5.0)
    for u, c, m in zip(utils, covered, minutes, strict=True):
        d.add_minute(u, c, m)
    assert d.idle_s == sum(c for c, idle in zip(covered, got, strict=True) if idle)


def test_a_window_about_at_the_threshold_is_decided_exactly() -> None:
    """15 minutes of 0.1 s at 2.5 % and 15 of 0.1 s at 7.5 % average exactly 5 %: not idle,
    though the float sums say 15.0 < 15.000000000000007; 10 µs less at 7.5 % (a mean of
    4.99999167 %, under 5 % by more than the margin) is idle."""
    utils: list[float | None] = [2.5, 7.5] * 15
    covered = [0.1] * 30
    assert sum(u * c for u, c in zip([2.5, 7.5] * 15, covered, strict=True)) < 5.0 * sum(covered)
    assert idle_flags(utils, covered, threshold_pct=5.0, window=30) == [False] * 30
    covered[1] = 0.1 - 1e-5
    assert idle_flags(utils, covered, threshold_pct=5.0, window=30) == [True, False] * 15


def test_a_minute_at_the_threshold_give_or_take_rounding_is_at_it() -> None:
    """A minute of readings that average 5 % comes out 4.999999999999999 on one path and
    5.000000000000001 on another (the order of the float additions): both at the threshold, so
    every path says not idle; 4.9999 % is under it on every path."""
    window = [5.0] * 29
    for noisy in (4.999999999999999, 5.000000000000001, 5.0):
        assert not any(idle_flags([noisy, *window], [60.0] * 30, threshold_pct=5.0, window=30))
        assert not any(idle_flags([noisy] * 30, [60.0] * 30, threshold_pct=5.0, window=30))
    assert all(idle_flags([4.9999] * 30, [60.0] * 30, threshold_pct=5.0, window=30))


@settings(max_examples=examples(200), deadline=None)
@given(
    gpus=st.lists(
        st.tuples(
            st.one_of(st.none(), st.floats(0.0, 100.0)),
            st.one_of(st.just(0.0), st.floats(1e-3, 1e6)),  # seconds (no subnormal floats)
        ),
        max_size=12,
    )
)
def test_weighted_util_is_util_time_over_known_time(gpus: list[tuple[float | None, float]]) -> None:
    """GPUs (or runs, weeks, teams) at ``util`` for ``s`` seconds: Σ util × s ÷ Σ s over the
    ones with a value, by hand in rationals; a float and a pandas Series give the same."""
    known = [(u, s) for u, s in gpus if u is not None]
    used = sum(u * s for u, s in known)
    seconds = sum(s for _, s in known)
    got = weighted_util_pct(used, seconds)
    exact_s = sum(Fraction(s) for _, s in known)
    if exact_s == 0:
        assert got is None
        return
    by_hand = float(sum(Fraction(u) * Fraction(s) for u, s in known) / exact_s)
    assert got == pytest.approx(by_hand, rel=1e-12, abs=1e-9)
    assert 0.0 <= got <= 100.0 * (1 + 1e-12)
    series = weighted_util_pct(pd.Series([used, 0.0]), pd.Series([seconds, 0.0]))
    assert series[0] == got and np.isnan(series[1])


def test_weighted_util_is_not_a_mean_of_means() -> None:
    # 10 GPU-hours at 90 % and 4 at 10 %: (900 + 40) / 14 = 67.14 %, not (90 + 10) / 2 = 50 %
    assert weighted_util_pct(90.0 * 10 + 10.0 * 4, 14.0) == pytest.approx(940 / 14)
    assert weighted_util_pct(0.0, 0.0) is None


GPU_TIME = st.tuples(
    st.floats(1.0, 1e6),  # held, s
    st.one_of(st.just(0.0), st.floats(1e-6, 1.0)),  # share of it with a value
    st.floats(0.0, 100.0),  # utilization of the busy time, %
    st.one_of(st.sampled_from([0.0, 1.0]), st.floats(1e-6, 0.999)),  # share of known time idle
    st.floats(0.0, 4.99),  # utilization of the idle time, %
)


@settings(max_examples=examples(200), deadline=None)
@given(gpus=st.lists(GPU_TIME, min_size=1, max_size=8))
def test_waste_is_per_gpu_on_its_own_time(
    gpus: list[tuple[float, float, float, float, float]],
) -> None:
    """GPUs held for different times: the run's waste is Σ over GPUs of each one's idle time in
    full and the rest of its own spend × max(0, 1 - busy util ÷ 85), by hand; the run record's
    (:func:`run_cost`) and the report's (a Series of rows) are that one rule."""
    price = 3.85
    uses, by_hand = [], 0.0
    for held, known_share, busy_util, idle_share, idle_util in gpus:
        known = held * known_share
        idle = known * idle_share
        busy = known - idle
        uses.append(
            GpuUse(
                known_s=known,
                util_s=busy * busy_util + idle * idle_util,
                idle_s=idle,
                idle_util_s=idle * idle_util,
                held_s=held,
            )
        )
        rest = held - idle
        by_hand += idle / 3600 * price
        if busy > 0:
            by_hand += rest / 3600 * price * max(0.0, 1 - busy_util / 85)
    mean_h = sum(g[0] for g in gpus) / len(gpus) / 3600
    c = run_cost(
        gpu_hours_each=mean_h,
        gpus=uses,
        gpu_count=len(gpus),
        usd_per_gpu_hour=price,
        target_util_pct=85.0,
    )
    assert c.spend_usd == pytest.approx(sum(g[0] for g in gpus) / 3600 * price)
    assert c.waste_usd == pytest.approx(by_hand, rel=1e-9, abs=1e-9)
    assert c.idle_usd <= c.waste_usd + 1e-9 <= c.spend_usd + 2e-9
    rows = pd.DataFrame([u.__dict__ for u in uses])
    series = gpu_waste_usd(
        rows["held_s"] / 3600 * price,
        held=rows["held_s"],
        known=rows["known_s"],
        util_time=rows["util_s"],
        idle=rows["idle_s"],
        idle_util_time=rows["idle_util_s"],
        target_util_pct=85.0,
    )
    assert float(series.sum()) == pytest.approx(c.waste_usd, rel=1e-9, abs=1e-9)
