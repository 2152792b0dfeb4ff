"""Jobs as Slurm's accounting records them (``sacct``): who held how many GPUs, where and when.

The first part of issue 27's import (``gpu-kpi import slurm``): this module reads what
``sacct`` writes, in either of its machine forms, into jobs held a column per field
(:class:`SlurmJobs`: no object per job; one by index is a :class:`SlurmJob`); joining them
with minute samples comes after. The forms:

- ``sacct -a -X -P --format=Cluster,JobID,JobIDRaw,User,Account,Partition,State,Start,End,
  ElapsedRaw,AllocTRES,NodeList,JobName`` (``--parsable2``: ``|`` between fields, a header
  line; every Slurm version has it). ``-p`` (a delimiter after the last field too) is read as
  well, and so is any ``--delimiter`` (``|#``: the delimiter is the text between the header's
  field names), and the times of ``SLURM_TIME_FORMAT=%s`` (seconds since 1970). Other fields
  may be there, in any order; ``JobID``, ``Start``, ``End`` and ``AllocTRES`` (or, from a
  Slurm before TRES, ``AllocGRES``) must.
- ``sacct -a -X --json``: Slurm 22.05's ``openapi/dbv0.0.38`` (times as seconds, ``0`` for
  none; ``state.current`` a word) and the ``data_parser`` plugins of 23.02 and later (times as
  ``{"set": …, "number": …}``, ``state.current`` a list).

sacct writes ``JobName`` as the user gave it: a ``|`` or a line break in it is no field's end.
The name's field takes what its neighbours leave: the fields before it are split from the
left, those after it from the right, and a line that is too short to be a row (the rest of a
name after a line break) is joined to the row before it. Only ``\n`` ends a line.

What is read of a job: its id as sacct shows it (``1234``; ``1234_7`` for task 7 of array job
1234; ``1234+0`` for a component of a heterogeneous job) and the allocation's own id
(``JobIDRaw``), the array job and task, name, user, account, partition, state (the first
word: ``CANCELLED by 0`` is ``CANCELLED``), start and end (None while it runs; an ended job
with its elapsed time, ``ElapsedRaw`` or JSON's ``time.elapsed``, shorter than end − start,
a requeued job's last run, starts at end − elapsed), the GPUs allocated (``gres/gpu=N`` of
``AllocTRES``, else the sum of its typed ``gres/gpu:TYPE=N``; per type as well) and the nodes;
and of the whole output, its own time (:attr:`SacctRead.latest`).

Times without a zone (sacct's default ``2026-12-02T10:34:28``) are in the zone the caller
gives (sacct writes the local time of the machine it ran on). Rows that are no allocation are
left out and counted: steps (``1234.batch``, ``1234.extern``, ``1234.0``; ``-X`` leaves them
out of sacct's output itself), jobs that never started (pending, or cancelled before they
ran: ``Start`` ``Unknown``/``None``, no ``AllocTRES``) and the one row sacct writes for an
array's tasks still waiting (``1234_[3-9]``). A row that cannot be read (a time that is no
time, a count that is no number) is skipped with its line and reason; it never stops the
others (a running job's start plus an ``ElapsedRaw`` past year 9999 too). Input that is not
sacct's output at all is an :class:`~reports.errors.ImportFailed`.
The parsable form is read a block of :data:`BLOCK_BYTES` at a time (:func:`read_sacct_stream`):
memory holds the jobs kept, not the output. With pyarrow (the ``parquet`` extra) the lines of a
block that are plain rows (the header's fields, no ``\r`` inside, a name that does not go on
to the next line) are read together by Arrow's C reader (:mod:`reports.imports.arrow_csv`)
and each column's distinct texts read once, by the same rules; every other line, and every
line without pyarrow, is read one at a time as above, in the order of the lines.
``tests/reports/imports/test_sacct_blocks.py`` holds the two ways equal on random outputs.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import IO, TYPE_CHECKING, Any, overload

import numpy as np

from reports.errors import ImportFailed

if TYPE_CHECKING:
    from reports.imports.arrow_csv import Coded

REQUIRED = ("JobID", "Start", "End")
"""The ``--format`` fields a parsable file must have (and ``AllocTRES`` or ``AllocGRES``)."""
FORMAT = (
    "Cluster,JobID,JobIDRaw,User,Account,Partition,State,Start,End,ElapsedRaw,AllocTRES,NodeList,"
    "JobName"
)
"""The ``--format`` this import asks ``sacct`` for: ``JobName`` last, where a ``|`` or a line
break in a name can only lengthen the name."""
MAX_LINE_BYTES = 1 << 20
"""The longest line of parsable output read; a longer one is skipped and named."""
MAX_INPUT_BYTES = 4 << 30
"""The largest JSON output read (it is read whole; the parsable form is read a block at a
time)."""

_NO_TIME = frozenset({"", "Unknown", "None", "N/A"})
_ARRAY_TASK = re.compile(r"^(?P<job>\d+)_(?P<task>\d+)$")
_ARRAY_PENDING = re.compile(r"^\d+_\[.*\]$")
_STEP = re.compile(r"^[^.]+\.")
_FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_TIMES = ("Start", "End", "Submit")
"""The fields whose latest value is the output's own time."""


@dataclass(frozen=True)
class SlurmJob:
    """One allocation: a job, an array task or a heterogeneous job's component."""

    job_id: str
    """As sacct shows it: ``1234``, ``1234_7`` (array task), ``1234+0`` (heterogeneous)."""
    raw_id: str
    """The allocation's own id (``JobIDRaw``; in JSON ``job_id``): unique in the cluster."""
    name: str
    user: str
    account: str
    partition: str
    state: str
    """The first word of sacct's state: ``COMPLETED``, ``RUNNING``, ``CANCELLED``…"""
    start: datetime
    """When the allocation began (timezone-aware); for an ended job whose elapsed time is
    shorter than end − start (requeued), end − elapsed."""
    end: datetime | None
    """When it ended; None while it runs."""
    gpus: int
    """GPUs allocated (over all its nodes)."""
    gpu_types: tuple[tuple[str, int], ...] = ()
    """GPUs per type where sacct names one (``(("h100", 2),)``), in sacct's order."""
    nodes: str = ""
    """The node list as sacct writes it (``gpu[01-04]``)."""
    array_job_id: str | None = None
    array_task_id: int | None = None
    cluster: str = ""
    """The cluster's name (``Cluster``; in JSON ``cluster``); "" where the output has none."""


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(SlurmJob))
""":class:`SlurmJob`'s fields, in its order: :class:`SlurmJobs`' columns."""


class SlurmJobs(Sequence[SlurmJob]):
    """The allocations of a read as a column per :class:`SlurmJob` field (:attr:`columns`,
    lists in the jobs' order): the block reader fills them a batch at a time, with no object
    per job; a job by index (or iterating) is a :class:`SlurmJob` made when asked for."""

    __slots__ = ("columns",)

    def __init__(self, jobs: Iterable[SlurmJob] = ()) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in _JOB_FIELDS}
        """Field → each job's value (``start``/``end``: datetimes as :class:`SlurmJob`'s)."""
        for job in jobs:
            self.append(job)

    def append(self, job: SlurmJob) -> None:
        """One job at the end."""
        for name, column in self.columns.items():
            column.append(getattr(job, name))

    def extend(self, other: SlurmJobs, lo: int = 0, hi: int | None = None) -> None:
        """``other``'s jobs ``lo`` to ``hi`` (default all) at the end."""
        for name, column in self.columns.items():
            column.extend(other.columns[name][lo:hi])

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Each job's values as a tuple in :data:`_JOB_FIELDS`' order (no object made)."""
        return zip(*self.columns.values(), strict=True)

    def __len__(self) -> int:
        return len(self.columns["job_id"])

    @overload
    def __getitem__(self, i: int) -> SlurmJob: ...

    @overload
    def __getitem__(self, i: slice) -> list[SlurmJob]: ...

    def __getitem__(self, i: int | slice) -> SlurmJob | list[SlurmJob]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return SlurmJob(*(column[i] for column in self.columns.values()))

    def __iter__(self) -> Iterator[SlurmJob]:
        return itertools.starmap(SlurmJob, self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SlurmJobs):
            return self.columns == other.columns
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SlurmJobs({list(self)!r})"


@dataclass(frozen=True)
class Unreadable:
    """A row of sacct's output that could not be read."""

    where: str
    """``line 7`` (parsable) or ``job 1234`` (JSON)."""
    reason: str


