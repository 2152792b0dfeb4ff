"""Jobs as Slurm's accounting records them (``sacct``): who held how many GPUs, where and when.

The first part of issue 27's import (``gpu-kpi import slurm``): this module reads what
``sacct`` writes, in either of its machine forms, into :class:`SlurmJob` records; joining them
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
others. Input that is not sacct's output at all is an :class:`~reports.errors.ImportFailed`.
The parsable form is read a line at a time (:func:`read_sacct_stream`): memory holds the jobs
kept, not the output.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import IO, Any

from reports.errors import ImportFailed

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
"""The largest JSON output read (it is read whole; the parsable form is read a line at a
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

    jobs: list[SlurmJob] = field(default_factory=list)
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
    lines = _numbered(_text_lines(text))
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
    return _read_parsable(_numbered(_text_lines(stripped)), tz, delimiter)


def read_sacct_stream(stream: IO[bytes], *, tz: tzinfo) -> SacctRead:
    """:func:`read_sacct` of a file or a pipe, the parsable form a line at a time: memory holds
    the jobs kept, not the output (the JSON form is read whole, up to
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
    return _read_parsable(_numbered(_stream_lines(whole), start=blank_lines + 1), tz, None)


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


def _text_lines(text: str) -> Iterator[str | None]:
    """:func:`_stream_lines` of a text already read."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        line = text[start:end]
        start = end + 1
        if len(line) > MAX_LINE_BYTES:
            yield None
        else:
            yield line.removesuffix("\r")


def _numbered(lines: Iterable[str | None], start: int = 1) -> Iterator[tuple[int, str | None]]:
    return enumerate(lines, start=start)


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
        at, row = 0, None
        for n, line in lines:
            if line is None:
                if row is not None:
                    yield self._done(at, row)
                at, row = 0, None
                yield n, f"a line of over {MAX_LINE_BYTES:,} bytes"
                continue
            if not line.strip():
                continue
            if row is not None and self._goes_on(row, line):
                if len(row) + len(line) > MAX_LINE_BYTES:
                    yield at, f"a row of over {MAX_LINE_BYTES:,} bytes"
                    at, row = 0, None
                else:
                    row += "\n" + line
                continue
            if row is not None:
                yield self._done(at, row)
            at, row = n, line
        if row is not None:
            yield self._done(at, row)

    def _done(self, n: int, text: str) -> tuple[int, list[str] | str]:
        cells = self.cells(text)
        if cells is None:
            return n, f"{self._fields(text)} fields where the header has {self.width}"
        return n, cells


def _read_parsable(
    lines: Iterator[tuple[int, str | None]], tz: tzinfo, delimiter: str | None
) -> SacctRead:
    first = next(((n, line) for n, line in lines if line is None or line.strip()), None)
    if first is None or first[1] is None:
        raise ImportFailed(_NOT_SACCT)
    table = _Table(first[1].lstrip("\ufeff \t"), delimiter)
    header = table.names
    missing = [f for f in REQUIRED if f not in header]
    if "AllocTRES" not in header and "AllocGRES" not in header:
        missing.append("AllocTRES")
    if missing:
        raise ImportFailed(
            f"sacct output without {', '.join(missing)}: run sacct with --format={FORMAT}"
        )
    out = SacctRead()
    usage = _UsageSums() if "TRESUsageInAve" in header else None
    times = _Times(out, tz)
    for n, got in table.rows(lines):
        if isinstance(got, str):
            out.unreadable.append(Unreadable(f"line {n}", got))
            continue
        row = dict(zip(header, got, strict=True))
        try:
            _add(out, row, times)
        except ValueError as e:
            out.unreadable.append(Unreadable(f"line {n}", str(e)))
        if usage is not None:
            usage.add(row)
    out.usage = usage.result() if usage is not None else {}
    return out


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
    out: SacctRead, start: datetime, end: datetime | None, elapsed_s: int | None
) -> datetime:
    """The start of the allocation's own run: for an ended job whose elapsed time is shorter
    than end − start (requeued: its last run), end − elapsed; a running job's start plus its
    elapsed time is a time of the output."""
    if elapsed_s is None or elapsed_s < 0:
        return start
    if end is None:
        out.saw(start + timedelta(seconds=elapsed_s))
        return start
    if elapsed_s < (end - start).total_seconds():
        return end - timedelta(seconds=elapsed_s)
    return start


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
            start=_run_span(out, start, end, _number(time.get("elapsed"))),
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
