"""The capacity what-if (:mod:`reports.kpi.whatif`), by hand: GPUs returned by fixing the top
runs, the trend's growth, the months it defers, the hardware it is worth."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from reports.kpi.whatif import what_if
from tracker.owned import OwnedGpu

OWNED = {
    "H100": OwnedGpu(
        model="H100", purchase_usd=30_000, life_years=4, power_w=700, usd_per_kwh=0.1, gpus=64
    ),
    "L4": OwnedGpu(
        model="L4", purchase_usd=2_500, life_years=4, power_w=72, usd_per_kwh=0.1, gpus=8
    ),
}


def runs() -> pd.DataFrame:
    # 12 runs, most waste first; run i wastes (12 - i) x $100 at $4/GPU-hour (spend 4 x hours),
    # and one unpriced run with no spend
    rows = [
        {"waste_usd": 100.0 * (12 - i), "spend_usd": 4.0 * 500, "gpu_hours": 500.0}
        for i in range(12)
    ]
    rows.insert(3, {"waste_usd": 999.0, "spend_usd": float("nan"), "gpu_hours": 10.0})
    return pd.DataFrame(rows)


def trend(weeks: int, growth_week: float) -> pd.DataFrame:
    return pd.DataFrame({"gpu_hours": [10_000 * (1 + growth_week) ** w for w in range(weeks)]})


def test_the_top_ten_runs_growth_and_hardware_by_hand() -> None:
    w = what_if(runs(), trend(12, 0.02), 16_800.0, OWNED)
    assert w is not None
    # the ten priced runs with most waste: $1,200 ... $300, at $4/GPU-hour: 7,500 / 4 GPU-hours
    assert w.runs == 10 and w.gpu_hours == pytest.approx(sum(100 * (12 - i) for i in range(10)) / 4)
    assert w.gpus == pytest.approx(1875 / 168) and w.used_gpus == pytest.approx(100.0)
    # 2% a week, exactly exponential: (1.02)^(30.44 / 7) - 1 a month
    monthly = 1.02 ** (30.44 / 7) - 1
    assert w.growth_pct_month == pytest.approx(100 * monthly) and w.trend_weeks == 12
    assert w.months == pytest.approx(math.log(1 + (1875 / 168) / 100) / math.log(1 + monthly))
    # the owned model with most GPUs: H100 at $30,000 each
    assert (w.owned_model, w.purchase_usd) == ("H100", pytest.approx(1875 / 168 * 30_000))
    assert w.sentence() == (
        f"fixing the top 10 runs' waste returns ≈ 11.2 GPUs a week (1,875 GPU-h of waste "
        f"÷ 168 h; "
        f"100.0 in use on average); at the last 12 weeks' growth (+{100 * monthly:.1f}%/month) "
        f"that defers the next purchase by ≈ {w.months:.1f} months (11.2 H100 would cost "
        f"${1875 / 168 * 30_000:,.0f} at your owned price)"
    )


def test_only_what_the_inputs_support_is_said() -> None:
    # seven weeks of trend: no growth; no owned GPUs: no price; a shrinking fleet: no deferral
    short = what_if(runs(), trend(7, 0.02), 16_800.0)
    assert short is not None and short.growth_pct_month is None and short.months is None
    assert short.purchase_usd is None and short.trend_weeks == 7
    assert "defers" not in short.sentence() and "owned price" not in short.sentence()
    shrinking = what_if(runs(), trend(12, -0.02), 16_800.0, OWNED)
    assert shrinking is not None and shrinking.months is None
    assert "owned price" in shrinking.sentence()
    no_waste = runs().assign(waste_usd=0.0)
    assert what_if(no_waste, trend(12, 0.02), 16_800.0, OWNED) is None
    assert what_if(runs(), trend(12, 0.02), 0.0, OWNED) is None


def test_a_flat_trend_defers_nothing() -> None:
    # twelve weeks of the same GPU-hours, but for the last bit of a float: a line through
    # their log rises by ~1e-13 %/month, which would "defer the next purchase" by ~1e14 months
    flat = pd.DataFrame(
        {"gpu_hours": [10_752.000000000002 if w % 2 else 10_752.0 for w in range(12)]}
    )
    w = what_if(runs(), flat, 16_800.0, OWNED)
    assert w is not None and w.growth_pct_month is None and w.months is None
    assert "defers" not in w.sentence()
    # 0.1%/month is the least growth the sentence shows (+0.1%/month): a deferral from it
    slow = what_if(runs(), trend(12, 1.0011 ** (7 / 30.44) - 1), 16_800.0, OWNED)
    assert slow is not None and slow.growth_pct_month == pytest.approx(0.11)
    assert slow.months is not None and "(+0.1%/month)" in slow.sentence()


def test_a_small_what_if_says_so_in_words() -> None:
    # one run, $1 of waste at $4/GPU-h: 0.25 GPU-h ÷ 168 h, nothing worth "≈ 0.0 GPUs"
    one = pd.DataFrame([{"waste_usd": 1.0, "spend_usd": 40.0, "gpu_hours": 10.0}])
    w = what_if(one, trend(3, 0.0), 10.0)
    assert w is not None and w.sentence().startswith(
        "fixing the top run's waste returns under 0.1 GPU a week (0 GPU-h of waste ÷ 168 h;"
    )
    # exactly one GPU's week of waste: "≈ 1.0 GPU", singular
    whole = pd.DataFrame([{"waste_usd": 168.0 * 4, "spend_usd": 4 * 336.0, "gpu_hours": 336.0}])
    w = what_if(whole, trend(3, 0.0), 336.0)
    assert w is not None and "returns ≈ 1.0 GPU a week" in w.sentence()
