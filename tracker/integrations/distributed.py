"""``torch.distributed`` for the HF Trainer callback and plain loops: who this rank is, one
run id for all ranks, and the small all-gather used at log steps. Imports torch only inside
the functions, and only when the caller already runs distributed."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def _dist() -> object | None:
    """``torch.distributed`` when a process group is up, else None (torch is not imported)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    return dist if dist.is_available() and dist.is_initialized() else None


def world() -> tuple[int, int, int]:
    """(global rank, world size, nodes) of this process."""
    dist = _dist()
    if dist is None:
        return 0, 1, 1
    rank, size = dist.get_rank(), dist.get_world_size()  # type: ignore[attr-defined]
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or size)
    return rank, size, max(1, size // max(local, 1))


def broadcast_str(value: str) -> str:
    """Rank 0's ``value`` on every rank (one collective)."""
    dist = _dist()
    if dist is None:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)  # type: ignore[attr-defined]
    return str(box[0])


def gatherer() -> Callable[[list[float]], list[list[float]]] | None:
    """An all-gather of a few floats per rank, on the device the backend needs (NCCL: this
    rank's GPU). None when not distributed."""
    dist = _dist()
    if dist is None or dist.get_world_size() < 2:  # type: ignore[attr-defined]
        return None
    import torch

    def gather(vector: list[float]) -> list[list[float]]:
        if dist.get_backend() == "nccl":  # type: ignore[attr-defined]
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
        local = torch.tensor(vector, dtype=torch.float64, device=device)
        out = [torch.empty_like(local) for _ in range(dist.get_world_size())]  # type: ignore[attr-defined]
        dist.all_gather(out, local)  # type: ignore[attr-defined]
        return [t.cpu().tolist() for t in out]

    return gather
