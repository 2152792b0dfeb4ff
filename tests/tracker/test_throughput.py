"""tracker.throughput: step counters and MFU, no clock and no thread."""

from __future__ import annotations

import pytest

from tracker.throughput import StepCounter, mfu


def test_step_counter_rates_and_data_wait() -> None:
    c = StepCounter()
    c.add(0.5, 0.1, 32, 4096, 1e12)
    c.add(1.5, None, 32, 4096, 1e12)  # a step whose wait is unknown adds time, not wait
    assert c.steps == 2 and c.time_s == 2.0
    assert c.rate(c.samples) == 32.0  # 64 samples in 2 s
    assert c.rate(c.tokens) == 4096.0
    assert c.step_time_ms == 1000.0
    assert c.data_wait_pct == pytest.approx(100 * 0.1 / 2.0)


def test_empty_counter_knows_nothing() -> None:
    c = StepCounter()
    assert (c.rate(10), c.step_time_ms, c.data_wait_pct) == (None, None, None)


def test_mfu_against_the_dense_peak() -> None:
    # 2 H100s at 989.4 TFLOP/s bf16 dense; 791.5 TFLOP/s achieved = 0.4
    assert mfu(791.52e12, 989.4, 2) == pytest.approx(0.4)
    assert mfu(1e12, None, 1) is None  # unknown GPU: no MFU rather than a wrong one
    assert mfu(1e12, 989.4, 0) is None
