"""The nvidia-smi import of the common log, vectorized: Arrow's C CSV reader (or, without
pyarrow, pandas' C parser) and numpy instead of a sampler call per reading, with results equal
to :mod:`reports.imports.play`'s sampler path (``tests/reports/imports/test_import_nvsmi_fast.py``
holds them equal on random logs).

It takes what ``nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,
memory.total,power.draw,clocks.sm --format=csv[,nounits] -l N`` writes, in UTC: the timestamp
as ``2026/11/23 10:00:00.000``, no quoting, no repeated header, no line over 64 KiB, every value
a number in its column's unit and range or a ``[N/A]``-style cell. For anything else (another
column or time format, a bad value, readings of a GPU that do not go forwards) :func:`parse`
answers None and the exact path reads the file, with its error naming the file and line.

With pyarrow (the ``parquet`` extra) the log is read a block of :data:`BLOCK_BYTES` at a time
(:mod:`reports.imports.arrow_csv`): memory holds each reading's numbers, not the file; each
distinct timestamp, GPU and index is read once. Without it the file is read whole: the
timestamps' digits and each unit found from the file's bytes (no string per reading), the
numbers and GPU columns by pandas. Timestamps are read from their digits either way.
:mod:`reports.imports.nvsmi_minutes` plays the readings.
"""

from __future__ import annotations

import io
import itertools
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from reports.imports.civil import MONTH_DAYS, days_from_civil, is_leap
from tracker.gpu.base import GpuInfo
from tracker.gpu.replay import COLUMNS as _NUMERIC
from tracker.units import WHOLE_S_PER_DAY, WHOLE_S_PER_HOUR

_TEXT = ("timestamp", "index", "uuid", "name")
_MISSING = [
    "[N/A]",
    "[Not Supported]",
    "[Unknown Error]",
    "[GPU is lost]",
    "[Insufficient Permissions]",
]
_MAX_LINE = 65_536
BLOCK_BYTES = 16 << 20
"""The bytes of a log read at a time with pyarrow (whole lines: up to one line more)."""
THREADS = True
"""Whether Arrow parses a block with a thread per CPU: not in a reading process of several
side by side (:func:`reports.imports.nvsmi.read_nvsmi`'s ``workers``), which share the CPUs."""


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


_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22]
LAST_YEAR = 2200
"""Later years go the exact way: their epoch microseconds pass 2**53 (in 2255), where a float
of them would round twice and miss the exact path's ``datetime.timestamp()`` by a bit."""


