"""The callback for the older ``pytorch_lightning`` package; same behaviour as
:mod:`tracker.lightning`. The only module that imports ``pytorch_lightning``."""

from __future__ import annotations

try:
    from pytorch_lightning import Callback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "this callback needs the pytorch_lightning package: "
        "pip install pytorch-lightning (or use tracker.lightning)"
    ) from e

from tracker.integrations.lightning_hooks import LightningHooks

__all__ = ["GpuKpiCallback"]


class GpuKpiCallback(LightningHooks, Callback):
    __doc__ = LightningHooks.__doc__
