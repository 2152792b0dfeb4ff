"""What every section reads its part from (:mod:`reports.sections`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from reports.kpi import WeekKpis
    from reports.request import Request
    from tracker.store import RunStore


@dataclass(frozen=True, kw_only=True)
class Week:
    """What a section reads its part from: the week's KPIs (the ledger's figures) and where
    they came from."""

    store_url: str | None
    """The run store's URL (None: the default store)."""
    store: RunStore
    """The run store, open, for a section that reads more of it."""
    req: Request
    kpis: WeekKpis
    now: datetime
    runs: pd.DataFrame | None = None
    """The usable runs the week's figures were read from: every run overlapping
    ``[runs_since, the week's end)`` (:func:`reports.gputime.week_gpu_time`), for a section
    that needs the runs of a longer span to read only the rest (None: read them all)."""
    runs_since: datetime | None = None
    """The start of the span ``runs`` covers."""
