"""The GPU backend contract (:class:`tracker.gpu.GpuBackend`), run against every backend.

A new backend gets the suite by adding one line to ``BACKENDS`` (and, if it can make one GPU
stop answering, a ``lose`` function in its case). NVML runs over a minimal fake ``pynvml``
(``tests/tracker/gpu/test_nvml.py`` has the full one; its module is not importable by name when
``tests/contracts`` runs alone).
"""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from fakes import T0

from tracker.gpu import BackendError, GpuBackend, GpuInfo, GpuReading, open_backend

GIB = 1024**3
PCT_FIELDS = [f.name for f in fields(GpuReading) if f.name.endswith("_pct")]

REPLAY_LOG = """\
timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]
2026/11/23 10:00:00.000, 0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 90 %, 40960 MiB, 81920 MiB, 300.00 W
2026/11/23 10:00:00.000, 1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 10 %, 1024 MiB, 81920 MiB, 80.50 W
2026/11/23 10:00:01.000, 0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 100 %, 40960 MiB, 81920 MiB, 390.00 W
2026/11/23 10:00:01.000, 1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 0 %, 1024 MiB, 81920 MiB, 60.00 W
2026/11/23 10:00:02.000, 0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 50 %, 81920 MiB, 81920 MiB, 250.00 W
2026/11/23 10:00:02.000, 1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 30 %, 2048 MiB, 81920 MiB, 90.00 W
"""

# -- a minimal fake pynvml: two H100s, 87% busy at 250 W; a lost one answers GpuIsLost ----------


class NVMLError(Exception):
    pass


class NVMLError_GpuIsLost(NVMLError):  # pynvml's class name: the backend looks it up
    pass


class FakeNvml(types.ModuleType):
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    MODEL = "NVIDIA H100 80GB HBM3"

    def __init__(self, count: int) -> None:
        super().__init__("pynvml")
        self.NVMLError = NVMLError
        self.NVMLError_GpuIsLost = NVMLError_GpuIsLost
        self.uuids = [f"GPU-fake-{i}" for i in range(count)]
        self.lost: set[str] = set()
        self.energy_mj = dict.fromkeys(self.uuids, 5_000_000)

    def _ask(self, handle: str) -> str:
        if handle in self.lost:
            raise NVMLError_GpuIsLost("GPU is lost")
        return handle

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return self.uuids[i]

    def nvmlDeviceGetUUID(self, h: str) -> str:
        return self._ask(h)

    def nvmlDeviceGetName(self, h: str) -> str:
        self._ask(h)
        return self.MODEL

    def nvmlDeviceGetMemoryInfo(self, h: str) -> types.SimpleNamespace:
        self._ask(h)
        return types.SimpleNamespace(used=20 * GIB, total=80 * GIB)

    def nvmlDeviceGetUtilizationRates(self, h: str) -> types.SimpleNamespace:
        self._ask(h)
        return types.SimpleNamespace(gpu=87)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        self._ask(h)
        return 250_000

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        self.energy_mj[self._ask(h)] += 250_000  # 1 s at 250 W per reading
        return self.energy_mj[h]

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        self._ask(h)
        return 1980

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        self._ask(h)
        return 65


# -- the backends -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    backend: GpuBackend
    name: str
    """The ``name`` it must have."""
    model: str
    """The model name its GpuInfo must carry."""
    energy: bool
    """Whether it reports the energy counter (an nvidia-smi CSV log has none: it must be None)."""
    lose: Callable[[str], None] | None = None
    """Make the GPU with this UUID stop answering, where the backend can simulate that."""


def _simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    return Case(
        open_backend("simulated:healthy@H100:2"), "simulated", "NVIDIA H100 80GB HBM3", True
    )


def _replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    (tmp_path / "gpu.csv").write_text(REPLAY_LOG)
    return Case(
        open_backend(f"replay:{tmp_path / 'gpu.csv'}"), "replay", "NVIDIA A100-SXM4-80GB", False
    )


def _nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    fake = FakeNvml(2)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return Case(open_backend("nvml"), "nvml", FakeNvml.MODEL, True, lose=fake.lost.add)


