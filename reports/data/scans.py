"""The reports' reads of the samples table at fleet scale: millions of minute rows scanned in
raw chunks, summed per run, GPU and week in the database, and read around idle stretches; and
the runs read so that one unreadable row does not stop the report. :class:`SampleScans` reads a
:class:`tracker.store.RunStore` through its public ``transaction`` and ``engine``.

Only usable sample rows are read (:mod:`.samples`): a row whose ``covered_s`` is text,
non-finite or not in ``[0, 60]``, or whose minute is not shaped like a time, is left out, and
:meth:`SampleScans.sample_totals` counts it. On SQLite, text that is not UTF-8 (``CAST(X'ff' AS
TEXT)``) is read with the bad bytes replaced (U+FFFD) by the reads that give runs and totals,
rather than failing the whole read."""

from __future__ import annotations

import bisect
import importlib.util
import itertools
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from reports.data.adbc_read import NANOARROW_BELOW_RUNS, read_table
from reports.data.rollups import (
    SUMMED,
    RollupHour,
    RollupTotals,
    hour_rows_sql,
    rollup_hours,
    rollup_totals,
    rollup_totals_frame,
    summed_as_sqlite,
    totals_of,
)
from reports.data.samples import (
    MISSHAPED_BUCKET,
    SampleTotals,
    bucket_case,
    check_sample_columns,
    lenient_text,
    sampled_run_ids,
    text_of,
)
from tracker.record import RunRecord
from tracker.store import RunStore, StoreError
from tracker.store.changes import as_time
from tracker.store.sample_sql import TIME_SHAPE, SampleSQL, checked_value
from tracker.store.schema import (
    UTCDateTime,
    row_to_run,
    run_select_columns,
    runs_table,
    samples_table,
    utc,
)
from tracker.units import S_PER_HOUR

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("gpu_kpi")

T = TypeVar("T")

# Reading samples in parts at once (SQLite): at most this many, each of at least this many rows.
_MAX_SAMPLE_READERS = 4

_IN_CHUNK = 500

_ROWS_PER_READER = 500_000

_ROWID: sa.ColumnClause[int] = sa.literal_column("runs.rowid")

ARROW_FROM_RUNS = 40_000
"""Runs started in a span from which :meth:`SampleScans.run_table` reads a SQLite store into
Arrow: the driver's process costs ~0.3 s of CPU to start, and each run ~6 µs against the
tuples' ~14 µs (100,800 runs: 0.9-1.1 s against 1.3-1.5 s). From as many,
:meth:`SampleScans.rollup_totals_frame` reads the span's rollup rows by the driver and sums
them in this process (:func:`summed_as_sqlite`): SQLite's ``GROUP BY`` sorts each row's 14
columns first, grouping by hash does not, and a group is a frame row, not a tuple (235,000 rows
of 101,000 runs: 0.8-1.0 s against 1.2-1.6 s; 168,000 rows of 125 runs: 0.6 s against 0.4 s)."""

_ARROW_TEXT = ("string", "large_string")
_ARROW_NUMBERS = ("int64", "double")


@dataclass(frozen=True, kw_only=True)
class UnreadableRun:
    """A row of ``runs`` that :meth:`SampleScans.read_runs` could not make a record of."""

    run_id: str
    name: str
    reason: str


class GpuSpan(NamedTuple):
    """A run's minute samples of one GPU in a span: :meth:`SampleScans.gpu_spans`."""

    run_id: str
    gpu: str
    first: datetime
    """The first minute (timezone-aware UTC)."""
    last: datetime
    """The last minute (timezone-aware UTC)."""


def _check_tags_links(values: dict[str, Any]) -> str:
    """The first of ``tags`` (a JSON list of strings) and ``links`` (a JSON object of strings)
    that is not what the store writes, or ``""``."""
    for column in ("tags", "links"):
        try:
            value = json.loads(values[column])
        except Exception:  # not JSON, nested past the parser's depth, bytes that are no text
            return column
        if column == "tags":
            ok = isinstance(value, list) and all(isinstance(t, str) for t in value)
        else:
            ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        if not ok:
            return column
    return ""


