"""Combining figures across the ranks of a multi-GPU run: pure functions over plain vectors.

Each rank samples only its own GPUs. At log steps (and once at the end) every rank contributes a
fixed-order vector of floats (NaN = unknown) to one small all-gather; global rank 0 combines
them: sums for what adds up (cost, power, throughput), GPU-weighted means for utilizations,
and the spread that a mean hides (min, max, slowest rank).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tracker.cost import weighted_util_pct
from tracker.metrics import METRICS

NAN = math.nan

_SUM = {
    "gpu/power_w",
    "gpu/energy_kwh",
    "gpu/co2e_kg",
    "perf/samples_per_s",
    "perf/tokens_per_s",
    "perf/tflops",
    "cost/usd",
    "cost/usd_per_hour",
    "cost/waste_usd",
}
_MAX = {"gpu/temp_c"}
_MEAN = {"perf/step_time_ms", "perf/data_wait_pct"}
# everything else in METRICS is a GPU-weighted mean (utilizations, memory, clocks, MFU),
# except the unit costs, derived from the sums below
_DERIVED = {"cost/usd_per_1k_samples", "cost/usd_per_1m_tokens"}

# what a rank sends at a log step: the metric keys, then three raw counts
METRIC_KEYS: tuple[str, ...] = tuple(m.key for m in METRICS)
COUNT_KEYS = ("_gpus", "_samples", "_tokens")

# what a rank sends for the run record: cumulative figures since the run started
RECORD_KEYS: tuple[str, ...] = (
    "gpu_count",
    "gpu_held",
    "gpu_hours",
    "util_pct",
    "sm_active_pct",
    "ofu",
    "mem_peak_gib",
    "mem_total_gib",
    "energy_kwh",
    "steps",
    "samples",
    "tokens",
    "samples_per_s",
    "tokens_per_s",
    "flops_per_s",
    "data_wait_pct",
    "step_time_ms",
    "cost_usd",
    "waste_usd",
    "idle_usd",
    "idle_gpu_s",
    "idle_gpus",
    "throttled_gpu_s",
    "throttle_sampled_s",
    "sm_active_sampled_s",
)


def to_vector(values: Mapping[str, float | None], keys: Sequence[str]) -> list[float]:
    return [NAN if (v := values.get(k)) is None else float(v) for k in keys]


def from_vector(vector: Sequence[float], keys: Sequence[str]) -> dict[str, float | None]:
    return {k: (None if math.isnan(v) else v) for k, v in zip(keys, vector, strict=True)}


def _known(pairs: Sequence[tuple[float | None, float]]) -> list[tuple[float, float]]:
    return [(v, w) for v, w in pairs if v is not None]


def weighted_mean(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """The mean of the known values of ``(value, weight)`` pairs, by weight (GPU-hours, GPUs,
    GPU-seconds); None where none is known or the weights add to nothing."""
    known = _known(list(pairs))
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if known and total > 0 else None


def _spread(
    values: Sequence[float | None],
) -> tuple[float | None, float | None, int | None, float | None]:
    """(min, max, index of max, (max - min) / mean in %) of the known values."""
    known = [(v, i) for i, v in enumerate(values) if v is not None]
    if not known:
        return None, None, None, None
    lo, hi = min(v for v, _ in known), max(known)
    mean = sum(v for v, _ in known) / len(known)
    return lo, hi[0], hi[1], (100.0 * (hi[0] - lo) / mean if mean > 0 else 0.0)


def combine_metrics(ranks: Sequence[Mapping[str, float | None]]) -> dict[str, float]:
    """Per-rank log-step metrics (with the ``_gpus``/``_samples``/``_tokens`` counts) → the
    run's metrics, plus ``gpu/util_pct_min|max``, ``perf/step_time_ms_max``,
    ``perf/slowest_rank`` and ``perf/rank_spread_pct``. Index = global rank."""
    out: dict[str, float] = {}
    gpus = [r.get("_gpus") or 0.0 for r in ranks]
    for key in METRIC_KEYS:
        values = [r.get(key) for r in ranks]
        known = [v for v in values if v is not None]
        if not known or key in _DERIVED:
            continue
        if key in _SUM:
            out[key] = sum(known)
        elif key in _MAX:
            out[key] = max(known)
        elif key in _MEAN:
            out[key] = sum(known) / len(known)
        elif (w := weighted_mean(list(zip(values, gpus, strict=True)))) is not None:
            out[key] = w
    cost = out.get("cost/usd")
    samples = sum(r.get("_samples") or 0.0 for r in ranks)
    tokens = sum(r.get("_tokens") or 0.0 for r in ranks)
    if cost is not None and samples:
        out["cost/usd_per_1k_samples"] = 1000.0 * cost / samples
    if cost is not None and tokens:
        out["cost/usd_per_1m_tokens"] = 1e6 * cost / tokens
    lo, hi, _, _ = _spread([r.get("gpu/util_pct") for r in ranks])
    if lo is not None and hi is not None:
        out["gpu/util_pct_min"], out["gpu/util_pct_max"] = lo, hi
    _, slowest_ms, slowest, spread = _spread([r.get("perf/step_time_ms") for r in ranks])
    if slowest_ms is not None and slowest is not None and spread is not None:
        out["perf/step_time_ms_max"] = slowest_ms
        out["perf/slowest_rank"] = float(slowest)
        out["perf/rank_spread_pct"] = spread
    return out


def combine_records(ranks: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Per-rank cumulative figures (:data:`RECORD_KEYS`) → the run's, counting every GPU of
    every rank. Also ``rank_spread_pct`` of the step time."""
    gpus = [r.get("gpu_count") or 0.0 for r in ranks]
    hours = [r.get("gpu_hours") or 0.0 for r in ranks]

    def total(key: str) -> float | None:
        known = [v for r in ranks if (v := r.get(key)) is not None]
        return sum(known) if known else None

    def by_hours(key: str) -> float | None:
        return weighted_mean(list(zip((r.get(key) for r in ranks), hours, strict=True)))

    def util_by_hours(key: str) -> float | None:
        known = _known(list(zip((r.get(key) for r in ranks), hours, strict=True)))
        return weighted_util_pct(sum(v * h for v, h in known), sum(h for _, h in known))

    waits = [v for r in ranks if (v := r.get("data_wait_pct")) is not None]
    steps = [r.get("step_time_ms") for r in ranks]
    known_steps = [v for v in steps if v is not None]
    peaks = [v for r in ranks if (v := r.get("mem_peak_gib")) is not None]
    sampled = [v for r in ranks if (v := r.get("throttle_sampled_s")) is not None]
    sm_sampled = [v for r in ranks if (v := r.get("sm_active_sampled_s")) is not None]
    return {
        "gpu_count": sum(gpus),
        "gpu_held": total("gpu_held"),
        "gpu_hours": sum(hours),
        "util_pct": util_by_hours("util_pct"),
        "sm_active_pct": util_by_hours("sm_active_pct"),
        "ofu": by_hours("ofu"),
        "mem_peak_gib": max(peaks) if peaks else None,
        "mem_total_gib": by_hours("mem_total_gib"),
        "energy_kwh": total("energy_kwh"),
        "steps": ranks[0].get("steps"),
        "samples": total("samples"),
        "tokens": total("tokens"),
        "samples_per_s": total("samples_per_s"),
        "tokens_per_s": total("tokens_per_s"),
        "flops_per_s": total("flops_per_s"),
        # one rank waiting for data holds every rank up at the next all-reduce: the worst counts
        "data_wait_pct": max(waits) if waits else None,
        "step_time_ms": sum(known_steps) / len(known_steps) if known_steps else None,
        "cost_usd": total("cost_usd"),
        "waste_usd": total("waste_usd"),
        "idle_usd": total("idle_usd"),
        "idle_gpu_s": total("idle_gpu_s"),
        "idle_gpus": total("idle_gpus"),
        "throttled_gpu_s": total("throttled_gpu_s"),
        # any rank's sampled figure makes the run's sampled, at the widest interval
        "throttle_sampled_s": max(sampled) if sampled else None,
        "sm_active_sampled_s": max(sm_sampled) if sm_sampled else None,
        "rank_spread_pct": _spread(steps)[3],
    }


