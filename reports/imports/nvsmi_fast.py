"""The nvidia-smi import of the common log, vectorized: numpy and pandas' C parser instead of a
sampler call per reading, with results equal to :mod:`reports.imports.play`'s sampler path
(``tests/reports/test_import_nvsmi_fast.py`` holds them equal on random logs).

It takes what ``nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,
memory.total,power.draw,clocks.sm --format=csv[,nounits] -l N`` writes, in UTC: the timestamp
as ``2026/11/23 10:00:00.000``, no quoting, no repeated header, no line over 64 KiB, every value
a number in its column's unit and range or a ``[N/A]``-style cell. For anything else (another
column or time format, a bad value, readings of a GPU that do not go forwards) :func:`parse`
answers None and the exact path reads the file, with its error naming the file and line.

The arithmetic is the sampler's (:class:`tracker.sampler.Sampler`): a reading covers the time
since the same GPU's previous one, split at whole minutes; after a gap it covers nothing; a
minute's mean is time-weighted, and a minute with no time shows the reading that opened it.
"""

from __future__ import annotations

import io
import math
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracker.cost import IdleDetector
from tracker.gpu.base import GpuInfo
from tracker.gpu.replay import COLUMNS as _NUMERIC
from tracker.record import MinuteSample
from tracker.sampler import HIST_BINS, GpuStats
from tracker.units import j_to_kwh

_TEXT = ("timestamp", "index", "uuid", "name")
_MISSING = ["[N/A]", "[Not Supported]", "[Unknown Error]", "[GPU is lost]", "[Insufficient Permissions]"]
_MAX_LINE = 65_536


@dataclass
class Series:
    """One GPU's readings: epoch seconds (UTC), file line numbers, fields by GpuReading name
    (NaN: missing)."""

    info: GpuInfo
    first: datetime
    """The first timestamp as the log wrote it (naive): the run id hashes it."""
    t: np.ndarray
    lines: np.ndarray
    fields: dict[str, np.ndarray]


def _text(values: pd.Index) -> bool:
    """Whether category values stayed the strings the file holds (pandas reads ``007`` as 7)."""
    return pd.api.types.is_object_dtype(values.dtype) or pd.api.types.is_string_dtype(
        values.dtype)


def _stamps_ok(texts: pd.Series) -> bool:
    """Every timestamp exactly ``YYYY/MM/DD HH:MM:SS.mmm`` (what nvidia-smi writes), minutes
    and seconds under 60: pandas would read ``now``, a 60th second or 7 fraction digits, which
    the exact path refuses."""
    chars = texts.to_numpy(dtype="U24").view(np.uint32).reshape(len(texts), 24)
    digits = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22]
    d = chars[:, digits]
    return bool(((d >= ord("0")) & (d <= ord("9"))).all()
                and (chars[:, [4, 7]] == ord("/")).all() and (chars[:, 10] == ord(" ")).all()
                and (chars[:, [13, 16]] == ord(":")).all() and (chars[:, 19] == ord(".")).all()
                and (chars[:, 23] == 0).all() and (chars[:, [14, 17]] <= ord("5")).all())