BACKENDS: dict[str, Callable[[Path, pytest.MonkeyPatch], Case]] = {
    "simulated": _simulated,
    "replay": _replay,
    "nvml": _nvml,
}
# Checked by hand: the simulated backend has no way to lose a GPU, and replay keeps reporting a
# GPU whose rows end in the log (its last row, repeated), so only NVML can drop one.
LOSES_GPUS = ["nvml"]
ALLOWED_NAMES = {"nvml", "simulated", "replay"}


def _make(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Case]:
    for var in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "RANK", "GPU_KPI_GPU"):
        monkeypatch.delenv(var, raising=False)
    case = BACKENDS[request.param](tmp_path, monkeypatch)
    yield case
    case.backend.close()


@pytest.fixture(params=list(BACKENDS))
def case(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Case]:
    yield from _make(request, tmp_path, monkeypatch)


@pytest.fixture(params=LOSES_GPUS)
def lossy(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Case]:
    yield from _make(request, tmp_path, monkeypatch)


def reads(backend: GpuBackend, times: range) -> list[list[GpuReading]]:
    return [backend.read(T0 + t) for t in times]


# -- the contract -------------------------------------------------------------------------------


def test_is_a_backend_with_an_allowed_name(case: Case) -> None:
    assert isinstance(case.backend, GpuBackend)
    assert case.backend.name in ALLOWED_NAMES
    assert case.backend.name == case.name


def test_open_lists_gpus_with_unique_uuids_indices_from_zero_and_a_model(case: Case) -> None:
    infos = case.backend.open(T0)
    assert len(infos) == 2  # every case here has two GPUs
    assert all(isinstance(i, GpuInfo) for i in infos)
    assert len({i.uuid for i in infos}) == len(infos)
    assert [i.index for i in infos] == list(range(len(infos)))
    assert [i.name for i in infos] == [case.model] * len(infos)


def test_each_read_has_one_reading_per_opened_gpu(case: Case) -> None:
    uuids = [i.uuid for i in case.backend.open(T0)]
    for readings in reads(case.backend, range(0, 5)):
        assert all(isinstance(r, GpuReading) for r in readings)
        assert sorted(r.uuid for r in readings) == sorted(uuids)


def test_values_are_in_range(case: Case) -> None:
    case.backend.open(T0)
    readings = [r for rs in reads(case.backend, range(1, 7)) for r in rs]
    assert len(readings) == 12
    for r in readings:
        # every GPU here reports these: the range checks below are not vacuous
        assert None not in (r.util_pct, r.mem_used_gib, r.mem_total_gib, r.power_w)
        for name in PCT_FIELDS:
            value = getattr(r, name)
            assert value is None or 0.0 <= value <= 100.0, (name, value)
        assert r.mem_used_gib <= r.mem_total_gib  # type: ignore[operator]
        assert r.power_w >= 0.0  # type: ignore[operator]


def test_energy_counter_never_goes_back(case: Case) -> None:
    case.backend.open(T0)
    series: dict[str, list[float | None]] = {}
    for readings in reads(case.backend, range(1, 7)):
        for r in readings:
            series.setdefault(r.uuid, []).append(r.energy_j)
    assert len(series) == 2
    for values in series.values():
        if not case.energy:
            assert values == [None] * 6  # missing is None, never 0
            continue
        known = [v for v in values if v is not None]
        assert len(known) == 6
        assert known == sorted(known)


@pytest.mark.parametrize("when", ["before open", "after close"])
def test_read_without_an_open_backend_gives_no_reading(case: Case, when: str) -> None:
    # The rule that holds for all: no reading, as [] (nvml) or our BackendError (simulated,
    # replay) -- never stale readings, never another exception. close() twice is harmless.
    if when == "after close":
        case.backend.open(T0)
        case.backend.read(T0 + 1)
        case.backend.close()
        case.backend.close()
    try:
        got = case.backend.read(T0 + 2)
    except BackendError:
        return
    assert got == []


def test_a_gpu_that_stops_answering_is_left_out_and_the_others_go_on(
    lossy: Case, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = (i.uuid for i in lossy.backend.open(T0))
    assert len(lossy.backend.read(T0 + 1)) == 2
    assert lossy.lose is not None
    lossy.lose(first)
    caplog.set_level(logging.INFO, logger="gpu_kpi")
    for readings in reads(lossy.backend, range(2, 5)):
        assert [r.uuid for r in readings] == [second]
        assert readings[0].util_pct is not None
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1  # logged once, not at every reading
    assert first in warned[0].getMessage()
