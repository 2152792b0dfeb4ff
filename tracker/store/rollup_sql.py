"""The rollups table's SQL: kept current as samples are written (:func:`refresh`) and built from
every sample (:func:`rebuild`, the 1 → 2 migration and ``gpu-kpi store rebuild-rollups``). The
reports sum them per run, GPU and time bucket (:func:`reports.data.rollups.rollup_totals`).

Rollups are computed from the minute rows as the database holds them, read with the drivers'
own cursors (raw values: text on SQLite, where a REAL column may hold anything), so a row that
is not a usable sample is left out or read as unknown exactly as the minute readers do
(:mod:`reports.data.samples`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.compiler import SQLCompiler

from tracker.store.rollups import (
    COLUMNS,
    CONTEXT_ROWS,
    HOUR_MIN,
    MISSHAPED_HOUR,
    WINDOW_MIN,
    ContextRow,
    MinuteRow,
    Rollup,
    appended,
    epoch_minute,
    rollups_of,
    series_rollups,
)
from tracker.store.sample_sql import COVERED_S_RANGE, SampleSQL, checked_value
from tracker.store.schema import (
    ROLLUPS_OLD_INDEX,
    SCHEMA_LOCK_KEY,
    SCHEMA_VERSION,
    changes_table,
    meta_table,
    rollups_table,
    upsert,
)

_ROW = "minute, covered_s, util_pct, sm_active_pct, energy_kwh, mem_used_gib"
_VALUES = ("covered_s", "util_pct", "sm_active_pct", "energy_kwh", "mem_used_gib")
_CHUNK = 50_000
_RUN_LOCK = 0x67_6B_72  # "gkr": the class of PostgreSQL's per-run advisory locks (int4)


def _selection(conn: Connection) -> SampleSQL:
    return SampleSQL(conn.dialect.name == "sqlite")


def _earliest_of_last(
    conn: Connection, q: SampleSQL, run_id: str, gpu: str, *, before: Any, n: int
) -> Any | None:
    """The raw minute of the earliest of the series' last ``n`` rows before ``before`` (all of
    them when it has fewer), or None when it has none."""
    sql = (
        f"SELECT MIN(minute) FROM (SELECT minute FROM samples WHERE run_id = {q.mark} AND "
        f"gpu = {q.mark} AND minute < {q.mark} ORDER BY minute DESC LIMIT {int(n)}) AS last"
    )
    return conn.exec_driver_sql(sql, (run_id, gpu, before)).scalar()


def _rows(
    conn: Connection, q: SampleSQL, run_id: str, gpu: str, since: Any | None
) -> list[MinuteRow]:
    where = f"run_id = {q.mark} AND gpu = {q.mark}"
    params: list[Any] = [run_id, gpu]
    if since is not None:
        where += f" AND minute >= {q.mark}"
        params.append(since)
    sql = f"SELECT {_ROW} FROM samples WHERE {where} ORDER BY minute"
    return [(q.minute(r[0]), *r[1:]) for r in conn.exec_driver_sql(sql, tuple(params)).all()]


def _write(conn: Connection, rollups: Sequence[Rollup]) -> None:
    """Insert, or replace a row another writer of the same series put there meanwhile (two
    processes refreshing one GPU's hours at once on PostgreSQL: the last one wins, and it
    computed from every row it could see)."""
    if rollups:
        stmt = upsert(conn.dialect.name, rollups_table, ("run_id", "gpu", "hour"))
        execute_many(conn, stmt, [r.as_row() for r in rollups], rollups_table)


def refresh(conn: Connection, first: Mapping[tuple[str, str], datetime]) -> None:
    """Recompute the rollups that rows written at or after ``first[(run_id, gpu)]`` can change:
    from the hour of the row ``window - 1`` rows before it on (its idleness may change), with
    ``window - 1`` rows before that hour as context. Appending a minute recomputes an hour or
    two; a row written into the past recomputes the series from there on."""
    q = _selection(conn)
    c = rollups_table.c
    for (run_id, gpu), minute in first.items():
        reach = q.minute(
            _earliest_of_last(conn, q, run_id, gpu, before=q.time_value(minute), n=CONTEXT_ROWS)
        )
        start_hour = epoch_minute(min(reach, minute) if reach else minute) // HOUR_MIN
        hour_start = q.time_value(datetime.fromtimestamp(start_hour * 3600, UTC))
        since = _earliest_of_last(conn, q, run_id, gpu, before=hour_start, n=CONTEXT_ROWS)
        rows = _rows(conn, q, run_id, gpu, since if since is not None else hour_start)
        conn.execute(
            sa.delete(rollups_table).where(
                c.run_id == run_id, c.gpu == gpu, c.hour >= start_hour, c.hour != MISSHAPED_HOUR
            )
        )
        _write(conn, rollups_of(run_id, gpu, rows, from_hour=start_hour))


def _binder(column: sa.Column[Any], dialect: Any) -> Callable[[Any], Any] | None:
    """How SQLAlchemy binds a value of ``column`` (None: as it is), made cheap for many rows:
    a float is its own float, and a time is converted once however many rows share it."""
    process = column.type.dialect_impl(dialect).bind_processor(dialect)
    if process is None:
        return None
    if isinstance(column.type, sa.Float):
        return lambda v: v if v is None or type(v) is float else process(v)
    # equal times are one instant (one UTC text or value), but for the fold of a repeated
    # hour, which equality and hash ignore within a zone
    memo: dict[tuple[Any, int], Any] = {}

    def bind(v: Any) -> Any:
        if v is None:
            return None
        key = (v, getattr(v, "fold", 0))
        if (out := memo.get(key)) is None:
            out = memo[key] = process(v)
        return out

    return bind


def execute_many(
    conn: Connection, stmt: sa.Executable, rows: Sequence[Mapping[str, Any]], table: sa.Table
) -> None:
    """``conn.execute(stmt, rows)`` of many rows, through the driver's own ``executemany``:
    the statement compiled once and each value bound by its column type's processor, as
    SQLAlchemy binds it, column by column, without SQLAlchemy's per-row parameter work (11 µs
    a minute row)."""
    if not rows:
        return
    sql, positions = _compiled(stmt, conn.dialect)
    names = list(positions or rows[0].keys())
    columns = []
    for name in names:
        values = [row[name] for row in rows]
        bind = _binder(table.c[name], conn.dialect)
        columns.append(values if bind is None else list(map(bind, values)))
    params: list[Any] = list(zip(*columns, strict=True))
    if positions is None:  # PostgreSQL's %(name)s
        params = [dict(zip(names, values, strict=True)) for values in params]
    conn.exec_driver_sql(sql, params)


@functools.lru_cache(maxsize=64)
def _compiled(stmt: sa.Executable, dialect: Any) -> tuple[str, tuple[str, ...] | None]:
    """The SQL of ``stmt`` in ``dialect`` and its parameters' order (None: named), compiled
    once for the statements of :func:`tracker.store.schema.upsert`, which are made once."""
    compiled = cast(SQLCompiler, cast(sa.ClauseElement, stmt).compile(dialect=dialect))
    positions = compiled.positiontup
    return str(compiled), None if positions is None else tuple(positions)


def _stored(v: Any) -> Any:
    """A value as the Double column stores it: bound as SQLAlchemy binds it, ``float(v)``
    (a bool, an int, ``"50"`` or a Decimal as a float)."""
    return v if v is None or type(v) is float else float(v)


def _as_read(row: Mapping[str, Any], nan: float | None) -> MinuteRow:
    """A store row's minute and values as the database reads them back: taken as they are
    bound (:func:`_stored`), and a NaN as NULL on SQLite (``nan`` None), itself on
    PostgreSQL."""
    values = [row[k] for k in _VALUES]
    if any(type(v) is not float or math.isnan(v) for v in values if v is not None):
        values = [
            nan if isinstance(v, float) and math.isnan(v) else v for v in map(_stored, values)
        ]
    return (row["minute"], *values)


def _nan(conn: Connection) -> float | None:
    return None if conn.dialect.name == "sqlite" else math.nan


def write_fresh(conn: Connection, rows: Iterable[Mapping[str, Any]]) -> None:
    """The rollups of series that hold ``rows`` (store rows) and nothing else (an import's
    runs, their old minutes deleted in this transaction): computed from the rows as written
    (:func:`_as_read`), not read back."""
    nan = _nan(conn)
    series: dict[tuple[str, str], list[MinuteRow]] = {}
    for r in rows:
        series.setdefault((r["run_id"], r["gpu"]), []).append(_as_read(r, nan))
    _write(conn, series_rollups(series))


def _appendable(
    conn: Connection, first: Mapping[tuple[str, str], datetime]
) -> dict[tuple[str, str], list[ContextRow]]:
    """Before rows are written from ``first[(run_id, gpu)]`` on: the series they are appended
    to (no stored row at or after that minute), each with its context, the rows of the
    :data:`WINDOW_MIN` minutes before. On PostgreSQL each run's rollups are locked until the
    transaction ends (an advisory lock per run, taken in run order), so that two writers of
    one run do not add to the same hours from what each saw alone."""
    q = _selection(conn)
    by_run: dict[str, dict[str, datetime]] = {}
    for (run_id, gpu), minute in first.items():
        by_run.setdefault(run_id, {})[gpu] = minute
    out: dict[tuple[str, str], list[ContextRow]] = {}
    for run_id in sorted(by_run):
        gpus = by_run[run_id]
        if not q.sqlite:
            lock = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
            conn.exec_driver_sql(lock, (_RUN_LOCK, run_id))
        start, end = min(gpus.values()), max(gpus.values())
        # only the GPUs written: a node of a many-node run writes its own
        names = list(gpus)
        later = (
            f"SELECT gpu, MAX(minute) FROM samples WHERE run_id = {q.mark} AND "
            f"minute >= {q.mark} AND gpu IN ({', '.join([q.mark] * len(names))}) GROUP BY gpu"
        )
        context: dict[str, list[ContextRow]] = {gpu: [] for gpu in gpus}
        found = conn.exec_driver_sql(later, (run_id, q.time_value(start), *names))
        for gpu, last in found:
            if gpu not in context:
                continue
            bound = q.time_value(gpus[gpu])
            # a stored row at or after the first one written (or a SQLite minute that is no
            # text, which no time compares with): recomputed, not added to
            if type(last) is not type(bound) or last >= bound:
                del context[gpu]
        if not context:
            continue
        since = _minute_at(epoch_minute(start) - WINDOW_MIN)
        for gpu, minute, covered, util, sm in _between(
            conn, q, run_id, list(context), since=since, until=end
        ):
            context[gpu].append((_epoch_minute(q, minute), covered, util, sm))
        out.update(((run_id, gpu), rows) for gpu, rows in context.items())
    return out


def _minute_at(epoch_minute: int) -> datetime:
    return datetime.fromtimestamp(epoch_minute * 60, UTC)


def _epoch_minute(q: SampleSQL, raw: Any) -> int | None:
    """A minute as the driver returns it (:meth:`SampleSQL.minute`) as epoch minutes; None
    when it is no time."""
    if type(raw) is int:  # PostgreSQL's, computed by the query
        return raw
    if type(raw) is str:
        return _text_minute(raw)
    moment = q.minute(raw)
    return None if moment is None else epoch_minute(moment)


@functools.lru_cache(maxsize=4096)
def _text_minute(raw: str) -> int | None:
    """A SQLite minute's epoch minute, parsed once: a live run's last rows are its context
    for every minute it writes."""
    moment = SampleSQL(True).minute(raw)
    return None if moment is None else epoch_minute(moment)


def _between(
    conn: Connection,
    q: SampleSQL,
    run_id: str,
    gpus: Sequence[str],
    *,
    since: datetime,
    until: datetime,
) -> list[tuple[Any, ...]]:
    """The rows of the run's ``gpus`` with a minute in [since, until), in minute order: the
    GPU, the minute (SQLite: as the driver returns it; PostgreSQL: epoch minutes),
    ``covered_s``, ``util_pct`` and ``sm_active_pct`` where they are usable numbers, else NULL
    (as :func:`tracker.store.rollups.rollups_of` checks them)."""
    where = (
        f"run_id = {q.mark} AND minute >= {q.mark} AND minute < {q.mark} "
        f"AND gpu IN ({', '.join([q.mark] * len(gpus))})"
    )
    params = (run_id, q.time_value(since), q.time_value(until), *gpus)
    names = ", ".join(
        (
            "gpu",
            "minute" if q.sqlite else "FLOOR(EXTRACT(EPOCH FROM minute) / 60)::bigint",
            checked_value("covered_s", COVERED_S_RANGE),
            checked_value("util_pct", (0.0, 100.0)),
            checked_value("sm_active_pct", (0.0, 100.0)),
        )
    )
    sql = f"SELECT {names} FROM samples WHERE {where} ORDER BY minute"
    return list(conn.exec_driver_sql(sql, params).all())


def _append(
    conn: Connection,
    context: Mapping[tuple[str, str], list[ContextRow]],
    rows: Iterable[Mapping[str, Any]],
) -> None:
    """Add ``rows``, appended to the series in ``context`` (:func:`_appendable`), to the stored
    rollups of their hours (:func:`tracker.store.rollups.appended`)."""
    q, nan = _selection(conn), _nan(conn)
    new: dict[tuple[str, str], list[MinuteRow]] = {key: [] for key in context}
    for r in rows:
        if (key := (r["run_id"], r["gpu"])) in new:
            new[key].append(_as_read(r, nan))
    since: dict[str, int] = {}
    for (run_id, _), series in new.items():
        series.sort(key=lambda row: row[0])
        hour = (epoch_minute(series[0][0]) - WINDOW_MIN) // HOUR_MIN
        since[run_id] = min(hour, since.get(run_id, hour))
    stored: dict[tuple[str, str], dict[int, Rollup]] = {key: {} for key in context}
    names = ", ".join(COLUMNS)
    for run_id, hour in since.items():
        sql = f"SELECT {names} FROM rollups WHERE run_id = {q.mark} AND hour >= {q.mark}"
        for values in conn.exec_driver_sql(sql, (run_id, hour)):
            kept = Rollup(**dict(zip(COLUMNS, values, strict=True)))
            if (key := (run_id, kept.gpu)) in stored:
                stored[key][kept.hour] = kept
    out: list[Rollup] = []
    for (run_id, gpu), series in new.items():
        until = series[0][0]  # the first row written: a stored row of its minute is before it

        def deeper(
            run_id: str = run_id, gpu: str = gpu, until: datetime = until
        ) -> list[ContextRow]:
            since = _minute_at(epoch_minute(until) - 2 * (WINDOW_MIN - 1))
            return [
                (_epoch_minute(q, r[1]), *r[2:])
                for r in _between(conn, q, run_id, [gpu], since=since, until=until)
            ]

        out += appended(
            run_id, gpu, context[(run_id, gpu)], series, stored[(run_id, gpu)], deeper=deeper
        )
    _write(conn, out)


def write_samples(
    conn: Connection,
    stmt: sa.Executable,
    params: Sequence[Mapping[str, Any]],
    table: sa.Table,
    *,
    first: Mapping[tuple[str, str], datetime],
    dropped: set[str],
    rollups: Mapping[str, Sequence[Rollup]],
    keep_rollups: bool = True,
) -> None:
    """Store rows (``stmt``: their upsert) and the rollups they change: those of runs in
    ``dropped`` (their old rows deleted in this transaction) are ``rollups[run_id]`` where
    given (:func:`tracker.store.rollups.sample_rollups` of these rows) or computed from the
    rows; the others' are refreshed from the database (``first``: each series' first minute
    written). ``keep_rollups`` False: a version 1 store, which has none."""
    live = {k: m for k, m in first.items() if k[0] not in dropped}
    context = _appendable(conn, live) if params and keep_rollups else {}
    execute_many(conn, stmt, params, table)
    if not params or not keep_rollups:
        return
    given = set(rollups) & dropped
    _write(conn, [r for run_id in given for r in rollups[run_id]])
    write_fresh(conn, (p for p in params if p["run_id"] in dropped - given))
    _append(conn, context, (p for p in params if (p["run_id"], p["gpu"]) in context))
    refresh(conn, {k: m for k, m in live.items() if k not in context})


def _series(conn: Connection) -> Iterator[tuple[str, str, list[MinuteRow]]]:
    """Every series' rows, one run at a time: read in the primary key's order (run_id, minute,
    gpu), so nothing is sorted and only one run is held in memory."""
    q = _selection(conn)
    raw = conn.connection.dbapi_connection
    assert raw is not None
    cursor = raw.cursor() if q.sqlite else raw.cursor(name="gpu_kpi_rollups")

    def split(
        run_id: str, rows: list[tuple[Any, ...]]
    ) -> Iterator[tuple[str, str, list[MinuteRow]]]:
        by_gpu: dict[str, list[MinuteRow]] = {}
        for r in rows:
            by_gpu.setdefault(r[0], []).append((q.minute(r[1]), *r[2:]))
        for gpu, series in by_gpu.items():
            yield run_id, gpu, _ordered(series)

    try:
        cursor.execute(f"SELECT run_id, gpu, {_ROW} FROM samples ORDER BY run_id, minute, gpu")
        run: str | None = None
        rows: list[tuple[Any, ...]] = []
        while chunk := cursor.fetchmany(_CHUNK):
            for r in chunk:
                if r[0] != run:
                    if run is not None:
                        yield from split(run, rows)
                    run, rows = r[0], []
                rows.append(r[1:])
        if run is not None:
            yield from split(run, rows)
    finally:
        cursor.close()


def rebuild(conn: Connection) -> int:
    """Replace every rollup with those computed from every sample; the number written. A store
    made before the index that covers the reports' sums gets it here, built once the rows are
    in, in place of the index on the hour alone."""
    sums = next(ix for ix in rollups_table.indexes if ix.name == "ix_rollups_sums")
    conn.exec_driver_sql(f"DROP INDEX IF EXISTS {ROLLUPS_OLD_INDEX}")
    sums.drop(conn, checkfirst=True)
    conn.execute(sa.delete(rollups_table))
    batch: list[Rollup] = []
    written = 0
    for run_id, gpu, rows in _series(conn):
        batch += rollups_of(run_id, gpu, rows)
        if len(batch) >= _CHUNK:
            _write(conn, batch)
            written, batch = written + len(batch), []
    _write(conn, batch)
    sums.create(conn)
    return written + len(batch)


def _ordered(rows: Iterable[MinuteRow]) -> list[MinuteRow]:
    """Rows with a minute in time order (a SQLite text minute that is no time sorts among the
    text; it is counted apart, not placed)."""
    listed = list(rows)
    timed = sorted((r for r in listed if r[0] is not None), key=lambda r: r[0])
    return [r for r in listed if r[0] is None] + timed


def migrate(conn: Connection, version: int) -> None:
    """Bring a store of ``version`` to :data:`SCHEMA_VERSION` in one transaction (the caller's),
    serialized like :func:`create_schema`; a second migrator finds the work done. 1 → 2:
    create ``rollups``; 1 or 2 → 3: build them from every sample (:func:`rebuild`), by the
    seconds-weighted idle rule; → 4: create ``changes`` (:mod:`tracker.store.changes`)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
    stmt = sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")
    if int(conn.execute(stmt).scalar_one()) >= SCHEMA_VERSION:
        return
    if version < 2:
        rollups_table.create(conn, checkfirst=True)
    if version < 3:
        rebuild(conn)
    if version < 4:
        changes_table.create(conn, checkfirst=True)
    conn.execute(
        sa.update(meta_table)
        .where(meta_table.c.key == "schema_version")
        .values(value=str(SCHEMA_VERSION))
    )
