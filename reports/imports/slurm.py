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
and each column's distinct texts read once (the ids and times, mostly each their own, a cell
at a time), by the same rules (times from their digits, as wall-clock seconds and the zone
they are in), a 4 MiB block as one batch; every other line, and every line without pyarrow,
is read one at a time as above, in the order of the lines. Those jobs are held as
numbers and codes into each batch's distinct texts, made Python values (datetimes, strings)
when :attr:`SlurmJobs.columns` is first asked for; the import's allocations take them as they
are (:meth:`SlurmJobs.parts`, :class:`JobCodes`). A block whose lines all look like plain rows
(no ``\r``, a line break in every 256 KiB) is given to Arrow whole first, each line's fields not
counted here: where Arrow refuses a row of another number of fields, or reads a row with no
JobID (a blank line), each line of the block is looked at as above, and of the next block too.
``tests/reports/imports/test_sacct_blocks.py`` holds the two ways equal on random outputs.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import IO, TYPE_CHECKING, Any, overload

import numpy as np

from reports.errors import ImportFailed
from reports.imports.civil import MONTH_DAYS, civil_from_days, days_from_civil, is_leap
from tracker.units import WHOLE_S_PER_DAY, WHOLE_S_PER_HOUR

if TYPE_CHECKING:
    from reports.imports.arrow_csv import Batch, Coded

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
    lists in the jobs' order), with no object per job; a job by index (or iterating) is a
    :class:`SlurmJob` made when asked for. The block reader adds each batch's jobs as numbers
    and codes into the batch's distinct texts, made these lists' Python values (datetimes,
    strings) on the first ask for :attr:`columns`."""

    __slots__ = ("_later", "_lists")

    def __init__(self, jobs: Iterable[SlurmJob] = ()) -> None:
        self._lists: dict[str, list[Any]] = {name: [] for name in _JOB_FIELDS}
        self._later: list[tuple[_Block, int, int]] = []
        for job in jobs:
            self.append(job)

    @property
    def columns(self) -> dict[str, list[Any]]:
        """Field → each job's value (``start``/``end``: datetimes as :class:`SlurmJob`'s)."""
        later, self._later = self._later[::-1], []
        while later:  # each block let go once made: its texts and the lists are not all held
            block, lo, hi = later.pop()
            for name, values in block.lists(lo, hi).items():
                self._lists[name].extend(values)
            del block
        return self._lists

    def append(self, job: SlurmJob) -> None:
        """One job at the end."""
        for name, column in self.columns.items():
            column.append(getattr(job, name))

    def later(self, block: _Block, lo: int, hi: int) -> None:
        """``block``'s jobs ``lo`` to ``hi`` at the end, made Python values when asked for."""
        self._later.append((block, lo, hi))

    def parts(self) -> Iterator[dict[str, list[Any]] | JobCodes]:
        """The jobs in order, a run at a time: lists by field (as :attr:`columns`' values), or
        a batch's jobs as the block reader holds them (:class:`JobCodes`), not made Python
        values."""
        if self._lists["job_id"]:
            yield self._lists
        for block, lo, hi in self._later:
            coded = block.coded(lo, hi)
            yield coded if coded is not None else block.lists(lo, hi)

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Each job's values as a tuple in :data:`_JOB_FIELDS`' order (no object made)."""
        return zip(*self.columns.values(), strict=True)

    def __len__(self) -> int:
        return len(self._lists["job_id"]) + sum(hi - lo for _, lo, hi in self._later)

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


class JobCodes:
    """Jobs of one batch the block reader read (:meth:`SlurmJobs.parts`), as the batch holds
    them: each field's distinct values and each job's code into them, the times as numbers.
    What :func:`reports.imports.slurm_jobs.allocations_of` takes without a Python value per
    job and field."""

    __slots__ = ("_block", "_hi", "_lo", "end", "start", "texts", "tz", "zone")

    def __init__(self, block: _Block, lo: int, hi: int) -> None:
        self._block, self._lo, self._hi = block, lo, hi
        self.texts: dict[str, tuple[np.ndarray, np.ndarray]] = block.coded_texts(lo, hi)
        """Field of :class:`SlurmJob` (``job_id``, ``raw_id``, ``name``, ``user``, ``account``,
        ``partition``, ``state``, ``nodes``, ``cluster``, ``gpus``, ``gpu_types``) → its
        distinct values (an array of objects, as :class:`SlurmJob` holds them) and each job's
        code (an array of ints) into them."""
        self.start: np.ndarray = block.start[lo:hi]
        """Each job's start: wall-clock seconds since 1970 (int64), in :attr:`zone`."""
        self.end: np.ndarray = block.end[lo:hi]
        """Each job's end, as :attr:`start`; :data:`NO_END` while it runs."""
        self.zone: np.ndarray = block.zone[lo:hi]
        """Each job's zone: :data:`LOCAL` (:attr:`tz`) or :data:`UTC` (int8); start and end
        in the same."""
        self.tz: tzinfo = block.tz

    def __len__(self) -> int:
        return self._hi - self._lo

    def values(self, name: str) -> np.ndarray:
        """Each job's value of field ``name`` (an array of objects)."""
        distinct, codes = self.texts[name]
        return distinct[codes]

    def times(self, at: np.ndarray, *, end: bool = False) -> list[datetime | None]:
        """The starts (or ends: None while running) of jobs ``at``, as :class:`SlurmJob`'s."""
        wall, zone = (self.end if end else self.start)[at], self.zone[at]
        if end:
            zone = np.where(wall == NO_END, np.int8(_NONE), zone)
        return _datetimes(wall, zone, self.tz)

    def lists(self) -> dict[str, list[Any]]:
        """The jobs' values by field, as :attr:`SlurmJobs.columns` makes them."""
        return self._block.lists(self._lo, self._hi)


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
BLOCK_BYTES = 4 << 20
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
_PLAIN = frozenset({"JobID", "JobIDRaw", "Start", "End", "Submit", "ElapsedRaw"})
"""The fields whose cells are mostly each their own: read by Arrow as plain strings, not
into a dictionary of distinct texts (its hashing of every cell costs more than it saves)."""
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
    hopeful = True  # the last piece's lines all plain rows: this one's read as if so first
    while piece is not _END:
        following = next(pieces, _END)
        if piece is None:
            n += 1
            for at, got in rows.push(n, None):
                _take(out, table.names, at, got, times)
        else:
            assert isinstance(piece, bytes)
            n, hopeful = _read_piece(
                out, table, source, piece, following, n=n, rows=rows, times=times, hopeful=hopeful
            )
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
    hopeful: bool = True,
) -> tuple[int, bool]:
    """The lines of ``piece`` (line ``n + 1`` on) into ``out``; ``following``: the next piece
    (None: a line over the limit; :data:`_END`: none). ``hopeful``: every line is first taken
    for a plain row where :func:`_all_plain` allows, all read by Arrow at once (its reader
    refuses a row of another number of fields: then each line is looked at). Returns the last
    line's number, and whether every line was a plain row."""
    from reports.imports.arrow_csv import read_block

    d = table.d.encode("utf-8", "surrogatepass")
    data, stand_in, replaced = piece, d, False
    if len(d) > 1:
        stand_in = next((bytes([b]) for b in _STAND_INS if bytes([b]) not in piece), b"")
        if stand_in:
            data, replaced = piece.replace(d, stand_in), True
    if not data.endswith(b"\n"):
        data += b"\n"
    after = _next_fields(following, d)
    keep = {str(i): name for i, name in enumerate(table.names) if name in _FIELDS}
    width = table.width + table.trailing

    def arrow(lines: bytes | memoryview) -> list[tuple[int, Batch]] | None:
        return read_block(
            lines,
            [str(i) for i in range(width)],
            delimiter=stand_in.decode("ascii"),
            keep=list(keep),
            plain=[k for k, name in keep.items() if name in _PLAIN],
            threads=False,  # one batch a piece: a batch's work below costs more than threads save
        )

    batches = None
    if hopeful and _all_plain(table, data, stand_in, after, grown=len(d) - 1):
        batches = arrow(data)  # each line a row of the header's fields, or none read
        if batches is not None and not _no_blank_id(batches, keep):
            batches = None  # a blank line, perhaps (passed over): each line looked at
        if batches is not None:
            fast = np.ones(sum(k for k, _ in batches), dtype=bool)
            starts = np.zeros(1, dtype=np.int64)
    if batches is None:
        ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
        fast = _plain_lines(table, data, ends, stand_in, after, grown=len(d) - 1)
        starts = np.concatenate(([0], ends + 1))
        if fast.any():
            view = memoryview(data)  # the plain lines not copied where they are one run
            plain = [view[starts[a] : starts[b]] for a, b in _runs(fast) if fast[a]]
            batches = arrow(plain[0] if len(plain) == 1 else b"".join(plain))
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
    return n + len(fast), bool(fast.all())


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


