"""Issue 10, hardening: bad numbers from user code cost a warning, never the run. Real sessions
on the simulated backend, in injected time, most with a real SQLite store to read back."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
from fakes import T0, Clock, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracker import track
from tracker.record import RunRecord
from tracker.session import Session
from tracker.store import RunStore

NAN, INF = float("nan"), float("inf")
H100_USD = 3.85
H100_BF16_TFLOPS = 989.4


def gpu_kpi_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "gpu_kpi" and r.levelno == logging.WARNING
    ]


def stored(url: str, run_id: str) -> RunRecord | None:
    with RunStore(url) as store:
        return store.get_run(run_id)


# -- 1. a run is never lost to its own numbers ----------------------------------------------------

BAD_STEPS: list[tuple[Any, Any, Any]] = [  # (samples, tokens, flops), one step a second
    (32, 4096, 1e14),  # 1: the first step is not measured (no step before it)
    (NAN, 4096, 1e14),  # 2
    (32, INF, 1e14),  # 3
    (-5, 4096, NAN),  # 4
    ("x", 4096, 1e14),  # 5
    (32, -1, -1e14),  # 6
    (32, 4096, 1e14),  # 7
    (32, 4096, 1e14),  # 8
]


def test_bad_counts_cost_one_warning_and_the_good_ones_are_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Good counts only: samples in steps 1, 3, 6, 7, 8 = 5 x 32 = 160; tokens in 1, 2, 4, 5,
    7, 8 = 6 x 4096 = 24,576. Measured steps 2-8 take 7 s: samples 3, 6, 7, 8 = 128 -> 128/7
    = 18.286/s; tokens 2, 4, 5, 7, 8 = 20,480 -> 2,925.7/s; FLOPs 2, 3, 5, 7, 8 = 5e14 ->
    7.1429e13 FLOP/s, MFU on one H100 (989.4 TFLOP/s bf16) = 0.072194."""
    url = f"sqlite:///{tmp_path}/runs.db"
    clock = Clock()
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="bad-counts",
            backend="simulated:healthy@H100",
            store=url,
            clock=clock,
            threaded=False,
            warmup_steps=0,
            dtype="bf16",
            log_to_python=False,
        ) as run,
    ):
        for samples, tokens, flops in BAD_STEPS:
            clock.t += 1.0
            run.step(samples=samples, tokens=tokens, flops=flops)
    r = run.record
    assert r is not None and r.status == "finished"
    assert (r.steps, r.samples, r.tokens) == (8, 160, 24_576)
    assert r.samples_per_s == pytest.approx(128 / 7)
    assert r.tokens_per_s == pytest.approx(20_480 / 7)
    assert r.mfu == pytest.approx(5e14 / 7 / (H100_BF16_TFLOPS * 1e12))
    assert r.cost_usd == pytest.approx(H100_USD * 8 / 3600)
    assert stored(url, run.id) == r  # the summary reached the store: not left "running"
    (warning,) = gpu_kpi_warnings(caplog)  # one for the run, not one per bad step
    assert "samples=nan" in warning


def test_bad_flops_fall_back_to_flops_per_step() -> None:
    """A bad ``flops`` is dropped as if not given: the step counts ``flops_per_step`` (2e14).
    Steps 2 and 3 measured, 2 s: (2e14 + 2e14) / 2 s = 2e14 FLOP/s -> MFU 200/989.4."""
    clock = Clock()
    with track(
        name="f",
        backend="simulated:healthy@H100",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        dtype="bf16",
        flops_per_step=2e14,
        log_to_python=False,
    ) as run:
        for flops in (2e14, NAN, -3.0):
            clock.t += 1.0
            run.step(flops=flops)
    assert run.record is not None
    assert run.record.mfu == pytest.approx(200 / H100_BF16_TFLOPS)