def _stamps(chars: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Epoch seconds (UTC) of timestamps written ``YYYY/MM/DD HH:MM:SS.mmm`` (what nvidia-smi
    writes), given as their 23 bytes a row, and their seven fields (year ... millisecond);
    None if one is not exactly that, a real date and time in the years 1970-:data:`LAST_YEAR`
    (the exact path refuses ``now``, a 60th second, 7 fraction digits). Read from the bytes:
    no string per reading."""
    d = chars[:, _DIGITS].astype(np.int64) - ord("0")
    if not (
        ((d >= 0) & (d <= 9)).all()
        and (chars[:, [4, 7]] == ord("/")).all()
        and (chars[:, 10] == ord(" ")).all()
        and (chars[:, [13, 16]] == ord(":")).all()
        and (chars[:, 19] == ord(".")).all()
    ):
        return None
    parts = np.stack(
        [
            d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3],
            *(d[:, i] * 10 + d[:, i + 1] for i in (4, 6, 8, 10, 12)),
            d[:, 14] * 100 + d[:, 15] * 10 + d[:, 16],
        ]
    )
    y, mo, day, h, mi, s, ms = parts
    last = MONTH_DAYS[np.clip(mo, 0, 12)] + (is_leap(y) & (mo == 2))
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
    micros = (
        (days_from_civil(y, mo, day) * WHOLE_S_PER_DAY + h * WHOLE_S_PER_HOUR + mi * 60 + s) * 1000
        + ms
    ) * 1000
    # whole microseconds over 1e6, exact as datetime.timestamp() computes it: the same floats
    return micros.astype(np.float64) / 1e6, parts


def _when(parts: list[int]) -> datetime:
    """The naive datetime of :func:`_stamps`'s fields (year ... millisecond)."""
    y, mo, d, h, mi, sec, ms = parts
    return datetime(y, mo, d, h, mi, sec, ms * 1000)


@dataclass
class _Readings:
    """A log's readings as columns: each row's time and GPU, the fields, and each GPU's first
    row's index, name and timestamp, in order of first appearance."""

    t: np.ndarray
    gpu: np.ndarray
    """Each row's GPU: its position in :attr:`uuids`."""
    fields: dict[str, np.ndarray]
    uuids: list[str] = field(default_factory=list)
    index: list[int] | None = None
    name: list[str] | None = None
    first: list[datetime] = field(default_factory=list)


_START = b"\xef\xbb\xbftimestamp"
"""How the common log begins (a UTF-8 BOM, then its header's first column)."""


def _opened(path: Path) -> io.BufferedReader | None:
    """The regular file, open at its start, if it begins as the common log; else None
    (``/dev/zero``, a pipe: the exact path streams it, its lines bounded)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # not opened: opening a pipe would take what its writer sends
        f = path.open("rb")
    except OSError:
        return None
    try:
        if not f.read(len(_START)).lstrip(b"\xef\xbb\xbf").startswith(b"timestamp"):
            # not the common log (a 2 GB junk file took 4.3 GB here before it was refused):
            # the exact path streams it and stops at its first line
            f.close()
            return None
        f.seek(0)
    except OSError:
        f.close()
        return None
    return f


def _header(head: bytes) -> tuple[str, list[str]] | None:
    """The header line's text and column names, if it is the common log's."""
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
    ):
        return None  # another log
    return raw, names


def parse(path: Path) -> list[Series] | None:
    """The log's GPUs, in the exact path's order (by index, then first appearance), if it is
    the common log; else None."""
    from reports.imports import arrow_csv

    if (f := _opened(path)) is None:
        return None
    with f:
        try:
            read = _by_arrow(f) if arrow_csv.available() else _by_pandas(f)
        except OSError:
            return None
    return None if read is None else _series(read)


def _values(
    numeric: list[str], columns: Mapping[str, Any], fields: dict[str, list[np.ndarray]]
) -> bool:
    """Each number column's values, checked against its range and appended to its field's
    (MiB as GiB; a later column of the same field wins, as in the exact path); False if one
    is out of its range."""
    got: dict[str, np.ndarray] = {}
    for n in numeric:
        name, unit, lo, hi = _NUMERIC[n]
        v = columns[n]
        ok = np.isnan(v) | ((v >= lo) & (v <= hi) & np.isfinite(v))
        if not ok.all():
            return False
        got[name] = v / 1024.0 if unit == "MiB" else v
    for name, v in got.items():
        fields.setdefault(name, []).append(v)
    return True


# -- read by Arrow, a block at a time ---------------------------------------------------------


def _blocks(f: io.BufferedReader) -> Iterator[bytearray | None]:
    """The file's bytes in blocks of whole lines (a BOM left out, the last line ended by
    ``\\n`` if it was not), each read into memory of its own (no copy of a block); None for a
    block the exact path must read: one with a line of :data:`_MAX_LINE` bytes or more, a
    ``\\r`` or a quote."""
    rest, first = b"", True
    step = _MAX_LINE // 2
    while True:
        data = bytearray(len(rest) + BLOCK_BYTES)
        data[: len(rest)] = rest
        got = f.readinto(memoryview(data)[len(rest) :])
        del data[len(rest) + got :]
        if first and data.startswith(b"\xef\xbb\xbf"):
            del data[:3]
        first = False
        if not got:
            break
        cut = data.rfind(b"\n") + 1
        rest = bytes(data[cut:])
        del data[cut:]
        if data:
            yield _common(data, step)
        if len(rest) > _MAX_LINE:
            yield None
            return
    if data:  # the last line, without its line break
        data += b"\n"
        yield _common(data, step)


def _common(block: bytearray, step: int) -> bytearray | None:
    """``block``, if its bytes hold no ``\\r`` or quote (the exact path's CSV reader reads
    them) and every stretch of ``step`` bytes holds a line break (no line spans two)."""
    if b"\r" in block or b'"' in block:
        return None
    if not all(block.find(b"\n", at, at + step) >= 0 for at in range(0, len(block), step)):
        return None
    return block


def _by_arrow(f: io.BufferedReader) -> _Readings | None:
    """The log's readings, read by Arrow a block at a time; None where it is not the common
    log."""
    from reports.imports.arrow_csv import read_block

    blocks = _blocks(f)
    first = next(blocks, None)
    if not first:
        return None
    head = bytes(first[: first.index(b"\n")])
    if (header := _header(head)) is None:
        return None
    raw, names = header
    numeric = [n for n in _NUMERIC if n in names]  # the exact path's order: a later one wins
    units = {n: f" {_NUMERIC[n][1]}" if "[" in raw else "" for n in numeric}
    missing = [*_MISSING, *(f" {m}" for m in _MISSING)]
    read = _Readings(
        t=np.zeros(0),
        gpu=np.zeros(0, np.int64),
        fields={_NUMERIC[n][0]: np.zeros(0) for n in numeric},
        index=[] if "index" in names else None,
        name=[] if "name" in names else None,
    )
    times: list[np.ndarray] = []
    gpus: list[np.ndarray] = []
    fields: dict[str, list[np.ndarray]] = {}
    skip = len(head) + 1  # the header, in the first block (not copied out of it)
    for block in itertools.chain([first], blocks):
        if block is None or block.find(head, skip) >= 0:
            return None  # the exact path's, or a repeated header (a log appended to)
        if len(block) > skip:
            rows = read_block(
                memoryview(block)[skip:], names, numbers=units, missing=missing, threads=THREADS
            )
            if rows is None or sum(n for n, _ in rows) != _lines(block, skip):
                return None
        else:
            rows = []
        skip = 0
        for _, columns in rows:
            if (at := _batch(read, columns)) is None or not _values(numeric, columns, fields):
                return None
            times.append(at[0])
            gpus.append(at[1])
    if times:
        read.t = np.concatenate(times)
        read.gpu = np.concatenate(gpus)
        del times, gpus
        while fields:  # each field's parts let go once it is whole
            name, parts = fields.popitem()
            read.fields[name] = np.concatenate(parts)
            del parts
    return read


def _lines(block: bytearray, skip: int) -> int:
    """The line breaks in ``block`` from byte ``skip`` on (numpy counts them in a third of the
    time ``bytearray.count`` takes)."""
    return int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8, offset=skip) == 0x0A))


def _batch(read: _Readings, columns: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """A batch's times and GPUs (each GPU first seen here added to ``read``, with its index,
    name and first timestamp); None where a timestamp, GPU or index is not the common log's."""
    from reports.imports.arrow_csv import Coded

    stamps, uuids = columns["timestamp"], columns["uuid"]
    assert isinstance(stamps, Coded) and isinstance(uuids, Coded)
    chars = stamps.fixed(23)
    if chars is None or (stamped := _stamps(chars)) is None:
        return None
    seconds, parts = stamped
    ids = [u.strip() for u in uuids.values]
    if any(not u or u.startswith("[") for u in ids):
        return None  # a row without a GPU uuid: the exact path names it
    index = columns.get("index")
    values: list[int] = []
    if isinstance(index, Coded):
        try:  # int() as the exact path reads every cell, on each distinct cell once
            values = [int(x) for x in index.values]
        except ValueError:
            return None
    known = {u: i for i, u in enumerate(read.uuids)}
    if not all(u in known for u in ids):  # a GPU first seen here (else no sort to find it)
        _first_seen(read, columns, known=known, ids=ids, parts=parts, indexes=values)
    gpu = np.array([known[u] for u in ids], dtype=np.int32)[uuids.codes]
    return seconds[stamps.codes], gpu


