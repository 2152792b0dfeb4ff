"""The NVML backend against a fake ``pynvml`` at its boundary (no GPU needed).

The fake mimics the real module's shape: the same function names, ``NVMLError`` subclasses with
pynvml's class names, a GPM metrics request with ``metrics[i].metricId/.nvmlReturn/.value``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from tracker.gpu import BackendUnavailable, GpuBackend
from tracker.gpu.devices import select_devices, visible_devices
from tracker.gpu.nvml import NvmlBackend

GIB = 1024**3
OTHER_PID = 4_000_000  # above Linux's pid_max: never this process

# -- the fake pynvml ------------------------------------------------------------------------------


class NVMLError(Exception):
    def __init__(self, msg: str = "") -> None:
        super().__init__(msg or type(self).__name__.removeprefix("NVMLError_"))


def _err(name: str) -> type[NVMLError]:
    return type(f"NVMLError_{name}", (NVMLError,), {})


NotSupported = _err("NotSupported")
NoPermission = _err("NoPermission")
FunctionNotFound = _err("FunctionNotFound")
GpuIsLost = _err("GpuIsLost")
Unknown = _err("Unknown")
ResetRequired = _err("ResetRequired")
LibraryNotFound = _err("LibraryNotFound")
DriverNotLoaded = _err("DriverNotLoaded")
NotFound = _err("NotFound")
Timeout = _err("Timeout")

GRAPHICS, SM_UTIL, SM_OCC, TENSOR, DRAM = 1, 2, 3, 5, 10
NVML_NOT_SUPPORTED_CODE = 3


@dataclass
class Device:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util: int = 87
    mem_used: int = 8 * GIB
    mem_total: int = 80 * GIB
    power_mw: int = 250_000
    energy_mj: int = 1_500_000
    sm_clock: int = 1980
    temp: int = 65
    gpm: bool = True
    gpm_counters: dict[int, float] = field(default_factory=dict)
    """Cumulative per-metric figures; a GPM metric is their difference between two samples."""
    gpm_unsupported: set[int] = field(default_factory=set)
    procs: list[int] = field(default_factory=list)
    proc_samples: list[tuple[int, int, int]] = field(default_factory=list)
    """(pid, timestamp µs, smUtil)."""
    violation_ns: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0})
    """Violation counters by perf policy (0 power, 1 thermal), ns."""
    reasons: int = 0
    """Clock-event reasons now (a bit mask)."""
    fails: dict[str, type[NVMLError]] = field(default_factory=dict)
    """pynvml function name → error it raises for this device."""
    parent: Device | None = None
    """A MIG device's physical GPU."""
    gi_id: int = 0
    """A MIG device's GPU instance id."""
    attributes: Any = None
    """A MIG device's ``nvmlDeviceGetAttributes`` (None: not supported)."""


@dataclass
class Sample:
    device: Device | None = None
    seq: int = -1
    counters: dict[int, float] = field(default_factory=dict)
    freed: bool = False


class Metric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class MetricsGet:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Sample | None = None
        self.sample2: Sample | None = None
        self.metrics = [Metric() for _ in range(16)]


