"""What changed where: a counter per UTC day (and shard), raised in the same transaction as
every write of runs and samples that can change that day's figures.

A report keeps the KPIs of a complete week it computed beside the counters of the week's days
as it read them first; a later report that finds the same counters reads those KPIs instead of
the week's rows (:mod:`reports.data.week_cache`), so its trend costs one week's work whatever
the history. Counters only grow; a write that lands between a report's reading of them and of
the rows raises them, so such a week is computed again next time, never kept stale.

A run's write raises every day of its span (start to end, or last heartbeat), before and after
the write (a run whose start moved changes both); samples raise the days of their minutes; a
run dropped by an import raises the days of its span and of its samples. Rows are sharded by
run id (:data:`SHARDS`) so that writers of different runs on PostgreSQL do not queue on one row.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tracker.store.engine import fetch_first, send, send_many
from tracker.store.schema import (
    RUN_LOCK_CLASS,
    changes_table,
    meta_table,
    samples_table,
    upsert,
    utc,
)

SHARDS = 16
"""Counter rows per day."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY = timedelta(days=1)
MAX_SPAN_DAYS = 3_660
"""A run's span counted at most this many days back from its end (a start in 1970 from a bad
clock would otherwise raise 20,000 rows)."""


def day_of(moment: datetime) -> int:
    """The UTC day of ``moment`` (timezone-aware): days since 1970-01-01."""
    return (utc(moment) - _EPOCH) // _DAY


def shard_of(run_id: object) -> int:
    """The counter shard of a run id (stable across processes and versions)."""
    data = run_id if isinstance(run_id, bytes) else str(run_id).encode("utf-8", "surrogatepass")
    return zlib.crc32(data) % SHARDS


def span_days(started: datetime | None, ended: datetime | None) -> range:
    """The UTC days from ``started`` to ``ended`` (both included; ``ended`` None: ``started``
    alone); empty without a start."""
    if started is None:
        return range(0)
    first, last = day_of(started), day_of(ended or started)
    if last < first:
        first, last = last, first
    return range(max(first, last - MAX_SPAN_DAYS), last + 1)


class Touched:
    """The (day, shard) counters one transaction raises, collected as it writes."""

    def __init__(self) -> None:
        self.keys: set[tuple[int, int]] = set()

    def days(self, run_id: object, days: Iterable[int]) -> None:
        shard = shard_of(run_id)
        self.keys.update((d, shard) for d in days)

    def run(self, row: Mapping[str, Any]) -> None:
        """A run row (its ``id``, ``started_at``, ``ended_at``, ``heartbeat_at``)."""
        end = row.get("ended_at") or row.get("heartbeat_at")
        self.days(row["id"], span_days(as_time(row.get("started_at")), as_time(end)))

    def raise_(self, conn: Connection) -> None:
        """Raise the counters in ``conn``'s transaction (none when nothing was touched, or
        when :meth:`statement`'s was sent)."""
        if not self.keys:
            return
        # in one order, so that two writers never wait on each other's rows crosswise
        keys = sorted(self.keys)
        if conn.dialect.name != "sqlite":
            send(conn, *self._pg_statement(keys))
            return
        sql = f"INSERT INTO changes (day, shard, version) VALUES (?, ?, 1) {_CONFLICT}"
        if len(keys) == 1:  # a live writer's minute: one statement, not a batch of one
            send(conn, sql, keys[0])
        else:
            send_many(conn, sql, keys)

    def statement(self) -> tuple[str, tuple[Any, ...]] | None:
        """PostgreSQL's statement that raises the counters and its parameters, for a caller
        that sends it inside another (a ``WITH``: a statement costs the client 50-100 µs);
        None when nothing was touched. Once it is sent, :meth:`sent` must be called."""
        if not self.keys:
            return None
        return self._pg_statement(sorted(self.keys))

    def sent(self) -> None:
        """:meth:`statement`'s statement was sent: :meth:`raise_` has nothing left to do."""
        self.keys = set()

    @staticmethod
    def _pg_statement(keys: Sequence[tuple[int, int]]) -> tuple[str, tuple[Any, ...]]:
        """PostgreSQL's statement of the ``keys`` (sorted): one, in that order."""
        if len(keys) == 1:  # two numbers, not two arrays of one (psycopg dumps a list in Python)
            return (
                f"INSERT INTO changes (day, shard, version) VALUES (%s, %s, 1) {_CONFLICT}",
                keys[0],
            )
        days, shards = zip(*keys, strict=True)
        rows = "unnest(%s::integer[], %s::integer[]) WITH ORDINALITY AS k(day, shard, n)"
        sql = (
            f"INSERT INTO changes (day, shard, version) SELECT day, shard, 1 FROM {rows} "
            f"ORDER BY n {_CONFLICT}"
        )
        return sql, (list(days), list(shards))


_CONFLICT = "ON CONFLICT (day, shard) DO UPDATE SET version = changes.version + 1"


