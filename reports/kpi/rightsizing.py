"""Right-sizing: which runs could have run on a cheaper GPU model, and the saving.

A suggestion must hold the run's memory peak with headroom AND the compute it used: utilization
× the current GPU's 16-bit tensor peak (bf16, or fp16 where the GPU has no bf16) must fit
under the target utilization of the candidate's peak, so the job would take the same hours
there. A GPU without a published peak, or a workstation or GeForce card, is never suggested,
and a run without one is not judged.
An idle run gets no suggestion: the answer there is to release the GPU, not a smaller one."""

from __future__ import annotations

import pandas as pd

from tracker.cost import Thresholds
from tracker.peaks import PEAKS, peak_key
from tracker.prices import PriceTable, is_datacenter

COLUMNS = [
    "run_id",
    "name",
    "team",
    "gpu_model",
    "utilization_pct",
    "mem_peak_gib",
    "suggested_gpu",
    "saving_usd",
    "assumption",
]


def half_peak_tflops(model: str) -> float | None:
    """The 16-bit tensor peak (bf16, else fp16) of a model name, TFLOP/s; None when unknown."""
    key = peak_key(model)
    if key is None:
        return None
    t = PEAKS[key].tflops
    return t.get("bf16") or t.get("fp16")


def rightsizing(
    per: pd.DataFrame,
    prices: PriceTable,
    *,
    max_util_pct: float = Thresholds().underutilized_pct,
    target_util_pct: float = Thresholds().target_util_pct,
    headroom: float = 1.2,
) -> pd.DataFrame:
    """Runs that used little of a big GPU: the cheapest model in the price table whose memory
    holds the run's peak (× ``headroom``) and whose peak at ``target_util_pct`` covers the
    compute the run used, and what the week would have cost less on it."""
    rows = []
    # (price row, its memory, its 16-bit peak) of every model that can be judged
    priced = [
        (p, float(p.mem_gib), pk)
        for p in prices.rows()
        if p.mem_gib and is_datacenter(p.gpu) and (pk := half_peak_tflops(p.gpu))
    ]
    for r in per.itertuples(index=False):
        if (
            pd.isna(r.utilization_pct)
            or r.utilization_pct >= max_util_pct
            or pd.isna(r.mem_peak_gib)
            or not r.priced
            or r.gpu_hours <= 0
            or getattr(r, "verdict", None) == "idle"
            or (getattr(r, "idle_usd", 0) or 0) >= 0.5 * (r.spend_usd or 0) > 0
        ):
            continue
        peak = half_peak_tflops(str(r.gpu_model)) if isinstance(r.gpu_model, str) else None
        if peak is None:
            continue
        need = r.utilization_pct / 100.0 * peak
        current = r.spend_usd / r.gpu_hours
        fits = [
            (p, mem, pk)
            for p, mem, pk in priced
            if mem >= r.mem_peak_gib * headroom
            and need <= target_util_pct / 100.0 * pk
            and p.usd_per_gpu_hour < current
        ]
        if not fits:
            continue
        best, best_mem, best_peak = min(fits, key=lambda c: c[0].usd_per_gpu_hour)
        offer = target_util_pct / 100.0 * best_peak
        rows.append(
            {
                "run_id": r.run_id,
                "name": r.name,
                "team": r.team,
                "gpu_model": r.gpu_model,
                "utilization_pct": r.utilization_pct,
                "mem_peak_gib": r.mem_peak_gib,
                "suggested_gpu": best.gpu,
                "saving_usd": r.gpu_hours * (current - best.usd_per_gpu_hour),
                "assumption": (
                    f"{r.mem_peak_gib:.1f} GiB × {headroom:g} fits {best_mem:g} GiB; "
                    f"{r.utilization_pct:.1f}% of {peak:g} = {need:.0f} TFLOP/s (16-bit) "
                    f"fits {target_util_pct:.0f}% of its {best_peak:g} = {offer:.0f}: "
                    f"the same hours"
                ),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(
        "saving_usd", ascending=False, ignore_index=True
    )
