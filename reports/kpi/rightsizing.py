"""Right-sizing: which runs could have run on a cheaper GPU model, and the saving."""

from __future__ import annotations

import pandas as pd

from tracker.cost import Thresholds
from tracker.prices import PriceTable


def rightsizing(per: pd.DataFrame, prices: PriceTable, *,
                max_util_pct: float = Thresholds().underutilized_pct,
                headroom: float = 1.2) -> pd.DataFrame:
    """Runs that used little of a big GPU: the cheapest model in the price table whose memory
    holds the run's peak (× ``headroom``), and what the week would have cost less on it."""
    rows = []
    priced = [p for p in prices.rows() if p.mem_gib]
    for r in per.itertuples(index=False):
        if (pd.isna(r.utilization_pct) or r.utilization_pct >= max_util_pct
                or pd.isna(r.mem_peak_gib) or not r.priced or r.gpu_hours <= 0):
            continue
        current = r.spend_usd / r.gpu_hours
        fits = [p for p in priced if p.mem_gib >= r.mem_peak_gib * headroom
                and p.usd_per_gpu_hour < current]
        if not fits:
            continue
        best = min(fits, key=lambda p: p.usd_per_gpu_hour)
        rows.append({"run_id": r.run_id, "name": r.name, "team": r.team,
                     "gpu_model": r.gpu_model, "utilization_pct": r.utilization_pct,
                     "mem_peak_gib": r.mem_peak_gib, "suggested_gpu": best.gpu,
                     "saving_usd": r.gpu_hours * (current - best.usd_per_gpu_hour)})
    cols = ["run_id", "name", "team", "gpu_model", "utilization_pct", "mem_peak_gib",
            "suggested_gpu", "saving_usd"]
    return pd.DataFrame(rows, columns=cols).sort_values("saving_usd", ascending=False,
                                                        ignore_index=True)