def run_statement(row: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """PostgreSQL's statement that raises the counters a write of the run ``row`` (its ``id``,
    ``started_at``, ``ended_at``, ``heartbeat_at``) raises: the days of the run's stored span
    and of ``row``'s, as :meth:`Touched.run` of each (:func:`span_days`), in day order, and
    its parameters. The stored span is read by the statement itself, as it was when the
    statement began: sent with the run's upsert in one statement (a ``WITH`` of it, a
    heartbeat's one round trip), it reads the run before the upsert."""
    touched = Touched()
    touched.run(row)
    days = sorted(day for day, _ in touched.keys)
    first, last = _utc_day("started_at"), _utc_day("COALESCE(ended_at, heartbeat_at, started_at)")
    stored = (
        "SELECT generate_series(GREATEST(LEAST(a, b), GREATEST(a, b) - "
        f"{int(MAX_SPAN_DAYS)}), GREATEST(a, b)) AS day FROM (SELECT {first} AS a, {last} AS b "
        "FROM runs WHERE id = %s) AS stored"
    )
    sql = (
        "INSERT INTO changes (day, shard, version) SELECT day, %s, 1 FROM "
        f"({stored} UNION SELECT unnest(%s::integer[])) AS d ORDER BY day {_CONFLICT}"
    )
    return sql, (shard_of(row["id"]), row["id"], days)


def _utc_day(column: str) -> str:
    """PostgreSQL's :func:`day_of` of a ``timestamptz`` expression (a name of ours)."""
    return f"(({column}) AT TIME ZONE 'UTC')::date - DATE '1970-01-01'"


def as_time(value: Any) -> datetime | None:
    """A stored or given time as an aware datetime; None for what is no time (a damaged row:
    its span is unknown and raises nothing)."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return None


_SPAN = ("id", "started_at", "ended_at", "heartbeat_at")


def stored_spans(
    conn: Connection, ids: Sequence[str], chunk: int = 500, *, lock: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The stored ``id``, ``started_at``, ``ended_at``, ``heartbeat_at`` of the runs ``ids``
    (those that exist); on PostgreSQL, first, the advisory locks of the runs ``lock`` in that
    order (:data:`tracker.store.schema.RUN_LOCK_CLASS`), the first ``chunk`` of them in the
    same statement (a live write's one run: one statement less). The first statement goes
    with the transaction's ``BEGIN`` where it is the transaction's first
    (:func:`tracker.store.engine.fetch_first`)."""
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    out: list[dict[str, Any]] = []
    if lock and mark == "%s":  # an import's many runs: the locks in order, chunk by chunk
        out += _locked_spans(conn, ids[:chunk], lock[:chunk])
        for i in range(chunk, len(lock), chunk):
            _locked_spans(conn, [], lock[i : i + chunk])
        ids = ids[chunk:]
    for i in range(0, len(ids), chunk):
        part = tuple(ids[i : i + chunk])
        # as the driver gives them (SQLite: text, which may be damaged): read by as_time
        sql = f"SELECT {', '.join(_SPAN)} FROM runs WHERE id IN ({', '.join([mark] * len(part))})"
        out += [dict(zip(_SPAN, r, strict=True)) for r in fetch_first(conn, sql, part)]
    return out


def _locked_spans(
    conn: Connection, ids: Sequence[str], lock: Sequence[str]
) -> list[dict[str, Any]]:
    """:func:`stored_spans` of ``ids`` with the locks of the runs ``lock`` taken first: in an
    aggregate over those run ids in their order (every lock taken, in that order, before its
    one row is joined), the spans joined to it (a LEFT JOIN: the locks' row stays when no run
    is found). The spans are read as of the statement's start: no lock guards them."""
    columns = ", ".join(f"r.{name}" for name in _SPAN)
    # a parameter a run id (psycopg dumps a list as an array in Python, element by element)
    locks, found = ", ".join(["%s"] * len(lock)), ", ".join(["%s"] * len(ids)) or "NULL"
    sql = (
        f"SELECT {columns} FROM (SELECT count(pg_advisory_xact_lock(%s, hashtext(k))) "
        f"FROM unnest(ARRAY[{locks}]::text[]) AS k) AS l LEFT JOIN runs AS r ON r.id IN ({found})"
    )
    rows = fetch_first(conn, sql, (RUN_LOCK_CLASS, *lock, *ids))
    return [dict(zip(_SPAN, r, strict=True)) for r in rows if r[0] is not None]


def sample_days(conn: Connection, ids: Sequence[str], chunk: int = 500) -> dict[str, range]:
    """Per run of ``ids`` with samples: the UTC days from its first to its last minute."""
    c = samples_table.c
    out: dict[str, range] = {}
    for i in range(0, len(ids), chunk):
        stmt = (
            sa.select(
                c.run_id,
                sa.func.min(sa.type_coerce(c.minute, sa.String)),
                sa.func.max(sa.type_coerce(c.minute, sa.String)),
            )
            .where(c.run_id.in_(list(ids[i : i + chunk])))
            .group_by(c.run_id)
        )
        for run_id, first, last in conn.execute(stmt):
            out[run_id] = span_days(as_time(first), as_time(last))
    return out


def marks(conn: Connection, first_day: int, last_day: int) -> tuple[int, dict[int, int]]:
    """The store's epoch (:func:`raise_all`) and each day's counter (the sum of its shards)
    in ``[first_day, last_day]``; a day never written is absent (0)."""
    c = changes_table.c
    stmt = (
        sa.select(c.day, sa.func.sum(c.version))
        .where(c.day >= first_day, c.day <= last_day)
        .group_by(c.day)
    )
    epoch = conn.execute(
        sa.select(meta_table.c.value).where(meta_table.c.key == EPOCH_KEY)
    ).scalar()
    return int(epoch or 0), {int(d): int(v) for d, v in conn.execute(stmt)}


EPOCH_KEY = "changes_epoch"
"""The ``meta`` key of the counter that every day's mark includes."""


def raise_all(conn: Connection) -> None:
    """Make every day's mark new (after the rollups were rebuilt: a kept week may have left
    out damaged rows that are now whole)."""
    epoch, _ = marks(conn, 0, -1)
    stmt = upsert(conn.dialect.name, meta_table, ("key",))
    conn.execute(stmt, {"key": EPOCH_KEY, "value": str(epoch + 1)})