def _stored_time(raw: Any) -> datetime | None:
    """A stored time as the driver returns it (SQLite: naive UTC text) as an aware UTC datetime;
    ValueError when it is not a time."""
    if raw is None:
        return None
    if isinstance(raw, datetime):
        return utc(raw)
    value = as_time(raw) if isinstance(raw, str) else None  # the store's own reading of text
    if value is None:
        raise ValueError(f"not a time: {raw!r}")
    return value.astimezone(UTC)


RUN_COLUMNS = tuple(col.name for col in runs_table.c)
"""The columns of :meth:`SampleScans.run_rows`' tuples, in order (a :class:`RunRecord`'s fields)."""

TIME_COLUMNS = tuple(col.name for col in runs_table.c if isinstance(col.type, UTCDateTime))
"""The columns of :data:`RUN_COLUMNS` that hold times."""


def records_of(rows: Iterable[Sequence[Any]]) -> tuple[list[RunRecord], list[UnreadableRun]]:
    """The records of rows of :meth:`SampleScans.run_rows`, one row at a time: a row that
    cannot be a record (a time that is no time, tags or links that are not what the store
    writes, whatever else fails on the row) is named with the reason instead."""
    runs: list[RunRecord] = []
    unreadable: list[UnreadableRun] = []
    for row in rows:
        values = dict(zip(RUN_COLUMNS, row, strict=True))
        column = ""
        try:
            for column in TIME_COLUMNS:
                values[column] = _stored_time(values[column])
            column = _check_tags_links(values)
            if column:
                raise ValueError(column)
            runs.append(row_to_run(values))  # type: ignore[arg-type]
        except Exception as e:  # one row: whatever it raises, it is named, not fatal
            reason = f"unreadable {column}" if column else f"unreadable row ({type(e).__name__})"
            unreadable.append(
                UnreadableRun(
                    run_id=text_of(values.get("id")),
                    name=text_of(values.get("name")),
                    reason=reason,
                )
            )
    return runs, unreadable


def database_per_connection(engine: Engine) -> bool:
    """Whether each connection of ``engine`` opens a database of its own: SQLite in memory
    (no file, ``:memory:``, a ``mode=memory`` URI). A second connection, a reading thread's or
    a second driver's, would see none of the store's rows there.

    Args:
        engine: The store's engine.

    Returns:
        True for such a SQLite database; False for a file or another database."""
    database = engine.url.database or ""
    return engine.dialect.name == "sqlite" and (
        database in ("", ":memory:") or "mode=memory" in database
    )


def mark_crashed(store: RunStore, *, now: datetime) -> bool:
    """Mark the runs that stopped beating crashed, as every reading command does first; on a
    store this process may only read (a read replica, a role that may only SELECT, a file
    opened read-only) a warning instead. No pandas: ``gpu-kpi runs`` reads a store without
    the reports extra.

    Args:
        store: The open run store.
        now: The time of the read (timezone-aware): a ``running`` run without a heartbeat for
            :data:`tracker.store.runs.STALE_AFTER_S` seconds before it is crashed.

    Returns:
        Whether the runs were marked (False: the store could only be read).
    """
    try:
        store.mark_crashed(now=now)
    except StoreError as e:
        log.warning(
            "gpu-kpi: the store is read as it is (%s): runs that stopped beating are not "
            "marked crashed in it",
            e,
        )
        return False
    return True


