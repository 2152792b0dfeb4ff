"""What the framework callbacks share: counting samples in a batch, measuring one step's FLOPs,
and the run id every rank agrees on. No framework is imported here."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from tracker.throughput import batch_leaf, infer_batch_size

__all__ = ["BatchFn", "FlopMeter", "batch_leaf", "count", "infer_batch_size", "new_run_id"]

log = logging.getLogger("gpu_kpi")

BatchFn = Callable[[Any], int | None]


def count(fn: BatchFn | None, batch: Any, what: str, warned: set[str]) -> int | None:
    """``fn(batch)`` guarded: a user function that fails is reported once and then ignored."""
    if fn is None or what in warned:
        return None
    try:
        n = fn(batch)
        return None if n is None else int(n)
    except Exception as e:
        warned.add(what)
        log.warning(
            "gpu-kpi: %s(batch) failed (%s: %s); %s are not counted",
            what,
            type(e).__name__,
            e,
            what.removesuffix("_fn").replace("batch_size", "samples"),
        )
        return None


class FlopMeter:
    """Counts the model FLOPs of one training step with ``torch.utils.flop_counter``
    (forward and backward), entered in one hook and left in the next."""

    def __init__(self) -> None:
        self._mode: Any = None
        self.flops: float | None = None

    def begin(self) -> None:
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self._mode = FlopCounterMode(display=False)
            self._mode.__enter__()
        except Exception as e:
            self._mode = None
            log.warning(
                "gpu-kpi: cannot count FLOPs (%s); no MFU unless flops_per_step= is given", e
            )

    def end(self) -> float | None:
        mode, self._mode = self._mode, None
        if mode is None:
            return None
        try:
            mode.__exit__(None, None, None)
            self.flops = float(mode.get_total_flops()) or None
        except Exception as e:
            log.warning("gpu-kpi: counting FLOPs failed (%s); no MFU", e)
        return self.flops

    @property
    def active(self) -> bool:
        return self._mode is not None


def new_run_id() -> str:
    return uuid.uuid4().hex
