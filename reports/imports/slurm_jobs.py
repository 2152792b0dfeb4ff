"""``gpu-kpi import slurm``: Slurm's jobs into the store's allocations
(:mod:`reports.data.allocations`), from sacct's output saved in files (or ``-``, standard
input) or from running ``sacct`` here for a range.

Running sacct, the import asks for ``sacct -a -X -P --format=…`` one window of days at a
time (a year of a busy cluster does not fit in memory at once: ``bench/sacct_read.py``), with
``SLURM_TIME_FORMAT=%s`` (times as seconds since 1970: no zone to guess) and ``TZ=UTC`` (the
range's bounds read as UTC). A job running across windows is in each; its last row wins.

sacct writes a job's name as its user gave it, so a name can hold ``|`` and line breaks: any
user could cut their job's row, or write a row of their own into the output. Each run of
sacct is given a ``--delimiter`` of 16 random hex digits between two ``|``, which no name
submitted before it can hold, and ``JobName`` last, where what a name holds can only lengthen
the name. (``--json`` would escape the name too, but needs Slurm's ``openapi`` plugins and
holds a window's jobs in memory at several times the size: ``bench/sacct_read.py``.)

A job's GPUs are bounded by its nodes': over their GPUs as sinfo shows them (running sacct),
else over :data:`MAX_GPUS_PER_NODE` a node, a job is skipped and named (:func:`over_capacity`).

All or nothing: every job read is written in one transaction, or none (a store that cannot be
written, an input that is not sacct's). A row that cannot be read is left out and named.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import secrets
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from reports.errors import ImportFailed, UsageError
from reports.imports.slurm import (
    FORMAT,
    LOCAL,
    MAX_INPUT_BYTES,
    NO_END,
    USAGE_FORMAT,
    UTC_ZONE,
    JobCodes,
    SacctRead,
    StepUsage,
    Unreadable,
    expand_nodes,
    read_sacct,
    read_sacct_stream,
    read_step_usage,
)
from tracker.prices import canonical_gpu, gpu_keys
from tracker.text import one_line
from tracker.units import WHOLE_S_PER_DAY

if TYPE_CHECKING:
    from reports.rows import Allocation, Capacity

WINDOW = timedelta(days=7)
"""Days of accounting asked of sacct at a time."""
SACCT_TIMEOUT_S = 600.0
MAX_GPUS = 1_000_000
"""The most GPUs one job can hold (the store's check too: more is no real job)."""
MAX_GPUS_PER_NODE = 64
"""The most GPUs a node whose GPUs are not known can hold (8 on most GPU servers today)."""


def over_capacity(gpus: int, hosts: Sequence[str], node_gpus: Mapping[str, int]) -> str | None:
    """Why a holding of ``gpus`` GPUs on ``hosts`` is no real one (more than its nodes have:
    a Slurm job's ``AllocTRES``, a pod's request, written by anyone who can write them), or
    None.

    Args:
        gpus: The GPUs held.
        hosts: Its nodes (none: one node not named).
        node_gpus: Each node's GPUs where known (sinfo, ``kube_node_status_capacity``); a
            node not in it is bounded by :data:`MAX_GPUS_PER_NODE`.
    """
    known = [node_gpus[h] for h in hosts if h in node_gpus]
    unknown = len(hosts) - len(known) if hosts else 1
    bound = sum(known) + unknown * MAX_GPUS_PER_NODE
    if gpus <= bound:
        return None
    has = [f"{sum(known):,} GPUs known"] if known else []
    has += [f"{MAX_GPUS_PER_NODE} a node whose GPUs are not known"] if unknown else []
    nodes = f"{len(hosts)} node(s)" if hosts else "a node"
    return f"{gpus:,} GPUs on {nodes} that hold at most {bound:,} ({', '.join(has)})"


@dataclass
class SlurmImported:
    """What ``gpu-kpi import slurm`` found and wrote."""

    jobs: list[Allocation] = field(default_factory=list)
    steps: int = 0
    not_started: int = 0
    unreadable: list[Unreadable] = field(default_factory=list)
    """Rows left out, each with where it was (``FILE line 7``) and why."""
    sacct_runs: int = 0
    """Windows asked of sacct (0: files)."""
    capacity: list[Capacity] = field(default_factory=list)
    """The nodes' GPUs as sinfo showed them at the import, over its range (running sacct)."""
    usage: list[StepUsage] = field(default_factory=list)
    """Jobs' step averages of ``gres/gpuutil`` where the site gathers them."""
    notes: list[str] = field(default_factory=list)
    types: dict[str, str | None] = field(default_factory=dict)
    """Each gres type of the jobs read (the one holding most of a job's GPUs), and the model
    it was read as (:func:`model_of_type`)."""
    unnamed: dict[str, Allocation] = field(default_factory=dict, repr=False)
    """The jobs read without a cluster, by id: another job of the same id read without one is
    refused (two clusters' outputs would make one job)."""


def parse_account_teams(given: Sequence[str]) -> dict[str, str]:
    """``--account-team ACCOUNT=TEAM`` options as a map.

    Raises:
        UsageError: An item without ``=``, an empty side, or an account given twice.
    """
    out: dict[str, str] = {}
    for item in given:
        account, eq, team = item.partition("=")
        if not eq or not account.strip() or not team.strip():
            raise UsageError(f"--account-team {item!r}: ACCOUNT=TEAM")
        if account.strip() in out:
            raise UsageError(f"--account-team {account.strip()}= given twice")
        out[account.strip()] = team.strip()
    return out


def model_of_type(kind: str, gres_models: Mapping[str, str] | None = None) -> str | None:
    """The price table's model of a gres type: the site's own name for it where ``[slurm]
    gres_models`` has one (``a100`` → ``A100-80GB``: a type name often says no size), else
    the table's reading of the name (``h100`` → ``H100``); None where neither knows it.

    Args:
        kind: The gres type (``gres/gpu:TYPE``, sinfo's ``gpu:TYPE:N``).
        gres_models: ``[slurm] gres_models``: type → model (a key of the price table).
    """
    mapped = (gres_models or {}).get(kind) or (gres_models or {}).get(kind.lower())
    return canonical_gpu(mapped or kind)


def owned_type_notes(
    types: Mapping[str, str | None],
    owned: Collection[str],
    gres_models: Mapping[str, str] | None = None,
) -> list[str]:
    """A line for each gres type read as a model the site does not own where it owns one of
    the same family (``a100`` → A100-40GB beside ``[owned.A100-80GB]``) and ``[slurm]
    gres_models`` does not name it: the same GPUs would count twice, as rented under their jobs
    and as owned capacity nobody held. A job's own samples still say its model.

    Args:
        types: gres type → the model it was read as (:attr:`SlurmImported.types`).
        owned: The config's owned models (``[owned.<MODEL>]``).
        gres_models: ``[slurm] gres_models``.
    """
    mine = {canonical_gpu(m) or m for m in owned}
    named = {k.lower() for k in gres_models or {}}
    notes = []
    for kind, model in sorted(types.items()):
        if model is None or model in mine or kind.lower() in named:
            continue
        same = sorted(m for m in mine if _family(m) == _family(model))
        if same:
            notes.append(
                f"gres type {kind!r} read as {model}, but [owned] has {same[0]}: if they are "
                f"the same GPUs, add [slurm] gres_models = {{ {json.dumps(kind)} = "
                f'"{same[0]}" }} to the config, or their jobs are priced as rented {model} '
                "while the owned GPUs count as capacity nobody held"
            )
    return notes


def _family(model: str) -> str:
    """A model's family: its base model without a memory size (A100-40GB, A100-80GB: A100)."""
    return re.sub(r"-\d+GB$", "", gpu_keys(model)[-1])


def _main_type(gpu_types: tuple[tuple[str, int], ...]) -> str:
    """The gres type holding most of a job's GPUs (the first of those that hold as many)."""
    return max(gpu_types, key=lambda t: t[1])[0]


CLOCK_SLACK = timedelta(days=1)
"""How far past the output's own time (its last time, the file's last change, now) a job's time
may be and still be read: a clock or a time zone off by hours. Later is a bad row."""


def allocations_of(
    read: SacctRead,
    *,
    where: str,
    seen_at: datetime,
    cluster: str,
    teams: Mapping[str, str],
    out: SlurmImported,
    gres_models: Mapping[str, str] | None = None,
    node_gpus: Mapping[str, int] | None = None,
) -> None:
    """The jobs of one read as allocations into ``out`` (its counts raised too). The block
    reader's jobs are taken as it holds them (:class:`reports.imports.slurm.JobCodes`): each
    check asked once per distinct value (a node list, a TRES list) or of all jobs at once as
    numbers (the times), and a Python value made only for what an allocation holds.

    Args:
        read: What :func:`reports.imports.slurm.read_sacct` found.
        where: The input's name, for the rows left out.
        seen_at: When the output was written (a running job counts to then).
        cluster: The cluster of jobs whose output names none.
        teams: Account → team (an account not in it is its own team).
        out: Where the allocations and counts go.
        gres_models: ``[slurm] gres_models`` (:func:`model_of_type`).
        node_gpus: Each node's GPUs where known (:func:`over_capacity`).
    """
    out.steps += read.steps
    out.not_started += read.not_started
    out.unreadable += [Unreadable(f"{where} {u.where}", u.reason) for u in read.unreadable]
    ask = _Asked(where, seen_at, cluster, teams, gres_models, node_gpus or {})
    for part in read.jobs.parts():
        if not isinstance(part, JobCodes):
            _lists_into(part, ask, out)
        elif not _coded_into(part, ask, out):
            _lists_into(part.lists(), ask, out)


@dataclass
class _Asked:
    """:func:`allocations_of`'s arguments, and what it found of each distinct value: a node
    list's hosts (or why none), a gres list's type and model."""

    where: str
    seen_at: datetime
    cluster: str
    teams: Mapping[str, str]
    gres_models: Mapping[str, str] | None
    node_gpus: Mapping[str, int]
    hosts_of: dict[str, tuple[str, ...] | str] = field(default_factory=dict)
    """A node list expanded once (or why not)."""
    bounds: dict[tuple[int, str], str | None] = field(default_factory=dict)
    """:func:`over_capacity` of (GPUs, node list)."""
    models: dict[tuple[tuple[str, int], ...], tuple[str, str | None]] = field(default_factory=dict)
    """The main type and its model of a job's types."""

    @functools.cached_property
    def seen(self) -> str:
        """:attr:`seen_at` as a reason names it."""
        return self.seen_at.isoformat(timespec="minutes")

    @property
    def latest(self) -> datetime:
        """The latest time a job may hold (:data:`CLOCK_SLACK` past the output's own)."""
        return self.seen_at + CLOCK_SLACK

    def hosts(self, nodes: str) -> tuple[str, ...] | str:
        """The hosts of a node list, or why it names none."""
        hosts = self.hosts_of.get(nodes)
        if hosts is None:
            try:
                hosts = self.hosts_of[nodes] = expand_nodes(nodes)
            except ValueError as e:
                hosts = self.hosts_of[nodes] = str(e)
        return hosts

    def model(self, gpu_types: tuple[tuple[str, int], ...]) -> tuple[str, str | None]:
        """The type holding most of a job's GPUs, and the price table's model of it; none
        named: ("", None)."""
        if gpu_types not in self.models:
            main = _main_type(gpu_types) if gpu_types else ""
            model = model_of_type(main, self.gres_models) if gpu_types else None
            self.models[gpu_types] = (main, model)
        return self.models[gpu_types]

    def too_many(self, gpus: int, nodes: str, hosts: tuple[str, ...]) -> str | None:
        """:func:`over_capacity` of a job's GPUs on its nodes, asked once a pair."""
        got = self.bounds.get((gpus, nodes), "")
        if got == "":
            got = self.bounds[gpus, nodes] = over_capacity(gpus, hosts, self.node_gpus)
        return got


def _lists_into(c: Mapping[str, Sequence[Any]], ask: _Asked, out: SlurmImported) -> None:
    """Jobs held as lists by field (:attr:`reports.imports.slurm.SlurmJobs.columns`' values)
    into ``out``, a job at a time."""
    from reports.data.allocations import same_job
    from reports.rows import Allocation

    where, seen_at, latest, seen = ask.where, ask.seen_at, ask.latest, ask.seen
    names = ("job_id", "raw_id", "name", "user", "account", "partition", "state", "start", "end")
    for (job_id, raw_id, name, user, account, partition, state, start, end), more in zip(
        zip(*(c[k] for k in names), strict=True),
        zip(c["gpus"], c["gpu_types"], c["nodes"], c["cluster"], strict=True),
        strict=True,
    ):
        gpus, gpu_types, nodes, job_cluster = more
        try:
            hosts = ask.hosts(nodes)
            if isinstance(hosts, str):
                raise ValueError(hosts)
            if not 0 <= gpus <= MAX_GPUS:
                raise ValueError(f"{gpus} GPUs: not from 0 to {MAX_GPUS:,}")
            too_many = ask.too_many(gpus, nodes, hosts)
            if too_many is not None:
                raise ValueError(too_many)
            if end is not None and end < start:
                raise ValueError(f"ends ({end.isoformat()}) before it starts")
            last = end or start
            if last > latest:  # End=9999-12-31: 139,781,550 GPU-h of one job
                raise ValueError(_after_output(last, end is not None, seen))
        except ValueError as e:
            out.unreadable.append(Unreadable(f"{where} job {job_id}", str(e)))
            continue
        kind, model = ask.model(gpu_types)
        allocation = Allocation(
            source="slurm",
            cluster=job_cluster or ask.cluster,
            job_id=raw_id,
            shown_id=job_id,
            name=name,
            user=user,
            account=account,
            team=ask.teams.get(account, account),
            partition=partition,
            state=state,
            start_at=start,
            end_at=end,
            seen_at=max(seen_at, start),
            gpus=gpus,
            gpu_model=model,
            hosts=hosts,
        )
        if not allocation.cluster:
            before = out.unnamed.setdefault(allocation.job_id, allocation)
            if not same_job(before, allocation):
                out.unreadable.append(
                    Unreadable(
                        f"{where} job {job_id}",
                        f"another job {raw_id} than the one read before (user "
                        f"{before.user!r}, started {before.start_at.isoformat()}), and no "
                        "cluster named: import each cluster's output with --cluster NAME",
                    )
                )
                continue
        out.jobs.append(allocation)
        if gpu_types:
            out.types[kind] = model


def _after_output(last: datetime, ended: bool, seen: str) -> str:
    """Why a job whose start or end (``last``) is past the output's own time (``seen``: its
    :attr:`_Asked.seen`) is left out."""
    return (
        f"{'ends' if ended else 'starts'} {last.isoformat()}, after the output's own time ({seen})"
    )


_DAY_S = WHOLE_S_PER_DAY
"""Seconds of a day: no zone is a day or more from UTC (a time's wall clock is within it)."""


def _coded_into(jobs: JobCodes, ask: _Asked, out: SlurmImported) -> bool:
    """A batch's jobs (:class:`JobCodes`) into ``out``, as :func:`_lists_into` reads them:
    each node list, gres list and (GPUs, node list) asked once, the times compared as
    numbers (as datetimes near the output's own time, in a zone of their own); False (and
    nothing taken) where a job's cluster is not known, whose id is checked against the jobs
    read before, a job at a time."""
    from reports.rows import Allocation

    texts = jobs.texts
    clusters = [c or ask.cluster for c in texts["cluster"][0].tolist()]
    cluster_codes = texts["cluster"][1]
    if not all(clusters[c] for c in np.unique(cluster_codes).tolist()):
        return False
    node_values, node_codes = texts["nodes"]
    gpu_values, gres_codes = texts["gpus"]
    # each distinct node list's hosts, and each distinct gres list's GPUs, once
    hosts = [ask.hosts(x) for x in node_values.tolist()]
    gpus = gpu_values.tolist()
    why: dict[int, str] = {}  # job -> why it is left out (the first check it fails)
    hosts_bad = np.array([isinstance(h, str) for h in hosts], dtype=bool)[node_codes]
    for i in np.flatnonzero(hosts_bad).tolist():
        why[i] = str(hosts[node_codes[i]])
    gpus_bad = np.array([not 0 <= g <= MAX_GPUS for g in gpus], dtype=bool)[gres_codes]
    for i in np.flatnonzero(gpus_bad & ~hosts_bad).tolist():
        why[i] = f"{gpus[gres_codes[i]]} GPUs: not from 0 to {MAX_GPUS:,}"
    ok = ~(hosts_bad | gpus_bad)
    # over the nodes' GPUs: asked once per (gres list, node list) pair
    pairs = gres_codes[ok].astype(np.int64) * len(hosts) + node_codes[ok]
    found, first = np.unique(pairs, return_index=True)
    over = np.zeros(len(found), dtype=bool)
    said: list[str | None] = []
    for k, j in enumerate(np.flatnonzero(ok)[first].tolist()):
        g, node = gpus[gres_codes[j]], node_codes[j]
        said.append(ask.too_many(g, node_values[node], hosts[node]))
        over[k] = said[-1] is not None
    if over.any():
        rank = np.searchsorted(found, pairs)
        at = np.flatnonzero(ok)
        for i, k in zip(at[over[rank]].tolist(), rank[over[rank]].tolist(), strict=True):
            why[i] = str(said[k])
        ok[at[over[rank]]] = False
    # the times: an end before the start (one zone: their wall clocks), and a time past the
    # output's own
    ended = jobs.end != NO_END
    backwards = ok & ended & (jobs.end < jobs.start)
    at = np.flatnonzero(backwards)
    for i, end in zip(at.tolist(), jobs.times(at, end=True), strict=True):
        assert end is not None
        why[i] = f"ends ({end.isoformat()}) before it starts"
    ok &= ~backwards

    def last(at: np.ndarray) -> list[datetime]:
        """The ends of jobs ``at`` that ended, the starts of the others."""
        made = np.empty(len(at), dtype=object)
        done = ended[at]
        made[done] = _objects(jobs.times(at[done], end=True))
        made[~done] = _objects(jobs.times(at[~done]))
        return list(made)

    at = np.flatnonzero(ok)
    last_wall = np.where(ended, jobs.end, jobs.start)[at]
    late = at[_past(last_wall, jobs.zone[at], jobs.tz, ask.latest, lambda k: last(at[k]))]
    for i, t in zip(late.tolist(), last(late), strict=True):
        why[i] = _after_output(t, bool(ended[i]), ask.seen)
    ok[late] = False
    if why:
        shown = jobs.values("job_id")
        out.unreadable += [Unreadable(f"{ask.where} job {shown[i]}", why[i]) for i in sorted(why)]
    # the allocations: each field's values of the jobs kept
    keep = np.flatnonzero(ok)
    if not len(keep):
        return True
    starts = jobs.times(keep)
    ends = jobs.times(keep, end=True)
    account_values, account_codes = texts["account"]
    teams = _objects([ask.teams.get(a, a) for a in account_values.tolist()])
    kinds_models = [ask.model(t) for t in texts["gpu_types"][0].tolist()]
    models = _objects([m for _, m in kinds_models])
    host_values = _objects(hosts)
    later = _past(
        jobs.start[keep], jobs.zone[keep], jobs.tz, ask.seen_at, lambda k: [starts[i] for i in k]
    )  # seen at its start where that is later
    first_seen = [t if a else ask.seen_at for t, a in zip(starts, later.tolist(), strict=True)]
    kept = gres_codes[keep]
    columns = (
        ["slurm"] * len(keep),
        _objects(clusters)[cluster_codes[keep]].tolist(),
        texts["raw_id"][0][texts["raw_id"][1][keep]].tolist(),
        *(
            texts[name][0][texts[name][1][keep]].tolist()
            for name in ("job_id", "name", "user", "account")
        ),
        teams[account_codes[keep]].tolist(),
        *(texts[name][0][texts[name][1][keep]].tolist() for name in ("partition", "state")),
        starts,
        ends,
        first_seen,
        gpu_values[kept].tolist(),
        models[kept].tolist(),
        host_values[node_codes[keep]].tolist(),
    )
    names = [f.name for f in dataclasses.fields(Allocation)]  # the columns' order
    new, append = Allocation.__new__, out.jobs.append
    for row in zip(*columns, strict=True):
        allocation = new(Allocation)  # its fields set without __init__'s 16 arguments
        allocation.__dict__.update(zip(names, row, strict=True))
        append(allocation)
    # each type read (the one holding most of a job's GPUs), in the order of the jobs
    typed = np.array([bool(t) for t in texts["gpu_types"][0].tolist()], dtype=bool)
    codes, at = np.unique(kept, return_index=True)
    for code in codes[np.argsort(at)].tolist():
        if typed[code]:
            kind, model = kinds_models[code]
            out.types[kind] = model
    return True


def _objects(values: Sequence[Any]) -> np.ndarray:
    """``values`` as a numpy array of objects (a tuple one value), to be taken by codes."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _past(
    wall: np.ndarray,
    zone: np.ndarray,
    tz: tzinfo,
    bound: datetime,
    made: Callable[[np.ndarray], list[datetime]],
) -> np.ndarray:
    """Which times (``wall`` clock seconds in ``zone``: :data:`LOCAL`, ``tz``, or UTC) are
    after ``bound``, as datetimes compare: one of ``bound``'s own zone by its wall clock, of
    another by its instant. Where that is a number's comparison (UTC's, or ``bound``'s zone),
    as numbers; a time of another zone within a day of ``bound`` as the datetime ``made`` of
    its index makes."""
    past = np.zeros(len(wall), dtype=bool)
    instant_s = (bound - _EPOCH) // timedelta(microseconds=1) // 1_000_000
    own_s = (bound.replace(tzinfo=None) - _NAIVE_EPOCH) // timedelta(microseconds=1) // 1_000_000
    for kind, zone_tz in ((UTC_ZONE, UTC), (LOCAL, tz)):
        these = zone == kind
        if not these.any():
            continue
        # a whole second (the times read) after a bound of microseconds: after its second
        if zone_tz is bound.tzinfo:
            past |= these & (wall > own_s)
        elif zone_tz is UTC:
            past |= these & (wall > instant_s)
        else:  # an offset of under a day from UTC: further than that, as numbers
            past |= these & (wall > instant_s + _DAY_S)
            near = np.flatnonzero(
                these & (wall >= instant_s - _DAY_S) & (wall <= instant_s + _DAY_S)
            )
            if len(near):
                past[near] = [t > bound for t in made(near)]
    return past


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)


def read_files(
    paths: Sequence[str],
    *,
    tz: tzinfo,
    cluster: str,
    teams: Mapping[str, str],
    now: datetime,
    gres_models: Mapping[str, str] | None = None,
) -> SlurmImported:
    """sacct's output saved in files (``-``: standard input), each read a block at a time
    (:func:`reports.imports.slurm.read_sacct_stream`); ``gres_models``: ``[slurm]
    gres_models`` (:func:`model_of_type`).

    A running job in saved output counts up to the output's own time: its latest time
    (:attr:`reports.imports.slurm.SacctRead.latest`), no later than the file's last change
    or ``now``; a file saved in 2024 and imported today is not running today.

    Raises:
        ImportFailed: A file that cannot be read, or is not sacct's output.
    """
    import sys

    out = SlurmImported()
    for name in paths:
        try:
            if name == "-":
                read = read_sacct_stream(sys.stdin.buffer, tz=tz)
                written = now
            else:
                path = Path(name)
                if path.stat().st_size > MAX_INPUT_BYTES:
                    raise ImportFailed("over 4 GiB: give sacct's output a month at a time")
                with path.open("rb") as f:
                    read = read_sacct_stream(f, tz=tz)
                    written = datetime.fromtimestamp(os.fstat(f.fileno()).st_mtime, UTC)
        except OSError as e:
            raise ImportFailed(f"{name}: {e.strerror or e}") from None
        except ImportFailed as e:
            raise ImportFailed(f"{name}: {e}") from None
        seen = min(now, written, read.latest or now)
        out.usage += read.usage.values()  # saved without -X, with TRESUsageInAve
        allocations_of(
            read,
            where=name,
            seen_at=seen,
            cluster=cluster,
            teams=teams,
            out=out,
            gres_models=gres_models,
        )
    return _last_rows(out)


def run_sacct(
    since: datetime,
    until: datetime,
    *,
    cluster: str,
    teams: Mapping[str, str],
    now: datetime,
    sacct: str = "sacct",
    window: timedelta = WINDOW,
    gres_models: Mapping[str, str] | None = None,
    node_gpus: Mapping[str, int] | None = None,
) -> SlurmImported:
    """Ask this machine's ``sacct`` for the jobs that held an allocation in ``[since, until)``,
    a window at a time; ``gres_models``: ``[slurm] gres_models`` (:func:`model_of_type`);
    ``node_gpus``: each node's GPUs where known (:func:`over_capacity`).

    Raises:
        ImportFailed: sacct is not installed, fails or times out (its message, one line).
    """
    out = SlurmImported()
    start = since
    while start < until:
        end = min(start + window, until)
        first = start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        last = end.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        delimiter = unguessable()
        text = _sacct(sacct, ["-S", first, "-E", last], f"{first} to {last}", delimiter=delimiter)
        steps = _sacct(
            sacct, ["-S", first, "-E", last], f"steps {first} to {last}", form=USAGE_FORMAT
        )
        out.usage += read_step_usage(steps).values()
        out.sacct_runs += 1
        if text.strip():
            read = read_sacct(text, tz=UTC, delimiter=delimiter)
            allocations_of(
                read,
                where=f"sacct {first}",
                seen_at=now,
                cluster=cluster,
                teams=teams,
                out=out,
                gres_models=gres_models,
                node_gpus=node_gpus,
            )
        start = end
    return _last_rows(out)


def sacct_job(
    job_id: str,
    *,
    cluster: str,
    now: datetime,
    teams: Mapping[str, str] | None = None,
    sacct: str = "sacct",
    gres_models: Mapping[str, str] | None = None,
) -> SlurmImported:
    """One job from this machine's ``sacct -j JOBID`` (a job ending now: ``gpu-kpi job``);
    ``gres_models``: ``[slurm] gres_models`` (:func:`model_of_type`).

    Raises:
        ImportFailed: sacct is not installed, fails or times out.
    """
    delimiter = unguessable()
    text = _sacct(sacct, ["-j", job_id], f"job {job_id}", delimiter=delimiter)
    out = SlurmImported(sacct_runs=1)
    if text.strip():
        read = read_sacct(text, tz=UTC, delimiter=delimiter)
        allocations_of(
            read,
            where="sacct",
            seen_at=now,
            cluster=cluster,
            teams=teams or {},
            out=out,
            gres_models=gres_models,
        )
    return _last_rows(out)


SINFO_FORMAT = "%N|%G|%t"
"""sinfo -N's node, its GRES (``gpu:h100:4(S:0-1)``) and its state."""
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::([^:(),]+))?:(\d+)")
UNAVAILABLE = ("down", "drain", "fail", "maint", "inval", "future", "unk")
"""Node states (sinfo's short form, its prefix) whose GPUs no job can be given."""