def _first_seen(
    read: _Readings,
    columns: Mapping[str, Any],
    *,
    known: dict[str, int],
    ids: list[str],
    parts: np.ndarray,
    indexes: list[int],
) -> None:
    """Each GPU first seen in a batch added to ``read`` (and ``known``) in order of its first
    row, with its index, name and first timestamp: ``ids``, ``parts`` and ``indexes`` are the
    batch's distinct GPUs, timestamps' fields and indexes, in code order."""
    from reports.imports.arrow_csv import Coded

    stamps, uuids = columns["timestamp"], columns["uuid"]
    index, names = columns.get("index"), columns.get("name")
    _, firsts = np.unique(uuids.codes, return_index=True)
    for row in np.sort(firsts).tolist():
        uuid = ids[uuids.codes[row]]
        if uuid in known:
            continue
        known[uuid] = len(read.uuids)
        read.uuids.append(uuid)
        read.first.append(_when(parts[:, stamps.codes[row]].tolist()))
        if read.index is not None and isinstance(index, Coded):
            read.index.append(indexes[index.codes[row]])
        if read.name is not None and isinstance(names, Coded):
            read.name.append(names.values[names.codes[row]].strip())


# -- read by pandas, whole ------------------------------------------------------------------


def _file_bytes(f: io.BufferedReader) -> bytearray:
    """The file's bytes, read into memory the units are blanked in (no copy)."""
    data = bytearray(os.fstat(f.fileno()).st_size)
    del data[f.readinto(data) :]
    data += f.read()  # what a log still written to gained meanwhile
    return data


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


