"""What reading a time-sliced GPU's processes costs the tracker, per GPU, as a share of a core.

On a GPU other processes use too, the NVML backend reads the GPU's compute processes and their
utilization (``nvmlDeviceGetComputeRunningProcesses``, ``nvmlDeviceGetProcessUtilization``)
every :data:`tracker.gpu.nvml_names.PROC_EVERY_S` seconds at most, and the sampler splits the
GPU by the share it measures. This script reads 8 GPUs at 1 s for ``--seconds`` of readings
through the NVML backend over a stand-in ``pynvml`` (the calls return what the real ones return
for a GPU shared by ``--processes`` processes, each with a utilization sample a second; the
driver's own time is not in it: ``bench/gpu_check.py`` times the real calls on a GPU), once with
the GPUs shared and once held alone, in turns: the difference in CPU time per reading second
and GPU is the per-process query's share of a core, against the goal of 0.1%.

    .venv/bin/python bench/process_query.py [--seconds 600] [--processes 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracker.gpu.nvml import NvmlBackend
from tracker.gpu.nvml_names import PROC_EVERY_S

GPUS = 8
GOAL_CORE_PCT = 0.1
"""Per GPU: the per-process query's CPU over the run's time, % of one core."""


class StandIn(types.ModuleType):
    """``pynvml`` as the backend calls it, without a driver: fixed device figures and, on a
    shared GPU, ``processes`` processes (this one first) with a sample a second each."""

    NVML_SUCCESS, NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 0, 1, 0
    NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL = 0, 1

    class NVMLError(Exception):
        pass

    def __init__(self, processes: int) -> None:
        super().__init__("pynvml")
        self.pids = [os.getpid(), *range(4_000_001, 4_000_000 + processes)]
        self.now_us = 0
        self.util = types.SimpleNamespace(gpu=60, memory=20)
        self.mem = types.SimpleNamespace(used=8 << 30, total=80 << 30)
        self.violation = types.SimpleNamespace(referenceTime=0, violationTime=0)

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return GPUS

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:04d}"

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return self.mem

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return self.util

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 400_000

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return 1_000_000

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1980

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 60

    def nvmlDeviceGetViolationStatus(self, h: int, policy: int) -> Any:
        return self.violation

    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        return types.SimpleNamespace(isSupportedDevice=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [types.SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in self.pids]

    def nvmlDeviceGetProcessUtilization(self, h: int, since_us: int) -> list[Any]:
        # a sample a second per process since ``since_us``, as the driver keeps them
        first = max(since_us // 1_000_000 + 1, self.now_us // 1_000_000 - 30)
        return [
            types.SimpleNamespace(pid=p, timeStamp=s * 1_000_000, smUtil=20, memUtil=5)
            for s in range(first, self.now_us // 1_000_000 + 1)
            for p in self.pids
        ]


def cpu_s(processes: int, seconds: int) -> tuple[float, int]:
    """CPU seconds of ``seconds`` readings of the 8 GPUs at 1 s, and the per-process reads."""
    fake = StandIn(processes)
    sys.modules["pynvml"] = fake
    backend = NvmlBackend()
    backend.open(0.0)
    asked = 0
    inner = fake.nvmlDeviceGetProcessUtilization

    def counted(h: int, since_us: int) -> list[Any]:
        nonlocal asked
        asked += 1
        return inner(h, since_us)

    fake.nvmlDeviceGetProcessUtilization = counted  # type: ignore[method-assign]
    try:
        t0 = time.process_time()
        for t in range(1, seconds + 1):
            fake.now_us = t * 1_000_000
            backend.read(float(t))
        return time.process_time() - t0, asked
    finally:
        backend.close()
        del sys.modules["pynvml"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    extra: list[float] = []
    asked = 0
    for _ in range(args.rounds):
        alone, _ = cpu_s(1, args.seconds)
        shared, asked = cpu_s(args.processes, args.seconds)
        extra.append((shared - alone) / (args.seconds * GPUS))
    per_gpu_pct = 100 * statistics.median(extra)
    print(
        f"{GPUS} GPUs read at 1 s for {args.seconds} s, each shared by {args.processes} "
        f"processes: {asked // GPUS} per-process reads per GPU (every {PROC_EVERY_S:g} s); "
        f"their CPU {per_gpu_pct:.4f}% of a core per GPU (median of {args.rounds} rounds: "
        f"{', '.join(f'{100 * e:.4f}' for e in extra)}), goal < {GOAL_CORE_PCT}%"
    )
    ok = per_gpu_pct < GOAL_CORE_PCT and asked // GPUS <= args.seconds // PROC_EVERY_S + 1
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
