"""Where metrics go: the sink interface, the Python-logging sink, and the guard that turns a
failing sink off with one warning so training goes on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, runtime_checkable

from tracker.record import RunRecord

log = logging.getLogger("gpu_kpi")


@runtime_checkable
class Sink(Protocol):
    """Receives the same metric names (:mod:`tracker.metrics`) as every other sink."""

    name: str

    def start(self, record: RunRecord) -> None:
        """The run has started: its id, GPU model and price are known."""
        ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def summary(self, record: RunRecord) -> None:
        """The run's final values and verdict."""
        ...

    def alert(self, title: str, text: str) -> None: ...

    def close(self) -> None: ...


class LoggingSink:
    """Python logging (logger ``gpu_kpi``): a line per log step, the summary, the alert."""

    name = "logging"

    def __init__(self, level: int = logging.INFO) -> None:
        self.level = level

    def start(self, record: RunRecord) -> None:
        log.log(
            self.level,
            "gpu-kpi run %s (%s): %dx %s at $%s/GPU-h",
            record.name,
            record.id,
            record.gpu_count,
            record.gpu_model or "no GPU",
            "n/a" if record.price_per_gpu_hour is None else f"{record.price_per_gpu_hour:.2f}",
        )

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        keys = (
            "gpu/util_pct",
            "perf/step_time_ms",
            "perf/data_wait_pct",
            "perf/samples_per_s",
            "perf/mfu",
            "cost/usd",
        )
        parts = [f"{k}={metrics[k]:.4g}" for k in keys if k in metrics]
        log.log(self.level, "gpu-kpi step %d: %s", step, " ".join(parts))

    def summary(self, record: RunRecord) -> None:
        log.log(
            self.level, "gpu-kpi run %s (%s): %s", record.name, record.id, format_summary(record)
        )

    def alert(self, title: str, text: str) -> None:
        log.warning("gpu-kpi: %s: %s", title, text)

    def close(self) -> None:
        pass


def format_summary(r: RunRecord) -> str:
    """One line: GPU-hours, utilization, cost, waste, verdict."""

    def num(v: float | None, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    return (
        f"{r.gpu_count}x {r.gpu_model or 'no GPU'}, {r.gpu_hours:.3f} GPU-h, "
        f"util {num(r.util_pct, '.0f')}%, cost ${num(r.cost_usd, '.2f')}, "
        f"waste ${num(r.waste_usd, '.2f')}, verdict {r.verdict or 'n/a'}"
        + (f": {r.advice}" if r.advice else "")
    )


class SinkSet:
    """Fans out to sinks; the first exception from a sink disables it with one warning."""

    def __init__(self, sinks: Iterable[Sink]) -> None:
        self.sinks = list(sinks)

    def _each(self, method: str, *args: object) -> None:
        for sink in list(self.sinks):
            self._each_one(sink, method, *args)

    def _each_one(self, sink: Sink, method: str, *args: object) -> None:
        try:
            getattr(sink, method)(*args)
        except Exception as e:
            self.sinks.remove(sink)
            log.warning(
                "gpu-kpi: sink %r failed (%s: %s); it is turned off for this run",
                getattr(sink, "name", sink),
                type(e).__name__,
                e,
            )

    def start(self, record: RunRecord) -> None:
        self._each("start", record)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._each("log_metrics", metrics, step)

    def summary(
        self, record: RunRecord, metrics: Callable[[], Mapping[str, float]] | None = None
    ) -> None:
        """Each sink's :meth:`Sink.summary`; and ``metrics()`` (the logged metrics over the
        whole run) to the sinks that keep a run summary of them (``summary_metrics``: W&B),
        computed only for them, and left out if computing them fails."""
        self._each("summary", record)
        wanted = any(hasattr(sink, "summary_metrics") for sink in self.sinks)
        try:
            metrics_ = metrics() if metrics is not None and wanted else None
        except Exception as e:
            log.warning("gpu-kpi: no run-level metrics in the summary: %s: %s", type(e).__name__, e)
            metrics_ = None
        if metrics_:
            for sink in list(self.sinks):
                if hasattr(sink, "summary_metrics"):
                    self._each_one(sink, "summary_metrics", metrics_)

    def alert(self, title: str, text: str) -> None:
        self._each("alert", title, text)

    def close(self) -> None:
        self._each("close")
