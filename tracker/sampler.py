"""The sampling thread and its bounded, time-weighted aggregates.

A reading weighs for the interval that ends at it (NVML utilization is a trailing-window share
of time). Per GPU the sampler keeps running sums (mean, min, max), a fixed 10-bin utilization
histogram, the energy counter's first and last values, per-minute buckets that it hands to the
store, and a streaming detector of idle 30-minute stretches: memory stays bounded whatever the
run length.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tracker.cost import IdleDetector, Thresholds
from tracker.gpu.base import GpuBackend, GpuInfo, GpuReading
from tracker.record import MinuteSample
from tracker.shares import EVEN, MEASURED, time_sliced
from tracker.units import j_to_kwh, ns_to_s

if TYPE_CHECKING:
    from tracker.config import Settings

log = logging.getLogger("gpu_kpi")

HIST_BINS = 10
"""Utilization histogram: bin k holds the seconds spent at [10k, 10k+10)% (the last bin is 90–100%)."""

_TW_FIELDS = (
    "util_pct",
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "mem_used_gib",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "proc_util_pct",
)


class TimeWeighted:
    """Time-weighted mean, min and max of a value held over intervals; O(1) memory."""

    __slots__ = ("last", "max", "min", "seconds", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.seconds = 0.0
        self.min = math.inf
        self.max = -math.inf
        self.last: float | None = None

    def add(self, value: float | None, dt_s: float) -> None:
        if value is None:
            return
        self.last = value
        if dt_s > 0:
            self.total += value * dt_s
            self.seconds += dt_s
            self.min = min(self.min, value)
            self.max = max(self.max, value)

    @property
    def mean(self) -> float | None:
        return self.total / self.seconds if self.seconds > 0 else self.last


class GpuStats:
    """Aggregates of one GPU over a span of time (the run, a log window, or a minute)."""

    def __init__(self) -> None:
        self.tw: dict[str, TimeWeighted] = {f: TimeWeighted() for f in _TW_FIELDS}
        self.hist_s = [0.0] * HIST_BINS
        self.mem_peak_gib: float | None = None
        self.mem_total_gib: float | None = None
        self.seconds = 0.0
        self.energy_base_j: float | None = None
        """Counter value where this span starts (else its first reading's)."""
        self.energy_last_j: float | None = None
        self._power_j = 0.0
        self.throttle_base_ns: float | None = None
        self.throttle_last_ns: float | None = None
        self.throttled_sampled_s = 0.0
        """Σ throttled share × seconds of the readings (where no counter)."""
        self.throttle_sampled = False
        """Whether any reading gave a throttled share."""
        self.cycles_base: tuple[float, float] | None = None
        """SM cycles (active, elapsed) where this span starts (else its first reading's)."""
        self.cycles_last: tuple[float, float] | None = None
        self.others_s = 0.0
        """Σ seconds × the share of a time-sliced GPU other processes held
        (:func:`tracker.shares.time_sliced`; 0 for a reading of a GPU held alone)."""
        self.splits: set[str] = set()
        """How the shares of a time-sliced GPU were had: ``measured`` (a reading with a
        :attr:`GpuReading.work_share`) or ``even``."""
        self.tensor_clock = TimeWeighted()
        """Tensor pipes' active fraction × SM clock (MHz) of each reading that has both: its
        mean over the clock a peak is quoted at is the observed FLOPs utilization
        (:meth:`ofu`), the product taken reading by reading (an idle stretch's low clock
        must not scale a busy one's activity)."""

    @property
    def held_share(self) -> float:
        """The share of the GPU held over the span, 0–1 (1: held alone throughout)."""
        return 1.0 - self.others_s / self.seconds if self.seconds > 0 else 1.0

    def add(self, r: GpuReading, dt_s: float, held: float | None = None) -> None:
        """Fold ``r`` in for ``dt_s`` seconds; ``held``: the share of a time-sliced GPU held
        over them (:func:`tracker.shares.time_sliced`; None: held alone): the means weigh
        each reading by the GPU-time held, so that a share's utilization is its busy time over
        its time."""
        weight = dt_s if held is None else dt_s * held
        for f in _TW_FIELDS:
            self.tw[f].add(getattr(r, f), weight)
        self.seconds += max(dt_s, 0.0)
        if held is not None and 0 <= held <= 1:
            self.others_s += max(dt_s, 0.0) * (1.0 - held)
        if held is not None:
            self.splits.add(MEASURED if r.work_share is not None else EVEN)
        if r.tensor_active_pct is not None and r.sm_clock_mhz is not None:
            self.tensor_clock.add(r.tensor_active_pct / 100.0 * r.sm_clock_mhz, weight)
        if r.util_pct is not None and dt_s > 0:
            self.hist_s[min(int(r.util_pct // 10), HIST_BINS - 1)] += weight
        if r.mem_used_gib is not None:
            self.mem_peak_gib = max(self.mem_peak_gib or 0.0, r.mem_used_gib)
        if r.mem_total_gib is not None:
            self.mem_total_gib = r.mem_total_gib
        if r.energy_j is not None:
            if self.energy_base_j is None:
                self.energy_base_j = r.energy_j
            self.energy_last_j = r.energy_j
        if r.power_w is not None and dt_s > 0:
            self._power_j += r.power_w * dt_s
        if r.sm_cycles_active is not None and r.sm_cycles_elapsed is not None:
            if self.cycles_base is None:
                self.cycles_base = (r.sm_cycles_active, r.sm_cycles_elapsed)
            self.cycles_last = (r.sm_cycles_active, r.sm_cycles_elapsed)
        if r.throttle_ns is not None:
            if self.throttle_base_ns is None:
                self.throttle_base_ns = r.throttle_ns
            self.throttle_last_ns = r.throttle_ns
        elif r.throttled_share is not None and 0.0 <= r.throttled_share <= 1.0:
            self.throttle_sampled = True
            if dt_s > 0:
                self.throttled_sampled_s += r.throttled_share * dt_s

    def mean(self, field: str) -> float | None:
        return self.tw[field].mean

    def ofu(self, peak_mhz: float | None) -> float | None:
        """Observed FLOPs utilization over the span, 0-1: the tensor pipes' active fraction ×
        the SM clock over ``peak_mhz`` (the clock the GPU's peak is quoted at), never more than
        the tensor activity itself; None where either was not measured or no clock is known."""
        if not peak_mhz or (mean := self.tensor_clock.mean) is None:
            return None
        active = self.mean("tensor_active_pct")
        return min(mean / peak_mhz, (active or 0.0) / 100.0)

    @property
    def sm_active_counted(self) -> float | None:
        """SM activity over the span from the cycle counters, % (Δactive ÷ Δelapsed: exact,
        weighted by cycles); None where they were not read, did not move, or went back."""
        if self.cycles_base is None or self.cycles_last is None:
            return None
        active = self.cycles_last[0] - self.cycles_base[0]
        elapsed = self.cycles_last[1] - self.cycles_base[1]
        if elapsed <= 0 or not 0 <= active <= elapsed:
            return None
        return 100.0 * active / elapsed

    def sm_active(self) -> tuple[float, bool] | None:
        """SM activity over the span, % (the counters' where they were read, else the gauges'
        time-weighted mean), and whether it is counter-exact; None: not measured."""
        counted = self.sm_active_counted
        if counted is not None:
            return counted, True
        mean = self.mean("sm_active_pct")
        return None if mean is None else (mean, False)

    @property
    def throttled_s(self) -> tuple[float, bool] | None:
        """Seconds of the span the GPU's clocks were held down for power or thermal reasons,
        and whether that is counter-exact: the violation counters' difference (at most the
        span: power and thermal violations that overlap are counted once only up to it), else
        the readings' throttled shares of their intervals (a reading speaks for the interval
        that ends at it: a throttle shorter than the interval may be missed,
        and each start and end is placed within one interval). None: not measured (or the
        counter went back, as after a driver reload, with nothing sampled)."""
        if self.throttle_base_ns is not None and self.throttle_last_ns is not None:
            used = self.throttle_last_ns - self.throttle_base_ns
            if used >= 0:
                return min(ns_to_s(used), self.seconds), True
        if self.throttle_sampled:
            return self.throttled_sampled_s, False
        return None

    @property
    def energy_j(self) -> float | None:
        """Energy used: the counter's difference; integrated power where there is no counter
        (or it went backwards, as after a driver reload)."""
        if self.energy_base_j is not None and self.energy_last_j is not None:
            used = self.energy_last_j - self.energy_base_j
            if used >= 0 and (used > 0 or self._power_j == 0):
                return used
        return self._power_j if self.tw["power_w"].seconds > 0 else None


_DEFAULTS = Thresholds()
STEP_S = 120.0
"""A wall clock this far from where the monotonic clock says it should be has stepped."""


@dataclass(frozen=True, kw_only=True)
class AlertRule:
    """Fire once when the run's mean utilization over ``window_s`` stays under ``under_pct``."""

    under_pct: float = _DEFAULTS.alert_util_pct
    window_s: float = 600.0


def split_of(stats: Iterable[GpuStats]) -> str | None:
    """How the time-sliced GPUs among ``stats`` were split (:attr:`RunRecord.gpu_split`):
    ``measured`` where any share was, else ``even``; None where every GPU was held alone."""
    splits = set().union(*(s.splits for s in stats))
    if MEASURED in splits:
        return MEASURED
    return EVEN if splits else None


class Sampler:
    """Reads every GPU of the process at a fixed interval on a daemon thread.

    ``clock`` is wall-clock seconds since the epoch (injected in tests; ``threaded=False`` lets
    a test drive :meth:`sample` itself). ``monotonic`` (a live run's ``time.monotonic``) times
    the readings when given: the wall clock then only labels minutes, so a wall-clock step (NTP,
    a VM migration, suspend) never becomes GPU-time; labels never go back (after a step back
    they run on from the last one by the monotonic clock), and a step is logged once. Completed
    minutes go to ``on_minute``; the alert rule calls ``on_alert`` once, and the idle rule
    ``on_idle`` once (with the idle GPUs).
    """

    @classmethod
    def from_settings(cls, backend: GpuBackend, settings: Settings, **kwargs: Any) -> Sampler:
        """A sampler that measures as ``settings`` say (interval, alert and idle rules);
        ``kwargs``: the other arguments of :class:`Sampler`."""
        t = settings.thresholds
        return cls(
            backend,
            interval_s=settings.interval_s,
            idle_pct=t.idle_pct,
            idle_window_min=t.idle_window_min,
            share_basis=settings.mig_share,
            idle_split=settings.idle_split,
            **kwargs,
            alert=AlertRule(under_pct=t.alert_util_pct, window_s=settings.alert_window_s),
        )

    def __init__(
        self,
        backend: GpuBackend,
        *,
        run_id: str = "",
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        threaded: bool = True,
        on_minute: Callable[[list[MinuteSample]], None] | None = None,
        alert: AlertRule | None = None,
        on_alert: Callable[[str], None] | None = None,
        on_idle: Callable[[list[str]], None] | None = None,
        idle_pct: float = _DEFAULTS.idle_pct,
        idle_window_min: int = _DEFAULTS.idle_window_min,
        share_basis: str = "compute",
        idle_split: str = "even",
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.backend = backend
        self.run_id = run_id
        self.interval_s = interval_s
        self.clock = clock
        self.monotonic = monotonic
        self.threaded = threaded
        self.on_minute = on_minute
        self.alert = alert
        self.on_alert = on_alert
        self.on_idle = on_idle
        self.gpus: list[GpuInfo] = []
        self.share_basis = share_basis
        self.idle_split = idle_split
        self.shares: dict[str, float] = {}
        """Each GPU's share of a physical GPU (:meth:`GpuInfo.share`): its minute rows cover
        that share of the minute's seconds and energy (a MIG instance's slices)."""
        self.run: dict[str, GpuStats] = {}
        self.window: dict[str, GpuStats] = {}
        self.idle: dict[str, IdleDetector] = {}
        self.last: dict[str, GpuReading] = {}
        self.lost: set[str] = set()
        self.failed = False
        self._idle_args = (idle_window_min, idle_pct)
        self._minute: dict[str, tuple[int, GpuStats]] = {}
        self._alert_span: deque[tuple[float, float]] = deque()
        self._alerted = False
        self._idle_alerted = False
        self._prev_t: float | None = None
        self._prev_mono: float | None = None
        self._stepped = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors = 0

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> list[GpuInfo]:
        """Open the backend (may raise BackendUnavailable), take the first sample, start the
        thread."""
        now = self.clock()
        self.gpus = self.backend.open(now)
        for g in self.gpus:
            self.shares[g.uuid] = g.share(self.share_basis)
            self.run[g.uuid] = GpuStats()
            self.window[g.uuid] = GpuStats()
            self.idle[g.uuid] = IdleDetector(*self._idle_args)
        self.sample(None if self.monotonic else now)
        if self.threaded:
            self._thread = threading.Thread(target=self._loop, name="gpu-kpi-sampler", daemon=True)
            self._thread.start()
        return self.gpus

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        """Take the last sample, flush the partial minute, join the thread, close the backend."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.interval_s))
            self._thread = None
        if self.gpus and not self.failed:
            self.sample()
        with self._lock:
            rows = [
                self._close_minute(u, m, s) for u, (m, s) in self._minute.items() if s.seconds > 0
            ]
            self._minute.clear()
        if rows and self.on_minute:
            self.on_minute(rows)
        try:
            self.backend.close()
        except Exception as e:  # closing must not hide the run's results
            log.warning("gpu-kpi: closing the GPU backend failed: %s", e)

    # -- sampling ---------------------------------------------------------------------------
    def _now(self) -> tuple[float, float | None]:
        """The reading's time (a minute label: the wall clock, never before the last label plus
        the monotonic time since) and the monotonic seconds since the last reading (None
        without a monotonic clock: then the labels' difference is the time)."""
        wall = self.clock()
        if self.monotonic is None:
            return wall, None
        mono = self.monotonic()
        if self._prev_mono is None or self._prev_t is None:
            return wall, mono
        expected = self._prev_t + max(mono - self._prev_mono, 0.0)
        if abs(wall - expected) > STEP_S and not self._stepped:
            self._stepped = True
            log.warning(
                "gpu-kpi: the wall clock stepped %+.0f s during the run; GPU-time follows the "
                "monotonic clock (minutes are labelled by the wall clock, never going back)",
                wall - expected,
            )
        return max(wall, expected), mono

    def sample(self, now: float | None = None) -> None:
        """Read the GPUs once and fold the readings into every aggregate."""
        if self.failed:
            return
        mono: float | None = None
        if now is None:
            now, mono = self._now()
        try:
            readings = self.backend.read(now)
            self._errors = 0
        except Exception as e:
            self._errors += 1
            if self._errors == 1:
                log.warning("gpu-kpi: reading the GPUs failed: %s", e)
            if self._errors >= 10:
                self.failed = True
                log.warning(
                    "gpu-kpi: GPU sampling stopped after %d failures in a row", self._errors
                )
            return
        lost = self.run.keys() - {r.uuid for r in readings} - self.lost
        if lost:  # no more live figures for them: their last reading is history
            self.lost |= lost
            for uuid in lost:
                self.last.pop(uuid, None)
        closed: list[MinuteSample] = []
        with self._lock:
            if mono is not None and self._prev_mono is not None:
                dt = max(mono - self._prev_mono, 0.0)
            else:
                dt = max(now - self._prev_t, 0.0) if self._prev_t is not None else 0.0
            prev = now - dt
            self._prev_t = now
            self._prev_mono = mono
            own: list[GpuReading] = []  # each as this process's part of it
            for reading in readings:
                if reading.uuid not in self.run:
                    continue
                r, held = self._own_part(reading)
                own.append(r)
                self.last[r.uuid] = r
                self.run[r.uuid].add(r, dt, held)
                self.window[r.uuid].add(r, dt, held)
                closed.extend(self._add_to_minutes(r, prev, now, held))
            alert = self._check_alert(own, now, dt)
            idle = self._check_idle() if closed else []
        if closed and self.on_minute:
            self.on_minute(closed)
        if alert and self.on_alert:
            self.on_alert(alert)
        if idle and self.on_idle:
            self.on_idle(idle)

    def _check_idle(self) -> list[str]:
        """The GPUs the idle rule has just found idle (a whole ``idle_window_min`` under
        ``idle_pct``), the first time any is: the run's one idle alert."""
        if self._idle_alerted or self.on_idle is None:
            return []
        idle = [u for u, d in self.idle.items() if d.idle_s > 0 and u not in self.lost]
        self._idle_alerted = bool(idle)
        return idle

    def held_shares(self) -> list[float]:
        """The share of a physical GPU each GPU (in the order of :attr:`gpus`) held so far: a
        MIG instance's slices (:attr:`shares`), times the share of a time-sliced GPU measured
        so far (:attr:`GpuStats.held_share`)."""
        return [
            self.shares.get(g.uuid, 1.0) * (s.held_share if (s := self.run.get(g.uuid)) else 1.0)
            for g in self.gpus
        ]

    def _own_part(self, r: GpuReading) -> tuple[GpuReading, float | None]:
        """A reading of a GPU shared in time (:attr:`GpuReading.holders` over 1) as this
        process's part of it: its own utilization over its share, and the share
        (:func:`tracker.shares.time_sliced`); a GPU held alone as it is, and None."""
        if r.holders is None or r.holders <= 1:
            return r, None
        share, own = time_sliced(r.util_pct, r.work_share, round(r.holders), self.idle_split)
        return replace(r, util_pct=own), share

    def _add_to_minutes(
        self, r: GpuReading, t0: float, t1: float, held: float | None = None
    ) -> list[MinuteSample]:
        """Spread a reading over the minutes of (t0, t1]; return the minutes it closed."""
        closed: list[MinuteSample] = []
        if t1 <= t0:
            if r.uuid not in self._minute:  # the start reading: the energy counter's base
                self._minute[r.uuid] = (int(t1 // 60), GpuStats())
                self._minute[r.uuid][1].add(r, 0.0)
            return closed
        t = t0
        while True:
            minute = int(t // 60)
            cur = self._minute.get(r.uuid)
            if cur is None or cur[0] != minute:
                stats = GpuStats()
                if cur is not None:
                    closed.append(self._close_minute(r.uuid, *cur))
                    # the counters carry over, so the minutes add up to the run
                    stats.energy_base_j = cur[1].energy_last_j
                    stats.cycles_base = cur[1].cycles_last
                cur = (minute, stats)
                self._minute[r.uuid] = cur
            end = min(t1, (minute + 1) * 60.0)
            cur[1].add(r, end - t, held)
            if end >= t1:
                return closed
            t = end

    def _close_minute(self, uuid: str, minute: int, stats: GpuStats) -> MinuteSample:
        row = self._minute_row(uuid, minute, stats)
        self.idle[uuid].add_minute(row.util_pct, row.covered_s, minute)  # the device's seconds
        share = self.shares.get(uuid, 1.0) * stats.held_share
        if share == 1.0:
            return row
        return replace(  # not rounded again: a week of 1/7 minutes adds up to 1/7 of the week
            row,
            covered_s=row.covered_s * share,
            energy_kwh=None if row.energy_kwh is None else row.energy_kwh * share,
        )

    def _minute_row(self, uuid: str, minute: int, s: GpuStats) -> MinuteSample:
        energy = s.energy_j
        return MinuteSample(
            run_id=self.run_id,
            minute=datetime.fromtimestamp(minute * 60, UTC),
            gpu=uuid,
            covered_s=round(s.seconds, 3),
            util_pct=s.mean("util_pct"),
            sm_active_pct=sm[0] if (sm := s.sm_active()) is not None else None,
            mem_used_gib=s.mem_peak_gib,
            power_w=s.mean("power_w"),
            energy_kwh=j_to_kwh(energy) if energy is not None else None,
        )

    def _check_alert(self, readings: Iterable[GpuReading], now: float, dt: float) -> str | None:
        if self.alert is None or self._alerted or dt <= 0:
            return None
        utils = [r.util_pct for r in readings if r.util_pct is not None]
        if not utils:
            return None
        span = self._alert_span
        span.append((dt, sum(utils) / len(utils)))
        covered = sum(d for d, _ in span)
        while span and covered - span[0][0] >= self.alert.window_s:
            covered -= span.popleft()[0]
        if covered < self.alert.window_s:
            return None
        mean = sum(d * u for d, u in span) / covered
        if mean >= self.alert.under_pct:
            return None
        self._alerted = True
        return (
            f"GPU utilization averaged {mean:.0f}% over the last {covered / 60:.0f} min, "
            f"under the {self.alert.under_pct:.0f}% alert threshold"
        )

    def gap(self) -> None:
        """The time since the last reading was not observed (a gap in an imported log): the
        next reading starts a new stretch and covers no time before it."""
        with self._lock:
            self._prev_t = self._prev_mono = None

    # -- results ----------------------------------------------------------------------------
    def take_window(self) -> dict[str, GpuStats]:
        """The aggregates since the previous call (the log window), and start a new window."""
        with self._lock:
            window, self.window = self.window, {u: GpuStats() for u in self.window}
            # a window shorter than the sampling interval shows the latest reading
            for uuid, stats in self.window.items():
                if uuid in self.last:
                    stats.add(self.last[uuid], 0.0)
        return window

    def idle_seconds(self) -> dict[str, float]:
        with self._lock:
            return {u: d.idle_s for u, d in self.idle.items()}

    def idle_of_run(self) -> list[tuple[float, float]]:
        """Each GPU's idle seconds and Σ utilization × seconds over them so far, in the order
        of :attr:`run`."""
        with self._lock:
            return [
                (d.idle_s, d.idle_util_s) if (d := self.idle.get(u)) else (0.0, 0.0)
                for u in self.run
            ]
