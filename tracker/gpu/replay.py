"""A replay backend: plays back an nvidia-smi CSV log as if the GPUs were live.

The log is what ``nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,
memory.total,power.draw --format=csv[,nounits] -l 1`` writes. ``[N/A]`` (or any ``[…]``) cells
are missing values. The log's timeline starts when the backend opens and repeats when it ends,
so a long training run keeps getting representative readings.
"""

from __future__ import annotations

import bisect
import csv
import re
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from tracker.gpu.base import BackendError, GpuInfo, GpuReading
from tracker.units import mib_to_gib

# nvidia-smi header → (GpuReading field, unit suffix the value may carry)
_COLUMNS: dict[str, str] = {
    "utilization.gpu": "util_pct",
    "memory.used": "mem_used_gib",
    "memory.total": "mem_total_gib",
    "power.draw": "power_w",
    "power.draw.instant": "power_w",
    "clocks.sm": "sm_clock_mhz",
    "clocks.current.sm": "sm_clock_mhz",
    "temperature.gpu": "temp_c",
}
_UNIT_RE = re.compile(r"^\s*([-+0-9.eE]+)\s*(%|MiB|W|MHz|C)?\s*$")
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f",
                 "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True, kw_only=True)
class _Row:
    t: float
    """Seconds since the log's first timestamp."""
    reading: GpuReading


def _parse_time(text: str) -> datetime:
    for fmt in _TIME_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    raise ValueError(f"bad timestamp {text.strip()!r}")


def _parse_value(field: str, text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("["):
        return None
    m = _UNIT_RE.match(text)
    if m is None:
        raise ValueError(f"bad {field} value {text!r}")
    value = float(m.group(1))
    if field.startswith("mem_"):
        value = mib_to_gib(value)
    return value


def read_log(path: str | Path) -> tuple[list[GpuInfo], dict[str, list[tuple[datetime, GpuReading]]]]:
    """An nvidia-smi CSV log's GPUs (by index) and each one's readings at the log's own naive
    timestamps, in file order. Raises :class:`BackendError` naming the file and line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BackendError(f"cannot read {p}: {getattr(e, 'strerror', None) or e}") from None
    reader = csv.reader(text.splitlines())
    try:
        header = [h.strip().split(" [")[0] for h in next(reader)]
    except StopIteration:
        raise BackendError(f"{p}: empty nvidia-smi log") from None
    if "timestamp" not in header or "utilization.gpu" not in header:
        raise BackendError(f"{p}:1: not an nvidia-smi --format=csv log: need columns "
                           f"'timestamp' and 'utilization.gpu', got {', '.join(header)}")
    if "uuid" not in header and "index" not in header:
        raise BackendError(f"{p}:1: need a 'uuid' or 'index' column")
    col = {name: i for i, name in enumerate(header)}
    infos: dict[str, GpuInfo] = {}
    rows: dict[str, list[tuple[datetime, GpuReading]]] = {}
    for lineno, cells in enumerate(reader, start=2):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise BackendError(f"{p}:{lineno}: expected {len(header)} cells, got {len(cells)}")
        try:
            ts = _parse_time(cells[col["timestamp"]])
            values = {f: _parse_value(f, cells[col[h]]) for h, f in _COLUMNS.items() if h in col}
            index = int(cells[col["index"]]) if "index" in col else len(infos)
        except ValueError as e:
            raise BackendError(f"{p}:{lineno}: {e}") from None
        uuid = cells[col["uuid"]].strip() if "uuid" in col else f"GPU-replay-{index}"
        if uuid not in infos:
            name = cells[col["name"]].strip() if "name" in col else "unknown"
            infos[uuid] = GpuInfo(index=index, uuid=uuid, name=name,
                                  mem_total_gib=values.get("mem_total_gib"))
            rows[uuid] = []
        rows[uuid].append((ts, GpuReading(uuid=uuid, **values)))
    if not infos:
        raise BackendError(f"{p}: nvidia-smi log has a header but no rows")
    return sorted(infos.values(), key=lambda g: g.index), rows


def parse_log(path: str | Path) -> tuple[list[GpuInfo], dict[str, list[_Row]]]:
    """An nvidia-smi CSV log as :class:`ReplayBackend` plays it: times in seconds since its
    first timestamp. Raises :class:`BackendError` naming the file and line."""
    infos, readings = read_log(path)
    t0 = min(series[0][0] for series in readings.values())
    rows = {uuid: [_Row(t=(ts - t0).total_seconds(), reading=r) for ts, r in series]
            for uuid, series in readings.items()}
    for uuid, series in rows.items():
        if any(b.t < a.t for a, b in pairwise(series)):
            raise BackendError(f"{path}: timestamps of GPU {uuid} go backwards")
    return infos, rows


class ReplayBackend:
    """Plays back ``path``; a reading is the mean of the log's rows since the previous reading
    (or the latest row when none fell in between)."""

    name = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._rows: dict[str, list[_Row]] = {}
        self._times: dict[str, list[float]] = {}
        self._t0: float | None = None
        self._prev: float = 0.0
        self._period = 0.0

    def open(self, now: float) -> list[GpuInfo]:
        infos, self._rows = parse_log(self.path)
        self._times = {u: [r.t for r in rs] for u, rs in self._rows.items()}
        last = max(ts[-1] for ts in self._times.values())
        # One more sampling step past the last row, so the loop does not double-count it.
        steps = [b - a for ts in self._times.values() for a, b in pairwise(ts)]
        self._period = last + (min(s for s in steps if s > 0) if any(steps) else 1.0)
        self._t0 = now
        self._prev = -1.0
        return infos

    def _window(self, uuid: str, a: float, b: float) -> list[GpuReading]:
        """Rows with a < t ≤ b (log time, already wrapped into one period)."""
        ts = self._times[uuid]
        lo, hi = bisect.bisect_right(ts, a), bisect.bisect_right(ts, b)
        return [r.reading for r in self._rows[uuid][lo:hi]]

    def _latest(self, uuid: str, b: float) -> GpuReading:
        """The last row at or before log time ``b`` (the first row when none is)."""
        hi = bisect.bisect_right(self._times[uuid], b)
        return self._rows[uuid][max(hi - 1, 0)].reading

    def read(self, now: float) -> list[GpuReading]:
        if self._t0 is None:
            raise BackendError("replay backend read before open")
        t = now - self._t0
        period = self._period
        if self._prev < 0 or t - self._prev >= period:
            spans = [(-1.0, t % period if self._prev < 0 else period)]
        else:
            a, b = self._prev % period, t % period
            spans = [(a, b)] if b >= a else [(a, period), (-1.0, b)]
        self._prev = t
        out = []
        for uuid in self._rows:
            picked = [r for lo, hi in spans for r in self._window(uuid, lo, hi)]
            out.append(_mean_reading(uuid, picked or [self._latest(uuid, spans[-1][1])]))
        return out

    def close(self) -> None:
        self._t0 = None


def _mean_reading(uuid: str, readings: list[GpuReading]) -> GpuReading:
    def mean(field: str) -> float | None:
        vals = [v for r in readings if (v := getattr(r, field)) is not None]
        return sum(vals) / len(vals) if vals else None

    last = readings[-1]
    return GpuReading(uuid=uuid, util_pct=mean("util_pct"),
                      mem_used_gib=max((r.mem_used_gib for r in readings
                                        if r.mem_used_gib is not None), default=None),
                      mem_total_gib=last.mem_total_gib, power_w=mean("power_w"),
                      sm_clock_mhz=mean("sm_clock_mhz"), temp_c=last.temp_c)