def _no_blank_id(batches: list[tuple[int, Batch]], keep: Mapping[str, str]) -> bool:
    """Whether no row Arrow read has a blank ``JobID``: a blank line (Arrow's row of blank
    fields, where the line reader passes it over) has one, and so has a row without an id,
    rare enough to be looked at a line at a time."""
    (key,) = [k for k, name in keep.items() if name == "JobID"]
    for _, columns in batches:
        col = columns[key]
        assert not isinstance(col, np.ndarray)
        if (np.diff(col.raw()[0]) == 0).any():  # a text of no bytes
            return False
    return True


_WINDOW = 1 << 18
"""Bytes of :func:`_all_plain`'s windows: a line of ``2 * _WINDOW - 1`` bytes or more holds
one whole."""


def _all_plain(table: _Table, data: bytes, d: bytes, after: int | None, *, grown: int) -> bool:
    """Whether every line of ``data`` (whole lines) may be a plain row as :func:`_plain_lines`
    reads them, where its fields are the header's: ``d`` one byte, no ``\\r``, no ``-p``, no
    line over :data:`MAX_LINE_BYTES` (each window of :data:`_WINDOW` bytes holds a line
    break), and the next line (``after`` delimiters) no rest of the last one's name. Arrow's
    reader, which refuses a row of another number of fields but reads a blank line as a row of
    blank fields (:func:`_no_blank_id`), says whether they are."""
    if not d or table.trailing or 2 * _WINDOW + grown * table.width > MAX_LINE_BYTES:
        return False
    if b"\r" in data:
        return False
    for at in range(0, len(data) - _WINDOW + 1, _WINDOW):
        if data.find(b"\n", at, at + _WINDOW) < 0:
            return False  # perhaps a line over the limit: each line looked at
    if table.name_at is not None and table.after == 0 and after is not None:
        return after >= table.width - 1  # (-1: a line over the limit, which is no row's rest)
    return True


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


