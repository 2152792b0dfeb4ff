"""The slow node: a recurring job whose runs on one node went slower than the same job's runs on
its other nodes, by more than the job's own noise. The machine's part of a run's GPU-time, not
the code's: the same work on a typical node would have taken that much less.

A run counts where it finished on one node (``nodes`` 1, a host named) with a throughput of its
own (samples per second, else tokens per second, per GPU: a job keeps the unit most of its
runs have). Per job key (:func:`reports.kpi.jobkeys.job_keys`) and node: the median of the
node's runs (at least :data:`MIN_RUNS_ON_NODE`) against the median of the runs on every other
node (at least :data:`MIN_RUNS_ELSEWHERE`, on at least one other node). The slowdown is
1 − node ÷ others; the noise is the job's spread, 1.4826 × the median absolute deviation of
all its runs ÷ the median elsewhere (a normal distribution's standard deviation, robust to an
odd run; the slow node's own runs widen it: a node that holds half the job's runs must stand
out the more). A node is named where the slowdown is over :data:`MIN_SLOWDOWN` and over
:data:`NOISE_TIMES` × the noise.
What it cost: each of the node's runs' GPU-hours × the slowdown (what the same work would not
have needed on a typical node), at the run's price.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from reports.kpi.jobkeys import job_keys
from reports.kpi.pricing import run_prices
from tracker.owned import OwnedGpu
from tracker.prices import PriceTable

MIN_RUNS_ON_NODE = 2
"""A node's runs of a job before its median is compared (one slow run is no slow node)."""
MIN_RUNS_ELSEWHERE = 3
"""The job's runs on its other nodes before they make a median and a spread."""
MIN_SLOWDOWN = 0.10
"""The smallest slowdown named, whatever the noise: 10%."""
NOISE_TIMES = 3.0
"""How many times the job's own spread a slowdown must be."""
MAD_TO_SD = 1.4826
"""A median absolute deviation × this = a normal distribution's standard deviation."""

SLOW_NODE_COLUMNS = (
    "job_key",
    "host",
    "team",
    "unit",
    "runs_on_node",
    "runs_elsewhere",
    "nodes_elsewhere",
    "throughput_node",
    "throughput_elsewhere",
    "slowdown_pct",
    "noise_pct",
    "gpu_hours",
    "lost_gpu_hours",
    "lost_usd",
)
"""A named slow node's row: its runs' throughput per GPU (median, ``unit`` per second) against
the job's runs elsewhere, and what the slowdown cost (``lost_usd`` NaN: unpriced)."""


def slow_nodes(
    runs: pd.DataFrame,
    *,
    among: np.ndarray | None = None,
    prices: Mapping[str, float] | None = None,
    owned: Mapping[str, OwnedGpu] | None = None,
) -> pd.DataFrame:
    """The slow nodes of ``runs`` (usable runs: :func:`reports.kpi.runs_frame`), most dollars
    lost first.

    Args:
        runs: The runs to compare (a week's, say).
        among: Which of ``runs`` to compare (a boolean mask; None: all): only the rows kept
            are copied (a million runs are not copied to find the few with a throughput).
        prices: The report's price overrides (``[prices]``).
        owned: The owned models (``[owned.<MODEL>]``).

    Returns:
        A frame of :data:`SLOW_NODE_COLUMNS`, one row per job key and node named.
    """
    empty = pd.DataFrame(columns=list(SLOW_NODE_COLUMNS))
    if not len(runs):
        return empty
    rates = {
        u: pd.to_numeric(runs[f"{u}_per_s"], errors="coerce").astype(float).to_numpy()
        for u in ("samples", "tokens")
    }
    gpus = pd.to_numeric(runs["gpu_count"], errors="coerce").astype(float).to_numpy()
    usable = _usable(runs, rates, gpus)
    if among is not None:
        usable &= among
    at = np.flatnonzero(usable)
    r = runs.iloc[at]
    host = r["host"].astype(object).where(r["host"].notna(), "").astype(str).str.strip()
    kept = ((r["status"].astype(object) == "finished") & (host != "")).to_numpy(dtype=bool)
    at, r, host = at[kept], r[kept], host[kept]
    if not len(r):
        return empty
    g = gpus[at]
    samples, tokens = rates["samples"][at] / g, rates["tokens"][at] / g
    price, _ = run_prices(r, PriceTable(prices or {}), owned)
    frame = pd.DataFrame(
        {
            "job_key": job_keys(r["name"], r["links"]).to_numpy(),
            "host": host.to_numpy(),
            "team": r["team"].astype(object).to_numpy(),
            "samples": samples,
            "tokens": tokens,
            "gpu_hours": pd.to_numeric(r["gpu_hours"], errors="coerce").astype(float).to_numpy(),
            "price": price.to_numpy(),
        }
    )
    frame = frame[frame["job_key"] != ""]
    rows = [row for _, of_key in frame.groupby("job_key", sort=True) for row in _of_key(of_key)]
    if not rows:
        return empty
    out = pd.DataFrame(rows, columns=list(SLOW_NODE_COLUMNS))
    return out.sort_values(
        ["lost_usd", "lost_gpu_hours", "job_key", "host"],
        ascending=[False, False, True, True],
        na_position="last",
    ).reset_index(drop=True)


