"""The W&B sink: the only module that imports ``wandb``.

Metrics go to the active run (or a given one, e.g. Lightning's ``WandbLogger.experiment``)
with a step metric so that they line up with the trainer's own curves; the run's start values go
into its config, the final values and verdict into its summary, the low-utilization alert into a
W&B alert.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tracker.record import RunRecord
from tracker.sinks.summary import start_values, summary_values

_PREFIXES = ("gpu", "perf", "cost")
log = logging.getLogger("gpu_kpi")


class WandbSink:
    """``run``: a ``wandb`` run, or None for ``wandb.run`` at the time of each call (a run
    started later, e.g. by the HF ``WandbCallback``, is picked up). ``step_metric``: the key
    that carries the step (HF ``train/global_step``); None logs with ``step=``.
    ``log_metrics=False`` when another path (Lightning's logger) already logs the metrics."""

    name = "wandb"

    def __init__(
        self,
        run: Any = None,
        *,
        step_metric: str | None = "train/global_step",
        log_metrics: bool = True,
    ) -> None:
        self._run = run
        self.step_metric = step_metric
        self.logs = log_metrics
        self._defined = False
        self._warned = False

    def _active(self) -> Any:
        if self._run is not None:
            return self._run
        import wandb

        if wandb.run is None and not self._warned:
            self._warned = True
            log.warning(
                "gpu-kpi: WandbSink has no W&B run to write to: call wandb.init() "
                "before the run starts, or pass WandbSink(run); nothing goes to W&B "
                "until a run is active"
            )
        return wandb.run

    def start(self, record: RunRecord) -> None:
        run = self._active()
        if run is not None:
            run.config.update(start_values(record), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        run = self._active()
        if not self.logs or run is None:
            return
        if self.step_metric is None:
            run.log(dict(metrics), step=step)
            return
        if not self._defined:
            run.define_metric(self.step_metric)
            for prefix in _PREFIXES:
                run.define_metric(f"{prefix}/*", step_metric=self.step_metric)
            self._defined = True
        run.log({**metrics, self.step_metric: step})

    def summary(self, record: RunRecord) -> None:
        run = self._active()
        if run is not None:
            run.summary.update(summary_values(record))

    def summary_metrics(self, metrics: Mapping[str, float]) -> None:
        """The logged keys' values over the whole run into the run summary, where W&B would
        otherwise keep the last log window's (``gpu/util_pct`` of the last 30 s)."""
        run = self._active()
        if run is not None:
            run.summary.update(dict(metrics))

    def alert(self, title: str, text: str) -> None:
        run = self._active()
        if run is not None:
            import wandb

            run.alert(title=title, text=text, level=wandb.AlertLevel.WARN)  # type: ignore[attr-defined]

    def close(self) -> None:
        """The run belongs to the user or the trainer: nothing to close."""


def active_run() -> Any:
    """``wandb.run`` if wandb is installed and a run is active, else None (never raises)."""
    try:
        import wandb
    except ImportError:
        return None
    return wandb.run