def _text(values: object) -> bool:
    """Whether category values stayed the strings the file holds (pandas reads ``007`` as 7)."""
    import pandas as pd

    dtype = values.dtype  # type: ignore[attr-defined]
    return pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype)


def _by_pandas(f: io.BufferedReader) -> _Readings | None:
    """The log's readings, the file read whole, parsed by pandas; None where it is not the
    common log."""
    import pandas as pd

    data = _file_bytes(f)
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
    head = bytes(data[: ends[0]])
    if (header := _header(head)) is None or data.find(head, len(head) + 1) >= 0:
        return None  # another log, or a repeated header (a log appended to)
    raw, names = header
    lines = len(ends) - 1
    starts = ends[:-1] + 1
    if lines and (ends[1:] - starts).min() < 24:
        return None  # a row too short to start with a timestamp
    stamped: tuple[np.ndarray, np.ndarray] | None = (np.zeros(0), np.zeros((7, 0), np.int64))
    if lines:
        # the 24 bytes from each line's start, gathered in one step (not an index per byte)
        chars = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - 23, 24), strides=(1, 1))
        chars = chars[starts]
        stamped = _stamps(chars[:, :23]) if (chars[:, 23] == ord(",")).all() else None
        del chars
    del buf, starts
    if stamped is None:
        return None
    t, parts = stamped
    numeric = [n for n in _NUMERIC if n in names]  # the exact path's order: a later one wins
    if "[" in raw:  # units
        if (blanked := _without_units(data, names, ends)) is None:
            return None
        data = blanked
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
    fields: dict[str, list[np.ndarray]] = {}
    columns = {n: frame[n].to_numpy(dtype=np.float64) for n in numeric}
    if not _values(numeric, columns, fields):
        return None
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
    # the GPUs in order of first appearance
    _, firsts = np.unique(uuid_codes, return_index=True)
    firsts = np.sort(firsts)
    order = np.empty(len(uuid_names), dtype=np.int64)
    order[uuid_codes[firsts]] = np.arange(len(firsts))
    return _Readings(
        t=t,
        gpu=order[uuid_codes],
        fields={name: got[0] for name, got in fields.items()},
        uuids=[str(uuid_names[uuid_codes[r]]) for r in firsts.tolist()],
        index=None if index is None else [int(index[r]) for r in firsts.tolist()],
        name=(
            None if gpu_names is None else [str(gpu_names.iloc[r]).strip() for r in firsts.tolist()]
        ),
        first=[_when(parts[:, r].tolist()) for r in firsts.tolist()],
    )


def _narrow(codes: np.ndarray, n: int) -> np.ndarray:
    """Codes ``0 ... n - 1`` in the narrowest unsigned type that holds them: numpy's stable
    sort of 8 or 16 bits is a radix sort, O(n) (a quarter of the time on a 64-GPU log)."""
    for small in (np.uint8, np.uint16):
        if n <= np.iinfo(small).max + 1:
            return codes.astype(small)
    return codes


def _series(read: _Readings) -> list[Series] | None:
    """Each GPU's readings of ``read``, in the exact path's order (by index, then first
    appearance); None where a GPU's readings do not go forwards."""
    # the rows by GPU, each GPU's in file order: each column sorted once, in place of the
    # file's order (one column more in memory at a time), each GPU's readings a part of it
    by_gpu = np.argsort(_narrow(read.gpu, len(read.uuids)), kind="stable")
    counts = np.bincount(read.gpu, minlength=len(read.uuids))
    edges = np.concatenate(([0], np.cumsum(counts))).tolist()
    t, read.t = read.t[by_gpu], np.zeros(0)
    for name in list(read.fields):
        read.fields[name] = read.fields[name][by_gpu]
    out: list[Series] = []
    for g, (a, b) in enumerate(itertools.pairwise(edges)):
        ts = t[a:b]
        if len(ts) > 1 and not (np.diff(ts) > 0).all():
            return None  # a reading at the same time or back: the exact path names the line
        per = {f: v[a:b] for f, v in read.fields.items()}
        mem_total = per.get("mem_total_gib")
        info = GpuInfo(
            index=read.index[g] if read.index is not None else len(out),
            uuid=read.uuids[g],
            name=read.name[g] if read.name is not None else "unknown",
            mem_total_gib=(
                None if mem_total is None or np.isnan(mem_total[0]) else float(mem_total[0])
            ),
        )
        out.append(Series(info, read.first[g], ts, by_gpu[a:b] + 2, per))
    out.sort(key=lambda s: s.info.index)  # the exact path's order; stable: ties by appearance
    return out
