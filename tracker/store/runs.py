"""The run store: run records and per-minute GPU samples (see the package docstring)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

from tracker.extras import install_hint
from tracker.record import MinuteSample, RunRecord
from tracker.store import changes, rollup_sql
from tracker.store.engine import (
    LOCKED_RETRIES,
    SQLITE_BUSY_TIMEOUT_S,
    WRITE_OPTION,
    StoreError,
    default_store_url,
    is_locked,
    mask_text,
    mask_url,
    parse_url,
    ping_if_idle,
    sqlite_on_begin,
    sqlite_on_connect,
    url_password,
)
from tracker.store.rollups import Rollup
from tracker.store.schema import (
    SCHEMA_VERSION,
    create_schema,
    meta_table,
    rollups_table,
    row_to_run,
    run_select_columns,
    run_to_row,
    runs_table,
    sample_rows,
    samples_table,
    upsert,
    utc,
)
from tracker.text import one_line, storable

_IN_CHUNK = 500

T = TypeVar("T")


STALE_AFTER_S = 600.0
"""Seconds without a heartbeat after which a ``running`` run has crashed."""


class RunStore:
    """Runs and minute samples in one SQL database, chosen by URL. Opening creates the tables
    when they are missing and migrates an older schema (a writer's open; a reader leaves it).

    Safe for many processes at once (SQLite: WAL and write transactions that take the write lock
    up front; PostgreSQL: a server) and for several threads sharing one instance. Every datetime
    passed in must be timezone-aware (a naive one is a ValueError); every datetime read back is
    timezone-aware UTC.

    Args:
        url: ``sqlite:///PATH`` or ``postgresql://…``; None: :func:`default_store_url`.
        connect_timeout_s: Seconds to wait for a PostgreSQL server (whole seconds, at least 1).
        create: False (the read-only commands): refuse a store that does not exist yet instead
            of creating an empty one and its folders, and leave an old schema as it is.

    Raises:
        StoreError: The database cannot be reached, is not a run store (a text file, a damaged
            SQLite file, tables without a valid schema version), is newer than this code, or
            (``create=False``) does not exist or is empty.
    """

    url: str
    """The store's URL with any password masked, for display."""
    version: int
    """The store's schema version: 1 (no rollups: reports read the minutes) or 2."""

    def __init__(
        self, url: str | None = None, *, connect_timeout_s: float = 5.0, create: bool = True
    ) -> None:
        raw = url if url is not None else default_store_url()
        self._url = parse_url(raw)
        self.url = mask_url(self._url)
        self._password = url_password(self._url)
        if not create:
            self._require_file()
        self._engine = self._create_engine(connect_timeout_s)
        try:
            self._open_schema(create=create)
        except sa_exc.DBAPIError as e:
            # the first contact: what fails here is the URL's or the database's fault (a
            # connection option libpq does not know, a damaged file), not a bug of ours
            self._engine.dispose()
            raise self._error(e) from e
        except BaseException:
            self._engine.dispose()
            raise
        dialect = self._engine.dialect.name
        self._upsert_run = upsert(dialect, runs_table, ("id",))
        self._upsert_samples = upsert(dialect, samples_table, ("run_id", "minute", "gpu"))

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
        """Close every pooled connection; the store can still be used afterwards (it reconnects)."""
        self._engine.dispose()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for the reads and tables other modules keep in the same
        database (:mod:`reports.data`: the fleet scans, the delivery log, the BI tables)."""
        return self._engine

    def transaction(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """Run ``work(connection)`` in one transaction, as the store's own reads and writes do.

        On SQLite a writer takes the write lock at BEGIN and a locked database is retried (with
        backoff, :data:`tracker.store.engine.LOCKED_RETRIES` times).

        Args:
            work: Called with the open connection; committed when it returns.
            write: Whether ``work`` writes (on SQLite: take the write lock up front).

        Returns:
            What ``work`` returned.

        Raises:
            StoreError: The database failed (unreachable, locked past the retries, damaged),
                its message with any password masked.
        """
        return self._transaction(work, write=write)

    # -- writes ---------------------------------------------------------------------------------

    def upsert_run(self, record: RunRecord) -> None:
        """Insert the run, or replace every column of the stored run with the same id.

        Args:
            record: The run; its datetimes timezone-aware.

        Raises:
            StoreError: The database failed.
            ValueError: A naive datetime.
        """
        row = run_to_row(record)

        def work(conn: Connection) -> None:
            if conn.dialect.name == "postgresql" and self.version >= 4:
                # the counters of its span before (read by the statement) and after, and the
                # run, one statement where they can be, the transaction's only one: a
                # heartbeat every minute in one round trip (a statement costs the client
                # 50-100 µs)
                batch = (self._upsert_run, [row], runs_table)
                rollup_sql.execute_all(conn, [batch], also=changes.run_statement(row), last=True)
                return
            touched = changes.Touched()
            if self.version >= 4:  # the days of its span before and after
                for old in changes.stored_spans(conn, [row["id"]]):
                    touched.run(old)
                touched.run(row)
            conn.execute(self._upsert_run, row)
            touched.raise_(conn)

        self._transaction(work, write=True)

    def upsert_samples(self, rows: Sequence[MinuteSample]) -> None:
        """Insert minute samples, or update the stored one with the same (run_id, minute, gpu),
        and refresh the hourly rollups they change, in one transaction.

        Args:
            rows: The samples (minutes timezone-aware); within them, a later sample for the same
                key wins.

        Raises:
            StoreError: The database failed.
            ValueError: A naive datetime.
        """
        if rows:
            self.put((), rows)

    def put(
        self,
        records: Sequence[RunRecord],
        rows: Sequence[MinuteSample],
        *,
        drop: Sequence[str] = (),
        rollups: Mapping[str, Sequence[Rollup]] | None = None,
    ) -> None:
        """:meth:`upsert_run` of each record and :meth:`upsert_samples` of ``rows`` in one
        transaction (an import): all of it is stored, or nothing.

        Args:
            records: Runs to insert or replace.
            rows: Minute samples to insert or replace.
            drop: Run ids (a re-import's own, and those it replaces) whose record, samples and
                rollups are deleted first.
            rollups: Rollups of runs in ``drop``, as
                :func:`tracker.store.rollups.sample_rollups` gives them from ``rows`` (computed
                by the caller where it has time to spare); the others' are computed here.

        Raises:
            StoreError: The database failed; nothing was stored.
            ValueError: A naive datetime.
        """
        runs = [run_to_row(r) for r in records]
        by_key = sample_rows(rows)
        # each series' first minute and each run's last, in one pass over the keys
        first: dict[tuple[str, str], datetime] = {}
        last: dict[str, datetime] = {}
        for run_id, minute, gpu in by_key:
            if (was := first.get(series := (run_id, gpu))) is None or minute < was:
                first[series] = minute
            if (was := last.get(run_id)) is None or minute > was:
                last[run_id] = minute
        ids = list(dict.fromkeys(drop))
        # each run's days with samples written: from its first to its last minute
        minutes: dict[str, tuple[datetime, datetime]] = {}
        for (run_id, _), minute in first.items():
            lo, hi = minutes.get(run_id, (minute, last[run_id]))
            minutes[run_id] = (min(lo, minute), hi)
        # in the primary key's order (run, minute, GPU), not as they came (an import's: GPU
        # after GPU): SQLite's key and minute indexes are then appended to, not split all over
        # (a third of an import's insert time); the rows and what is stored are the same
        ordered = [by_key[key] for key in sorted(by_key)]

        def work(conn: Connection) -> None:
            touched = changes.Touched()
            # PostgreSQL: the locks of the runs whose rollups are added to, taken with the
            # spans' read (a statement less; rollup_sql.write_samples takes them otherwise)
            lock: list[str] = []
            if conn.dialect.name == "postgresql" and self.version >= 4:
                lock = sorted(minutes.keys() - set(ids))
            if self.version >= 4:  # before anything is deleted or replaced
                # a run's first samples change its every week (measured by its samples from
                # then on, not pro rata by its summary): its whole span, not only the minutes'
                spans = [*ids, *(r["id"] for r in runs), *minutes]
                for old in changes.stored_spans(conn, list(dict.fromkeys(spans)), lock=lock):
                    touched.run(old)
                for run_id, days in changes.sample_days(conn, ids).items():
                    touched.days(run_id, days)
                for r in runs:
                    touched.run(r)
                for run_id, (lo, hi) in minutes.items():
                    touched.days(run_id, changes.span_days(lo, hi))
            for i in range(0, len(ids), _IN_CHUNK):
                for table in (
                    runs_table,
                    samples_table,
                    *([rollups_table] if self.version >= 2 else []),
                ):
                    key = table.c.id if table is runs_table else table.c.run_id
                    conn.execute(sa.delete(table).where(key.in_(ids[i : i + _IN_CHUNK])))
            if runs:
                conn.execute(self._upsert_run, runs)
            rollup_sql.write_samples(
                conn,
                self._upsert_samples,
                ordered,
                samples_table,
                first=first,
                dropped=set(ids),
                rollups=rollups or {},
                keep_rollups=self.version >= 2,
                locked=lock,
                touched=touched,
                last=True,  # then only the counters, sent with the rows where they can be
            )
            touched.raise_(conn)

        self._transaction(work, write=True)

    def rebuild_rollups(self) -> int:
        """Recompute every rollup from the minute samples (after a bulk load or a repair). An
        older store is migrated first.

        Returns:
            The number of rollup rows written.

        Raises:
            StoreError: The database failed.
        """
        if self.version < SCHEMA_VERSION:
            self._transaction(lambda conn: rollup_sql.migrate(conn, self.version), write=True)
            self.version = SCHEMA_VERSION

        def work(conn: Connection) -> int:
            written = rollup_sql.rebuild(conn)
            # damaged rollups left out of kept weeks are back: every kept week is stale
            changes.raise_all(conn)
            return written

        return self._transaction(work, write=True)

    def mark_crashed(self, *, now: datetime, stale_after_s: float = STALE_AFTER_S) -> list[str]:
        """Mark ``running`` runs whose last heartbeat (or start, if none) is more than
        ``stale_after_s`` seconds before ``now`` as ``crashed``, ending them at that heartbeat.

        Args:
            now: The time to judge by (timezone-aware).
            stale_after_s: Seconds without a heartbeat after which a run is crashed.

        Returns:
            The ids of the runs it changed, sorted.

        Raises:
            StoreError: The database failed.
        """
        c = runs_table.c
        last_seen = sa.func.coalesce(c.heartbeat_at, c.started_at)
        stale = sa.and_(
            c.status == "running", last_seen < utc(now) - timedelta(seconds=stale_after_s)
        )
        update = sa.update(runs_table).values(status="crashed", ended_at=last_seen)

        def work(conn: Connection) -> list[str]:
            if conn.dialect.update_returning:
                ids = list(conn.execute(update.where(stale).returning(c.id)).scalars())
            else:
                # SQLite before 3.35 has no RETURNING. Nothing can change between the two
                # statements: a write transaction there holds the database's write lock.
                ids = list(conn.execute(sa.select(c.id).where(stale)).scalars())
                conn.execute(update.where(c.id.in_(ids)))
            if self.version >= 4 and ids:
                # a running run counted up to now until here: every day from its start
                touched = changes.Touched()
                for old in changes.stored_spans(conn, ids):
                    touched.days(
                        old["id"], changes.span_days(changes.as_time(old["started_at"]), now)
                    )
                touched.raise_(conn)
            return ids

        return sorted(self._transaction(work, write=True))

    # -- reads ----------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        """The stored run with this id.

        Args:
            run_id: The run's id.

        Returns:
            The run (datetimes timezone-aware UTC), or None when there is none.

        Raises:
            StoreError: The database failed.
        """
        stmt = sa.select(*run_select_columns(self.version)).where(
            runs_table.c.id == storable(run_id)
        )
        row = self._transaction(lambda conn: conn.execute(stmt).mappings().first(), write=False)
        return None if row is None else row_to_run(row)

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
        without ``ended_at`` (still running) is open-ended.

        Args:
            since: The span's start (timezone-aware); None: no lower bound.
            until: The span's end, excluded (timezone-aware); None: no upper bound.
            project: Only runs of this project, or of these.
            team: Only runs of this team, or of these.
            status: Only runs with this status, or these.

        Returns:
            The runs, their datetimes timezone-aware UTC.

        Raises:
            StoreError: The database failed.
            ValueError: A naive datetime. A stored row that is no record fails the call too
                (the reports read runs row by row:
                :meth:`reports.data.scans.SampleScans.read_runs`).
        """
        c = runs_table.c
        stmt = sa.select(*run_select_columns(self.version)).order_by(c.started_at, c.id)
        if until is not None:
            stmt = stmt.where(c.started_at < utc(until))
        if since is not None:
            stmt = stmt.where(sa.or_(c.ended_at.is_(None), c.ended_at > utc(since)))
        for column, wanted in ((c.project, project), (c.team, team), (c.status, status)):
            if wanted is not None:
                values = [wanted] if isinstance(wanted, str) else list(wanted)
                stmt = stmt.where(column.in_(values))
        rows = self._transaction(lambda conn: conn.execute(stmt).mappings().all(), write=False)
        return [row_to_run(row) for row in rows]

    def samples(
        self,
        *,
        run_ids: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[MinuteSample]:
        """Minute samples whose minute lies in ``[since, until)``, of the given runs.

        Args:
            run_ids: The runs; None: every run.
            since: The first minute (timezone-aware); None: no lower bound.
            until: The minute the span ends before (timezone-aware); None: no upper bound.

        Returns:
            The samples, ordered by minute, run id and GPU, minutes timezone-aware UTC.

        Raises:
            StoreError: The database failed.
            ValueError: A naive datetime.
        """
        c = samples_table.c
        base = sa.select(samples_table)
        if since is not None:
            base = base.where(c.minute >= utc(since))
        if until is not None:
            base = base.where(c.minute < utc(until))
        if run_ids is None:
            stmts = [base]
        else:
            ids = list(dict.fromkeys(run_ids))
            # Chunked so a long id list stays under the databases' bound-parameter limits.
            stmts = [
                base.where(c.run_id.in_(ids[i : i + _IN_CHUNK]))
                for i in range(0, len(ids), _IN_CHUNK)
            ]

        def work(conn: Connection) -> list[MinuteSample]:
            out: list[MinuteSample] = []
            for stmt in stmts:
                out.extend(MinuteSample(**row) for row in conn.execute(stmt).mappings())
            return out

        result = self._transaction(work, write=False)
        result.sort(key=lambda s: (s.minute, s.run_id, s.gpu))
        return result

    def schema_version(self) -> int:
        """The schema version recorded in the database.

        Returns:
            The version (1: no rollups; 2: hourly rollups kept).

        Raises:
            StoreError: The database failed or records no version.
        """
        version = self._read_version()
        if version is None:
            raise StoreError(f"run store {self.url}: no schema version in table meta")
        return version

    # -- internals ------------------------------------------------------------------------------

    def _create_engine(self, connect_timeout_s: float) -> Engine:
        url = self._url
        if url.get_backend_name() == "postgresql":
            try:
                engine = sa.create_engine(
                    url,
                    # libpq takes whole seconds and treats anything under 2 as 2.
                    connect_args={"connect_timeout": max(1, round(connect_timeout_s))},
                )
                ping_if_idle(engine)
                return engine
            except ModuleNotFoundError as e:
                raise StoreError(
                    f"run store {self.url} needs psycopg: {install_hint('postgres')} ({e})"
                ) from e
        database = url.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            try:
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"run store {self.url}: cannot create its directory: {e}") from e
        # sqlite3's timeout is SQLite's busy timeout: how long a connection waits for a lock.
        engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
        sa.event.listen(engine, "connect", sqlite_on_connect)
        sa.event.listen(engine, "begin", sqlite_on_begin)
        return engine

    def _transaction(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """Run ``work`` in one transaction; retry when SQLite reports the database locked."""
        for attempt in range(LOCKED_RETRIES):
            try:
                with self._engine.connect() as conn:
                    if write:
                        conn.execution_options(**{WRITE_OPTION: True})
                    with conn.begin():
                        return work(conn)
            except sa_exc.OperationalError as e:
                if is_locked(e) and attempt + 1 < LOCKED_RETRIES:
                    time.sleep(0.1 * 2**attempt)
                    continue
                raise self._error(e) from e
            except (sa_exc.IntegrityError, sa_exc.ProgrammingError) as e:
                if getattr(e.orig, "sqlstate", None) == "42501":  # insufficient_privilege
                    raise self._error(e) from e  # a role that may only read: the store's state
                raise  # our bug, not the store's state
            except sa_exc.DataError as e:  # a value it will never take: not "unavailable"
                raise self._error(e, refused=True) from e
            except (sa_exc.InterfaceError, sa_exc.DatabaseError) as e:
                # a text file or a damaged SQLite file ("file is not a database", "database disk
                # image is malformed"), or a PostgreSQL value it cannot take
                raise self._error(e) from e
        raise AssertionError("unreachable")

    def _error(self, exc: BaseException, *, refused: bool = False) -> StoreError:
        orig = getattr(exc, "orig", None)
        reason = str(orig if orig is not None else exc) or type(exc).__name__
        what = "refused a value: " if refused else ""
        return StoreError(
            mask_text(f"run store {self.url}: {what}{one_line(reason)}", self._password),
            refused=refused,
        )

    def _require_file(self) -> None:
        database = self._url.database or ""
        if (
            self._url.get_backend_name() != "sqlite"
            or not database
            or database == ":memory:"
            or database.startswith("file:")
        ):
            return
        path = Path(database).expanduser()
        if not path.exists():
            raise StoreError(
                f"no run store at {path}: nothing has been tracked into it (check "
                "--store or GPU_KPI_STORE)"
            )
        if path.is_file() and path.stat().st_size == 0:  # left as it is: opening would change it
            raise StoreError(
                f"run store {self.url} is empty: nothing has been tracked into it "
                "(check --store or GPU_KPI_STORE)"
            )

    def _read_version(self) -> int | None:
        """The recorded schema version; None for a database with none of our tables (a new
        store). Tables without a valid version are an error, never silently accepted."""

        def work(conn: Connection) -> tuple[set[str], str | None]:
            tables = set(sa.inspect(conn).get_table_names()) & {"meta", "runs", "samples"}
            if "meta" not in tables:
                return tables, None
            stmt = sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")
            return tables, conn.execute(stmt).scalar_one_or_none()

        tables, value = self._transaction(work, write=False)
        if not tables:
            return None
        if value is None:
            what = "a meta table without" if "meta" in tables else "tables but no meta table with"
            raise StoreError(
                f"run store {self.url} has {what} a schema version: not a gpu-kpi "
                "store, or a damaged one"
            )
        try:
            version = int(value)
        except (TypeError, ValueError):
            version = 0
        if version < 1:
            raise StoreError(
                f"run store {self.url}: bad schema version {value!r} (expected a "
                f"whole number from 1 to {SCHEMA_VERSION})"
            )
        return version

    def _open_schema(self, *, create: bool = True) -> None:
        version = self._read_version()
        if version is None:
            if not create:
                raise StoreError(
                    f"run store {self.url} is empty: nothing has been tracked into "
                    "it (check --store or GPU_KPI_STORE)"
                )
            self._transaction(create_schema, write=True)
            version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"run store {self.url} has schema version {version}, newer than this gpu-kpi "
                f"understands ({SCHEMA_VERSION}); upgrade gpu-kpi"
            )
        if version < SCHEMA_VERSION and create:  # a reader leaves an old store as it is
            old = version
            self._transaction(lambda conn: rollup_sql.migrate(conn, old), write=True)
            version = SCHEMA_VERSION
        self.version = version
