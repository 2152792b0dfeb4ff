"""The NVML GPU backend: real NVIDIA hardware through ``nvidia-ml-py`` (``pynvml``).

The only module of the project that imports ``pynvml``, and only inside methods: importing this
module touches no library and no driver. Every NVML error is translated here: into
:class:`~tracker.gpu.BackendUnavailable` when there is no GPU data at all, into a missing
value (``None``) when a device lacks one metric, and into a GPU left out of the readings when it
stops answering. Nothing above this module sees an ``NVMLError``.

Which GPUs are the process's own: the CUDA devices of this rank, matched to NVML by UUID through
``CUDA_VISIBLE_DEVICES`` (:mod:`tracker.gpu.devices`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracker.gpu.base import BackendUnavailable, GpuInfo, GpuReading
from tracker.gpu.devices import select_devices, visible_devices
from tracker.gpu.nvml_names import (
    GPM_METRICS,
    GPM_MIG_UTIL,
    INIT_HINTS,
    LOST_ERRORS,
    NO_GPU_HINT,
    PROC_EVERY_S,
    THROTTLE_REASONS,
    UNSUPPORTED_ERRORS,
    VIOLATION_POLICIES,
)
from tracker.shares import MigSlice, mig_slice
from tracker.units import bytes_to_gib, mj_to_j, mw_to_w

log = logging.getLogger("gpu_kpi")


@dataclass
class _Gpm:
    """Two GPM sample buffers used in turn: the newest and the one before it."""

    samples: list[Any]
    cur: int = 0
    have_prev: bool = False


@dataclass
class _Gpu:
    """What the backend keeps per GPU between readings."""

    index: int
    uuid: str
    handle: Any
    is_mig: bool
    parent: Any = None
    """A MIG instance's physical GPU (its handle)."""
    gi_id: int | None = None
    """A MIG instance's GPU instance id on its parent (GPM reads it by this)."""
    gpm: _Gpm | None = None
    unsupported: set[str] = field(default_factory=set)
    """Metrics this device lacks: not asked again."""
    noted: set[str] = field(default_factory=set)
    """Metrics whose passing errors were already logged."""
    proc_seen_us: int = 0
    """Newest per-process sample time seen (NVML's µs timestamp)."""
    proc_at: float | None = None
    """When the processes were last read (:data:`PROC_EVERY_S`)."""
    holders: int = 1
    """Processes with a compute context on the GPU at the last read (1: this one alone)."""
    work_share: float | None = None
    """This process's share of their SM utilization at the last read (None: not measured)."""
    proc_util_pct: float | None = None
    """This process's own SM utilization at the last read (None: alone or not found)."""


class _Lost(Exception):
    """Internal: the GPU stopped answering during a reading."""


def _error_classes(nvml: Any, names: Sequence[str]) -> tuple[type[BaseException], ...]:
    found = (getattr(nvml, name, None) for name in names)
    return tuple(c for c in found if isinstance(c, type) and issubclass(c, BaseException))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _describe(err: BaseException) -> str:
    try:
        return str(err) or type(err).__name__
    except Exception:  # pynvml's __str__ may itself call into a missing library
        return type(err).__name__


