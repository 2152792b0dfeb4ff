"""Name a run's main bottleneck and what to do about it, from what the tracker measured.

A pure function of the evidence; the thresholds (:class:`tracker.cost.Thresholds`) are the
configured ones, the evidence limits (:class:`Limits`) the design's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracker.cost import Thresholds

VERDICTS = (
    "idle",
    "imbalanced",
    "input-bound",
    "communication-bound",
    "small-batch",
    "low-efficiency",
    "below-target",
    "throttled",
    "healthy",
    "unknown",
)

ADVICE: dict[str, str] = {
    "idle": "The GPUs sat allocated but idle: release them (stop the job, shrink the "
    "reservation) instead of holding them.",
    "imbalanced": "Some of the run's GPUs worked while others sat idle most of the run: the job uses "
    "fewer GPUs than it holds. Request only the GPUs it uses, or check the launcher (one process "
    "per GPU: torchrun --nproc-per-node, CUDA_VISIBLE_DEVICES, a DistributedSampler).",
    "input-bound": "The loop waits for data: use 4-8 DataLoader workers per GPU, pin_memory=True, "
    "prefetch_factor, faster storage, and move transforms to the GPU.",
    "communication-bound": "Ranks wait for each other: overlap communication with compute, tune "
    "DDP bucket sizes, sync less often, and check the interconnect.",
    "small-batch": "Kernels are too small to fill the GPU: raise the batch size (or use gradient "
    "accumulation), and cut launch overhead with CUDA graphs or torch.compile.",
    "low-efficiency": "The GPU is busy but does little math per second: train in bf16/fp16, use "
    "fused kernels (FlashAttention), and make matmuls larger.",
    "below-target": "Utilization is under target with no single cause measured: profile a few "
    "steps (torch.profiler) and look for host syncs (.item(), .cpu()), logging and I/O.",
    "throttled": "The GPUs ran below their clocks for power or thermal reasons: the machine, not "
    "your code. Ask the cluster's operators to check the node's cooling and power caps "
    "(nvidia-smi -q -d PERFORMANCE names the reasons); the same job may finish sooner on "
    "another node.",
    "healthy": "",
    "unknown": "No GPU data was collected (NVML missing or no GPU): nothing to judge. "
    "Install nvidia-ml-py and check the driver.",
}
CPU_ADVICE = (
    "The trainer ran the model on the CPU. If it should train on a GPU, ask for one "
    '(Lightning: accelerator="gpu"; the Trainer: drop use_cpu) and check that '
    "torch.cuda.is_available() is True in the job."
)
"""What a run that chose the CPU and measured no GPU is told (not to install NVML)."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Where the evidence points to a cause; the utilization thresholds are
    :class:`tracker.cost.Thresholds`, shared with the reports."""

    input_wait_pct: float = 10.0
    input_wait_critical_pct: float = 20.0
    small_batch_mem_pct: float = 50.0
    small_batch_step_ms: float = 100.0
    low_sm_active_pct: float = 50.0
    low_mfu: float = 0.2
    """MFU under which a busy GPU is called inefficient; large transformer training reaches 0.35-0.6."""
    rank_spread_pct: float = 20.0
    throttled_share: float = 0.1
    """Share of the GPU-time held below the clocks (power, thermal) from which an otherwise
    healthy run is called throttled."""


@dataclass(frozen=True, kw_only=True)
class Evidence:
    util_pct: float | None
    """Time-weighted NVML utilization over the run's GPUs, 0-100; None when there was no GPU data."""
    duration_s: float
    gpu_count: int = 1
    idle_gpu_s: float = 0.0
    """GPU-seconds inside idle stretches (utilization under the idle threshold for the window)."""
    sm_active_pct: float | None = None
    mem_used_pct: float | None = None
    """Peak memory in use, share of the GPU's memory."""
    data_wait_pct: float | None = None
    step_time_ms: float | None = None
    mfu: float | None = None
    rank_spread_pct: float | None = None
    """Spread of step time across ranks, (slowest - fastest) / mean, percent."""
    idle_gpus: int = 0
    """GPUs idle most of the run: utilization over the whole run under the idle threshold, or
    half their time or more in idle stretches (:data:`tracker.figures.IDLE_SHARE`)."""
    cost_usd: float | None = None
    """What the run's GPU time cost (None: unpriced)."""
    idle_usd: float | None = None
    """What its GPU time in idle stretches cost (None: unpriced)."""
    device: str | None = None
    """``cpu`` when the trainer chose the CPU (:attr:`tracker.record.RunSpec.device`)."""
    throttled_gpu_s: float | None = None
    """GPU-seconds the clocks were held down for power or thermal reasons (None: not
    measured)."""


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    verdict: str
    severity: str
    """``ok``, ``warning``, ``critical`` or ``unknown``."""
    reason: str
    advice: str


