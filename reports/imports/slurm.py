"""Jobs as Slurm's accounting records them (``sacct``): who held how many GPUs, where and when.

The first part of issue 27's import (``gpu-kpi import slurm``): this module reads what
``sacct`` writes, in either of its machine forms, into :class:`SlurmJob` records; joining them
with minute samples comes after. The forms:

- ``sacct -a -X -P --format=JobID,JobIDRaw,JobName,User,Account,Partition,State,Start,End,
  AllocTRES,NodeList`` (``--parsable2``: ``|`` between fields, a header line; every Slurm
  version has it). ``-p`` (a ``|`` after the last field too) is read as well, and so are the
  times of ``SLURM_TIME_FORMAT=%s`` (seconds since 1970). Other fields may be there, in any
  order; ``JobID``, ``Start``, ``End`` and ``AllocTRES`` (or, from a Slurm before TRES,
  ``AllocGRES``) must.
- ``sacct -a -X --json``: Slurm 22.05's ``openapi/dbv0.0.38`` (times as seconds, ``0`` for
  none; ``state.current`` a word) and the ``data_parser`` plugins of 23.02 and later (times as
  ``{"set": …, "number": …}``, ``state.current`` a list).

What is read of a job: its id as sacct shows it (``1234``; ``1234_7`` for task 7 of array job
1234; ``1234+0`` for a component of a heterogeneous job) and the allocation's own id
(``JobIDRaw``), the array job and task, name, user, account, partition, state (the first
word: ``CANCELLED by 0`` is ``CANCELLED``), start and end (None while it runs), the GPUs
allocated (``gres/gpu=N`` of ``AllocTRES``, else the sum of its typed ``gres/gpu:TYPE=N``;
per type as well) and the nodes.

Times without a zone (sacct's default ``2026-12-02T10:34:28``) are in the zone the caller
gives (sacct writes the local time of the machine it ran on). Rows that are no allocation are
left out and counted: steps (``1234.batch``, ``1234.extern``, ``1234.0``; ``-X`` leaves them
out of sacct's output itself), jobs that never started (pending, or cancelled before they
ran: ``Start`` ``Unknown``/``None``, no ``AllocTRES``) and the one row sacct writes for an
array's tasks still waiting (``1234_[3-9]``). A row that cannot be read (a time that is no
time, a count that is no number) is skipped with its line and reason; it never stops the
others. Input that is not sacct's output at all is an :class:`~reports.errors.ImportFailed`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from reports.errors import ImportFailed

REQUIRED = ("JobID", "Start", "End")
"""The ``--format`` fields a parsable file must have (and ``AllocTRES`` or ``AllocGRES``)."""
FORMAT = "Cluster,JobID,JobIDRaw,JobName,User,Account,Partition,State,Start,End,AllocTRES,NodeList"
"""The ``--format`` this import asks ``sacct`` for."""

_NO_TIME = frozenset({"", "Unknown", "None", "N/A"})
_ARRAY_TASK = re.compile(r"^(?P<job>\d+)_(?P<task>\d+)$")
_ARRAY_PENDING = re.compile(r"^\d+_\[.*\]$")
_STEP = re.compile(r"^[^.]+\.")


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
    """When the allocation began (timezone-aware)."""
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


@dataclass
class SacctRead:
    """What a read of sacct's output found."""

    jobs: list[SlurmJob] = field(default_factory=list)
    steps: int = 0
    """Rows of job steps, left out (``-X`` leaves them out of the output)."""
    not_started: int = 0
    """Jobs that never held their allocation (pending, or cancelled before they started)."""
    unreadable: list[Unreadable] = field(default_factory=list)


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


