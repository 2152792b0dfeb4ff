"""The TensorBoard sink: the only module that writes TensorBoard event files.

Writes through a given ``SummaryWriter`` (Lightning's ``TensorBoardLogger.experiment``) or one
of its own in ``logdir`` (the HF Trainer and plain loops). Scalars under the design's metric
names at the trainer's step; the run's start values and final summary as text.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracker.extras import install_hint
from tracker.record import RunRecord
from tracker.sinks.summary import start_values, summary_markdown


class TensorBoardSink:
    name = "tensorboard"

    def __init__(
        self, writer: Any = None, *, logdir: str | Path | None = None, log_metrics: bool = True
    ) -> None:
        if writer is None and logdir is None:
            raise ValueError("TensorBoardSink needs a SummaryWriter or a logdir")
        self.logdir = Path(logdir) if logdir is not None else None
        self._writer = writer
        self._own = writer is None
        self.logs = log_metrics
        self._last_step = 0

    @property
    def writer(self) -> Any:
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ImportError(
                    "TensorBoard logging needs the tensorboard package: "
                    f"{install_hint('tensorboard')}"
                ) from e
            self._writer = SummaryWriter(log_dir=str(self.logdir))
        return self._writer

    def start(self, record: RunRecord) -> None:
        lines = [f"- {k.removeprefix('gpu_kpi/')}: {v}" for k, v in start_values(record).items()]
        self.writer.add_text("gpu-kpi/run", "\n".join(lines), 0)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._last_step = step
        if not self.logs:
            return
        w = self.writer
        for key, value in metrics.items():
            w.add_scalar(key, value, step)

    def summary(self, record: RunRecord) -> None:
        self.writer.add_text("gpu-kpi/summary", summary_markdown(record), self._last_step)
        self.writer.flush()

    def alert(self, title: str, text: str) -> None:
        self.writer.add_text("gpu-kpi/alert", f"**{title}**: {text}", self._last_step)

    def close(self) -> None:
        if self._writer is None:
            return
        if self._own:
            self._writer.close()
        else:
            self._writer.flush()