class NvmlBackend:
    """GPU readings from NVML for the CUDA devices of this process.

    ``devices``: CUDA ordinals within ``CUDA_VISIBLE_DEVICES`` (such as
    ``torch.cuda.current_device()``); by default the ``LOCAL_RANK``-th visible GPU when several
    are visible, else all of them.
    A GPU that stops answering is left out of this and later readings, logged once and listed in
    :attr:`lost`. Thread-safe: a sampler thread may read while another thread closes.
    """

    name = "nvml"

    def __init__(self, devices: Sequence[int] | None = None) -> None:
        self._devices = list(devices) if devices is not None else None
        self._nvml: Any = None
        self._gpus: list[_Gpu] = []
        self._infos: list[GpuInfo] = []
        self._lost_errors: tuple[type[BaseException], ...] = ()
        self._unsupported_errors: tuple[type[BaseException], ...] = ()
        self._lock = threading.Lock()
        self.lost: set[str] = set()
        """UUIDs of GPUs that stopped answering (NVML "GPU is lost") since :meth:`open`."""

    # -- GpuBackend ------------------------------------------------------------------------------

    def open(self, now: float) -> list[GpuInfo]:
        """Start NVML and find the process's GPUs (``now``: wall clock, s; unused by NVML).

        Raises :class:`BackendUnavailable` with a one-line reason when NVML, the driver or a
        visible GPU is missing. Opening an open backend returns the same GPUs.
        """
        with self._lock:
            if self._nvml is not None:
                return list(self._infos)
            self._nvml = self._init()
            self._lost_errors = _error_classes(self._nvml, LOST_ERRORS)
            self._unsupported_errors = (
                AttributeError,
                *_error_classes(self._nvml, UNSUPPORTED_ERRORS),
            )
            gpus: list[_Gpu] = []
            try:
                self._infos = self._discover(gpus)
            except BaseException:
                self._shutdown(gpus)
                raise
            self._gpus = gpus
            self.lost = set()
            return list(self._infos)

    def read(self, now: float) -> list[GpuReading]:
        """One reading per GPU still answering; ``[]`` when the backend is not open.

        Metrics a device lacks are ``None`` (logged once per GPU and metric). A GPU that stops
        answering is left out from then on (one warning; its UUID goes to :attr:`lost`).
        """
        with self._lock:
            if self._nvml is None:
                return []
            readings: list[GpuReading] = []
            for gpu in list(self._gpus):
                try:
                    readings.append(self._read_one(gpu, now))
                except _Lost as err:
                    self._gpus.remove(gpu)
                    self.lost.add(gpu.uuid)
                    self._free_gpm(gpu)
                    log.warning(
                        "GPU %d (%s) stopped answering (%s); left out of the readings from now on",
                        gpu.index,
                        gpu.uuid,
                        err,
                    )
            return readings

    def close(self) -> None:
        """Free GPM samples and shut NVML down. Safe to call twice or before :meth:`open`."""
        with self._lock:
            gpus, self._gpus = self._gpus, []
            if self._nvml is not None:
                self._shutdown(gpus)

    # -- opening ---------------------------------------------------------------------------------

    @staticmethod
    def _init() -> Any:
        try:
            import pynvml
        except ImportError as err:
            raise BackendUnavailable(
                "NVML unavailable: the nvidia-ml-py package is not installed "
                "(pip install nvidia-ml-py)"
            ) from err
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            hint = INIT_HINTS.get(type(err).__name__, _describe(err))
            raise BackendUnavailable(f"NVML unavailable: {hint}; {NO_GPU_HINT}") from err
        return pynvml

    def _discover(self, gpus: list[_Gpu]) -> list[GpuInfo]:
        """Fill ``gpus`` with the process's GPUs (so that a failure can free what was taken)."""
        nvml = self._nvml
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            handles: dict[str, tuple[Any, str]] = {}
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                handles[_text(nvml.nvmlDeviceGetUUID(handle))] = (handle, "gpu")
            # MIG devices are found only by the UUID CUDA_VISIBLE_DEVICES gives.
            for token in (cvd or "").split(","):
                if token.strip().startswith("MIG-"):
                    try:
                        handle = nvml.nvmlDeviceGetHandleByUUID(token.strip())
                    except nvml.NVMLError:
                        continue
                    handles[_text(nvml.nvmlDeviceGetUUID(handle))] = (handle, "mig")
        except nvml.NVMLError as err:
            raise BackendUnavailable(f"NVML could not list the GPUs: {_describe(err)}") from err

        visible = visible_devices(cvd, [(uuid, kind) for uuid, (_, kind) in handles.items()])
        if not visible:
            where = (
                "NVML sees no GPU"
                if cvd is None or not handles
                else f"CUDA_VISIBLE_DEVICES={cvd!r} leaves none of {len(handles)} GPU(s) visible"
            )
            raise BackendUnavailable(f"no GPU visible to this process: {where}; {NO_GPU_HINT}")
        ordinals = select_devices(visible, self._devices, os.environ.get("LOCAL_RANK"))

        infos: list[GpuInfo] = []
        for ordinal in ordinals:
            handle, kind = handles[visible[ordinal]]
            gpu = _Gpu(index=ordinal, uuid=visible[ordinal], handle=handle, is_mig=kind == "mig")
            gpus.append(gpu)
            try:
                name = _text(nvml.nvmlDeviceGetName(handle))
                mem = self._query(gpu, "mem_used_gib", "nvmlDeviceGetMemoryInfo")
                mig = self._open_mig(gpu, name) if gpu.is_mig else None
                gpu.gpm = self._start_gpm(gpu)
            except (nvml.NVMLError, _Lost) as err:
                raise BackendUnavailable(
                    f"NVML could not open GPU {ordinal} ({gpu.uuid}): {_describe(err)}"
                ) from err
            total = bytes_to_gib(mem.total) if mem is not None else None
            infos.append(
                GpuInfo(index=ordinal, uuid=gpu.uuid, name=name, mem_total_gib=total, mig=mig)
            )
        return infos

    def _open_mig(self, gpu: _Gpu, name: str) -> MigSlice | None:
        """A MIG instance's slice of its GPU (its profile from its NVML name, ``NVIDIA
        A100-SXM4-80GB MIG 3g.40gb``, else from its attributes) and its parent and GPU instance
        (for GPM). None where NVML says neither: then it counts as a whole GPU, logged."""
        nvml = self._nvml
        gpu.parent = self._query(gpu, "mig", "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        gpu.gi_id = self._query(gpu, "mig", "nvmlDeviceGetGpuInstanceId")
        parent_name, parent_gib = name, None
        if gpu.parent is not None:
            try:
                parent_name = _text(nvml.nvmlDeviceGetName(gpu.parent))
                parent_gib = bytes_to_gib(nvml.nvmlDeviceGetMemoryInfo(gpu.parent).total)
            except nvml.NVMLError as err:
                log.info("MIG device %s: its GPU's name or memory unknown (%s)", gpu.uuid, err)
        found = mig_slice(name, parent_name, parent_gib)
        if found is None and (a := self._query(gpu, "mig", "nvmlDeviceGetAttributes")):
            gi, ci = int(a.gpuInstanceSliceCount), int(a.computeInstanceSliceCount)
            compute = f"{ci}c." if 0 < ci < gi else ""
            profile = f"{compute}{gi}g.{round(a.memorySizeMB / 1024)}gb"
            found = mig_slice(profile, parent_name, parent_gib)
        if found is None:
            log.warning(
                "gpu-kpi: MIG device %s (%s): its profile is unknown; counted as a whole GPU",
                gpu.uuid,
                name,
            )
        return found

    def _start_gpm(self, gpu: _Gpu) -> _Gpm | None:
        nvml = self._nvml
        if gpu.is_mig and (gpu.parent is None or gpu.gi_id is None):
            return None  # GPM reads a MIG instance on its parent, by its GPU instance id
        if gpu.is_mig:
            support = self._query(gpu, "gpm", lambda _: nvml.nvmlGpmQueryDeviceSupport(gpu.parent))
        else:
            support = self._query(gpu, "gpm", "nvmlGpmQueryDeviceSupport")
        if support is None:
            return None
        if not support.isSupportedDevice:
            log.info(
                "GPU %d (%s): GPM metrics not supported (Hopper or newer); reported as missing",
                gpu.index,
                gpu.uuid,
            )
            return None
        samples: list[Any] = []
        try:
            for _ in range(2):
                samples.append(self._nvml.nvmlGpmSampleAlloc())
        except self._nvml.NVMLError as err:
            log.info("GPU %d (%s): no GPM sample (%s)", gpu.index, gpu.uuid, _describe(err))
            self._free_samples(samples)
            return None
        return _Gpm(samples=samples)

    # -- reading ---------------------------------------------------------------------------------

    def _read_one(self, gpu: _Gpu, now: float) -> GpuReading:
        nvml = self._nvml
        util = self._query(gpu, "util_pct", "nvmlDeviceGetUtilizationRates")
        mem = self._query(gpu, "mem_used_gib", "nvmlDeviceGetMemoryInfo")
        power_mw = self._query(gpu, "power_w", "nvmlDeviceGetPowerUsage")
        energy_mj = self._query(gpu, "energy_j", "nvmlDeviceGetTotalEnergyConsumption")
        clock = self._query(gpu, "sm_clock_mhz", "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)
        temp = self._query(gpu, "temp_c", "nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU)
        gpm = self._read_gpm(gpu)
        throttle_ns = self._read_violations(gpu)
        util_pct = float(util.gpu) if util is not None else gpm.get("util_pct")
        if gpu.proc_at is None or not 0 <= now - gpu.proc_at < PROC_EVERY_S:
            gpu.proc_at = now
            self._read_processes(gpu)
        return GpuReading(
            uuid=gpu.uuid,
            util_pct=util_pct,
            mem_used_gib=bytes_to_gib(mem.used) if mem is not None else None,
            mem_total_gib=bytes_to_gib(mem.total) if mem is not None else None,
            power_w=mw_to_w(power_mw) if power_mw is not None else None,
            energy_j=mj_to_j(energy_mj) if energy_mj is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            temp_c=float(temp) if temp is not None else None,
            sm_active_pct=gpm.get("sm_active_pct"),
            sm_occupancy_pct=gpm.get("sm_occupancy_pct"),
            tensor_active_pct=gpm.get("tensor_active_pct"),
            dram_active_pct=gpm.get("dram_active_pct"),
            proc_util_pct=gpu.proc_util_pct,
            holders=float(gpu.holders) if gpu.holders > 1 else None,
            work_share=gpu.work_share if gpu.holders > 1 else None,
            throttle_ns=throttle_ns,
            throttled_share=self._read_throttled(gpu) if throttle_ns is None else None,
        )

    def _read_violations(self, gpu: _Gpu) -> float | None:
        """The power and thermal violation counters added up (ns since the driver loaded), or
        None where either is missing (one alone would understate the time)."""
        nvml = self._nvml
        codes = [getattr(nvml, policy, None) for policy in VIOLATION_POLICIES]
        if None in codes:  # a pynvml without them: as a device without them
            gpu.unsupported.add("throttle_ns")
            return None
        total = 0.0
        for code in codes:
            status = self._query(gpu, "throttle_ns", "nvmlDeviceGetViolationStatus", code)
            if status is None:
                return None
            total += float(status.violationTime)
        return total

    def _read_throttled(self, gpu: _Gpu) -> float | None:
        """1.0 where a power or thermal clock-event reason is active now (no violation counter
        on this device), else 0.0; None where the reasons are not given either."""
        nvml = self._nvml
        # pynvml before 12.535 names the call and its bits "ClocksThrottleReasons"
        name = "nvmlDeviceGetCurrentClocksEventReasons"
        if not hasattr(nvml, name):
            name = "nvmlDeviceGetCurrentClocksThrottleReasons"
        reasons = self._query(gpu, "throttled", name)
        if reasons is None:
            return None
        mask = 0
        for bit in THROTTLE_REASONS:
            mask |= int(getattr(nvml, bit, getattr(nvml, bit.replace("Event", "Throttle"), 0)))
        return 1.0 if int(reasons) & mask else 0.0

    def _read_gpm(self, gpu: _Gpu) -> dict[str, float | None]:
        """GPM metrics between the previous sample and a new one; ``{}`` on the first read."""
        g = gpu.gpm
        if g is None:
            return {}
        nvml = self._nvml
        cur, prev = g.samples[g.cur], g.samples[1 - g.cur]
        if gpu.is_mig:
            got = self._query(
                gpu, "gpm", lambda _: nvml.nvmlGpmMigSampleGet(gpu.parent, gpu.gi_id, cur)
            )
        else:
            got = self._query(gpu, "gpm", "nvmlGpmSampleGet", cur)
        if got is None:
            self._drop_gpm_if_unsupported(gpu)
            return {}
        had_prev, g.have_prev, g.cur = g.have_prev, True, 1 - g.cur
        if not had_prev:
            return {}
        metrics = dict(GPM_METRICS)
        if gpu.is_mig and hasattr(nvml, GPM_MIG_UTIL):
            metrics["util_pct"] = GPM_MIG_UTIL
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metrics)
        request.sample1, request.sample2 = prev, cur
        for i, metric in enumerate(metrics.values()):
            request.metrics[i].metricId = getattr(nvml, metric)
        # nvmlGpmMetricsGet takes no device; wrap it so errors are translated like the others.
        result = self._query(gpu, "gpm", lambda _handle: nvml.nvmlGpmMetricsGet(request))
        if result is None:
            self._drop_gpm_if_unsupported(gpu)
            return {}
        return {
            key: float(m.value) if m.nvmlReturn == nvml.NVML_SUCCESS else None
            for key, m in zip(metrics, request.metrics, strict=False)
        }

    def _read_processes(self, gpu: _Gpu) -> None:
        """Who else uses the GPU, and this process's share of their work since the last read
        (:attr:`_Gpu.holders`, :attr:`_Gpu.work_share`): its SM utilization over the sum of
        every process's, from the per-process samples newer than the last seen.

        NVML reports host PIDs: inside a PID namespace (most containers) this process is not
        found; then the GPU is split evenly between its processes, and said so (``even``).
        """
        procs = self._query(gpu, "proc_util_pct", "nvmlDeviceGetComputeRunningProcesses")
        me = os.getpid()
        pids = {int(p.pid) for p in procs or ()}
        gpu.holders = len(pids | {me}) if procs else 1
        gpu.work_share = gpu.proc_util_pct = None
        if gpu.holders < 2:
            return
        samples = self._query(
            gpu, "proc_util_pct", "nvmlDeviceGetProcessUtilization", gpu.proc_seen_us
        )
        if not samples or me not in pids:
            return
        gpu.proc_seen_us = max(gpu.proc_seen_us, *(int(s.timeStamp) for s in samples))
        mine = [float(s.smUtil) for s in samples if s.pid == me]
        total = sum(float(s.smUtil) for s in samples)
        gpu.proc_util_pct = sum(mine) / len(mine) if mine else 0.0
        # none worked: an even share of no work (the idle GPU is held evenly)
        gpu.work_share = sum(mine) / total if total > 0 else 1.0 / gpu.holders

    # -- NVML calls and their errors -------------------------------------------------------------

    def _query(self, gpu: _Gpu, metric: str, fn: Any, *args: Any) -> Any:
        """``fn(handle, *args)``, or None when the device lacks ``metric`` or it failed this time.

        ``fn`` is a pynvml function name or a callable. Not supported → None, logged once, never
        asked again; GPU lost → :class:`_Lost`; any other NVML error → None this time.
        """
        if metric in gpu.unsupported:
            return None
        nvml = self._nvml
        call = getattr(nvml, fn, None) if isinstance(fn, str) else fn
        try:
            if call is None:
                raise AttributeError(f"pynvml has no {fn}")
            return call(gpu.handle, *args)
        except self._lost_errors as err:
            raise _Lost(_describe(err)) from err
        except self._unsupported_errors as err:
            gpu.unsupported.add(metric)
            log.info(
                "GPU %d (%s): %s not available (%s); reported as missing",
                gpu.index,
                gpu.uuid,
                metric,
                _describe(err),
            )
            return None
        except nvml.NVMLError as err:
            if metric not in gpu.noted:
                gpu.noted.add(metric)
                log.debug("GPU %d (%s): %s failed: %s", gpu.index, gpu.uuid, metric, _describe(err))
            return None

    def _drop_gpm_if_unsupported(self, gpu: _Gpu) -> None:
        if "gpm" in gpu.unsupported:
            self._free_gpm(gpu)
        elif gpu.gpm is not None:
            gpu.gpm.have_prev = False  # a failed sample must not pair with a later one

    def _free_gpm(self, gpu: _Gpu) -> None:
        if gpu.gpm is not None:
            self._free_samples(gpu.gpm.samples)
            gpu.gpm = None

    def _free_samples(self, samples: list[Any]) -> None:
        nvml = self._nvml
        for sample in samples:
            try:
                nvml.nvmlGpmSampleFree(sample)
            except nvml.NVMLError as err:
                log.debug("freeing a GPM sample failed: %s", _describe(err))

    def _shutdown(self, gpus: list[_Gpu]) -> None:
        """Free the GPUs' GPM samples, then shut NVML down (NVML counts inits: others stay)."""
        nvml = self._nvml
        for gpu in gpus:
            self._free_gpm(gpu)
        self._nvml = None
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as err:
            log.debug("nvmlShutdown failed: %s", _describe(err))