USAGE_FORMAT = "Cluster,JobID,JobIDRaw,ElapsedRaw,TRESUsageInAve"
"""What ``gpu-kpi import slurm`` asks sacct of the steps (no ``-X``)."""
_TRES_VALUE = re.compile(r"(?:^|,)(gres/gpuutil|gres/gpumem)=([^,]+)")
_MEM_UNITS = {"": 1 / 1024**3, "K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0}


def read_step_usage(text: str) -> dict[tuple[str, str], StepUsage]:
    """The steps' GPU averages in sacct's parsable output with ``TRESUsageInAve`` (and
    ``ElapsedRaw`` or ``Elapsed`` to weight them), per (cluster, job id); rows without a
    ``gres/gpuutil``, and the output of a site that gathers none, give nothing.

    Args:
        text: ``sacct -a -P --format=Cluster,JobID,JobIDRaw,ElapsedRaw,TRESUsageInAve``'s
            output (or any parsable output with those fields).
    """
    lines = text.lstrip("\ufeff \t\r\n").splitlines()
    if not lines or "TRESUsageInAve" not in lines[0]:
        return {}
    header = lines[0].rstrip("|").split("|")
    sums: dict[tuple[str, str], list[float]] = {}
    for line in lines[1:]:
        cells = line.split("|")
        if len(cells) == len(header) + 1 and cells[-1] == "":
            cells = cells[:-1]
        if len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        step = (row.get("JobIDRaw") or row.get("JobID") or "").strip()
        if "." not in step:
            continue
        found = dict(_TRES_VALUE.findall(row.get("TRESUsageInAve", "")))
        util = _float(found.get("gres/gpuutil", ""))
        seconds = _seconds(row)
        if util is None or seconds is None or seconds <= 0:
            continue
        mem = _gib(found.get("gres/gpumem", ""))
        key = (row.get("Cluster", "").strip(), step.split(".", 1)[0])
        acc = sums.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0.0])
        acc[0] += seconds
        acc[1] += util * seconds
        acc[2] += 1
        if mem is not None:
            acc[3] = max(acc[3], mem)
            acc[4] = 1
    return {
        key: StepUsage(
            cluster=key[0],
            job_id=key[1],
            util_pct=acc[1] / acc[0],
            mem_gib=acc[3] if acc[4] else None,
            steps=int(acc[2]),
            seconds=acc[0],
        )
        for key, acc in sums.items()
    }


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
    raw = row.get("ElapsedRaw", "").strip()
    if raw.isdigit():
        return float(raw)
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", row.get("Elapsed", "").strip())
    if not m:
        return None
    d, h, mi, sec = (int(x) if x else 0 for x in m.groups())
    return float(((d * 24 + h) * 60 + mi) * 60 + sec)


def read_sacct(text: str, *, tz: tzinfo) -> SacctRead:
    """The allocations in sacct's output, parsable (``-P``/``-p``) or JSON (``--json``).

    Args:
        text: The whole output.
        tz: The zone of the times written without one (the zone of the machine sacct ran on).

    Returns:
        The jobs, and what was left out.

    Raises:
        ImportFailed: The text is not sacct's output: not its JSON, no header line with
            ``JobID``, ``Start``, ``End`` and ``AllocTRES``/``AllocGRES``.
    """
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{"):
        return _read_json(stripped, tz)
    return _read_parsable(stripped.splitlines(), tz)


# -- the parsable form ----------------------------------------------------------------------------
def _read_parsable(lines: list[str], tz: tzinfo) -> SacctRead:
    if not lines or "|" not in lines[0]:
        raise ImportFailed(
            "not sacct output: expected `sacct -P --format=...` (fields separated by |, a "
            "header line) or `sacct --json`"
        )
    header = lines[0].split("|")
    if header and header[-1] == "":  # -p: a | after the last field
        header = header[:-1]
    missing = [f for f in REQUIRED if f not in header]
    if "AllocTRES" not in header and "AllocGRES" not in header:
        missing.append("AllocTRES")
    if missing:
        raise ImportFailed(
            f"sacct output without {', '.join(missing)}: run sacct with --format={FORMAT}"
        )
    out = SacctRead()
    width = len(header)
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) == width + 1 and cells[-1] == "":
            cells = cells[:-1]
        if len(cells) != width:
            out.unreadable.append(
                Unreadable(f"line {n}", f"{len(cells)} fields where the header has {width}")
            )
            continue
        row = dict(zip(header, cells, strict=True))
        try:
            _add(out, row, tz, gres=_gres_of_row(row))
        except ValueError as e:
            out.unreadable.append(Unreadable(f"line {n}", str(e)))
    return out


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
    if not value.isdigit():
        raise ValueError(f"{key} is not a count: {value!r}")
    return int(value)


