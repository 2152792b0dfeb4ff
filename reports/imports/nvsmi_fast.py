"""The nvidia-smi import of the common log, vectorized: numpy and pandas' C parser instead of a
sampler call per reading, with results equal to :mod:`reports.imports.play`'s sampler path
(``tests/reports/imports/test_import_nvsmi_fast.py`` holds them equal on random logs).

It takes what ``nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,
memory.total,power.draw,clocks.sm --format=csv[,nounits] -l N`` writes, in UTC: the timestamp
as ``2026/11/23 10:00:00.000``, no quoting, no repeated header, no line over 64 KiB, every value
a number in its column's unit and range or a ``[N/A]``-style cell. For anything else (another
column or time format, a bad value, readings of a GPU that do not go forwards) :func:`parse`
answers None and the exact path reads the file, with its error naming the file and line.

Timestamps and units are read from the file's bytes (no string per reading: the timestamp's
digits, and each unit found from its cell's end and blanked in place); the numbers and the GPU
columns by pandas. :mod:`reports.imports.nvsmi_minutes` plays the readings.
"""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from tracker.gpu.base import GpuInfo
from tracker.gpu.replay import COLUMNS as _NUMERIC

_TEXT = ("timestamp", "index", "uuid", "name")
_MISSING = [
    "[N/A]",
    "[Not Supported]",
    "[Unknown Error]",
    "[GPU is lost]",
    "[Insufficient Permissions]",
]
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
    return pd.api.types.is_object_dtype(values.dtype) or pd.api.types.is_string_dtype(values.dtype)


_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22]
LAST_YEAR = 2200
"""Later years go the exact way: their epoch microseconds pass 2**53 (in 2255), where a float
of them would round twice and miss the exact path's ``datetime.timestamp()`` by a bit."""
_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def _days(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's ``days_from_civil``)."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _stamps(buf: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Epoch microseconds (UTC) of each line's leading ``YYYY/MM/DD HH:MM:SS.mmm,`` (what
    nvidia-smi writes), and its seven fields (year ... millisecond); None if a line does not
    start with exactly that, a real date and time in the years 1970-:data:`LAST_YEAR` (the
    exact path refuses ``now``, a 60th second, 7 fraction digits). Read from the bytes: no
    string per reading."""
    # the 24 bytes from each line's start, gathered in one step (not an index per byte)
    chars = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - 23, 24), strides=(1, 1))[starts]
    d = chars[:, _DIGITS].astype(np.int64) - ord("0")
    if not (
        ((d >= 0) & (d <= 9)).all()
        and (chars[:, [4, 7]] == ord("/")).all()
        and (chars[:, 10] == ord(" ")).all()
        and (chars[:, [13, 16]] == ord(":")).all()
        and (chars[:, 19] == ord(".")).all()
        and (chars[:, 23] == ord(",")).all()
    ):
        return None
    del chars
    parts = np.stack(
        [
            d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3],
            *(d[:, i] * 10 + d[:, i + 1] for i in (4, 6, 8, 10, 12)),
            d[:, 14] * 100 + d[:, 15] * 10 + d[:, 16],
        ]
    )
    y, mo, day, h, mi, s, ms = parts
    leap = (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))
    last = _MONTH_DAYS[np.clip(mo, 0, 12)] + (leap & (mo == 2))
    if not (
        (y >= 1970)
        & (y <= LAST_YEAR)
        & (mo >= 1)
        & (mo <= 12)
        & (day >= 1)
        & (day <= last)
        & (h <= 23)
        & (mi <= 59)
        & (s <= 59)
    ).all():
        return None
    return ((_days(y, mo, day) * 86400 + h * 3600 + mi * 60 + s) * 1000 + ms) * 1000, parts


def _without_units(data: bytearray, names: list[str], ends: np.ndarray) -> bytearray | None:
    """The log (``data``, changed in place) with each number's unit blanked (``50 %`` →
    ``50  ``: read as the exact path strips it), found from every cell's end; None when a cell
    of a numeric column is neither a number in its column's unit nor a ``[N/A]``-style cell (a
    unit in the wrong column, or none: the exact path's), or a line holds another number of
    cells."""
    b = np.frombuffer(data, dtype=np.uint8)
    commas = np.flatnonzero(b == ord(","))
    if len(commas) != len(ends) * (len(names) - 1):
        return None
    by_line = commas.reshape(len(ends), len(names) - 1)
    if (by_line[:, -1] > ends).any() or (by_line[1:, 0] < ends[:-1]).any():
        return None  # a line with more cells, another with fewer
    cell_ends = np.column_stack([by_line[1:], ends[1:]])  # each row's cells (not the header's)
    del commas, by_line
    # the 4 bytes before each position, as one number: a cell's unit read in one step
    last4 = np.lib.stride_tricks.as_strided(b, shape=(len(b) - 3, 4), strides=(1, 1))
    for j, name in enumerate(names):
        if name not in _NUMERIC:  # names[0] is the timestamp
            continue
        unit = f" {_NUMERIC[name][1]}".encode()  # 2 to 4 bytes
        end = cell_ends[:, j]
        at = end - len(unit)
        if (at <= cell_ends[:, j - 1]).any():
            return None  # a cell too short to hold a unit: the exact path's
        pad = bytes(4 - len(unit))
        mask = int.from_bytes(pad + b"\xff" * len(unit), "little")
        marked = (last4[end - 4].view("<u4").ravel() & mask) == int.from_bytes(pad + unit, "little")
        if not (marked | (b[end - 1] == ord("]"))).all():
            return None
        at = at[marked]
        for i in range(len(unit)):
            b[at + i] = ord(" ")
    return data


def _when(parts: list[int]) -> datetime:
    """The naive datetime of :func:`_stamps`'s fields (year ... millisecond)."""
    y, mo, d, h, mi, sec, ms = parts
    return datetime(y, mo, d, h, mi, sec, ms * 1000)