def test_add_flops_with_bad_numbers_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    """The HF path credits FLOPs afterwards; nan or inf there must not become the run's MFU.
    3 measured steps of 1 s, then 3e14 good FLOPs over those 3 steps: 1e14 FLOP/s."""
    clock = Clock()
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="hf",
            backend="simulated:healthy@H100",
            store=False,
            clock=clock,
            threaded=False,
            warmup_steps=0,
            dtype="bf16",
            log_to_python=False,
        ) as run,
    ):
        for _ in range(4):
            clock.t += 1.0
            run.step(samples=1)
        run.add_flops(NAN, 3)
        run.add_flops(INF, 3)
        run.add_flops(3e14, 3)  # the measured steps were all taken by the nan call
        for _ in range(3):
            clock.t += 1.0
            run.step(samples=1)
        run.add_flops(3e14, 3)
    assert run.record is not None
    assert run.record.mfu == pytest.approx(3e14 / 6 / (H100_BF16_TFLOPS * 1e12))
    assert len(gpu_kpi_warnings(caplog)) == 1


def test_totals_that_would_overflow_drop_the_step_not_the_record() -> None:
    """1e308 is a finite count, but a second one would make the total inf: it is dropped.
    1e308 samples does not fit the store's BIGINT: the record says unknown (None), the run is
    still finished."""
    clock = Clock()
    with track(
        name="big",
        backend="simulated:healthy",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_to_python=False,
    ) as run:
        for _ in range(2):
            clock.t += 1.0
            run.step(samples=1e308)
    assert run.counts.samples == 1e308
    assert run.record is not None and run.record.status == "finished"
    assert run.record.samples is None and run.record.steps == 2


def test_whatever_the_counters_hold_the_summary_is_written(tmp_path: Path) -> None:
    """Counters corrupted behind the session's back (nan time, inf FLOPs, nan samples): the
    figures that depend on them are unknown, the others (the GPU's 92%, the cost of 10 s on an
    H100) stand, and the store gets the finished record."""
    url = f"sqlite:///{tmp_path}/runs.db"
    clock = Clock()
    with track(
        name="corrupt",
        backend="simulated:healthy@H100",
        store=url,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_to_python=False,
    ) as run:
        for _ in range(10):
            clock.t += 1.0
            run.step(samples=4)
            run.sampler.sample()  # type: ignore[union-attr]
        run.counts.samples = NAN
        run.counts.total.time_s = NAN
        run.counts.total.flops = INF
    r = run.record
    assert r is not None and r.status == "finished"
    assert (r.samples, r.samples_per_s, r.data_wait_pct, r.mfu) == (None, None, None, None)
    assert r.util_pct == pytest.approx(92.0)
    assert r.cost_usd == pytest.approx(H100_USD * 10 / 3600)
    assert stored(url, run.id) == r


def test_a_failing_figure_computation_still_writes_the_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    clock = Clock()
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="no-figures",
            backend="simulated:healthy@H100:2",
            store=url,
            clock=clock,
            threaded=False,
            log_to_python=False,
        ) as run,
    ):
        for _ in range(5):
            clock.t += 1.0
            run.step(samples=4)

        def broken(*args: object, **kwargs: object) -> None:
            raise ZeroDivisionError("a bug in the figures")

        monkeypatch.setattr("tracker.figures.record_fields", broken)
    r = stored(url, run.id)
    assert r is not None and r == run.record
    assert (r.status, r.steps, r.gpu_count, r.util_pct, r.cost_usd) == (
        "finished",
        5,
        2,
        None,
        None,
    )
    assert r.ended_at is not None and r.ended_at.timestamp() == T0 + 5
    assert sum("a bug in the figures" in w for w in gpu_kpi_warnings(caplog)) == 1


def test_a_failing_last_gather_still_writes_the_record(tmp_path: Path) -> None:
    """Rank 0 of two; the last all-gather fails (a peer died): its own figures are written."""
    url = f"sqlite:///{tmp_path}/runs.db"

    def gather(vector: list[float]) -> list[list[float]]:
        raise ConnectionResetError("peer gone")

    clock = Clock()
    with track(
        name="ddp",
        backend="simulated:healthy@H100",
        store=url,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        world_size=2,
        gather=gather,
        log_to_python=False,
    ) as run:
        for _ in range(3):
            clock.t += 1.0
            run.step(samples=8)
    r = stored(url, run.id)
    assert r is not None and r.status == "finished" and r.samples == 24