def diagnose(e: Evidence, t: Thresholds | None = None, limits: Limits | None = None) -> Diagnosis:
    """The main bottleneck of a run, the evidence in one line, and the advice."""
    t = t or Thresholds()
    lim = limits or Limits()

    def verdict(name: str, severity: str, reason: str) -> Diagnosis:
        return Diagnosis(verdict=name, severity=severity, reason=reason, advice=ADVICE[name])

    if e.device == "cpu" and e.util_pct is None:  # not a missing NVML: no GPU was asked for
        return Diagnosis(
            verdict="unknown",
            severity="unknown",
            reason="trained on the CPU: no GPU to judge",
            advice=CPU_ADVICE,
        )
    gpu_s = e.duration_s * max(e.gpu_count, 1)
    if e.util_pct is not None and e.gpu_count > 1 and 0 < e.idle_gpus < e.gpu_count:
        usd = e.idle_usd
        if usd is None and e.cost_usd is not None:
            usd = e.cost_usd * e.idle_gpus / e.gpu_count
        held = f": ${usd:,.2f} of GPU time held idle" if usd is not None else ""
        return verdict(
            "imbalanced",
            "critical",
            f"{e.idle_gpus} of {e.gpu_count} GPUs idle most of the run (under {t.idle_pct:g}%)"
            f"{held}",
        )
    if e.util_pct is not None and (
        (gpu_s > 0 and e.idle_gpu_s >= 0.5 * gpu_s)
        or (e.util_pct < t.idle_pct and e.duration_s >= t.idle_window_s)
    ):
        return verdict(
            "idle",
            "critical",
            f"utilization {e.util_pct:.0f}%, under {t.idle_pct:.0f}% for "
            f"{max(e.idle_gpu_s / max(e.gpu_count, 1), e.duration_s) / 60:.0f} min",
        )
    if e.data_wait_pct is not None and e.data_wait_pct >= lim.input_wait_pct:
        severity = "critical" if e.data_wait_pct >= lim.input_wait_critical_pct else "warning"
        return verdict(
            "input-bound", severity, f"{e.data_wait_pct:.0f}% of step time spent waiting for data"
        )
    if e.util_pct is None:
        return verdict("unknown", "unknown", "no GPU data")
    if e.util_pct < t.idle_pct:
        # near 0% is GPU time held idle however short: never "raise the batch size"
        return verdict(
            "idle",
            "warning",
            f"utilization {e.util_pct:.0f}%, held idle for {e.duration_s / 60:.0f} min "
            f"(shorter than the {t.idle_window_min}-min idle window)",
        )
    below = e.util_pct < t.target_util_pct
    if (
        below
        and e.gpu_count > 1
        and e.rank_spread_pct is not None
        and e.rank_spread_pct >= lim.rank_spread_pct
    ):
        return verdict(
            "communication-bound",
            "warning",
            f"step time differs by {e.rank_spread_pct:.0f}% across ranks at "
            f"{e.util_pct:.0f}% utilization",
        )
    # small kernels need evidence: little memory in use, or few SMs active while the GPU is
    # busy; unknown memory is not small memory
    small_memory = e.mem_used_pct is not None and e.mem_used_pct < lim.small_batch_mem_pct
    few_sms = (
        e.sm_active_pct is not None
        and e.sm_active_pct < lim.low_sm_active_pct
        and e.util_pct >= t.underutilized_pct
        and (e.mem_used_pct is None or small_memory)
    )
    if (
        below
        and (small_memory or few_sms)
        and (e.step_time_ms is None or e.step_time_ms < lim.small_batch_step_ms)
    ):
        mem = f", {e.mem_used_pct:.0f}% of memory" if e.mem_used_pct is not None else ""
        sms = f", SM activity {e.sm_active_pct:.0f}%" if few_sms else ""
        return verdict(
            "small-batch",
            "critical" if e.util_pct < t.underutilized_pct else "warning",
            f"utilization {e.util_pct:.0f}%{mem}{sms}",
        )
    if e.util_pct >= t.alert_util_pct:
        if e.sm_active_pct is not None and e.sm_active_pct < lim.low_sm_active_pct:
            return verdict(
                "low-efficiency",
                "warning",
                f"utilization {e.util_pct:.0f}% but SM activity {e.sm_active_pct:.0f}%",
            )
        if e.mfu is not None and e.mfu < lim.low_mfu:
            return verdict(
                "low-efficiency", "warning", f"utilization {e.util_pct:.0f}% but MFU {e.mfu:.2f}"
            )
    throttled = (e.throttled_gpu_s or 0.0) / gpu_s if gpu_s > 0 else 0.0
    if not below and throttled >= lim.throttled_share:
        return verdict(
            "throttled",
            "warning",
            f"clocks held down for power or thermal reasons {100 * throttled:.0f}% of the "
            f"GPU-time at {e.util_pct:.0f}% utilization",
        )
    if not below:
        return verdict("healthy", "ok", f"utilization {e.util_pct:.0f}%")
    unknown = [
        what
        for what, value in (("memory use", e.mem_used_pct), ("SM activity", e.sm_active_pct))
        if value is None
    ]
    return verdict(
        "below-target",
        "critical" if e.util_pct < t.underutilized_pct else "warning",
        f"utilization {e.util_pct:.0f}% (target {t.target_util_pct:.0f}%)"
        + (f"; {' and '.join(unknown)} not measured" if unknown else ""),
    )


def idle_alert(
    run: str, idle_gpus: int, gpus: int, t: Thresholds, usd_per_gpu_hour: float | None
) -> str:
    """The live idle alert's text: which GPUs, how long, and the dollars an hour they burn."""
    which = "its GPU has" if gpus == 1 else f"{idle_gpus} of its {gpus} GPUs have"
    burning = (
        f"burning ${usd_per_gpu_hour * idle_gpus:,.2f}/h"
        if usd_per_gpu_hour is not None
        else "burning GPU-hours (no price known)"
    )
    return (
        f"run {run}: {which} been under {t.idle_pct:g}% utilization for "
        f"{t.idle_window_min} min, {burning}. {ADVICE['idle']}"
    )