_START = b"\xef\xbb\xbftimestamp"
"""How the common log begins (a UTF-8 BOM, then its header's first column)."""


def _read(path: Path) -> bytearray | None:
    """A regular file's bytes, read into memory the units are blanked in (no copy); None for
    anything else (``/dev/zero``, a pipe: the exact path streams it, its lines bounded)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # not opened: opening a pipe would take what its writer sends
        with path.open("rb") as f:
            if not f.read(len(_START)).lstrip(b"\xef\xbb\xbf").startswith(b"timestamp"):
                # not the common log (a 2 GB junk file took 4.3 GB here before it was refused):
                # the exact path streams it and stops at its first line
                return None
            f.seek(0)
            data = bytearray(os.fstat(f.fileno()).st_size)
            del data[f.readinto(data) :]
            data += f.read()  # what a log still written to gained meanwhile
    except OSError:
        return None
    return data


def parse(path: Path) -> list[Series] | None:
    """The log's GPUs, in the exact path's order (by index, then first appearance), if it is
    the common log; else None."""
    if (data := _read(path)) is None:
        return None
    if data.startswith(b"\xef\xbb\xbf"):
        del data[:3]
    if not data or b"\r" in data or b'"' in data:
        return None
    if not data.endswith(b"\n"):
        data += b"\n"
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == ord("\n"))
    if np.diff(ends, prepend=-1).max() > _MAX_LINE:
        return None  # a line the exact path refuses as too long
    head = data[: ends[0]]
    try:
        raw = head.decode()
    except UnicodeDecodeError:
        return None
    names = [h.strip().split(" [")[0] for h in raw.split(",")]
    if (
        len(set(names)) != len(names)
        or not set(names) <= {*_TEXT, *_NUMERIC}
        or names[0] != "timestamp"
        or not {"uuid", "utilization.gpu"} <= set(names)
        or data.find(head, len(head) + 1) >= 0
    ):
        return None  # another log, or a repeated header (a log appended to)
    lines = len(ends) - 1
    starts = ends[:-1] + 1
    if lines and (ends[1:] - starts).min() < 24:
        return None  # a row too short to start with a timestamp
    stamped = _stamps(buf, starts) if lines else (np.zeros(0, np.int64), np.zeros((7, 0)))
    del buf, starts
    if stamped is None:
        return None
    micros, parts = stamped
    # whole microseconds over 1e6, exact as datetime.timestamp() computes it: the same floats
    t = micros.astype(np.float64) / 1e6
    numeric = [n for n in _NUMERIC if n in names]  # the exact path's order: a later one wins
    if "[" in raw:  # units
        if (data := _without_units(data, names, ends)) is None:
            return None
    elif data.count(b",") != (lines + 1) * (len(names) - 1):
        return None  # a row of another length
    # trailing blanks: numbers are read as the exact path strips them, text is checked below
    try:
        frame = pd.read_csv(
            io.BytesIO(data),
            header=None,
            names=names,
            usecols=names[1:],
            skiprows=1,
            skipinitialspace=True,
            na_values={n: _MISSING for n in numeric},
            keep_default_na=False,
            skip_blank_lines=False,
            engine="c",
            dtype={n: np.float64 if n in numeric else "category" for n in names[1:]},
        )
        del data
        if len(frame) != lines:
            return None
    except (ValueError, TypeError, OverflowError):
        return None
    # categories are read as what they look like: text columns must stay text, as written
    if any(c in frame and not _text(frame[c].cat.categories) for c in ("uuid", "name")):
        return None
    uuid_codes = frame["uuid"].cat.codes.to_numpy()
    uuid_names = list(frame["uuid"].cat.categories)
    if (uuid_codes < 0).any() or any(
        not u or u != u.strip() or u.startswith("[") for u in uuid_names
    ):
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
        info = GpuInfo(
            index=int(index[first]) if index is not None else len(out),
            uuid=str(uuid_names[uuid_codes[first]]),
            name=(str(gpu_names.iloc[first]).strip() if gpu_names is not None else "unknown"),
            mem_total_gib=(
                None if mem_total is None or np.isnan(mem_total[0]) else float(mem_total[0])
            ),
        )
        out.append(Series(info, _when(parts[:, first].tolist()), ts, rows + 2, per))
    out.sort(key=lambda s: s.info.index)  # the exact path's order; stable: ties by appearance
    return out
