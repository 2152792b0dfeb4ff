"""What the tracker costs a training loop, measured against the same loop without it.

1. ``run.step()`` alone: a tight loop of empty steps, with and without the call (µs per call).
2. A ~5 ms training step (a CPU matmul of fixed size), run in alternating rounds without the
   tracker and with it, in steady state (sampler thread at 1 s and at 0.1 s, store writes to a
   temporary SQLite file): the step-time ratio. Target: under 1% at 1 s and ``run.step()`` under 20 µs.

    .venv/bin/python bench/tracker_overhead.py [--rounds 9] [--steps 600]
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
    with track(
        name="bench-step",
        backend="simulated:healthy",
        store=False,
        log_to_python=False,
        log_every_s=3600,
        print_summary=False,
    ) as run:
        step = run.step
        t0 = time.perf_counter()
        for _ in range(n):
            step(samples=32, tokens=4096)
        tracked = time.perf_counter() - t0
    return base / n * 1e6, tracked / n * 1e6


def sample_us(n: int, gpus: int) -> float:
    """CPU time of one sampler pass (read + aggregates) over ``gpus`` simulated GPUs, µs."""
    from tracker.gpu.simulated import SimulatedBackend
    from tracker.sampler import Sampler

    clock = [0.0]
    sampler = Sampler(
        SimulatedBackend("input-bound", count=gpus), clock=lambda: clock[0], threaded=False
    )
    sampler.start()
    t0 = time.process_time()
    for i in range(1, n + 1):
        clock[0] = float(i)
        sampler.sample()
    return (time.process_time() - t0) / n * 1e6


def make_workload(target_ms: float) -> tuple[object, object, int]:
    import torch

    torch.set_num_threads(1)  # one core trains, as the training thread does on a GPU host
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
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args()

    base_us, step_us = per_call_us(args.calls)
    print(
        f"run.step(): {step_us - base_us:.2f} us per call "
        f"(loop {step_us:.2f} us vs {base_us:.3f} us empty; target < 20 us)"
    )

    for gpus in (1, 8):
        us = sample_us(5000, gpus)
        print(
            f"sampler: {us:.1f} us CPU per pass over {gpus} GPU(s) = {us / 1e4:.4f}% of a core "
            f"at the default 1 s interval"
        )

    a, b, size = make_workload(5.0)
    print(f"workload: {size}x{size} fp32 matmul on CPU, 1 thread")
    configs: list[tuple[str, float | None]] = [
        ("none", None),
        ("tracker 1s", 1.0),
        ("tracker 0.1s", 0.1),
    ]
    results: dict[str, list[float]] = {label: [] for label, _ in configs}
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/bench.db"
        for r in range(args.rounds):
            # rotate the order each round so that drift (clock, cache, neighbours) is shared
            for label, interval in configs[r % 3 :] + configs[: r % 3]:
                run = (
                    None
                    if interval is None
                    else track(
                        name="bench",
                        backend="simulated:healthy",
                        store=store,
                        interval_s=interval,
                        log_to_python=False,
                        print_summary=False,
                    ).start()
                )
                # the same warm-up and pause for every configuration; the pause also lets the
                # writer thread open the store (import SQLAlchemy, create tables) off the clock
                loop(a, b, 20, run)
                time.sleep(1.0)
                results[label].append(loop(a, b, args.steps, run))
                if run is not None:
                    run.finish()
    base = results["none"]
    print(
        f"{'configuration':<14} {'median step ms':>15} {'overhead (median of paired rounds)':>36}"
    )
    for label, values in results.items():
        paired = statistics.median(v / b - 1 for v, b in zip(values, base, strict=True))
        print(f"{label:<14} {statistics.median(values):15.3f} {100 * paired:35.2f}%")
    spread = statistics.pstdev(base) / statistics.mean(base)
    print(f"round-to-round noise of the baseline: {100 * spread:.1f}% (stdev / mean)")


if __name__ == "__main__":
    main()