@dataclass(frozen=True)
class StepUsage:
    """A job's GPU use as Slurm's own accounting averaged it over its steps
    (``TRESUsageInAve`` ``gres/gpuutil`` and ``gres/gpumem``, where the site gathers GPU
    accounting: ``AcctGatherGpu``/NVML), weighted by each step's seconds."""

    cluster: str
    job_id: str
    """The job's own id (``JobIDRaw`` before the step's ``.``)."""
    util_pct: float
    mem_gib: float | None
    steps: int
    seconds: float


@dataclass
class SacctRead:
    """What a read of sacct's output found."""

    jobs: SlurmJobs = field(default_factory=SlurmJobs)
    """The allocations, a column per field (a list given is made one)."""
    steps: int = 0
    """Rows of job steps, left out (``-X`` leaves them out of the output)."""
    not_started: int = 0
    """Jobs that never held their allocation (pending, or cancelled before they started)."""
    unreadable: list[Unreadable] = field(default_factory=list)
    usage: dict[tuple[str, str], StepUsage] = field(default_factory=dict)
    """The steps' GPU averages per (cluster, job id), where the output has ``TRESUsageInAve``
    (:func:`read_step_usage`)."""
    latest: datetime | None = None
    """The output's own time as far as it says: its latest ``Start``, ``End`` or ``Submit``
    (JSON: ``start``, ``end``, ``submission``), or a running job's start plus its elapsed time
    where that is later; None where it holds no time. A saved output's running jobs run to
    it."""

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, SlurmJobs):
            self.jobs = SlurmJobs(self.jobs)

    def saw(self, t: datetime | None) -> None:
        """Note a time the output holds."""
        if t is not None and (self.latest is None or t > self.latest):
            self.latest = t


USAGE_FORMAT = "Cluster,JobID,JobIDRaw,ElapsedRaw,TRESUsageInAve"
"""What ``gpu-kpi import slurm`` asks sacct of the steps (no ``-X``)."""
_TRES_VALUE = re.compile(r"(?:^|,)(gres/gpuutil|gres/gpumem)=([^,]+)")
_MEM_UNITS = {"": 1 / 1024**3, "K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0}


class _UsageSums:
    """The steps' ``TRESUsageInAve`` GPU values summed per (cluster, job), row by row."""

    def __init__(self) -> None:
        self.sums: dict[tuple[str, str], list[float]] = {}

    def add(self, row: Mapping[str, str]) -> None:
        step = (row.get("JobIDRaw") or row.get("JobID") or "").strip()
        if "." not in step:
            return
        found = dict(_TRES_VALUE.findall(row.get("TRESUsageInAve", "")))
        util = _float(found.get("gres/gpuutil", ""))
        seconds = _seconds(row)
        if util is None or seconds is None or seconds <= 0:
            return
        mem = _gib(found.get("gres/gpumem", ""))
        key = (row.get("Cluster", "").strip(), step.split(".", 1)[0])
        acc = self.sums.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0.0])
        acc[0] += seconds
        acc[1] += util * seconds
        acc[2] += 1
        if mem is not None:
            acc[3] = max(acc[3], mem)
            acc[4] = 1

    def result(self) -> dict[tuple[str, str], StepUsage]:
        return {
            key: StepUsage(
                cluster=key[0],
                job_id=key[1],
                util_pct=acc[1] / acc[0],
                mem_gib=acc[3] if acc[4] else None,
                steps=int(acc[2]),
                seconds=acc[0],
            )
            for key, acc in self.sums.items()
        }


def read_step_usage(text: str) -> dict[tuple[str, str], StepUsage]:
    """The steps' GPU averages in sacct's parsable output with ``TRESUsageInAve`` (and
    ``ElapsedRaw`` or ``Elapsed`` to weight them), per (cluster, job id); rows without a
    ``gres/gpuutil``, and the output of a site that gathers none, give nothing.

    Args:
        text: ``sacct -a -P --format=Cluster,JobID,JobIDRaw,ElapsedRaw,TRESUsageInAve``'s
            output (or any parsable output with those fields).
    """
    lines = _TextSource(text).lines()
    first = next(((n, line) for n, line in lines if line is None or line.strip()), None)
    if first is None or first[1] is None or "TRESUsageInAve" not in first[1]:
        return {}
    try:
        table = _Table(first[1], None)
    except ImportFailed:
        return {}
    sums = _UsageSums()
    for _, got in table.rows(lines):
        if not isinstance(got, str):
            sums.add(dict(zip(table.names, got, strict=True)))
    return sums.result()


def _float(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) and x >= 0 else None


def _gib(text: str) -> float | None:
    m = re.fullmatch(r"([0-9.]+)([KMGT]?)", text.strip())
    x = _float(m[1]) if m else None
    return None if x is None or m is None else x * _MEM_UNITS[m[2]]


def _seconds(row: Mapping[str, str]) -> float | None:
    raw = _digits(row.get("ElapsedRaw", ""))
    if raw is not None:
        return float(raw)
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", row.get("Elapsed", "").strip())
    if not m:
        return None
    d, h, mi, sec = (int(x) if x else 0 for x in m.groups())
    return float(((d * 24 + h) * 60 + mi) * 60 + sec)


def _digits(text: str) -> int | None:
    """A whole number of at most 18 ASCII digits, else None."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    return None


def read_sacct(text: str, *, tz: tzinfo, delimiter: str | None = None) -> SacctRead:
    """The allocations in sacct's output, parsable (``-P``/``-p``) or JSON (``--json``).

    Args:
        text: The whole output.
        tz: The zone of the times written without one (the zone of the machine sacct ran on).
        delimiter: The parsable form's delimiter (``--delimiter``); None: the one between the
            header's field names.

    Returns:
        The jobs, and what was left out.

    Raises:
        ImportFailed: The text is not sacct's output: not its JSON, no header line of field
            names with ``JobID``, ``Start``, ``End`` and ``AllocTRES``/``AllocGRES``.
    """
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{"):
        return _read_json(stripped, tz)
    return _read_sources(_TextSource(stripped), tz, delimiter)


def read_sacct_stream(stream: IO[bytes], *, tz: tzinfo) -> SacctRead:
    """:func:`read_sacct` of a file or a pipe, the parsable form a block at a time: memory
    holds the jobs kept, not the output (the JSON form is read whole, up to
    :data:`MAX_INPUT_BYTES`). Bytes that are no UTF-8 are replaced.

    Args:
        stream: The output, as bytes.
        tz: The zone of the times written without one.

    Raises:
        ImportFailed: Not sacct's output, or JSON over :data:`MAX_INPUT_BYTES`.
    """
    head, blank_lines = b"", 0
    while True:  # past a byte-order mark and blank lines, kept out of memory
        chunk = stream.read(1 << 16)
        if not chunk:
            raise ImportFailed(_NOT_SACCT)
        head = (head + chunk).removeprefix(b"\xef\xbb\xbf")
        rest = head.lstrip(b" \t\r\n")
        if rest:
            blank_lines += head[: len(head) - len(rest)].count(b"\n")
            head = rest
            break
        blank_lines += head.count(b"\n")
        head = b""
    whole = _Prefixed(head, stream)
    if head.startswith(b"{"):
        data = whole.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            raise ImportFailed("JSON over 4 GiB: give sacct's output a month at a time")
        return _read_json(data.decode("utf-8", "replace"), tz)
    return _read_sources(_StreamSource(whole, start=blank_lines + 1), tz, None)


class _Prefixed:
    """A stream with bytes already read from it put back in front."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head, self.rest = head, rest

    def read(self, n: int) -> bytes:
        out, self.head = self.head[:n], self.head[n:]
        return out + self.rest.read(n - len(out)) if len(out) < n else out

    def readline(self, limit: int) -> bytes:
        if not self.head:
            return self.rest.readline(limit)
        end = self.head.find(b"\n", 0, limit)
        cut = end + 1 if end >= 0 else min(limit, len(self.head))
        line, self.head = self.head[:cut], self.head[cut:]
        if end < 0 and len(line) < limit and not self.head:
            line += self.rest.readline(limit - len(line))
        return line


