"""What the tracker costs a training loop, measured against the same loop without it.

1. ``run.step()`` alone: a tight loop of empty steps, with and without the call (µs per call).
2. A ~5 ms training step (a CPU matmul of fixed size), run in alternating rounds without the
   tracker and with it, in steady state (sampler thread at 1 s and at 0.1 s, store writes to a
   temporary SQLite file): the step-time ratio. Target: under 1% at 1 s and ``run.step()`` under 20 µs.

    .venv/bin/python bench/tracker_overhead.py [--rounds 5] [--steps 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracker import track


def per_call_us(n: int) -> tuple[float, float]:
    """(µs per empty loop iteration, µs per iteration with run.step())."""
    t0 = time.perf_counter()
    for _ in range(n):
        pass
    base = time.perf_counter() - t0
    with track(name="bench-step", backend="simulated:healthy", store=False,
               log_to_python=False, log_every_s=3600) as run:
        step = run.step
        t0 = time.perf_counter()
        for _ in range(n):
            step(samples=32, tokens=4096)
        tracked = time.perf_counter() - t0
    return base / n * 1e6, tracked / n * 1e6


def make_workload(target_ms: float) -> tuple[object, object, int]:
    import torch

    torch.manual_seed(0)
    torch.mm(torch.randn(256, 256), torch.randn(256, 256))  # start the thread pool first
    size = 128
    while True:
        a, b = torch.randn(size, size), torch.randn(size, size)
        for _ in range(3):
            torch.mm(a, b)
        t0 = time.perf_counter()
        for _ in range(10):
            torch.mm(a, b)
        ms = (time.perf_counter() - t0) / 10 * 1e3
        if ms >= target_ms or size > 4096:
            return a, b, size
        size = int(size * min(1.6, max(1.05, (target_ms / max(ms, 1e-3)) ** (1 / 3))))


def loop(a: object, b: object, steps: int, run: object | None) -> float:
    """Mean step time in ms."""
    import torch

    t0 = time.perf_counter()
    for _ in range(steps):
        if run is not None:
            run.data_ready()  # type: ignore[attr-defined]
        torch.mm(a, b)  # type: ignore[call-overload]
        if run is not None:
            run.step(samples=32)  # type: ignore[attr-defined]
    return (time.perf_counter() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args()

    base_us, step_us = per_call_us(args.calls)
    print(f"run.step(): {step_us - base_us:.2f} us per call "
          f"(loop {step_us:.2f} us vs {base_us:.3f} us empty; target < 20 us)")

    a, b, size = make_workload(5.0)
    print(f"workload: {size}x{size} fp32 matmul on CPU")
    results: dict[str, list[float]] = {"none": [], "tracker 1s": [], "tracker 0.1s": []}
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/bench.db"
        for _ in range(args.rounds):
            for label, interval in (("none", None), ("tracker 1s", 1.0), ("tracker 0.1s", 0.1)):
                run = None if interval is None else track(
                    name="bench", backend="simulated:healthy", store=store, interval_s=interval,
                    log_to_python=False).start()
                # the same warm-up and pause for every configuration; the pause also lets the
                # writer thread open the store (import SQLAlchemy, create tables) off the clock
                loop(a, b, 20, run)
                time.sleep(1.0)
                results[label].append(loop(a, b, args.steps, run))
                if run is not None:
                    run.finish()
    base = statistics.median(results["none"])
    print(f"{'configuration':<14} {'median step ms':>15} {'overhead':>9}")
    for label, values in results.items():
        med = statistics.median(values)
        print(f"{label:<14} {med:15.3f} {100 * (med / base - 1):8.2f}%")


if __name__ == "__main__":
    main()
