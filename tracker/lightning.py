"""The PyTorch Lightning callback (``lightning`` package): the only module that imports it.

```python
from tracker.lightning import GpuKpiCallback

trainer = L.Trainer(callbacks=[GpuKpiCallback(project="llm", team="nlp")], logger=[...])
```
For the older ``pytorch_lightning`` package use :mod:`tracker.pytorch_lightning`.
"""

from __future__ import annotations

from tracker.extras import install_hint

try:
    from lightning.pytorch import Callback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"the Lightning callback needs the lightning package: {install_hint('lightning')}"
    ) from e

from tracker.integrations.lightning_hooks import LightningHooks

__all__ = ["GpuKpiCallback"]


class GpuKpiCallback(LightningHooks, Callback):
    __doc__ = LightningHooks.__doc__
