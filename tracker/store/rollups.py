"""Rollups: per (run, GPU, UTC hour), the sums the weekly report needs, kept as minute samples
are written, so that a report reads runs × hours rather than minutes.

A rollup holds the seconds its usable minutes cover, the seconds with a value and Σ value ×
seconds for NVML utilization and for SM activity, the seconds (and Σ value × seconds) inside
idle stretches by each basis' idle rule (:data:`ROLLUP_RULES`), energy, the memory peak, and
how many rows were left out or read as unknown. The idle rule looks at consecutive rows, so a
minute's idleness may change when rows arrive up to ``window - 1`` rows later:
:meth:`tracker.store.RunStore.upsert_samples` recomputes the hours those rows can reach, from
the rows around them (:func:`tracker.store.rollup_sql.refresh`). Everything here is plain
Python (the tracker does not depend on numpy); :func:`tracker.cost.idle_flags` is the idle
rule (seconds-weighted, as live and in the report).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

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
        return dataclasses.asdict(self)


COLUMNS = tuple(f.name for f in dataclasses.fields(Rollup))


def _number(raw: Any, low: float, high: float) -> float | None:
    """``raw`` as a finite number in [low, high], or None (text, bool, inf, NaN, out of range)."""
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
        r, s, u, sm = at(hour), covered[i], utils[i], sms[i]
        r.minutes += 1
        r.covered_s += s
        if u is not None:
            r.util_known_s += s
            r.util_s += u * s
            if idle_util[i]:
                r.util_idle_s += s
                r.util_idle_value_s += u * s
        if sm is not None:
            r.sm_known_s += s
            r.sm_s += sm * s
            if idle_sm[i]:
                r.sm_idle_s += s
                r.sm_idle_value_s += sm * s
        energy, mem = extra[i]
        if energy is not None:
            r.energy_kwh = (r.energy_kwh or 0.0) + energy
        if mem is not None:
            r.mem_peak_gib = max(r.mem_peak_gib or 0.0, mem)
    return [out[h] for h in sorted(out)]


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
    latest: dict[tuple[str, str, datetime], MinuteRow] = {}
    for s in samples:
        values = (s.covered_s, s.util_pct, s.sm_active_pct, s.energy_kwh, s.mem_used_gib)
        for v in values:
            if v is not None and (type(v) is not float or math.isnan(v)) and (type(v) is not int):
                return None
        latest[(s.run_id, s.gpu, s.minute)] = (s.minute, *values)
    series: dict[tuple[str, str], list[MinuteRow]] = {}
    for (run_id, gpu, _), row in latest.items():
        series.setdefault((run_id, gpu), []).append(row)
    out: dict[str, list[Rollup]] = {}
    for r in series_rollups(series):
        out.setdefault(r.run_id, []).append(r)
    return out
