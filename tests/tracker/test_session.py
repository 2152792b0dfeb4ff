"""The plain-loop session: numbers computed by hand from simulated profiles, in injected time."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping

import pytest
from fakes import Clock, ListSink

from tracker import track
from tracker.carbon import Carbon
from tracker.config import Settings
from tracker.owned import OwnedGpu
from tracker.session import Session


def loop(
    run: Session,
    clock: Clock,
    *,
    steps: int,
    wait_s: float,
    compute_s: float,
    samples: int = 32,
    tokens: int | None = None,
    sample_every: int = 1,
) -> None:
    for i in range(steps):
        clock.t += wait_s
        run.data_ready()
        clock.t += compute_s
        run.step(samples=samples, tokens=tokens)
        if run.sampler is not None and i % sample_every == 0:
            run.sampler.sample()


def test_input_bound_two_h100_for_two_hours() -> None:
    """2 GPUs x 2 h x $3.85 = $15.40. util 60% (6 s busy / 4 s idle), target 85%:
    waste = 15.40 x (1 - 60/85) = $4.5294. Energy per GPU = 70 W x 7200 s + 630 W x 0.6 x
    7200 s = 3,225,600 J = 0.896 kWh. Data wait 0.3 s of each 1 s step = 30%."""
    clock = Clock()
    sink = ListSink()
    with track(
        name="ib",
        backend="simulated:input-bound@H100:2",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        sinks=[sink],
        log_to_python=False,
    ) as run:
        loop(run, clock, steps=7200, wait_s=0.3, compute_s=0.7)
    r = run.record
    assert r is not None
    assert r.status == "finished" and r.gpu_source == "simulated"
    assert (r.gpu_model, r.gpu_count, r.price_per_gpu_hour) == ("H100", 2, 3.85)
    assert r.gpu_hours == pytest.approx(4.0)
    assert r.util_pct == pytest.approx(60.0)
    assert r.cost_usd == pytest.approx(15.40)
    assert r.waste_usd == pytest.approx(15.40 * (1 - 60 / 85))
    assert r.energy_kwh == pytest.approx(2 * 0.896)
    assert r.data_wait_pct == pytest.approx(30.0, abs=1e-4)
    assert r.samples == 7200 * 32 and r.samples_per_s == pytest.approx(32.0)
    assert r.idle_usd == 0.0
    assert r.verdict == "input-bound" and "DataLoader workers" in (r.advice or "")
    assert sink.summaries == [r]
    # the 60% run crossed the 70% alert threshold over the 10 min window: one alert
    assert len(sink.alerts) == 1 and "60%" in sink.alerts[0][1]


def test_healthy_run_has_no_waste_and_mfu_by_hand() -> None:
    """H100 bf16 dense peak 989.4 TFLOP/s. 4e14 FLOPs per 1 s step = 400 TFLOP/s -> MFU 0.4043."""
    clock = Clock()
    with track(
        name="ok",
        backend="simulated:healthy@H100",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        flops_per_step=4e14,
        dtype="bf16",
        log_to_python=False,
    ) as run:
        loop(run, clock, steps=600, wait_s=0.01, compute_s=0.99, tokens=4096)
    r = run.record
    assert r is not None
    assert r.util_pct == pytest.approx(92.0)
    assert r.waste_usd == 0.0
    assert r.mfu == pytest.approx(400 / 989.4, rel=1e-6)
    assert r.tokens_per_s == pytest.approx(4096.0)
    assert r.verdict == "healthy" and r.advice is None
    assert r.cost_usd == pytest.approx(3.85 / 6)


def test_warmup_steps_are_left_out_of_throughput() -> None:
    clock = Clock()
    with track(
        name="w",
        backend="simulated:healthy",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=3,
        log_to_python=False,
    ) as run:
        for dt in (10.0, 10.0, 10.0, 1.0, 1.0):  # three slow warm-up steps (compile, cache)
            clock.t += dt
            run.step(samples=8)
    r = run.record
    assert r is not None
    assert r.steps == 5 and r.samples == 40
    assert r.samples_per_s == pytest.approx(8.0)  # only the last two steps


def test_small_batch_and_idle_and_low_efficiency_verdicts() -> None:
    verdicts = {}
    for profile, hours in (
        ("small-batch@A10G", 0.5),
        ("idle@L4", 1.0),
        ("low-efficiency@H200", 0.5),
    ):
        clock = Clock()
        with track(
            name=profile,
            backend=f"simulated:{profile}",
            store=False,
            clock=clock,
            threaded=False,
            interval_s=10.0,
            log_to_python=False,
        ) as run:
            for _ in range(int(hours * 360)):
                clock.t += 10.0
                run.sampler.sample()  # type: ignore[union-attr]
        assert run.record is not None
        verdicts[profile] = run.record
    assert verdicts["small-batch@A10G"].verdict == "small-batch"
    idle = verdicts["idle@L4"]
    assert idle.verdict == "idle"
    # every minute of a 60 min, 0% run is idle: idle $ = cost = 1 h x $0.80
    assert idle.idle_usd == pytest.approx(0.80)
    assert idle.waste_usd == pytest.approx(0.80)
    low = verdicts["low-efficiency@H200"]
    assert low.verdict == "low-efficiency"
    assert low.sm_active_pct == pytest.approx(97 * 0.3)


def test_live_metrics_use_the_design_names() -> None:
    clock = Clock()
    sink = ListSink()
    with track(
        name="m",
        backend="simulated:healthy@H100:2",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_every_s=60.0,
        sinks=[sink],
        log_to_python=False,
        flops_per_step=1e14,
        dtype="bf16",
        per_gpu=True,
    ) as run:
        loop(run, clock, steps=130, wait_s=0.1, compute_s=0.9, tokens=1000)
    assert [step for _, step in sink.logged] == [60, 120]
    m, _ = sink.logged[0]
    assert m["gpu/util_pct"] == pytest.approx(92.0)
    assert m["gpu/1/util_pct"] == pytest.approx(92.0)
    assert m["gpu/power_w"] == pytest.approx(2 * (70 + 630 * 0.92))
    assert m["perf/step_time_ms"] == pytest.approx(1000.0)
    assert m["perf/data_wait_pct"] == pytest.approx(10.0)
    assert m["perf/samples_per_s"] == pytest.approx(32.0)
    assert m["perf/tflops"] == pytest.approx(100.0)
    assert m["perf/mfu"] == pytest.approx(100 / (2 * 989.4))
    assert m["cost/usd_per_hour"] == pytest.approx(7.70)
    assert m["cost/usd"] == pytest.approx(7.70 * 60 / 3600)
    assert m["cost/usd_per_1m_tokens"] == pytest.approx(1e6 * m["cost/usd"] / 60_000)
    from tracker.metrics import KEYS

    assert {k for k in m if k.count("/") == 1} <= KEYS


def test_no_gpu_is_recorded_as_unknown_never_idle(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    reads: list[float] = []  # the sampler catches what a read raises: counted, not raised

    class NoNvml:
        name = "nvml"

        def open(self, now: float) -> list:  # type: ignore[type-arg]
            from tracker.gpu import BackendUnavailable

            raise BackendUnavailable("NVML library not found (no NVIDIA driver)")

        def read(self, now: float) -> list:  # type: ignore[type-arg]
            reads.append(now)
            return []

        def close(self) -> None:
            pass

    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="cpu",
            backend=NoNvml(),
            store=False,
            clock=clock,
            threaded=False,
            warmup_steps=0,
            log_to_python=False,
        ) as run,
    ):
        for _ in range(100):
            clock.t += 1.0
            run.step(samples=4)
    r = run.record
    assert r is not None
    assert (r.gpu_source, r.gpu_count, r.util_pct, r.cost_usd) == ("none", 0, None, None)
    assert r.verdict == "unknown"
    assert r.samples_per_s == pytest.approx(4.0)
    assert sum("no GPU metrics" in m for m in caplog.messages) == 1
    assert reads == []  # a backend that did not open is never read


def test_training_error_marks_the_run_failed_and_propagates() -> None:
    clock = Clock()
    with (
        pytest.raises(RuntimeError, match="CUDA out of memory"),
        track(
            name="oom",
            backend="simulated:healthy",
            store=False,
            clock=clock,
            threaded=False,
            log_to_python=False,
        ) as run,
    ):
        clock.t += 5
        raise RuntimeError("CUDA out of memory")
    assert run.record is not None and run.record.status == "failed"


def test_a_broken_sink_is_turned_off_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(ListSink):
        name = "broken"

        def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
            raise ConnectionError("sink down")

    good, bad = ListSink(), Broken()
    clock = Clock()
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="s",
            backend="simulated:healthy",
            store=False,
            clock=clock,
            threaded=False,
            log_every_s=1.0,
            sinks=[bad, good],
            log_to_python=False,
        ) as run,
    ):
        loop(run, clock, steps=10, wait_s=0.0, compute_s=1.0)
    assert len(good.logged) >= 9
    assert bad.summaries == [] and len(good.summaries) == 1
    assert sum("sink 'broken' failed" in m for m in caplog.messages) == 1


def test_unknown_gpu_model_has_no_cost_and_no_mfu(tmp_path: object) -> None:
    from tracker.gpu import GpuInfo, GpuReading

    class Exotic:
        name = "replay"

        def open(self, now: float) -> list[GpuInfo]:
            return [GpuInfo(index=0, uuid="GPU-x", name="Quantum QX-9", mem_total_gib=32.0)]

        def read(self, now: float) -> list[GpuReading]:
            return [GpuReading(uuid="GPU-x", util_pct=50.0)]

        def close(self) -> None:
            pass

    clock = Clock()
    with track(
        name="x",
        backend=Exotic(),
        store=False,
        clock=clock,
        threaded=False,
        flops_per_step=1e12,
        dtype="bf16",
        log_to_python=False,
        warmup_steps=0,
    ) as run:
        loop(run, clock, steps=10, wait_s=0.0, compute_s=1.0)
    r = run.record
    assert r is not None
    assert r.gpu_model == "Quantum QX-9" and r.util_pct == 50.0
    assert r.cost_usd is None and r.mfu is None


def test_price_override_per_run() -> None:
    clock = Clock()
    with track(
        name="p",
        backend="simulated:healthy@H100",
        store=False,
        clock=clock,
        threaded=False,
        price_per_gpu_hour=2.0,
        log_to_python=False,
    ) as run:
        clock.t += 1800
    assert run.record is not None
    assert run.record.cost_usd == pytest.approx(1.0)
    assert run.record.price_source == "override"


H100_OWNED = OwnedGpu(
    model="H100", purchase_usd=30000, life_years=4, power_w=700, usd_per_kwh=0.12, pue=1.3
)
"""$30,000 over 4 × 8766 h = $0.8556/GPU-h, plus 0.7 kW × $0.12/kWh × PUE 1.3 = $0.1092/GPU-h."""


def test_an_owned_model_is_priced_at_its_amortized_rate() -> None:
    """2 owned H100 for 30 min: 1 GPU-h at 30000 / (4 × 8766) + 0.7 × 0.12 × 1.3 = $0.9648/h;
    the NVL variant of an owned H100 is priced the way the price table would price it."""
    rate = 30000 / (4 * 8766) + 0.7 * 0.12 * 1.3
    clock = Clock()
    with track(
        name="own",
        backend="simulated:healthy@H100:2",
        store=False,
        clock=clock,
        threaded=False,
        settings=Settings(owned={"H100": H100_OWNED}, prices={"H100": 9.0}),
        log_to_python=False,
    ) as run:
        clock.t += 1800
    r = run.record
    assert r is not None
    assert r.price_per_gpu_hour == pytest.approx(rate) and rate == pytest.approx(0.9648, abs=1e-4)
    assert r.price_source == "owned (amortized)"
    assert r.gpu_hours == pytest.approx(1.0) and r.cost_usd == pytest.approx(1.0 * rate)


def test_the_runs_own_price_beats_an_owned_rate_and_other_models_are_rented() -> None:
    clock = Clock()
    owned = Settings(owned={"H100": H100_OWNED})
    with track(
        name="p",
        backend="simulated:healthy@H100",
        store=False,
        clock=clock,
        threaded=False,
        price_per_gpu_hour=2.0,
        settings=owned,
        log_to_python=False,
    ) as run:
        clock.t += 1800
    assert run.record is not None
    assert (run.record.price_per_gpu_hour, run.record.price_source) == (2.0, "override")
    with track(
        name="a",
        backend="simulated:healthy@A100-80GB",
        store=False,
        clock=clock,
        threaded=False,
        settings=owned,
        log_to_python=False,
    ) as run:
        clock.t += 1800
    assert run.record is not None
    assert run.record.price_per_gpu_hour == 2.00  # the table's A100 80GB row
    assert run.record.price_source != "owned (amortized)"


def co2e_run(settings: Settings, minutes: int = 3) -> list[dict[str, float]]:
    """Two healthy H100 (each 70 W + 630 W × 92% = 649.6 W), logging every 60 s."""
    clock = Clock()
    sink = ListSink()
    with track(
        name="co2",
        backend="simulated:healthy@H100:2",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_every_s=60.0,
        sinks=[sink],
        settings=settings,
        log_to_python=False,
    ) as run:
        loop(run, clock, steps=minutes * 60, wait_s=0.1, compute_s=0.9)
    return [m for m, _ in sink.logged]


def test_live_co2e_is_energy_times_pue_times_grid_intensity() -> None:
    """Carbon 400 g/kWh × PUE 1.2 = 0.48 kg per kWh of GPU energy, logged as the run's total
    so far (cumulative like gpu/energy_kwh): the last log holds the run's."""
    logged = co2e_run(Settings(carbon=Carbon(g_per_kwh=400, pue=1.2)))
    assert len(logged) == 3
    for m in logged:
        assert m["gpu/co2e_kg"] == pytest.approx(m["gpu/energy_kwh"] * 0.48)
    # 2 × 649.6 W over the 59 s sampled before the first log (the 60th sample comes after it)
    assert logged[0]["gpu/energy_kwh"] == pytest.approx(2 * 649.6 * 59 / 3.6e6)
    assert logged[-1]["gpu/co2e_kg"] > logged[0]["gpu/co2e_kg"]
    (default,) = co2e_run(Settings(), minutes=1)
    assert default["gpu/co2e_kg"] == pytest.approx(default["gpu/energy_kwh"] * 480 / 1000)


