"""Public path of the W&B sink: ``from tracker.wandb import WandbSink``. It lives in
:mod:`tracker.sinks.wandb`."""

from tracker.sinks.wandb import WandbSink, active_run

__all__ = ["WandbSink", "active_run"]
