"""A replay backend: plays back an nvidia-smi CSV log as if the GPUs were live.

The log is what ``nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,
memory.total,power.draw --format=csv[,nounits] -l 1`` writes. ``[N/A]`` (or any ``[…]``) cells
are missing values. A script that writes the time itself (``echo "$(date +%s),$(nvidia-smi
--query-gpu=… --format=csv,noheader,nounits)"``) gives epoch seconds (or milliseconds,
microseconds, nanoseconds: the log's first such time's digits say which) in the timestamp
column. The log's timeline starts when the backend opens and repeats when it ends, so a long
training run keeps getting representative readings.
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

from tracker.gpu.base import BackendError, GpuInfo, GpuReading
from tracker.units import FIRST_YEAR, LAST_EPOCH_S, LAST_YEAR, mib_to_gib

# nvidia-smi header → (GpuReading field, the unit its values may carry, lowest, highest); a later
# column of the same field (power.draw.instant after power.draw) wins. The highest is past any
# GPU (the W&B and DCGM imports' bounds): a 1e300 W reading is a broken log, refused at its line,
# never a run whose figures the report must then leave out whole
COLUMNS: dict[str, tuple[str, str, float, float]] = {
    "utilization.gpu": ("util_pct", "%", 0.0, 100.0),
    "memory.used": ("mem_used_gib", "MiB", 0.0, 1e9),
    "memory.total": ("mem_total_gib", "MiB", 0.0, 1e9),
    "power.draw": ("power_w", "W", 0.0, 1e5),
    "power.draw.instant": ("power_w", "W", 0.0, 1e5),
    "clocks.sm": ("sm_clock_mhz", "MHz", 0.0, 1e5),
    "clocks.current.sm": ("sm_clock_mhz", "MHz", 0.0, 1e5),
    "temperature.gpu": ("temp_c", "C", -100.0, 300.0),
}
_UNIT_RE = re.compile(r"^\s*([-+0-9.eE]+)\s*(%|MiB|W|MHz|C)?\s*$")
_TIME_FORMATS = (
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
)
_MAX_LINE = 65_536
"""Longest line read: a longer one (a binary file, /dev/zero) is an error, not a memory hog."""
_EPOCH = re.compile(r"^(\d+)(\.\d*)?$")
_EPOCH_UNITS = ((11, 1.0), (14, 1e3), (17, 1e6), (19, 1e9))
"""An epoch time's unit by its whole digits: up to 11 seconds (to the year 5138), up to 14
milliseconds, 17 microseconds, 19 nanoseconds (each from 1973 on: ``date +%s%3N``,
``+%s%6N``, ``+%s%N``) → that many units a second. 20 digits or more is no time."""
_LONG_YEAR = re.compile(r"^\d{5,}[-/]\d")

Readings = dict[str, list[tuple[datetime, int, GpuReading]]]
"""GPU UUID → its readings in file order: (the log's naive timestamp, line number, reading)."""


@dataclass(frozen=True, kw_only=True)
class _Row:
    t: float
    """Seconds since the log's first timestamp."""
    reading: GpuReading


class NoTime(ValueError):
    """A timestamp that is no time a GPU was read: an epoch of 20 or more digits, a date
    outside the years :data:`tracker.units.FIRST_YEAR`-:data:`~tracker.units.LAST_YEAR`
    (``10000/01/01``: no ``datetime`` holds it). A reading at such a time is a bad row, not a bad file."""


def _years(ts: datetime, text: str) -> datetime:
    if not FIRST_YEAR <= ts.year <= LAST_YEAR:
        raise NoTime(f"{text[:40]!r} is outside the years {FIRST_YEAR}-{LAST_YEAR}")
    return ts


def _left_out(e: NoTime, no_time: list[int] | None, where: str, lineno: int) -> None:
    """A reading whose time is no time: its line number added to ``no_time``, or, where the
    caller takes none (``no_time`` None), an error of the file at ``where``."""
    if no_time is None:
        raise BackendError(f"{where}: {e}") from None
    no_time.append(lineno)


def _parse_time(text: str, per_s: float | None = None) -> tuple[datetime, float | None]:
    """A timestamp cell as a datetime, and the epoch unit for the log's next cells: a date as
    nvidia-smi writes it (naive: in the log's zone), or an epoch time (aware, UTC) in units of
    ``1 / per_s`` seconds, the unit the log's first epoch time set (None: this one's digits
    set it, :data:`_EPOCH_UNITS`). Raises :class:`NoTime` for a time that is none,
    ValueError for text that is no timestamp."""
    text = text.strip()
    if m := _EPOCH.match(text):
        if per_s is None:
            per_s = next((u for most, u in _EPOCH_UNITS if len(m[1]) <= most), None)
        seconds = float(text) / per_s if per_s is not None else math.inf
        if not 0 <= seconds < LAST_EPOCH_S:
            raise NoTime(f"epoch time {text[:40]!r} is outside the years {FIRST_YEAR}-{LAST_YEAR}")
        return datetime.fromtimestamp(seconds, UTC), per_s
    for fmt in _TIME_FORMATS:
        try:
            ts = datetime.strptime(text, fmt)
        except ValueError:
            continue
        return _years(ts, text), per_s
    if _LONG_YEAR.match(text):
        raise NoTime(f"{text[:40]!r} is outside the years {FIRST_YEAR}-{LAST_YEAR}")
    raise ValueError(f"bad timestamp {text!r}")


def _parse_value(column: str, text: str) -> float | None:
    """A cell of ``column`` as its :class:`GpuReading` value; ``[N/A]`` and other ``[…]`` cells
    (and empty ones) are None. ValueError for anything else that is not a number in the
    column's unit and range."""
    _, unit, lo, hi = COLUMNS[column]
    text = text.strip()
    if not text or text.startswith("["):
        return None
    m = _UNIT_RE.match(text)
    if m is None or (m.group(2) is not None and m.group(2) != unit):
        raise ValueError(f"bad {column} value {text!r} (a number in {unit})")
    value = float(m.group(1))
    if not (math.isfinite(value) and lo <= value <= hi):
        shown = f"from {lo:g} to {hi:g}" if hi < math.inf else f"at least {lo:g}"
        raise ValueError(f"bad {column} value {text!r} ({unit} {shown})")
    return mib_to_gib(value) if unit == "MiB" else value


def _rows(p: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each row of a CSV file, streamed; a UTF-8 BOM is skipped. Raises
    :class:`BackendError` naming the file and line for what is not UTF-8 CSV text."""
    try:
        with open(p, encoding="utf-8-sig", newline="") as f:

            def lines() -> Iterator[str]:
                while line := f.readline(_MAX_LINE):
                    if len(line) == _MAX_LINE and not line.endswith(("\n", "\r")):
                        raise csv.Error(f"a line of over {_MAX_LINE:,} characters")
                    yield line

            reader = csv.reader(lines())
            start = 1
            try:
                for cells in reader:
                    if reader.line_num > start:  # nvidia-smi writes no cell across lines
                        raise BackendError(
                            f"{p}:{start}: a quote opened on this line is not closed on it"
                        )
                    yield reader.line_num, cells
                    start = reader.line_num + 1
            except (csv.Error, UnicodeDecodeError) as e:
                what = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else str(e)
                if isinstance(e, csv.Error) and "end of data" in str(e):
                    what = "a quote opened on this line is not closed"
                    raise BackendError(f"{p}:{start}: {what}") from None
                raise BackendError(f"{p}:{reader.line_num + 1}: {what}") from None
    except OSError as e:
        raise BackendError(f"cannot read {p}: {e.strerror or e}") from None


IDENTITY = ("uuid", "pci.bus_id", "serial", "index")
"""Columns that tell a log's GPUs apart, the most stable first (``index`` can change between
boots); a log with none of them holds one GPU."""


def header_names(cells: Sequence[str]) -> list[str]:
    """nvidia-smi column names as :func:`read_log` keys them: ``utilization.gpu [%]`` →
    ``utilization.gpu``; ``gpu_uuid``/``gpu_serial``/``gpu_bus_id`` → ``uuid``/``serial``/
    ``pci.bus_id`` (nvidia-smi takes both spellings)."""
    aliases = {
        "gpu_uuid": "uuid",
        "gpu_serial": "serial",
        "gpu_bus_id": "pci.bus_id",
        "gpu_name": "name",
    }
    names = [c.strip().split(" [")[0].strip().lower() for c in cells]
    return [aliases.get(n, n) for n in names]


def read_log(
    path: str | Path,
    columns: Sequence[str] | None = None,
    *,
    no_time: list[int] | None = None,
) -> tuple[list[GpuInfo], Readings]:
    """An nvidia-smi CSV log's GPUs (by index) and each one's readings at the log's own
    timestamps (naive dates in the log's zone, or aware UTC times where the log holds epoch
    times), in file order. A repeated header line (a log appended to) is skipped. Raises
    :class:`BackendError` naming the file and line of the first bad row.

    Args:
        path: The log.
        columns: The ``--query-gpu`` list of a ``--format=csv,noheader`` log, as given to
            nvidia-smi; None: the log's first line is its header. With it, a first line that is
            not a reading (a header a script wrote) is skipped.
        no_time: Where given, the line numbers of readings whose time is no time
            (:class:`NoTime`) are added to it and those readings left out; None: such a
            reading is a :class:`BackendError` like any bad row.
    """
    p = Path(path)
    if columns is None and _is_dmon(p):
        return _read_dmon(p, no_time)
    rows = _rows(p)
    if columns is None:
        first = next(rows, None)
        if first is None:
            raise BackendError(f"{p}: empty nvidia-smi log")
        raw_header: list[str] | None = first[1]
        header = header_names(first[1])
        where = f"{p}:1"
    else:
        raw_header, header, where = None, header_names(columns), "--query-gpu"
    if "timestamp" not in header or "utilization.gpu" not in header:
        raise BackendError(
            f"{where}: not an nvidia-smi --format=csv log: need columns "
            f"'timestamp' and 'utilization.gpu', got {', '.join(header)[:300]}"
            + ("" if columns is not None else "; a log without a header: give --query-gpu LIST")
        )
    col = {name: i for i, name in enumerate(header)}
    ident = next((c for c in IDENTITY if c in col), None)
    infos: dict[str, GpuInfo] = {}
    readings: Readings = {}
    last_ts: datetime | None = None
    per_s: float | None = None  # the log's epoch unit, set by its first epoch time
    epoch: bool | None = None  # whether the log's times are epoch times (its first one's kind)
    for lineno, cells in rows:
        if not cells or all(not c.strip() for c in cells) or cells == raw_header:
            continue
        if header_names(cells) == header:
            continue  # the header again (a log appended to)
        if len(cells) != len(header):
            raise BackendError(f"{p}:{lineno}: expected {len(header)} cells, got {len(cells)}")
        try:
            ts, per_s = _parse_time(cells[col["timestamp"]], per_s)
        except NoTime as e:
            _left_out(e, no_time, f"{p}:{lineno}", lineno)
            continue
        except ValueError as e:
            if columns is not None and lineno == 1:
                continue  # a header of the script's own above noheader rows
            raise BackendError(f"{p}:{lineno}: {e}") from None
        if epoch is None:
            epoch = ts.tzinfo is not None
        elif epoch != (ts.tzinfo is not None):
            raise BackendError(
                f"{p}:{lineno}: a date among epoch times (or the other way round): one log, "
                "one kind of timestamp"
            )
        try:
            values = {COLUMNS[h][0]: _parse_value(h, cells[col[h]]) for h in COLUMNS if h in col}
            index = _index(cells[col["index"]]) if "index" in col else len(infos)
            uuid = _gpu_id(p, ident, cells[col[ident]] if ident else "")
        except ValueError as e:
            raise BackendError(f"{p}:{lineno}: {e}") from None
        if ident is None and ts == last_ts:
            raise BackendError(
                f"{p}:{lineno}: two readings at {ts} and no column telling GPUs apart: add "
                "index (or uuid) to --query-gpu, or log one GPU per file (nvidia-smi -i N)"
            )
        last_ts = ts
        if uuid not in infos:
            name = cells[col["name"]].strip() if "name" in col else "unknown"
            infos[uuid] = GpuInfo(
                index=index, uuid=uuid, name=name, mem_total_gib=values.get("mem_total_gib")
            )
            readings[uuid] = []
        readings[uuid].append((ts, lineno, GpuReading(uuid=uuid, **values)))
    if not infos and not no_time:  # rows whose time is no time: the caller counts them
        raise BackendError(f"{p}: nvidia-smi log has a header but no rows")
    return sorted(infos.values(), key=lambda g: g.index), readings


# nvidia-smi dmon column → (GpuReading field, its unit in the units line, to our unit)
_DMON: dict[str, tuple[str, str, float]] = {
    "sm": ("util_pct", "%", 1.0),
    "pwr": ("power_w", "W", 1.0),
    "fb": ("mem_used_gib", "MB", 1.0 / 1024),  # dmon's MB are MiB
    "gtemp": ("temp_c", "C", 1.0),
    "pclk": ("sm_clock_mhz", "MHz", 1.0),
}


def _is_dmon(p: Path) -> bool:
    """Whether ``p`` is ``nvidia-smi dmon`` output: it starts with a ``# gpu …`` or
    ``#Date Time gpu …`` header line. Only a regular file is looked into: a pipe is read once,
    by the reader."""
    if not p.is_file():
        return False
    try:
        with open(p, encoding="utf-8-sig", errors="replace") as f:
            head = f.readline(_MAX_LINE).split()
    except OSError:
        return False
    return bool(head) and head[0].startswith("#") and "gpu" in [h.lstrip("#") for h in head[:3]]


def _read_dmon(p: Path, no_time: list[int] | None) -> tuple[list[GpuInfo], Readings]:
    """``nvidia-smi dmon -o DT [-s pucm]`` output: whitespace columns under a ``#`` header
    (repeated every screenful), ``-`` for a value the GPU does not report. The ``sm`` column is
    the utilization NVML reports (``utilization.gpu``); ``fb`` the memory used, MiB. Without
    ``-o DT`` the rows have no time: an error saying so. A date outside the years
    :data:`tracker.units.FIRST_YEAR`-:data:`~tracker.units.LAST_YEAR` is :func:`read_log`'s
    ``no_time``."""
    infos: dict[str, GpuInfo] = {}
    readings: Readings = {}
    names: list[str] = []
    try:
        with open(p, encoding="utf-8-sig") as f:
            for lineno, line in enumerate(iter(lambda: f.readline(_MAX_LINE), ""), 1):
                cells = line.split()
                if not cells:
                    continue
                if cells[0].startswith("#"):
                    if not names:
                        names = [c.lstrip("#").lower() for c in cells if c.lstrip("#")]
                        if "date" not in names or "time" not in names:
                            raise BackendError(
                                f"{p}:{lineno}: nvidia-smi dmon output without times: record "
                                "it with -o DT (nvidia-smi dmon -o DT -s pucm)"
                            )
                    continue
                if len(cells) != len(names):
                    raise BackendError(
                        f"{p}:{lineno}: expected {len(names)} columns, got {len(cells)}"
                    )
                row = dict(zip(names, cells, strict=True))
                when = f"{row['date']} {row['time']}"
                try:
                    ts = _years(datetime.strptime(when, "%Y%m%d %H:%M:%S"), when)
                except NoTime as e:
                    _left_out(e, no_time, f"{p}:{lineno}", lineno)
                    continue
                except ValueError as e:
                    raise BackendError(f"{p}:{lineno}: {e}") from None
                try:
                    index = _index(row["gpu"])
                    values = {
                        field: None if row[col] == "-" else _dmon_value(col, row[col]) * scale
                        for col, (field, _, scale) in _DMON.items()
                        if col in row
                    }
                except ValueError as e:
                    raise BackendError(f"{p}:{lineno}: {e}") from None
                uuid = f"GPU-replay-{index}"
                if uuid not in infos:
                    infos[uuid] = GpuInfo(
                        index=index, uuid=uuid, name="unknown", mem_total_gib=None
                    )
                    readings[uuid] = []
                readings[uuid].append((ts, lineno, GpuReading(uuid=uuid, **values)))
    except UnicodeDecodeError:
        raise BackendError(f"{p}: not UTF-8 text") from None
    except OSError as e:
        raise BackendError(f"cannot read {p}: {e.strerror or e}") from None
    if not infos and not no_time:
        raise BackendError(f"{p}: nvidia-smi dmon output with a header but no rows")
    return sorted(infos.values(), key=lambda g: g.index), readings


def _dmon_value(column: str, text: str) -> float:
    value = float(text)
    highest = {"sm": 100.0, "pwr": 1e5}.get(column, 1e9)  # as the CSV columns' bounds
    if not (math.isfinite(value) and 0 <= value <= highest):
        raise ValueError(f"bad dmon {column} value {text!r} (from 0 to {highest:g})")
    return value


def _index(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"bad GPU index {text.strip()!r}") from None


def _gpu_id(p: Path, ident: str | None, text: str) -> str:
    """The GPU's id in the store: its UUID; a key made from the column that tells GPUs apart
    (``pci.bus_id``, ``serial``, ``index``); for a log without one, a key of the file."""
    value = text.strip()
    if ident is None:
        digest = hashlib.sha1(str(p.resolve()).encode()).hexdigest()[:12]
        return f"GPU-log-{digest}"
    if not value or value.startswith("["):
        raise ValueError(f"no GPU {ident} ({value!r})")
    if ident == "uuid":
        return value
    if ident == "index":
        return f"GPU-replay-{_index(value)}"
    return f"GPU-{ident}-{value}"


def parse_log(path: str | Path) -> tuple[list[GpuInfo], dict[str, list[_Row]]]:
    """An nvidia-smi CSV log as :class:`ReplayBackend` plays it: times in seconds since its
    first timestamp. Raises :class:`BackendError` naming the file and line."""
    infos, readings = read_log(path)
    t0 = min(series[0][0] for series in readings.values())
    rows = {
        uuid: [_Row(t=(ts - t0).total_seconds(), reading=r) for ts, _, r in series]
        for uuid, series in readings.items()
    }
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
    return GpuReading(
        uuid=uuid,
        util_pct=mean("util_pct"),
        mem_used_gib=max(
            (r.mem_used_gib for r in readings if r.mem_used_gib is not None), default=None
        ),
        mem_total_gib=last.mem_total_gib,
        power_w=mean("power_w"),
        sm_clock_mhz=mean("sm_clock_mhz"),
        temp_c=last.temp_c,
    )
