"""An owned fleet in a week: rent versus own per owned model.

The formulas are :mod:`tracker.owned`'s, and which runs an owned model prices is
:func:`tracker.prices.owned_row`'s (``run_weeks`` marks them ``owned_gpu``); this module only
sums each owned model's week.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from tracker.cost import weighted_util_pct
from tracker.owned import OwnedGpu, RentVsOwn, rent_rate, rent_vs_own
from tracker.prices import PriceTable, canonical_gpu, owned_table


def rent_vs_own_lines(
    per: pd.DataFrame, owned: Mapping[str, OwnedGpu], *, rent: PriceTable, hours_in_week: float
) -> list[RentVsOwn]:
    """One comparison per owned model with a rental rate (its ``rent_usd_per_gpu_hour``, else
    ``rent``'s price for it), over the week's rows of ``per`` (:func:`run_weeks`) that the
    owned model priced: not runs that paid a price of their own, not variants priced in
    ``[prices]``. Also when none ran: the owned hours cost all the same."""
    table = owned_table(owned)
    out = []
    for name, o in owned.items():
        row = table.lookup(name)
        rate = rent_rate(o, (r.usd_per_gpu_hour if (r := rent.lookup(name)) else None))
        if row is None or rate is None:
            continue
        mine = per[per["owned_gpu"] == row.gpu] if "owned_gpu" in per else per.iloc[:0]
        known = float(mine["known_hours"].sum())
        util_pct = weighted_util_pct(100.0 * float(mine["used_hours"].sum()), known)
        # say which model the name stands for when the table reads it as another
        shown = (
            name if (canonical_gpu(name) or row.gpu) in (row.gpu, name) else f"{name} (= {row.gpu})"
        )
        out.append(
            rent_vs_own(
                model=shown,
                gpu_hours=float(mine["gpu_hours"].sum()),
                util_pct=util_pct,
                hours_in_period=hours_in_week,
                owned=o,
                rent_usd_per_gpu_hour=rate,
            )
        )
    return out
