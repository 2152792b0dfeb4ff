"""The vectorized nvidia-smi import's arithmetic (:mod:`reports.imports.nvsmi_fast` reads the
log): one GPU's readings played as :class:`tracker.sampler.Sampler` plays them, with numpy. A
reading covers the time since the same GPU's previous one, split at whole minutes; after a gap
it covers nothing; a minute's mean is time-weighted, and a minute with no time shows the
reading that opened it. Its minute rows, run aggregates and idle time equal the sampler path's
(``tests/reports/imports/test_import_nvsmi_fast.py``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from datetime import UTC, datetime
from itertools import repeat
from typing import Any

import numpy as np

from reports.imports.nvsmi_fast import Series
from tracker.cost import idle_flags
from tracker.record import MinuteSample
from tracker.sampler import HIST_BINS, GpuStats
from tracker.store.rollups import HOUR_MIN, ROLLUP_RULES, Rollup, rollup_of
from tracker.units import j_to_kwh


def median_step(s: Series) -> float:
    """The median interval between the GPU's readings (0 for one reading), as
    :func:`statistics.median` gives it (the middle one, or the two middle ones' sum over 2),
    found by a partial sort."""
    if len(s.t) < 2:
        return 0.0
    steps = np.diff(s.t)
    half = len(steps) // 2
    if len(steps) % 2:
        return float(np.partition(steps, half)[half])
    low, high = np.partition(steps, [half - 1, half])[[half - 1, half]].tolist()
    return (low + high) / 2


class Played:
    """What :func:`play` computed for one GPU, shaped as the sampler's results that
    :func:`reports.imports.play.run_record` reads (``run[uuid]``, ``idle_of_run()``)."""

    def __init__(self, uuid: str, stats: GpuStats, idle: tuple[float, float]) -> None:
        self.run = {uuid: stats}
        self._idle = idle

    def idle_of_run(self) -> list[tuple[float, float]]:
        return [self._idle]


def _kept(mask: np.ndarray) -> slice | np.ndarray:
    """What indexes the ``True`` of ``mask``: a slice (a view, no copy) where they are all of
    it or all but the first (a GPU's first reading covers nothing), else the mask itself. The
    values picked, and so every sum of them, are the same either way."""
    if mask[1:].all():
        return slice(0 if mask[0] else 1, None)
    return mask


def time_weighted(stats: GpuStats, field: str, v: np.ndarray, dt: np.ndarray) -> None:
    """Set ``stats``' time-weighted ``field`` from values ``v`` (NaN: unknown), each held for
    ``dt`` seconds: its total, seconds, min, max, and last known value."""
    tw = stats.tw[field]
    known = ~np.isnan(v)
    if not known.any():
        return
    tw.last = float(v[len(v) - 1 - int(np.argmax(known[::-1]))])  # the last known
    use = known & (dt > 0)
    if use.any():
        picked = _kept(use)
        held, secs = v[picked], dt[picked]
        tw.total = float(np.sum(held * secs))
        tw.seconds = float(np.sum(secs))
        tw.min, tw.max = float(held.min()), float(held.max())


def play(
    s: Series,
    *,
    run_id: str,
    gap_s: float,
    idle_pct: float,
    idle_window_min: int,
    rows: list[MinuteSample],
    rollups: list[list[Rollup] | None] | None = None,
) -> tuple[Played, float, float]:
    """One GPU's readings as the sampler plays them: its run aggregates and idle time, its
    minute rows (appended to ``rows``), its first and last time. ``rollups``: where given,
    the rollups of its minute rows are appended to it as the store computes them
    (:func:`hour_rollups`; None where they are not computed here)."""
    t = s.t
    n = len(t)
    dt = np.zeros(n)
    if n > 1:
        step = np.diff(t)
        dt[1:] = np.where(step > gap_s, 0.0, step)
    stats = GpuStats()
    for field, v in s.fields.items():
        if field in stats.tw:
            time_weighted(stats, field, v, dt)
    stats.seconds = float(dt.sum())
    util = s.fields.get("util_pct")
    if util is not None:
        use = _kept(~np.isnan(util) & (dt > 0))
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
        use = _kept(~np.isnan(power) & (dt > 0))
        stats._power_j = float(np.sum(power[use] * dt[use]))
    minutes, utils, covered, values = _minutes(s, dt, run_id=run_id, rows=rows)
    idle = idle_totals(minutes, utils, covered, window=idle_window_min, threshold_pct=idle_pct)
    if rollups is not None:
        rollups.append(hour_rollups(run_id, s.info.uuid, minutes, values))
    return Played(s.info.uuid, stats, idle), float(t[0]), float(t[-1])


def of_rows(
    played: GpuStats,
    uuid: str,
    rows: list[MinuteSample],
    *,
    idle_window_min: int,
    idle_pct: float,
    share: float = 1.0,
) -> Played:
    """One GPU's figures from its minute rows, where the rows were changed after playing (a
    time-sliced GPU's split between the runs that held it): time, utilization, SM activity,
    power, energy and idle time as the rows say (what the report reads too); the other
    time-weighted figures, which no row holds, at ``played``'s means over the rows' time.

    Args:
        played: The GPU's aggregates as the sampler played them.
        uuid: The GPU.
        rows: Its minute rows, in time order.
        idle_window_min: The idle rule's window, minutes.
        idle_pct: The idle rule's threshold, %.
        share: The share of the physical GPU the device is (a MIG instance's), by which its
            rows' seconds were already scaled: the figures count the device's seconds, as
            the sampler's do.
    """
    stats = copy.deepcopy(played)
    covered = np.array([r.covered_s / share for r in rows], dtype=np.float64)
    share = float(covered.sum()) / played.seconds if played.seconds > 0 else 0.0
    for tw in stats.tw.values():
        tw.total *= share
        tw.seconds *= share

    def column(field: str) -> np.ndarray:
        return np.array(
            [np.nan if (v := getattr(r, field)) is None else v for r in rows], dtype=np.float64
        )

    util, power = column("util_pct"), column("power_w")
    for field, v in (("util_pct", util), ("sm_active_pct", column("sm_active_pct"))):
        stats.tw[field] = type(stats.tw[field])()
        time_weighted(stats, field, v, covered)
    stats.tw["power_w"] = type(stats.tw["power_w"])()
    time_weighted(stats, "power_w", power, covered)
    stats.seconds = float(covered.sum())
    stats.others_s = 0.0  # the rows hold the share of a time-sliced GPU already
    use = ~np.isnan(util) & (covered > 0)
    bins = np.minimum((util[use] // 10).astype(np.int64), HIST_BINS - 1)
    stats.hist_s = np.bincount(bins, weights=covered[use], minlength=HIST_BINS).tolist()
    stats._power_j = float(np.nansum(power * covered))
    stats.energy_base_j = stats.energy_last_j = None  # the counter counts the whole GPU
    idle = idle_totals(
        [int(r.minute.timestamp()) // 60 for r in rows],
        [r.util_pct for r in rows],
        covered.tolist(),
        window=idle_window_min,
        threshold_pct=idle_pct,
    )
    return Played(uuid, stats, idle)


def hour_rollups(
    run_id: str, gpu: str, minutes: list[int], values: RowValues
) -> list[Rollup] | None:
    """The rollups of one GPU's minute rows (in minute order, one a minute: ``minutes``, their
    epoch minutes, and ``values``, :data:`RowValues`) as the store computes them from the rows
    it holds (:func:`tracker.store.rollups.rollups_of`), with numpy: every sum the same floats,
    added in the same order (a padded row of each hour's values, summed by ``cumsum``, which
    adds one value after another; an added 0.0 changes no sum that starts at 0.0). None where
    a value is not one the rows here hold (covered seconds outside 0-60, a utilization or SM
    activity outside 0-100, an energy or memory below 0 or infinite): the store's rules for
    those are its own to apply."""
    covered, util, sm, energy, mem = values
    if not len(minutes):
        return []
    with np.errstate(invalid="ignore"):
        if not (
            ((covered >= 0.0) & (covered <= 60.0)).all()
            and _within(util, 100.0)
            and _within(sm, 100.0)
            and _within(energy, math.inf)
            and _within(mem, math.inf)
        ):
            return None
    at = np.asarray(minutes, dtype=np.int64)
    hours = at // HOUR_MIN
    starts = np.flatnonzero(np.concatenate(([True], hours[1:] != hours[:-1])))
    counts = np.diff(np.append(starts, len(at)))
    # each row's place in its hour's padded row, after the 0.0 every sum starts from
    place = (
        np.repeat(np.arange(len(starts)), counts),
        np.arange(len(at)) - np.repeat(starts, counts) + 1,
    )
    width = int(counts.max()) + 1

    def summed(x: np.ndarray, use: np.ndarray | None = None) -> list[float]:
        grid = np.zeros((len(starts), width))
        grid[place] = x if use is None else np.where(use, x, 0.0)
        return np.cumsum(grid, axis=1)[:, -1].tolist()

    def flags(v: np.ndarray, rule: str) -> np.ndarray:
        pct, window = ROLLUP_RULES[rule]
        checked = _optional(v)
        return np.array(
            idle_flags(
                checked, covered.tolist(), threshold_pct=pct, window=window, minutes=minutes
            ),
            dtype=bool,
        )

    sums: dict[str, list[float]] = {"covered_s": summed(covered)}
    for name, v, rule in (("util", util, "util"), ("sm", sm, "sm_active")):
        known = ~np.isnan(v)
        if not known.any():
            zero = [0.0] * len(starts)
            sums.update({f"{name}_{k}": zero for k in ("known_s", "s", "idle_s", "idle_value_s")})
            continue
        weighted = v * covered
        idle = known & flags(v, rule)
        sums[f"{name}_known_s"] = summed(covered, known)
        sums[f"{name}_s"] = summed(weighted, known)
        sums[f"{name}_idle_s"] = summed(covered, idle)
        sums[f"{name}_idle_value_s"] = summed(weighted, idle)
    has_energy = np.add.reduceat(~np.isnan(energy), starts) > 0
    energies = summed(energy, ~np.isnan(energy))
    known_mem = ~np.isnan(mem)
    has_mem = np.add.reduceat(known_mem, starts) > 0
    peaks = np.fmax.reduceat(np.where(known_mem, mem, 0.0), starts).tolist()
    out: list[Rollup] = []
    for i, (hour, n) in enumerate(zip(hours[starts].tolist(), counts.tolist(), strict=True)):
        out.append(
            rollup_of(
                (
                    ("run_id", run_id),
                    ("gpu", gpu),
                    ("hour", hour),
                    ("minutes", n),
                    *((k, v[i]) for k, v in sums.items()),
                    ("energy_kwh", energies[i] if has_energy[i] else None),
                    # max(peak or 0.0, value) row after row: the largest, at least 0.0
                    ("mem_peak_gib", max(0.0, peaks[i]) if has_mem[i] else None),
                    ("dropped", 0),
                    ("bad_util", 0),
                    ("bad_sm", 0),
                    ("bad_minutes", 0),
                )
            )
        )
    return out


def _within(v: np.ndarray, high: float) -> bool:
    """Whether every value of ``v`` is NaN (no value) or a number in [0, ``high``], not
    infinite: what :func:`tracker.store.rollups.rollups_of` counts as it is."""
    return bool((np.isnan(v) | ((v >= 0.0) & (v <= high) & (v != math.inf))).all())


def idle_totals(
    minutes: list[int],
    utils: list[float | None],
    covered: list[float],
    *,
    window: int,
    threshold_pct: float,
) -> tuple[float, float]:
    """(idle seconds, Σ utilization × seconds over them) of one GPU's minute rows by the idle
    rule (:func:`tracker.cost.idle_flags`), summed in time order as
    :class:`tracker.cost.IdleDetector` adds them (a minute is counted by the first window that
    finds it idle, and those come in time order): the same floats."""
    flags = idle_flags(utils, covered, threshold_pct=threshold_pct, window=window, minutes=minutes)
    if not any(flags):
        return 0.0, 0.0
    marked = np.flatnonzero(flags)
    util = np.array([utils[i] for i in marked], dtype=np.float64)
    secs = np.asarray(covered, dtype=np.float64)[marked]
    return float(np.cumsum(secs)[-1]), float(np.cumsum(util * secs)[-1])


def _minutes(
    s: Series,
    dt: np.ndarray,
    *,
    run_id: str,
    rows: list[MinuteSample],
) -> tuple[list[int], list[float | None], list[float], RowValues]:
    """The minute rows (appended to ``rows``): each covering reading split at whole minutes,
    summed per minute; and each row's epoch minute, utilization and covered seconds, and
    their values as arrays (:data:`RowValues`)."""
    t = s.t
    covering = _kept(dt > 0)
    start_minute = int(t[0] // 60)
    b = t[covering]
    if len(b) == 0:
        return [], [], [], (np.zeros(0),) * 5
    a = b - dt[covering]
    m0 = _minute_of(a).astype(np.int64)
    m1 = (-_minute_of(-b)).astype(np.int64) - 1
    k = m1 - m0 + 1
    if (k == 1).all():  # no reading crosses a minute: each is its own part, in place
        picked: slice | np.ndarray = covering
        minute = m0
    else:
        picked = np.repeat(np.arange(len(t))[covering], k)
        offset = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
        minute = np.repeat(m0, k) + offset
        a, b = np.repeat(a, k), np.repeat(b, k)
    lo = np.maximum(a, minute * 60.0)
    hi = np.minimum(b, (minute + 1) * 60.0)
    d = hi - lo
    cuts = np.flatnonzero(minute[1:] != minute[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    minutes = minute[starts]
    seconds = np.add.reduceat(d, starts)

    def mean(field: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The minutes' time-weighted means of ``field``, their seconds known and Σ value ×
        seconds."""
        v = s.fields.get(field)
        if v is None:
            return np.full(len(starts), np.nan), np.zeros(len(starts)), np.zeros(len(starts))
        pv = v[picked]
        known = ~np.isnan(pv)
        if known.all():  # the same sums as where NaN gives 0
            total, secs = np.add.reduceat(pv * d, starts), seconds
        else:
            total = np.add.reduceat(np.where(known, pv * d, 0.0), starts)
            secs = np.add.reduceat(np.where(known, d, 0.0), starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(secs > 0, total / np.where(secs > 0, secs, 1.0), np.nan)
        return means, secs, total

    util, _, _ = mean("util_pct")
    sm, _, _ = mean("sm_active_pct")
    power, power_s, energy_j = mean("power_w")  # Σ power × seconds: joules
    energy_j[power_s <= 0] = np.nan
    mem = s.fields.get("mem_used_gib")
    peak = (
        np.fmax.reduceat(mem[picked], starts) if mem is not None else np.full(len(starts), np.nan)
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
    return _rows(columns, run_id=run_id, gpu=s.info.uuid, rows=rows)


def _minute_of(t: np.ndarray) -> np.ndarray:
    """``t // 60`` (floats): the floor of each exact quotient, as numpy's ``floor_divide``
    gives it, in a third of its time (no ``fmod`` a value): the rounded quotient's floor is
    it or one more, and ``q × 60`` (exact: an integer under 2**53) says which."""
    q = np.floor(t / 60.0)
    q -= q * 60.0 > t
    return q


@functools.lru_cache(maxsize=1 << 16)
def _minute_start(minute: int) -> datetime:
    """The UTC start of an epoch minute: one datetime for each minute, whatever GPU's row."""
    return datetime.fromtimestamp(minute * 60, UTC)


def _optional(values: np.ndarray) -> list[float | None]:
    """The values as Python floats, None for NaN."""
    out: list[float | None] = values.tolist()
    for i in np.flatnonzero(np.isnan(values)).tolist():
        out[i] = None
    return out


RowValues = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""One GPU's minute rows' covered seconds, utilization, SM activity, energy (kWh) and peak
memory as float64 arrays, each value the row's own (NaN where the row holds None)."""


def _rows(
    columns: list[np.ndarray], *, run_id: str, gpu: str, rows: list[MinuteSample]
) -> tuple[list[int], list[float | None], list[float], RowValues]:
    """The minute rows of one GPU's columns (epoch minute, covered seconds, utilization, SM
    activity, peak memory, power, joules), appended to ``rows``; and each row's epoch minute,
    utilization and covered seconds, and its values (:data:`RowValues`)."""
    at: list[int] = columns[0].tolist()
    seconds = columns[1]
    covered: list[float] = seconds.tolist()
    # Python's round, as the sampler's; a whole number of seconds (most rows) is itself
    for i in np.flatnonzero(seconds != np.floor(seconds)).tolist():
        covered[i] = round(covered[i], 3)
    peak = columns[4]
    with np.errstate(invalid="ignore"):
        floored = np.where(peak > 0.0, peak, 0.0)  # max(0.0, peak), as the sampler's
    floored[np.isnan(peak)] = np.nan
    utils, sms, peaks, powers = (
        _optional(c) for c in (columns[2], columns[3], floored, columns[5])
    )
    # the same division, a value at a time or all at once
    kwh: np.ndarray = j_to_kwh(columns[6])  # type: ignore[arg-type, assignment]
    energies = _optional(kwh)
    starts = map(_minute_start, at)
    rows.extend(
        map(
            _sample,
            zip(
                repeat(run_id, len(at)),
                starts,
                repeat(gpu, len(at)),
                covered,
                utils,
                sms,
                peaks,
                powers,
                energies,
                strict=True,
            ),
        )
    )
    values = (np.array(covered, dtype=np.float64), columns[2], columns[3], kwh, floored)
    return at, utils, covered, values


_FIELDS = tuple(f.name for f in dataclasses.fields(MinuteSample))


def _sample(values: tuple[Any, ...]) -> MinuteSample:
    """A minute row of its fields' values in :class:`MinuteSample`'s order, made without the
    frozen dataclass's ``__init__`` (a call of ``object.__setattr__`` a field: a third of the
    rows' making): the same object, equal and alike."""
    row = _new(MinuteSample)
    row.__dict__.update(zip(_FIELDS, values, strict=True))
    return row


_new = object.__new__
