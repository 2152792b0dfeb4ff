"""GPU backends: where GPU readings come from.

- :mod:`.base`: the interface (:class:`GpuBackend`, :class:`GpuInfo`, :class:`GpuReading`) and
  its errors; every backend imports it, it imports none of them;
- :mod:`.nvml`: real hardware (the only ``pynvml`` importer);
- :mod:`.simulated`: a named utilization profile, for demos, tests and GPU-less CI;
- :mod:`.replay`: an ``nvidia-smi --query-gpu=... --format=csv`` log played back;
- :mod:`.devices`: which GPUs are this process's own: `CUDA_VISIBLE_DEVICES` and `LOCAL_RANK`
  rules as pure functions;
- :mod:`.nvml_names`: NVML's names as `pynvml` spells them: GPM metric ids, error classes (plain
  data).

:func:`open_backend` picks one from a spec string such as ``"nvml"``,
``"simulated:input-bound@H100:4"`` or ``"replay:gpu.csv"``. A new backend is a module here that
implements :class:`GpuBackend`, a branch in :func:`open_backend`, and a line in
``tests/contracts/test_backend_contract.py``.
"""

from __future__ import annotations

import os

from tracker.gpu.base import BackendError, BackendUnavailable, GpuBackend, GpuInfo, GpuReading

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "GpuBackend",
    "GpuInfo",
    "GpuReading",
    "open_backend",
]


def open_backend(spec: str | None = None) -> GpuBackend:
    """Build the backend named by ``spec``, else ``$GPU_KPI_GPU``, else NVML.

    ``nvml`` | ``simulated:PROFILE[@MODEL][:N]`` | ``replay:PATH.csv``. Nothing is probed here:
    hardware is touched only by :meth:`GpuBackend.open`.
    """
    spec = (spec or os.environ.get("GPU_KPI_GPU") or "nvml").strip()
    kind, _, arg = spec.partition(":")
    if kind == "nvml" and not arg:
        from tracker.gpu.nvml import NvmlBackend

        return NvmlBackend()
    if kind == "simulated":
        from tracker.gpu.simulated import SimulatedBackend

        return SimulatedBackend.from_spec(arg)
    if kind == "replay" and arg:
        from tracker.gpu.replay import ReplayBackend

        return ReplayBackend(arg)
    raise BackendError(
        f"unknown GPU backend {spec!r}: use 'nvml', 'simulated:PROFILE[@MODEL][:N]' "
        "or 'replay:PATH.csv'"
    )