GOOD = st.integers(0, 10**6) | st.integers(0, 10**6).map(float)
BAD = (
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not 0 <= x < INF)
    | st.integers(max_value=-1)
    | st.text(max_size=3)
    | st.booleans()
    | st.just(object())
    | st.just([1, 2])
)
COUNT = st.tuples(st.booleans(), GOOD, BAD).map(lambda t: t[1] if t[0] else t[2])


@given(steps=st.lists(st.tuples(COUNT, COUNT, COUNT), max_size=25))
@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_any_mix_of_good_and_bad_counts_keeps_the_good_totals(
    steps: list[tuple[Any, Any, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()

    def good(v: Any) -> bool:
        return type(v) in (int, float) and 0 <= v < INF

    clock = Clock()
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="h",
            backend="simulated:healthy@H100",
            store=False,
            clock=clock,
            threaded=False,
            warmup_steps=0,
            log_to_python=False,
        ) as run,
    ):
        for samples, tokens, flops in steps:
            clock.t += 1.0
            run.step(samples=samples, tokens=tokens, flops=flops)
    assert run.counts.samples == sum(s for s, _, _ in steps if good(s))
    assert run.counts.tokens == sum(t for _, t, _ in steps if good(t))
    # the first step is not measured: no step before it to time it from
    assert run.counts.total.flops == sum(f for _, _, f in steps[1:] if good(f))
    r = run.record
    assert r is not None and r.status == "finished" and r.steps == len(steps)
    assert r.samples == (int(run.counts.samples) or None)
    any_bad = any(not good(v) for step in steps for v in step)
    assert len(gpu_kpi_warnings(caplog)) == (1 if any_bad else 0)


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=30))
@settings(max_examples=examples(150), deadline=None)
def test_arbitrary_floats_never_raise_and_every_recorded_number_is_finite(
    values: list[float],
) -> None:
    clock = Clock()
    with track(
        name="f",
        backend="simulated:healthy@H100",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        dtype="bf16",
        log_to_python=False,
    ) as run:
        for v in values:
            clock.t += 1.0
            run.step(samples=v, tokens=v, flops=v)
            run.add_flops(v, 1)
    r = run.record
    assert r is not None and r.status == "finished" and r.steps == len(values)
    numbers = {k: v for k, v in r.as_dict().items() if isinstance(v, int | float)}
    assert all(math.isfinite(v) and v >= 0 for v in numbers.values()), numbers
    assert math.isfinite(run.counts.samples) and run.counts.samples >= 0


# -- 2. the arguments of track() are checked at the border ----------------------------------------


@pytest.mark.parametrize(
    ("price", "shown"), [(INF, "inf"), (NAN, "nan"), (-3.85, "-3.85"), ("cheap", "'cheap'")]
)
def test_a_bad_price_warns_once_and_the_price_table_prices_the_run(
    price: object, shown: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As if no price were given: the table's H100 price, $3.85 x 0.5 h = $1.925."""
    url = f"sqlite:///{tmp_path}/runs.db"
    clock = Clock()
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="p",
            backend="simulated:healthy@H100",
            store=url,
            clock=clock,
            threaded=False,
            price_per_gpu_hour=price,
            log_to_python=False,
        ) as run,
    ):
        clock.t += 1800
    r = stored(url, run.id)
    assert r is not None and r == run.record
    assert r.price_per_gpu_hour == H100_USD and r.price_source != "override"
    assert r.cost_usd == pytest.approx(H100_USD * 0.5)
    (warning,) = gpu_kpi_warnings(caplog)
    assert "price_per_gpu_hour" in warning and f"got {shown}" in warning


def test_a_good_price_override_still_wins() -> None:
    clock = Clock()
    with track(
        name="p",
        backend="simulated:healthy@H100",
        store=False,
        clock=clock,
        threaded=False,
        price_per_gpu_hour=0,
        log_to_python=False,
    ) as run:
        clock.t += 1800
    assert run.record is not None
    assert (run.record.price_per_gpu_hour, run.record.cost_usd) == (0.0, 0.0)
    assert run.record.price_source == "override"


