"""Step maths, no I/O and no clock: step counters over a span, rates, data wait, MFU.

The session feeds :class:`StepCounter` with what its hooks measured (a step's duration, the
time it waited for input, its samples, tokens and FLOPs); everything here is arithmetic on
those numbers, so a test states the expected figure directly.
"""

from __future__ import annotations


class StepCounter:
    """Step counters over a span (the run, or the current log window). Warm-up excluded by the
    caller. Times in seconds; FLOPs are model FLOPs."""

    __slots__ = ("flops", "samples", "steps", "time_s", "tokens", "wait_s", "waited")

    def __init__(self) -> None:
        self.steps = 0
        self.time_s = 0.0
        self.wait_s = 0.0
        self.waited = 0
        self.samples = 0
        self.tokens = 0
        self.flops = 0.0

    def add(self, dt: float, wait: float | None, samples: int | None, tokens: int | None,
            flops: float | None) -> None:
        """One step of ``dt`` seconds, ``wait`` of them waiting for input (None: not known)."""
        self.steps += 1
        self.time_s += dt
        if wait is not None:
            self.wait_s += wait
            self.waited += 1
        if samples:
            self.samples += samples
        if tokens:
            self.tokens += tokens
        if flops:
            self.flops += flops

    def rate(self, total: float) -> float | None:
        """``total`` per second of step time, or None before any measured time."""
        return total / self.time_s if total and self.time_s > 0 else None

    @property
    def data_wait_pct(self) -> float | None:
        """Share of step time spent waiting for input, 0–100."""
        if not self.waited or self.time_s <= 0:
            return None
        return min(100.0, 100.0 * self.wait_s / self.time_s)

    @property
    def step_time_ms(self) -> float | None:
        return 1000.0 * self.time_s / self.steps if self.steps else None


def mfu(flops_per_s: float, peak_tflops_per_gpu: float | None, gpu_count: int) -> float | None:
    """Model FLOPs utilization, a fraction 0–1: achieved FLOP/s ÷ the GPUs' dense peak, or None
    when the peak (:func:`tracker.peaks.peak_tflops`) or the GPUs are unknown."""
    if not peak_tflops_per_gpu or gpu_count <= 0:
        return None
    return flops_per_s / (peak_tflops_per_gpu * 1e12 * gpu_count)