class FakePynvml(types.ModuleType):
    NVML_SUCCESS = 0
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_GRAPHICS_UTIL = GRAPHICS
    NVML_GPM_METRIC_SM_UTIL = SM_UTIL
    NVML_GPM_METRIC_SM_OCCUPANCY = SM_OCC
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = TENSOR
    NVML_GPM_METRIC_DRAM_BW_UTIL = DRAM
    c_nvmlGpmMetricsGet_t = MetricsGet
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1
    nvmlClocksEventReasonGpuIdle = 0x1
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSyncBoost = 0x10
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80

    def __init__(self, devices: list[Device], migs: list[Device] | None = None) -> None:
        super().__init__("pynvml")
        self.NVMLError = NVMLError
        for cls in NVMLError.__subclasses__():
            setattr(self, cls.__name__, cls)
        self.devices = devices
        self.migs = migs or []
        self.calls: Counter[tuple[str, str]] = Counter()
        self.init_error: type[NVMLError] | None = None
        self.samples: list[Sample] = []
        self.proc_ts_asked: list[int] = []
        self._seq = 0

    def _dev(self, fn: str, h: Device) -> Device:
        self.calls[(fn, h.uuid)] += 1
        if fn in h.fails:
            raise h.fails[fn]()
        return h

    def nvmlInit(self) -> None:
        self.calls[("nvmlInit", "")] += 1
        if self.init_error:
            raise self.init_error()

    def nvmlShutdown(self) -> None:
        self.calls[("nvmlShutdown", "")] += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Device:
        return self.devices[i]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Device:
        for d in self.devices + self.migs:
            if d.uuid == uuid:
                return d
        raise NotFound()

    def nvmlDeviceGetUUID(self, h: Device) -> str:
        return h.uuid

    def nvmlDeviceGetName(self, h: Device) -> str:
        return self._dev("nvmlDeviceGetName", h).name

    def nvmlDeviceGetUtilizationRates(self, h: Device) -> Any:
        return types.SimpleNamespace(gpu=self._dev("nvmlDeviceGetUtilizationRates", h).util)

    def nvmlDeviceGetMemoryInfo(self, h: Device) -> Any:
        d = self._dev("nvmlDeviceGetMemoryInfo", h)
        return types.SimpleNamespace(used=d.mem_used, total=d.mem_total)

    def nvmlDeviceGetPowerUsage(self, h: Device) -> int:
        return self._dev("nvmlDeviceGetPowerUsage", h).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Device) -> int:
        return self._dev("nvmlDeviceGetTotalEnergyConsumption", h).energy_mj

    def nvmlDeviceGetClockInfo(self, h: Device, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self._dev("nvmlDeviceGetClockInfo", h).sm_clock

    def nvmlDeviceGetTemperature(self, h: Device, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._dev("nvmlDeviceGetTemperature", h).temp

    def nvmlDeviceGetViolationStatus(self, h: Device, policy: int) -> Any:
        d = self._dev("nvmlDeviceGetViolationStatus", h)
        if policy not in d.violation_ns:  # "Violation for thermal capping is not supported"
            raise NotSupported()
        return types.SimpleNamespace(referenceTime=0, violationTime=d.violation_ns[policy])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Device) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksEventReasons", h).reasons

    def nvmlDeviceGetComputeRunningProcesses(self, h: Device) -> list[Any]:
        d = self._dev("nvmlDeviceGetComputeRunningProcesses", h)
        return [types.SimpleNamespace(pid=p, usedGpuMemory=GIB) for p in d.procs]

    def nvmlDeviceGetProcessUtilization(self, h: Device, ts: int) -> list[Any]:
        d = self._dev("nvmlDeviceGetProcessUtilization", h)
        self.proc_ts_asked.append(ts)
        out = [
            types.SimpleNamespace(pid=p, timeStamp=t, smUtil=u, memUtil=0)
            for p, t, u in d.proc_samples
            if t > ts
        ]
        if not out:
            raise NotFound()
        return out

    def nvmlGpmQueryDeviceSupport(self, h: Device) -> Any:
        d = self._dev("nvmlGpmQueryDeviceSupport", h)
        return types.SimpleNamespace(version=1, isSupportedDevice=int(d.gpm))

    def nvmlGpmSampleAlloc(self) -> Sample:
        self.samples.append(Sample())
        return self.samples[-1]

    def nvmlGpmSampleFree(self, s: Sample) -> None:
        assert not s.freed, "GPM sample freed twice"
        s.freed = True

    def nvmlGpmSampleGet(self, h: Device, s: Sample) -> Sample:
        d = self._dev("nvmlGpmSampleGet", h)
        assert not s.freed
        self._seq += 1
        s.device, s.seq, s.counters = d, self._seq, dict(d.gpm_counters)
        return s

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: Device) -> Device:
        d = self._dev("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", h)
        if d.parent is None:
            raise NotSupported()
        return d.parent

    def nvmlDeviceGetGpuInstanceId(self, h: Device) -> int:
        return self._dev("nvmlDeviceGetGpuInstanceId", h).gi_id

    def nvmlDeviceGetAttributes(self, h: Device) -> Any:
        d = self._dev("nvmlDeviceGetAttributes", h)
        if d.attributes is None:
            raise NotSupported()
        return d.attributes

    def nvmlGpmMigSampleGet(self, h: Device, gi_id: int, s: Sample) -> Sample:
        parent = self._dev("nvmlGpmMigSampleGet", h)
        (d,) = [m for m in self.migs if m.parent is parent and m.gi_id == gi_id]
        assert not s.freed
        self._seq += 1
        s.device, s.seq, s.counters = d, self._seq, dict(d.gpm_counters)
        return s

    def nvmlGpmMetricsGet(self, req: MetricsGet) -> MetricsGet:
        s1, s2 = req.sample1, req.sample2
        assert req.version == self.NVML_GPM_METRICS_GET_VERSION
        assert s1 is not None and s2 is not None and s1.device is s2.device
        assert s1.seq < s2.seq, "sample1 must be the older sample"
        for m in req.metrics[: req.numMetrics]:
            if m.metricId in s2.device.gpm_unsupported:  # type: ignore[union-attr]
                m.nvmlReturn = NVML_NOT_SUPPORTED_CODE
                continue
            m.nvmlReturn = 0
            m.value = s2.counters.get(m.metricId, 0.0) - s1.counters.get(m.metricId, 0.0)
        return req


