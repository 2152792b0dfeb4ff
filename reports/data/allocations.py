"""Scheduler allocations in the run store's database (``gpu_kpi_allocations``): one row per
Slurm job as ``gpu-kpi import slurm`` read it, or per Kubernetes pod as ``gpu-kpi import
kubernetes`` did; a week's jobs matched to the minute samples of the runs on their hosts or in
them, read as the report reads samples.

The table is the reports' own, made on first import as the delivery log's is: the tracker
never writes it, and stores made before it have none (a report then has no allocation
section). A job is keyed by source, cluster and its allocation's own id (``JobIDRaw``); a
later import of the same job (a running job that has since ended) replaces its row.

A Slurm job read from output without a ``Cluster`` field (and no ``--cluster``) has cluster
"" (not known), and its id alone says nothing across clusters: job 100 of two clusters.
Writing with ``settle`` (``gpu-kpi import slurm``) keeps one row per job and never lets one
cluster's job overwrite another's (:func:`settle_clusters`): the same job (:func:`same_job`:
its id, user, and start or end) imported without a cluster and with one is one row, under its
cluster; a job without a cluster where the store has another of the same id without one is
refused, named, for the import to give ``--cluster``.

Text is stored as :func:`tracker.text.storable` makes it (a NUL, which PostgreSQL refuses,
becomes U+FFFD), as run names are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from reports.data.deliveries import has_table
from reports.rows import Allocation, Capacity
from tracker.scheduler import KUBERNETES_LINK, SLURM_LINK
from tracker.store.engine import StoreError
from tracker.store.schema import SCHEMA_LOCK_KEY, UTCDateTime, upsert, utc
from tracker.text import one_line, storable

if TYPE_CHECKING:
    from tracker.store import RunStore

log = logging.getLogger("gpu_kpi")

JOB_LINKS = {SLURM_LINK: "slurm", KUBERNETES_LINK: "kubernetes"}
"""The links by which a run names the allocation it ran in, and the allocations' source."""
TABLE = "gpu_kpi_allocations"
_metadata = sa.MetaData()
allocations_table = sa.Table(
    TABLE,
    _metadata,
    sa.Column("source", sa.String(16), primary_key=True),  # "slurm" or "kubernetes"
    sa.Column("cluster", sa.Text, primary_key=True),  # "" where the import did not know it
    sa.Column("job_id", sa.Text, primary_key=True),  # its own id: JobIDRaw, the pod's uid
    sa.Column("shown_id", sa.Text, nullable=False),  # as sacct shows it: 1234_7; NS/POD
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("user", sa.Text, nullable=False),
    sa.Column("account", sa.Text, nullable=False),
    sa.Column("team", sa.Text, nullable=False),
    sa.Column("partition", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("start_at", UTCDateTime, nullable=False),
    sa.Column("end_at", UTCDateTime),  # None: running when imported
    sa.Column("seen_at", UTCDateTime, nullable=False),  # when it was imported
    sa.Column("gpus", sa.Float, nullable=False),  # a share where a pod held MIG instances
    sa.Column("gpu_model", sa.Text),  # the price table's key of its GPU type, else None
    sa.Column("hosts", sa.Text, nullable=False),  # JSON list of host names
    sa.Index("ix_gpu_kpi_allocations_start", "start_at"),
)


CAPACITY_TABLE = "gpu_kpi_capacity"
capacity_table = sa.Table(
    CAPACITY_TABLE,
    _metadata,
    sa.Column("source", sa.String(16), primary_key=True),  # "slurm" or "kubernetes"
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("node", sa.Text, primary_key=True),
    sa.Column("start_at", UTCDateTime, primary_key=True),
    sa.Column("end_at", UTCDateTime, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("gpu_model", sa.Text),
    sa.Index("ix_gpu_kpi_capacity_end", "end_at"),
)
USAGE_TABLE = "gpu_kpi_allocation_usage"
usage_table = sa.Table(
    USAGE_TABLE,
    _metadata,
    sa.Column("source", sa.String(16), primary_key=True),
    sa.Column("cluster", sa.Text, primary_key=True),
    sa.Column("job_id", sa.Text, primary_key=True),
    sa.Column("util_pct", sa.Float, nullable=False),  # sacct's step average, weighted
    sa.Column("mem_gib", sa.Float),
    sa.Column("steps", sa.Integer, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
)
"""A Slurm job's GPU use as its steps' ``TRESUsageInAve`` averaged it (where the site gathers
GPU accounting): the report uses it only for a job no minute sample covers."""
MERGE_GAP = timedelta(minutes=3)
"""Spans of a node this close, with the same GPUs, are one."""


def ensure_table(store: RunStore) -> None:
    """Create the table when it is missing (concurrent creators queue on PostgreSQL's advisory
    lock, on SQLite on the write lock)."""

    def work(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        _metadata.create_all(conn, checkfirst=True)
        if conn.dialect.name == "postgresql":  # GPUs as a share (issue 44): whole before
            kinds = {c["name"]: c["type"] for c in sa.inspect(conn).get_columns(TABLE)}
            if isinstance(kinds.get("gpus"), sa.Integer):
                conn.execute(
                    sa.text(f"ALTER TABLE {TABLE} ALTER COLUMN gpus TYPE double precision")
                )

    store.transaction(work, write=True)


def same_job(a: Allocation, b: Allocation) -> bool:
    """Whether two reads of a Slurm job are the same allocation: the same id and user, and
    the same start or the same end (an ended job read with its elapsed time starts at end −
    elapsed where a read without it says its first start)."""
    if (a.job_id, a.user) != (b.job_id, b.user):
        return False
    return a.start_at == b.start_at or (a.end_at is not None and a.end_at == b.end_at)


@dataclass(frozen=True)
class Settled:
    """Slurm jobs to write as :func:`settle_clusters` found them."""

    jobs: list[Allocation]
    """The jobs to write, those without a cluster that are a stored job under its cluster."""
    gone: list[tuple[str, str]]
    """(cluster, job id) of stored rows without a cluster that a job written names."""
    refused: list[tuple[Allocation, str]]
    """Jobs not written, and why."""
    moved: dict[str, str] = dataclasses.field(default_factory=dict)
    """Job id → the cluster a job read without one took."""


def settle_clusters(new: Sequence[Allocation], stored: Sequence[Allocation]) -> Settled:
    """The rule of a job's cluster, where output may lack it (:func:`same_job` says which reads
    are one job):

    - a job with a cluster replaces a stored row of the same job without one;
    - a job without one that is a job of one cluster (stored, or in ``new``) takes that
      cluster; of several, it is refused (``--cluster`` says which);
    - a job without one where the store has another job of its id without one is refused:
      without a cluster the two cannot both be kept, and neither overwrites the other.

    Args:
        new: Slurm jobs to write, one per (cluster, job id).
        stored: The store's Slurm rows of the same job ids.
    """
    named: dict[str, list[Allocation]] = {}
    for a in (*stored, *new):
        if a.cluster:
            named.setdefault(a.job_id, []).append(a)
    unnamed = {a.job_id: a for a in stored if not a.cluster}
    jobs: dict[tuple[str, str], Allocation] = {}
    refused: list[tuple[Allocation, str]] = []
    gone: set[tuple[str, str]] = set()
    moved: dict[str, str] = {}
    for a in new:
        if a.cluster:
            old = unnamed.get(a.job_id)
            if old is not None and same_job(old, a):
                gone.add(("", a.job_id))
            _keep(jobs, a)
            continue
        clusters = sorted({b.cluster for b in named.get(a.job_id, []) if same_job(a, b)})
        if len(clusters) > 1:
            why = f"the same job is in clusters {', '.join(clusters)}: give --cluster NAME"
            refused.append((a, why))
            continue
        if clusters:
            _keep(jobs, dataclasses.replace(a, cluster=clusters[0]))
            moved[a.job_id] = clusters[0]
            continue
        old = unnamed.get(a.job_id)
        if old is not None and not same_job(old, a):
            refused.append(
                (
                    a,
                    f"the store has another job {a.job_id} without a cluster (user "
                    f"{old.user!r}, started {old.start_at.isoformat()}): import each "
                    "cluster's output with --cluster NAME",
                )
            )
            continue
        _keep(jobs, a)
    return Settled(list(jobs.values()), sorted(gone), refused, moved)


def _keep(jobs: dict[tuple[str, str], Allocation], a: Allocation) -> None:
    """``a`` into ``jobs``, or the one of the two reads of its job that knows more (ended, then
    seen later)."""
    key = (a.cluster, a.job_id)
    old = jobs.get(key)
    if old is None or (a.end_at is not None, a.seen_at) >= (old.end_at is not None, old.seen_at):
        jobs[key] = a


def _storable(a: Allocation) -> Allocation:
    """``a`` with its text as the store keeps it."""
    return dataclasses.replace(
        a,
        cluster=storable(a.cluster),
        job_id=storable(a.job_id),
        shown_id=storable(a.shown_id),
        name=storable(a.name),
        user=storable(a.user),
        account=storable(a.account),
        team=storable(a.team),
        partition=storable(a.partition),
        state=storable(a.state),
        gpu_model=None if a.gpu_model is None else storable(a.gpu_model),
        hosts=tuple(storable(h) for h in a.hosts),
    )


def write_allocations(
    store: RunStore,
    allocations: Sequence[Allocation],
    capacity: Sequence[Capacity] = (),
    usage: Sequence[Any] = (),
    *,
    settle: bool = False,
) -> Settled:
    """Insert the allocations, replacing earlier rows of the same jobs, and the nodes'
    capacity (:func:`merge_spans` with what the store has), in one transaction.

    Args:
        store: The run store (the tables are made when missing).
        allocations: The jobs; times timezone-aware.
        capacity: The nodes' spans; times timezone-aware.
        usage: Slurm jobs' step averages (replacing a job's earlier one): each with
            ``cluster``, ``job_id``, ``util_pct``, ``mem_gib``, ``steps`` and ``seconds``
            (:class:`reports.imports.slurm.StepUsage`).
        settle: Settle the Slurm jobs' clusters with the store's rows in the same transaction
            (:func:`settle_clusters`): ``gpu-kpi import slurm``.

    Returns:
        What was written (without ``settle``: the allocations as given, none refused).
    """
    ensure_table(store)
    given = [_storable(a) for a in allocations]

    def work(conn: Connection) -> Settled:
        done = Settled(given, [], [])
        slurm = [a for a in given if a.source == "slurm"]
        if settle and slurm:
            found = settle_clusters(slurm, _stored_slurm(conn, slurm))
            others = [a for a in given if a.source != "slurm"]
            done = dataclasses.replace(found, jobs=[*found.jobs, *others])
        _write(conn, done, capacity, usage)
        return done

    if given or capacity or usage:
        return store.transaction(work, write=True)
    return Settled([], [], [])


def _write(
    conn: Connection, done: Settled, capacity: Sequence[Capacity], usage: Sequence[Any]
) -> None:
    t, u = allocations_table.c, usage_table.c
    for i in range(0, len(done.gone), 500):
        keys = [("slurm", *k) for k in done.gone[i : i + 500]]
        for table, c in ((allocations_table, t), (usage_table, u)):
            conn.execute(table.delete().where(sa.tuple_(c.source, c.cluster, c.job_id).in_(keys)))
    rows = [
        {
            **{k: getattr(a, k) for k in _COLUMNS if k != "hosts"},
            "start_at": utc(a.start_at),
            "end_at": None if a.end_at is None else utc(a.end_at),
            "seen_at": utc(a.seen_at),
            "hosts": json.dumps(list(a.hosts)),
        }
        for a in done.jobs
    ]
    stmt = upsert(conn.dialect.name, allocations_table, ("source", "cluster", "job_id"))
    for i in range(0, len(rows), 5_000):
        conn.execute(stmt, rows[i : i + 5_000])
    _write_capacity(conn, capacity)
    # a job's steps follow it to the cluster it was settled under; a refused job's go with it
    refused = {(storable(a.cluster), storable(a.job_id)) for a, _ in done.refused}
    used = {}
    for x in usage:
        key = (storable(x.cluster), storable(x.job_id))
        if key in refused:
            continue
        cluster = key[0] or done.moved.get(key[1], "")
        used[(cluster, key[1])] = {
            "source": "slurm",
            "cluster": cluster,
            "job_id": key[1],
            "util_pct": x.util_pct,
            "mem_gib": x.mem_gib,
            "steps": x.steps,
            "seconds": x.seconds,
        }
    stmt = upsert(conn.dialect.name, usage_table, ("source", "cluster", "job_id"))
    rows = list(used.values())
    for i in range(0, len(rows), 5_000):
        conn.execute(stmt, rows[i : i + 5_000])


def _stored_slurm(conn: Connection, jobs: Sequence[Allocation]) -> list[Allocation]:
    """The store's Slurm rows that :func:`settle_clusters` weighs against ``jobs``: the rows
    without a cluster of their ids, and for those without a cluster, their ids' rows in every
    cluster (a cluster at a time, along the table's key)."""
    t = allocations_table.c
    slurm = t.source == "slurm"
    ids = sorted({a.job_id for a in jobs})
    clusters = []
    if conn.execute(sa.select(t.job_id).where(slurm, t.cluster == "").limit(1)).first():
        clusters.append(("", ids))
    bare = sorted({a.job_id for a in jobs if not a.cluster})
    if bare:
        names = conn.execute(sa.select(t.cluster).where(slurm, t.cluster != "").distinct())
        clusters += [(c, bare) for (c,) in names]
    out = []
    for cluster, wanted in clusters:
        for i in range(0, len(wanted), 1_000):
            stmt = sa.select(allocations_table).where(
                slurm, t.cluster == cluster, t.job_id.in_(wanted[i : i + 1_000])
            )
            out += rows_to_allocations(conn.execute(stmt))
    return out


_COLUMNS = tuple(c.name for c in allocations_table.c)


def allocations_in(
    store: RunStore, since: datetime, until: datetime
) -> tuple[list[Allocation], int]:
    """The allocations that held GPUs in ``[since, until)``, by start, and how many rows were
    left out because they cannot be one (a host list that is no JSON list, GPUs below 0, an
    end before the start: the table is a database anyone with access can write).

    Args:
        store: The run store (it must have the table: :func:`has_allocations`).
        since: The span's start (timezone-aware).
        until: The span's end, excluded (timezone-aware).
    """
    t = allocations_table.c
    stmt = (
        sa.select(allocations_table)
        .where(
            t.start_at < utc(until),
            sa.or_(t.end_at > utc(since), sa.and_(t.end_at.is_(None), t.seen_at > utc(since))),
        )
        .order_by(t.start_at, t.cluster, t.job_id)
    )

    def read(conn: Connection) -> tuple[list[Allocation], int]:
        rows = list(conn.execute(stmt).mappings())
        out = rows_to_allocations(rows)
        return out, len(rows) - len(out)

    return store.transaction(read, write=False)


def rows_to_allocations(rows: Iterable[Any]) -> list[Allocation]:
    """The rows of the table as allocations, those that cannot be one left out.

    Args:
        rows: Rows of ``allocations_table`` (mappings, or a result that gives them).
    """
    source = rows.mappings() if hasattr(rows, "mappings") else rows
    return [a for row in source if (a := _allocation(dict(row))) is not None]


def allocations_named(store: RunStore, job_id: str, cluster: str | None) -> list[Allocation]:
    """The imported jobs ``job_id`` names: by the allocation's own id or as sacct shows it
    (``1234_7``), in ``cluster`` when given; none when nothing was ever imported.

    Args:
        store: The run store.
        job_id: ``1234``, ``1234_7`` or ``1234+0``.
        cluster: The cluster; None: any.
    """
    if not has_allocations(store):
        return []
    t = allocations_table.c
    stmt = sa.select(allocations_table).where(sa.or_(t.job_id == job_id, t.shown_id == job_id))
    if cluster is not None:
        stmt = stmt.where(t.cluster == cluster)
    return store.transaction(lambda conn: rows_to_allocations(conn.execute(stmt)), write=False)


def _write_capacity(conn: Connection, spans: Sequence[Capacity]) -> None:
    """Nodes' capacity, merged with what the table has of the same nodes: a new span replaces
    the old in its time, and spans of a node that meet (within :data:`MERGE_GAP`) with the same
    GPUs become one, so importing a range again or the next one adds nothing twice."""
    if not spans:
        return
    t = capacity_table.c
    lo = min(c.start_at for c in spans) - MERGE_GAP
    hi = max(c.end_at for c in spans) + MERGE_GAP
    sources = sorted({c.source for c in spans})
    near = t.source.in_(sources) & (t.start_at <= utc(hi)) & (t.end_at >= utc(lo))
    old: dict[tuple[str, str, str], list[Capacity]] = {}
    for row in conn.execute(sa.select(capacity_table).where(near)).mappings():
        c = Capacity(**dict(row))
        old.setdefault((c.source, c.cluster, c.node), []).append(c)
    new: dict[tuple[str, str, str], list[Capacity]] = {}
    for c in spans:
        new.setdefault((c.source, c.cluster, c.node), []).append(c)
    rows = []
    gone = []
    for key, mine in new.items():
        before = old.get(key, [])
        gone += [(c.source, c.cluster, c.node, utc(c.start_at)) for c in before]
        rows += [
            {**dataclasses.asdict(c), "start_at": utc(c.start_at), "end_at": utc(c.end_at)}
            for c in merge_spans(before, mine)
        ]
    key_cols = (t.source, t.cluster, t.node, t.start_at)
    for i in range(0, len(gone), 500):
        conn.execute(capacity_table.delete().where(sa.tuple_(*key_cols).in_(gone[i : i + 500])))
    for i in range(0, len(rows), 5_000):
        conn.execute(capacity_table.insert(), rows[i : i + 5_000])


def merge_spans(old: Sequence[Capacity], new: Sequence[Capacity]) -> list[Capacity]:
    """One node's spans: ``new`` over ``old`` where they overlap, those that meet with the same
    GPUs and model joined.

    Args:
        old: The spans the store has.
        new: The spans imported now (they win in their time).
    """
    pieces: list[Capacity] = []
    cuts = sorted((c.start_at, c.end_at) for c in new)
    for o in old:
        start = o.start_at
        for a, b in cuts:
            if b <= start or a >= o.end_at:
                continue
            if a > start:
                pieces.append(dataclasses.replace(o, start_at=start, end_at=a))
            start = max(start, b)
        if start < o.end_at:
            pieces.append(dataclasses.replace(o, start_at=start))
    out: list[Capacity] = []
    for c in sorted([*pieces, *new], key=lambda c: (c.start_at, c.end_at)):
        last = out[-1] if out else None
        if (
            last is not None
            and (last.gpus, last.gpu_model) == (c.gpus, c.gpu_model)
            and c.start_at <= last.end_at + MERGE_GAP
        ):
            out[-1] = dataclasses.replace(last, end_at=max(last.end_at, c.end_at))
        elif last is not None and c.start_at < last.end_at:  # a new span inside an old one
            out[-1] = dataclasses.replace(last, end_at=c.start_at)
            out.append(c)
        else:
            out.append(c)
    return [c for c in out if c.end_at > c.start_at]


def usage_of(
    store: RunStore, jobs: Sequence[Allocation]
) -> dict[tuple[str, str], tuple[float, float | None]]:
    """The step averages of these Slurm jobs, (cluster, job id) → (utilization %, peak
    memory GiB or None); values out of range left out.

    Args:
        store: The run store.
        jobs: The jobs.
    """
    ids = sorted({a.job_id for a in jobs if a.source == "slurm"})
    if not ids or not has_table(store, USAGE_TABLE):
        return {}
    t = usage_table.c

    def read(conn: Connection) -> dict[tuple[str, str], tuple[float, float | None]]:
        out: dict[tuple[str, str], tuple[float, float | None]] = {}
        for i in range(0, len(ids), 1_000):
            stmt = sa.select(t.cluster, t.job_id, t.util_pct, t.mem_gib).where(
                t.source == "slurm", t.job_id.in_(ids[i : i + 1_000])
            )
            for cluster, job_id, util, mem in conn.execute(stmt):
                if isinstance(util, float) and math.isfinite(util) and 0 <= util <= 10_000:
                    out[(cluster, job_id)] = (util, mem if isinstance(mem, float) else None)
        return out

    return store.transaction(read, write=False)


def capacity_in(store: RunStore, since: datetime, until: datetime) -> tuple[list[Capacity], int]:
    """The nodes' spans that overlap ``[since, until)``, and how many rows were left out because
    they cannot be one (GPUs below 0 or over a million, an end before the start); none when
    nothing was imported.

    Args:
        store: The run store.
        since: The span's start (timezone-aware).
        until: Its end, excluded (timezone-aware).
    """
    if not has_table(store, CAPACITY_TABLE):
        return [], 0
    t = capacity_table.c
    stmt = (
        sa.select(capacity_table)
        .where(t.start_at < utc(until), t.end_at > utc(since))
        .order_by(t.source, t.cluster, t.node, t.start_at)
    )

    def read(conn: Connection) -> tuple[list[Capacity], int]:
        out, bad = [], 0
        for row in conn.execute(stmt).mappings():
            c = Capacity(**dict(row))
            texts = (c.source, c.cluster, c.node)
            if (
                all(isinstance(x, str) for x in texts)
                and isinstance(c.gpus, int)
                and 0 <= c.gpus <= 1_000_000
                and c.end_at >= c.start_at
            ):
                out.append(c)
            else:
                bad += 1
        return out, bad

    return store.transaction(read, write=False)


def allocations_keyed(
    store: RunStore, source: str, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], Allocation]:
    """The imported allocations of ``source`` with these (cluster, job id) keys; none when
    nothing was ever imported.

    Args:
        store: The run store.
        source: ``slurm`` or ``kubernetes``.
        keys: (cluster, job id) pairs.
    """
    if not keys or not has_allocations(store):
        return {}
    t = allocations_table.c
    wanted = set(keys)
    ids = sorted({k[1] for k in wanted})

    def read(conn: Connection) -> dict[tuple[str, str], Allocation]:
        found: dict[tuple[str, str], Allocation] = {}
        for i in range(0, len(ids), 1_000):
            stmt = sa.select(allocations_table).where(
                t.source == source, t.job_id.in_(ids[i : i + 1_000])
            )
            for a in rows_to_allocations(conn.execute(stmt)):
                if (a.cluster, a.job_id) in wanted:
                    found[(a.cluster, a.job_id)] = a
        return found

    return store.transaction(read, write=False)


def allocations_marks(
    store: RunStore, spans: Sequence[tuple[str, datetime, datetime]]
) -> dict[str, str]:
    """Per span, what the scheduler tables hold of it, as a short text that an import touching
    it changes (its jobs' count and latest import, their step averages', its nodes' spans'): a
    kept week's headline counts the jobs of its time, so it is kept only under the same mark
    (:mod:`reports.data.week_cache`), and an import of this week's jobs leaves older weeks
    kept. Nothing when none was ever imported.

    Args:
        store: The open run store.
        spans: (label, start, end) of each span, timezone-aware.

    Returns:
        Label → mark.
    """
    if not spans or not has_allocations(store):
        return {}

    def work(conn: Connection) -> dict[str, str]:
        inspect = sa.inspect(conn)
        a, c, u = allocations_table.c, capacity_table.c, usage_table.c
        has_capacity = inspect.has_table(capacity_table.name)
        has_usage = inspect.has_table(usage_table.name)
        out = {}
        for label, start, end in spans:
            held = sa.and_(a.start_at < end, sa.or_(a.end_at.is_(None), a.end_at > start))
            jobs = conn.execute(sa.select(sa.func.count(), sa.func.max(a.seen_at)).where(held))
            n, seen = jobs.one()
            parts = [f"{n}@{seen}"]
            if has_usage:
                same = sa.and_(u.source == a.source, u.cluster == a.cluster, u.job_id == a.job_id)
                steps = sa.select(sa.func.count()).select_from(
                    usage_table.join(allocations_table, same)
                )
                parts.append(str(conn.execute(steps.where(held)).scalar()))
            if has_capacity:
                nodes = sa.select(sa.func.count(), sa.func.max(c.end_at)).where(
                    c.start_at < end, c.end_at > start
                )
                k, last = conn.execute(nodes).one()
                parts.append(f"{k}@{last}")
            out[label] = "jobs:" + "/".join(parts)
        return out

    with read_errors("the scheduler's allocations"):
        return store.transaction(work, write=False)


def has_allocations(store: RunStore) -> bool:
    """Whether Slurm jobs or Kubernetes pods were ever imported into the store (it has the
    table)."""
    return has_table(store, TABLE)


def _allocation(values: dict[str, Any]) -> Allocation | None:
    try:
        hosts = json.loads(values.pop("hosts"))
    except (TypeError, ValueError):
        return None
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        return None
    a = Allocation(**values, hosts=tuple(hosts))
    texts = (a.source, a.cluster, a.job_id, a.shown_id, a.name, a.user, a.account, a.team)
    if not all(isinstance(t, str) for t in (*texts, a.partition, a.state)):
        return None
    if not isinstance(a.gpus, int | float) or not 0 <= a.gpus <= 1_000_000:
        return None  # (NaN fails the comparison too)
    if a.end_at is not None and a.end_at < a.start_at:
        return None
    return a


@contextlib.contextmanager
def read_errors(what: str) -> Iterator[None]:
    """Reads of these tables whose SQL fails raise :class:`StoreError` (``WHAT cannot be read:
    …``, one line): above the data layer nothing catches SQLAlchemy's errors."""
    try:
        yield
    except sa.exc.SQLAlchemyError as e:
        raise StoreError(f"{what} cannot be read: {one_line(str(e), 300)}") from None
