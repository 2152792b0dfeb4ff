"""tracker.cost: the one copy of spend, waste, idle and the thresholds, checked by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracker.config import Settings
from tracker.cost import (
    SM_ACTIVE_THRESHOLDS,
    GpuUse,
    IdleDetector,
    Thresholds,
    run_cost,
    spend_usd,
    waste_share,
    waste_usd,
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
    assert use.busy_util_pct() == pytest.approx(51.0)
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