def test_co2e_uses_this_hosts_intensity_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    looked_up: list[str] = []

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Counting(Carbon):
        def intensity_for(self, host: str) -> float:
            looked_up.append(host)
            return super().intensity_for(host)

    monkeypatch.setattr(socket, "gethostname", lambda: "DGX-EU-7")
    logged = co2e_run(Settings(carbon=Counting(hosts=(("dgx-eu-*", 50.0), ("*", 900.0)), pue=1.1)))
    assert len(logged) == 3
    assert all(
        m["gpu/co2e_kg"] == pytest.approx(m["gpu/energy_kwh"] * 50 * 1.1 / 1000) for m in logged
    )
    assert looked_up == ["DGX-EU-7"]


@pytest.mark.parametrize(("step_s", "ends_after_s"), [(86_400.0, 86_400.0 + 600), (-3_600.0, 600)])
def test_a_wall_clock_step_mid_run_is_no_gpu_time(
    monkeypatch: pytest.MonkeyPatch, step_s: float, ends_after_s: float
) -> None:
    """A live run (no injected clock) of 600 s on 2 GPUs whose wall clock steps at 300 s.
    Before: a day forward made a 600 s run 48 GPU-h and $185; an hour back 0 GPU-h and an end
    before its start. Now 2 × 600 s = 1/3 GPU-h either way, $3.85 / 3; the end is the wall
    clock's, or the start plus the run's time when the clock went back."""
    mono = [1000.0]
    wall = [1_764_000_000.0]
    monkeypatch.setattr(time, "monotonic", lambda: mono[0])
    monkeypatch.setattr(time, "time", lambda: wall[0] + mono[0])
    with track(
        name="stepped",
        backend="simulated:healthy@H100:2",
        store=False,
        threaded=False,
        log_to_python=False,
    ) as run:
        assert run.sampler is not None
        for t in range(1, 601):
            mono[0] = 1000.0 + t
            if t == 300:
                wall[0] += step_s
            run.sampler.sample()
    r = run.record
    assert r is not None and r.ended_at is not None
    assert r.gpu_hours == pytest.approx(2 * 600 / 3600)
    assert r.cost_usd == pytest.approx(3.85 * 2 * 600 / 3600)
    assert (r.ended_at - r.started_at).total_seconds() == pytest.approx(ends_after_s)


