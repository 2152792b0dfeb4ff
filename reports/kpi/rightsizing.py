"""Right-sizing: which runs could have run on a cheaper GPU model, and the saving.

A suggestion must hold the run's memory peak with headroom AND the compute it used: utilization
× the current GPU's 16-bit tensor peak (bf16, or fp16 where the GPU has no bf16) must fit
under the target utilization of the candidate's peak, so the job would take the same hours
there. A GPU without a published peak, or a workstation or GeForce card, is never suggested,
and a run without one is not judged.
A run on a whole GPU that MIG can split may be suggested a slice of it instead
(:data:`tracker.shares.PROFILES`): the slice's memory, its compute slices' share of the peak,
at that share of the run's own price (a notebook at 10% of an H100 with 6 GiB fits a
``1g.10gb``: 1/7 of the GPU). A run on a MIG instance or a time-sliced GPU is not judged: it
already holds a share.
An idle run gets no suggestion: the answer there is to release the GPU, not a smaller one."""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.kpi.frames import shared_objects
from tracker.cost import Thresholds
from tracker.peaks import PEAKS, peak_key
from tracker.prices import PriceTable, canonical_gpu, is_datacenter
from tracker.shares import PROFILES, USABLE_GIB_PER_GB, mig_slice

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

READS = (
    *COLUMNS[:6],
    "gpu_hours",
    "spend_usd",
    "idle_usd",
    "priced",
    "verdict",
    "mig_profile",
    "gpu_split",
)
"""The columns of a week's rows :func:`rightsizing` reads (the first six it writes as read)."""


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
    # (price row, its memory, its 16-bit peak) of every model that can be judged
    priced = [
        (p, float(p.mem_gib), pk)
        for p in prices.rows()
        if p.mem_gib and is_datacenter(p.gpu) and (pk := half_peak_tflops(p.gpu))
    ]
    empty = pd.DataFrame([], columns=COLUMNS)
    if per.empty or not priced:
        return empty
    # column by column (a week may hold a million runs); one peak per model name
    util = per["utilization_pct"].astype(float).to_numpy()
    mem = per["mem_peak_gib"].astype(float).to_numpy()
    hours = per["gpu_hours"].astype(float).to_numpy()
    spend = per["spend_usd"].astype(float).to_numpy()
    model, models = pd.factorize(per["gpu_model"])
    peaks = [half_peak_tflops(m) if isinstance(m, str) else None for m in models]
    model_peak = np.array([np.nan if p is None else p for p in peaks], dtype=float)
    # NaN: no name, no peak
    peak = np.where(model >= 0, model_peak[model] if len(models) else np.nan, np.nan)
    idle = per["idle_usd"].astype(float).to_numpy() if "idle_usd" in per else np.zeros(len(per))
    half_spend = 0.5 * np.where(np.isnan(spend), 0.0, spend)
    with np.errstate(invalid="ignore", divide="ignore"):
        judged = (
            ~np.isnan(util)
            & (util < max_util_pct)
            & ~np.isnan(mem)
            & per["priced"].astype(bool).to_numpy()
            & (hours > 0)
            & ~np.isnan(peak)
            # mostly idle: the answer is to release the GPU, not a smaller one
            & ~((np.where(np.isnan(idle), -np.inf, idle) >= half_spend) & (half_spend > 0))
        )
        if "verdict" in per:
            judged &= (per["verdict"] != "idle").to_numpy()
        for shared in ("mig_profile", "gpu_split"):  # it holds a share already
            if shared in per:
                judged &= per[shared].isna().to_numpy()
        need = util / 100.0 * peak
        current = spend / hours
    best = np.full(len(per), -1)
    best_price = np.full(len(per), np.inf)
    for j, (p, p_mem, p_peak) in enumerate(priced):  # the first of the cheapest, as min() takes
        fits = (
            judged
            & (p_mem >= mem * headroom)
            & (need <= target_util_pct / 100.0 * p_peak)
            & (p.usd_per_gpu_hour < current)
            & (p.usd_per_gpu_hour < best_price)
        )
        best[fits], best_price[fits] = j, p.usd_per_gpu_hour
    # (name, memory GiB, 16-bit peak, the peak in words) of each candidate: models, then slices
    cands = [(p.gpu, p_mem, p_peak, f"{p_peak:g}") for p, p_mem, p_peak in priced]
    for m, name in enumerate(models):
        key = canonical_gpu(name) if isinstance(name, str) else None
        whole = model_peak[m] if len(models) else np.nan
        for profile in PROFILES.get(key or "", ()):
            found = mig_slice(profile, name)
            if found is None or np.isnan(whole):
                continue
            share, usable = found.share(), USABLE_GIB_PER_GB * found.mem_gb
            slice_price = current * share
            fits = (
                judged
                & (model == m)
                & (usable >= mem * headroom)
                & (need <= target_util_pct / 100.0 * whole * share)
                & (slice_price < best_price)
            )
            of_whole = f"{found.compute}/{found.compute_of} of {whole:g}"
            cands.append((f"{key} MIG {profile}", usable, whole * share, of_whole))
            best[fits], best_price[fits] = len(cands) - 1, slice_price[fits]
    at = np.flatnonzero(best >= 0)
    if not len(at):
        return empty
    picked = per.iloc[at]
    pick = best[at]
    price = best_price[at]
    suggested = np.array([c[0] for c in cands], dtype=object)[pick]
    mem_at, util_at = mem[at], util[at]
    # the text is one per (memory, utilization, peak, suggestion): made once for each (a week
    # of a million runs has a few hundred texts), keyed by the figures' bits (-0.0 is no 0.0)
    combos = pd.DataFrame(
        {
            "mem": mem_at.view(np.int64),
            "util": util_at.view(np.int64),
            "peak": peak[at].view(np.int64),
            "best": pick,
        }
    )
    codes = combos.groupby(list(combos.columns), sort=False).ngroup().to_numpy()
    _, firsts = np.unique(codes, return_index=True)
    texts = np.array(
        [
            f"{m:.1f} GiB × {headroom:g} fits {best_mem:g} GiB; "
            f"{u:.1f}% of {pk:g} = {nd:.0f} TFLOP/s (16-bit) "
            f"fits {target_util_pct:.0f}% of its {words} = "
            f"{target_util_pct / 100.0 * best_peak:.0f}: the same hours"
            for m, u, pk, nd, (_, best_mem, best_peak, words) in zip(
                mem_at[firsts].tolist(),
                util_at[firsts].tolist(),
                peak[at][firsts].tolist(),
                need[at][firsts].tolist(),
                [cands[j] for j in pick[firsts].tolist()],
                strict=True,
            )
        ],
        dtype=object,
    )
    rows = {
        "run_id": picked["run_id"].to_numpy(dtype=object),
        "name": picked["name"].to_numpy(dtype=object),
        "team": shared_objects(picked["team"]),
        "gpu_model": shared_objects(picked["gpu_model"]),
        "utilization_pct": util_at,
        "mem_peak_gib": mem_at,
        "suggested_gpu": pd.Series(suggested, dtype=object),
        "saving_usd": hours[at] * (current[at] - price),
        # one object per distinct sentence, kept as objects (as text: a copy of each row's)
        "assumption": pd.Series(texts[codes], dtype=object),
    }
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(
        "saving_usd", ascending=False, ignore_index=True
    )