def gpus(n: int) -> list[Device]:
    return [Device(uuid=f"GPU-{c * 3}-0000-1111") for c in "abcdefgh"[:n]]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Any:
    def _install(devices: list[Device], migs: list[Device] | None = None) -> FakePynvml:
        fake = FakePynvml(devices, migs)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return _install


def by_uuid(readings: list[Any]) -> dict[str, Any]:
    return {r.uuid: r for r in readings}


# -- visible_devices / select_devices (pure) ------------------------------------------------------

NVML = [("GPU-aaa1", "gpu"), ("GPU-bbb2", "gpu"), ("GPU-bbc3", "gpu"), ("MIG-9f00", "mig")]


@pytest.mark.parametrize(
    ("cvd", "expected"),
    [
        (None, ["GPU-aaa1", "GPU-bbb2", "GPU-bbc3"]),
        ("", []),
        ("1", ["GPU-bbb2"]),
        ("2,0", ["GPU-bbc3", "GPU-aaa1"]),
        (" 1 , 0 ", ["GPU-bbb2", "GPU-aaa1"]),
        ("GPU-bbb", ["GPU-bbb2"]),  # unique prefix
        ("GPU-bb,0", []),  # ambiguous prefix is invalid, and ends the list at once
        ("0,GPU-bbc3", ["GPU-aaa1", "GPU-bbc3"]),
        ("MIG-9f00", ["MIG-9f00"]),
        ("0,foo,1", ["GPU-aaa1"]),  # CUDA ignores everything after an invalid entry
        ("0,7,1", ["GPU-aaa1"]),  # out of range
        ("-1", []),
        ("1,GPU-bbb2", ["GPU-bbb2"]),  # a repeat ends the list
        ("0,1,0", ["GPU-aaa1", "GPU-bbb2"]),
        ("GPU-", []),
        ("MIG-zz", []),
    ],
)
def test_visible_devices_follows_cuda_rules(cvd: str | None, expected: list[str]) -> None:
    assert visible_devices(cvd, NVML) == expected


@pytest.mark.parametrize(
    ("devices", "local_rank", "expected"),
    [
        (None, None, [0, 1, 2, 3]),
        (None, "2", [2]),
        (None, "9", [0, 1, 2, 3]),  # out of range: all of them rather than a wrong one
        (None, "x", [0, 1, 2, 3]),
        ([1], "2", [1]),  # explicit devices win over LOCAL_RANK
        ([3, 1, 3], None, [3, 1]),
    ],
)
def test_select_devices(
    devices: list[int] | None, local_rank: str | None, expected: list[int]
) -> None:
    assert select_devices(["u0", "u1", "u2", "u3"], devices, local_rank) == expected


def test_select_devices_with_one_visible_gpu_ignores_local_rank() -> None:
    # torchrun with one GPU per rank through CUDA_VISIBLE_DEVICES: rank 3 sees its GPU as 0.
    assert select_devices(["u7"], None, "3") == [0]


def test_select_devices_rejects_an_invisible_ordinal() -> None:
    with pytest.raises(BackendUnavailable, match="CUDA device 4 is not visible"):
        select_devices(["u0", "u1"], [4], None)


# -- opening ----------------------------------------------------------------------------------


def test_import_does_not_load_pynvml() -> None:
    code = "import sys, tracker.gpu.nvml; print('pynvml' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert out.stdout.strip() == "False", out.stderr


