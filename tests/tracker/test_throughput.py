"""tracker.throughput: step counters and MFU, no clock and no thread."""

from __future__ import annotations

import math
import reprlib
from fractions import Fraction

import pytest
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tracker.peaks import denominator, judge
from tracker.throughput import RunSteps, StepCounter, count


def test_step_counter_rates_and_data_wait() -> None:
    s = RunSteps()
    s.step(10.0, warmup_steps=0)  # the first step has no start: not timed
    s.ready(10.1)
    s.step(10.5, warmup_steps=0, samples=32, tokens=4096, flops=1e12)
    s.step(12.0, warmup_steps=0, samples=32, tokens=4096, flops=1e12)  # wait unknown: time only
    c = s.total
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
    h100 = denominator("NVIDIA H100 80GB HBM3", "bf16")
    assert judge(791.52e12, h100, 2) == (pytest.approx(0.4), None)
    unknown = denominator("NVIDIA GeForce GTX 1080 Ti", "bf16")  # no MFU rather than a wrong one
    assert judge(1e12, unknown, 1) == (None, "no peak for NVIDIA GeForce GTX 1080 Ti")
    assert judge(1e12, h100, 0) == (None, None)


# -- what counts as a step's count, and a run's totals (issue 10) ---------------------------------


class _Index:
    def __index__(self) -> int:
        return 7


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (32, 32), (2.5, 2.5), (1e300, 1e300), (Fraction(3, 2), 1.5), (_Index(), 7)],
)
def test_count_takes_finite_numbers_at_or_above_zero(value: object, expected: float) -> None:
    n = count(value)
    assert n == expected and type(n) is type(expected)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (float("nan"), "not a finite number >= 0"),
        (float("inf"), "not a finite number >= 0"),
        (-5, "not a finite number >= 0"),
        (-1e-300, "not a finite number >= 0"),
        (True, "not a number"),
        ("5", "not a number"),
        (b"5", "not a number"),
        (None, "not a number"),
        ([1], "not a number"),
        (object(), "not a number"),
    ],
)
def test_count_refuses_the_rest(value: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        count(value)


def test_run_steps_time_the_steps_and_drop_bad_counts() -> None:
    """Steps end at 10, 11, 13 and 14 s; the batch of the third was ready at 12.5 s, the first
    two are warm-up. Measured: steps 3 and 4, 2 s + 1 s = 3 s; step 3 waited from the end of
    step 2 to its batch, 12.5 - 11 = 1.5 s (step 4's wait is not known). Good samples 4 + 4 + 4
    = 12 (step 2's nan dropped); measured samples 8."""
    s = RunSteps()
    assert s.step(10.0, warmup_steps=2, samples=4) == []
    assert s.step(11.0, warmup_steps=2, samples=float("nan")) == [
        "samples=nan (not a finite number >= 0)"
    ]
    s.ready(12.5)
    assert s.step(13.0, warmup_steps=2, samples=4, flops="x") == ["flops='x' (not a number)"]
    assert s.step(14.0, warmup_steps=2, samples=4, flops_per_step=1e12) == []
    assert (s.steps, s.samples) == (4, 12)
    assert (s.total.steps, s.total.time_s, s.total.wait_s, s.total.samples) == (2, 3.0, 1.5, 8)
    assert s.total.flops == 1e12
    assert s.take_window().time_s == 3.0 and s.window.steps == 0


def test_run_steps_never_let_a_total_overflow() -> None:
    s = RunSteps()
    assert s.step(1.0, warmup_steps=0, samples=1e308) == []
    assert s.step(2.0, warmup_steps=0, samples=1e308) == [
        "samples=1e+308 (the run's total would overflow)"
    ]
    assert s.step(3.0, warmup_steps=0, samples=2**1100) == [
        f"samples={reprlib.repr(2**1100)} (the run's total would overflow)"
    ]
    # an int that is a fine count alone still overflows a total near the limit
    assert s.step(4.0, warmup_steps=0, samples=2**1023) == [
        f"samples={reprlib.repr(2**1023)} (the run's total would overflow)"
    ]
    assert s.step(5.0, warmup_steps=0, samples=10**299) == []  # beside 1e308, still finite
    assert s.samples == 1e308 + 10**299 and s.steps == 5
    assert s.total.samples == 10**299 and s.total.steps == 4  # the first step is not timed


def test_run_steps_pause_and_interrupt() -> None:
    """Logging from 11 to 11.25 s is not the next step's: 12 - 11 - 0.25 = 0.75 s. After an
    interruption the next step is not measured at all."""
    s = RunSteps()
    s.step(10.0, warmup_steps=0)
    s.step(11.0, warmup_steps=0)
    s.pause(11.0, 11.25)
    s.step(12.0, warmup_steps=0)
    s.interrupt()
    s.step(20.0, warmup_steps=0)
    assert (s.steps, s.total.steps, s.total.time_s) == (4, 2, 1.75)


def test_a_step_with_unusable_settings_is_reported_not_raised() -> None:
    s = RunSteps()
    s.step(1.0, warmup_steps=0)
    bad = s.step(2.0, warmup_steps="3", samples=1)  # type: ignore[arg-type]
    assert len(bad) == 1 and bad[0].startswith("a step (TypeError")


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(), max_size=40))
@settings(max_examples=examples(300), deadline=None)
def test_run_steps_totals_stay_finite_whatever_they_get(values: list[float]) -> None:
    s = RunSteps()
    for i, v in enumerate(values):
        s.step(float(i), warmup_steps=0, samples=v, tokens=v, flops=v)
        s.add_flops(v, 1)
    for total in (s.samples, s.tokens, s.total.flops, s.total.samples, s.window.flops):
        assert math.isfinite(total) and total >= 0
    assert s.steps == len(values)


