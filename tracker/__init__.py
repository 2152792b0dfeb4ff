"""gpu-kpi tracker: measures how well a training run uses its GPUs.

Importing this package is cheap: nothing touches NVML, the store or a framework until a run
starts, and ``Session`` and ``track`` are loaded on first use.

Exports:
    track: A tracking session for a plain training loop (:func:`tracker.session.track`).
    Session: One tracked run (:class:`tracker.session.Session`), which ``track`` builds and
        the framework callbacks drive.
    __version__: This package's version.

Each integration has a module of its own, so that importing ``tracker`` imports no framework:
``tracker.lightning.GpuKpiCallback`` and ``tracker.pytorch_lightning.GpuKpiCallback`` (a
Lightning callback), ``tracker.transformers.GpuKpiCallback`` (a Hugging Face ``Trainer``
callback), ``tracker.wandb.WandbSink`` and ``tracker.tensorboard.TensorBoardSink`` (sinks for
a plain loop), ``tracker.store.RunStore`` (the run store).

Example:
    A plain loop::

        from tracker import track

        with track(project="llm", team="nlp", flops_per_step=flops, dtype="bf16") as run:
            for batch in run.iterate(loader):
                train_step(batch)
                run.step()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Session", "__version__", "track"]

if TYPE_CHECKING:
    from tracker.session import Session, track


def __getattr__(name: str) -> Any:
    """Load ``Session`` and ``track`` on first use (PEP 562), not when ``tracker`` is imported.

    Args:
        name: The attribute asked for.

    Returns:
        :class:`tracker.session.Session` or :func:`tracker.session.track`.

    Raises:
        AttributeError: Any other name.
    """
    if name in ("Session", "track"):
        from tracker import session

        return getattr(session, name)
    raise AttributeError(f"module 'tracker' has no attribute {name!r}")
