"""gpu-kpi tracker: measures how well a training run uses its GPUs.

Importing this package is cheap: nothing touches NVML, the store or a framework until a run
starts. ``from tracker import track`` is the plain-loop entry point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Session", "__version__", "track"]

if TYPE_CHECKING:
    from tracker.session import Session, track


def __getattr__(name: str) -> Any:
    if name in ("Session", "track"):
        from tracker import session

        return getattr(session, name)
    raise AttributeError(f"module 'tracker' has no attribute {name!r}")
