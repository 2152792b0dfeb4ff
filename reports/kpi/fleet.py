"""An owned fleet in a week: its models priced at their amortized rate, and rent versus own.

The formulas are :mod:`tracker.owned`'s; this module only picks each owned model's GPU-hours
and utilization out of a week's breakdown by GPU model (``WeekKpis.by["gpu_model"]``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from tracker.owned import OwnedGpu, RentVsOwn, rent_rate, rent_vs_own
from tracker.prices import PriceTable, owned_table


def rent_vs_own_lines(by_model: pd.DataFrame, owned: Mapping[str, OwnedGpu], *,
                      rent: PriceTable, hours_in_week: float) -> list[RentVsOwn]:
    """One comparison per owned model with a rental rate (its ``rent_usd_per_gpu_hour``, else
    ``rent``'s price for it): the week's GPU-hours and utilization of the runs on it (also
    when none ran: the owned hours cost all the same)."""
    table = owned_table(owned)
    key = by_model["gpu_model"].map(
        lambda m: (row.gpu if isinstance(m, str) and (row := table.lookup(m)) else None))
    out = []
    for name, o in owned.items():
        own_row = table.lookup(name)
        rate = rent_rate(o, (r.usd_per_gpu_hour if (r := rent.lookup(name)) else None))
        if own_row is None or rate is None:
            continue
        rows = by_model[key == own_row.gpu]
        hours = float(rows["gpu_hours"].sum())
        util = rows["utilization_pct"].astype(float)
        weight = rows["gpu_hours"].where(util.notna(), 0.0)
        util_pct = float((util.fillna(0.0) * weight).sum() / weight.sum()) \
            if weight.sum() > 0 else None
        out.append(rent_vs_own(model=name, gpu_hours=hours, util_pct=util_pct,
                               hours_in_period=hours_in_week, owned=o,
                               rent_usd_per_gpu_hour=rate))
    return out
