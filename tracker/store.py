"""The run store: run records and per-minute GPU samples in SQLite or PostgreSQL.

One URL chooses the database: ``sqlite:///PATH`` (the default, a file under the user's data
directory) or ``postgresql://…`` / ``postgres://…`` (psycopg 3). This is the only module that
imports SQLAlchemy; it uses SQLAlchemy Core, not the ORM. Every datetime going in must be
timezone-aware; every datetime coming out is timezone-aware UTC.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Dialect, Engine

from tracker.record import MinuteSample, RunRecord

__all__ = ["SCHEMA_VERSION", "RunStore", "StoreError", "default_store_url"]

SCHEMA_VERSION = 1
"""Version of the tables this module writes; stored in ``meta`` under ``schema_version``."""

_SQLITE_BUSY_TIMEOUT_S = 30.0
_LOCKED_RETRIES = 4
_IN_CHUNK = 500
# Key of the PostgreSQL advisory lock that serializes schema creation across processes.
_SCHEMA_LOCK_KEY = 0x67_70_75_6B_70_69  # "gpukpi"
# Execution option that makes the SQLite "begin" listener take the write lock up front.
_WRITE_OPTION = "gpu_kpi_write"

T = TypeVar("T")


class StoreError(Exception):
    """The run store cannot be used: unreachable, bad URL, or a schema newer than this code.

    The message is one line, and any password from the URL in it is masked.
    """


def default_store_url() -> str:
    """``$GPU_KPI_STORE``, else an SQLite file ``runs.db`` in the user's data directory."""
    env = os.environ.get("GPU_KPI_STORE", "").strip()
    if env:
        return env
    import platformdirs

    path = Path(platformdirs.user_data_dir("gpu-kpi", appauthor=False)) / "runs.db"
    return f"sqlite:///{path}"


class _UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime. SQLite keeps it as naive UTC text (fixed width, so text
    order is time order); PostgreSQL as ``timestamptz``."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = _utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


_metadata = sa.MetaData()

runs_table = sa.Table(
    "runs",
    _metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("project", sa.String, nullable=False),
    sa.Column("team", sa.String, nullable=False),
    sa.Column("user", sa.String, nullable=False),
    sa.Column("host", sa.String, nullable=False),
    sa.Column("tags", sa.Text, nullable=False),  # JSON list
    sa.Column("framework", sa.String, nullable=False),
    sa.Column("started_at", _UTCDateTime, nullable=False),
    sa.Column("ended_at", _UTCDateTime),
    sa.Column("heartbeat_at", _UTCDateTime),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("gpu_source", sa.String, nullable=False),
    sa.Column("gpu_model", sa.String),
    sa.Column("gpu_count", sa.Integer, nullable=False),
    sa.Column("nodes", sa.Integer, nullable=False),
    sa.Column("price_per_gpu_hour", sa.Double),
    sa.Column("price_source", sa.String),
    sa.Column("gpu_hours", sa.Double, nullable=False),
    sa.Column("util_pct", sa.Double),
    sa.Column("sm_active_pct", sa.Double),
    sa.Column("mem_peak_gib", sa.Double),
    sa.Column("mem_total_gib", sa.Double),
    sa.Column("energy_kwh", sa.Double),
    sa.Column("steps", sa.BigInteger, nullable=False),
    sa.Column("samples", sa.BigInteger),
    sa.Column("tokens", sa.BigInteger),
    sa.Column("samples_per_s", sa.Double),
    sa.Column("tokens_per_s", sa.Double),
    sa.Column("mfu", sa.Double),
    sa.Column("data_wait_pct", sa.Double),
    sa.Column("cost_usd", sa.Double),
    sa.Column("waste_usd", sa.Double),
    sa.Column("idle_usd", sa.Double),
    sa.Column("verdict", sa.String),
    sa.Column("advice", sa.Text),
    sa.Column("source", sa.String, nullable=False),
    sa.Column("links", sa.Text, nullable=False),  # JSON object
    sa.Index("ix_runs_started_at", "started_at"),
    sa.Index("ix_runs_status", "status"),
)