@pytest.mark.parametrize("flops_per_step", [NAN, INF, -1e14, "lots"])
def test_a_bad_flops_per_step_means_no_mfu_and_one_warning(
    flops_per_step: object, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="f",
            backend="simulated:healthy@H100",
            store=False,
            clock=clock,
            threaded=False,
            warmup_steps=0,
            dtype="bf16",
            flops_per_step=flops_per_step,
            log_to_python=False,
        ) as run,
    ):
        for _ in range(5):
            clock.t += 1.0
            run.step(samples=8)
    r = run.record
    assert r is not None and r.status == "finished"
    assert r.mfu is None and r.samples_per_s == pytest.approx(8.0)
    (warning,) = gpu_kpi_warnings(caplog)
    assert "flops_per_step" in warning


@pytest.mark.parametrize("nodes", [0, -2, NAN, "two", 1.5])
def test_a_bad_node_count_is_recorded_as_one(
    nodes: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="n",
            backend="simulated:healthy",
            store=url,
            clock=Clock(),
            threaded=False,
            nodes=nodes,
            log_to_python=False,
        ) as run,
    ):  # type: ignore[arg-type]
        pass
    r = stored(url, run.id)
    assert r is not None and r.nodes == 1 and r.status == "finished"
    assert sum("nodes" in w for w in gpu_kpi_warnings(caplog)) == 1


def test_bad_setting_arguments_fall_back_to_the_config(caplog: pytest.LogCaptureFixture) -> None:
    """interval_s=nan used to stop the sampler from starting (no GPU data for the run);
    warmup_steps='three' made every step fail. Both fall back to the defaults (1 s, 3 steps):
    the last two 1 s steps of 8 samples -> 8 samples/s."""
    clock = Clock()
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="s",
            backend="simulated:healthy@H100",
            store=False,
            clock=clock,
            threaded=False,
            interval_s=NAN,
            warmup_steps="three",
            log_to_python=False,
        ) as run,
    ):
        assert run.sampler is not None and run.sampler.interval_s == 1.0
        for dt in (10.0, 10.0, 10.0, 1.0, 1.0):
            clock.t += dt
            run.step(samples=8)
            run.sampler.sample()
    r = run.record
    assert r is not None and r.gpu_source == "simulated" and r.util_pct == pytest.approx(92.0)
    assert r.samples == 40 and r.samples_per_s == pytest.approx(8.0)
    warnings = gpu_kpi_warnings(caplog)
    assert len(warnings) == 2
    assert any("interval_s" in w and "got nan" in w for w in warnings)
    assert any("warmup_steps" in w and "got 'three'" in w for w in warnings)


def test_session_overrides_are_checked_too(caplog: pytest.LogCaptureFixture) -> None:
    """Session(overrides=...) takes threshold names as well: a target of 150% is refused, the
    default 85% stays."""
    from tracker.record import RunSpec

    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        run = Session(
            RunSpec(id="o"),
            overrides={"target_util_pct": 150.0},
            store=False,
            backend="simulated:healthy",
            clock=Clock(),
            threaded=False,
            log_to_python=False,
        ).start()
        run.finish()
    assert run.settings.thresholds.target_util_pct == 85.0
    assert sum("target_util_pct" in w for w in gpu_kpi_warnings(caplog)) == 1


def test_a_dtype_object_names_its_dtype() -> None:
    """A ``torch.bfloat16`` (here a stand-in with its str) used to turn tracking off; it is the
    bf16 peak: 4e14 FLOPs per 1 s step -> 400 / 989.4."""

    class Bfloat16:
        def __str__(self) -> str:
            return "torch.bfloat16"

    clock = Clock()
    with track(
        name="d",
        backend="simulated:healthy@H100",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        dtype=Bfloat16(),
        flops_per_step=4e14,
        log_to_python=False,
    ) as run:
        for _ in range(3):
            clock.t += 1.0
            run.step()
    assert run.record is not None and run.record.mfu == pytest.approx(400 / H100_BF16_TFLOPS)
