"""The reports' reads of the samples table at fleet scale: millions of minute rows scanned in
raw chunks, summed per run, GPU and week in the database, and read around idle stretches. The
tracker never calls these; :class:`tracker.store.RunStore` carries them for the report."""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from tracker.store.samples import SampleSQL, SampleTotals, bucket_case, check_sample_columns
from tracker.store.schema import samples_table, utc

T = TypeVar("T")

# Reading samples in parts at once (SQLite): at most this many, each of at least this many rows.
_MAX_SAMPLE_READERS = 4

_ROWS_PER_READER = 500_000


class SampleScans:
    """Fleet-scale sample reads, mixed into :class:`tracker.store.RunStore`."""

    _engine: Engine
    _url: URL

    def _transaction(self, work: Callable[[Connection], T], *, write: bool) -> T:
        raise NotImplementedError  # RunStore's

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
        sql = f"SELECT {', '.join(columns)} FROM {selection.table}{selection.where}"  # checked

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
    ) -> list[SampleTotals]:
        """The minute samples in ``[since, until)`` summed in the database per run, GPU and
        time bucket, so that a week of a fleet (millions of rows) comes back as thousands.

        ``value`` is a utilization column (``util_pct`` or ``sm_active_pct``); ``low_under``
        finds the first and the last minute whose value is under it. ``bucket_edges``
        (ascending) cut time into buckets: a minute's bucket is the number of edges at or
        before it. Rows come in no order."""
        check_sample_columns([value])
        sqlite = self._engine.dialect.name == "sqlite"
        span = self._minute_span(since, until)
        if span is None:
            return []
        # Each edge may cost every row a comparison: only those inside the samples' span cut.
        edges = sorted(bucket_edges, key=utc)
        below = bisect.bisect_right(edges, span[0], key=utc)
        inner = edges[below : bisect.bisect_right(edges, span[1], key=utc)]

        def read(rowids: tuple[int | None, int | None]) -> list[SampleTotals]:
            selection = SampleSQL(sqlite, since, until, rowids=rowids)
            bucket, bucket_params = bucket_case(selection, inner, first=below)
            low = f"CASE WHEN {value} < {selection.mark} THEN minute END"
            sql = (f"SELECT run_id, gpu, {bucket} AS bucket, COUNT(*), SUM(covered_s), "  # checked
                   f"SUM(CASE WHEN {value} IS NOT NULL THEN covered_s ELSE 0 END), "
                   f"COALESCE(SUM({value} * covered_s), 0), MIN({low}), MAX({low}) "
                   f"FROM {selection.table}{selection.where} GROUP BY run_id, gpu, bucket")
            params = (*bucket_params, low_under, low_under, *selection.params)

            def work(conn: Connection) -> list[SampleTotals]:
                return [SampleTotals(run_id=r[0], gpu=r[1], bucket=int(r[2]), minutes=int(r[3]),
                                     covered_s=float(r[4]), known_s=float(r[5]),
                                     value_s=float(r[6]), first_low=selection.minute(r[7]),
                                     last_low=selection.minute(r[8]))
                        for r in conn.exec_driver_sql(sql, params)]

            return self._transaction(work, write=False)

        merged: dict[tuple[str, str, int], SampleTotals] = {}
        for part in self._read_sample_parts(read):
            for t in part:
                key = (t.run_id, t.gpu, t.bucket)
                merged[key] = merged[key].merge(t) if key in merged else t
        return list(merged.values())

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
        one_gpu = f"SELECT {names} FROM samples WHERE run_id = {mark} AND gpu = {mark}"
        from_since = f" AND minute >= {mark}" if since is not None else ""
        to_until = f" AND minute < {mark}" if until is not None else ""
        sql = (f"{one_gpu} AND minute >= {mark} AND minute <= {mark} "
               f"UNION ALL SELECT {names} FROM ({one_gpu} AND minute < {mark}{from_since} "
               f"ORDER BY minute DESC LIMIT {mark}) AS earlier "
               f"UNION ALL SELECT {names} FROM ({one_gpu} AND minute > {mark}{to_until} "
               f"ORDER BY minute LIMIT {mark}) AS later")
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
                    cursor.execute(sql, (run_id, gpu, a, b, run_id, gpu, a, *since_p, margin,
                                         run_id, gpu, b, *until_p, margin))
                    rows.extend(cursor.fetchall())
                    if len(rows) >= chunk_rows:
                        consume(rows)
                        rows = []
            finally:
                cursor.close()
            if rows:
                consume(rows)

        self._transaction(work, write=False)

    def _minute_span(self, since: datetime | None,
                     until: datetime | None) -> tuple[datetime, datetime] | None:
        """The first and the last minute of the samples in ``[since, until)`` (through the
        minute index), or None when there are none."""
        c = samples_table.c

        def bound(stmt: sa.Select[Any]) -> sa.ScalarSelect[Any]:
            if since is not None:
                stmt = stmt.where(c.minute >= utc(since))
            if until is not None:
                stmt = stmt.where(c.minute < utc(until))
            return stmt.scalar_subquery()

        # two subqueries: SQLite reads a lone min() or max() off the index, not both at once
        stmt = sa.select(bound(sa.select(sa.func.min(c.minute))),
                         bound(sa.select(sa.func.max(c.minute))))
        first, last = self._transaction(lambda conn: conn.execute(stmt).one(), write=False)
        return None if first is None else (first, last)

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
        database = self._url.database or ""
        if (self._engine.dialect.name != "sqlite" or database in ("", ":memory:")
                or "mode=memory" in database):  # each connection would see a database of its own
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