class SampleScans:
    """The reports' fleet-scale reads of one open run store.

    Args:
        store: The store read (it stays open; closing it is the caller's).
    """

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._engine = store.engine

    def _transaction(self, work: Callable[[Connection], T], *, write: bool) -> T:
        return self.store.transaction(work, write=write)

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
        check_sample_columns(columns)
        sqlite = self._engine.dialect.name == "sqlite"
        selection = SampleSQL(sqlite, since, until)
        where = (
            f"{selection.where} {'AND' if selection.where else 'WHERE'} "
            f"{selection.usable} AND {selection.shaped}"
        )
        sql = f"SELECT {', '.join(columns)} FROM {selection.table}{where}"  # names checked

        def work(conn: Connection) -> None:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            # Millions of rows: the driver's own cursor hands out plain tuples (SQLAlchemy's rows
            # cost as much again).
            cursor = raw.cursor() if sqlite else raw.cursor(name="gpu_kpi_scan")
            try:
                cursor.execute(sql, selection.params)
                while chunk := cursor.fetchmany(chunk_rows):
                    consume(chunk)
            finally:
                cursor.close()

        self._transaction(work, write=False)

    def sample_totals(
        self,
        *,
        value: str,
        low_under: float,
        bucket_edges: Sequence[datetime] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        value_range: tuple[float, float] | None = None,
    ) -> list[SampleTotals]:
        """The minute samples in ``[since, until)`` summed in the database per run, GPU and
        time bucket, so that a week of a fleet (millions of rows) comes back as thousands.

        ``value`` is a utilization column (``util_pct`` or ``sm_active_pct``); ``low_under``
        finds the first and the last minute whose value is under it. ``value_range``: a value
        outside it (or text, or non-finite) counts as unknown, in ``bad_values``; None takes
        the values as they are. ``bucket_edges`` (ascending) cut time into buckets: a minute's
        bucket is the number of edges at or before it. Unusable rows are left out and counted
        in ``dropped``; a bucket of only such rows comes back with ``minutes == 0``. Rows come
        in no order. Rows whose minute is not shaped like a time are left out and counted in
        ``bad_minutes``."""
        check_sample_columns([value])
        sqlite = self._engine.dialect.name == "sqlite"
        span = self._minute_span(since, until)
        if span is None:
            return []
        # Each edge may cost every row a comparison: only those inside the samples' span cut
        # (a bound that is no time cuts nothing off).
        edges = sorted(bucket_edges, key=utc)
        first, last = span
        below = 0 if first is None else bisect.bisect_right(edges, first, key=utc)
        above = len(edges) if last is None else bisect.bisect_right(edges, last, key=utc)
        inner = edges[below:above]

        def read(rowids: tuple[int | None, int | None]) -> list[SampleTotals]:
            selection = SampleSQL(sqlite, since, until, rowids=rowids)
            bucket, bucket_params = bucket_case(selection, inner, first=below)
            if sqlite:  # a minute not shaped like a time: bucket -1, its rows counted apart
                bucket = f"CASE WHEN {selection.shaped} THEN {bucket} ELSE {MISSHAPED_BUCKET} END"
            # c: covered_s of a usable row, else NULL; v: the value where usable, else NULL.
            # A subquery the planner flattens: each costs one CASE per row, not a second scan
            # (and so c's CASE is evaluated where c is named: the minute's shape, dearer than a
            # BETWEEN, is checked once, in the bucket).
            rows = (
                f"SELECT run_id, gpu, minute, {value} AS raw, "  # names checked
                f"CASE WHEN {selection.usable} THEN covered_s END AS c, "
                f"{checked_value(value, value_range)} AS v "
                f"FROM {selection.table}{selection.where}"
            )
            low = f"CASE WHEN c IS NOT NULL AND v < {selection.mark} THEN minute END"
            sql = (
                f"SELECT run_id, gpu, {bucket} AS bucket, COUNT(c), COALESCE(SUM(c), 0), "
                f"COALESCE(SUM(CASE WHEN v IS NOT NULL THEN c END), 0), "
                f"COALESCE(SUM(v * c), 0), MIN({low}), MAX({low}), COUNT(*) - COUNT(c), "
                f"COUNT(CASE WHEN c IS NOT NULL AND raw IS NOT NULL AND v IS NULL THEN 1 END) "
                f"FROM ({rows}) AS usable GROUP BY run_id, gpu, bucket"
            )
            params = (*bucket_params, low_under, low_under, *selection.params)

            def work(conn: Connection) -> list[SampleTotals]:
                with lenient_text(conn):
                    rows = conn.exec_driver_sql(sql, params).all()
                return [
                    SampleTotals(
                        run_id=r[0],
                        gpu=r[1],
                        bucket=int(r[2]),
                        minutes=int(r[3]),
                        covered_s=float(r[4]),
                        known_s=float(r[5]),
                        value_s=float(r[6]),
                        first_low=selection.minute(r[7]),
                        last_low=selection.minute(r[8]),
                        dropped=int(r[9]),
                        bad_values=int(r[10]),
                    )
                    if r[2] != MISSHAPED_BUCKET
                    else SampleTotals.misshaped(r[0], r[1], int(r[3]) + int(r[9]))
                    for r in rows
                ]

            return self._transaction(work, write=False)

        merged: dict[tuple[str, str, int], SampleTotals] = {}
        for part in self._read_sample_parts(read):
            for t in part:
                key = (t.run_id, t.gpu, t.bucket)
                merged[key] = merged[key].merge(t) if key in merged else t
        return list(merged.values())

    def rollup_totals(
        self, *, value: str, hour_edges: Sequence[int], since_hour: int, until_hour: int
    ) -> list[RollupTotals]:
        """:func:`reports.data.rollups.rollup_totals` (a version 2 store)."""

        def read(conn: Connection) -> list[RollupTotals]:
            return rollup_totals(
                conn,
                value=value,
                hour_edges=hour_edges,
                since_hour=since_hour,
                until_hour=until_hour,
            )

        return self._read_text(read)

    def rollup_totals_frame(
        self, *, value: str, hour_edges: Sequence[int], since_hour: int, until_hour: int
    ) -> pd.DataFrame:
        """:func:`reports.data.rollups.rollup_totals_frame` (a version 2 store); in a SQLite
        file where :data:`ARROW_FROM_RUNS` runs started in the span, read by ADBC's driver in
        a process of its own (:mod:`reports.data.adbc_read`) and summed here as SQLite sums
        them (:func:`summed_as_sqlite`)."""
        summed = self._summed_in_child(value, hour_edges, since_hour, until_hour)
        if summed is not None:
            return totals_of(summed)
        return self._read_text(
            lambda conn: rollup_totals_frame(
                conn,
                value=value,
                hour_edges=hour_edges,
                since_hour=since_hour,
                until_hour=until_hour,
            )
        )

    def _summed_in_child(
        self, value: str, hour_edges: Sequence[int], since_hour: int, until_hour: int
    ) -> pd.DataFrame | None:
        """The rollups of the span (:func:`reports.data.rollups.hour_rows_sql`) read by ADBC's
        driver and summed (:data:`reports.data.rollups.SUMMED`); None where this read does
        not apply: not a SQLite file, fewer than :data:`ARROW_FROM_RUNS` runs started in the
        span, the driver not installed or failing (a figure of text: the SQL's read counts
        it as damaged), a column of another type."""
        database = self._adbc_database()
        if database is None:
            return None
        since, until = (
            datetime.fromtimestamp(h * S_PER_HOUR, UTC) for h in (since_hour, until_hour)
        )
        started = self._started_in(since, until)
        if started < ARROW_FROM_RUNS:
            return None
        table = read_table(
            database,
            hour_rows_sql(value, hour_edges, since_hour, until_hour),
            light=started < NANOARROW_BELOW_RUNS,
        )
        if table is None or table.column_names != [*SUMMED[:-2], "sound"]:
            return None
        for name, kind in zip(table.column_names, table.schema.types, strict=True):
            if str(kind) not in (_ARROW_TEXT if name in ("run_id", "gpu") else _ARROW_NUMBERS):
                return None
        rows = table.to_pandas()
        del table
        return summed_as_sqlite(rows, [*SUMMED[:3], "sound"], SUMMED[3:-2])[SUMMED]

    def rollup_hours(self, *, value: str, since_hour: int, until_hour: int) -> list[RollupHour]:
        """:func:`reports.data.rollups.rollup_hours` (a version 2 store)."""
        return self._read_text(
            lambda conn: rollup_hours(
                conn, value=value, since_hour=since_hour, until_hour=until_hour
            )
        )

    def _read_text(self, read: Callable[[Connection], T]) -> T:
        """``read(conn)`` in a read transaction, the driver decoding text; on SQLite, where one
        text value that is not UTF-8 fails the whole read, read again decoding each value in
        Python, bad bytes replaced (:func:`lenient_text`: a Python call per text value, which
        a read of 100,000 runs would pay 200,000 times)."""
        sqlite = self._engine.dialect.name == "sqlite"

        def work(conn: Connection) -> T:
            try:
                return read(conn)
            except (sqlite3.OperationalError, sa.exc.OperationalError) as e:
                if not sqlite or "decode" not in str(e):
                    raise
            with lenient_text(conn):
                return read(conn)

        return self._transaction(work, write=False)

    def scan_sample_stretches(
        self,
        consume: Callable[[Sequence[tuple[Any, ...]]], None],
        *,
        columns: Sequence[str],
        stretches: Iterable[tuple[str, str, datetime, datetime]],
        margin: int,
        since: datetime | None = None,
        until: datetime | None = None,
        chunk_rows: int = 250_000,
    ) -> None:
        """Like :meth:`scan_samples`, for parts of some GPUs' series: for each ``(run_id, gpu,
        first, last)``, that GPU's samples from ``first`` to ``last`` and the ``margin``
        samples before and after them, all in ``[since, until)``. Each stretch is read through
        the primary key, so a few of them in a big table cost little."""
        check_sample_columns(columns)
        sqlite = self._engine.dialect.name == "sqlite"
        q = SampleSQL(sqlite)
        mark, names = q.mark, ", ".join(columns)  # names checked above
        one_gpu = (
            f"SELECT {names} FROM samples WHERE run_id = {mark} AND gpu = {mark} "
            f"AND {q.usable} AND {q.shaped}"
        )
        from_since = f" AND minute >= {mark}" if since is not None else ""
        to_until = f" AND minute < {mark}" if until is not None else ""
        sql = (
            f"{one_gpu} AND minute >= {mark} AND minute <= {mark} "
            f"UNION ALL SELECT {names} FROM ({one_gpu} AND minute < {mark}{from_since} "
            f"ORDER BY minute DESC LIMIT {mark}) AS earlier "
            f"UNION ALL SELECT {names} FROM ({one_gpu} AND minute > {mark}{to_until} "
            f"ORDER BY minute LIMIT {mark}) AS later"
        )
        since_p = [] if since is None else [q.time_value(since)]
        until_p = [] if until is None else [q.time_value(until)]

        def work(conn: Connection) -> None:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            cursor = raw.cursor()
            rows: list[tuple[Any, ...]] = []
            try:
                for run_id, gpu, first, last in stretches:
                    a, b = q.time_value(first), q.time_value(last)
                    cursor.execute(
                        sql,
                        (
                            run_id,
                            gpu,
                            a,
                            b,
                            run_id,
                            gpu,
                            a,
                            *since_p,
                            margin,
                            run_id,
                            gpu,
                            b,
                            *until_p,
                            margin,
                        ),
                    )
                    rows.extend(cursor.fetchall())
                    if len(rows) >= chunk_rows:
                        consume(rows)
                        rows = []
            finally:
                cursor.close()
            if rows:
                consume(rows)

        self._transaction(work, write=False)

    def gpu_spans(self, gpus: Sequence[str], *, since: datetime, until: datetime) -> list[GpuSpan]:
        """The first and the last minute of each run's samples of ``gpus`` in a span.

        Args:
            gpus: GPU UUIDs.
            since: The span's start (timezone-aware).
            until: The span's end, excluded (timezone-aware).

        Returns:
            One :class:`GpuSpan` per run and GPU with samples in ``[since, until)``, its
            minutes timezone-aware UTC.
        """
        c = samples_table.c
        ids = list(dict.fromkeys(gpus))
        stmts = [
            sa.select(c.run_id, c.gpu, sa.func.min(c.minute), sa.func.max(c.minute))
            .where(c.gpu.in_(ids[i : i + _IN_CHUNK]), c.minute >= utc(since), c.minute < utc(until))
            .group_by(c.run_id, c.gpu)
            for i in range(0, len(ids), _IN_CHUNK)
        ]
        return self._transaction(
            lambda conn: [
                GpuSpan(r, g, utc(a), utc(b)) for stmt in stmts for r, g, a, b in conn.execute(stmt)
            ],
            write=False,
        )

    def sampled_runs(self, ids: Iterable[str]) -> set[str]:
        """Which of the runs ``ids`` have usable minute samples (whenever they are), as the
        report counts them: such a run is measured by its samples, never by its summary."""
        sqlite = self._engine.dialect.name == "sqlite"
        return self._transaction(
            lambda conn: sampled_run_ids(conn, ids, rollups=self.store.version >= 2, sqlite=sqlite),
            write=False,
        )

    def has_runs(self) -> bool:
        """Whether the store holds any run (reads one id, converts no row)."""
        stmt = sa.select(runs_table.c.id).limit(1)
        return self._transaction(lambda conn: conn.execute(stmt).first(), write=False) is not None

    def read_runs(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> tuple[list[RunRecord], list[UnreadableRun]]:
        """The runs :meth:`tracker.store.RunStore.list_runs` gives for ``[since, until)``, read row by row
        so that one that cannot be read (a time that is no time, tags or links that are not
        what the store writes, whatever else fails on the row) is left out and named rather
        than failing the read. The values are as stored: a text value in a number column comes
        back as text, bytes as bytes (the report checks them).

        On SQLite a ``started_at`` or ``ended_at`` that is not shaped like a time sorts outside
        every window (text order): such a run is named among the unreadable ones of every
        window, never silently missing."""
        rows = self.run_rows(since=since, until=until)
        return records_of(rows)

    def run_rows(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[tuple[Any, ...]]:
        """The rows of ``runs`` for ``[since, until)`` (as :meth:`read_runs` selects them), as
        the driver's plain tuples in :data:`RUN_COLUMNS` order, ordered by start and id: for
        readers of a million runs that build columns, not records
        (:func:`reports.data.columns.run_columns`; :func:`records_of` makes records of some).
        Times come as the driver gives them (SQLite: naive UTC text; PostgreSQL: aware
        datetimes); text that is not UTF-8 (SQLite) with the bad bytes replaced. ``ids``: the
        runs with these ids instead of a span's."""
        if ids is not None:
            return [
                row
                for i in range(0, len(ids), _IN_CHUNK)
                for row in self._run_rows(runs_table.c.id.in_(list(ids[i : i + _IN_CHUNK])))
            ]
        return self._run_rows(None, since=since, until=until)

    def run_row_parts(
        self,
        convert: Callable[[list[tuple[Any, ...]]], T],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        chunk_rows: int = 100_000,
    ) -> list[T]:
        """:meth:`run_rows`, ``chunk_rows`` rows at a time, each part through ``convert``
        as it is fetched (a part's columns, say): a million runs are never a million tuples
        at once. The parts in order; a read that starts again (text that is not UTF-8, on
        SQLite) converts every part again."""
        return self._run_rows(None, since=since, until=until, convert=convert, size=chunk_rows)

    def run_table(self, *, since: datetime | None = None, until: datetime | None = None) -> Any:
        """The rows of ``runs`` for ``[since, until)`` (as :meth:`run_rows` selects them) as
        an Arrow table read by ADBC's SQLite driver (the ``adbc`` extra), no Python object per
        row: ``rowid`` (for :meth:`run_rows_at`), then :data:`RUN_COLUMNS`, in no order.
        Every column holds values of one type as the driver reads them (text, times as the
        text they are stored as; or numbers), or none at all.

        Args:
            since: The span's start (aware), or None: from the first run.
            until: The span's end (aware, not in it), or None: to the last.

        Returns:
            The table, or None where this read does not apply and :meth:`run_row_parts`
            reads: a store that is not a SQLite file, fewer than :data:`ARROW_FROM_RUNS` runs
            started in the span, the driver not installed, a column of values of two types
            (text in a number column, a blob), text that is not UTF-8, any error of the
            driver (that read says what is wrong).
        """
        database = self._adbc_database()
        if database is None:
            return None
        started = self._started_in(since, until)
        if started < ARROW_FROM_RUNS:  # the driver's process costs more than it saves
            return None
        stmt = self._runs_select(None, since=since, until=until, rowid=True)
        # the times bound as the store writes them (SQLite: naive UTC text), no other value
        literal = {"literal_binds": True}
        sql = str(stmt.compile(dialect=self._engine.dialect, compile_kwargs=literal))
        table = read_table(database, sql, light=started < NANOARROW_BELOW_RUNS)
        if table is None:
            return None
        for col in runs_table.c:
            kinds = _ARROW_NUMBERS if isinstance(col.type, sa.Integer | sa.Float) else _ARROW_TEXT
            column = table.column(col.name)
            if column.null_count < len(column) and str(column.type) not in kinds:
                return None
        return table

    def _adbc_database(self) -> Path | None:
        """This store's SQLite file where ADBC's driver (the ``adbc`` extra) can read it (in
        a process of its own, :mod:`reports.data.adbc_read`: the driver's copy of SQLite and
        Python's in one process break each other's locks); None where the store is not a
        SQLite file (or one given as a ``file:`` URI) or the driver is not installed."""
        database = self._engine.url.database or ""
        if (
            self._engine.dialect.name != "sqlite"
            or database_per_connection(self._engine)
            or database.startswith("file:")
            or importlib.util.find_spec("adbc_driver_sqlite") is None
        ):
            return None
        return Path(database)

    def _started_in(self, since: datetime | None, until: datetime | None) -> int:
        """How many runs started in ``[since, until)``: most of a span's runs, counted on the
        index of starts alone."""
        c = runs_table.c
        stmt = sa.select(sa.func.count()).select_from(runs_table)
        if since is not None:
            stmt = stmt.where(c.started_at >= since)
        if until is not None:
            stmt = stmt.where(c.started_at < until)
        return int(self._transaction(lambda conn: conn.execute(stmt).scalar(), write=False) or 0)

    def any_started_before(self, until: datetime) -> bool:
        """Whether :meth:`run_rows` of a span ending at ``until`` may hold a row: a run
        started before it (or one whose start is no time). One row at most is read: a span
        that holds no run is not read at all.

        Args:
            until: The span's end (timezone-aware, not in it).

        Returns:
            True where such a run is stored; False where the span's read would find none.
        """
        stmt = sa.select(runs_table.c.id).where(self._started_before(until)).limit(1)
        return self._transaction(lambda conn: conn.execute(stmt).first(), write=False) is not None

    def run_rows_at(self, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """The rows of ``runs`` with these SQLite row ids (:meth:`run_table`'s), as
        :meth:`run_rows` gives them.

        Args:
            rowids: SQLite row ids of ``runs``.

        Returns:
            Each row by its row id, without it; a row gone since is not there."""
        out: dict[int, tuple[Any, ...]] = {}
        for i in range(0, len(rowids), _IN_CHUNK):
            where = _ROWID.in_(list(rowids[i : i + _IN_CHUNK]))
            for row in self._run_rows(where, rowid=True):
                out[int(row[0])] = tuple(row[1:])
        return out

    def _run_rows(
        self,
        where: sa.ColumnElement[bool] | None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        convert: Callable[[list[tuple[Any, ...]]], Any] | None = None,
        size: int = 0,
        rowid: bool = False,
    ) -> list[Any]:
        c = runs_table.c
        stmt = self._runs_select(where, since=since, until=until, rowid=rowid).order_by(
            c.started_at, c.id
        )

        def fetch(conn: Connection) -> list[Any]:
            # the driver's cursor under SQLAlchemy's result: plain tuples (no result type of
            # these columns converts anything: the times are read as text), a Row each costs
            # as much again at a million runs
            result = conn.execute(stmt)
            try:
                if convert is None:
                    return list(result.cursor.fetchall())
                parts = []
                while part := result.cursor.fetchmany(size):
                    parts.append(convert(list(part)))
                return parts
            finally:
                result.close()

        return self._read_text(fetch)

    def _runs_select(
        self,
        where: sa.ColumnElement[bool] | None,
        *,
        since: datetime | None,
        until: datetime | None,
        rowid: bool,
    ) -> sa.Select[Any]:
        """The SELECT of :meth:`run_rows` (no order), with SQLite's ``rowid`` first where
        asked."""
        c = runs_table.c
        # the times as the driver returns them (SQLite: text), converted by the reader
        columns: list[Any] = [_ROWID.label("rowid")] if rowid else []
        columns += [
            sa.type_coerce(col, sa.String).label(col.name)
            if isinstance(col.type, UTCDateTime)
            else col
            for col in run_select_columns(self.store.version)
        ]
        stmt = sa.select(*columns)
        if where is not None:
            stmt = stmt.where(where)
        if until is not None:
            stmt = stmt.where(self._started_before(until))
        if since is not None:
            stmt = stmt.where(
                self._or_misshaped(
                    c.ended_at, sa.or_(c.ended_at.is_(None), c.ended_at > utc(since))
                )
            )
        return stmt

    def _started_before(self, until: datetime) -> sa.ColumnElement[bool]:
        """A run started before ``until``, or one whose start is no time (read, to be named)."""
        c = runs_table.c
        return self._or_misshaped(c.started_at, c.started_at < utc(until))

    def _or_misshaped(
        self, col: sa.Column[Any], condition: sa.ColumnElement[bool]
    ) -> sa.ColumnElement[bool]:
        """``condition``, or (SQLite) ``col``'s text is not shaped like a time: such a value
        sorts anywhere among the times, so the span's read takes it and names it."""
        if self._engine.dialect.name != "sqlite":  # timestamptz: always a time
            return condition
        return sa.or_(condition, sa.not_(sa.type_coerce(col, sa.String).like(TIME_SHAPE)))

    def _minute_span(
        self,
        since: datetime | None,
        until: datetime | None,
    ) -> tuple[datetime | None, datetime | None] | None:
        """The first and the last minute of the samples in ``[since, until)`` (through the
        minute index), or None when there are none. A bound that is no time (SQLite text such
        as ``'2026-11-25 zz'``, which sorts among the times) comes back None: no bound."""
        c = samples_table.c
        raw = sa.type_coerce(c.minute, sa.String)  # as stored: parsed here, never by the driver

        def bound(stmt: sa.Select[Any]) -> sa.ScalarSelect[Any]:
            if since is not None:
                stmt = stmt.where(c.minute >= utc(since))
            if until is not None:
                stmt = stmt.where(c.minute < utc(until))
            return stmt.scalar_subquery()

        # two subqueries: SQLite reads a lone min() or max() off the index, not both at once
        stmt = sa.select(bound(sa.select(sa.func.min(raw))), bound(sa.select(sa.func.max(raw))))
        first, last = self._transaction(lambda conn: conn.execute(stmt).one(), write=False)
        if first is None:
            return None
        q = SampleSQL(self._engine.dialect.name == "sqlite")
        return q.minute(first), q.minute(last)

    def _read_sample_parts(self, read: Callable[[tuple[int | None, int | None]], T]) -> list[T]:
        """``read`` the samples table in row-id ranges that split it evenly, on one connection
        and thread per core: SQLite scans, sorts and sums a query in one thread (with the GIL
        released), so a big table is read in parts at once. PostgreSQL plans parallel workers
        itself; a small table or an in-memory database is read whole."""
        parts = self._sample_rowid_parts()
        if len(parts) == 1:
            return [read(parts[0])]
        with ThreadPoolExecutor(len(parts)) as pool:
            return list(pool.map(read, parts))

    def _sample_rowid_parts(self) -> list[tuple[int | None, int | None]]:
        """Row-id ranges ``(first, end)`` for :meth:`_read_sample_parts`."""
        whole: list[tuple[int | None, int | None]] = [(None, None)]
        if self._engine.dialect.name != "sqlite" or database_per_connection(self._engine):
            return whole
        sql = "SELECT (SELECT min(rowid) FROM samples), (SELECT max(rowid) FROM samples)"
        first, last = self._transaction(lambda conn: conn.exec_driver_sql(sql).one(), write=False)
        if first is None:
            return whole
        n = min(os.cpu_count() or 1, _MAX_SAMPLE_READERS, 1 + (last - first) // _ROWS_PER_READER)
        if n < 2:
            return whole
        # open at both ends: a row written meanwhile falls in some part
        cuts = [None, *(first + (last - first + 1) * k // n for k in range(1, n)), None]
        return list(itertools.pairwise(cuts))
