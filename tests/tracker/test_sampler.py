"""The sampler: time-weighted aggregates, minutes, idle stretches, the alert, lost GPUs."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import pytest
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tracker.gpu import GpuInfo, GpuReading
from tracker.gpu.simulated import SimulatedBackend
from tracker.record import MinuteSample
from tracker.sampler import AlertRule, GpuStats, Sampler, TimeWeighted


@dataclass
class ScriptedBackend:
    """Readings from a script: ``values[uuid]`` is called with the time of each read."""

    utils: dict[str, list[float]]
    name: str = "scripted"
    lost_after: dict[str, int] = field(default_factory=dict)
    reads: int = 0

    def open(self, now: float) -> list[GpuInfo]:
        return [
            GpuInfo(index=i, uuid=u, name="NVIDIA H100 80GB HBM3", mem_total_gib=80.0)
            for i, u in enumerate(self.utils)
        ]

    def read(self, now: float) -> list[GpuReading]:
        n = self.reads
        self.reads += 1
        return [
            GpuReading(
                uuid=u,
                util_pct=vals[min(n, len(vals) - 1)],
                mem_used_gib=10.0 + n,
                mem_total_gib=80.0,
                power_w=100.0,
            )
            for u, vals in self.utils.items()
            if n < self.lost_after.get(u, 10**9)
        ]

    def close(self) -> None:
        pass


def test_time_weighted_mean_min_max() -> None:
    tw = TimeWeighted()
    tw.add(50.0, 0.0)  # a start reading weighs nothing
    tw.add(100.0, 3.0)
    tw.add(0.0, 1.0)
    tw.add(None, 5.0)  # missing values do not dilute the mean
    assert tw.mean == pytest.approx(75.0)
    assert (tw.min, tw.max, tw.seconds) == (0.0, 100.0, 4.0)


def test_histogram_and_peak() -> None:
    s = GpuStats()
    s.add(GpuReading(uuid="g", util_pct=95.0, mem_used_gib=5.0), 2.0)
    s.add(GpuReading(uuid="g", util_pct=100.0, mem_used_gib=7.0), 1.0)
    s.add(GpuReading(uuid="g", util_pct=12.0, mem_used_gib=6.0), 4.0)
    assert s.hist_s == [0.0, 4.0, 0, 0, 0, 0, 0, 0, 0, 3.0]
    assert s.mem_peak_gib == 7.0


def test_energy_from_counter_else_integrated_power() -> None:
    counter = GpuStats()
    counter.add(GpuReading(uuid="g", energy_j=1000.0, power_w=999.0), 0.0)
    counter.add(GpuReading(uuid="g", energy_j=1600.0, power_w=999.0), 2.0)
    assert counter.energy_j == 600.0  # the counter's difference, not power x time
    power_only = GpuStats()
    power_only.add(GpuReading(uuid="g", power_w=300.0), 0.0)
    power_only.add(GpuReading(uuid="g", power_w=200.0), 3.0)
    assert power_only.energy_j == 600.0
    assert GpuStats().energy_j is None


def test_run_shorter_than_one_interval_gets_start_and_stop_samples() -> None:
    clock = [100.0]
    b = SimulatedBackend("healthy")
    s = Sampler(b, interval_s=60.0, clock=lambda: clock[0], threaded=False)
    (g,) = s.start()
    clock[0] = 100.5
    s.stop()
    assert s.run[g.uuid].seconds == pytest.approx(0.5)
    assert s.run[g.uuid].mean("util_pct") == pytest.approx(92.0)


def test_minutes_split_at_boundaries() -> None:
    rows: list[MinuteSample] = []
    clock = [90.0]  # 1.5 min after the epoch
    b = ScriptedBackend({"g": [0.0, 40.0, 100.0]})
    s = Sampler(b, run_id="r", clock=lambda: clock[0], threaded=False, on_minute=rows.extend)
    s.start()  # reading 0 at t=90
    clock[0] = 150.0
    s.sample()  # 40% over (90, 150]: 30 s in minute 1, 30 s in minute 2
    clock[0] = 170.0
    s.sample()  # 100% over (150, 170]
    s.stop()  # stop reads again (100%) with dt 0
    assert [r.minute.timestamp() for r in rows] == [60.0, 120.0]
    assert rows[0].covered_s == 30.0 and rows[0].util_pct == pytest.approx(40.0)
    assert rows[1].covered_s == 50.0
    assert rows[1].util_pct == pytest.approx((30 * 40 + 20 * 100) / 50)
    assert rows[0].run_id == "r" and rows[0].gpu == "g"


def test_idle_stretch_counts_its_idle_minutes_only() -> None:
    # 20 busy minutes, 40 idle ones with a 60% blip in the middle, 10 busy: the 39 idle
    # minutes are idle; the blip and the busy minutes next to the stretch are not
    utils = [90.0] * 20 + [1.0] * 20 + [60.0] + [1.0] * 19 + [90.0] * 10
    clock = [0.0]
    b = ScriptedBackend({"g": [90.0, *utils]})
    s = Sampler(b, clock=lambda: clock[0], threaded=False)
    s.start()
    for minute in range(1, 71):
        clock[0] = minute * 60.0
        s.sample()
    s.stop()
    assert s.idle_seconds() == {"g": pytest.approx(39 * 60.0)}


def test_twenty_idle_minutes_between_busy_ones_are_not_idle() -> None:
    utils = [90.0] * 15 + [0.0] * 20 + [90.0] * 15
    clock = [0.0]
    s = Sampler(ScriptedBackend({"g": [90.0, *utils]}), clock=lambda: clock[0], threaded=False)
    s.start()
    for minute in range(1, len(utils) + 1):
        clock[0] = minute * 60.0
        s.sample()
    s.stop()
    assert s.idle_seconds() == {"g": 0.0}


def test_alert_fires_once_after_the_window() -> None:
    alerts: list[str] = []
    clock = [0.0]
    s = Sampler(
        ScriptedBackend({"g": [40.0]}),
        clock=lambda: clock[0],
        threaded=False,
        alert=AlertRule(under_pct=70.0, window_s=300.0),
        on_alert=alerts.append,
    )
    s.start()
    for t in range(10, 600, 10):
        clock[0] = float(t)
        s.sample()
        if t < 300:
            assert alerts == []
    assert len(alerts) == 1
    assert "40%" in alerts[0] and "70%" in alerts[0]


def test_no_alert_when_busy() -> None:
    alerts: list[str] = []
    clock = [0.0]
    s = Sampler(
        ScriptedBackend({"g": [90.0]}),
        clock=lambda: clock[0],
        threaded=False,
        alert=AlertRule(under_pct=70.0, window_s=60.0),
        on_alert=alerts.append,
    )
    s.start()
    for t in range(10, 300, 10):
        clock[0] = float(t)
        s.sample()
    assert alerts == []


def test_lost_gpu_leaves_the_others_sampled() -> None:
    clock = [0.0]
    b = ScriptedBackend({"a": [50.0], "b": [80.0]}, lost_after={"b": 3})
    s = Sampler(b, clock=lambda: clock[0], threaded=False)
    s.start()
    for t in range(1, 6):
        clock[0] = float(t)
        s.sample()
    assert s.lost == {"b"}
    assert s.run["a"].seconds == 5.0
    assert s.run["b"].seconds == 2.0  # readings 1 and 2 only


def test_backend_that_keeps_failing_is_turned_off(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(ScriptedBackend):
        def read(self, now: float) -> list[GpuReading]:
            if self.reads:
                raise OSError("driver went away")
            self.reads += 1
            return super().read(now)

    s = Sampler(Broken({"g": [50.0]}), clock=lambda: 0.0, threaded=False)
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        s.start()
        for _ in range(12):
            s.sample()
    assert s.failed
    assert [r.message for r in caplog.records].count(
        "gpu-kpi: reading the GPUs failed: driver went away"
    ) == 1


def test_memory_is_bounded_whatever_the_run_length() -> None:
    clock = [0.0]
    s = Sampler(
        SimulatedBackend("input-bound"),
        clock=lambda: clock[0],
        threaded=False,
        alert=AlertRule(window_s=600.0),
    )
    s.start()
    for t in range(1, 20_001):  # 5.5 hours at 1 s
        clock[0] = float(t)
        s.sample()
    (stats,) = s.run.values()
    assert len(s._alert_span) <= 601
    assert len(stats.hist_s) == 10
    assert len(s.idle[next(iter(s.idle))]._recent) <= 30
    assert stats.mean("util_pct") == pytest.approx(60.0)


class CountedBackend(SimulatedBackend):
    """The healthy profile, each read moving a test clock a second on: the sampler's thread
    is seen to read, on a clock no busy machine stretches."""

    def __init__(self, clock: list[float], enough: int) -> None:
        super().__init__("healthy")
        self.clock, self.enough, self.reads = clock, enough, 0
        self.done = threading.Event()

    def read(self, now: float) -> list[GpuReading]:
        out = super().read(now)
        self.reads += 1
        self.clock[0] += 1.0
        if self.reads >= self.enough:
            self.done.set()
        return out


def test_thread_samples_and_stops_cleanly() -> None:
    """The thread reads on its own (the first reading is start's, the next five the
    thread's: 5 s of the test clock), and stop joins it. The wait is a bound on a hang, not a
    duration the test asserts."""
    clock = [1_764_000_000.0]
    backend = CountedBackend(clock, enough=6)
    s = Sampler(backend, interval_s=0.001, clock=lambda: clock[0], monotonic=lambda: clock[0])
    s.start()
    assert backend.done.wait(60), "the sampler's thread never read the GPUs"
    s.stop()
    (stats,) = s.run.values()
    assert backend.reads >= 7  # start's, the thread's six and stop's last at least
    assert stats.seconds == backend.reads - 1  # one second between each two readings
    assert not any(t.name == "gpu-kpi-sampler" for t in threading.enumerate())


def stepped_run(seconds: int, steps: dict[int, float]) -> tuple[GpuStats, list[MinuteSample]]:
    """A sampled run of ``seconds`` by the monotonic clock, one reading a second, whose wall
    clock steps by ``steps[t]`` at second ``t``: the GPU's run aggregates and minute rows."""
    mono = [0.0]
    wall = [1_764_000_000.0]
    rows: list[MinuteSample] = []
    s = Sampler(
        SimulatedBackend("healthy"),
        clock=lambda: wall[0] + mono[0],
        monotonic=lambda: mono[0],
        threaded=False,
        on_minute=rows.extend,
    )
    s.start()
    for t in range(1, seconds + 1):
        mono[0] = float(t)
        wall[0] += steps.get(t, 0.0)
        s.sample()
    s.stop()
    (stats,) = s.run.values()
    return stats, rows


@pytest.mark.parametrize(
    ("step_s", "what"),
    [(86_400.0, "a day forward"), (-3_600.0, "an hour back"), (1e9, "decades forward")],
)
def test_a_wall_clock_step_is_never_gpu_time(
    step_s: float, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A run of 600 s by the monotonic clock whose wall clock steps by ``step_s`` at 300 s
    (NTP, suspend, a VM migration). Before: a day forward was 24 GPU-h, an hour back 0, and
    decades forward grew memory without bound (a row per minute in between). Now: 600 GPU-s
    whatever the step, minutes labelled by the wall clock and never going back, one warning."""
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        stats, rows = stepped_run(600, {300: step_s})
    assert stats.seconds == pytest.approx(600.0), what
    assert sum(r.covered_s for r in rows) == pytest.approx(600.0)
    minutes = [r.minute for r in rows]
    assert minutes == sorted(minutes) and len(set(minutes)) == len(minutes)
    assert len(rows) <= 12  # the minutes the run had, not the ones the clock skipped
    (warning,) = [r.getMessage() for r in caplog.records if "stepped" in r.getMessage()]
    assert f"the wall clock stepped {step_s:+.0f} s" in warning


@settings(max_examples=examples(100), deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(1, 299),  # when (monotonic seconds into the run)
            st.floats(-1e9, 1e9, allow_nan=False).filter(lambda x: abs(x) > 150),  # by how much
        ),
        max_size=4,
    )
)
def test_any_wall_clock_steps_leave_the_gpu_time_to_the_monotonic_clock(
    steps: list[tuple[int, float]],
) -> None:
    """Whatever steps the wall clock takes, and when: the run's GPU-time is its 300 monotonic
    seconds, in minute rows whose labels never go back and whose count stays the run's."""
    stats, rows = stepped_run(300, dict(steps))
    assert stats.seconds == pytest.approx(300.0)
    assert sum(r.covered_s for r in rows) == pytest.approx(300.0)
    minutes = [r.minute for r in rows]
    assert minutes == sorted(minutes) and len(rows) <= 6 + 2 * len(steps)


def test_throttled_time_is_the_counters_difference_else_the_sampled_readings() -> None:
    from tracker.sampler import GpuStats

    counted = GpuStats()
    for ns, dt in ((5e12, 0.0), (5e12 + 2e9, 10.0), (5e12 + 2.5e9, 10.0)):
        counted.add(GpuReading(uuid="a", throttle_ns=ns), dt)
    assert counted.throttled_s == (2.5, True)
    capped = GpuStats()  # power and thermal overlapping: never more than the span
    for ns, dt in ((0.0, 0.0), (30e9, 10.0)):
        capped.add(GpuReading(uuid="a", throttle_ns=ns), dt)
    assert capped.throttled_s == (10.0, True)
    sampled = GpuStats()  # each reading speaks for the interval that ends at it
    for share, dt in ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (1.0, 2.0), (None, 5.0), (7.0, 4.0)):
        sampled.add(GpuReading(uuid="a", throttled_share=share), dt)
    assert sampled.throttled_s == (3.0, False)  # (a share over 1 is no share: left out)
    reloaded = GpuStats()  # the counter went back (a driver reload), nothing sampled
    for ns, dt in ((9e9, 0.0), (1e9, 1.0)):
        reloaded.add(GpuReading(uuid="a", throttle_ns=ns), dt)
    assert reloaded.throttled_s is None
    assert GpuStats().throttled_s is None  # not measured, never 0


def test_the_interval_a_figure_was_sampled_at_reads_back_from_its_words() -> None:
    from tracker.figures import measured_by, sampled_every

    assert sampled_every(measured_by(10.0)) == 10.0 and sampled_every(measured_by(0.0)) == 0.0
    assert sampled_every(None) == 0.0 and sampled_every("sampled every soon s") == 0.0
    # the widest of several is by number, not by text ("5" sorts after "10")
    words = [measured_by(5.0), measured_by(10.0), measured_by(None)]
    assert max(words, key=sampled_every) == "sampled every 10 s"


def test_throttled_time_in_words_says_seconds_under_a_minute() -> None:
    from tracker.machine import throttled_words

    assert throttled_words(600 / 3600, 1, "counter") == "throttled 10 min, counter-exact"
    assert throttled_words(4.0, 8, None) == "throttled 240 GPU-min, counter-exact"
    assert throttled_words(20 / 3600, 2, "sampled every 1 s") == (
        "throttled 20 GPU-s, sampled every 1 s"
    )