def _stream_lines(stream: IO[bytes] | _Prefixed) -> Iterator[str | None]:
    """The lines of ``stream``, split at ``\\n`` alone (a job name may hold ``\\r``, ``\\f`` or
    U+2028) and decoded; None for a line over :data:`MAX_LINE_BYTES`, whose bytes are passed
    over without being kept."""
    while raw := stream.readline(MAX_LINE_BYTES + 1):
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(MAX_LINE_BYTES + 1)
            yield None
            continue
        yield raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")


# -- the parsable form ----------------------------------------------------------------------------
_NOT_SACCT = (
    "not sacct output: expected `sacct -P --format=...` (a header line of field names joined "
    "by | or another --delimiter) or `sacct --json`"
)
_MAX_DELIMITER = 32
_IN_VALUES = frozenset(",=:-/+.()[]*_")
"""Delimiters of one character that sacct's own values hold (``cpu=1,gres/gpu=2``,
``gpu[01-02]``, ``10:34:28``): a row could not be split by them."""
_MAX_HEADER = 64 << 10


def find_delimiter(header: str) -> str:
    """The delimiter of a parsable header line: the text between its field names (``|``; GCM's
    ``|#``; ``|3f9a0c…|``; a ``-p`` header ends with one too), where every field name is a word
    of letters and digits (``JobID``, ``TRESUsageInAve``), none twice, and the delimiter the
    same between each.

    Args:
        header: The output's first line.

    Raises:
        ImportFailed: No delimiter makes the line field names (not sacct's parsable output),
            or the one found is spaces (sacct's own table, not ``-P``) or a character of
            sacct's own values (``,``): named.
    """
    if len(header) > _MAX_HEADER:
        raise ImportFailed(_NOT_SACCT)
    best: tuple[bool, bool, int, int, str] | None = None
    for p in range(1, min(len(header), 64) + 1):
        if not _FIELD_NAME.fullmatch(header[:p]):
            break
        for q in range(p + 1, min(len(header), p + _MAX_DELIMITER) + 1):
            d = header[p:q]
            names = header.split(d)
            if names[-1] == "":
                names.pop()
            if len(names) < 2 or not all(_FIELD_NAME.fullmatch(n) for n in names):
                continue
            # a delimiter of letters and digits (|3f9a…|) splits at | into its own token again
            # and again: no field is named twice
            rank = (len(set(names)) == len(names), "JobID" in names, len(names), -len(d), d)
            if best is None or rank[:4] > best[:4]:
                best = rank
    if best is None:
        raise ImportFailed(_NOT_SACCT)
    found = best[4]
    if not found.strip(" "):
        raise ImportFailed(
            f"not sacct output: fields separated by {found!r}, sacct's own table: run sacct "
            f"with -P (--format={FORMAT})"
        )
    if found in _IN_VALUES:
        raise ImportFailed(
            f"sacct output with fields separated by {found!r}, which sacct's own values hold "
            "(AllocTRES, NodeList, times): run sacct with -P (|) or a --delimiter of other "
            "characters"
        )
    return found


class _Table:
    """The parsable form's header and its rows, a ``JobName`` that may hold the delimiter or a
    line break read whole."""

    def __init__(self, header: str, delimiter: str | None) -> None:
        self.d = delimiter if delimiter is not None else find_delimiter(header)
        names = header.split(self.d)
        self.trailing = len(names) > 1 and names[-1] == ""  # -p: a delimiter after the last
        self.names = names[:-1] if self.trailing else names
        self.width = len(self.names)
        self.name_at = self.names.index("JobName") if "JobName" in self.names else None
        self.after = 0 if self.name_at is None else self.width - self.name_at - 1

    def _fields(self, text: str) -> int:
        if self.trailing and text.endswith(self.d):
            text = text[: -len(self.d)]
        return text.count(self.d) + 1

    def _whole(self, text: str) -> bool:
        """Whether ``text`` has every field (a ``-p`` row: and the delimiter after them)."""
        if self.trailing and not text.endswith(self.d):
            return False
        n = self._fields(text)
        return n == self.width if self.name_at is None else n >= self.width

    def _goes_on(self, row: str, line: str) -> bool:
        """Whether ``line`` is the rest of ``row``'s job name after a line break: a line too
        short to be a row, after a row cut short, or (``JobName`` last) after a whole one."""
        if self.name_at is None or self._fields(line) >= self.width:
            return False
        return not self._whole(row) or self.after == 0

    def cells(self, text: str) -> list[str] | None:
        """A row's cells, one per field; None where it has too few (or, without ``JobName``,
        another number)."""
        if self.trailing and text.endswith(self.d):
            text = text[: -len(self.d)]
        cells = text.split(self.d)
        if self.name_at is None:
            if len(cells) == self.width + 1 and cells[-1] == "":
                cells.pop()
            return cells if len(cells) == self.width else None
        if len(cells) < self.width:
            return None
        k, cut = self.name_at, len(cells) - self.after
        return [*cells[:k], self.d.join(cells[k:cut]), *cells[cut:]]

    def rows(
        self, lines: Iterable[tuple[int, str | None]]
    ) -> Iterator[tuple[int, list[str] | str]]:
        """(line number, cells) of each row, or (line number, why) of one that cannot be read;
        blank lines are passed over."""
        rows = _Rows(self)
        for n, line in lines:
            yield from rows.push(n, line)
        yield from rows.flush()

    def _done(self, n: int, text: str) -> tuple[int, list[str] | str]:
        cells = self.cells(text)
        if cells is None:
            return n, f"{self._fields(text)} fields where the header has {self.width}"
        return n, cells


class _Rows:
    """:meth:`_Table.rows` fed a line at a time: a row is given once the line after it shows
    that it ends (a name that goes on after a line break is joined to it)."""

    def __init__(self, table: _Table) -> None:
        self.table = table
        self.at, self.row = 0, None  # type: tuple[int, str | None]

    def push(self, n: int, line: str | None) -> list[tuple[int, list[str] | str]]:
        """The rows line ``n`` ends (the row before it; itself, if over the limit)."""
        out = []
        if line is None:
            out += self.flush()
            out.append((n, f"a line of over {MAX_LINE_BYTES:,} bytes"))
            return out
        if not line.strip():
            return out
        if self.row is not None and self.table._goes_on(self.row, line):
            if len(self.row) + len(line) > MAX_LINE_BYTES:
                out.append((self.at, f"a row of over {MAX_LINE_BYTES:,} bytes"))
                self.at, self.row = 0, None
            else:
                self.row += "\n" + line
            return out
        out += self.flush()
        self.at, self.row = n, line
        return out

    def flush(self) -> list[tuple[int, list[str] | str]]:
        """The row being read, ended: the next line starts a row of its own (or there is none)."""
        if self.row is None:
            return []
        done = self.table._done(self.at, self.row)
        self.at, self.row = 0, None
        return [done]