def _time(text: str, tz: tzinfo, what: str) -> datetime | None:
    text = text.strip()
    if text in _NO_TIME:
        return None
    if text.isdigit():  # SLURM_TIME_FORMAT=%s
        return datetime.fromtimestamp(int(text), tz=UTC)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{what} is not a time: {text!r}") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=tz)


def _add(out: SacctRead, row: Mapping[str, str], tz: tzinfo, *, gres: dict[str, int]) -> None:
    """A row of the parsable form, as a job, a step or a job that never started."""
    job_id = row["JobID"].strip()
    if not job_id:
        raise ValueError("no JobID")
    if _STEP.match(job_id):
        out.steps += 1
        return
    start = _time(row["Start"], tz, "Start")
    end = _time(row["End"], tz, "End")
    if _ARRAY_PENDING.match(job_id) or start is None or (not gres and _never_ran(row, start, end)):
        out.not_started += 1
        return
    array = _ARRAY_TASK.match(job_id)
    out.jobs.append(
        SlurmJob(
            job_id=job_id,
            raw_id=row.get("JobIDRaw", "").strip() or job_id,
            name=row.get("JobName", ""),
            user=row.get("User", ""),
            account=row.get("Account", ""),
            partition=row.get("Partition", ""),
            state=row.get("State", "").split(" ", 1)[0],
            start=start,
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


_HOSTLIST_PART = re.compile(r"([^\[]*)\[([^\]]*)\](.*)")
MAX_HOSTS = 65_536
"""The most host names one node list expands to (a larger one is no real job's)."""


def expand_nodes(text: str) -> tuple[str, ...]:
    """The host names of a Slurm node list (``gpu[01-03,07],cpu1`` →
    ``gpu01 gpu02 gpu03 gpu07 cpu1``; ``r[1-2]n[1-2]`` → four), in order, without repeats;
    zero-padded ranges keep their width.

    Args:
        text: The node list as sacct writes it (``NodeList``; in JSON ``nodes``).

    Raises:
        ValueError: A bracket that does not close, a range that is not one, or a list of more
            than :data:`MAX_HOSTS` hosts.
    """
    out: dict[str, None] = {}
    for part in _split_top(_nodes(text)):
        for host in _expand_one(part):
            out[host] = None
            if len(out) > MAX_HOSTS:
                raise ValueError(f"node list of more than {MAX_HOSTS} hosts")
    return tuple(out)


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


def _expand_one(part: str) -> list[str]:
    m = _HOSTLIST_PART.fullmatch(part)
    if m is None:
        if "[" in part or "]" in part:
            raise ValueError(f"node list {part!r}: a bracket that does not close")
        return [part]
    head, ranges, tail = m.groups()
    names = []
    for r in ranges.split(","):
        lo, sep, hi = r.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) < int(lo)):
            raise ValueError(f"node list {part!r}: {r!r} is no range")
        if sep and int(hi) - int(lo) > MAX_HOSTS:
            raise ValueError(f"node list of more than {MAX_HOSTS} hosts")
        width = len(lo) if lo.startswith("0") else 0
        names += [f"{head}{n:0{width}d}" for n in range(int(lo), int(hi if sep else lo) + 1)]
    rest = _expand_one(tail) if tail else [""]
    return [n + t for n in names for t in rest]


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
            start=start,
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
