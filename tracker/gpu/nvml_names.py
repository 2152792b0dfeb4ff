"""NVML's names, as ``pynvml`` spells them: the GPM metric ids we read and the NVML error
classes by what they mean to us. Plain data: :mod:`tracker.gpu.nvml` looks them up on the
``pynvml`` module at run time (this module imports nothing)."""

from __future__ import annotations

GPM_METRICS: dict[str, str] = {
    "sm_active_pct": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_active_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_active_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
}
"""GPM metrics read on Hopper and newer: :class:`GpuReading` field → ``pynvml`` metric id name."""

PROC_EVERY_S = 10.0
"""How often the processes on a GPU and their utilization are read (at most): a time-sliced
GPU's holders and each one's share of its work. ``nvmlDeviceGetProcessUtilization`` is far
costlier than the device queries and takes a driver lock; a share that changes every 10 s is
still placed in its minutes."""

GPM_MIG_UTIL = "NVML_GPM_METRIC_GRAPHICS_UTIL"
"""The GPM metric read as a MIG instance's utilization (NVML gives a MIG device none: the
share of time its graphics/compute engine was active, DCGM's ``GR_ENGINE_ACTIVE``)."""

VIOLATION_POLICIES = ("NVML_PERF_POLICY_POWER", "NVML_PERF_POLICY_THERMAL")
"""The violation counters read (``nvmlDeviceGetViolationStatus``): time held below the
clocks by the power cap (the counter DCGM 4.2 calls ``CLOCKS_EVENT_REASON_SW_POWER_CAP_NS``)
and by thermal slowdown."""

THROTTLE_REASONS = (
    "nvmlClocksEventReasonSwPowerCap",
    "nvmlClocksEventReasonHwSlowdown",
    "nvmlClocksEventReasonSwThermalSlowdown",
    "nvmlClocksEventReasonHwThermalSlowdown",
    "nvmlClocksEventReasonHwPowerBrakeSlowdown",
)
"""The clock-event reasons that are power or thermal throttling (not idle, not application
clocks, not sync boost, not a display's clock): their bits, looked up on ``pynvml``."""

# NVML errors by meaning, named as pynvml names its classes (looked up on the module at run time).
# (NVMLLibraryMismatchError: an unversioned call the installed driver lacks)
UNSUPPORTED_ERRORS = (
    "NVMLError_NotSupported",
    "NVMLError_NoPermission",
    "NVMLError_FunctionNotFound",
    "NVMLLibraryMismatchError",
)
LOST_ERRORS = ("NVMLError_GpuIsLost", "NVMLError_Unknown", "NVMLError_ResetRequired")
INIT_HINTS = {
    "NVMLError_LibraryNotFound": "libnvidia-ml not found (no NVIDIA driver on this machine)",
    "NVMLError_DriverNotLoaded": "the NVIDIA driver is not loaded",
    "NVMLError_NoPermission": "no permission to talk to the NVIDIA driver",
    "NVMLError_LibRmVersionMismatch": "NVML and driver versions differ (reload the driver)",
}
NO_GPU_HINT = "use GPU_KPI_GPU=simulated:PROFILE to run without one"
