"""One-shot check of the tracker on a real NVIDIA GPU: every figure in one run, under 5 minutes.

    make gpu-check        # = .venv/bin/python bench/gpu_check.py

Sections, each with its own time budget (a failing one prints one line; the others go on):

1. ``pytest -m gpu tests/gpu``: the NVML backend's hardware tests (summary line).
2. The sampler's CPU cost with real NVML (and GPM on Hopper+) at 1 s over ~30 s: CPU ms per
   sampling pass and % of one core; µs per ``backend.read()`` over 200 back-to-back calls; the
   per-process query of a time-sliced GPU (processes and their utilization) over 50 calls, and
   its share of a core at one every 10 s (fails at 0.1% per GPU).
3. Under a bf16 8192×8192 matmul load on cuda:0 for ~60 s: our NVML utilization read at 1 s
   against ``nvidia-smi --query-gpu=utilization.gpu -l 1`` over the same minute (means, series
   lengths, difference in percentage points); GPM SM-active and tensor-active means, and OFU
   (tensor active × SM clock over the clock the peak is quoted at).
4. MFU of timed bf16 matmuls (2·n³ FLOPs each, timed with CUDA events) against the GPU's dense
   bf16 peak from ``tracker.peaks``, beside section 3's OFU of the same matmuls: a gap over 10%
   is named (a GEMM's model FLOPs are the hardware's).

Ends with a ``GPU-CHECK SUMMARY`` block of ``key=value`` lines. Exit 0 when every section ran,
1 when one failed or the total budget ran out. Without NVML or a GPU: one line, exit 0.
"""

from __future__ import annotations

import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracker.gpu.base import GpuReading

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOTAL_BUDGET_S = 295.0  # then a watchdog prints the summary and exits 1
BUDGETS_S = {"pytest": 125.0, "sampler": 45.0, "util": 95.0, "mfu": 25.0}  # SIGALRM, per section
PYTEST_TIMEOUT_S = 120.0
SAMPLER_S = 30.0
READ_CALLS = 200
PROC_CALLS = 50
LOAD_S = 60
WARMUP_S = 3.0
MATMUL_N = 8192
MFU_TARGET_S = 3.0  # GPU time of the timed matmul batch
DEVICE = "cuda:0"

SUMMARY: dict[str, str] = {}
GPU_NAME: list[str] = []  # NVML's name of cuda:0, once section 3 has opened it
OFU: list[float] = []  # section 3's observed FLOPs utilization of the matmul load
CHILDREN: list[subprocess.Popen[str]] = []  # nvidia-smi: killed however the script ends


def put(key: str, value: object, note: str = "") -> None:
    """Record one figure for the summary and print it now (None prints as n/a)."""
    text = "n/a" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
    SUMMARY[key] = text
    print(f"  {key}={text}" + (f"  ({note})" if note else ""), flush=True)


def gpu_present() -> bool:
    """Whether NVML starts and sees a GPU. Asks pynvml directly, so that the GPU-less path
    imports nothing of ours, whatever the package layout."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return False
    try:
        return int(pynvml.nvmlDeviceGetCount()) > 0
    except pynvml.NVMLError:
        return False
    finally:
        with suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


@contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the main thread after ``seconds`` (between bytecodes: a blocked
    CUDA call is cut when it returns; the total watchdog covers the rest)."""

    def _raise(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"over its {seconds:.0f} s budget")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_section(name: str, fn: Callable[[], None]) -> bool:
    print(f"== {name} (budget {BUDGETS_S[name]:.0f} s)", flush=True)
    t0 = time.monotonic()
    try:
        with budget(BUDGETS_S[name]):
            fn()
        ok = True
    except Exception as err:
        message = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        print(f"gpu-check: {name} FAILED: {message}", flush=True)
        ok = False
    SUMMARY[f"{name}.status"] = "ok" if ok else "failed"
    SUMMARY[f"{name}.elapsed_s"] = f"{time.monotonic() - t0:.1f}"
    return ok


def print_summary() -> None:
    print("GPU-CHECK SUMMARY")
    for key, value in dict(SUMMARY).items():
        print(f"{key}={value}")
    sys.stdout.flush()


