"""The report service's delivery log, as SQL: one row per (report kind, week, recipient) in the
run store's database, claimed before a report is sent. What the statuses mean and when a row is
owed is the service's business (:mod:`reports.service.deliveries`); this module only makes a claim
atomic on SQLite and PostgreSQL.

The table is created on first use, not with the run store's schema: stores made before the
service existed have none, and the tracker never needs it. A table made before the column
``smtp_config`` existed gets it then (``ALTER TABLE … ADD COLUMN``, NULL in the old rows).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tracker.store.schema import SCHEMA_LOCK_KEY, UTCDateTime, insert, utc

if TYPE_CHECKING:
    from tracker.store import RunStore

_metadata = sa.MetaData()
deliveries_table = sa.Table(
    "gpu_kpi_deliveries",
    _metadata,
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("week", sa.String(8), primary_key=True),
    sa.Column("recipient", sa.Text, primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("claimed_by", sa.Text, nullable=False),
    sa.Column("claimed_at", UTCDateTime, nullable=False),
    sa.Column("finished_at", UTCDateTime),
    sa.Column("message_id", sa.Text),
    sa.Column("error", sa.Text),
    sa.Column("smtp_config", sa.Text),
    # the fingerprint of the SMTP settings under which a "failed" row failed for a fault of
    # those settings (authentication, TLS); NULL for a failure of the recipient or the message
)
_COLUMNS = tuple(c.name for c in deliveries_table.c)


def _key(kind: str, week: str, recipient: str) -> Any:
    t = deliveries_table.c
    return (t.kind == kind) & (t.week == week) & (t.recipient == recipient)


def ensure_table(store: RunStore) -> None:
    """Create the table when it is missing, and add the columns a table made by an older version
    lacks; concurrent creators queue on PostgreSQL's advisory lock (as the run store's own schema
    does), on SQLite on the write lock."""
    t = deliveries_table

    def work(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        _metadata.create_all(conn, checkfirst=True)
        have = {c["name"] for c in sa.inspect(conn).get_columns(t.name)}
        for column in (c for c in t.c if c.name not in have):
            kind = column.type.compile(dialect=conn.dialect)
            conn.execute(sa.text(f"ALTER TABLE {t.name} ADD COLUMN {column.name} {kind}"))

    store.transaction(work, write=True)


def has_table(store: RunStore, name: str) -> bool:
    """Whether the database has a table ``name`` (its catalogue only; no row is read)."""
    return store.transaction(lambda conn: sa.inspect(conn).has_table(name), write=False)


def claim(
    store: RunStore,
    kind: str,
    week: str,
    recipient: str,
    *,
    owner: str,
    now: datetime,
    lease_s: float,
    smtp_config: str | None = None,
    retry_failed: bool = False,
) -> bool:
    """Insert the row as ``sending``, or take over one that is ``deferred`` or whose
    ``sending`` claim is older than ``lease_s``: True for exactly one of any number of
    concurrent claimers (the primary key decides inserts; an UPDATE's WHERE is re-checked
    under the row lock on PostgreSQL and runs under SQLite's write lock).

    A ``failed`` row is taken over too when ``retry_failed``, or when it failed under SMTP
    settings whose fingerprint (``smtp_config`` column) is not ``smtp_config``."""
    now = utc(now)
    t = deliveries_table
    again = t.c.status == "deferred"
    if retry_failed:
        again = again | (t.c.status == "failed")
    elif smtp_config is not None:
        again = again | (
            (t.c.status == "failed")
            & t.c.smtp_config.is_not(None)
            & (t.c.smtp_config != smtp_config)
        )
    new = (
        insert(store.engine.dialect.name, t)
        .values(
            kind=kind,
            week=week,
            recipient=recipient,
            status="sending",
            attempts=1,
            claimed_by=owner,
            claimed_at=now,
        )
        .on_conflict_do_nothing()
        .returning(t.c.kind)
    )
    retake = (
        sa.update(t)
        .where(
            _key(kind, week, recipient)
            & (
                again
                | ((t.c.status == "sending") & (t.c.claimed_at < now - timedelta(seconds=lease_s)))
            )
        )
        .values(
            status="sending",
            attempts=t.c.attempts + 1,
            claimed_by=owner,
            claimed_at=now,
            finished_at=None,
        )
        .returning(t.c.kind)
    )

    def work(conn: Connection) -> bool:
        # RETURNING, not rowcount: psycopg reports -1 for an INSERT … ON CONFLICT DO NOTHING
        return conn.execute(new).first() is not None or conn.execute(retake).first() is not None

    return store.transaction(work, write=True)


def finish(
    store: RunStore,
    kind: str,
    week: str,
    recipient: str,
    *,
    status: str,
    now: datetime,
    message_id: str | None,
    error: str | None,
    smtp_config: str | None = None,
) -> None:
    stmt = (
        sa.update(deliveries_table)
        .where(_key(kind, week, recipient))
        .values(
            status=status,
            finished_at=utc(now),
            message_id=message_id,
            error=error,
            smtp_config=smtp_config,
        )
    )
    store.transaction(lambda conn: conn.execute(stmt), write=True)


def release(
    store: RunStore, kind: str, week: str, recipient: str, *, owner: str, now: datetime, error: str
) -> None:
    """Give back ``owner``'s claim on a delivery it did not try after all (it was stopped first):
    ``deferred``, the claim's attempt uncounted, so the next run takes it at once instead of
    waiting for the lease."""
    t = deliveries_table
    stmt = (
        sa.update(t)
        .where(_key(kind, week, recipient) & (t.c.status == "sending") & (t.c.claimed_by == owner))
        .values(status="deferred", attempts=t.c.attempts - 1, finished_at=utc(now), error=error)
    )
    store.transaction(lambda conn: conn.execute(stmt), write=True)


def defer_unclaimed(
    store: RunStore, kind: str, week: str, recipient: str, *, owner: str, now: datetime, error: str
) -> bool:
    """Log a delivery that was owed and not tried (the sender was stopped first) as
    ``deferred`` with 0 attempts, so the next run finds it owed at once; a row that exists
    already (another sender's, or an older one) is left as it is. True when the row was added."""
    now = utc(now)
    t = deliveries_table
    stmt = (
        insert(store.engine.dialect.name, t)
        .values(
            kind=kind,
            week=week,
            recipient=recipient,
            status="deferred",
            attempts=0,
            claimed_by=owner,
            claimed_at=now,
            finished_at=now,
            error=error,
        )
        .on_conflict_do_nothing()
        .returning(t.c.kind)
    )
    return store.transaction(lambda conn: conn.execute(stmt).first() is not None, write=True)


def rows(
    store: RunStore, *, kind: str | None = None, recipient: str | None = None
) -> list[dict[str, Any]]:
    """The log's rows (by week, kind, recipient), optionally of one kind and recipient."""
    t = deliveries_table
    stmt = sa.select(t).order_by(t.c.week, t.c.kind, t.c.recipient)
    if kind is not None:
        stmt = stmt.where(t.c.kind == kind)
    if recipient is not None:
        stmt = stmt.where(t.c.recipient == recipient)
    found = store.transaction(lambda conn: conn.execute(stmt).mappings().all(), write=False)
    return [{c: row[c] for c in _COLUMNS} for row in found]


def counts(store: RunStore) -> dict[tuple[str, str], int]:
    """(kind, status) → rows."""
    t = deliveries_table
    stmt = sa.select(t.c.kind, t.c.status, sa.func.count()).group_by(t.c.kind, t.c.status)
    found = store.transaction(lambda conn: conn.execute(stmt).all(), write=False)
    return {(kind, status): int(n) for kind, status, n in found}