def _header(lines: Iterator[tuple[int, str | None]], delimiter: str | None) -> _Table:
    """The table of the first line that is not blank; raises :class:`ImportFailed` where it is
    not sacct's parsable output, or lacks a field this import needs."""
    first = next(((n, line) for n, line in lines if line is None or line.strip()), None)
    if first is None or first[1] is None:
        raise ImportFailed(_NOT_SACCT)
    table = _Table(first[1].lstrip("\ufeff \t"), delimiter)
    missing = [f for f in REQUIRED if f not in table.names]
    if "AllocTRES" not in table.names and "AllocGRES" not in table.names:
        missing.append("AllocTRES")
    if missing:
        raise ImportFailed(
            f"sacct output without {', '.join(missing)}: run sacct with --format={FORMAT}"
        )
    return table


def _read_rows(table: _Table, lines: Iterator[tuple[int, str | None]], tz: tzinfo) -> SacctRead:
    """The rows of ``lines`` (those after the header) read one by one."""
    out = SacctRead()
    usage = _UsageSums() if "TRESUsageInAve" in table.names else None
    times = _Times(out, tz)
    for n, got in table.rows(lines):
        _take(out, table.names, n, got, times, usage=usage)
    out.usage = usage.result() if usage is not None else {}
    return out


def _take(
    out: SacctRead,
    header: list[str],
    n: int,
    got: list[str] | str,
    times: _Times,
    *,
    usage: _UsageSums | None = None,
) -> None:
    """Row ``n``'s cells (or why it cannot be read) into ``out``."""
    if isinstance(got, str):
        out.unreadable.append(Unreadable(f"line {n}", got))
        return
    row = dict(zip(header, got, strict=True))
    try:
        _add(out, row, times)
    except ValueError as e:
        out.unreadable.append(Unreadable(f"line {n}", str(e)))
    if usage is not None:
        usage.add(row)


# -- the parsable form, a block at a time (Arrow) -------------------------------------------------
BLOCK_BYTES = 1 << 18
"""Parsable output read at a time (whole lines), where pyarrow is installed: Arrow's C reader
takes the lines that are plain rows, :class:`_Rows` the others."""
_FIELDS = (
    "JobID",
    "JobIDRaw",
    "JobName",
    "User",
    "Account",
    "Partition",
    "State",
    "Start",
    "End",
    "Submit",
    "ElapsedRaw",
    "AllocTRES",
    "AllocGRES",
    "NodeList",
    "Cluster",
)
"""The fields :func:`_add` reads."""
_STAND_INS = b"\x1f\x1e\x1d\x1c\x01\x02\x03\x04"
"""Bytes that may stand for a delimiter of several bytes (Arrow's is one): the first that a
block does not hold."""
_ISO = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$"
_WHOLE = r"^\d{1,18}$"
_END = object()
"""The end of the output, after its last piece."""


class _TextSource:
    """:func:`read_sacct`'s text: its lines, numbered, as :func:`_stream_lines` gives a
    stream's (split at ``\\n`` alone; None for one over :data:`MAX_LINE_BYTES` characters),
    or from where those stopped, the rest in pieces of whole lines as UTF-8 (lone surrogates
    kept: such lines go the slow way and come back as they were)."""

    def __init__(self, text: str) -> None:
        self.text, self.at, self.n = text, 0, 0

    def lines(self) -> Iterator[tuple[int, str | None]]:
        while self.at < len(self.text):
            end = self.text.find("\n", self.at)
            end = len(self.text) if end < 0 else end
            line = self.text[self.at : end]
            self.at, self.n = end + 1, self.n + 1
            yield self.n, None if len(line) > MAX_LINE_BYTES else line.removesuffix("\r")

    def pieces(self) -> Iterator[bytes | None]:
        while self.at < len(self.text):
            end = self.text.find("\n", self.at + BLOCK_BYTES)
            end = len(self.text) if end < 0 else end + 1
            piece = self.text[self.at : end]
            self.at = end
            yield piece.encode("utf-8", "surrogatepass")

    @staticmethod
    def decode(raw: bytes) -> list[str | None]:
        lines = raw.decode("utf-8", "surrogatepass").split("\n")
        if raw.endswith(b"\n"):
            lines.pop()
        return [None if len(x) > MAX_LINE_BYTES else x.removesuffix("\r") for x in lines]


class _StreamSource:
    """:func:`read_sacct_stream`'s stream: its first lines as :func:`_stream_lines` gives them,
    then the rest in pieces of whole lines, or None for a line over :data:`MAX_LINE_BYTES`
    (passed over without being kept)."""

    def __init__(self, stream: IO[bytes] | _Prefixed, start: int) -> None:
        self.stream, self.n = stream, start - 1
        self._lines = _stream_lines(stream)

    def lines(self) -> Iterator[tuple[int, str | None]]:
        for line in self._lines:
            self.n += 1
            yield self.n, line

    def pieces(self) -> Iterator[bytes | None]:
        rest = b""
        while chunk := self.stream.read(BLOCK_BYTES):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
            rest = data[cut:]
            if len(rest) > MAX_LINE_BYTES:
                yield None
                rest = self._past_line()
        if rest:
            yield rest

    def _past_line(self) -> bytes:
        """What follows the end of the line being read (its bytes not kept)."""
        while chunk := self.stream.read(BLOCK_BYTES):
            end = chunk.find(b"\n")
            if end >= 0:
                return chunk[end + 1 :]
        return b""

    @staticmethod
    def decode(raw: bytes) -> list[str | None]:
        lines = raw.split(b"\n")
        if raw.endswith(b"\n"):
            lines.pop()
        return [
            None if len(x) > MAX_LINE_BYTES else x.decode("utf-8", "replace").removesuffix("\r")
            for x in lines
        ]


def _read_sources(
    source: _TextSource | _StreamSource, tz: tzinfo, delimiter: str | None
) -> SacctRead:
    """The parsable form: its plain rows a block at a time by Arrow's C reader where pyarrow
    is installed (:func:`_read_blocks`), else every row the slow way."""
    from reports.imports import arrow_csv

    lines = source.lines()
    table = _header(lines, delimiter)
    names = table.names
    if (
        not arrow_csv.available()
        or "TRESUsageInAve" in names
        or len(set(names)) != len(names)
        or not table.d.strip()  # a blank line of tabs is passed over, not a row
    ):
        return _read_rows(table, lines, tz)  # the rest a line at a time, as ever
    return _read_blocks(table, source, tz)


def _read_blocks(table: _Table, source: _TextSource | _StreamSource, tz: tzinfo) -> SacctRead:
    """The rows after the header, a piece at a time: the lines that are plain rows (as many
    fields as the header, ending where the next line shows the row ends) read together by
    Arrow, the others by :class:`_Rows`, in the order of the lines."""
    out = SacctRead()
    times = _Times(out, tz)
    rows = _Rows(table)
    n = source.n
    pieces = source.pieces()
    piece: bytes | object | None = next(pieces, _END)
    while piece is not _END:
        following = next(pieces, _END)
        if piece is None:
            n += 1
            for at, got in rows.push(n, None):
                _take(out, table.names, at, got, times)
        else:
            assert isinstance(piece, bytes)
            n = _read_piece(out, table, source, piece, following, n=n, rows=rows, times=times)
        piece = following
    for at, got in rows.flush():
        _take(out, table.names, at, got, times)
    return out