def cuda_torch() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} has no CUDA here: install a CUDA build")
    return torch


# -- 1. the GPU tests -----------------------------------------------------------------------------


def check_pytest() -> None:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-q"]
    p = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=PYTEST_TIMEOUT_S, check=False
    )
    lines = [line for line in p.stdout.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("FAILED", "ERROR", "SKIPPED")):
            print(f"  {line}")
    result = lines[-1].strip("= ") if lines else f"no output; stderr: {p.stderr.strip()[-200:]}"
    put("pytest.rc", p.returncode)
    put("pytest.result", result)
    if p.returncode != 0:
        raise RuntimeError(f"pytest exited {p.returncode}: {result}")


# -- 2. the sampler's CPU cost --------------------------------------------------------------------


def check_sampler() -> None:
    from tracker.gpu import open_backend
    from tracker.sampler import Sampler

    sampler = Sampler(open_backend("nvml"), interval_s=1.0)
    passes, cpu_s = [0], [0.0]
    inner = sampler.sample

    def timed(now: float | None = None) -> None:  # runs on the sampler thread
        t = time.thread_time()
        inner(now)
        cpu_s[0] += time.thread_time() - t
        passes[0] += 1

    sampler.sample = timed  # type: ignore[method-assign]
    gpus = sampler.start()
    try:
        p0, wall0, proc0 = passes[0], time.monotonic(), time.process_time()
        time.sleep(SAMPLER_S)  # the main thread idles: the process's CPU time is the sampler's
        wall, proc = time.monotonic() - wall0, time.process_time() - proc0
        window_passes = passes[0] - p0
        gpm = any(r.sm_active_pct is not None for r in sampler.last.values())
    finally:
        sampler.stop()
    put("sampler.gpus", len(gpus), ", ".join(g.name for g in gpus))
    put("sampler.passes", window_passes, f"in {wall:.1f} s at 1 s")
    put("sampler.gpm", "yes" if gpm else "no", "GPM SM-active in the readings")
    put("sampler.cpu_ms_per_pass", 1e3 * cpu_s[0] / max(passes[0], 1), "sampler thread CPU")
    put("sampler.process_cpu_ms_per_pass", 1e3 * proc / max(window_passes, 1), "process CPU")
    put("sampler.core_pct", 100 * proc / wall, "process CPU as % of one core")

    backend = open_backend("nvml")
    backend.open(time.time())
    try:
        for _ in range(2):  # the first GPM read only takes a sample
            backend.read(time.time())
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(READ_CALLS):
            backend.read(time.time())
        wall_s, proc_s = time.perf_counter() - t0, time.process_time() - c0
    finally:
        backend.close()
    put("read.wall_us", 1e6 * wall_s / READ_CALLS, f"per backend.read(), {READ_CALLS} calls")
    put("read.cpu_us", 1e6 * proc_s / READ_CALLS, "process CPU per backend.read()")
    check_process_query()


def check_process_query() -> None:
    """The per-process query a time-sliced GPU costs (issue 44): the GPU's compute processes
    and their utilization since the start, as the backend asks them every PROC_EVERY_S, timed
    back to back on GPU 0; its share of a core at that cadence, against 0.1% per GPU."""
    from tracker.gpu import open_backend
    from tracker.gpu.nvml_names import PROC_EVERY_S

    backend = open_backend("nvml")
    backend.open(time.time())
    try:
        gpu = backend._gpus[0]  # type: ignore[attr-defined]
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(PROC_CALLS):
            backend._query(gpu, "procs", "nvmlDeviceGetComputeRunningProcesses")  # type: ignore[attr-defined]
            backend._query(gpu, "procs", "nvmlDeviceGetProcessUtilization", 0)  # type: ignore[attr-defined]
        wall_s, proc_s = time.perf_counter() - t0, time.process_time() - c0
    finally:
        backend.close()
    per_call_s = max(wall_s, proc_s) / PROC_CALLS
    put(
        "proc_query.wall_ms",
        1e3 * wall_s / PROC_CALLS,
        f"per processes + utilization, {PROC_CALLS} calls",
    )
    put("proc_query.cpu_ms", 1e3 * proc_s / PROC_CALLS, "process CPU per query")
    core_pct = 100 * per_call_s / PROC_EVERY_S
    put(
        "proc_query.core_pct_per_gpu",
        core_pct,
        f"at one query every {PROC_EVERY_S:g} s (goal < 0.1)",
    )
    if core_pct >= 0.1:
        raise RuntimeError(f"the per-process query costs {core_pct:.3f}% of a core per GPU")