def test_open_reports_every_visible_gpu(install: Any) -> None:
    install(gpus(2))
    backend = NvmlBackend()
    assert isinstance(backend, GpuBackend)
    infos = backend.open(0.0)
    assert [(i.index, i.uuid) for i in infos] == [
        (0, "GPU-aaa-0000-1111"),
        (1, "GPU-bbb-0000-1111"),
    ]
    assert infos[0].name == "NVIDIA H100 80GB HBM3"
    assert infos[0].mem_total_gib == 80.0


def test_cuda_visible_devices_index(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(gpus(3))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    infos = NvmlBackend().open(0.0)
    assert [(i.index, i.uuid) for i in infos] == [(0, "GPU-bbb-0000-1111")]


def test_cuda_visible_devices_uuid_prefix(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(gpus(3))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-ccc,GPU-aaa")
    infos = NvmlBackend().open(0.0)
    assert [i.uuid for i in infos] == ["GPU-ccc-0000-1111", "GPU-aaa-0000-1111"]


def test_cuda_visible_devices_invalid_entry_ends_list(
    install: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(gpus(3))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,foo,1")
    assert [i.uuid for i in NvmlBackend().open(0.0)] == ["GPU-aaa-0000-1111"]


def test_cuda_visible_devices_empty_means_no_gpu(
    install: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install(gpus(2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(BackendUnavailable) as exc:
        NvmlBackend().open(0.0)
    assert "CUDA_VISIBLE_DEVICES=''" in str(exc.value)
    assert "\n" not in str(exc.value)
    assert fake.calls[("nvmlShutdown", "")] == 1  # the init it did is undone


def test_mig_device_by_uuid(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    mig = Device(uuid="MIG-5e8a-77c1", name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", mem_total=10 * GIB)
    mig.fails["nvmlDeviceGetUtilizationRates"] = NotSupported
    fake = install(gpus(1), migs=[mig])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-5e8a-77c1")
    backend = NvmlBackend()
    infos = backend.open(0.0)
    assert [(i.uuid, i.mem_total_gib) for i in infos] == [("MIG-5e8a-77c1", 10.0)]
    (reading,) = backend.read(1.0)
    assert reading.uuid == "MIG-5e8a-77c1"
    assert reading.util_pct is None
    assert reading.mem_used_gib == 8.0
    assert fake.calls[("nvmlGpmQueryDeviceSupport", "MIG-5e8a-77c1")] == 0
    # its profile from its name: 1 of the H100's 7 compute slices, 1 of its 8 memory slices
    (info,) = infos
    assert info.mig is not None and info.mig.profile == "1g.10gb"
    assert (info.share(), info.share("memory")) == (1 / 7, 1 / 8)


def test_a_mig_instance_is_read_by_gpm_on_its_parent(
    install: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML gives a MIG device no utilization: its GPM graphics activity is its utilization,
    read on the parent GPU by its GPU instance id; its share from its parent's memory (a
    memory-heavy 1g.20gb is 2 of 8 memory slices of an H100 80GB)."""
    h100 = gpus(1)[0]
    mig = Device(
        uuid="MIG-1111-2222",
        name="NVIDIA H100 80GB HBM3 MIG 1g.20gb",
        mem_total=20 * GIB,
        parent=h100,
        gi_id=9,
    )
    mig.fails["nvmlDeviceGetUtilizationRates"] = NotSupported
    other = Device(uuid="MIG-3333-4444", name=mig.name, parent=h100, gi_id=3)
    fake = install([h100], migs=[mig, other])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1111-2222")
    backend = NvmlBackend()
    (info,) = backend.open(0.0)
    assert (info.share(), info.share("memory")) == (1 / 7, 2 / 8)
    mig.gpm_counters = {GRAPHICS: 40.0, SM_UTIL: 30.0}
    other.gpm_counters = {GRAPHICS: 99.0}
    backend.read(1.0)
    mig.gpm_counters = {GRAPHICS: 100.0, SM_UTIL: 75.0}  # +60 and +45 between the two
    (reading,) = backend.read(2.0)
    assert (reading.util_pct, reading.sm_active_pct) == (60.0, 45.0)
    assert fake.calls[("nvmlGpmMigSampleGet", h100.uuid)] == 2
    assert fake.calls[("nvmlGpmSampleGet", h100.uuid)] == 0


def test_a_mig_instance_named_without_its_profile_is_read_from_its_attributes(
    install: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1c.3g.40gb (one compute slice of a 3g GPU instance) of an A100 80GB: 1/7 by compute;
    by memory 4 of 8 slices shared by the 3 compute slices' worth, 1/3 of it: 1/6."""
    a100 = Device(uuid="GPU-a100", name="NVIDIA A100-SXM4-80GB", mem_total=80 * GIB)
    mig = Device(uuid="MIG-5555", name="NVIDIA A100-SXM4-80GB", parent=a100, gi_id=1)
    mig.attributes = types.SimpleNamespace(
        gpuInstanceSliceCount=3, computeInstanceSliceCount=1, memorySizeMB=40_192
    )
    install([a100], migs=[mig])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-5555")
    (info,) = NvmlBackend().open(0.0)
    assert info.mig is not None and info.mig.profile == "1c.3g.39gb"
    assert info.share() == pytest.approx(1 / 7)
    assert info.share("memory") == pytest.approx(4 / 8 / 3)


def test_a_mig_instance_whose_profile_nvml_does_not_say_is_a_whole_gpu_and_says_so(
    install: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    mig = Device(uuid="MIG-6666", name="NVIDIA H100 80GB HBM3")
    install(gpus(1), migs=[mig])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-6666")
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        (info,) = NvmlBackend().open(0.0)
    assert info.mig is None and info.share() == 1.0
    assert "MIG device MIG-6666" in caplog.text and "counted as a whole GPU" in caplog.text


def test_unknown_mig_uuid_means_no_gpu(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(gpus(1))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-dead")
    with pytest.raises(BackendUnavailable, match="no GPU visible"):
        NvmlBackend().open(0.0)


def test_local_rank_picks_its_gpu(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(gpus(4))
    monkeypatch.setenv("LOCAL_RANK", "2")
    infos = NvmlBackend().open(0.0)
    assert [(i.index, i.uuid) for i in infos] == [(2, "GPU-ccc-0000-1111")]


def test_explicit_devices_win(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(gpus(4))
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2,1")
    infos = NvmlBackend(devices=[2]).open(0.0)
    assert [(i.index, i.uuid) for i in infos] == [(2, "GPU-bbb-0000-1111")]


@pytest.mark.parametrize("error", [LibraryNotFound, DriverNotLoaded])
def test_nvml_missing_is_unavailable(install: Any, error: type[NVMLError]) -> None:
    fake = install(gpus(1))
    fake.init_error = error
    with pytest.raises(BackendUnavailable) as exc:
        NvmlBackend().open(0.0)
    message = str(exc.value)
    assert message.startswith("NVML unavailable: ")
    assert "\n" not in message
    assert fake.calls[("nvmlShutdown", "")] == 0  # nothing to undo


def test_real_pynvml_without_gpu_is_unavailable() -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver; tests/gpu covers it")
    with pytest.raises(BackendUnavailable, match=r"^NVML unavailable: .*no NVIDIA driver"):
        NvmlBackend().open(0.0)


# -- reading ----------------------------------------------------------------------------------


def test_units_are_converted(install: Any) -> None:
    install(gpus(1))
    backend = NvmlBackend()
    backend.open(0.0)
    (r,) = backend.read(1.0)
    assert r.util_pct == 87.0
    assert r.mem_used_gib == 8.0
    assert r.mem_total_gib == 80.0
    assert r.power_w == 250.0
    assert r.energy_j == 1500.0
    assert r.sm_clock_mhz == 1980.0
    assert r.temp_c == 65.0


def test_throttle_time_is_the_power_and_thermal_violation_counters_added(install: Any) -> None:
    devs = gpus(2)
    devs[0].violation_ns = {0: 2_000_000_000, 1: 500_000_000, 2: 9_000_000_000}
    devs[1].fails["nvmlDeviceGetViolationStatus"] = NotSupported
    devs[1].reasons = 0x1 | 0x10  # idle and sync boost: not throttling
    fake = install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    first = by_uuid(backend.read(1.0))
    # power 2 s + thermal 0.5 s (sync boost's counter, policy 2, is not the machine's)
    assert first[devs[0].uuid].throttle_ns == 2_500_000_000.0
    assert first[devs[0].uuid].throttled_share is None  # a counter: the reasons are not asked
    assert fake.calls[("nvmlDeviceGetCurrentClocksEventReasons", devs[0].uuid)] == 0
    assert first[devs[1].uuid].throttle_ns is None
    assert first[devs[1].uuid].throttled_share == 0.0
    devs[1].reasons = 0x40  # hardware thermal slowdown
    assert by_uuid(backend.read(2.0))[devs[1].uuid].throttled_share == 1.0
    devs[1].reasons = 0x4 | 0x1  # the power cap
    assert by_uuid(backend.read(3.0))[devs[1].uuid].throttled_share == 1.0


def test_a_gpu_that_counts_power_but_not_thermal_violations_is_sampled(install: Any) -> None:
    """NVML before 13 documents "Violation for thermal capping is not supported at this time":
    the power counter alone would miss thermal throttling, so the reasons are read instead,
    and the counters are not asked again."""
    devs = gpus(1)
    devs[0].violation_ns = {0: 7_000_000_000}
    devs[0].reasons = 0x20  # software thermal slowdown
    fake = install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    for t in (1.0, 2.0):
        (r,) = backend.read(t)
        assert (r.throttle_ns, r.throttled_share) == (None, 1.0)
    assert fake.calls[("nvmlDeviceGetViolationStatus", devs[0].uuid)] == 2  # power, thermal: once


def test_unsupported_metric_is_none_and_logged_once(install: Any, caplog: Any) -> None:
    devs = gpus(2)
    devs[1].fails["nvmlDeviceGetPowerUsage"] = NotSupported
    fake = install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    caplog.set_level(logging.INFO, logger="gpu_kpi")
    for t in (1.0, 2.0, 3.0):
        got = by_uuid(backend.read(t))
        assert got[devs[0].uuid].power_w == 250.0
        assert got[devs[1].uuid].power_w is None
        assert got[devs[1].uuid].temp_c == 65.0  # the other metrics go on
    notes = [r for r in caplog.records if "power_w" in r.getMessage()]
    assert len(notes) == 1
    assert devs[1].uuid in notes[0].getMessage()
    assert fake.calls[("nvmlDeviceGetPowerUsage", devs[1].uuid)] == 1  # not asked again
    assert fake.calls[("nvmlDeviceGetPowerUsage", devs[0].uuid)] == 3


def test_passing_error_is_none_once_then_retried(install: Any) -> None:
    devs = gpus(1)
    devs[0].fails["nvmlDeviceGetTemperature"] = Timeout
    install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    assert backend.read(1.0)[0].temp_c is None
    del devs[0].fails["nvmlDeviceGetTemperature"]
    assert backend.read(2.0)[0].temp_c == 65.0


def test_gpm_metrics_between_two_samples(install: Any) -> None:
    devs = gpus(1)
    devs[0].gpm_unsupported = {DRAM}
    fake = install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    first = backend.read(1.0)[0]
    assert (first.sm_active_pct, first.tensor_active_pct) == (None, None)  # no previous sample
    devs[0].gpm_counters = {SM_UTIL: 55.0, SM_OCC: 30.0, TENSOR: 40.0, DRAM: 12.0}
    second = backend.read(2.0)[0]
    assert second.sm_active_pct == 55.0
    assert second.sm_occupancy_pct == 30.0
    assert second.tensor_active_pct == 40.0
    assert second.dram_active_pct is None  # that metric alone failed
    devs[0].gpm_counters = {SM_UTIL: 55.0 + 20.0, SM_OCC: 30.0, TENSOR: 40.0 + 5.0}
    third = backend.read(3.0)[0]
    assert (third.sm_active_pct, third.sm_occupancy_pct, third.tensor_active_pct) == (
        20.0,
        0.0,
        5.0,
    )
    assert len(fake.samples) == 2  # two buffers reused, not one allocated per read
    backend.close()
    assert all(s.freed for s in fake.samples)


def test_no_gpm_before_hopper(install: Any) -> None:
    devs = gpus(1)
    devs[0].gpm = False
    fake = install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    readings = [backend.read(t)[0] for t in (1.0, 2.0)]
    assert [r.sm_active_pct for r in readings] == [None, None]
    assert readings[1].util_pct == 87.0
    assert fake.samples == []


def test_a_time_sliced_gpu_s_processes_and_this_one_s_share_of_their_work(install: Any) -> None:
    """Two processes on a GPU busy 87%: this one did 40 of their 90 points of SM utilization,
    a work share of 4/9 (the sampler makes it a share of the GPU). The processes are read every
    10 s at most (a costly call that takes a driver lock): at 2 s the figure stands; at 11 s
    the samples since the last one seen (20 of 90): 2/9."""
    me = os.getpid()
    devs = gpus(2)
    devs[0].procs = [me, OTHER_PID]
    devs[0].proc_samples = [(me, 100, 40), (OTHER_PID, 100, 50)]
    devs[1].procs = [me]  # alone: no per-process figure needed
    fake = install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    got = by_uuid(backend.read(1.0))
    shared, alone = got[devs[0].uuid], got[devs[1].uuid]
    assert (shared.holders, shared.work_share, shared.util_pct) == (2, 4 / 9, 87.0)
    assert shared.proc_util_pct == 40.0
    assert (alone.holders, alone.work_share, alone.util_pct) == (None, None, 87.0)
    assert fake.calls[("nvmlDeviceGetProcessUtilization", devs[1].uuid)] == 0
    devs[0].proc_samples += [(me, 200, 20), (OTHER_PID, 200, 70)]
    later = by_uuid(backend.read(2.0))[devs[0].uuid]
    assert later.work_share == 4 / 9 and fake.proc_ts_asked == [0]
    last = by_uuid(backend.read(11.0))[devs[0].uuid]
    assert last.work_share == 2 / 9
    assert fake.proc_ts_asked == [0, 100]  # only samples newer than the last one seen


def test_a_shared_gpu_whose_processes_say_nothing_of_this_one_is_split_evenly(
    install: Any,
) -> None:
    """In a PID namespace NVML's host PIDs never match this process: two other processes on
    the GPU, this one unseen: three holders, the work share unmeasured (the sampler splits it
    evenly). A GPU whose processes all idle: an even share of no work."""
    devs = gpus(2)
    devs[0].procs = [OTHER_PID, OTHER_PID + 1]
    devs[0].proc_samples = [(OTHER_PID, 100, 30)]
    devs[1].procs = [os.getpid(), OTHER_PID]
    devs[1].proc_samples = [(os.getpid(), 100, 0), (OTHER_PID, 100, 0)]
    devs[1].util = 0
    install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    got = by_uuid(backend.read(1.0))
    unseen, idle = got[devs[0].uuid], got[devs[1].uuid]
    assert (unseen.holders, unseen.work_share) == (3, None)
    assert (idle.holders, idle.work_share) == (2, 0.5)


def test_lost_gpu_is_left_out_and_warned_once(install: Any, caplog: Any) -> None:
    devs = gpus(2)
    fake = install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    assert len(backend.read(1.0)) == 2
    devs[0].fails["nvmlDeviceGetMemoryInfo"] = GpuIsLost
    caplog.set_level(logging.INFO, logger="gpu_kpi")
    for t in (2.0, 3.0, 4.0):
        readings = backend.read(t)
        assert [r.uuid for r in readings] == [devs[1].uuid]
        assert readings[0].util_pct == 87.0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert devs[0].uuid in warnings[0].getMessage()
    assert backend.lost == {devs[0].uuid}
    assert fake.calls[("nvmlDeviceGetMemoryInfo", devs[0].uuid)] == 3  # open, read 1, read 2
    lost_samples = fake.samples[:2]
    assert all(s.freed for s in lost_samples)
    backend.close()
    assert all(s.freed for s in fake.samples)


def test_unknown_error_counts_as_lost(install: Any) -> None:
    devs = gpus(2)
    install(devs)
    backend = NvmlBackend()
    backend.open(0.0)
    devs[1].fails["nvmlDeviceGetUtilizationRates"] = Unknown
    assert [r.uuid for r in backend.read(1.0)] == [devs[0].uuid]
    assert backend.lost == {devs[1].uuid}


# -- closing ----------------------------------------------------------------------------------


def test_close_shuts_down_once(install: Any) -> None:
    fake = install(gpus(1))
    backend = NvmlBackend()
    backend.close()  # before open: nothing to do
    backend.open(0.0)
    backend.read(1.0)
    backend.close()
    backend.close()
    assert fake.calls[("nvmlShutdown", "")] == 1
    assert fake.calls[("nvmlInit", "")] == 1
    assert backend.read(2.0) == []


def test_reopen_after_close(install: Any) -> None:
    fake = install(gpus(1))
    backend = NvmlBackend()
    backend.open(0.0)
    backend.close()
    assert [i.uuid for i in backend.open(5.0)] == ["GPU-aaa-0000-1111"]
    assert backend.read(6.0)[0].power_w == 250.0
    backend.close()
    assert fake.calls[("nvmlInit", "")] == fake.calls[("nvmlShutdown", "")] == 2
