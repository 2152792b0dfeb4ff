"""Team budgets: a team's spend against its weekly or monthly budget, the forecast for the
period, and the alert level reached (80% or 100%). Pure: the spends are read from the store by
:mod:`reports.budgets`.

The forecast is a straight line: the spend so far over the time elapsed, times the period's
length (DST-exact: a month of 743 or 745 hours is that long). Before a day has elapsed there is
no forecast: an hour of a Monday morning says nothing about the month.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tracker.units import S_PER_HOUR

LEVELS = (80, 100)
"""Alert levels, % of the budget spent: one alert each per (team, period)."""
MIN_FORECAST_H = 24.0
"""No forecast before this much of the period has elapsed."""
PERIODS = ("week", "month")
TOP_RUNS = 3
"""Runs named with a budget line (the largest spends of the team in the period)."""


@dataclass(frozen=True, kw_only=True)
class Budget:
    """``[[budgets]]`` of the config: a team's budget per ISO week and/or per calendar month, in
    the report's time zone."""

    team: str
    usd_per_week: float | None = None
    usd_per_month: float | None = None

    def amounts(self) -> list[tuple[str, float]]:
        """(period, USD) of each budget set, week first."""
        return [
            (p, v)
            for p, v in (("week", self.usd_per_week), ("month", self.usd_per_month))
            if v is not None
        ]


@dataclass(frozen=True, kw_only=True)
class BudgetLine:
    """One team's spend in one period against its budget."""

    team: str
    period: str
    """``week`` or ``month``."""
    label: str
    """``2026-W49`` or ``2026-12``."""
    start: datetime
    end: datetime
    """The period is [start, end): Monday or the 1st, 00:00 in the report zone (aware)."""
    until: datetime
    """The spend counted runs up to here (``end`` once the period is over)."""
    spend_usd: float
    budget_usd: float
    runs: tuple[tuple[str, float], ...] = ()
    """The team's largest spends in the period: (run name, USD), largest first."""

    @property
    def complete(self) -> bool:
        return self.until.astimezone(UTC) >= self.end.astimezone(UTC)

    @property
    def used_pct(self) -> float:
        return 100.0 * self.spend_usd / self.budget_usd

    @property
    def forecast_usd(self) -> float | None:
        """The spend at the end of the period if it goes on at the rate so far; the spend
        itself once the period is over; None before :data:`MIN_FORECAST_H`."""
        if self.complete:
            return self.spend_usd
        # in UTC: two times of one zone subtract as wall clocks, a DST change unseen
        start, end, until = (t.astimezone(UTC) for t in (self.start, self.end, self.until))
        elapsed = (until - start).total_seconds()
        if elapsed < MIN_FORECAST_H * S_PER_HOUR:
            return None
        return self.spend_usd * (end - start).total_seconds() / elapsed

    @property
    def forecast_pct(self) -> float | None:
        f = self.forecast_usd
        return None if f is None else 100.0 * f / self.budget_usd

    @property
    def level(self) -> int | None:
        """The highest of :data:`LEVELS` reached (80, 100), or None."""
        reached = [lv for lv in LEVELS if self.used_pct >= lv]
        return reached[-1] if reached else None

    def as_dict(self) -> dict[str, Any]:
        """The JSON export's fields (times ISO 8601, in the report zone)."""

        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(x, 6)

        return {
            "team": self.team,
            "period": self.period,
            "label": self.label,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "until": self.until.isoformat(),
            "complete": self.complete,
            "spend_usd": num(self.spend_usd),
            "budget_usd": self.budget_usd,
            "used_pct": num(self.used_pct),
            "forecast_usd": num(self.forecast_usd),
            "forecast_pct": num(self.forecast_pct),
            "level": self.level,
            "runs": [{"name": n, "spend_usd": num(v)} for n, v in self.runs],
        }