def _read_piece(
    out: SacctRead,
    table: _Table,
    source: _TextSource | _StreamSource,
    piece: bytes,
    following: bytes | object | None,
    *,
    n: int,
    rows: _Rows,
    times: _Times,
) -> int:
    """The lines of ``piece`` (line ``n + 1`` on) into ``out``; ``following``: the next piece
    (None: a line over the limit; :data:`_END`: none). Returns the last line's number."""
    from reports.imports.arrow_csv import read_block

    d = table.d.encode("utf-8", "surrogatepass")
    data, stand_in, replaced = piece, d, False
    if len(d) > 1:
        stand_in = next((bytes([b]) for b in _STAND_INS if bytes([b]) not in piece), b"")
        if stand_in:
            data, replaced = piece.replace(d, stand_in), True
    if not data.endswith(b"\n"):
        data += b"\n"
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    fast = _plain_lines(table, data, ends, stand_in, _next_fields(following, d), grown=len(d) - 1)
    starts = np.concatenate(([0], ends + 1))
    keep = {str(i): name for i, name in enumerate(table.names) if name in _FIELDS}
    batches = None
    if fast.any():
        plain = [data[starts[a] : starts[b]] for a, b in _runs(fast) if fast[a]]
        width = table.width + table.trailing
        batches = read_block(
            plain[0] if len(plain) == 1 else b"".join(plain),
            [str(i) for i in range(width)],
            delimiter=stand_in.decode("ascii"),
            keep=list(keep),
        )
        if batches is None or sum(k for k, _ in batches) != int(fast.sum()):
            fast[:], batches = False, None
    got = _Plain.of(batches, keep, tz=times.tz) if batches else None
    done = 0  # fast rows taken
    for a, b in _runs(fast):
        if not fast[a]:
            raw = data[starts[a] : starts[b]]
            if replaced:  # the output's own bytes again
                raw = raw.replace(stand_in, d)
            for i, line in enumerate(source.decode(raw)):
                for at, cells in rows.push(n + a + i + 1, line):
                    _take(out, table.names, at, cells, times)
            continue
        for at, cells in rows.flush():
            _take(out, table.names, at, cells, times)
        assert got is not None
        got.into(out, times, done, done + b - a, first_line=n + a + 1)
        done += b - a
    return n + len(ends)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[a, b)`` of each run of equal values of ``mask``, in order."""
    cuts = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    edges = [0, *cuts.tolist(), len(mask)]
    return list(itertools.pairwise(edges)) if len(mask) else []


def _next_fields(following: bytes | object | None, d: bytes) -> int | None:
    """The delimiters in the first line of the next piece (None: no line follows that a name
    could go on into: the end, or a line over the limit, which ends the row before it)."""
    if not isinstance(following, bytes):
        return None
    end = following.find(b"\n")
    line = following if end < 0 else following[:end]
    return -1 if len(line) > MAX_LINE_BYTES else line.count(d)


def _plain_lines(
    table: _Table, data: bytes, ends: np.ndarray, d: bytes, after: int | None, *, grown: int
) -> np.ndarray:
    """Which lines of ``data`` (whole lines, each ending at its ``ends``; ``d`` one byte, or
    none: every line is the slow way's) are plain rows: no ``\\r`` but one before the line
    break, at most :data:`MAX_LINE_BYTES`, the header's fields (``-p``: and the delimiter after
    the last), and (where ``JobName`` is last) not followed by a line too short to be a row,
    which would go on the row's name. ``after``: the delimiters of the line after the last one;
    ``grown``: the bytes each delimiter lost where one byte stands for it."""
    buf = np.frombuffer(data, np.uint8)
    starts = np.concatenate(([0], ends[:-1] + 1))
    if not d or not len(ends):
        return np.zeros(len(ends), dtype=bool)
    delims = np.diff(np.searchsorted(np.flatnonzero(buf == d[0]), ends), prepend=0)
    long = ends - starts + grown * delims > MAX_LINE_BYTES  # as long as the output's line
    ok = ~long
    cr = np.zeros(len(ends), dtype=bool)
    if b"\r" in data:
        at = np.flatnonzero(buf == 13)
        cr[np.searchsorted(ends, at[buf[at + 1] == 10])] = True  # one before the line break
        ok[np.searchsorted(ends, at[buf[at + 1] != 10])] = False
    if table.trailing:
        last = ends - 1 - cr
        ok &= (delims == table.width) & (last >= starts) & (buf[np.maximum(last, 0)] == d[0])
    else:
        ok &= delims == table.width - 1
    if table.name_at is not None and table.after == 0:
        # the next line's delimiters: a row goes on into a line of fewer fields than a row
        later = np.append(delims[1:], 10**9 if after is None else after)
        longer = np.append(long[1:], after == -1)
        ok &= (later >= table.width - (0 if table.trailing else 1)) & ~longer
    return ok


def _objects(values: Iterable[Any], n: int) -> np.ndarray:
    """``values`` (not sequences) as a numpy array of objects, to be taken by codes."""
    out = np.empty(n, dtype=object)
    out[:] = list(values)
    return out


def _times_of(col: Coded, tz: tzinfo) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct text's time as :func:`_time` reads it (an object array: datetime or
    None), and whether it is one (False: :func:`_time` says why); the plain ones
    (``2026-12-02T10:34:28``, seconds since 1970) made from their digits a column at a time."""
    values = col.values
    out = np.full(len(values), None, dtype=object)
    ok = np.ones(len(values), dtype=bool)
    done = np.zeros(len(values), dtype=bool)
    for pattern, fields in ((_ISO, _iso_fields), (_WHOLE, _epoch_fields)):
        if done.all():
            break
        at = np.flatnonzero(col.matches(pattern) & ~done)
        if not len(at):
            continue
        zone = tz if fields is _iso_fields else UTC
        parts = [x.tolist() for x in fields(col, at)]
        try:  # datetime() checks them as fromisoformat() and fromtimestamp() do
            got = list(map(datetime, *parts, itertools.repeat(0), itertools.repeat(zone)))
        except ValueError:
            continue  # one of them is no time: each is read alone below
        out[at] = _objects(got, len(got))
        done[at] = True
    for i in np.flatnonzero(~done).tolist():
        try:
            out[i] = _time(values[i], tz, "")
        except ValueError:
            ok[i] = False
    return ok, out


def _iso_fields(col: Coded, at: np.ndarray) -> list[np.ndarray]:
    """Year, month, day, hour, minute and second of the distinct texts ``at``, each
    ``YYYY-MM-DDTHH:MM:SS``."""
    d = col.chars(at, 19).astype(np.int64) - ord("0")
    return [
        d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3],
        *(d[:, i] * 10 + d[:, i + 1] for i in (5, 8, 11, 14, 17)),
    ]