def _usable(
    runs: pd.DataFrame,
    rates: Mapping[str, np.ndarray] | None = None,
    gpus: np.ndarray | None = None,
) -> np.ndarray:
    """Which runs have what a slow node is judged by: a throughput, GPUs and one node (the
    numbers alone: the text of the few left is read after)."""
    if rates is None:
        rates = {
            u: pd.to_numeric(runs[f"{u}_per_s"], errors="coerce").astype(float).to_numpy()
            for u in ("samples", "tokens")
        }
    if gpus is None:
        gpus = pd.to_numeric(runs["gpu_count"], errors="coerce").astype(float).to_numpy()
    nodes = pd.to_numeric(runs["nodes"], errors="coerce").astype(float).to_numpy()
    with np.errstate(invalid="ignore"):
        return ((rates["samples"] > 0) | (rates["tokens"] > 0)) & (gpus > 0) & ~(nodes > 1)


def _of_key(runs: pd.DataFrame) -> list[dict[str, object]]:
    """The slow nodes of one job key's runs: each node's runs a slice of the runs sorted by
    node and throughput, the median elsewhere found in the whole key's sorted throughputs less
    the node's (:func:`_kth_without`): a job of a million runs on a thousand nodes costs a sort
    and a few searches per node, not a pass over its runs per node."""
    # the unit most of its runs have; the runs without it are left out
    counts = {u: int((np.isfinite(runs[u]) & (runs[u] > 0)).sum()) for u in ("samples", "tokens")}
    unit = max(counts, key=lambda u: (counts[u], u == "samples"))
    values = runs[unit].to_numpy(dtype=float)
    known = np.isfinite(values) & (values > 0)
    if known.sum() < MIN_RUNS_ON_NODE + MIN_RUNS_ELSEWHERE:
        return []
    runs, values = runs[known], values[known]
    codes, names = pd.factorize(runs["host"].to_numpy(dtype=object), sort=True)
    order = np.lexsort((values, codes))  # by node (its number, not its text), then throughput
    codes, values = codes[order], values[order]
    held = runs["gpu_hours"].to_numpy(dtype=float)[order]
    price = runs["price"].to_numpy(dtype=float)[order]
    teams = runs["team"].to_numpy(dtype=object)[order]
    whole = np.sort(values)
    spread = MAD_TO_SD * float(np.median(np.abs(whole - np.median(whole))))
    _, first, sizes = np.unique(codes, return_index=True, return_counts=True)
    out: list[dict[str, object]] = []
    for node, at, n in zip(list(names), first.tolist(), sizes.tolist(), strict=True):
        if n < MIN_RUNS_ON_NODE or len(values) - n < MIN_RUNS_ELSEWHERE or len(names) < 2:
            continue
        here = values[at : at + n]  # sorted
        typical = _median_without(whole, here)
        noise = spread / typical
        slowdown = 1.0 - float(np.median(here)) / typical
        if slowdown <= max(MIN_SLOWDOWN, NOISE_TIMES * noise):
            continue
        lost = held[at : at + n] * slowdown
        paid = price[at : at + n]
        priced = np.isfinite(paid)
        mine = pd.Series(teams[at : at + n]).dropna()
        out.append(
            {
                "job_key": str(runs["job_key"].iat[0]),
                "host": str(node),
                "team": str(mine.mode().iat[0]) if len(mine) else "",
                "unit": unit,
                "runs_on_node": n,
                "runs_elsewhere": len(values) - n,
                "nodes_elsewhere": len(names) - 1,
                "throughput_node": float(np.median(here)),
                "throughput_elsewhere": typical,
                "slowdown_pct": 100.0 * slowdown,
                "noise_pct": 100.0 * noise,
                "gpu_hours": float(np.nansum(held[at : at + n])),
                "lost_gpu_hours": float(np.nansum(lost)),
                "lost_usd": float(np.nansum(lost[priced] * paid[priced]))
                if priced.any()
                else np.nan,
            }
        )
    return out