samples_table = sa.Table(
    "samples",
    _metadata,
    sa.Column("run_id", sa.String, primary_key=True),
    sa.Column("minute", _UTCDateTime, primary_key=True),
    sa.Column("gpu", sa.String, primary_key=True),
    sa.Column("covered_s", sa.Double, nullable=False),
    sa.Column("util_pct", sa.Double),
    sa.Column("sm_active_pct", sa.Double),
    sa.Column("mem_used_gib", sa.Double),
    sa.Column("power_w", sa.Double),
    sa.Column("energy_kwh", sa.Double),
    sa.Index("ix_samples_minute", "minute"),
)

meta_table = sa.Table(
    "meta",
    _metadata,
    sa.Column("key", sa.String, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


class RunStore:
    """Runs and minute samples in one SQL database, chosen by URL (default:
    :func:`default_store_url`). Opening creates the tables when they are missing.

    Safe for many processes at once (SQLite: WAL and write transactions that take the write lock
    up front; PostgreSQL: a server) and for several threads sharing one instance.
    Raises :class:`StoreError` when the database cannot be reached or is newer than this code,
    and ValueError for a naive datetime.
    """

    url: str
    """The store's URL with any password masked, for display."""

    def __init__(self, url: str | None = None, *, connect_timeout_s: float = 5.0) -> None:
        raw = url if url is not None else default_store_url()
        self._url = _parse_url(raw)
        self.url = _mask_url(self._url)
        self._password = self._url.password if isinstance(self._url.password, str) else None
        self._engine = self._create_engine(connect_timeout_s)
        try:
            self._open_schema()
        except BaseException:
            self._engine.dispose()
            raise
        dialect = self._engine.dialect.name
        self._upsert_run = _upsert(dialect, runs_table, ("id",))
        self._upsert_samples = _upsert(dialect, samples_table, ("run_id", "minute", "gpu"))

    def __repr__(self) -> str:
        return f"RunStore({self.url!r})"

    def __enter__(self) -> RunStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every pooled connection. The store can still be used afterwards (it reconnects)."""
        self._engine.dispose()

    # -- writes ---------------------------------------------------------------------------------

    def upsert_run(self, record: RunRecord) -> None:
        """Insert the run, or replace every column of the stored run with the same id."""
        row = _run_to_row(record)
        self._transaction(lambda conn: conn.execute(self._upsert_run, row), write=True)

    def upsert_samples(self, rows: Sequence[MinuteSample]) -> None:
        """Insert minute samples, or update the stored one with the same (run_id, minute, gpu).

        Within ``rows``, a later sample for the same key wins.
        """
        by_key: dict[tuple[str, datetime, str], dict[str, Any]] = {}
        for sample in rows:
            row = _sample_to_row(sample)
            by_key[(row["run_id"], row["minute"], row["gpu"])] = row
        if not by_key:
            return
        params = list(by_key.values())
        # A list of parameter sets: executemany, which SQLAlchemy batches into multi-row INSERTs.
        self._transaction(lambda conn: conn.execute(self._upsert_samples, params), write=True)

    def mark_crashed(self, *, now: datetime, stale_after_s: float = 600.0) -> list[str]:
        """Mark ``running`` runs whose last heartbeat (or start, if none) is more than
        ``stale_after_s`` seconds before ``now`` as ``crashed``, ending them at that heartbeat.

        Returns the ids of the runs it changed, sorted.
        """
        c = runs_table.c
        last_seen = sa.func.coalesce(c.heartbeat_at, c.started_at)
        stale = sa.and_(c.status == "running", last_seen < _utc(now) - timedelta(seconds=stale_after_s))
        update = sa.update(runs_table).values(status="crashed", ended_at=last_seen)

        def work(conn: Connection) -> list[str]:
            if conn.dialect.update_returning:
                return list(conn.execute(update.where(stale).returning(c.id)).scalars())
            # SQLite before 3.35 has no RETURNING. Nothing can change between the two
            # statements: a write transaction there holds the database's write lock.
            ids = list(conn.execute(sa.select(c.id).where(stale)).scalars())
            conn.execute(update.where(c.id.in_(ids)))
            return ids

        return sorted(self._transaction(work, write=True))

    # -- reads ----------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        """The stored run with this id, or None."""
        stmt = sa.select(runs_table).where(runs_table.c.id == run_id)
        row = self._transaction(lambda conn: conn.execute(stmt).mappings().first(), write=False)
        return None if row is None else _row_to_run(row)

    def list_runs(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        project: str | Iterable[str] | None = None,
        team: str | Iterable[str] | None = None,
        status: str | Iterable[str] | None = None,
    ) -> list[RunRecord]:
        """Runs that overlap ``[since, until)``, ordered by start time (then id).

        A run overlaps when it started before ``until`` and had not ended by ``since``; a run
        without ``ended_at`` (still running) is open-ended. ``project``, ``team`` and
        ``status`` each take one value or several.
        """
        c = runs_table.c
        stmt = sa.select(runs_table).order_by(c.started_at, c.id)
        if until is not None:
            stmt = stmt.where(c.started_at < _utc(until))
        if since is not None:
            stmt = stmt.where(sa.or_(c.ended_at.is_(None), c.ended_at > _utc(since)))
        for column, wanted in ((c.project, project), (c.team, team), (c.status, status)):
            if wanted is not None:
                values = [wanted] if isinstance(wanted, str) else list(wanted)
                stmt = stmt.where(column.in_(values))
        rows = self._transaction(lambda conn: conn.execute(stmt).mappings().all(), write=False)
        return [_row_to_run(row) for row in rows]

    def samples(
        self,
        *,
        run_ids: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[MinuteSample]:
        """Minute samples whose minute lies in ``[since, until)``, of the given runs (all runs
        when ``run_ids`` is None), ordered by minute, run id and GPU."""
        c = samples_table.c
        base = sa.select(samples_table)
        if since is not None:
            base = base.where(c.minute >= _utc(since))
        if until is not None:
            base = base.where(c.minute < _utc(until))
        if run_ids is None:
            stmts = [base]
        else:
            ids = list(dict.fromkeys(run_ids))
            # Chunked so a long id list stays under the databases' bound-parameter limits.
            stmts = [base.where(c.run_id.in_(ids[i : i + _IN_CHUNK])) for i in range(0, len(ids), _IN_CHUNK)]

        def work(conn: Connection) -> list[MinuteSample]:
            out: list[MinuteSample] = []
            for stmt in stmts:
                out.extend(MinuteSample(**row) for row in conn.execute(stmt).mappings())
            return out

        result = self._transaction(work, write=False)
        result.sort(key=lambda s: (s.minute, s.run_id, s.gpu))
        return result

    def scan_samples(
        self,
        consume: Callable[[Sequence[tuple[Any, ...]]], None],
        *,
        columns: Sequence[str],
        since: datetime | None = None,
        until: datetime | None = None,
        chunk_rows: int = 250_000,
    ) -> None:
        """Hand the minute samples in ``[since, until)`` to ``consume`` in chunks of raw row
        tuples (``columns`` in that order, any order of rows), for readers of millions of rows
        that build arrays, not objects. ``minute`` comes as the database's raw value: naive UTC
        text on SQLite, a timezone-aware datetime on PostgreSQL."""
        unknown = [name for name in columns if name not in samples_table.c]
        if unknown:
            raise ValueError(f"no sample column {', '.join(unknown)}")
        sqlite = self._engine.dialect.name == "sqlite"
        # Millions of rows: the driver's own cursor hands out plain tuples (SQLAlchemy's rows
        # cost as much again). On SQLite a range over most of the table reads 3x faster as a
        # scan than through the minute index; unary + keeps the planner off that index.
        mark, minute = ("?", "+minute") if sqlite else ("%s", "minute")
        where, params = [], []
        for bound, op in ((since, ">="), (until, "<")):
            if bound is not None:
                value = _utc(bound)
                where.append(f"{minute} {op} {mark}")
                params.append(value.replace(tzinfo=None).isoformat(" ", "microseconds")
                              if sqlite else value)
        sql = (f"SELECT {', '.join(columns)} FROM samples"  # names checked above
               + (f" WHERE {' AND '.join(where)}" if where else ""))

        def work(conn: Connection) -> None:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            cursor = raw.cursor() if sqlite else raw.cursor(name="gpu_kpi_scan")
            try:
                cursor.execute(sql, params)
                while chunk := cursor.fetchmany(chunk_rows):
                    consume(chunk)
            finally:
                cursor.close()

        self._transaction(work, write=False)

    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        version = self._read_version()
        if version is None:
            raise StoreError(f"run store {self.url}: no schema version in table meta")
        return version

    # -- internals ------------------------------------------------------------------------------

    def _create_engine(self, connect_timeout_s: float) -> Engine:
        url = self._url
        if url.get_backend_name() == "postgresql":
            try:
                return sa.create_engine(
                    url,
                    pool_pre_ping=True,
                    # libpq takes whole seconds and treats anything under 2 as 2.
                    connect_args={"connect_timeout": max(1, round(connect_timeout_s))},
                )
            except ModuleNotFoundError as e:
                raise StoreError(
                    f"run store {self.url} needs psycopg: pip install 'gpu-kpi[postgres]' ({e})"
                ) from e
        database = url.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            try:
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"run store {self.url}: cannot create its directory: {e}") from e
        # sqlite3's timeout is SQLite's busy timeout: how long a connection waits for a lock.
        engine = sa.create_engine(url, connect_args={"timeout": _SQLITE_BUSY_TIMEOUT_S})
        sa.event.listen(engine, "connect", _sqlite_on_connect)
        sa.event.listen(engine, "begin", _sqlite_on_begin)
        return engine

    def _transaction(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """Run ``work`` in one transaction; retry when SQLite reports the database locked."""
        for attempt in range(_LOCKED_RETRIES):
            try:
                with self._engine.connect() as conn:
                    if write:
                        conn.execution_options(**{_WRITE_OPTION: True})
                    with conn.begin():
                        return work(conn)
            except sa_exc.OperationalError as e:
                if _is_locked(e) and attempt + 1 < _LOCKED_RETRIES:
                    time.sleep(0.1 * 2**attempt)
                    continue
                raise self._error(e) from e
            except sa_exc.InterfaceError as e:
                raise self._error(e) from e
        raise AssertionError("unreachable")

    def _error(self, exc: BaseException) -> StoreError:
        orig = getattr(exc, "orig", None)
        reason = str(orig if orig is not None else exc) or type(exc).__name__
        return StoreError(_mask_text(f"run store {self.url}: {_one_line(reason)}", self._password))

    def _read_version(self) -> int | None:
        def work(conn: Connection) -> str | None:
            if not sa.inspect(conn).has_table("meta"):
                return None
            stmt = sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")
            return conn.execute(stmt).scalar_one_or_none()

        value = self._transaction(work, write=False)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise StoreError(f"run store {self.url}: bad schema version {value!r}") from None

    def _open_schema(self) -> None:
        version = self._read_version()
        if version is None:
            self._transaction(_create_schema, write=True)
            version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"run store {self.url} has schema version {version}, newer than this gpu-kpi "
                f"understands ({SCHEMA_VERSION}); upgrade gpu-kpi"
            )


def _create_schema(conn: Connection) -> None:
    """Create missing tables and the version row in one transaction. Concurrent openers of a
    new database queue behind each other: SQLite through BEGIN IMMEDIATE, PostgreSQL through
    an advisory lock; the one that comes second finds the tables in place."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
    _metadata.create_all(conn, checkfirst=True)
    stmt = _upsert(conn.dialect.name, meta_table, ("key",), update=False)
    conn.execute(stmt, {"key": "schema_version", "value": str(SCHEMA_VERSION)})


def _upsert(dialect_name: str, table: sa.Table, keys: Sequence[str], *, update: bool = True) -> sa.Executable:
    """``INSERT … ON CONFLICT (keys)`` that updates every other column, or does nothing."""
    stmt: postgresql.Insert | sqlite.Insert
    stmt = postgresql.insert(table) if dialect_name == "postgresql" else sqlite.insert(table)
    index = [table.c[k] for k in keys]
    if not update:
        return stmt.on_conflict_do_nothing(index_elements=index)
    others = {c.name: stmt.excluded[c.name] for c in table.c if c.name not in keys}
    return stmt.on_conflict_do_update(index_elements=index, set_=others)


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # pysqlite's own transaction handling would BEGIN (deferred) behind our back; turn it off
    # so that _sqlite_on_begin decides how each transaction starts.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        # With WAL, NORMAL is durable across process crashes; only an OS crash may lose the
        # last commits.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    # A deferred transaction that reads and then writes must upgrade its lock, and SQLite fails
    # such an upgrade at once with "database is locked" instead of waiting. Writers take the
    # write lock at BEGIN, where the busy timeout applies.
    write = conn.get_execution_options().get(_WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _is_locked(exc: sa_exc.OperationalError) -> bool:
    message = str(exc.orig).lower()
    return "database is locked" in message or "database is busy" in message


def _parse_url(raw: str) -> URL:
    try:
        url = sa.make_url(raw.strip())
    except sa_exc.ArgumentError:
        raise StoreError(f"bad run store URL {_mask_text(raw, None)!r}") from None
    backend = url.get_backend_name()
    if backend in ("postgres", "postgresql"):
        if url.drivername in ("postgres", "postgresql"):
            url = url.set(drivername="postgresql+psycopg")
        elif backend == "postgres":
            url = url.set(drivername="postgresql+" + url.get_driver_name())
    elif backend != "sqlite":
        raise StoreError(
            f"unsupported run store URL {_mask_url(url)!r}: use sqlite:///PATH or postgresql://…"
        )
    return url


def _mask_url(url: URL) -> str:
    return url.render_as_string(hide_password=True)


_USERINFO = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def _mask_text(text: str, password: str | None) -> str:
    """``text`` with URL passwords (``://user:PASSWORD@``) and ``password`` itself masked."""
    text = _USERINFO.sub(r"\1***@", text)
    # A short password would match inside ordinary words; the URL form above covers it.
    if password and len(password) >= 4:
        text = text.replace(password, "***")
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value.isoformat()}: the run store needs timezone-aware times")
    return value.astimezone(UTC)


def _run_to_row(record: RunRecord) -> dict[str, Any]:
    row = record.as_dict()
    row["tags"] = json.dumps(list(record.tags))
    row["links"] = json.dumps(record.links, sort_keys=True)
    for name in ("started_at", "ended_at", "heartbeat_at"):
        if row[name] is not None:
            row[name] = _utc(row[name])
    return row


def _row_to_run(row: sa.RowMapping) -> RunRecord:
    values = dict(row)
    values["tags"] = tuple(json.loads(values["tags"]))
    values["links"] = json.loads(values["links"])
    return RunRecord(**values)


def _sample_to_row(sample: MinuteSample) -> dict[str, Any]:
    row = dataclasses.asdict(sample)
    row["minute"] = _utc(sample.minute)
    return row