def log_vector(
    metrics: Mapping[str, float | None],
    counts: Mapping[str, float],
    figures: Mapping[str, float | None],
) -> list[float]:
    """What a rank sends at a log step: its window's metrics, its raw counts
    (:data:`COUNT_KEYS`) and its cumulative figures (:data:`RECORD_KEYS`)."""
    return to_vector({**metrics, **counts}, METRIC_KEYS + COUNT_KEYS) + to_vector(
        figures, RECORD_KEYS
    )


def split_log_vectors(
    gathered: Sequence[Sequence[float]],
) -> tuple[list[dict[str, float | None]], list[dict[str, float | None]]]:
    """Every rank's :func:`log_vector`, as (metrics with counts, figures) per rank."""
    split = len(METRIC_KEYS) + len(COUNT_KEYS)
    return (
        [from_vector(v[:split], METRIC_KEYS + COUNT_KEYS) for v in gathered],
        [from_vector(v[split:], RECORD_KEYS) for v in gathered],
    )


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where this process sits in a multi-GPU run. ``gather`` is the one small all-gather (a
    list of floats per rank), called at log steps and once at the end, never per step."""

    rank: int = 0
    world_size: int = 1
    nodes: int = 1
    gather: Callable[[list[float]], list[list[float]]] | None = None
