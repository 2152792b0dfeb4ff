"""A run's figures from what was measured: pure functions of the sampler's aggregates
(:class:`tracker.sampler.GpuStats`), the step counters (:class:`tracker.throughput.StepCounter`),
the price and the thresholds. No clock, no thread, no I/O: the session passes the numbers in.

- :func:`window_metrics`: the live metrics of one log window (the names of
  :mod:`tracker.metrics`);
- :func:`run_figures`: the run's cumulative figures (:data:`tracker.ranks.RECORD_KEYS`), which
  ranks add up and the run record carries;
- :func:`evidence`: what :func:`tracker.diagnosis.diagnose` judges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tracker.cost import GpuUse, Thresholds, run_cost, weighted_util_pct
from tracker.diagnosis import Evidence, diagnose
from tracker.gpu.base import GpuInfo, GpuReading
from tracker.metrics import per_gpu_key
from tracker.peaks import TENSOR_DTYPES, Denominator, judge, ofu_gap
from tracker.ranks import weighted_mean
from tracker.sampler import GpuStats
from tracker.throughput import StepCounter
from tracker.units import j_to_kwh, s_to_hours


def mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def weighted_util(stats: Iterable[GpuStats], field: str = "util_pct") -> float | None:
    """GPU-time-weighted mean over GPUs (not a mean of means); with no time covered yet, the
    mean of the latest readings."""
    tws = [s.tw[field] for s in stats]
    util = weighted_util_pct(sum(tw.total for tw in tws), sum(tw.seconds for tw in tws))
    return util if util is not None else mean(tw.last for tw in tws)


def sm_active(stats: Iterable[GpuStats]) -> tuple[float, bool] | None:
    """SM activity over the GPUs, %, weighted by each one's time (a GPU's own figure is its
    cycle counters' where they were read, else its gauge's time-weighted mean:
    :meth:`GpuStats.sm_active`), and whether every GPU's is counter-exact; None: none
    measured it."""
    total = seconds = 0.0
    exact = True
    found = []
    for s in stats:
        if (own := s.sm_active()) is None:
            continue
        value, counted = own
        weight = s.seconds if counted else s.tw["sm_active_pct"].seconds
        found.append(value)
        total += value * weight
        seconds += weight
        exact = exact and counted
    if not found:
        return None
    return (total / seconds if seconds > 0 else sum(found) / len(found)), exact


def gpu_metrics(
    window: Mapping[str, GpuStats],
    last: Mapping[str, GpuReading],
    per_gpu: Sequence[GpuInfo] = (),
    *,
    run: bool = False,
) -> dict[str, float]:
    """``gpu/*`` of one log window: ``window`` the GPUs' aggregates since the last log,
    ``last`` their latest readings, ``per_gpu`` the GPUs to report one by one too. ``run``:
    ``window`` is the whole run's, for its summary: power is the run's mean draw and the
    temperature the hottest GPU's peak, not the latest readings'."""
    out: dict[str, float | None] = {}
    stats = list(window.values())
    out["gpu/util_pct"] = weighted_util(stats)
    for f in ("sm_active_pct", "tensor_active_pct", "dram_active_pct", "sm_clock_mhz"):
        out[f"gpu/{f}"] = mean(s.mean(f) for s in stats)
    mem = mean(s.mean("mem_used_gib") for s in stats)
    total = mean(s.mem_total_gib for s in stats)
    out["gpu/mem_used_gib"] = mem
    out["gpu/mem_used_pct"] = 100.0 * mem / total if mem is not None and total else None
    if run:
        powers = [p for s in stats if (p := s.mean("power_w")) is not None]
        temps = [s.tw["temp_c"].max for s in stats if s.tw["temp_c"].seconds > 0]
    else:
        powers = [r.power_w for r in last.values() if r.power_w is not None]
        temps = [r.temp_c for r in last.values() if r.temp_c is not None]
    out["gpu/power_w"] = sum(powers) if powers else None
    out["gpu/temp_c"] = max(temps, default=None)
    for g in per_gpu:
        if g.uuid in window:
            out[per_gpu_key(g.index, "gpu/util_pct")] = window[g.uuid].mean("util_pct")
            out[per_gpu_key(g.index, "gpu/mem_used_gib")] = window[g.uuid].mean("mem_used_gib")
    return {k: v for k, v in out.items() if v is not None}


def window_metrics(
    steps: StepCounter,
    fig: Mapping[str, float | None],
    *,
    peak: Denominator | None,
    gpu_count: float,
    usd_per_gpu_hour: float | None,
    co2e_kg_per_kwh: float | None = None,
    world_size: int = 1,
) -> dict[str, float]:
    """``perf/*``, ``cost/*``, ``gpu/energy_kwh`` and ``gpu/co2e_kg`` of one log window:
    ``steps`` counted over the window, ``fig`` the run's :func:`run_figures` so far,
    ``co2e_kg_per_kwh`` the kg CO2e of a kWh of GPU energy here (PUE × grid intensity).
    ``perf/mfu`` against ``peak``; left out where the rate is over the peak (an error the
    record names, :func:`tracker.peaks.judge`)."""
    out: dict[str, float | None] = {
        "perf/step_time_ms": steps.step_time_ms,
        "perf/data_wait_pct": steps.data_wait_pct,
        "perf/samples_per_s": steps.rate(steps.samples),
        "perf/tokens_per_s": steps.rate(steps.tokens),
    }
    flops_per_s = steps.rate(steps.flops)
    if flops_per_s is not None:
        out["perf/tflops"] = flops_per_s / 1e12
        out["perf/mfu"] = judge(flops_per_s, peak, gpu_count, world_size=world_size)[0]
    if (ofu := fig.get("ofu")) is not None:
        out["perf/ofu"] = ofu
    energy = out["gpu/energy_kwh"] = fig["energy_kwh"]
    out["gpu/co2e_kg"] = (
        energy * co2e_kg_per_kwh if energy is not None and co2e_kg_per_kwh is not None else None
    )
    cost = fig["cost_usd"]
    out["cost/usd"] = cost
    out["cost/usd_per_hour"] = (
        usd_per_gpu_hour * gpu_count if usd_per_gpu_hour is not None and gpu_count else None
    )
    out["cost/waste_usd"] = fig["waste_usd"]
    samples, tokens = fig["samples"], fig["tokens"]
    if cost is not None:
        out["cost/usd_per_1k_samples"] = 1000 * cost / samples if samples else None
        out["cost/usd_per_1m_tokens"] = 1e6 * cost / tokens if tokens else None
    return {k: v for k, v in out.items() if v is not None}


def gpu_use(
    stats: GpuStats,
    idle_s: float = 0.0,
    idle_util_s: float = 0.0,
    *,
    held_s: float | None = None,
    share: float = 1.0,
) -> GpuUse:
    """One GPU's :class:`GpuUse` from its run aggregates and its idle detector's counts; a
    single reading (no interval yet) stands for the span. ``held_s``: its own time, when not
    the run's span; ``share``: the share of a physical GPU it is."""
    tw = stats.tw["util_pct"]
    if tw.seconds > 0 or tw.last is None:
        return GpuUse(
            known_s=tw.seconds,
            util_s=tw.total,
            idle_s=idle_s,
            idle_util_s=idle_util_s,
            held_s=held_s,
            share=share,
        )
    return GpuUse(known_s=1.0, util_s=tw.last, held_s=held_s, share=share)


IDLE_SHARE = 0.5
"""The share of a GPU's own time in idle stretches from which it counts as idle (``idle_gpus``):
a run holding it is ``imbalanced`` when the others worked."""


def run_figures(
    *,
    duration_s: float,
    gpu_count: int,
    stats: Sequence[GpuStats],
    idle: Sequence[tuple[float, float]] = (),
    own_time: bool = False,
    usd_per_gpu_hour: float | None,
    thresholds: Thresholds,
    total: StepCounter,
    steps: int,
    samples: float,
    tokens: float,
    interval_s: float = 1.0,
    shares: Sequence[float] = (),
    peak_mhz: float | None = None,
) -> dict[str, float | None]:
    """One process's cumulative figures since the run started (:data:`tracker.ranks.RECORD_KEYS`):
    ``gpu_count`` GPUs held for ``duration_s``, ``stats`` their aggregates over the run, ``idle``
    each one's idle seconds and Σ util × idle seconds (in the order of ``stats``), ``total``
    the measured (post-warm-up) steps, ``steps``/``samples``/``tokens`` every step's counts.
    ``own_time``: each GPU's waste is judged on the seconds it covered (``GpuStats.seconds``:
    an import whose GPUs were logged for different lengths, ``duration_s`` their mean), not on
    ``duration_s``. ``interval_s``: the sampling interval, the bound of a throttled time that
    was sampled rather than counted (``throttle_sampled_s``: 0 where every GPU's is
    counter-exact). ``shares``: the share of a physical GPU each GPU is (in the order of
    ``stats``; a MIG instance's slices, :meth:`tracker.gpu.base.GpuInfo.share`; missing: 1):
    GPU-hours, dollars and throttled time count physical GPUs' worth (``gpu_held``).
    ``peak_mhz``: the SM clock the GPU's peak is quoted at, for the observed FLOPs utilization
    (``ofu``, each GPU's weighted by the GPU-time it held)."""
    hours = s_to_hours(max(duration_s, 0.0))
    idle_each = [*idle, *[(0.0, 0.0)] * (len(stats) - len(idle))]
    share_each = [*shares, *[1.0] * (max(len(stats), gpu_count) - len(shares))]
    held = sum(share_each[:gpu_count])
    idle_gpu_s = sum(i[0] for i in idle_each)
    cost = waste = idle_cost = None
    if usd_per_gpu_hour is not None and gpu_count:
        c = run_cost(
            gpu_hours_each=hours,
            gpu_count=held,
            usd_per_gpu_hour=usd_per_gpu_hour,
            gpus=[
                gpu_use(s, *i, held_s=s.seconds if own_time else None, share=share)
                for s, i, share in zip(stats, idle_each, share_each, strict=False)
            ],
            target_util_pct=thresholds.target_util_pct,
        )
        cost, waste, idle_cost = c.spend_usd, c.waste_usd, c.idle_usd
    energies = [e for s in stats if (e := s.energy_j) is not None]
    throttles: list[tuple[float, bool]] = []  # each GPU's throttled seconds, its share's worth
    for s, share in zip(stats, share_each, strict=False):
        if (throttled := s.throttled_s) is not None:
            throttles.append((throttled[0] * share, throttled[1]))
    sm = sm_active(stats)
    ofu = weighted_mean(
        (s.ofu(peak_mhz), s.seconds * share) for s, share in zip(stats, share_each, strict=False)
    )
    # GPUs idle most of the run: their utilization over all their known time under the
    # threshold, or half or more of their own time in idle stretches (one GPU at work and one
    # idle for 70 of 120 minutes is a launcher's fault, not a small batch)
    means = [weighted_util_pct(u.util_s, u.known_s) for u in map(gpu_use, stats)]
    idle_gpus = sum(
        (m is not None and m < thresholds.idle_pct) or (held > 0 and i[0] >= IDLE_SHARE * held)
        for m, i, held in zip(
            means, idle_each, (s.seconds or duration_s for s in stats), strict=False
        )
    )
    return {
        "gpu_count": float(gpu_count),
        "gpu_held": held,
        "gpu_hours": held * hours,
        "util_pct": weighted_util(stats),
        "sm_active_pct": None if sm is None else sm[0],
        "ofu": ofu,
        "mem_peak_gib": max(
            (s.mem_peak_gib for s in stats if s.mem_peak_gib is not None), default=None
        ),
        "mem_total_gib": mean(s.mem_total_gib for s in stats),
        "energy_kwh": j_to_kwh(sum(energies)) if energies else None,
        "steps": float(steps),
        "samples": float(samples),
        "tokens": float(tokens),
        "samples_per_s": total.rate(total.samples),
        "tokens_per_s": total.rate(total.tokens),
        "flops_per_s": total.rate(total.flops),
        "data_wait_pct": total.data_wait_pct,
        "step_time_ms": total.step_time_ms,
        "cost_usd": cost,
        "waste_usd": waste,
        "idle_usd": idle_cost,
        "idle_gpu_s": idle_gpu_s,
        "idle_gpus": float(idle_gpus),
        "throttled_gpu_s": sum(t for t, _ in throttles) if throttles else None,
        "throttle_sampled_s": (
            (0.0 if all(exact for _, exact in throttles) else interval_s) if throttles else None
        ),
        "sm_active_sampled_s": None if sm is None else (0.0 if sm[1] else interval_s),
    }


def evidence(
    fig: Mapping[str, float | None],
    *,
    duration_s: float,
    run_mfu: float | None,
    rank_spread_pct: float | None,
    device: str | None = None,
) -> Evidence:
    """What the diagnosis judges, from :func:`run_figures` (of one process or every rank)."""
    mem_peak, mem_total = fig["mem_peak_gib"], fig["mem_total_gib"]
    return Evidence(
        util_pct=fig["util_pct"],
        duration_s=duration_s,
        gpu_count=int(fig["gpu_count"] or 0),
        idle_gpu_s=fig["idle_gpu_s"] or 0.0,
        sm_active_pct=fig["sm_active_pct"],
        mem_used_pct=100 * mem_peak / mem_total if mem_peak is not None and mem_total else None,
        data_wait_pct=fig["data_wait_pct"],
        step_time_ms=fig["step_time_ms"],
        mfu=run_mfu,
        rank_spread_pct=rank_spread_pct,
        idle_gpus=int(fig.get("idle_gpus") or 0),
        cost_usd=fig["cost_usd"],
        idle_usd=fig.get("idle_usd"),
        device=device,
        throttled_gpu_s=fig.get("throttled_gpu_s"),
    )


def record_fields(
    fig: Mapping[str, float | None],
    *,
    duration_s: float,
    peak: Denominator | None,
    rank_spread_pct: float | None,
    thresholds: Thresholds,
    device: str | None = None,
    world_size: int = 1,
) -> dict[str, Any]:
    """The run record's figures, MFU (with its denominator, or what stands instead:
    :func:`tracker.peaks.judge`; beside the hardware's OFU: :func:`tracker.peaks.ofu_gap`) and
    verdict from :func:`run_figures` (of one process, or every rank's combined): the
    :class:`tracker.record.RunRecord` fields they fill."""
    n = int(fig["gpu_count"] or 0)
    held = fig.get("gpu_held")
    run_mfu, note = judge(
        fig["flops_per_s"], peak, n if held is None else held, world_size=world_size
    )
    ofu = fig.get("ofu")
    tensor = peak is not None and peak.dtype in TENSOR_DTYPES  # fp32 runs on CUDA cores
    if note is None and run_mfu is not None and ofu is not None and tensor:
        # OFU is over the run's time, MFU over its measured steps': compared over the run
        in_steps = (fig.get("step_time_ms") or 0.0) * (fig.get("steps") or 0.0) / 1000.0
        share = min(in_steps / duration_s, 1.0) if duration_s > 0 and in_steps > 0 else 1.0
        note = ofu_gap(run_mfu * share, ofu)
    verdict = diagnose(
        evidence(
            fig,
            duration_s=duration_s,
            run_mfu=run_mfu,
            rank_spread_pct=rank_spread_pct,
            device=device,
        ),
        thresholds,
    )

    def count(key: str) -> int | None:
        return int(v) if (v := fig[key]) else None

    throttled_s, sampled_s = fig.get("throttled_gpu_s"), fig.get("throttle_sampled_s")

    return {
        "gpu_count": n,
        "gpu_hours": fig["gpu_hours"] or 0.0,
        "util_pct": fig["util_pct"],
        "sm_active_pct": fig["sm_active_pct"],
        "mem_peak_gib": fig["mem_peak_gib"],
        "mem_total_gib": fig["mem_total_gib"],
        "energy_kwh": fig["energy_kwh"],
        "samples": count("samples"),
        "tokens": count("tokens"),
        "samples_per_s": fig["samples_per_s"],
        "tokens_per_s": fig["tokens_per_s"],
        "mfu": run_mfu,
        "mfu_peak_tflops": peak.tflops if peak is not None else None,
        "mfu_dtype": peak.dtype if peak is not None and peak.tflops is not None else None,
        "mfu_dtype_from": peak.dtype_from if peak is not None else None,
        "mfu_note": note,
        "ofu": ofu,
        "data_wait_pct": fig["data_wait_pct"],
        "cost_usd": fig["cost_usd"],
        "waste_usd": fig["waste_usd"],
        "idle_usd": fig["idle_usd"],
        "verdict": verdict.verdict,
        "advice": verdict.advice or None,
        "throttled_gpu_hours": None if throttled_s is None else s_to_hours(throttled_s),
        "throttle_source": None if throttled_s is None else measured_by(sampled_s),
        "sm_active_source": (
            None if fig["sm_active_pct"] is None else measured_by(fig.get("sm_active_sampled_s"))
        ),
    }


COUNTER_EXACT = "counter"
"""A figure from cumulative counters' differences (:attr:`RunRecord.throttle_source`,
:attr:`RunRecord.sm_active_source`)."""


def sampled_every(source: str | None) -> float:
    """The interval a figure measured as ``source`` (:func:`measured_by`'s words) was sampled
    at, seconds; 0 for a counter's (or words that name no interval)."""
    prefix, _, rest = (source or "").partition("sampled every ")
    try:
        return float(rest.removesuffix(" s")) if not prefix and rest else 0.0
    except ValueError:
        return 0.0


def measured_by(sampled_s: float | None) -> str:
    """How a run's figure was measured, as the record keeps it: :data:`COUNTER_EXACT`, or
    ``sampled every N s`` (a gauge or a clock-event reason read at each reading)."""
    if not sampled_s:
        return COUNTER_EXACT
    return f"sampled every {sampled_s:g} s"