def parse(path: Path) -> list[Series] | None:
    """The log's GPUs, in the exact path's order (by index, then first appearance), if it is
    the common log; else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    data = data.removeprefix(b"\xef\xbb\xbf")
    if not data or b"\r" in data or b'"' in data:
        return None
    if not data.endswith(b"\n"):
        data += b"\n"
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    if np.diff(ends, prepend=-1).max() > _MAX_LINE:
        return None  # a line the exact path refuses as too long
    head, _, body = data.partition(b"\n")
    del data
    try:
        raw = head.decode()
    except UnicodeDecodeError:
        return None
    names = [h.strip().split(" [")[0] for h in raw.split(",")]
    if (len(set(names)) != len(names) or not set(names) <= {*_TEXT, *_NUMERIC}
            or not {"timestamp", "uuid", "utilization.gpu"} <= set(names) or head in body):
        return None  # another log, or a repeated header (a log appended to)
    lines = len(ends) - 1
    if body.count(b",") != lines * (len(names) - 1):
        return None  # a row of another length
    numeric = [n for n in _NUMERIC if n in names]  # the exact path's order: a later one wins
    units = "[" in raw
    columns = list(names)
    if units:
        # each value's unit into a column of its own ("50 %" → "50,%"; "[N/A]" → "[N/A],?"),
        # checked below: a unit in the wrong column, or a cell without one, is the exact path's
        columns = [c for n in names for c in ((n, f"{n}#unit") if n in _NUMERIC else (n,))]
        tails = {(f" {_NUMERIC[n][1]}".encode(), b"\n" if i == len(names) - 1 else b",")
                 for i, n in enumerate(names) if n in _NUMERIC}
        for token, end in tails:
            body = body.replace(token + end, b"," + token[1:] + end)
        if b"[" in body:
            for missing in _MISSING:
                body = body.replace(missing.encode(), missing.encode() + b",?")
    if b" ," in body or b" \n" in body:
        return None  # a cell with trailing blanks: the exact path strips them
    if body.count(b",") != lines * (len(columns) - 1):
        return None  # a unit or [N/A] out of place
    try:
        frame = pd.read_csv(
            io.BytesIO(body), header=None, names=columns, skipinitialspace=True,
            na_values={n: _MISSING for n in numeric}, keep_default_na=False,
            skip_blank_lines=False, engine="c",
            dtype={n: (np.float64 if n in numeric else str if n == "timestamp"
                       else "category") for n in columns})
        del body
        if len(frame) != lines or frame["timestamp"].isna().any():
            return None
        if not _stamps_ok(frame["timestamp"]):
            return None
        stamps = pd.to_datetime(frame["timestamp"], format="%Y/%m/%d %H:%M:%S.%f")
    except (ValueError, TypeError, OverflowError):
        return None
    if units:
        for n in numeric:
            unit = frame[f"{n}#unit"].cat
            known = [i for i, u in enumerate(unit.categories) if u == _NUMERIC[n][1]]
            unknown = [i for i, u in enumerate(unit.categories) if u == "?"]
            if len(known) + len(unknown) != len(unit.categories):
                return None
            codes = unit.codes.to_numpy()
            missing = frame[n].isna().to_numpy()
            if not np.array_equal(np.isin(codes, unknown), missing):
                return None
    years = stamps.dt.year
    if not ((years >= 1970) & (years <= 9998)).all():
        return None
    # whole microseconds over 1e6, exact as datetime.timestamp() computes it: the same floats
    t = (stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64) // 1000).astype(np.float64) / 1e6
    # categories are read as what they look like: text columns must stay text, as written
    if any(c in frame and not _text(frame[c].cat.categories) for c in ("uuid", "name")):
        return None
    uuid_codes = frame["uuid"].cat.codes.to_numpy()
    uuid_names = list(frame["uuid"].cat.categories)
    if (uuid_codes < 0).any() or any(not u or u != u.strip() or u.startswith("[")
                                     for u in uuid_names):
        return None  # a row without a GPU uuid, or one the exact path strips
    fields: dict[str, np.ndarray] = {}
    for n in numeric:
        field, unit, lo, hi = _NUMERIC[n]
        v = frame[n].to_numpy(dtype=np.float64)
        ok = np.isnan(v) | ((v >= lo) & (v <= hi) & np.isfinite(v))
        if not ok.all():
            return None
        fields[field] = v / 1024.0 if unit == "MiB" else v
    index: np.ndarray | None = None
    if "index" in frame:
        index_codes = frame["index"].cat.codes.to_numpy()
        cells = frame["index"].cat.categories
        if not (_text(cells) or pd.api.types.is_integer_dtype(cells.dtype)):
            return None  # 3.0, 1e3, True: cells the exact path's int() refuses
        try:  # int() as the exact path reads every cell, on each distinct cell once
            values = [int(x) for x in cells]
        except (ValueError, TypeError):
            return None
        if (index_codes < 0).any():
            return None
        index = np.asarray(values, dtype=np.int64)[index_codes]
    gpu_names = frame.get("name")
    # each GPU's rows in file order
    by_gpu = np.argsort(uuid_codes, kind="stable")
    counts = np.bincount(uuid_codes, minlength=len(uuid_names))
    groups = [g for g in np.split(by_gpu, np.cumsum(counts)[:-1]) if len(g)]
    groups.sort(key=lambda g: int(g[0]))  # first appearance
    out: list[Series] = []
    for rows in groups:
        first = int(rows[0])
        ts = t[rows]
        if len(ts) > 1 and not (np.diff(ts) > 0).all():
            return None  # a reading at the same time or back: the exact path names the line
        per = {f: v[rows] for f, v in fields.items()}
        mem_total = per.get("mem_total_gib")
        info = GpuInfo(index=int(index[first]) if index is not None else len(out),
                       uuid=str(uuid_names[uuid_codes[first]]),
                       name=(str(gpu_names.iloc[first]).strip() if gpu_names is not None
                             else "unknown"),
                       mem_total_gib=(None if mem_total is None or np.isnan(mem_total[0])
                                      else float(mem_total[0])))
        out.append(Series(info, stamps.iloc[first].to_pydatetime(), ts, rows + 2, per))
    out.sort(key=lambda s: s.info.index)  # the exact path's order; stable: ties by appearance
    return out


def median_step(s: Series) -> float:
    """The median interval between the GPU's readings (0 for one reading), as
    :func:`statistics.median` gives it."""
    return statistics.median(np.diff(s.t).tolist()) if len(s.t) > 1 else 0.0


def _none(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


class Played:
    """What :func:`play` computed for one GPU, shaped as the sampler's results that
    :func:`reports.imports.play.run_record` reads (``run[uuid]``, ``idle_of_run()``)."""

    def __init__(self, uuid: str, stats: GpuStats, idle: IdleDetector) -> None:
        self.run = {uuid: stats}
        self._idle = idle

    def idle_of_run(self) -> list[tuple[float, float]]:
        return [(self._idle.idle_s, self._idle.idle_util_s)]


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


def play(s: Series, *, run_id: str, gap_s: float, idle_pct: float, idle_window_min: int,
         rows: list[MinuteSample]) -> tuple[Played, float, float]:
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
    idle = IdleDetector(idle_window_min, idle_pct)
    _minutes(s, dt, run_id=run_id, idle=idle, rows=rows)
    return Played(s.info.uuid, stats, idle), float(t[0]), float(t[-1])


def _minutes(s: Series, dt: np.ndarray, *, run_id: str, idle: IdleDetector,
             rows: list[MinuteSample]) -> None:
    """The minute rows: each covering reading split at whole minutes, summed per minute."""
    t = s.t
    covering = np.flatnonzero(dt > 0)
    start_minute = int(t[0] // 60)
    if len(covering) == 0:
        return
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
    energy_j = (np.add.reduceat(np.where(np.isnan(pw[reading]), 0.0, pw[reading] * d), starts)
                if pw is not None else np.zeros(len(starts)))
    mem = s.fields.get("mem_used_gib")
    peak = (np.fmax.reduceat(mem[reading], starts) if mem is not None
            else np.full(len(starts), np.nan))
    first = {f: v[0] for f, v in s.fields.items()}  # the start reading: held by its minute
    if minutes[0] == start_minute:
        for arr, f in ((util, "util_pct"), (sm, "sm_active_pct"), (power, "power_w")):
            if np.isnan(arr[0]) and f in first:
                arr[0] = first[f]
        if mem is not None and not np.isnan(first["mem_used_gib"]):
            peak[0] = np.fmax(peak[0], first["mem_used_gib"])
    else:  # the start minute had no time before the next reading came
        _row(rows, idle, run_id, s.info.uuid, start_minute, seconds=0.0,
             util=first.get("util_pct"), sm=first.get("sm_active_pct"),
             mem=first.get("mem_used_gib"), power=first.get("power_w"), energy_j=None)
    for i, m in enumerate(minutes.tolist()):
        e = energy_j[i] if power_s[i] > 0 else math.nan
        _row(rows, idle, run_id, s.info.uuid, m, seconds=float(seconds[i]), util=util[i],
             sm=sm[i], mem=peak[i], power=power[i], energy_j=e)


def _row(rows: list[MinuteSample], idle: IdleDetector, run_id: str, uuid: str, minute: int, *,
         seconds: float, util: Any, sm: Any, mem: Any, power: Any, energy_j: Any) -> None:
    u = None if util is None else _none(util)
    covered = round(seconds, 3)
    peak = None if mem is None or math.isnan(mem) else max(0.0, float(mem))
    e = None if energy_j is None or math.isnan(energy_j) else j_to_kwh(float(energy_j))
    rows.append(MinuteSample(
        run_id=run_id, minute=datetime.fromtimestamp(minute * 60, UTC), gpu=uuid,
        covered_s=covered, util_pct=u, sm_active_pct=None if sm is None else _none(sm),
        mem_used_gib=peak, power_w=None if power is None else _none(power), energy_kwh=e))
    idle.add_minute(u, covered, minute)
