"""Marks in the run store's database (``gpu_kpi_marks``): the dates a team said it changed a
recurring job (``gpu-kpi mark KEY "loader: 8 workers"``), against which the report measures the
job's runs before and after (:mod:`reports.kpi.savings`).

The table is the reports' own, made on the first mark as the delivery log's is: the tracker
never writes it, and a store without it has no marks (the report then looks for a change in
the runs themselves). A mark is keyed by its job key and time; marking the same key at the same
time again replaces its note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from reports.data.deliveries import has_table
from tracker.scheduler import JOB_KEY_MAX
from tracker.store.schema import SCHEMA_LOCK_KEY, UTCDateTime, upsert, utc

if TYPE_CHECKING:
    from tracker.store import RunStore

TABLE = "gpu_kpi_marks"
NOTE_MAX = 200
"""The longest note kept, in characters (one line)."""
KEY_MAX = JOB_KEY_MAX
"""The longest job key."""

_metadata = sa.MetaData()
marks_table = sa.Table(
    TABLE,
    _metadata,
    sa.Column("job_key", sa.Text, primary_key=True),
    sa.Column("at", UTCDateTime, primary_key=True),
    sa.Column("note", sa.Text, nullable=False),
    sa.Column("marked_at", UTCDateTime, nullable=False),
)


@dataclass(frozen=True, kw_only=True)
class Mark:
    """A date a recurring job was changed, and what was changed."""

    job_key: str
    at: datetime
    """When the change took effect (UTC): runs that start from then on are "after"."""
    note: str
    marked_at: datetime
    """When it was marked (UTC)."""


def add_mark(store: RunStore, job_key: str, note: str, *, at: datetime, now: datetime) -> Mark:
    """Keep a mark (replacing the note of one at the same key and time).

    Args:
        store: The open run store.
        job_key: The recurring job's key (as the report shows it), one line.
        note: What was changed, one line.
        at: When it took effect (timezone-aware).
        now: When it is marked (timezone-aware).

    Returns:
        The mark as kept.

    Raises:
        ValueError: An empty or multi-line key or note, one too long, a naive time.
        StoreError: The store cannot be written.
    """
    key, text = _line(job_key, "job key", KEY_MAX), _line(note, "note", NOTE_MAX)
    if at.tzinfo is None or now.tzinfo is None:
        raise ValueError("a mark's time must be timezone-aware")
    mark = Mark(job_key=key, at=utc(at), note=text, marked_at=utc(now))

    def work(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        _metadata.create_all(conn, checkfirst=True)
        conn.execute(
            upsert(conn.dialect.name, marks_table, ("job_key", "at")),
            [{"job_key": key, "at": mark.at, "note": text, "marked_at": mark.marked_at}],
        )

    store.transaction(work, write=True)
    return mark


def delete_marks(store: RunStore, job_key: str, *, at: datetime | None = None) -> int:
    """Forget the marks of ``job_key`` (the one at ``at`` alone where given); how many.

    Args:
        store: The open run store.
        job_key: The key, as :func:`read_marks` gives it.
        at: The mark's time (timezone-aware; to the minute, as ``--list`` shows it); None: all
            of the key's.
    """
    if not has_table(store, TABLE):
        return 0
    c = marks_table.c
    stmt = sa.delete(marks_table).where(c.job_key == job_key)
    if at is not None:
        start = utc(at).replace(second=0, microsecond=0)
        stmt = stmt.where(c.at >= start, c.at < start + timedelta(minutes=1))

    def work(conn: Connection) -> int:
        return int(conn.execute(stmt).rowcount or 0)

    return int(store.transaction(work, write=True))


def read_marks(store: RunStore, *, until: datetime | None = None) -> list[Mark]:
    """The marks (up to ``until``, excluded), by key and time; none where no mark was ever
    kept. A row that is not what :func:`add_mark` writes (a key or note that is no text, a
    time that is no time) is left out.

    Args:
        store: The open run store.
        until: Leave out marks from this time on (timezone-aware); None: all.
    """
    if not has_table(store, TABLE):
        return []
    c = marks_table.c
    stmt = sa.select(
        c.job_key, sa.type_coerce(c.at, sa.String), c.note, sa.type_coerce(c.marked_at, sa.String)
    ).order_by(c.job_key, c.at)

    def work(conn: Connection) -> list[Sequence[object]]:
        return [tuple(row) for row in conn.execute(stmt)]

    out = []
    for key, at, note, marked in store.transaction(work, write=False):
        when, marked_at = _time(at), _time(marked)
        if not isinstance(key, str) or not key.strip() or when is None:
            continue
        if not isinstance(note, str) or not note.strip():
            continue
        if until is not None and when >= utc(until):
            continue
        out.append(Mark(job_key=key, at=when, note=note, marked_at=marked_at or when))
    return out


def _line(value: str, what: str, limit: int) -> str:
    text = " ".join(str(value).split())
    if not text:
        raise ValueError(f"a mark's {what} is empty")
    if "\n" in str(value).strip() or "\r" in str(value).strip():
        raise ValueError(f"a mark's {what} is one line")
    if len(text) > limit:
        raise ValueError(f"a mark's {what} is {len(text)} characters; at most {limit}")
    return text


def _time(raw: object) -> datetime | None:
    """A stored time as the driver gives it (SQLite: naive UTC text; PostgreSQL: text of an
    aware time), aware UTC; None for what is no time."""
    from datetime import UTC

    from tracker.store import changes

    when = changes.as_time(raw)  # PostgreSQL's text is in the session's time zone
    return None if when is None else when.astimezone(UTC)