def _epoch_fields(col: Coded, at: np.ndarray) -> list[np.ndarray]:
    """Year, month, day, hour, minute and second (UTC) of the distinct texts ``at``, each
    seconds since 1970 in at most 18 digits (H. Hinnant's ``civil_from_days``)."""
    seconds = col.whole(at)
    days, rest = np.divmod(seconds, 86400)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return [year, month, day, rest // 3600, rest // 60 % 60, rest % 60]


class _Plain:
    """Rows Arrow read, as :func:`_add` reads them, a column at a time (each distinct text
    read once): what each row is, the jobs, and each row's times the output holds. A row
    that is none of a job, a step or a job that never started, plainly, is :func:`_add`'s to
    read (a bad time or count, an empty JobID)."""

    ODD, JOB, STEP, NEVER = 0, 1, 2, 3

    def __init__(self) -> None:
        self.kind = np.zeros(0, dtype=np.int8)
        self.jobs = SlurmJobs()
        self.before = np.zeros(1, dtype=np.int64)
        """Jobs before each row (and after the last)."""
        self.seen: list[np.ndarray] = [np.zeros(0, dtype=object)] * 4
        """Each row's times of the output, in :func:`_add`'s order: start, end, submit, and
        the running job's start + elapsed (object arrays: datetime or None)."""
        self._batches: list[tuple[int, dict[str, Coded]]] = []

    @classmethod
    def of(
        cls, batches: list[tuple[int, dict[str, Any]]], names: Mapping[str, str], *, tz: tzinfo
    ) -> _Plain:
        """The rows of Arrow's ``batches``, their columns renamed by ``names``."""
        plain = cls()
        kinds, seen, at = [], [], 0
        for rows, columns in batches:
            named = {names[k]: v for k, v in columns.items()}
            plain._batches.append((at, named))
            kind, jobs, times = _plain_batch(named, rows, tz)
            kinds.append(kind)
            plain.jobs.extend(jobs)
            seen.append(times)
            at += rows
        plain.kind = np.concatenate(kinds)
        plain.seen = [np.concatenate(column) for column in zip(*seen, strict=True)]
        is_job = (plain.kind == cls.JOB).astype(np.int64)
        plain.before = np.concatenate(([0], np.cumsum(is_job)))
        return plain

    def row(self, i: int) -> dict[str, str]:
        """Row ``i``'s cells by field."""
        at, columns = next((a, c) for a, c in reversed(self._batches) if a <= i)
        return {name: col.values[col.codes[i - at]] for name, col in columns.items()}

    def into(self, out: SacctRead, times: _Times, lo: int, hi: int, *, first_line: int) -> None:
        """Rows ``lo`` to ``hi`` (lines ``first_line`` on) into ``out``, in order."""
        a = lo
        for o in [*(np.flatnonzero(self.kind[lo:hi] == self.ODD) + lo).tolist(), hi]:
            if o > a:
                kind = self.kind[a:o]
                out.steps += int(np.count_nonzero(kind == self.STEP))
                out.not_started += int(np.count_nonzero(kind == self.NEVER))
                out.jobs.extend(self.jobs, int(self.before[a]), int(self.before[o]))
                rows = zip(*(column[a:o].tolist() for column in self.seen), strict=True)
                out.saw(max(filter(None, itertools.chain.from_iterable(rows)), default=None))
            if o < hi:
                try:
                    _add(out, self.row(o), times)
                except ValueError as e:
                    out.unreadable.append(Unreadable(f"line {first_line + o - lo}", str(e)))
            a = o + 1


def _plain_batch(
    columns: Mapping[str, Coded], rows: int, tz: tzinfo
) -> tuple[np.ndarray, SlurmJobs, list[np.ndarray]]:
    """What each row of one batch is (:class:`_Plain`'s kinds), its jobs and each row's
    times, as :func:`_add` reads them."""
    none = np.full(1, None, dtype=object)
    zero = np.zeros(rows, dtype=np.int64)

    def cells(name: str) -> tuple[np.ndarray, np.ndarray] | None:
        col = columns.get(name)
        return None if col is None else (col.codes, _objects(col.values, len(col.values)))

    # JobID: a job's own id (digits) plainly; the others as _add reads them
    ids = columns["JobID"]
    plain_id = ids.matches(r"^\d+$")
    job_id = _objects(ids.values, len(ids.values))
    kind_of = np.where(plain_id, _Plain.JOB, _Plain.ODD).astype(np.int8)
    pending = np.zeros(len(job_id), dtype=bool)
    array_job = np.full(len(job_id), None, dtype=object)
    array_task = np.full(len(job_id), None, dtype=object)
    for i in np.flatnonzero(~plain_id).tolist():
        given = job_id[i] = ids.values[i].strip()
        if not given:
            continue  # "no JobID"
        if _STEP.match(given):
            kind_of[i] = _Plain.STEP
            continue
        kind_of[i] = _Plain.JOB
        pending[i] = bool(_ARRAY_PENDING.match(given))
        if array := _ARRAY_TASK.match(given):
            array_job[i], array_task[i] = array.group("job"), int(array.group("task"))
    kind = kind_of[ids.codes]
    # times: Start and End must be times (a step's need not), Submit's are noted where they are
    start_ok, start_of = _times_of(columns["Start"], tz)
    end_ok, end_of = _times_of(columns["End"], tz)
    start = start_of[columns["Start"].codes]
    end = end_of[columns["End"].codes]
    submit = np.full(rows, None, dtype=object)
    if "Submit" in columns:
        submit = _times_of(columns["Submit"], tz)[1][columns["Submit"].codes]
    # GPUs: AllocTRES, else AllocGRES
    tres = columns.get("AllocTRES") or columns.get("AllocGRES")
    gres_of: list[dict[str, int]] = [{}] if tres is None else []
    gres_ok = np.ones(1 if tres is None else len(tres.values), dtype=bool)
    for i, listed in enumerate([] if tres is None else tres.values):
        try:
            read = gpus_of_tres if "AllocTRES" in columns else gpus_of_gres
            gres_of.append(read(listed))
        except ValueError:
            gres_of.append({})
            gres_ok[i] = False
    tres_codes = zero if tres is None else tres.codes
    blank = np.ones(len(gres_of), dtype=bool)
    if "AllocTRES" in columns:
        blank = np.array([not t.strip() for t in columns["AllocTRES"].values], dtype=bool)
    no_gpus = np.array([not g for g in gres_of], dtype=bool)[tres_codes]
    nodes_col = columns.get("NodeList")
    nodes_of = _objects(map(_nodes, nodes_col.values), len(nodes_col.values)) if nodes_col else none
    nodes_codes = nodes_col.codes if nodes_col else zero
    no_nodes = (nodes_of == "")[nodes_codes] if nodes_col else np.ones(rows, dtype=bool)
    # what each row is, in _add's order of checks
    job = kind == _Plain.JOB
    bad = job & ~(start_ok[columns["Start"].codes] & end_ok[columns["End"].codes])
    bad |= job & ~gres_ok[tres_codes]
    kind[bad] = _Plain.ODD
    job &= ~bad
    never = job & (pending[ids.codes] | (start == None))  # noqa: E711
    maybe = job & ~never & no_gpus
    never |= maybe & no_nodes
    for i in np.flatnonzero(maybe & ~no_nodes & blank[tres_codes]).tolist():
        never[i] = end[i] == start[i]
    kind[never] = _Plain.NEVER
    job &= ~never
    # the jobs
    at = np.flatnonzero(job)
    starts, ends = start[at], end[at]
    elapsed = np.full(len(at), None, dtype=object)
    if "ElapsedRaw" in columns:
        col = columns["ElapsedRaw"]
        whole = np.flatnonzero(col.matches(_WHOLE))
        counts = np.full(len(col.values), None, dtype=object)
        counts[whole] = _objects(col.whole(whole).tolist(), len(whole))
        for i in np.flatnonzero(counts == None).tolist():  # noqa: E711
            counts[i] = _digits(col.values[i])
        elapsed = counts[col.codes[at]]
    span = np.full(rows, None, dtype=object)
    timed = np.flatnonzero(elapsed != None)  # noqa: E711
    running = ends[timed] == None  # noqa: E711
    past = []
    for j in timed[running].tolist():  # _run_span's: a time of the output
        try:
            span[at[j]] = starts[j] + timedelta(seconds=elapsed[j])
        except OverflowError:
            past.append(j)  # no time: _add names the row
    if past:
        kind[at[past]] = _Plain.ODD
        keep = np.ones(len(at), dtype=bool)
        keep[past] = False
        at, starts, ends, elapsed = at[keep], starts[keep], ends[keep], elapsed[keep]
        timed = np.flatnonzero(elapsed != None)  # noqa: E711
        running = ends[timed] == None  # noqa: E711
    ended = timed[~running]
    if len(ended):  # _run_span's: a requeued job's last run, where elapsed < end - start
        spans = map(timedelta.total_seconds, map(operator.sub, ends[ended], starts[ended]))
        shorter = np.fromiter(map(operator.lt, elapsed[ended], spans), bool, len(ended))
        for j in ended[shorter].tolist():
            starts[j] = ends[j] - timedelta(seconds=elapsed[j])

    def cells_of(name: str, strip: Callable[[str], str] | None = None) -> list[Any]:
        got = cells(name)
        if got is None:
            return [""] * len(at)
        codes, values = got
        if strip is not None:
            values = _objects(map(strip, values), len(values))
        return values[codes[at]].tolist()

    raw_id = cells_of("JobIDRaw", str.strip)
    job_ids = job_id[ids.codes[at]].tolist()
    raw_id = [r or j for r, j in zip(raw_id, job_ids, strict=True)]
    gpus_of = _objects(map(_total, gres_of), len(gres_of))
    types_of = np.empty(len(gres_of), dtype=object)
    for i, g in enumerate(gres_of):
        types_of[i] = tuple((k, v) for k, v in g.items() if k)
    jobs = SlurmJobs()
    jobs.columns.update(
        job_id=job_ids,
        raw_id=raw_id,
        name=cells_of("JobName"),
        user=cells_of("User"),
        account=cells_of("Account"),
        partition=cells_of("Partition"),
        state=cells_of("State", lambda s: s.split(" ", 1)[0]),
        start=starts.tolist(),
        end=ends.tolist(),
        gpus=gpus_of[tres_codes[at]].tolist(),
        gpu_types=types_of[tres_codes[at]].tolist(),
        nodes=nodes_of[nodes_codes[at]].tolist() if nodes_col else [""] * len(at),
        array_job_id=array_job[ids.codes[at]].tolist(),
        array_task_id=array_task[ids.codes[at]].tolist(),
        cluster=cells_of("Cluster", str.strip),
    )
    # a step's times are noted as far as they are times; a bad row's are _add's
    return kind, jobs, [start, end, submit, span]


class _Times:
    """The parsable form's times, each noted as a time of the output; the steps' read once
    each (a job's steps share their times)."""

    def __init__(self, out: SacctRead, tz: tzinfo) -> None:
        self.out, self.tz = out, tz
        self.known: dict[str, datetime | None] = {}

    def __call__(self, text: str, what: str) -> datetime | None:
        t = _time(text, self.tz, what)
        self.out.saw(t)
        return t

    def of_step(self, row: Mapping[str, str]) -> None:
        """A step's times that can be read, noted."""
        for name in _TIMES:
            text = row.get(name)
            if text is None:
                continue
            if text not in self.known:
                if len(self.known) > 4_096:
                    self.known.clear()
                try:
                    self.known[text] = _time(text, self.tz, name)
                except ValueError:
                    self.known[text] = None
            self.out.saw(self.known[text])


def _gres_of_row(row: Mapping[str, str]) -> dict[str, int]:
    if "AllocTRES" in row:
        return gpus_of_tres(row["AllocTRES"])
    return gpus_of_gres(row.get("AllocGRES", ""))


def gpus_of_tres(text: str) -> dict[str, int]:
    """The GPU entries of a TRES list (``billing=2,cpu=2,gres/gpu:h100=2,gres/gpu=2,mem=4G``).

    Args:
        text: ``AllocTRES`` (or ``ReqTRES``) as sacct writes it.

    Returns:
        ``""`` → the GPUs of ``gres/gpu``, and each type (``h100``) → its GPUs; empty when
        the list has no GPU.

    Raises:
        ValueError: A GPU count that is not a whole number.
    """
    out: dict[str, int] = {}
    for item in text.split(","):
        key, _, value = item.strip().partition("=")
        if key != "gres/gpu" and not key.startswith("gres/gpu:"):
            continue
        out[key.removeprefix("gres/gpu").removeprefix(":")] = _count(key, value)
    return out


def gpus_of_gres(text: str) -> dict[str, int]:
    """The GPU entries of an ``AllocGRES`` list (Slurm before TRES).

    Args:
        text: ``AllocGRES`` as sacct writes it: ``gpu:2``, ``gpu:tesla:4``,
            ``gpu:k80:2(IDX:0-1),gpu:tesla:1(IDX:2)``.

    Returns:
        ``""`` → the untyped GPUs, and each type → its GPUs; empty when the list has no GPU.

    Raises:
        ValueError: A GPU count that is not a whole number.
    """
    out: dict[str, int] = {}
    for item in re.split(r",(?![^(]*\))", text):
        parts = re.sub(r"\(.*\)$", "", item.strip()).split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        kind = parts[1] if len(parts) == 3 else ""
        out[kind] = out.get(kind, 0) + _count("AllocGRES gpu", parts[-1])
    return out


def _count(key: str, value: str) -> int:
    count = _digits(value)
    if count is None or value != value.strip():
        raise ValueError(f"{key} is not a count: {value[:40]!r}")
    return count


def _time(text: str, tz: tzinfo, what: str) -> datetime | None:
    text = text.strip()
    if text in _NO_TIME:
        return None
    seconds = _digits(text)
    try:
        if seconds is not None:  # SLURM_TIME_FORMAT=%s
            return datetime.fromtimestamp(seconds, tz=UTC)
        t = datetime.fromisoformat(text)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{what} is not a time: {text[:40]!r}") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=tz)


def _run_span(
    out: SacctRead,
    start: datetime,
    end: datetime | None,
    elapsed_s: int | None,
    what: str = "ElapsedRaw",
) -> datetime:
    """The start of the allocation's own run: for an ended job whose elapsed time is shorter
    than end − start (requeued: its last run), end − elapsed; a running job's start plus its
    elapsed time is a time of the output.

    Raises:
        ValueError: A running job's start plus its elapsed time (``what``) is past any time.
    """
    if elapsed_s is None or elapsed_s < 0:
        return start
    if end is None:
        out.saw(_after(start, elapsed_s, what))
        return start
    if elapsed_s < (end - start).total_seconds():
        return end - timedelta(seconds=elapsed_s)
    return start


def _after(start: datetime, elapsed_s: int, what: str) -> datetime:
    """``start`` plus ``elapsed_s`` seconds; ValueError where that is past year 9999."""
    try:
        return start + timedelta(seconds=elapsed_s)
    except OverflowError:
        raise ValueError(f"{what} is not a time span from the start: {elapsed_s}") from None


def _add(out: SacctRead, row: Mapping[str, str], times: _Times) -> None:
    """A row of the parsable form, as a job, a step or a job that never started."""
    job_id = row["JobID"].strip()
    if not job_id:
        raise ValueError("no JobID")
    if _STEP.match(job_id):
        out.steps += 1
        times.of_step(row)
        return
    start = times(row["Start"], "Start")
    end = times(row["End"], "End")
    if "Submit" in row:
        try:
            times(row["Submit"], "Submit")
        except ValueError:
            pass
    gres = _gres_of_row(row)
    if _ARRAY_PENDING.match(job_id) or start is None or (not gres and _never_ran(row, start, end)):
        out.not_started += 1
        return
    array = _ARRAY_TASK.match(job_id)
    elapsed = _digits(row["ElapsedRaw"]) if "ElapsedRaw" in row else None
    out.jobs.append(
        SlurmJob(
            job_id=job_id,
            raw_id=row.get("JobIDRaw", "").strip() or job_id,
            name=row.get("JobName", ""),
            user=row.get("User", ""),
            account=row.get("Account", ""),
            partition=row.get("Partition", ""),
            state=row.get("State", "").split(" ", 1)[0],
            start=_run_span(out, start, end, elapsed),
            end=end,
            gpus=_total(gres),
            gpu_types=tuple((k, v) for k, v in gres.items() if k),
            nodes=_nodes(row.get("NodeList", "")),
            array_job_id=array.group("job") if array else None,
            array_task_id=int(array.group("task")) if array else None,
            cluster=row.get("Cluster", "").strip(),
        )
    )


def _never_ran(row: Mapping[str, str], start: datetime, end: datetime | None) -> bool:
    """A row with no GPU that held nothing: no node, or a start that is its end (a job
    cancelled while pending gets a start of its cancel time in some versions)."""
    return _nodes(row.get("NodeList", "")) == "" or (
        end == start and not row.get("AllocTRES", "").strip()
    )


def _nodes(text: str) -> str:
    text = text.strip()
    return "" if text in ("None assigned", "(null)", "None") else text


MAX_HOSTS = 65_536
"""The most host names one node list expands to (a larger one is no real job's)."""
MAX_HOST_NAME = 255
"""The longest host name (DNS's bound): a node list making a longer one is no real job's."""
_RANGE = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")

_Piece = str | list[tuple[int, int, int]]
"""A part of a host name pattern: text, or a bracket's ranges (low, high, zero-padded width)."""


def expand_nodes(text: str) -> tuple[str, ...]:
    """The host names of a Slurm node list (``gpu[01-03,07],cpu1`` →
    ``gpu01 gpu02 gpu03 gpu07 cpu1``; ``r[1-2]n[1-2]`` → four), in order, without repeats;
    zero-padded ranges keep their width. The names are counted, and their length measured,
    before any is made: a list of 130 bytes can name 10⁸ hosts.

    Args:
        text: The node list as sacct writes it (``NodeList``; in JSON ``nodes``).

    Raises:
        ValueError: A bracket that does not close, a range that is not one, a list of more
            than :data:`MAX_HOSTS` hosts or a name longer than :data:`MAX_HOST_NAME`.
    """
    patterns = [_pattern(part) for part in _split_top(_nodes(text))]
    total = 0
    for pattern in patterns:
        total += _how_many(pattern)
        if total > MAX_HOSTS:
            raise ValueError(f"node list of more than {MAX_HOSTS:,} hosts")
        longest = sum(
            len(x) if isinstance(x, str) else max(max(w, len(str(hi))) for _, hi, w in x)
            for x in pattern
        )
        if longest > MAX_HOST_NAME:
            raise ValueError(f"node list: a host name of over {MAX_HOST_NAME} characters")
    out: dict[str, None] = {}
    for pattern in patterns:
        choices = [
            [x]
            if isinstance(x, str)
            else [f"{n:0{w}d}" for lo, hi, w in x for n in range(lo, hi + 1)]
            for x in pattern
        ]
        for parts in itertools.product(*choices):
            out["".join(parts)] = None
    return tuple(out)


def _how_many(pattern: list[_Piece]) -> int:
    """The names ``pattern`` makes, counted up to just over :data:`MAX_HOSTS`."""
    n = 1
    for x in pattern:
        if not isinstance(x, str):
            n *= sum(hi - lo + 1 for lo, hi, _ in x)
            if n > MAX_HOSTS:
                return MAX_HOSTS + 1
    return n


def _pattern(part: str) -> list[_Piece]:
    """One name pattern of a node list (``r[1-2]n[08-09]``) as its text and brackets, read in
    one pass."""
    out: list[_Piece] = []
    at = 0
    while at < len(part):
        opens = part.find("[", at)
        closes = part.find("]", at)
        if opens < 0:
            if closes >= 0:
                raise ValueError(f"node list {part[:60]!r}: a bracket that does not close")
            out.append(part[at:])
            break
        if 0 <= closes < opens:
            raise ValueError(f"node list {part[:60]!r}: a bracket that does not close")
        end = part.find("]", opens)
        if end < 0 or "[" in part[opens + 1 : end]:
            raise ValueError(f"node list {part[:60]!r}: a bracket that does not close")
        if opens > at:
            out.append(part[at:opens])
        ranges = []
        for r in part[opens + 1 : end].split(","):
            m = _RANGE.fullmatch(r.strip())
            if m is None or (m[2] is not None and int(m[2]) < int(m[1])):
                raise ValueError(f"node list {part[:60]!r}: {r[:20]!r} is no range")
            lo = m[1]
            width = len(lo) if lo.startswith("0") else 0
            ranges.append((int(lo), int(m[2] if m[2] is not None else lo), width))
        out.append(ranges)
        at = end + 1
    return out


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _total(gres: Mapping[str, int]) -> int:
    if "" in gres:
        return gres[""]
    return sum(gres.values())


# -- the JSON form --------------------------------------------------------------------------------
def _read_json(text: str, tz: tzinfo) -> SacctRead:
    try:
        d = json.loads(text)
    except (ValueError, RecursionError):
        raise ImportFailed("not sacct output: the JSON cannot be read") from None
    jobs = d.get("jobs") if isinstance(d, dict) else None
    if not isinstance(jobs, list):
        raise ImportFailed("not sacct --json output: no list of jobs")
    out = SacctRead()
    for i, job in enumerate(jobs):
        where = f"job {job.get('job_id', f'#{i + 1}')}" if isinstance(job, dict) else f"#{i + 1}"
        try:
            if not isinstance(job, dict):
                raise ValueError("not an object")
            _add_json(out, job)
        except (ValueError, TypeError, KeyError) as e:
            reason = str(e) if isinstance(e, ValueError) else f"no readable {e}"
            out.unreadable.append(Unreadable(where, reason))
    return out


def _number(value: Any) -> int | None:
    """An integer of sacct's JSON: plain (22.05), or ``{"set": …, "infinite": …, "number":
    …}`` (23.02 and later); None when not set."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not a whole number: {value!r}")
    return value


def _epoch(value: Any, what: str) -> datetime | None:
    seconds = _number(value)
    if not seconds:  # 0: not yet (a pending job's start, a running job's end)
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"{what} is no time: {seconds}") from None


def _add_json(out: SacctRead, job: Mapping[str, Any]) -> None:
    raw = _number(job["job_id"])
    if raw is None:
        raise ValueError("no job_id")
    time = job.get("time") or {}
    start = _epoch(time.get("start"), "start")
    end = _epoch(time.get("end"), "end")
    out.saw(start)
    out.saw(end)
    try:
        out.saw(_epoch(time.get("submission"), "submission"))
    except ValueError:
        pass
    state = job.get("state") or {}
    current = state.get("current") if isinstance(state, dict) else state
    if isinstance(current, list):  # 23.02 and later: flags after the state
        current = current[0] if current else ""
    allocated = (job.get("tres") or {}).get("allocated") or []
    gres = _gpus_of_json(allocated)
    nodes = _nodes(str(job.get("nodes") or ""))
    if start is None or (not gres and (not nodes or (end == start and not allocated))):
        out.not_started += 1
        return
    array = job.get("array") or {}
    array_job = _number(array.get("job_id"))
    task = _number(array.get("task_id"))
    het = job.get("het") or {}
    het_job, het_offset = _number(het.get("job_id")), _number(het.get("job_offset"))
    if array_job and task is not None:
        job_id = f"{array_job}_{task}"
    elif het_job and het_offset is not None:
        job_id = f"{het_job}+{het_offset}"
    else:
        job_id = str(raw)
    out.jobs.append(
        SlurmJob(
            job_id=job_id,
            raw_id=str(raw),
            name=str(job.get("name") or ""),
            user=str(job.get("user") or ""),
            account=str(job.get("account") or ""),
            partition=str(job.get("partition") or ""),
            state=str(current or ""),
            start=_run_span(out, start, end, _number(time.get("elapsed")), "time.elapsed"),
            end=end,
            gpus=_total(gres),
            gpu_types=tuple((k, v) for k, v in gres.items() if k),
            nodes=nodes,
            array_job_id=str(array_job) if array_job and task is not None else None,
            array_task_id=task if array_job else None,
            cluster=str(job.get("cluster") or ""),
        )
    )


def _gpus_of_json(allocated: Iterable[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in allocated:
        if not isinstance(t, dict) or t.get("type") != "gres":
            continue
        name = str(t.get("name") or "")
        if name != "gpu" and not name.startswith("gpu:"):
            continue
        count = _number(t.get("count"))
        out[name.removeprefix("gpu").removeprefix(":")] = count or 0
    return out