def steady_run(profile: str, seconds: int) -> Session:
    """A plain loop of 1-second steps on one simulated H100 of ``profile``, stored nowhere."""
    clock = Clock()
    with track(
        name=profile,
        backend=f"simulated:{profile}@H100",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_to_python=False,
    ) as run:
        loop(run, clock, steps=seconds, wait_s=0.0, compute_s=1.0)
    return run


def test_an_hour_throttled_ten_minutes_in_each_hour_names_the_machine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The ``throttled`` profile holds the clocks down the first 10 s of every minute: over an
    hour on one H100, 600 s throttled by the violation counter (exact), 10 min × $3.85/h =
    $0.6417, 1/6 of the GPU-time (17%). Utilization 92% (above target): its verdict names the
    machine, not the code."""
    r = steady_run("throttled", 3600).record
    assert r is not None
    assert r.throttled_gpu_hours == pytest.approx(600 / 3600)
    assert r.throttle_source == "counter"
    assert r.util_pct == pytest.approx(92.0)
    assert r.verdict == "throttled" and "not your code" in (r.advice or "")
    out = capsys.readouterr().out
    assert (
        "17% of this run's GPU-time and $0.64 were the machine (throttled 10 min, "
        "counter-exact), not your code" in out
    )


def test_a_healthy_run_says_nothing_of_the_machine(capsys: pytest.CaptureFixture[str]) -> None:
    r = steady_run("healthy", 120).record
    assert r is not None
    assert r.throttled_gpu_hours == 0.0 and r.throttle_source == "counter"
    assert r.verdict == "healthy"
    assert "the machine" not in capsys.readouterr().out