_LOCAL, _UTC, _OFFSET, _NONE, _BAD = 0, 1, 2, -1, -2
"""What a time cell is, as the block reader holds it: written without a zone (in the zone
given), seconds since 1970 (UTC), a time with its own offset (kept as a datetime), no time
(``Unknown``…), or no time :func:`_time` can read."""
LOCAL, UTC_ZONE = _LOCAL, _UTC
"""A job's zone in :attr:`JobCodes.zone`: the zone given to the read, or UTC."""
_LAST_S = 253_402_300_799
"""9999-12-31T23:59:59 as seconds since 1970: the last second a datetime holds."""
_NO_TIME_RE = "^(" + "|".join(map(re.escape, sorted(_NO_TIME))) + ")$"
_EPOCH = datetime(1970, 1, 1)
_DIGIT_AT = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
"""Where ``YYYY-MM-DDTHH:MM:SS`` has its digits, and where its marks (:data:`_MARKS`)."""
_MARK_AT = [4, 7, 10, 13, 16]
_MARKS = np.frombuffer(b"--T::", dtype=np.uint8)


@dataclass
class _Clock:
    """Each distinct text of a time column as :func:`_time` reads it, held as numbers: its
    wall-clock seconds since 1970 (the fields as written, read as if UTC: a time and the zone
    it is in, :attr:`zone`, make the datetime) and what it is (:data:`_LOCAL`…)."""

    wall: np.ndarray
    """int64 seconds, by code."""
    zone: np.ndarray
    """int8 :data:`_LOCAL`, :data:`_UTC`, :data:`_OFFSET`, :data:`_NONE` or :data:`_BAD`."""
    offset: dict[int, datetime]
    """The :data:`_OFFSET` ones' datetimes, by code."""


def _clock_of(col: Coded, tz: tzinfo) -> _Clock:
    """The times of a column's distinct texts: the plain ones (``2026-12-02T10:34:28``, seconds
    since 1970, ``Unknown``) read from their digits at once, each other one by :func:`_time`."""
    same = col.fixed(19)  # every text 19 bytes long: as ISO's, checked below
    iso = _iso_shaped(same) if same is not None else col.matches(_ISO)
    at = np.flatnonzero(iso)
    if same is not None and len(at) == len(iso):  # every text ISO's (the most usual)
        wall, valid = _iso_seconds(same)
        zone = np.where(valid, np.int8(_LOCAL), np.int8(_BAD))
        if not valid.all():
            wall[~valid] = 0
    else:
        wall = np.zeros(len(iso), dtype=np.int64)
        zone = np.full(len(iso), _BAD, dtype=np.int8)
    if len(at) and (same is None or len(at) < len(iso)):
        seconds, valid = _iso_seconds(col.chars(at, 19) if same is None else same[at])
        wall[at[valid]], zone[at[valid]] = seconds[valid], _LOCAL
    for pattern in (_NO_TIME_RE, _WHOLE):  # each asked only while some text is still unread
        if not (rest := ~iso & (zone == _BAD)).any():
            break
        found = col.matches(pattern) & rest
        if pattern == _NO_TIME_RE:
            zone[found] = _NONE
            continue
        at = np.flatnonzero(found)
        seconds = col.whole(at)
        valid = seconds <= _LAST_S  # fromtimestamp() reads up to the last second of 9999
        wall[at[valid]], zone[at[valid]] = seconds[valid], _UTC
    clock = _Clock(wall, zone, {})
    odd = np.flatnonzero(zone == _BAD)
    for i, text in zip(odd.tolist(), col.texts(odd), strict=True):  # as _time reads them
        try:
            t = _time(text, tz, "")
        except ValueError:
            continue
        _clock_set(clock, i, t, tz)
    return clock


