"""Rollups: per (run, GPU, UTC hour), the sums the weekly report needs, kept as minute samples
are written, so that a report reads runs × hours rather than minutes.

A rollup holds the seconds its usable minutes cover, the seconds with a value and Σ value ×
seconds for NVML utilization and for SM activity, the seconds (and Σ value × seconds) inside
idle stretches by each basis' idle rule (:data:`ROLLUP_RULES`), energy, the memory peak, and
how many rows were left out or read as unknown. The idle rule looks at consecutive rows, so a
minute's idleness may change when rows arrive up to ``window - 1`` rows later:
:meth:`tracker.store.RunStore.upsert_samples` adds rows appended after every stored row of
their series to the stored rollups (:func:`appended`, the live writer's every minute: the rows
of the last window read, not the hour), and recomputes the hours that other rows can reach,
from the rows around them (:func:`tracker.store.rollup_sql.refresh`). Everything here is plain
Python (the tracker does not depend on numpy); :func:`tracker.cost.idle_flags` is the idle
rule (seconds-weighted, as live and in the report).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from itertools import compress
from typing import Any, cast

from tracker.cost import SM_ACTIVE_THRESHOLDS, Thresholds, idle_flags
from tracker.record import MinuteSample

HOUR_MIN = 60
MISSHAPED_HOUR = -1
"""The hour of a rollup counting rows whose minute is not shaped like a time (SQLite text)."""

_DEFAULT = Thresholds()
ROLLUP_RULES: dict[str, tuple[float, int]] = {
    "util": (_DEFAULT.idle_pct, _DEFAULT.idle_window_min),
    "sm_active": (SM_ACTIVE_THRESHOLDS.idle_pct, SM_ACTIVE_THRESHOLDS.idle_window_min),
}
"""The idle rule (threshold %, window in rows) each basis' idle seconds are kept by: the
defaults. A report judged by other idle thresholds reads the minute rows instead."""

CONTEXT_ROWS = max(window for _, window in ROLLUP_RULES.values()) - 1
"""How far (in rows) one row's idleness reaches, and so how many rows around a recomputed span
are read."""


@dataclasses.dataclass(kw_only=True)
class Rollup:
    """One GPU of one run over one UTC hour (``hour`` = epoch seconds // 3600)."""

    run_id: str
    gpu: str
    hour: int
    minutes: int = 0
    covered_s: float = 0.0
    util_known_s: float = 0.0
    util_s: float = 0.0
    """Σ util_pct × seconds over the seconds with a value."""
    util_idle_s: float = 0.0
    util_idle_value_s: float = 0.0
    sm_known_s: float = 0.0
    sm_s: float = 0.0
    sm_idle_s: float = 0.0
    sm_idle_value_s: float = 0.0
    energy_kwh: float | None = None
    mem_peak_gib: float | None = None
    dropped: int = 0
    """Rows left out: ``covered_s`` not a number of seconds in [0, 60]."""
    bad_util: int = 0
    """Rows counted with utilization unknown: a value that is not a number in 0–100."""
    bad_sm: int = 0
    bad_minutes: int = 0
    """Rows whose minute is not shaped like a time (only in the :data:`MISSHAPED_HOUR` row)."""

    def as_row(self) -> dict[str, Any]:
        return dict(zip(COLUMNS, _values(self), strict=True))


COLUMNS = tuple(f.name for f in dataclasses.fields(Rollup))
_values = operator.attrgetter(*COLUMNS)


def _number(raw: Any, low: float, high: float) -> float | None:
    """``raw`` as a finite number in [low, high], or None (text, bool, inf, NaN, out of range)."""
    if type(raw) is float:  # the common case, at once: NaN fails both comparisons
        return raw if low <= raw <= high and raw != math.inf else None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    x = float(raw)
    return x if math.isfinite(x) and low <= x <= high else None


def epoch_minute(moment: datetime) -> int:
    return int(moment.timestamp()) // 60


MinuteRow = tuple[Any, Any, Any, Any, Any, Any]
"""``(minute, covered_s, util_pct, sm_active_pct, energy_kwh, mem_used_gib)`` as read; minute a
datetime, or None when it is not shaped like a time."""


def rollups_of(
    run_id: str, gpu: str, rows: Iterable[MinuteRow], *, from_hour: int | None = None
) -> list[Rollup]:
    """The rollups of one GPU's rows (in minute order), from ``from_hour`` on (None: all, and
    the :data:`MISSHAPED_HOUR` row when any minute is not a time). Rows before ``from_hour``
    are context: the idle windows reaching into it."""
    minutes: list[int] = []
    covered: list[float] = []
    utils: list[float | None] = []
    sms: list[float | None] = []
    extra: list[tuple[float | None, float | None]] = []
    out: dict[int, Rollup] = {}

    def at(hour: int) -> Rollup:
        if hour not in out:
            out[hour] = Rollup(run_id=run_id, gpu=gpu, hour=hour)
        return out[hour]

    for minute, c, u, sm, energy, mem in rows:
        if minute is None:
            if from_hour is None:
                at(MISSHAPED_HOUR).bad_minutes += 1
            continue
        m = epoch_minute(minute)
        seconds = _number(c, 0.0, 60.0)
        if seconds is None:
            if from_hour is None or m // HOUR_MIN >= from_hour:
                at(m // HOUR_MIN).dropped += 1
            continue
        minutes.append(m)
        covered.append(seconds)
        utils.append(_number(u, 0.0, 100.0))
        sms.append(_number(sm, 0.0, 100.0))
        extra.append((_number(energy, 0.0, math.inf), _number(mem, 0.0, math.inf)))
        if from_hour is None or m // HOUR_MIN >= from_hour:
            r = at(m // HOUR_MIN)
            r.bad_util += u is not None and utils[-1] is None
            r.bad_sm += sm is not None and sms[-1] is None
    util_pct, util_window = ROLLUP_RULES["util"]
    sm_pct, sm_window = ROLLUP_RULES["sm_active"]
    idle_util = idle_flags(
        utils, covered, threshold_pct=util_pct, window=util_window, minutes=minutes
    )
    idle_sm = idle_flags(sms, covered, threshold_pct=sm_pct, window=sm_window, minutes=minutes)
    for i, m in enumerate(minutes):
        hour = m // HOUR_MIN
        if from_hour is not None and hour < from_hour:
            continue
        _add(at(hour), (covered[i], utils[i], sms[i], *extra[i]), idle_util[i], idle_sm[i])
    return [out[h] for h in sorted(out)]


def _add(
    r: Rollup,
    values: tuple[float, float | None, float | None, float | None, float | None],
    idle_u: bool,
    idle_sm: bool,
) -> None:
    """Count one usable row in its hour's rollup ``r``: ``values`` its seconds, utilization,
    SM activity, energy and memory, checked; ``idle_u``, ``idle_sm`` its idleness by each."""
    s, u, sm, energy, mem = values
    r.minutes += 1
    r.covered_s += s
    if u is not None:
        r.util_known_s += s
        r.util_s += u * s
        if idle_u:
            r.util_idle_s += s
            r.util_idle_value_s += u * s
    if sm is not None:
        r.sm_known_s += s
        r.sm_s += sm * s
        if idle_sm:
            r.sm_idle_s += s
            r.sm_idle_value_s += sm * s
    if energy is not None:
        r.energy_kwh = (r.energy_kwh or 0.0) + energy
    if mem is not None:
        r.mem_peak_gib = max(r.mem_peak_gib or 0.0, mem)


def series_rollups(series: Mapping[tuple[str, str], list[MinuteRow]]) -> list[Rollup]:
    """The rollups of whole series, (run id, GPU) → its rows (sorted here by minute)."""
    out: list[Rollup] = []
    for (run_id, gpu), rows in series.items():
        rows.sort(key=lambda row: row[0])
        out += rollups_of(run_id, gpu, rows)
    return out


def sample_rollups(samples: Iterable[MinuteSample]) -> dict[str, list[Rollup]] | None:
    """Run id → the rollups of its minute samples, as the store computes them from the rows
    once it holds these (and no other rows of those runs; a later sample of the same run, GPU
    and minute wins): an import computes them where it reads, beside its other work. None when
    a value would read back from a database other than it is (a NaN, a bool, not a number)."""
    # (run id, GPU, minute, *values): a row's key is the first three, its MinuteRow the rest
    read = list(map(_KEYED_ROW, samples))
    if read:
        values = list(zip(*read, strict=True))[3:]
        for column in values:  # each checked in C: no value but None, an int, a float…
            if not _STORABLE.issuperset(map(type, column)):
                return None
            if any(map(operator.ne, column, column)):  # …that is not NaN (not itself)
                return None
        del values
    latest: dict[tuple[str, str, datetime], MinuteRow] = {}
    for row in read:
        latest[row[:3]] = row[2:]
    del read
    series: dict[tuple[str, str], list[MinuteRow]] = {}
    for (run_id, gpu, _), row in latest.items():
        series.setdefault((run_id, gpu), []).append(row)
    out: dict[str, list[Rollup]] = {}
    for r in series_rollups(series):
        out.setdefault(r.run_id, []).append(r)
    return out


_KEYED_ROW = operator.attrgetter(
    "run_id",
    "gpu",
    "minute",
    "covered_s",
    "util_pct",
    "sm_active_pct",
    "energy_kwh",
    "mem_used_gib",
)
_STORABLE = frozenset((float, int, type(None)))
"""The types of a value that reads back from every database as it is (not a bool)."""


WINDOW_MIN = max(window for _, window in ROLLUP_RULES.values())
"""The widest idle window, minutes: rows this far before an appended row are its context."""


def appended(
    run_id: str,
    gpu: str,
    context: Sequence[ContextRow],
    new: Sequence[MinuteRow],
    stored: Mapping[int, Rollup],
    *,
    deeper: Callable[[], Sequence[ContextRow]],
) -> list[Rollup]:
    """The rollups of one GPU's hours after ``new`` rows were appended to its series, from the
    rollups ``stored`` before (hour → rollup), equal to :func:`rollups_of` of the whole series.

    A row's idleness depends on the rows around it, so appending can make up to ``window - 1``
    rows before the new ones idle. The new rows' windows lie in the last ``window - 1`` rows
    and the new ones; a row they make idle was idle already when the window of the ``window``
    rows before the new ones is quiet, and otherwise the rows ``2 × (window - 1)`` minutes back
    decide it (``deeper()`` reads them; rarely, where a stretch turns idle). Each row is added
    to its hour in minute order, as :func:`rollups_of` adds them, so the sums are the same to
    the last bit.

    Args:
        context: The series' rows from :data:`WINDOW_MIN` minutes before the first new row's
            minute up to it, in minute order, checked (:data:`ContextRow`).
        new: The appended rows, every one after every stored row, in minute order.
        stored: The series' rollups of the hours from the context's on.
        deeper: Reads the series' rows from ``2 × (WINDOW_MIN - 1)`` minutes before the first
            new row's minute up to it.
    """
    rows = _usable_context(context)
    timed = [row for row in new if row[0] is not None]
    if not timed:
        return []
    first = epoch_minute(timed[0][0])
    fresh = _usable(new)
    out: dict[int, Rollup] = {}

    def at(hour: int) -> Rollup:
        if hour not in out:
            old = stored.get(hour)
            out[hour] = _copy(old) if old else Rollup(run_id=run_id, gpu=gpu, hour=hour)
        return out[hour]

    # the rows each window looks at, listed once for both bases (their windows are alike)
    spans: dict[tuple[str, int], _Span] = {}

    def span(kind: str, window: int) -> _Span:
        if (kind, window) not in spans:
            if kind == "new":  # the last window - 1 rows and the new ones
                part = _Span([row for row in rows if row[0] >= first - (window - 1)], fresh)
            elif kind == "before":  # the window rows before the new ones
                part = _Span([row for row in rows if row[0] >= first - window], [])
            else:
                part = _Span(_usable_context(deeper()), [])
            spans[(kind, window)] = part
        return spans[(kind, window)]

    new_flags: list[tuple[bool, ...]] = []
    flips: list[list[int]] = []  # per basis, the context rows turned idle
    # (minute, seconds, utilization, SM activity): the bases' values are columns 2 and 3,
    # in the order of ROLLUP_RULES (util, sm_active), as flips[0] and flips[1] below
    for column, (pct, window) in enumerate(ROLLUP_RULES.values(), start=2):
        tail = span("new", window)
        part = tail.flags(column, pct, window)
        new_flags.append(part[tail.context :])
        turned = list(compress(range(tail.context), part))
        for kind in ("before", "deeper"):
            if not turned:
                break
            back = span(kind, window)
            old = back.flags(column, pct, window)[back.context - tail.context :]
            turned = [i for i in turned if not old[i]]
        offset = len(rows) - tail.context
        flips.append([offset + i for i in turned])
    for i in sorted({*flips[0], *flips[1]}):
        m, s, u, sm = rows[i]
        r = at(m // HOUR_MIN)
        if i in flips[0] and u is not None:
            r.util_idle_s += s
            r.util_idle_value_s += u * s
        if i in flips[1] and sm is not None:
            r.sm_idle_s += s
            r.sm_idle_value_s += sm * s
    usable = iter(range(len(fresh)))
    for minute, c, u, sm, _, _ in timed:
        r = at(epoch_minute(minute) // HOUR_MIN)
        if _number(c, 0.0, 60.0) is None:
            r.dropped += 1
            continue
        k = next(usable)
        values = fresh[k][1:]
        r.bad_util += u is not None and values[1] is None
        r.bad_sm += sm is not None and values[2] is None
        _add(r, values, new_flags[0][k], new_flags[1][k])
    return [out[h] for h in sorted(out)]


def rollup_of(fields: Iterable[tuple[str, Any]]) -> Rollup:
    """A rollup of ``(field, value)`` pairs (every field), made without the dataclass's
    ``__init__`` of 19 arguments: a live minute makes one per GPU and hour it touches."""
    out = Rollup.__new__(Rollup)
    out.__dict__.update(fields)
    return out


def _copy(rollup: Rollup) -> Rollup:
    """A copy of ``rollup`` (its fields are numbers and text: nothing to copy deeper)."""
    return rollup_of(vars(rollup).items())


ContextRow = tuple[int | None, float | None, float | None, float | None]
"""``(epoch minute, covered_s, util_pct, sm_active_pct)`` of a stored row, checked as
:func:`rollups_of` checks them (:func:`_number`): None for a minute that is no time, a value
that is not a usable number."""

_Usable = tuple[int, float, float | None, float | None, float | None, float | None]


def _usable_context(
    rows: Iterable[ContextRow],
) -> list[tuple[int, float, float | None, float | None]]:
    """The rows :func:`rollups_of` counts: a minute that is a time, seconds in [0, 60]."""
    usable = [row for row in rows if row[0] is not None and row[1] is not None]
    return cast("list[tuple[int, float, float | None, float | None]]", usable)


def _usable(rows: Iterable[MinuteRow]) -> list[_Usable]:
    """The rows :func:`rollups_of` counts, their values checked: (epoch minute, seconds,
    utilization, SM activity, energy, memory)."""
    out: list[_Usable] = []
    for minute, c, u, sm, energy, mem in rows:
        if minute is None or (seconds := _number(c, 0.0, 60.0)) is None:
            continue
        out.append(
            (
                epoch_minute(minute),
                seconds,
                _number(u, 0.0, 100.0),
                _number(sm, 0.0, 100.0),
                _number(energy, 0.0, math.inf),
                _number(mem, 0.0, math.inf),
            )
        )
    return out


class _Span:
    """Checked rows in minute order (:func:`_usable_context` ones, then any :func:`_usable`
    ones: ``context`` and ``fresh``), their minutes and seconds listed once for the idle rule
    by each basis."""

    def __init__(self, context: Sequence[tuple[Any, ...]], fresh: Sequence[tuple[Any, ...]]):
        self.rows = [*context, *fresh]
        self.context = len(context)
        minutes = tuple(map(_COLUMN[0], self.rows))
        # minute after minute: the rule's rows follow one another, whatever the minutes, and
        # so the span of a steady series is the one the minute before looked at (two rows of
        # one minute, SQLite text that differs, are no such span)
        consecutive = not minutes or minutes == tuple(range(minutes[0], minutes[0] + len(minutes)))
        self.minutes = None if consecutive else minutes
        self.seconds = tuple(map(_COLUMN[1], self.rows))

    def flags(self, column: int, pct: float, window: int) -> tuple[bool, ...]:
        """The idle rule over the rows by the value in ``column`` (2: utilization, 3: SM
        activity)."""
        values = tuple(map(_COLUMN[column], self.rows))
        return _span_flags(values, self.seconds, self.minutes, pct, window)


_COLUMN = [operator.itemgetter(i) for i in range(4)]


@functools.lru_cache(maxsize=1024)
def _span_flags(
    values: tuple[float | None, ...],
    seconds: tuple[float, ...],
    minutes: tuple[int, ...] | None,
    pct: float,
    window: int,
) -> tuple[bool, ...]:
    """:func:`tracker.cost.idle_flags` of one span, kept for the next minute: the window
    before a live write's new rows is the span the write of the minute before looked at, so
    that an idle series costs the rule once a minute, not twice, and the series of GPUs that
    read alike (idle at 0%) once for all of them; a steady series' span (minute after minute,
    ``minutes`` None) reads alike minute after minute. The rule is a function of these values
    alone: a result is used again only for equal ones."""
    flags = idle_flags(values, seconds, threshold_pct=pct, window=window, minutes=minutes)
    return tuple(flags)
