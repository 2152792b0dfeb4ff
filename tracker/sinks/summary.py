"""The run's final values as flat key → value pairs and as a Markdown table, for the sinks'
summaries (W&B run summary, TensorBoard text)."""

from __future__ import annotations

from tracker.peaks import mfu_denominator
from tracker.record import RunRecord

SUMMARY_FIELDS: tuple[str, ...] = (
    "verdict",
    "advice",
    "gpu_model",
    "gpu_count",
    "nodes",
    "gpu_hours",
    "util_pct",
    "sm_active_pct",
    "mem_peak_gib",
    "energy_kwh",
    "samples_per_s",
    "tokens_per_s",
    "mfu",
    "mfu_peak_tflops",
    "mfu_dtype",
    "mfu_dtype_from",
    "mfu_note",
    "ofu",
    "data_wait_pct",
    "cost_usd",
    "waste_usd",
    "idle_usd",
    "price_per_gpu_hour",
    "gpu_source",
)
"""Record fields that go into a run summary, as ``gpu_kpi/<field>``."""


def summary_values(r: RunRecord, prefix: str = "gpu_kpi/") -> dict[str, object]:
    """The summary fields that are known (None left out), keyed ``gpu_kpi/<field>``."""
    return {f"{prefix}{f}": v for f in SUMMARY_FIELDS if (v := getattr(r, f)) is not None}


def start_values(r: RunRecord, prefix: str = "gpu_kpi/") -> dict[str, object]:
    """What is known when the run starts: for a W&B config or a TensorBoard note."""
    return {
        f"{prefix}{k}": v
        for k, v in (
            ("run_id", r.id),
            # who ran it, for an import of the logs to keep (issue 46's round trips)
            ("project", r.project or None),
            ("team", r.team or None),
            ("user", r.user or None),
            ("gpu_model", r.gpu_model),
            ("gpu_count", r.gpu_count),
            ("price_per_gpu_hour", r.price_per_gpu_hour),
            ("price_source", r.price_source),
            ("gpu_source", r.gpu_source),
            # MFU's denominator: the peak, its dtype and where the dtype came from
            ("mfu_peak", mfu_denominator(r)),
            ("mfu_peak_tflops", r.mfu_peak_tflops),
            ("mfu_dtype", r.mfu_dtype),
            ("mfu_dtype_from", r.mfu_dtype_from),
        )
        if v is not None
    }


def summary_markdown(r: RunRecord) -> str:
    """A two-column Markdown table of the summary, verdict first."""
    lines = ["| | |", "|---|---|"]
    for key, value in summary_values(r, prefix="").items():
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"| {key} | {shown.replace('|', '/')} |")
    return "\n".join(lines)


RECORD_METRICS: dict[str, str] = {
    "gpu/util_pct": "util_pct",
    "gpu/sm_active_pct": "sm_active_pct",
    "gpu/energy_kwh": "energy_kwh",
    "perf/samples_per_s": "samples_per_s",
    "perf/tokens_per_s": "tokens_per_s",
    "perf/mfu": "mfu",
    "perf/ofu": "ofu",
    "perf/data_wait_pct": "data_wait_pct",
    "cost/usd": "cost_usd",
    "cost/waste_usd": "waste_usd",
}
"""Logged metric → the record's figure for the whole run (every rank's GPUs)."""


def record_metrics(r: RunRecord) -> dict[str, float]:
    """The run's own values of the logged metrics the record holds: a run summary's
    ``gpu/util_pct`` is the run's utilization, not the last log window's."""
    return {k: float(v) for k, f in RECORD_METRICS.items() if (v := getattr(r, f)) is not None}