# -- 3. our utilization against nvidia-smi under load ---------------------------------------------


def matmul_load(torch: Any, stop: threading.Event, errors: list[BaseException]) -> None:
    """Dense bf16 matmuls on cuda:0 until ``stop`` is set (on a thread of its own)."""
    try:
        a = torch.randn(MATMUL_N, MATMUL_N, device=DEVICE, dtype=torch.bfloat16)
        b = torch.randn(MATMUL_N, MATMUL_N, device=DEVICE, dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a = (a @ b).clamp_(-1, 1)
            torch.cuda.synchronize()
    except BaseException as err:
        errors.append(err)


def start_smi(uuid: str) -> list[float]:
    """Start ``nvidia-smi -l 1`` on the GPU with this UUID; its values land in the list."""
    proc = subprocess.Popen(
        [
            "nvidia-smi",
            "--query-gpu=utilization.gpu",
            "--format=csv,noheader,nounits",
            "-l",
            "1",
            "-i",
            uuid,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    CHILDREN.append(proc)
    values: list[float] = []

    def pump() -> None:
        for line in proc.stdout or ():
            with suppress(ValueError):  # "[N/A]" (MIG) and the like
                values.append(float(line.strip()))

    threading.Thread(target=pump, daemon=True).start()
    return values


def kill_children() -> None:
    while CHILDREN:
        proc = CHILDREN.pop()
        proc.kill()
        proc.wait(5)


def mean_of(readings: list[GpuReading], field: str) -> float | None:
    values = [v for r in readings if (v := getattr(r, field)) is not None]
    return statistics.fmean(values) if values else None


def check_util() -> None:
    torch = cuda_torch()
    from tracker.gpu.nvml import NvmlBackend

    backend = NvmlBackend(devices=[0])  # the GPU torch calls cuda:0
    (info,) = backend.open(time.time())
    GPU_NAME.append(info.name)
    put("gpu.name", info.name, info.uuid)
    stop = threading.Event()
    errors: list[BaseException] = []
    load = threading.Thread(target=matmul_load, args=(torch, stop, errors), daemon=True)
    smi_values: list[float] = []
    smi_error = ""
    ours: list[GpuReading] = []
    try:
        load.start()
        time.sleep(WARMUP_S)  # cuBLAS set-up, clocks up
        backend.read(time.time())  # GPM pairs each reading with the previous one
        try:
            smi_values = start_smi(info.uuid)
        except OSError as err:
            smi_error = f"nvidia-smi did not start: {err}"
        start = time.monotonic()
        for tick in range(1, LOAD_S + 1):  # one reading a second, on a fixed grid
            time.sleep(max(0.0, start + tick - time.monotonic()))
            if errors:
                break
            ours.extend(backend.read(time.time()))
    finally:
        stop.set()
        kill_children()
        load.join(10)
        backend.close()
    if errors:
        raise RuntimeError(f"matmul load failed: {errors[0]!r}")
    our_mean = mean_of(ours, "util_pct")
    put("util.ours_samples", len(ours))
    put("util.ours_mean_pct", our_mean, "NVML utilization, read at 1 s")
    put("util.sm_active_mean_pct", mean_of(ours, "sm_active_pct"), "GPM")
    put("util.tensor_active_mean_pct", mean_of(ours, "tensor_active_pct"), "GPM")
    from tracker.peaks import observed, peak_clock_mhz

    mhz = peak_clock_mhz(info.name)
    each = [
        o
        for r in ours
        if r.tensor_active_pct is not None
        and (o := observed(r.tensor_active_pct / 100, r.sm_clock_mhz, mhz)) is not None
    ]
    if each:  # the hardware's figure of the same bf16 matmuls check_mfu times (issue 45)
        OFU.append(statistics.fmean(each))
        put("util.ofu", OFU[0], f"tensor active x SM clock / {mhz:g} MHz, read at 1 s")
    if smi_error or not smi_values:
        raise RuntimeError(smi_error or "nvidia-smi printed no utilization")
    smi_mean = statistics.fmean(smi_values)
    put("util.smi_samples", len(smi_values))
    put("util.smi_mean_pct", smi_mean, "nvidia-smi utilization.gpu -l 1")
    if our_mean is None:
        raise RuntimeError("NVML reported no utilization for cuda:0")
    put("util.diff_pp", abs(our_mean - smi_mean), "|ours - nvidia-smi|, percentage points")
    if abs(our_mean - smi_mean) > 5.0 or our_mean < 50.0:
        print(f"  WARN: ours {our_mean:.1f}% vs nvidia-smi {smi_mean:.1f}% under a full load")


# -- 4. MFU of a timed matmul ---------------------------------------------------------------------


def check_mfu() -> None:
    torch = cuda_torch()
    from tracker.peaks import denominator, judge, ofu_gap

    n = MATMUL_N
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    c = torch.empty_like(a)

    def timed_s(count: int) -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(count):
            torch.matmul(a, b, out=c)
        end.record()
        torch.cuda.synchronize()
        return float(start.elapsed_time(end)) / 1e3

    timed_s(10)  # warm-up: cuBLAS heuristics, clocks
    count = max(20, min(5000, int(MFU_TARGET_S / max(timed_s(20) / 20, 1e-6))))
    seconds = timed_s(count)
    flops_per_s = 2 * n**3 * count / seconds
    name = GPU_NAME[0] if GPU_NAME else str(torch.cuda.get_device_name(0))
    den = denominator(name, "bf16")
    peak = den.tflops
    value, note = judge(flops_per_s, den, 1)
    put("mfu.matmuls", count, f"{n}x{n} bf16, {seconds:.2f} s of GPU time")
    put("mfu.achieved_tflops", flops_per_s / 1e12)
    put("mfu.peak_tflops", peak, f"dense bf16 peak of {name}")
    put("mfu.mfu", value, "achieved / peak")
    if OFU and value is not None:  # a GEMM does the FLOPs it counts: the two should agree
        gap = ofu_gap(value, OFU[0])
        put("mfu.ofu", OFU[0], "section 3's observed FLOPs utilization")
        put("mfu.ofu_gap", gap or "within 10%")
        if gap:
            print(f"  WARN: {gap}")
    if value is None:
        print(f"  WARN: no MFU for {name!r}: {note}")
    elif not 0.05 <= value <= 1.0:
        print(f"  WARN: MFU {value:.3g} is outside 0.05-1.0 (expected 0.3-0.9 on H100/H200)")


SECTIONS: list[tuple[str, Callable[[], None]]] = [
    ("pytest", check_pytest),
    ("sampler", check_sampler),
    ("util", check_util),
    ("mfu", check_mfu),
]


def overrun_exit() -> None:
    print(f"gpu-check: over the total budget of {TOTAL_BUDGET_S:.0f} s: stopping", flush=True)
    kill_children()
    SUMMARY["status"] = "overrun"
    print_summary()
    os._exit(1)


def main() -> int:
    if not gpu_present():
        print("gpu-check: no NVIDIA GPU/NVML here: skipped")
        return 0
    logging.basicConfig(level=logging.WARNING, format="  log %(name)s: %(message)s")
    logging.getLogger("gpu_kpi").setLevel(logging.INFO)  # which metrics the device lacks
    watchdog = threading.Timer(TOTAL_BUDGET_S, overrun_exit)
    watchdog.daemon = True
    watchdog.start()
    t0 = time.monotonic()
    ok = [run_section(name, fn) for name, fn in SECTIONS]
    watchdog.cancel()
    SUMMARY["total_s"] = f"{time.monotonic() - t0:.1f}"
    SUMMARY["sections_failed"] = str(ok.count(False))
    print_summary()
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