def test_a_gpu_tensor_count_is_dropped_without_reading_it() -> None:
    """Reading a CUDA tensor's value synchronizes the GPU: step() must never do it."""

    read: list[str] = []

    class CudaScalar:
        device = type("Device", (), {"type": "cuda"})()

        def __index__(self) -> int:
            read.append("index")
            return 8

        def __float__(self) -> float:
            read.append("float")
            return 8.0

    with pytest.raises(ValueError, match="a tensor on the GPU"):
        count(CudaScalar())
    assert read == []
    steps = RunSteps()
    bad = steps.step(1.0, warmup_steps=0, samples=CudaScalar(), tokens=16)
    assert read == [] and steps.samples == 0 and steps.tokens == 16
    assert bad and "a tensor on the GPU" in bad[0]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["step", "ready", "interrupt", "pause", "flops", "odd"]),
            st.integers(0, 64),
            st.floats(0.0, 2.0),
        ),
        max_size=60,
    ),
    st.integers(0, 3),
)
@settings(max_examples=examples(300), deadline=None)
def test_held_steps_add_up_to_what_checked_steps_give(
    ops: list[tuple[str, int, float]], warmup: int
) -> None:
    """The same hooks through :meth:`RunSteps.tick` (held, added up later) and through
    :meth:`RunSteps.step` (added at once): the same counters once flushed, whatever comes in
    between (input waits, interruptions, logging pauses, FLOPs known afterwards, and counts
    that tick leaves to step)."""
    held, direct = RunSteps(warmup_steps=warmup), RunSteps()
    t = 0.0
    for op, n, dt in ops:
        t += dt
        if op == "step":
            assert held.tick(t, n, 2 * n, 1e9)
            direct.step(t, warmup_steps=warmup, samples=n, tokens=2 * n, flops=1e9)
        elif op == "odd":  # a float count: not held; step takes it after what is held
            assert not held.tick(t, float(n), None, None)
            held.step(t, warmup_steps=warmup, samples=float(n))
            direct.step(t, warmup_steps=warmup, samples=float(n))
        elif op == "ready":
            held.ready(t)
            direct.ready(t)
        elif op == "interrupt":
            held.interrupt()
            direct.interrupt()
        elif op == "pause":
            held.pause(t - dt / 2, t)
            direct.pause(t - dt / 2, t)
        else:
            assert held.add_flops(5e9, 2) == direct.add_flops(5e9, 2) == []
    window = held.take_window()  # a log: it adds up what is held
    expect = direct.take_window()
    for name in StepCounter.__slots__:
        assert getattr(window, name) == pytest.approx(getattr(expect, name)), name
        assert getattr(held.total, name) == pytest.approx(getattr(direct.total, name)), name
    assert (held.steps, held.samples, held.tokens) == (direct.steps, direct.samples, direct.tokens)


def test_held_steps_wait_for_a_flush_and_a_huge_count_is_not_held() -> None:
    s = RunSteps()
    assert s.tick(1.0, 8, None, None) and s.tick(2.0, 8, None, None)
    assert (s.steps, s.samples) == (0, 0)  # held: the session flushes at each log and the end
    s.flush()
    assert (s.steps, s.samples, s.total.steps, s.total.time_s) == (2, 16, 1, 1.0)
    assert not s.tick(3.0, 10**291, None, None)  # over HOLD_MAX: step() checks it
    assert s.step(3.0, warmup_steps=0, samples=10**291) == []
    assert s.samples == 16 + 10**291
