"""Owned GPUs: the amortized cost of an hour of a GPU you bought, and rent versus own.

An owned GPU costs the same every hour of its life whether it works or not; a rented one costs
only while it is allocated. So owning pays when enough of the owned hours are in use: the
break-even allocation is the amortized rate over the rental rate.

Meant to be used so: the report prices an owned model at :func:`owned_prices` (source
"owned (amortized)") instead of the rental table, merging it over the price overrides
(``{**settings.prices, **owned_prices(settings.owned)}``), and prints
:meth:`RentVsOwn.sentence` per owned model. The rental rate to compare with is
:func:`rent_rate`: the table's price looked up *before* that merge, else it is the owned rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

HOURS_PER_YEAR = 8766.0
"""365.25 days × 24 h: the mean calendar year with leap years, so a 4-year life is the
35,064 hours it spans on average (a 365-day year would undercount a day every 4 years)."""

W_PER_KW = 1000.0


@dataclass(frozen=True, kw_only=True)
class OwnedGpu:
    """One GPU model of an owned fleet, per GPU (``[owned.<MODEL>]``)."""

    model: str
    """GPU model, as the price table names it (``H100``)."""
    purchase_usd: float
    """Price paid per GPU, with its share of the server and network if you count them."""
    life_years: float
    """Service life the purchase is spread over."""
    power_w: float
    """Average draw per GPU, with its share of the host (CPUs, fans, NICs)."""
    usd_per_kwh: float
    """Electricity price."""
    pue: float = 1.0
    """Facility energy ÷ IT energy (cooling, power conversion); 1.0 counts none: set your
    facility's (typically 1.1-1.6)."""
    gpus: int | None = None
    """Fleet size of this model; None = unknown (the comparison then assumes every owned hour
    was in use)."""
    rent_usd_per_gpu_hour: float | None = None
    """What renting this model would cost; None = the price table's on-demand price."""
    overhead_usd_per_year: float = 0.0
    """Yearly cost per GPU besides power: hosting, support, staff."""


@dataclass(frozen=True, kw_only=True)
class Amortized:
    """An owned GPU-hour's cost, USD, and its parts (they add up to ``usd_per_gpu_hour``)."""

    owned: OwnedGpu
    capital_usd_per_gpu_hour: float
    overhead_usd_per_gpu_hour: float
    power_usd_per_gpu_hour: float

    @property
    def usd_per_gpu_hour(self) -> float:
        return (
            self.capital_usd_per_gpu_hour
            + self.overhead_usd_per_gpu_hour
            + self.power_usd_per_gpu_hour
        )

    def label(self) -> str:
        """How the rate was made, for a report: ``owned: $30,000 over 4 y + 0.70 kW ×
        $0.12/kWh × PUE 1.3 = $0.965/GPU-h``."""
        o = self.owned
        overhead = f" + ${o.overhead_usd_per_year:,.0f}/y" if o.overhead_usd_per_year else ""
        pue = f" × PUE {o.pue:g}" if o.pue != 1 else ""
        return (
            f"owned: ${o.purchase_usd:,.0f} over {o.life_years:g} y{overhead}"
            f" + {o.power_w / W_PER_KW:.2f} kW × ${o.usd_per_kwh:.2f}/kWh{pue}"
            f" = ${self.usd_per_gpu_hour:.3f}/GPU-h"
        )


def amortize(o: OwnedGpu) -> Amortized:
    """purchase ÷ (life × 8766 h) + overhead ÷ 8766 h + kW × $/kWh × PUE, per GPU-hour."""
    return Amortized(
        owned=o,
        capital_usd_per_gpu_hour=o.purchase_usd / (o.life_years * HOURS_PER_YEAR),
        overhead_usd_per_gpu_hour=o.overhead_usd_per_year / HOURS_PER_YEAR,
        power_usd_per_gpu_hour=o.power_w / W_PER_KW * o.usd_per_kwh * o.pue,
    )


def amortized_usd_per_gpu_hour(o: OwnedGpu) -> float:
    return amortize(o).usd_per_gpu_hour


def owned_prices(owned: Mapping[str, OwnedGpu]) -> dict[str, float]:
    """GPU model → amortized USD per GPU-hour, to merge over the rental price overrides."""
    return {model: amortized_usd_per_gpu_hour(o) for model, o in owned.items()}


def rent_rate(o: OwnedGpu, table_usd_per_gpu_hour: float | None) -> float | None:
    """The rental rate to compare with: the configured one, else the rental table's (not the
    table with :func:`owned_prices` merged in); None when neither is known."""
    return (
        o.rent_usd_per_gpu_hour if o.rent_usd_per_gpu_hour is not None else table_usd_per_gpu_hour
    )


