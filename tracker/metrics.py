"""The metric names: one declared table, the same keys for every sink.

Units are in the names. Percentages are 0–100; MFU is a fraction 0–1.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Metric:
    key: str
    unit: str
    help: str


METRICS: tuple[Metric, ...] = (
    Metric(
        key="gpu/util_pct",
        unit="%",
        help="NVML utilization (share of time a kernel ran), mean over the run's GPUs since the last log",
    ),
    Metric(key="gpu/sm_active_pct", unit="%", help="GPM SM activity (Hopper+), when available"),
    Metric(key="gpu/tensor_active_pct", unit="%", help="GPM tensor-core activity (Hopper+)"),
    Metric(key="gpu/dram_active_pct", unit="%", help="GPM DRAM bandwidth activity (Hopper+)"),
    Metric(key="gpu/mem_used_gib", unit="GiB", help="device memory in use, mean over GPUs"),
    Metric(key="gpu/mem_used_pct", unit="%", help="device memory in use, share of total"),
    Metric(key="gpu/power_w", unit="W", help="board power now, summed over the run's GPUs"),
    Metric(key="gpu/energy_kwh", unit="kWh", help="energy since run start, all GPUs"),
    Metric(
        key="gpu/co2e_kg",
        unit="kg",
        help="CO2e since run start: energy × PUE × grid g/kWh ([carbon])",
    ),
    Metric(key="gpu/temp_c", unit="°C", help="GPU temperature, hottest GPU"),
    Metric(key="gpu/sm_clock_mhz", unit="MHz", help="SM clock, mean over GPUs"),
    Metric(key="perf/step_time_ms", unit="ms", help="mean step time since the last log"),
    Metric(key="perf/data_wait_pct", unit="%", help="share of step time spent waiting for input"),
    Metric(key="perf/samples_per_s", unit="1/s", help="training samples per second"),
    Metric(key="perf/tokens_per_s", unit="1/s", help="training tokens per second"),
    Metric(key="perf/tflops", unit="TFLOP/s", help="achieved model TFLOP/s, all GPUs"),
    Metric(
        key="perf/mfu",
        unit="fraction",
        help="model FLOPs utilization, 0-1, against the dense peak of the run's dtype (the "
        "peak: the W&B config's gpu_kpi/mfu_peak); left out over 1, an error the run names",
    ),
    Metric(
        key="perf/ofu",
        unit="fraction",
        help="observed FLOPs utilization, 0-1: tensor pipes active x SM clock over the peak's "
        "clock (GPM, Hopper+), the hardware's cross-check of MFU",
    ),
    Metric(key="cost/usd", unit="USD", help="cost so far: GPU-hours x price"),
    Metric(key="cost/usd_per_hour", unit="USD/h", help="price of the run's GPUs per hour"),
    Metric(
        key="cost/waste_usd",
        unit="USD",
        help="recoverable waste so far (below the target utilization)",
    ),
    Metric(key="cost/usd_per_1k_samples", unit="USD", help="cost per 1,000 training samples"),
    Metric(key="cost/usd_per_1m_tokens", unit="USD", help="cost per 1,000,000 training tokens"),
)

RANK_METRICS: tuple[Metric, ...] = (
    Metric(key="gpu/util_pct_min", unit="%", help="lowest rank's utilization (multi-GPU)"),
    Metric(key="gpu/util_pct_max", unit="%", help="highest rank's utilization (multi-GPU)"),
    Metric(key="perf/step_time_ms_max", unit="ms", help="slowest rank's step time (multi-GPU)"),
    Metric(key="perf/slowest_rank", unit="rank", help="global rank with the longest step time"),
    Metric(
        key="perf/rank_spread_pct",
        unit="%",
        help="(slowest - fastest) / mean step time across ranks",
    ),
)
"""Only with more than one rank: the spread that the mean hides."""

KEYS: frozenset[str] = frozenset(m.key for m in (*METRICS, *RANK_METRICS))


def per_gpu_key(index: int, key: str) -> str:
    """``gpu/util_pct`` for GPU 1 → ``gpu/1/util_pct``."""
    group, _, name = key.partition("/")
    return f"{group}/{index}/{name}"
