"""Capacity what-if for management: what fixing the week's most wasteful runs would return in
GPUs, and, where the trend and owned prices say it, how long that defers the next purchase.

- **GPUs returned**: the top :data:`TOP_RUNS` runs by recoverable waste; each run's waste in
  GPU-hours (its waste ÷ its price per GPU-hour), summed, ÷ the week's hours (168).
- **Growth**: a straight line through the log of the GPU-hours of the trend's weeks that have
  any (:data:`MIN_WEEKS` of them at least), as a monthly rate (30.44 days); shown only from
  :data:`MIN_GROWTH_PCT` a month (a flat trend's rounding noise is no growth: it would defer a
  purchase by centuries).
- **Deferral**: with demand growing at that rate from the week's average GPUs in use, the
  returned GPUs absorb ln(1 + returned ÷ in use) ÷ ln(1 + growth) months of it. None while a
  GPU or more of known capacity sat unallocated on average (capacity nobody held, the ledger's:
  :mod:`reports.kpi.ledger`): there is no purchase to defer, and the sentence says how many
  are free.
- **Its worth in hardware**: the returned GPUs at the purchase price of the owned model with
  the most GPUs (``[owned.<MODEL>]``); shown only where one is configured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracker.owned import OwnedGpu

TOP_RUNS = 10
FREE_GPUS = 1.0
"""GPUs free on average from which no purchase is deferred."""
MIN_WEEKS = 8
MIN_GROWTH_PCT = 0.1
"""Monthly growth (%) below which the trend is flat: the smallest the sentence can show."""
HOURS_IN_WEEK = 168.0
DAYS_IN_MONTH = 30.44


@dataclass(frozen=True, kw_only=True)
class WhatIf:
    runs: int
    """The runs counted (the most wasteful, at most :data:`TOP_RUNS`)."""
    gpu_hours: float
    """Their recoverable waste in GPU-hours."""
    gpus: float
    """That ÷ the week's hours: GPUs returned a week."""
    hours: float
    """The week's hours (168; 167 or 169 across a clock change)."""
    used_gpus: float
    """The week's GPU-hours ÷ 168: GPUs in use on average."""
    growth_pct_month: float | None
    """The trend's growth a month, %; None with too few weeks or no growth."""
    trend_weeks: int
    months: float | None
    """How long the returned GPUs defer the next purchase at that growth."""
    owned_model: str | None
    purchase_usd: float | None
    """The returned GPUs at the owned model's purchase price."""
    free_gpus: float | None = None
    """Capacity nobody held ÷ the week's hours: GPUs free on average; None: capacity unknown."""

    def sentence(self) -> str:
        """The what-if in one line, every assumption in it."""
        top = "the top run's" if self.runs == 1 else f"the top {self.runs} runs'"
        s = (
            f"fixing {top} waste returns {_gpus(self.gpus)} a week "
            f"({self.gpu_hours:,.0f} GPU-h of waste ÷ {self.hours:g} h; {self.used_gpus:,.1f} in use "
            "on average)"
        )
        if self.free_gpus is not None and self.free_gpus >= FREE_GPUS:
            s += (
                f"; no purchase to defer: {_gpus(self.free_gpus)} of the capacity sat "
                "unallocated on average"
            )
        elif self.months is not None and self.growth_pct_month is not None:
            s += (
                f"; at the last {self.trend_weeks} weeks' growth (+{self.growth_pct_month:.1f}%"
                f"/month) that defers the next purchase by ≈ {self.months:.1f} months"
            )
        if self.purchase_usd is not None and self.owned_model:
            s += (
                f" ({self.gpus:,.1f} {self.owned_model} would cost "
                f"${self.purchase_usd:,.0f} at your owned price)"
            )
        return s


def _gpus(n: float) -> str:
    """``≈ 11.2 GPUs``, ``≈ 1.0 GPU``; ``under 0.1 GPU`` where it rounds to nothing."""
    if n < 0.05:
        return "under 0.1 GPU"
    return f"≈ {n:,.1f} GPU{'' if round(n, 1) == 1.0 else 's'}"


def what_if(
    runs: pd.DataFrame,
    trend: pd.DataFrame,
    gpu_hours: float,
    owned: Mapping[str, OwnedGpu] | None = None,
    *,
    hours_in_week: float = HOURS_IN_WEEK,
    free_gpu_hours: float | None = None,
) -> WhatIf | None:
    """The what-if of a week; None when no priced run has recoverable waste.

    Args:
        runs: The week's runs (``waste_usd``, ``spend_usd``, ``gpu_hours``), most waste first.
        trend: The trend's weeks (``gpu_hours``), oldest first.
        gpu_hours: The week's GPU-hours.
        owned: The owned models.
        hours_in_week: The week's hours (167 or 169 across a clock change).
        free_gpu_hours: Capacity nobody held (the ledger's); None: capacity unknown.
    """
    if not len(runs) or gpu_hours <= 0:
        return None
    waste = pd.to_numeric(runs["waste_usd"], errors="coerce").to_numpy(dtype=float)
    spend = pd.to_numeric(runs["spend_usd"], errors="coerce").to_numpy(dtype=float)
    hours = pd.to_numeric(runs["gpu_hours"], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(waste) & (waste > 0) & np.isfinite(spend) & (spend > 0) & (hours > 0)
    if not ok.any():
        return None
    order = np.argsort(-np.where(ok, waste, -np.inf), kind="stable")[: min(TOP_RUNS, ok.sum())]
    returned = float((waste[order] / spend[order] * hours[order]).sum())
    gpus = returned / hours_in_week
    used = gpu_hours / hours_in_week
    growth, weeks = _growth(trend)
    months = None
    free = None if free_gpu_hours is None else free_gpu_hours / hours_in_week
    if growth is not None and (free is None or free < FREE_GPUS):
        months = math.log1p(gpus / used) / math.log1p(growth / 100.0)
    model, usd = None, None
    if owned:
        best = max(owned.values(), key=lambda o: (o.gpus or 0, o.model))
        model, usd = best.model, gpus * best.purchase_usd
    return WhatIf(
        runs=len(order),
        gpu_hours=returned,
        gpus=gpus,
        hours=hours_in_week,
        used_gpus=used,
        growth_pct_month=growth,
        trend_weeks=weeks,
        months=months,
        owned_model=model,
        purchase_usd=usd,
        free_gpus=free,
    )


def _growth(trend: pd.DataFrame) -> tuple[float | None, int]:
    """The monthly growth (%) of the trend's GPU-hours, by a line through their log; None
    unless :data:`MIN_WEEKS` weeks have GPU-hours and the line rises by :data:`MIN_GROWTH_PCT`
    a month or more."""
    if "gpu_hours" not in trend:
        return None, 0
    h = pd.to_numeric(trend["gpu_hours"], errors="coerce").to_numpy(dtype=float)
    x = np.arange(len(h), dtype=float)
    ok = np.isfinite(h) & (h > 0)
    if ok.sum() < MIN_WEEKS:
        return None, int(ok.sum())
    slope = float(np.polyfit(x[ok], np.log(h[ok]), 1)[0])  # per week
    growth = 100.0 * math.expm1(slope * DAYS_IN_MONTH / 7.0)
    return (growth if growth >= MIN_GROWTH_PCT else None), int(ok.sum())