def _iso_shaped(d: np.ndarray) -> np.ndarray:
    """Whether each text of ``d`` (``(n, 19)`` uint8) is ``YYYY-MM-DDTHH:MM:SS`` in ASCII
    digits."""
    digits = (d[:, _DIGIT_AT] - np.uint8(48)) < 10
    return digits.all(axis=1) & (d[:, _MARK_AT] == _MARKS).all(axis=1)


def _clock_set(clock: _Clock, i: int, t: datetime | None, tz: tzinfo) -> None:
    """Text ``i``'s time ``t`` (a datetime in the zone given or UTC, to the second, held as its
    wall clock; any other kept as it is)."""
    if t is None:
        clock.zone[i] = _NONE
    elif t.microsecond or (t.tzinfo is not tz and t.tzinfo is not UTC):
        clock.zone[i], clock.offset[i] = _OFFSET, t
    else:
        clock.zone[i] = _LOCAL if t.tzinfo is tz else _UTC
        clock.wall[i] = (t.replace(tzinfo=None) - _EPOCH) // timedelta(seconds=1)


def _iso_seconds(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The wall-clock seconds since 1970 of ``YYYY-MM-DDTHH:MM:SS`` texts (``(n, 19)`` uint8 of
    ASCII digits where :data:`_DIGIT_AT` says), and whether each is a time (what datetime()
    takes: year 1 on, the month's days, 23:59:59): each month's first day and days looked up
    (:func:`_months`)."""
    g = d[:, _DIGIT_AT].T.astype(np.int32) - 48  # a row per digit: each number from rows
    year = ((g[0] * 10 + g[1]) * 10 + g[2]) * 10 + g[3]
    month, day = g[4] * 10 + g[5], g[6] * 10 + g[7]
    hour, minute, second = g[8] * 10 + g[9], g[10] * 10 + g[11], g[12] * 10 + g[13]
    first, days_in = _months()
    at = year * 12 + np.clip(month, 1, 12) - 1
    valid = (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= days_in[at])
    valid &= (hour < 24) & (minute < 60) & (second < 60)
    days = first[at] + (day - 1)
    return days * WHOLE_S_PER_DAY + (hour * WHOLE_S_PER_HOUR + minute * 60 + second), valid


@functools.cache
def _months() -> tuple[np.ndarray, np.ndarray]:
    """Each month of years 0 to 9999 (``year * 12 + month - 1``): the days from 1970-01-01 to
    its first day (int64) and its days."""
    year = np.repeat(np.arange(10_000, dtype=np.int64), 12)
    month = np.tile(np.arange(1, 13, dtype=np.int64), 10_000)
    first = days_from_civil(year, month, np.ones_like(month))
    return first, MONTH_DAYS[month] + (is_leap(year) & (month == 2))


def _civil(seconds: np.ndarray) -> list[list[int]]:
    """Year, month, day, hour, minute and second of each of ``seconds`` since 1970, as lists
    for datetime()."""
    days, rest = np.divmod(seconds, WHOLE_S_PER_DAY)
    year, month, day = civil_from_days(days)
    return [
        x.tolist() for x in (year, month, day, rest // WHOLE_S_PER_HOUR, rest // 60 % 60, rest % 60)
    ]


def _datetimes(wall: np.ndarray, zone: np.ndarray, tz: tzinfo) -> list[datetime | None]:
    """Each time as :func:`_time` makes it (None where there is none): the wall clock ``wall``
    in ``tz`` (:data:`_LOCAL`) or UTC (:data:`_UTC`)."""
    for kind, zone_tz in ((_LOCAL, tz), (_UTC, UTC)):
        if (zone == kind).all():  # all in one zone: made straight into the list
            return list(
                map(datetime, *_civil(wall), itertools.repeat(0), itertools.repeat(zone_tz))
            )
    out = np.full(len(wall), None, dtype=object)
    for kind, zone_tz in ((_LOCAL, tz), (_UTC, UTC)):
        at = np.flatnonzero(zone == kind)
        if len(at):
            made = map(datetime, *_civil(wall[at]), itertools.repeat(0), itertools.repeat(zone_tz))
            out[at] = _objects(made, len(at))
    made_all: list[datetime | None] = out.tolist()
    return made_all


class _Seen:
    """One time of each row that the output holds (:attr:`SacctRead.latest`), as numbers:
    its wall clock and what it is (:data:`_LOCAL`…; the :data:`_OFFSET` ones' datetimes by
    row)."""

    def __init__(self, wall: np.ndarray, zone: np.ndarray, offset: dict[int, datetime]) -> None:
        self.wall, self.zone, self.offset = wall, zone, offset

    @classmethod
    def of(cls, clock: _Clock, codes: np.ndarray) -> _Seen:
        """The times of the rows whose texts are ``codes``."""
        zone = clock.zone[codes]
        offset = {}
        if clock.offset:
            rows = np.flatnonzero(zone == _OFFSET).tolist()
            offset = dict(zip(rows, (clock.offset[c] for c in codes[rows].tolist()), strict=True))
        return cls(clock.wall[codes], zone, offset)

    @classmethod
    def none(cls, rows: int) -> _Seen:
        """No time in any of ``rows`` rows."""
        return cls(np.zeros(rows, dtype=np.int64), np.full(rows, _NONE, dtype=np.int8), {})

    @classmethod
    def joined(cls, parts: Sequence[_Seen]) -> _Seen:
        """The rows of ``parts``, in order."""
        offset, at = {}, 0
        for part in parts:
            offset.update({at + i: t for i, t in part.offset.items()})
            at += len(part.zone)
        wall = np.concatenate([p.wall for p in parts])
        return cls(wall, np.concatenate([p.zone for p in parts]), offset)

    def at(self, i: int, tz: tzinfo) -> datetime | None:
        """Row ``i``'s time."""
        zone = int(self.zone[i])
        if zone == _OFFSET:
            return self.offset[i]
        if zone in (_LOCAL, _UTC):
            return _datetimes(self.wall[i : i + 1], self.zone[i : i + 1], tz)[0]
        return None


def _latest(seen: Sequence[_Seen], lo: int, hi: int, tz: tzinfo) -> datetime | None:
    """The latest time of rows ``lo`` to ``hi``, as max() of their datetimes finds it: where all
    are in one zone, the latest wall clock; else max() of the datetimes made, row by row (an
    order of wall clocks in one zone and instants between zones)."""
    kinds: dict[int, int] = {}  # kind -> its latest wall clock
    for s in seen:
        zone, wall = s.zone[lo:hi], s.wall[lo:hi]
        for kind in (_LOCAL, _UTC, _OFFSET):
            where = zone == kind
            if where.any():
                top = int(wall.max(where=where, initial=np.iinfo(np.int64).min))
                kinds[kind] = max(kinds.get(kind, top), top)
    if not kinds:
        return None
    if len(kinds) == 1 and _OFFSET not in kinds:
        ((kind, top),) = kinds.items()
        return _datetimes(np.array([top]), np.array([kind], dtype=np.int8), tz)[0]
    made = (s.at(i, tz) for i in range(lo, hi) for s in seen)
    return max(filter(None, made), default=None)


class _Plain:
    """Rows Arrow read, as :func:`_add` reads them, a column at a time (each distinct text
    read once): what each row is, the jobs (:class:`_Block`: numbers and codes), and each
    row's times the output holds. A row that is none of a job, a step or a job that never
    started, plainly, is :func:`_add`'s to read (a bad time or count, an empty JobID, a time
    with its own offset)."""

    ODD, JOB, STEP, NEVER = 0, 1, 2, 3

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz
        self.kind = np.zeros(0, dtype=np.int8)
        self.blocks: list[tuple[int, _Block]] = []
        """Each batch's jobs, with the jobs before them."""
        self.before = np.zeros(1, dtype=np.int64)
        """Jobs before each row (and after the last)."""
        self.seen: list[_Seen] = []
        """Each row's times of the output, in :func:`_add`'s order: start, end, submit, and
        the running job's start + elapsed."""
        self._batches: list[tuple[int, dict[str, Coded]]] = []

    @classmethod
    def of(
        cls, batches: list[tuple[int, dict[str, Any]]], names: Mapping[str, str], *, tz: tzinfo
    ) -> _Plain:
        """The rows of Arrow's ``batches``, their columns renamed by ``names``."""
        plain = cls(tz)
        kinds, seen, at, jobs = [], [], 0, 0
        for rows, columns in batches:
            named = {names[k]: v for k, v in columns.items()}
            plain._batches.append((at, named))
            kind, block, times = _plain_batch(named, rows, tz)
            kinds.append(kind)
            plain.blocks.append((jobs, block))
            seen.append(times)
            at += rows
            jobs += len(block)
        plain.kind = np.concatenate(kinds)
        plain.seen = [_Seen.joined(column) for column in zip(*seen, strict=True)]
        is_job = (plain.kind == cls.JOB).astype(np.int64)
        plain.before = np.concatenate(([0], np.cumsum(is_job)))
        return plain

    def row(self, i: int) -> dict[str, str]:
        """Row ``i``'s cells by field."""
        at, columns = next((a, c) for a, c in reversed(self._batches) if a <= i)
        return {name: col.text(int(col.codes[i - at])) for name, col in columns.items()}

    def into(self, out: SacctRead, times: _Times, lo: int, hi: int, *, first_line: int) -> None:
        """Rows ``lo`` to ``hi`` (lines ``first_line`` on) into ``out``, in order."""
        a = lo
        for o in [*(np.flatnonzero(self.kind[lo:hi] == self.ODD) + lo).tolist(), hi]:
            if o > a:
                kind = self.kind[a:o]
                out.steps += int(np.count_nonzero(kind == self.STEP))
                out.not_started += int(np.count_nonzero(kind == self.NEVER))
                self._jobs_into(out.jobs, int(self.before[a]), int(self.before[o]))
                out.saw(_latest(self.seen, a, o, self.tz))
            if o < hi:
                try:
                    _add(out, self.row(o), times)
                except ValueError as e:
                    out.unreadable.append(Unreadable(f"line {first_line + o - lo}", str(e)))
            a = o + 1

    def _jobs_into(self, jobs: SlurmJobs, lo: int, hi: int) -> None:
        """Jobs ``lo`` to ``hi`` (of all batches) at the end of ``jobs``."""
        for before, block in self.blocks:
            a, b = max(lo - before, 0), min(hi - before, len(block))
            if a < b:
                jobs.later(block, a, b)


class _Block:
    """The jobs of one batch Arrow read (:func:`_plain_batch`), held as codes into each
    column's distinct texts and as numbers (times as wall clocks); made :class:`SlurmJobs`'
    lists of Python values only when asked for (:meth:`lists`), each distinct text once."""

    def __init__(
        self,
        columns: Mapping[str, Coded],
        at: np.ndarray,
        *,
        ids: dict[int, str],
        start: np.ndarray,
        end: np.ndarray,
        zone: np.ndarray,
        gpus: tuple[np.ndarray, np.ndarray, np.ndarray],
        nodes: np.ndarray | None,
        tz: tzinfo,
    ) -> None:
        self.columns, self.at = columns, at
        self.ids, self.start, self.end, self.zone, self.tz = ids, start, end, zone, tz
        self.gpus, self.gpu_types, self.tres_codes = gpus
        self.nodes = nodes
        self._values: dict[str, np.ndarray] = {}
        self._made: dict[str, list[Any]] | None = None
        if len(at) * 4 < len(columns["JobID"].codes):
            # few jobs among many rows (steps): made now, the batch's texts not kept for them
            self._made, self.columns, self._values = self.lists(0, len(at)), {}, {}

    def __len__(self) -> int:
        return len(self.start)

    def coded(self, lo: int, hi: int) -> JobCodes | None:
        """Jobs ``lo`` to ``hi`` as codes (:class:`JobCodes`); None where their values were
        made already (few jobs among many rows)."""
        return None if self._made is not None else JobCodes(self, lo, hi)

    def coded_texts(self, lo: int, hi: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """:attr:`JobCodes.texts` of jobs ``lo`` to ``hi``."""
        n = hi - lo
        none = (_objects([""], 1), np.zeros(n, dtype=np.intp))

        def text(name: str, how: Callable[[str], str] | None = None) -> tuple[Any, Any]:
            col = self.columns.get(name)
            if col is None:
                return none
            self._text(name, 0, 0, how)
            return self._values[name], col.codes[self.at[lo:hi]]

        job_id, raw_id = text("JobID"), text("JobIDRaw", str.strip)
        # JobIDRaw, else JobID: a job's own (each job its own code)
        raw_given, job_given = raw_id[0][raw_id[1]], job_id[0][job_id[1]]
        blank = np.array([not r for r in raw_id[0].tolist()], dtype=bool)[raw_id[1]]
        raw_given[blank] = job_given[blank]
        tres = self.tres_codes[lo:hi]
        nodes = none
        if self.nodes is not None:
            nodes = (self.nodes, self.columns["NodeList"].codes[self.at[lo:hi]])
        return {
            "job_id": job_id,
            "raw_id": (raw_given, np.arange(n)),
            "name": text("JobName"),
            "user": text("User"),
            "account": text("Account"),
            "partition": text("Partition"),
            "state": text("State", lambda s: s.split(" ", 1)[0]),
            "nodes": nodes,
            "cluster": text("Cluster", str.strip),
            "gpus": (self.gpus, tres),
            "gpu_types": (self.gpu_types, tres),
        }

    def lists(self, lo: int, hi: int) -> dict[str, list[Any]]:
        """Jobs ``lo`` to ``hi``'s values, by :class:`SlurmJob` field."""
        if self._made is not None:
            return {name: values[lo:hi] for name, values in self._made.items()}
        n = hi - lo
        job_id = self._text("JobID", lo, hi)
        raw_id = self._text("JobIDRaw", lo, hi, str.strip)
        ended = np.where(self.end[lo:hi] == _NO_END, _NONE, self.zone[lo:hi])
        array = self._array()
        id_codes = self.columns["JobID"].codes[self.at[lo:hi]]
        return {
            "job_id": job_id,
            "raw_id": [r or j for r, j in zip(raw_id, job_id, strict=True)],
            "name": self._text("JobName", lo, hi),
            "user": self._text("User", lo, hi),
            "account": self._text("Account", lo, hi),
            "partition": self._text("Partition", lo, hi),
            "state": self._text("State", lo, hi, lambda s: s.split(" ", 1)[0]),
            "start": _datetimes(self.start[lo:hi], self.zone[lo:hi], self.tz),
            "end": _datetimes(self.end[lo:hi], ended, self.tz),
            "gpus": self.gpus[self.tres_codes[lo:hi]].tolist(),
            "gpu_types": self.gpu_types[self.tres_codes[lo:hi]].tolist(),
            "nodes": [""] * n if self.nodes is None else self._by("NodeList", self.nodes, lo, hi),
            "array_job_id": array[0][id_codes].tolist(),
            "array_task_id": array[1][id_codes].tolist(),
            "cluster": self._text("Cluster", lo, hi, str.strip),
        }

    def _text(
        self, name: str, lo: int, hi: int, how: Callable[[str], str] | None = None
    ) -> list[Any]:
        """Column ``name``'s cells of jobs ``lo`` to ``hi``, each distinct text read by
        ``how``; "" each where the output has no such field."""
        col = self.columns.get(name)
        if col is None:
            return [""] * (hi - lo)
        values = self._values.get(name)
        if values is None:
            read = col.values if how is None else map(how, col.values)
            values = _objects(read, len(col.values))
            for i, given in self.ids.items() if name == "JobID" else ():
                values[i] = given
            self._values[name] = values
        return self._by(name, values, lo, hi)

    def _by(self, name: str, values: np.ndarray, lo: int, hi: int) -> list[Any]:
        return values[self.columns[name].codes[self.at[lo:hi]]].tolist()

    def _array(self) -> tuple[np.ndarray, np.ndarray]:
        """Each distinct JobID's array job and task (None, None where it is no array task)."""
        if "array" not in self._values:
            self._text("JobID", 0, 0)
            ids = self._values["JobID"]
            jobs = np.full(len(ids), None, dtype=object)
            tasks = np.full(len(ids), None, dtype=object)
            for i, given in enumerate(ids.tolist()):
                if "_" in given and (array := _ARRAY_TASK.match(given)):
                    jobs[i], tasks[i] = array.group("job"), int(array.group("task"))
            self._values["array"], self._values["task"] = jobs, tasks
        return self._values["array"], self._values["task"]


NO_END = _NO_END = np.iinfo(np.int64).min
"""A running job's end, in :class:`_Block`'s wall clocks (:attr:`JobCodes.end`)."""


def _plain_batch(
    columns: Mapping[str, Coded], rows: int, tz: tzinfo
) -> tuple[np.ndarray, _Block, list[_Seen]]:
    """What each row of one batch is (:class:`_Plain`'s kinds), its jobs and each row's
    times, as :func:`_add` reads them."""
    zero = np.zeros(rows, dtype=np.int64)
    # JobID: a job's own id or an array task's (digits) plainly; the others as _add reads them
    col = columns["JobID"]
    plain_id = _shaped(col, under=True)
    ids: dict[int, str] = {}  # the other ids, stripped
    kind_of = np.where(plain_id, _Plain.JOB, _Plain.ODD).astype(np.int8)
    pending = np.zeros(len(plain_id), dtype=bool)
    odd = np.flatnonzero(~plain_id)
    for i, text in zip(odd.tolist(), col.texts(odd), strict=True):
        given = text.strip()
        if not given:
            continue  # "no JobID"
        if _STEP.match(given):
            kind_of[i] = _Plain.STEP
            continue
        kind_of[i] = _Plain.JOB
        pending[i] = bool(_ARRAY_PENDING.match(given))
        ids[i] = given
    id_codes = col.codes
    kind = kind_of[id_codes]
    # times: Start and End must be times (a step's need not), Submit's are noted where they are
    start_clock, end_clock = _clock_of(columns["Start"], tz), _clock_of(columns["End"], tz)
    start = _Seen.of(start_clock, columns["Start"].codes)
    end = _Seen.of(end_clock, columns["End"].codes)
    submit = _Seen.none(rows)
    if "Submit" in columns:
        submit = _Seen.of(_clock_of(columns["Submit"], tz), columns["Submit"].codes)
        submit.zone[submit.zone == _BAD] = _NONE  # a Submit that is no time is not noted
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
    nodes_of = None
    no_nodes = np.ones(rows, dtype=bool)
    if nodes_col is not None:
        nodes_of = _objects(map(_nodes, nodes_col.values), len(nodes_col.values))
        no_nodes = (nodes_of == "")[nodes_col.codes]
    # what each row is, in _add's order of checks
    job = kind == _Plain.JOB
    bad = job & ((start.zone == _BAD) | (end.zone == _BAD) | ~gres_ok[tres_codes])
    # a time with its own offset, or a start and an end in two zones: _add's to compare
    timed = (start.zone >= 0) & (end.zone >= 0)
    bad |= job & ((start.zone == _OFFSET) | (end.zone == _OFFSET))
    bad |= job & timed & (start.zone != end.zone)
    kind[bad] = _Plain.ODD
    job &= ~bad
    never = job & (pending[id_codes] | (start.zone == _NONE))
    maybe = job & ~never & no_gpus
    never |= maybe & no_nodes
    same = maybe & ~no_nodes & blank[tres_codes]  # a start that is its end: never started
    never[same] = (end.zone[same] == start.zone[same]) & (end.wall[same] == start.wall[same])
    kind[never] = _Plain.NEVER
    job &= ~never
    # the jobs: _run_span's
    at = np.flatnonzero(job)
    starts, ends = start.wall[at], end.wall[at]
    running = end.zone[at] == _NONE
    elapsed = np.full(len(at), -1, dtype=np.int64)
    if "ElapsedRaw" in columns:
        elapsed = _elapsed_of(columns["ElapsedRaw"])[columns["ElapsedRaw"].codes[at]]
    span = _Seen.none(rows)
    ran = running & (elapsed >= 0)
    span.wall[at[ran]] = starts[ran] + elapsed[ran]  # both under 10**18: no overflow
    span.zone[at[ran]] = start.zone[at[ran]]
    past = ran & (span.wall[at] > _LAST_S)
    if past.any():  # no time: _add names the row
        kind[at[past]] = _Plain.ODD
        span.zone[at[past]] = _NONE
        at, starts, ends, running, elapsed = (
            x[~past] for x in (at, starts, ends, running, elapsed)
        )
    # a requeued job's last run, where elapsed < end - start
    shorter = ~running & (elapsed >= 0) & (elapsed < ends - starts)
    starts[shorter] = ends[shorter] - elapsed[shorter]
    ends[running] = _NO_END
    gpus = _objects(map(_total, gres_of), len(gres_of))
    types = np.empty(len(gres_of), dtype=object)
    for i, g in enumerate(gres_of):  # one at a time: numpy would read a tuple as a row
        types[i] = tuple((k, v) for k, v in g.items() if k)
    kept = {name: c for name, c in columns.items() if name in _KEPT}
    block = _Block(
        kept,
        at,
        ids=ids,
        start=starts,
        end=ends,
        zone=start.zone[at],
        gpus=(gpus, types, tres_codes[at]),
        nodes=nodes_of,
        tz=tz,
    )
    # a step's times are noted as far as they are times; a bad row's are _add's
    end.zone[end.zone == _BAD] = _NONE
    start.zone[start.zone == _BAD] = _NONE
    return kind, block, [start, end, submit, span]


_KEPT = frozenset(
    {"JobID", "JobIDRaw", "JobName", "User", "Account", "Partition", "State", "NodeList", "Cluster"}
)
"""The text fields a job's values are made from (:class:`_Block`)."""


def _elapsed_of(col: Coded) -> np.ndarray:
    """Each distinct ``ElapsedRaw`` text as :func:`_digits` reads it (-1: None), by code."""
    whole = _shaped(col, under=False)
    out = np.full(len(whole), -1, dtype=np.int64)
    at = np.flatnonzero(whole)
    if len(at):
        out[at] = col.whole(at)
    odd = np.flatnonzero(~whole)
    for i, text in zip(odd.tolist(), col.texts(odd), strict=True):
        got = _digits(text)
        out[i] = -1 if got is None else got
    return out


def _shaped(col: Coded, *, under: bool) -> np.ndarray:
    """Whether each distinct text of ``col`` is ASCII digits (``_WHOLE``: 1 to 18 of them) or,
    ``under``, digits with at most one ``_`` between them (``^\\d+(_\\d+)?$``), by code,
    read from its bytes at once (:meth:`~reports.imports.arrow_csv.Coded.raw`)."""
    offsets, data = col.raw()
    lo, hi = offsets[:-1], offsets[1:]
    ok = hi > lo
    if not under:
        ok &= hi - lo <= 18
    first = int(offsets[0])
    at = np.flatnonzero((data[first : offsets[-1]] - np.uint8(48)) > 9) + first  # no digit
    if not len(at):
        return ok
    owner = np.searchsorted(offsets, at, side="right") - 1
    if not under:
        ok[owner] = False
        return ok
    mark = data[at] == 95  # "_"
    ok[owner[~mark]] = False
    at, owner = at[mark], owner[mark]
    twice = np.flatnonzero(owner[1:] == owner[:-1])
    ok[owner[twice]] = False
    ok[owner[(at == lo[owner]) | (at == hi[owner] - 1)]] = False  # first or last
    return ok


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
