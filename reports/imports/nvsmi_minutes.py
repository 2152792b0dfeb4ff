"""The vectorized nvidia-smi import's arithmetic (:mod:`reports.imports.nvsmi_fast` reads the
log): one GPU's readings played as :class:`tracker.sampler.Sampler` plays them, with numpy. A
reading covers the time since the same GPU's previous one, split at whole minutes; after a gap
it covers nothing; a minute's mean is time-weighted, and a minute with no time shows the
reading that opened it. Its minute rows, run aggregates and idle time equal the sampler path's
(``tests/reports/test_import_nvsmi_fast.py``).
"""

from __future__ import annotations

import math
import statistics
from datetime import UTC, datetime

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from reports.imports.nvsmi_fast import Series
from tracker.cost import IdleDetector
from tracker.record import MinuteSample
from tracker.sampler import HIST_BINS, GpuStats
from tracker.units import j_to_kwh


def median_step(s: Series) -> float:
    """The median interval between the GPU's readings (0 for one reading), as
    :func:`statistics.median` gives it."""
    return statistics.median(np.diff(s.t).tolist()) if len(s.t) > 1 else 0.0


class Played:
    """What :func:`play` computed for one GPU, shaped as the sampler's results that
    :func:`reports.imports.play.run_record` reads (``run[uuid]``, ``idle_of_run()``)."""

    def __init__(self, uuid: str, stats: GpuStats, idle: tuple[float, float]) -> None:
        self.run = {uuid: stats}
        self._idle = idle

    def idle_of_run(self) -> list[tuple[float, float]]:
        return [self._idle]


def _tw(stats: GpuStats, field: str, v: np.ndarray, dt: np.ndarray) -> None:
    tw = stats.tw[field]
    known = ~np.isnan(v)
    if known.any():
        tw.last = float(v[known][-1])
    use = known & (dt > 0)
    if use.any():
        tw.total = float(np.sum(v[use] * dt[use]))
        tw.seconds = float(np.sum(dt[use]))
        tw.min, tw.max = float(v[use].min()), float(v[use].max())


