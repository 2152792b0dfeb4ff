"""What a report is asked for: the week, the time zone, the formats, the basis, and the
configured prices, owned GPUs, carbon figures, thresholds and budgets.

Light on purpose (no pandas, no store): the CLI checks a week, a format or a time zone and
answers a bad one before it loads what computing a report needs."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING

from reports.errors import ReportError
from reports.weeks import parse_week, week_bounds
from tracker.carbon import Carbon
from tracker.cost import Thresholds, thresholds_for
from tracker.extras import install_hint
from tracker.owned import OwnedGpu

if TYPE_CHECKING:
    from reports.kpi.budgets import Budget
    from tracker.config import Settings

FORMATS = ("html", "email", "json", "csv")
"""The formats a report writes by default (``gpu-kpi report``, the service)."""
OPTIONAL_FORMATS = ("parquet",)
"""Formats written only when asked for: ``parquet`` needs pyarrow (the ``parquet`` extra)."""
CURRENT = "current"
"""``--week current``: the week under way, so far."""


@dataclass(frozen=True, kw_only=True)
class Request:
    week: str | None
    """``YYYY-Www`` or ``current`` (the week so far); None: the last complete week."""
    tz: tzinfo
    formats: Sequence[str] = ("html", "json", "csv")
    basis: str = "util"
    thresholds: Thresholds | None = None
    report_url: str | None = None
    """Base URL where the archive is served: the email links ``<report_url>/<week>.html``."""
    prices: Mapping[str, float] = field(default_factory=dict)
    """Price overrides (USD per GPU-hour by model) over the built-in table."""
    owned: Mapping[str, OwnedGpu] = field(default_factory=dict)
    """Owned models (``[owned.<MODEL>]``): priced at their amortized rate, compared with rent."""
    carbon: Carbon = field(default_factory=Carbon)
    """Grid intensity and PUE for CO2e (``[carbon]``)."""
    budgets: Sequence[Budget] = ()
    """Team budgets (``[[budgets]]``): the report shows each team's spend against them."""

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        week: str | None,
        tz: tzinfo,
        basis: str = "util",
        formats: Sequence[str] = ("html", "json", "csv"),
        report_url: str | None = None,
        budgets: Sequence[Budget] = (),
    ) -> Request:
        """A request with the configured prices, owned GPUs, carbon figures and thresholds.

        Args:
            settings: The tracker's settings (the config file, the environment, the flags).
            week: ``YYYY-Www``; None: the last complete week.
            tz: The report's time zone.
            basis: ``util`` or ``sm_active``: the thresholds are this basis'.
            formats: The outputs to render (:data:`FORMATS`).
            report_url: The archive's base URL, for links.
            budgets: The teams' budgets.

        Returns:
            The request.
        """
        return cls(
            week=week,
            tz=tz,
            formats=formats,
            basis=basis,
            thresholds=thresholds_for(basis, settings.thresholds),
            report_url=report_url,
            prices=settings.prices,
            owned=settings.owned,
            carbon=settings.carbon,
            budgets=budgets,
        )


def parse_formats(text: str) -> tuple[str, ...]:
    """The report formats of ``--format``.

    Args:
        text: A comma-separated list of :data:`FORMATS` and :data:`OPTIONAL_FORMATS`
            (``html,email,json,csv,parquet``).

    Returns:
        The formats, in the order given.

    Raises:
        ReportError: An unknown format, or none; ``parquet`` where pyarrow is not installed.
    """
    wanted = tuple(f.strip() for f in text.split(",") if f.strip())
    known = FORMATS + OPTIONAL_FORMATS
    bad = [f for f in wanted if f not in known]
    if bad or not wanted:
        raise ReportError(
            f"unknown format {', '.join(bad) or repr(text)}: use a comma-separated "
            f"list of {', '.join(known)}"
        )
    if "parquet" in wanted and importlib.util.find_spec("pyarrow") is None:
        raise ReportError(f"--format parquet needs pyarrow: {install_hint('parquet', 'pyarrow')}")
    return wanted


def resolve_week(week: str | None, tz: tzinfo, now: datetime) -> datetime:
    """Monday 00:00 of the requested week in ``tz``.

    Args:
        week: ``YYYY-Www``, ``current`` (the week so far), or None for the last complete week.
        tz: The report's time zone.
        now: The current time (timezone-aware).

    Returns:
        The week's start, timezone-aware.

    Raises:
        ReportError: The week has not started yet, or the label is not a week.
    """
    if week == CURRENT:
        from reports.weeks import week_of

        start, _ = week_bounds(*week_of(now, tz), tz)
        return start
    if week is None:
        from reports.weeks import last_complete_week

        start, _ = week_bounds(*last_complete_week(now, tz), tz)
        return start
    start, _ = week_bounds(*parse_week(week), tz)
    if start > now:
        raise ReportError(f"week {week} has not started yet")
    return start
