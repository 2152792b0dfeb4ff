"""tracker.owned: an owned GPU-hour's amortized cost and rent versus own, checked by hand."""

from __future__ import annotations

import math

import pytest

from tracker.owned import (
    HOURS_PER_YEAR,
    OwnedGpu,
    amortize,
    amortized_usd_per_gpu_hour,
    owned_prices,
    rent_rate,
    rent_vs_own,
)

# $30,000 over 4 years: 30000 / (4 × 8766 h) = 0.855578 $/h; 0.7 kW × $0.12 × PUE 1.3 = 0.1092 $/h
H100 = OwnedGpu(
    model="H100", purchase_usd=30_000, life_years=4, power_w=700, usd_per_kwh=0.12, pue=1.3, gpus=64
)
RATE = 0.964778


def test_the_amortized_rate_is_capital_plus_overhead_plus_power() -> None:
    a = amortize(H100)
    assert HOURS_PER_YEAR == 365.25 * 24
    assert a.capital_usd_per_gpu_hour == pytest.approx(0.855578, abs=1e-6)
    assert a.overhead_usd_per_gpu_hour == 0
    assert a.power_usd_per_gpu_hour == pytest.approx(0.1092)
    assert a.usd_per_gpu_hour == pytest.approx(RATE, abs=1e-6)
    assert amortized_usd_per_gpu_hour(H100) == a.usd_per_gpu_hour
    assert a.label() == "owned: $30,000 over 4 y + 0.70 kW × $0.12/kWh × PUE 1.3 = $0.965/GPU-h"


def test_overhead_is_spread_over_every_hour_of_the_year_and_pue_1_is_not_shown() -> None:
    o = OwnedGpu(
        model="L4",
        purchase_usd=3_506.4,
        life_years=1,
        power_w=100,
        usd_per_kwh=0.2,
        overhead_usd_per_year=1_753.2,
    )
    a = amortize(o)
    # 3506.4 / 8766 = 0.4; 1753.2 / 8766 = 0.2; 0.1 kW × $0.2 = 0.02
    assert (
        a.capital_usd_per_gpu_hour,
        a.overhead_usd_per_gpu_hour,
        a.power_usd_per_gpu_hour,
    ) == pytest.approx((0.4, 0.2, 0.02))
    assert a.label() == "owned: $3,506 over 1 y + $1,753/y + 0.10 kW × $0.20/kWh = $0.620/GPU-h"


def test_owned_prices_and_the_rent_rate_to_compare_with() -> None:
    assert owned_prices({"H100": H100}) == {"H100": pytest.approx(RATE, abs=1e-6)}
    assert owned_prices({}) == {}
    assert rent_rate(H100, 3.85) == 3.85  # none configured: the rental table's
    assert rent_rate(OwnedGpu(**{**H100.__dict__, "rent_usd_per_gpu_hour": 2.5}), 3.85) == 2.5
    assert rent_rate(H100, None) is None


def test_a_well_used_fleet_is_cheaper_owned() -> None:
    r = rent_vs_own(
        model="H100",
        gpu_hours=3020,
        util_pct=62.0,
        hours_in_period=168,
        owned=H100,
        rent_usd_per_gpu_hour=3.85,
    )
    assert r.owned_usd == pytest.approx(10_373.30, abs=0.01)  # 64 × 168 h × 0.964778
    assert r.rented_usd == pytest.approx(11_627.0)  # 3020 × 3.85
    assert r.allocation_pct == pytest.approx(28.0878, abs=1e-4)  # 3020 / 10752
    assert r.break_even_allocation_pct == pytest.approx(25.0592, abs=1e-4)  # 0.964778 / 3.85
    assert (r.cheaper, r.fleet_known, r.util_pct, r.gpus) == ("own", True, 62.0, 64)
    assert r.sentence() == (
        "64 owned H100: $10,373 this week (amortized $0.965/GPU-h); renting the 3,020 GPU-hours "
        "used at $3.85 would cost $11,627. Owning breaks even at 25% of owned hours in use; "
        "this week 28%."
    )