def play(
    s: Series,
    *,
    run_id: str,
    gap_s: float,
    idle_pct: float,
    idle_window_min: int,
    rows: list[MinuteSample],
) -> tuple[Played, float, float]:
    """One GPU's readings as the sampler plays them: its run aggregates and idle time, its
    minute rows (appended to ``rows``), its first and last time."""
    t = s.t
    n = len(t)
    dt = np.zeros(n)
    if n > 1:
        step = np.diff(t)
        dt[1:] = np.where(step > gap_s, 0.0, step)
    stats = GpuStats()
    for field, v in s.fields.items():
        if field in stats.tw:
            _tw(stats, field, v, dt)
    stats.seconds = float(dt.sum())
    util = s.fields.get("util_pct")
    if util is not None:
        use = ~np.isnan(util) & (dt > 0)
        bins = np.minimum((util[use] // 10).astype(np.int64), HIST_BINS - 1)
        stats.hist_s = np.bincount(bins, weights=dt[use], minlength=HIST_BINS).tolist()
    mem = s.fields.get("mem_used_gib")
    if mem is not None and (~np.isnan(mem)).any():
        stats.mem_peak_gib = max(0.0, float(np.nanmax(mem)))
    mem_total = s.fields.get("mem_total_gib")
    if mem_total is not None and (~np.isnan(mem_total)).any():
        stats.mem_total_gib = float(mem_total[~np.isnan(mem_total)][-1])
    power = s.fields.get("power_w")
    if power is not None:
        use = ~np.isnan(power) & (dt > 0)
        stats._power_j = float(np.sum(power[use] * dt[use]))
    minutes, utils, covered = _minutes(s, dt, run_id=run_id, rows=rows)
    idle = idle_totals(minutes, utils, covered, window=idle_window_min, threshold_pct=idle_pct)
    return Played(s.info.uuid, stats, idle), float(t[0]), float(t[-1])


WINDOW_SUMS_MAX = 240
"""Idle windows up to this many minutes are summed side by side (a row of sums per minute);
a longer one is streamed through :class:`tracker.cost.IdleDetector`."""


def _window_sums(values: np.ndarray, window: int) -> np.ndarray:
    """The sum of each ``window`` consecutive values, added from the oldest as Python's
    ``sum`` adds them (numpy's own sums pair values up); a block of windows at a time, so a
    year of minutes never holds a row of ``window`` numbers per minute at once."""
    windows = sliding_window_view(values, window)
    block = max(1, (1 << 20) // window)
    return np.concatenate(
        [
            np.add.accumulate(windows[i : i + block], axis=1)[:, -1]
            for i in range(0, len(windows), block)
        ]
    )


def idle_totals(
    minutes: list[int],
    utils: list[float | None],
    covered: list[float],
    *,
    window: int,
    threshold_pct: float,
) -> tuple[float, float]:
    """(idle seconds, Σ utilization × seconds over them) of one GPU's minute rows, as
    :class:`tracker.cost.IdleDetector` counts them fed the rows in order: the same sums in the
    same order (each window's from its oldest minute, the idle minutes' in time order: a
    minute is marked by the first window that finds it idle, and those come in time order)."""
    n = len(minutes)
    if window > WINDOW_SUMS_MAX:
        idle = IdleDetector(window, threshold_pct)
        for m, u, c in zip(minutes, utils, covered, strict=True):
            idle.add_minute(u, c, m)
        return idle.idle_s, idle.idle_util_s
    if n < window:
        return 0.0, 0.0
    util = np.array([math.nan if u is None else u for u in utils], dtype=np.float64)
    secs = np.asarray(covered, dtype=np.float64)
    known = ~np.isnan(util)
    # a stretch breaks before a row whose minute does not follow, or after an unknown one
    breaks = np.ones(n, dtype=bool)
    breaks[1:] = (np.diff(np.asarray(minutes, dtype=np.int64)) != 1) | ~known[:-1]
    first = np.maximum.accumulate(np.where(breaks, np.arange(n), 0))
    ends = np.arange(window - 1, n)
    sums, weighted = (_window_sums(v, window) for v in (secs, np.where(known, util, 0.0) * secs))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = weighted / np.where(sums > 0, sums, 1.0)
    found = np.zeros(n + 1, dtype=np.int64)  # qualifying windows ending before each row
    found[ends + 1] = (
        known[ends] & (ends - first[ends] + 1 >= window) & (sums > 0) & (mean < threshold_pct)
    )
    found = np.cumsum(found)
    rows = np.arange(n)
    # a row is idle when under the threshold and a qualifying window ends in [row, row+window)
    marked = known & (util < threshold_pct) & (found[np.minimum(rows + window, n)] > found[rows])
    if not marked.any():
        return 0.0, 0.0
    return (float(np.cumsum(secs[marked])[-1]), float(np.cumsum(util[marked] * secs[marked])[-1]))


def _minutes(
    s: Series,
    dt: np.ndarray,
    *,
    run_id: str,
    rows: list[MinuteSample],
) -> tuple[list[int], list[float | None], list[float]]:
    """The minute rows (appended to ``rows``): each covering reading split at whole minutes,
    summed per minute; and each row's epoch minute, utilization and covered seconds."""
    t = s.t
    covering = np.flatnonzero(dt > 0)
    start_minute = int(t[0] // 60)
    if len(covering) == 0:
        return [], [], []
    a, b = t[covering] - dt[covering], t[covering]
    m0 = np.floor_divide(a, 60).astype(np.int64)
    m1 = (-np.floor_divide(-b, 60)).astype(np.int64) - 1
    k = m1 - m0 + 1
    reading = np.repeat(covering, k)
    offset = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
    minute = np.repeat(m0, k) + offset
    lo = np.maximum(np.repeat(a, k), minute * 60.0)
    hi = np.minimum(np.repeat(b, k), (minute + 1) * 60.0)
    d = hi - lo
    cuts = np.flatnonzero(np.diff(minute)) + 1
    starts = np.concatenate(([0], cuts))
    minutes = minute[starts]
    seconds = np.add.reduceat(d, starts)

    def mean(field: str) -> tuple[np.ndarray, np.ndarray]:
        v = s.fields.get(field)
        if v is None:
            return np.full(len(starts), np.nan), np.zeros(len(starts))
        pv = v[reading]
        known = ~np.isnan(pv)
        total = np.add.reduceat(np.where(known, pv * d, 0.0), starts)
        secs = np.add.reduceat(np.where(known, d, 0.0), starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(secs > 0, total / np.where(secs > 0, secs, 1.0), np.nan), secs

    util, _ = mean("util_pct")
    sm, _ = mean("sm_active_pct")
    power, power_s = mean("power_w")
    pw = s.fields.get("power_w")
    energy_j = (
        np.add.reduceat(np.where(np.isnan(pw[reading]), 0.0, pw[reading] * d), starts)
        if pw is not None
        else np.zeros(len(starts))
    )
    energy_j[power_s <= 0] = np.nan
    mem = s.fields.get("mem_used_gib")
    peak = (
        np.fmax.reduceat(mem[reading], starts) if mem is not None else np.full(len(starts), np.nan)
    )
    first = {f: float(v[0]) for f, v in s.fields.items()}  # the start reading: its minute's
    columns = [minutes, seconds, util, sm, peak, power, energy_j]
    if minutes[0] == start_minute:
        for arr, f in ((util, "util_pct"), (sm, "sm_active_pct"), (power, "power_w")):
            if np.isnan(arr[0]) and f in first:
                arr[0] = first[f]
        if mem is not None and not np.isnan(first["mem_used_gib"]):
            peak[0] = np.fmax(peak[0], first["mem_used_gib"])
    else:  # the start minute had no time before the next reading came
        columns = [
            np.concatenate(([value], column))
            for value, column in zip(
                (
                    start_minute,
                    0.0,
                    first.get("util_pct", math.nan),
                    first.get("sm_active_pct", math.nan),
                    first.get("mem_used_gib", math.nan),
                    first.get("power_w", math.nan),
                    math.nan,
                ),
                columns,
                strict=True,
            )
        ]
    at: list[int] = columns[0].tolist()
    covered = [round(x, 3) for x in columns[1].tolist()]  # Python's round, as the sampler's
    utils, sms, peaks, powers, energies = (
        [None if math.isnan(x) else x for x in c.tolist()] for c in columns[2:]
    )
    gpu = s.info.uuid
    rows.extend(
        MinuteSample(
            run_id=run_id,
            minute=datetime.fromtimestamp(m * 60, UTC),
            gpu=gpu,
            covered_s=c,
            util_pct=u,
            sm_active_pct=a,
            mem_used_gib=None if p is None else max(0.0, p),
            power_w=w,
            energy_kwh=None if e is None else j_to_kwh(e),
        )
        for m, c, u, a, p, w, e in zip(
            at, covered, utils, sms, peaks, powers, energies, strict=True
        )
    )
    return at, utils, covered
