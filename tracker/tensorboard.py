"""Public path of the TensorBoard sink: ``from tracker.tensorboard import TensorBoardSink``. It
lives in :mod:`tracker.sinks.tensorboard`."""

from tracker.sinks.tensorboard import TensorBoardSink

__all__ = ["TensorBoardSink"]