def parse_sinfo(text: str) -> tuple[dict[str, tuple[int, str | None]], list[str]]:
    """``sinfo -N -h -o '%N|%G|%t'``: each node's GPUs and their type (a node in several
    partitions once), and the nodes left out as unavailable (down, drained, failed…).

    Args:
        text: sinfo's output.
    """
    nodes: dict[str, tuple[int, str | None]] = {}
    down: list[str] = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        node, gres, state = parts
        gpus = [(int(m[2]), m[1]) for m in _GRES_GPU.finditer(gres)]
        if not gpus:
            continue
        if state.strip().lower().startswith(UNAVAILABLE):
            down.append(node)
            continue
        count = sum(n for n, _ in gpus)
        kind = max(gpus, key=lambda g: g[0])[1]
        if count > nodes.get(node, (0, None))[0]:
            nodes[node] = (count, kind)
    return nodes, sorted(set(down) - set(nodes))


def cluster_name(scontrol: str = "scontrol") -> str:
    """This machine's Slurm cluster, ``ClusterName`` of ``scontrol show config``; "" when it
    cannot say."""
    try:
        p = subprocess.run(
            [scontrol, "show", "config"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"^ClusterName\s*=\s*(\S+)\s*$", p.stdout, re.MULTILINE)
    return m[1] if m and p.returncode == 0 and "/" not in m[1] else ""


@dataclass(frozen=True)
class SinfoNodes:
    """What ``sinfo`` showed of the nodes (:func:`sinfo_nodes`)."""

    nodes: dict[str, tuple[int, str | None]]
    """Each available node's GPUs and their type."""
    down: list[str]
    """Nodes with GPUs down, drained or failed."""
    failed: str = ""
    """Why sinfo showed nothing ("" where it answered)."""


def sinfo_nodes(sinfo: str = "sinfo") -> SinfoNodes:
    """The nodes' GPUs as this machine's ``sinfo`` shows them now (:func:`parse_sinfo`); a
    sinfo that fails says why in ``failed``.

    Args:
        sinfo: The command.
    """
    try:
        p = subprocess.run(
            [sinfo, "-N", "-h", "-o", SINFO_FORMAT],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return SinfoNodes({}, [], f"{sinfo}: {one_line(str(e), 200)}")
    if p.returncode != 0:
        said = one_line(p.stderr or p.stdout, 200)
        return SinfoNodes({}, [], f"sinfo failed (exit {p.returncode}): {said}")
    nodes, down = parse_sinfo(p.stdout)
    return SinfoNodes(nodes, down)


def sinfo_capacity(
    since: datetime,
    until: datetime,
    *,
    cluster: str,
    sinfo: str = "sinfo",
    scontrol: str = "scontrol",
    gres_models: Mapping[str, str] | None = None,
    shown: SinfoNodes | None = None,
) -> tuple[list[Capacity], list[str]]:
    """The nodes' GPUs as this machine's ``sinfo`` shows them now, over ``[since, until]``
    (Slurm keeps no history of its nodes: the import's range is taken to have had them), and
    notes on what was left out. A sinfo that fails is a note, not a failed import.

    Args:
        since: The range's start (timezone-aware).
        until: Its end.
        cluster: The cluster's name (the jobs'); "" to ask ``scontrol show config``.
        sinfo: The command.
        scontrol: The command asked for the cluster's name where ``cluster`` is "".
        shown: What sinfo showed already (:func:`sinfo_nodes`); None: run it.
    """
    from reports.rows import Capacity

    got = shown if shown is not None else sinfo_nodes(sinfo)
    if got.failed:
        return [], [f"capacity not imported: {got.failed}"]
    cluster = cluster or cluster_name(scontrol)
    spans = [
        Capacity(
            source="slurm",
            cluster=cluster,
            node=node,
            start_at=since,
            end_at=until,
            gpus=gpus,
            gpu_model=model_of_type(kind, gres_models) if kind else None,
        )
        for node, (gpus, kind) in sorted(got.nodes.items())
    ]
    down = got.down
    notes = (
        [f"{len(down)} node(s) with GPUs down or drained now, not counted: {', '.join(down[:10])}"]
        if down
        else []
    )
    return spans, notes


def unguessable() -> str:
    """A delimiter for one run of sacct that no job name submitted before it holds:
    ``|`` and 16 random hex digits and ``|``."""
    return f"|{secrets.token_hex(8)}|"


def _sacct(
    sacct: str, what: Sequence[str], said: str, *, form: str = FORMAT, delimiter: str = "|"
) -> str:
    """``sacct -a -X -P --format=FORMAT WHAT…``'s output, its times as seconds since 1970
    (with ``form`` :data:`USAGE_FORMAT`: the steps too, no ``-X``)."""
    env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "%s"}
    whole = ["-X"] if form == FORMAT else []  # -X: the jobs alone, without their steps
    between = [f"--delimiter={delimiter}"] if delimiter != "|" else []
    args = [sacct, "-a", *whole, "-P", *between, f"--format={form}", *what]
    try:
        p = subprocess.run(
            args,
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            timeout=SACCT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise ImportFailed(
            f"{sacct} not found: run this where Slurm's sacct is, or give sacct's output "
            f"as a file (sacct -a -X -P --format={FORMAT} -S … -E …)"
        ) from None
    except subprocess.TimeoutExpired:
        raise ImportFailed(f"sacct took over {SACCT_TIMEOUT_S:.0f} s for {said}") from None
    if p.returncode != 0:
        raise ImportFailed(
            f"sacct failed (exit {p.returncode}): {one_line(p.stderr or p.stdout, 300)}"
        )
    return p.stdout


def _last_rows(out: SlurmImported) -> SlurmImported:
    """One allocation per job: a job read twice (in two windows, or two files) by its last
    row; the step averages of the jobs read (a job's cluster as its row says where the steps'
    name none)."""
    last = {(a.source, a.cluster, a.job_id): a for a in out.jobs}
    out.jobs = list(last.values())
    clusters = {a.job_id: a.cluster for a in out.jobs}
    usage = {}
    for read in out.usage:
        if read.job_id in clusters:
            u = replace(read, cluster=read.cluster or clusters[read.job_id])
            usage[(u.cluster, u.job_id)] = u
    out.usage = list(usage.values())
    return out
