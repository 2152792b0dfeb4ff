"""The GPU backend interface: what every source of GPU readings provides, and its errors.

The implementations (:mod:`.nvml`, :mod:`.simulated`, :mod:`.replay`) import this module;
:func:`tracker.gpu.open_backend` picks one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tracker.shares import MigSlice


class BackendError(Exception):
    """A GPU backend could not do what was asked (bad spec, unreadable log)."""


class BackendUnavailable(BackendError):
    """No GPU data can be had at all (NVML missing, no driver, no visible GPU)."""


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    """One GPU this process uses, as the backend sees it at start."""

    index: int
    """Position among the process's GPUs (0 = its first CUDA device)."""
    uuid: str
    """NVML UUID (``GPU-…`` or ``MIG-…``); simulated and replay backends make stable ones."""
    name: str
    """Model name as NVML reports it (nvidia-smi ``name``), e.g. ``NVIDIA H100 80GB HBM3``."""
    mem_total_gib: float | None
    """Device memory (nvidia-smi ``memory.total``), GiB."""
    mig: MigSlice | None = None
    """The MIG instance it is, where it is one: counted and priced as its share of the physical
    GPU (:mod:`tracker.shares`)."""

    def share(self, basis: str = "compute") -> float:
        """The share of a physical GPU this device is: 1, or a MIG instance's slices."""
        return 1.0 if self.mig is None else self.mig.share(basis)


@dataclass(frozen=True, kw_only=True)
class GpuReading:
    """One sample of one GPU. ``None`` means the device does not report that metric.

    Utilization figures describe the time since the previous reading of the same GPU (NVML's
    utilization is a trailing-window share of time), so a reading weighs for the interval that
    ends at it.
    """

    uuid: str
    util_pct: float | None = None
    """Share of time a kernel ran (nvidia-smi ``utilization.gpu``), 0–100."""
    mem_used_gib: float | None = None
    """Device memory in use (nvidia-smi ``memory.used``), GiB."""
    mem_total_gib: float | None = None
    power_w: float | None = None
    """Board power draw now (nvidia-smi ``power.draw``), W."""
    energy_j: float | None = None
    """Cumulative energy counter since driver load (NVML total energy consumption), J."""
    sm_clock_mhz: float | None = None
    """SM clock (nvidia-smi ``clocks.sm``), MHz."""
    temp_c: float | None = None
    """GPU core temperature (nvidia-smi ``temperature.gpu``), °C."""
    sm_active_pct: float | None = None
    """GPM SM activity (DCGM ``PROF_SM_ACTIVE``), Hopper+, 0–100."""
    sm_occupancy_pct: float | None = None
    """GPM SM occupancy (DCGM ``PROF_SM_OCCUPANCY``), Hopper+, 0–100."""
    tensor_active_pct: float | None = None
    """GPM tensor-core activity (DCGM ``PROF_PIPE_TENSOR_ACTIVE``), Hopper+, 0–100."""
    dram_active_pct: float | None = None
    """GPM DRAM bandwidth activity (DCGM ``PROF_DRAM_ACTIVE``), Hopper+, 0–100."""
    proc_util_pct: float | None = None
    """This process's own SM utilization when other processes share the GPU, 0–100."""
    throttle_ns: float | None = None
    """Cumulative time the GPU's clocks were held down for power or thermal reasons, ns: NVML's
    power and thermal violation counters (``nvmlDeviceGetViolationStatus``) added up. A counter:
    the difference between two readings is exact however far apart they are."""
    sm_cycles_active: float | None = None
    """Cumulative SM cycles with at least one warp active (DCGM 4.6's
    ``DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL``): with :attr:`sm_cycles_elapsed`, SM activity as
    the counters' differences, exact however seldom read
    (:attr:`tracker.sampler.GpuStats.sm_active_counted`)."""
    sm_cycles_elapsed: float | None = None
    """Cumulative SM cycles elapsed (``DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL``)."""
    throttled_share: float | None = None
    """Share of the interval ending at this reading that the clocks were held down for power
    or thermal reasons, 0–1, where no counter says: NVML's clock-event reasons read now
    (``nvmlDeviceGetCurrentClocksEventReasons``: 1 or 0, the interval judged by its end), so the
    throttled time is sampled (:attr:`tracker.sampler.GpuStats.throttled_s`)."""
    holders: float | None = None
    """Processes with a compute context on the GPU, this one included (NVML's compute
    processes): over 1 on a GPU shared in time (time-slicing, MPS), which the sampler splits
    between them (:func:`tracker.shares.time_sliced`). None or 1: held alone."""
    work_share: float | None = None
    """On a shared GPU: this process's measured share of the processes' work, 0–1 (its SM
    utilization over theirs; an even share where none worked). None: not measured (the GPU
    is then split evenly between its processes)."""


@runtime_checkable
class GpuBackend(Protocol):
    """A source of GPU readings. Implementations translate their own errors into ours."""

    name: str
    """``nvml``, ``simulated`` or ``replay``: recorded with the run as its GPU data source."""

    def open(self, now: float) -> list[GpuInfo]:
        """Find the process's GPUs. ``now`` is the wall-clock time (s since epoch).

        Raises :class:`BackendUnavailable` when there is no GPU data to be had.
        """
        ...

    def read(self, now: float) -> list[GpuReading]:
        """One reading per GPU still answering. A GPU that stops answering is left out of this
        and every later reading (its absence is the signal; the backend logs it once), so the
        other GPUs' readings are never lost with it."""
        ...

    def close(self) -> None: ...