def _median_without(whole: np.ndarray, part: np.ndarray) -> float:
    """The median of the sorted ``whole`` less the sorted ``part`` (a sub-multiset of it), as
    :func:`numpy.median` of what is left would say."""
    m = len(whole) - len(part)
    if m % 2:
        return _kth_without(whole, part, m // 2)
    return (_kth_without(whole, part, m // 2 - 1) + _kth_without(whole, part, m // 2)) / 2.0


def _kth_without(whole: np.ndarray, part: np.ndarray, k: int) -> float:
    """The ``k``-th smallest (from 0) of the sorted ``whole`` less the sorted ``part``: the
    first value of ``whole`` with more than ``k`` of what is left at or under it (a binary
    search; how many of the rest lie at or under a value never falls as the value grows)."""
    lo, hi = 0, len(whole) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        v = whole[mid]
        left = np.searchsorted(whole, v, "right") - np.searchsorted(part, v, "right")
        if left >= k + 1:
            hi = mid
        else:
            lo = mid + 1
    return float(whole[lo])


LEDGER_COLUMNS = (
    "unmeasured_hours",
    "failed_hours",
    "waste_hours",
    "redone_hours",
    "throttled_hours",
)
"""A row's GPU-hours in the ledger's buckets before the slow node's (its cap)."""


def slow_node_work(
    per: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    prices: Mapping[str, float] | None = None,
    owned: Mapping[str, OwnedGpu] | None = None,
) -> tuple[pd.DataFrame, dict[pd.Timestamp, pd.DataFrame]]:
    """The ledger's slow node: each week's slow nodes judged among that week's runs
    (:func:`slow_nodes`), and each run row of a named job key on its node charged its GPU-hours
    there × the slowdown, at most what the earlier buckets leave of the row (not measured,
    failed, idle, below target, throttled: the throttled time may be why the node is slow).
    Each slow node's ``gpu_hours``, ``lost_gpu_hours`` and ``lost_usd`` are then its rows' sums,
    so that the section says the ledger's dollars.

    Args:
        per: The week rows (:func:`reports.kpi.weekly.run_weeks`' and the jobs', after
            :func:`reports.kpi.ledger.throttled_work`); changed in place.
        runs: The runs the rows are of (:func:`reports.kpi.runs_frame`).
        prices: The report's price overrides (``[prices]``).
        owned: The owned models (``[owned.<MODEL>]``).

    Returns:
        ``per`` with ``slow_node_hours`` (GPU-hours) and ``slow_node_usd`` (USD; NaN unpriced),
        and each week's slow nodes by its start (weeks with none left out).
    """
    from reports.kpi.frames import is_in, positions_in

    hours = np.zeros(len(per))
    found: dict[pd.Timestamp, pd.DataFrame] = {}
    is_run = (
        (per["kind"] == "run").to_numpy(dtype=bool) if "kind" in per else np.ones(len(per), bool)
    )
    usable = _usable(runs) if len(per) and len(runs) and is_run.any() else None
    if usable is not None and usable.any():
        # each row's run by position, once (not a look-up of the text ids per week)
        at = positions_in(per["run_id"], runs["id"])
        held = per["gpu_hours"].to_numpy(dtype=float)
        left = held - sum(per[c].to_numpy(dtype=float) for c in LEDGER_COLUMNS if c in per)
        codes, weeks = pd.factorize(per["week"], sort=True)
        for i, week in enumerate(weeks):
            mine = np.flatnonzero((codes == i) & is_run & (at >= 0))
            among = np.zeros(len(runs), dtype=bool)
            among[at[mine]] = True
            if not (among & usable).any():
                continue
            slow = slow_nodes(runs, among=among & usable, prices=prices, owned=owned)
            if not len(slow):
                continue
            on = mine[is_in(per["host"].iloc[mine], slow["host"])]
            keys = job_keys(per["name"].iloc[on], per["links"].iloc[on]).to_numpy(dtype=object)
            slowdown = {
                (k, h): s / 100.0
                for k, h, s in zip(slow["job_key"], slow["host"], slow["slowdown_pct"], strict=True)
            }
            where = per["host"].iloc[on].to_numpy(dtype=object)
            share = np.array([slowdown.get((k, h), 0.0) for k, h in zip(keys, where, strict=True)])
            hours[on] = np.clip(held[on] * share, 0.0, np.maximum(left[on], 0.0))
            price = per["price_per_gpu_hour"].to_numpy(dtype=float, na_value=np.nan)[on]
            rows = pd.DataFrame(
                {
                    "job_key": keys,
                    "host": where,
                    "gpu_hours": held[on],
                    "lost_gpu_hours": hours[on],
                    "lost_usd": np.where(np.isfinite(price), hours[on] * price, 0.0),
                    "priced": np.isfinite(price),
                }
            )
            found[pd.Timestamp(week)] = _as_ledger(slow, rows)
    per["slow_node_hours"] = hours
    per["slow_node_usd"] = hours * per["price_per_gpu_hour"].to_numpy(dtype=float, na_value=np.nan)
    return per, found


def _as_ledger(slow: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """``slow`` with each node's GPU-hours, lost GPU-hours and dollars its rows' sums
    (``rows``: ``job_key``, ``host``, ``gpu_hours``, ``lost_gpu_hours``, ``lost_usd``,
    ``priced``)."""
    sums = rows.groupby(["job_key", "host"], sort=False).agg(
        gpu_hours=("gpu_hours", "sum"),
        lost_gpu_hours=("lost_gpu_hours", "sum"),
        lost_usd=("lost_usd", "sum"),
        priced=("priced", "any"),
    )
    sums.loc[~sums["priced"], "lost_usd"] = np.nan
    out = slow.drop(columns=["gpu_hours", "lost_gpu_hours", "lost_usd"]).join(
        sums[["gpu_hours", "lost_gpu_hours", "lost_usd"]], on=["job_key", "host"]
    )
    out = out[list(SLOW_NODE_COLUMNS)]
    return out.sort_values(
        ["lost_usd", "lost_gpu_hours", "job_key", "host"],
        ascending=[False, False, True, True],
        na_position="last",
    ).reset_index(drop=True)