def test_every_owned_hour_is_paid_so_a_dst_week_costs_an_hour_less() -> None:
    r = rent_vs_own(
        model="H100",
        gpu_hours=3020,
        util_pct=None,
        hours_in_period=167,
        owned=H100,
        rent_usd_per_gpu_hour=3.85,
    )
    assert r.owned_usd == pytest.approx(10_311.55, abs=0.01)  # 64 × 167 × 0.964778
    assert r.allocation_pct == pytest.approx(28.2560, abs=1e-4)  # 3020 / 10688


def test_an_idle_fleet_is_cheaper_rented() -> None:
    r = rent_vs_own(
        model="H100",
        gpu_hours=2000,
        util_pct=40.0,
        hours_in_period=168,
        owned=H100,
        rent_usd_per_gpu_hour=3.85,
    )
    assert r.rented_usd == pytest.approx(7_700.0)
    assert r.allocation_pct == pytest.approx(18.6012, abs=1e-4)
    assert r.cheaper == "rent"


def test_without_the_fleet_size_only_the_hours_used_are_counted() -> None:
    o = OwnedGpu(**{**H100.__dict__, "gpus": None})
    r = rent_vs_own(
        model="H100",
        gpu_hours=3020,
        util_pct=None,
        hours_in_period=168,
        owned=o,
        rent_usd_per_gpu_hour=3.85,
    )
    assert r.owned_usd == pytest.approx(2_913.63, abs=0.01)  # 3020 × 0.964778
    assert (r.allocation_pct, r.fleet_known, r.cheaper) == (None, False, "own")
    assert r.sentence("last month") == (
        "Owned H100 (fleet size unknown): $2,914 last month for the hours used (amortized "
        "$0.965/GPU-h); renting the 3,020 GPU-hours used at $3.85 would cost $11,627. Owning "
        "breaks even at 25% of owned hours in use; set gpus in its [owned] table to compare."
    )


def test_a_cheap_rent_that_owning_never_beats() -> None:
    r = rent_vs_own(
        model="H100",
        gpu_hours=10752,
        util_pct=None,
        hours_in_period=168,
        owned=H100,
        rent_usd_per_gpu_hour=0.80,
    )
    assert r.allocation_pct == pytest.approx(100.0)
    assert r.break_even_allocation_pct == pytest.approx(120.5973, abs=1e-4)  # 0.964778 / 0.80
    assert r.cheaper == "rent"
    assert (
        "At this rent owning never pays, even with every owned hour in use; "
        "this week 100%." in r.sentence()
    )
    free = rent_vs_own(
        model="H100",
        gpu_hours=1,
        util_pct=None,
        hours_in_period=168,
        owned=H100,
        rent_usd_per_gpu_hour=0.0,
    )
    assert math.isinf(free.break_even_allocation_pct)


@pytest.mark.parametrize(
    ("hours", "gpu_hours", "rent"), [(0, 1, 1), (168, -1, 1), (168, 1, -1), (math.nan, 1, 1)]
)
def test_impossible_periods_are_refused(hours: float, gpu_hours: float, rent: float) -> None:
    with pytest.raises(ValueError, match="rent_vs_own: hours_in_period > 0"):
        rent_vs_own(
            model="H100",
            gpu_hours=gpu_hours,
            util_pct=None,
            hours_in_period=hours,
            owned=H100,
            rent_usd_per_gpu_hour=rent,
        )


def test_free_owned_hours_break_even_at_zero() -> None:
    """A fully written-off GPU on free power costs $0/h: owning pays at any allocation, even
    against free rent (the sentence must not say it never pays)."""
    free = OwnedGpu(model="V100", purchase_usd=0, life_years=4, power_w=0, usd_per_kwh=0.1, gpus=2)
    r = rent_vs_own(
        model="V100",
        gpu_hours=10,
        util_pct=None,
        hours_in_period=168,
        owned=free,
        rent_usd_per_gpu_hour=0.0,
    )
    assert r.break_even_allocation_pct == 0.0 and r.cheaper == "own"
    assert "never pays" not in r.sentence() and "breaks even at 0%" in r.sentence()