@dataclass(frozen=True, kw_only=True)
class RentVsOwn:
    """One owned model over one period: what owning cost, what renting the same work would."""

    model: str
    gpus: int | None
    gpu_hours: float
    """Allocated GPU-hours of this model measured in the period."""
    util_pct: float | None
    """GPU utilization of that work (nvidia-smi's ``utilization.gpu``), passed through."""
    hours_in_period: float
    amortized_usd_per_gpu_hour: float
    rent_usd_per_gpu_hour: float
    owned_usd: float
    """Every owned hour of the period (gpus × hours × rate); with the fleet unknown, only the
    measured GPU-hours (``fleet_known`` False)."""
    rented_usd: float
    """The measured GPU-hours at the rental rate: renting is paid only while allocated."""
    allocation_pct: float | None
    """Share of the owned GPU-hours in use (may pass 100 if runs used more GPUs of this model
    than ``gpus``); None when the fleet is unknown."""
    break_even_allocation_pct: float
    """Allocation at which owning costs what renting does; over 100: owning never pays at this
    rent (inf when renting is free)."""
    fleet_known: bool
    cheaper: Literal["own", "rent"]
    basis: str = ""
    """How the owned rate was made (:meth:`Amortized.label`)."""

    def sentence(self, period: str = "this week") -> str:
        """One line for a report."""
        rate = f"amortized ${self.amortized_usd_per_gpu_hour:.3f}/GPU-h"
        rented = (
            f"renting the {self.gpu_hours:,.0f} GPU-hours used at "
            f"${self.rent_usd_per_gpu_hour:.2f} would cost ${self.rented_usd:,.0f}"
        )
        if self.break_even_allocation_pct > 100:
            even = "At this rent owning never pays, even with every owned hour in use"
        else:
            even = (
                f"Owning breaks even at {self.break_even_allocation_pct:.0f}% of owned hours in use"
            )
        if self.allocation_pct is None:
            return (
                f"Owned {self.model} (fleet size unknown): ${self.owned_usd:,.0f} {period} "
                f"for the hours used ({rate}); {rented}. {even}; set gpus in its [owned] table "
                "to compare."
            )
        return (
            f"{self.gpus} owned {self.model}: ${self.owned_usd:,.0f} {period} ({rate}); "
            f"{rented}. {even}; {period} {self.allocation_pct:.0f}%."
        )


def rent_vs_own(
    *,
    model: str,
    gpu_hours: float,
    util_pct: float | None,
    hours_in_period: float,
    owned: OwnedGpu,
    rent_usd_per_gpu_hour: float,
) -> RentVsOwn:
    """Owning ``owned`` versus renting the ``gpu_hours`` it served over a period of
    ``hours_in_period`` wall-clock hours (a week is 167, 168 or 169 with a DST change)."""
    if not hours_in_period > 0 or not gpu_hours >= 0 or not rent_usd_per_gpu_hour >= 0:
        raise ValueError(
            f"rent_vs_own: hours_in_period > 0, gpu_hours >= 0 and a rent >= 0 "
            f"needed, got {hours_in_period!r}, {gpu_hours!r}, {rent_usd_per_gpu_hour!r}"
        )
    rate = amortized_usd_per_gpu_hour(owned)
    if owned.gpus is not None:
        owned_hours = owned.gpus * hours_in_period
        owned_usd, allocation = owned_hours * rate, 100.0 * gpu_hours / owned_hours
    else:
        owned_usd, allocation = gpu_hours * rate, None
    rented_usd = gpu_hours * rent_usd_per_gpu_hour
    # free owned hours pay at any allocation; free rent means owning never pays
    even = (
        100.0 * rate / rent_usd_per_gpu_hour
        if rent_usd_per_gpu_hour
        else 0.0
        if rate == 0
        else float("inf")
    )
    return RentVsOwn(
        model=model,
        gpus=owned.gpus,
        gpu_hours=gpu_hours,
        util_pct=util_pct,
        hours_in_period=hours_in_period,
        amortized_usd_per_gpu_hour=rate,
        rent_usd_per_gpu_hour=rent_usd_per_gpu_hour,
        owned_usd=owned_usd,
        rented_usd=rented_usd,
        allocation_pct=allocation,
        break_even_allocation_pct=even,
        fleet_known=owned.gpus is not None,
        cheaper="rent" if rented_usd < owned_usd else "own",
        basis=amortize(owned).label(),
    )
