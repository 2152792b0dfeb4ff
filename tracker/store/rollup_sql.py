"""The rollups table's SQL: kept current as samples are written (:func:`refresh`) and built from
every sample (:func:`rebuild`, the 1 → 2 migration and ``gpu-kpi store rebuild-rollups``). The
reports sum them per run, GPU and time bucket (:func:`reports.data.rollups.rollup_totals`).

Rollups are computed from the minute rows as the database holds them, read with the drivers'
own cursors (raw values: text on SQLite, where a REAL column may hold anything), so a row that
is not a usable sample is left out or read as unknown exactly as the minute readers do
(:mod:`reports.data.samples`)."""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.compiler import SQLCompiler

from tracker.store.changes import Touched
from tracker.store.engine import fetch, send, send_last, send_many
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
    rollup_of,
    rollups_of,
    series_rollups,
)
from tracker.store.sample_sql import COVERED_S_RANGE, SampleSQL, checked_value
from tracker.store.schema import (
    ROLLUPS_OLD_INDEX,
    RUN_LOCK_CLASS,
    SCHEMA_LOCK_KEY,
    SCHEMA_VERSION,
    UPSERT_OPTION,
    add_run_columns,
    changes_table,
    meta_table,
    rollups_table,
    upsert,
)
from tracker.units import WHOLE_S_PER_HOUR

_ROW = "minute, covered_s, util_pct, sm_active_pct, energy_kwh, mem_used_gib"
_VALUES = ("covered_s", "util_pct", "sm_active_pct", "energy_kwh", "mem_used_gib")
_CHUNK = 50_000


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
        execute_many(conn, _rollup_upsert(conn), [r.as_row() for r in rollups], rollups_table)


def _rollup_upsert(conn: Connection) -> sa.Executable:
    return upsert(conn.dialect.name, rollups_table, ("run_id", "gpu", "hour"))


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
        hour_start = q.time_value(datetime.fromtimestamp(start_hour * WHOLE_S_PER_HOUR, UTC))
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
    process = _processor(column, dialect)
    if process is None or isinstance(column.type, sa.Float):
        return process
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


@functools.lru_cache(maxsize=256)
def _processor(column: sa.Column[Any], dialect: Any) -> Callable[[Any], Any] | None:
    """The column type's bind processor in ``dialect`` (None: values as they are), looked up
    once; a float column's passes a float (or None) as it is."""
    process = column.type.dialect_impl(dialect).bind_processor(dialect)
    if process is None or not isinstance(column.type, sa.Float):
        return process
    return lambda v: v if v is None or type(v) is float else process(v)


def execute_many(
    conn: Connection, stmt: sa.Executable, rows: Sequence[Mapping[str, Any]], table: sa.Table
) -> None:
    """``conn.execute(stmt, rows)`` of many rows (:func:`execute_all` of one batch)."""
    execute_all(conn, [(stmt, rows, table)])


Batch = tuple[sa.Executable, Sequence[Mapping[str, Any]], sa.Table]
"""A statement, its rows and the table it writes (the columns' types bind the values)."""


def execute_all(
    conn: Connection,
    batches: Sequence[Batch],
    *,
    also: tuple[str, Sequence[Any]] | None = None,
    last: bool = False,
) -> bool:
    """``conn.execute(stmt, rows)`` of each batch, in order: each value bound by its column
    type's processor, as SQLAlchemy binds it, column by column, without SQLAlchemy's per-row
    parameter work (11 µs a minute row), and sent through the driver's own cursor
    (:func:`tracker.store.engine.fetch`).

    On PostgreSQL an :func:`tracker.store.schema.upsert` of rows that JSON holds as they are is
    one statement with one parameter (:func:`_json_upsert`), where the driver's ``executemany``
    sends one statement a row (a live minute's 8 samples: 260 µs of client CPU, as one
    statement 120); and when every batch is such an upsert, they are one statement together,
    each but the last a ``WITH`` of it (a live write's samples and their rollups: a statement
    costs the client 50-100 µs however small). Other rows (an int or a ``"50"`` in a float
    column, which the database converts; a NaN) and SQLite, whose ``executemany`` is the
    library's own loop in C, go through the driver's ``executemany``, the statement compiled
    once.

    ``also``: a PostgreSQL statement that returns no rows and its parameters (the change
    counters, :meth:`tracker.store.changes.Touched.statement`), sent in the same statement,
    a ``WITH`` of it before the last batch's statement, where they are one, else on its own
    before the batches (either way it reads the tables as they were before the batches);
    returns whether it was sent (False: no batch had rows; the caller sends it).

    ``last``: the caller sends nothing after these in the transaction, so that where they are
    one statement (and ``also`` in it) it goes with the ``COMMIT``
    (:func:`tracker.store.engine.send_last`): a round trip less."""
    batches = [batch for batch in batches if batch[1]]
    parts = [_json_parts(conn, *batch) for batch in batches]
    if batches and all(part is not None and len(part) == 1 for part in parts):
        statements = [(part[0][0], (part[0][1],)) for part in parts if part is not None]
        if also is not None:
            statements.insert(len(statements) - 1, (also[0], tuple(also[1])))
        if len(statements) > 1:
            *first, (final, final_params) = statements
            ctes = ", ".join(f"w{i} AS ({sql})" for i, (sql, _) in enumerate(first))
            params = [value for _, values in first for value in values]
            (send_last if last else send)(conn, f"WITH {ctes} {final}", [*params, *final_params])
            return also is not None
    if not batches:
        return False
    if also is not None:  # before the rows, as in the WITH: it may read what they replace
        send(conn, also[0], also[1])
    for batch, part in zip(batches, parts, strict=True):
        if part is None:
            _execute_rows(conn, *batch)
        for sql, text in part or ():
            send(conn, sql, (text,))
    return also is not None


def _execute_rows(
    conn: Connection, stmt: sa.Executable, rows: Sequence[Mapping[str, Any]], table: sa.Table
) -> None:
    """The rows through the driver's ``executemany``, bound as SQLAlchemy binds them. On
    SQLite, many rows go :data:`SQLITE_PARAMS` values a statement (:func:`_rows_at_once`):
    a statement's work on each execution (reset, step, the library's loop around it) is then
    paid once for ~100 rows, not for each (a third of an import's insert time); each row is
    inserted, or updates the one its key finds, as it would alone, in the same order."""
    sql, positions = _compiled(stmt, conn.dialect)
    names = list(positions or rows[0].keys())
    params: list[Any] = list(zip(*_bound(conn, table, names, rows), strict=True))
    if positions is None:  # PostgreSQL's %(name)s
        params = [dict(zip(names, values, strict=True)) for values in params]
    elif conn.dialect.name == "sqlite" and (wide := _rows_at_once(sql, len(names))) is not None:
        wide_sql, per = wide
        whole = len(params) - len(params) % per
        if whole >= 2 * per:  # not for a live minute's few rows: one statement each time
            flat = list(itertools.chain.from_iterable(params[:whole]))
            width = per * len(names)
            send_many(conn, wide_sql, [flat[i : i + width] for i in range(0, len(flat), width)])
            del flat
            params = params[whole:]
            if not params:
                return
    send_many(conn, sql, params)


SQLITE_PARAMS = 999
"""The values one SQLite statement takes at most, however old the library (32,766 since
3.32): of :func:`_rows_at_once`'s statements."""


@functools.lru_cache(maxsize=64)
def _rows_at_once(sql: str, columns: int) -> tuple[str, int] | None:
    """``sql``, an ``INSERT … VALUES (?, …) …`` of one row, as the same statement of as many
    rows as :data:`SQLITE_PARAMS` values hold, and that number; None for another statement.
    SQLite inserts a statement's rows one after the other, each one's ``ON CONFLICT`` seeing
    the rows before it: what as many statements of one row do."""
    one = "(" + ", ".join(["?"] * columns) + ")"
    per = SQLITE_PARAMS // columns
    if per < 2 or sql.count(" VALUES " + one) != 1 or sql.count("?") != columns:
        return None
    return sql.replace(" VALUES " + one, " VALUES " + ", ".join([one] * per)), per


def _bound(
    conn: Connection, table: sa.Table, names: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> list[Sequence[Any]]:
    """The values of the columns ``names`` of ``rows``, column by column, each bound by its
    column type's processor."""
    values = map(operator.itemgetter(*names), rows)
    if len(names) == 1:  # itemgetter of one name: the value, not a tuple
        columns: list[Sequence[Any]] = [list(values)]
    else:
        columns = list(zip(*values, strict=True))
    for i, column in _processed(table, tuple(names), conn.dialect):
        if isinstance(column.type, sa.Float) and _PLAIN.issuperset(map(type, columns[i])):
            continue  # floats and None, bound as they are (_processor): not a call a value
        bind = _binder(column, conn.dialect)
        if bind is None:  # bound as they are
            continue
        # each distinct object bound once (many rows share one time object): by identity,
        # the objects held by the column meanwhile
        at = list(map(id, columns[i]))
        distinct = dict(zip(at, columns[i], strict=True))
        bound = {key: bind(value) for key, value in distinct.items()}
        columns[i] = list(map(bound.__getitem__, at))
    return columns


@functools.lru_cache(maxsize=64)
def _processed(
    table: sa.Table, names: tuple[str, ...], dialect: Any
) -> tuple[tuple[int, sa.Column[Any]], ...]:
    """The columns of ``names`` whose type binds a value by a processor, with their place."""
    columns = [(i, table.c[name]) for i, name in enumerate(names)]
    return tuple((i, c) for i, c in columns if _processor(c, dialect) is not None)


_JSON_ROWS = 10_000
"""Rows per statement of an upsert from JSON (a rollup row is ~250 bytes of it)."""


def _json_parts(
    conn: Connection, stmt: sa.Executable, rows: Sequence[Mapping[str, Any]], table: sa.Table
) -> list[tuple[str, str]] | None:
    """On PostgreSQL, the :func:`tracker.store.schema.upsert` ``stmt`` of ``rows`` as
    statements of :func:`_json_upsert`, each with its one parameter, a JSON text of up to
    :data:`_JSON_ROWS` rows (each an array of the bound values of every column in order). None
    for another statement or database, or when a value is not of its column's own Python type
    (an int in a float column, a bool in an int one) or is a float JSON has no number for
    (NaN, ±inf).

    Exact: a float is written as the shortest text that reads back as the same float, and the
    server reads it so; a time in ISO 8601 with its offset. A key that comes twice is written
    once, at its first place, with its last values (one statement may not update a row twice):
    what row after row leaves.

    Not arrays (``unnest(%b::float8[], …)``): psycopg dumps an array element by element in
    Python, so that 8 rollups as 19 arrays cost the client 190 µs, as JSON 110."""
    conflict: tuple[tuple[str, ...], bool] | None
    conflict = stmt.get_execution_options().get(UPSERT_OPTION)
    if conn.dialect.name != "postgresql" or conflict is None:
        return None
    keys, update = conflict
    names, types, key = _json_plan(table, keys)
    columns = _bound(conn, table, names, rows)
    for kinds, values in zip(types, columns, strict=True):
        if not kinds.issuperset(map(type, values)):
            return None
    values_of: list[tuple[Any, ...]] = list(zip(*columns, strict=True))
    if update:
        latest = {key(row): row for row in values_of}  # a key's first place, its last values
        if len(latest) < len(values_of):
            values_of = list(latest.values())
    sql = _json_upsert(table, keys, update, conn.dialect)
    try:
        return [
            (sql, _JSON.encode(values_of[i : i + _JSON_ROWS]))
            for i in range(0, len(values_of), _JSON_ROWS)
        ]
    except ValueError:  # NaN, ±inf
        return None


_JSON = json.JSONEncoder(
    allow_nan=False,
    ensure_ascii=False,
    separators=(",", ":"),
    default=datetime.isoformat,  # the only other type let through: an aware time
)


@functools.lru_cache(maxsize=16)
def _json_plan(
    table: sa.Table, keys: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[frozenset[type], ...], Callable[[Sequence[Any]], Any]]:
    """For :func:`_json_parts`: the names of ``table``'s columns in order; per column, the
    Python types it sends as they are: the column type's own (exactly: no bool for an int, no
    int for a float), and None; and a row's key (the values of ``keys``)."""
    types = []
    for column in table.c:
        type_ = column.type
        if isinstance(type_, sa.TypeDecorator):  # UTCDateTime: bound as an aware datetime
            type_ = type_.impl_instance
        types.append(frozenset((type_.python_type, type(None))))
    names = tuple(c.name for c in table.c)
    key = operator.itemgetter(*(names.index(k) for k in keys))
    return names, tuple(types), key


@functools.lru_cache(maxsize=16)
def _json_upsert(table: sa.Table, keys: tuple[str, ...], update: bool, dialect: Any) -> str:
    """PostgreSQL's upsert of ``table`` from one parameter, a JSON array of rows, each row an
    array of the values of every column in order (:func:`_json_parts`)."""
    quote = dialect.identifier_preparer.quote
    names = ", ".join(quote(c.name) for c in table.c)
    values = ", ".join(
        f"(r ->> {i})::{c.type.compile(dialect=dialect)}" for i, c in enumerate(table.c)
    )
    target = ", ".join(quote(k) for k in keys)
    action = "DO NOTHING"
    if update:
        others = [quote(c.name) for c in table.c if c.name not in keys]
        action = "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in others)
    return (
        f"INSERT INTO {quote(table.name)} ({names}) "
        f"SELECT {values} FROM json_array_elements(%s::json) AS r "
        f"ON CONFLICT ({target}) {action}"
    )


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
    values = _VALUES_OF(row)
    # floats and None, no NaN (filter(None, …) leaves out None and zeros, which are no NaN)
    if _PLAIN.issuperset(map(type, values)) and not any(map(math.isnan, filter(None, values))):
        return (row["minute"], *values)
    checked = [nan if isinstance(v, float) and math.isnan(v) else v for v in map(_stored, values)]
    return (row["minute"], *checked)


_VALUES_OF = operator.itemgetter(*_VALUES)
_PLAIN = frozenset((float, type(None)))


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


Context = dict[tuple[str, str], list[ContextRow]]
"""(run id, GPU) → the rows before those appended to the series (:func:`_appendable`)."""
Stored = dict[tuple[str, str], dict[int, Rollup]]
"""(run id, GPU) → hour → the series' stored rollup."""


def _appendable(
    conn: Connection,
    first: Mapping[tuple[str, str], datetime],
    locked: Collection[str] = (),
) -> tuple[Context, Stored]:
    """Before rows are written from ``first[(run_id, gpu)]`` on: the series they are appended
    to (no stored row at or after that minute), each with its context, the rows of the
    :data:`WINDOW_MIN` minutes before, and its stored rollups from the context's hour on. On
    PostgreSQL each run's rollups are locked until the transaction ends (an advisory lock per
    run, taken in run order; not again for the runs ``locked`` already in this transaction),
    so that two writers of one run do not add to the same hours from what each saw alone."""
    q = _selection(conn)
    by_run: dict[str, dict[str, datetime]] = {}
    for (run_id, gpu), minute in first.items():
        by_run.setdefault(run_id, {})[gpu] = minute
    out: Context = {}
    stored: Stored = {}
    for run_id in sorted(by_run):
        gpus = by_run[run_id]
        if not q.sqlite and run_id not in locked:
            lock = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
            fetch(conn, lock, (RUN_LOCK_CLASS, run_id))
        context: dict[str, list[ContextRow]] = {gpu: [] for gpu in gpus}
        kept: dict[str, dict[int, Rollup]] = {gpu: {} for gpu in gpus}
        for kind, rows in itertools.groupby(_read_series(conn, q, run_id, gpus), key=_KIND):
            if kind == 0:
                for row in rows:
                    gpu, last = row[1], row[6]
                    bound = q.time_value(gpus[gpu])
                    # a stored row at or after the first one written (or a SQLite minute that
                    # is no text, which no time compares with): recomputed, not added to
                    if type(last) is not type(bound) or last >= bound:
                        context.pop(gpu, None)
                continue
            for gpu, group in itertools.groupby(rows, key=_GPU):
                if (series := context.get(gpu)) is None:
                    continue
                if kind == 2:
                    kept[gpu] = {r[2]: _stored_rollup(run_id, r) for r in group}
                elif q.sqlite:  # text, parsed once (a live run's last rows: every minute)
                    series += [(_epoch_minute(q, r[2]), *r[3:6]) for r in group]
                else:  # epoch minutes already, a GPU's rows one row of arrays
                    for row in group:
                        series += zip(*row[_WINDOW_AT], strict=True)
        out.update(((run_id, gpu), rows) for gpu, rows in context.items())
        stored.update(((run_id, gpu), kept[gpu]) for gpu in context)
    return out, stored


def _read_series(
    conn: Connection, q: SampleSQL, run_id: str, gpus: Mapping[str, datetime]
) -> list[tuple[Any, ...]]:
    """What :func:`_appendable` reads of a run's ``gpus`` (GPU → the first minute written), in
    one statement, ordered by kind, GPU and minute or hour: each GPU's last stored minute from
    the first written on (kind 0: column 6), the rows of the :data:`WINDOW_MIN` minutes before
    (1: :func:`_between_sql`'s columns from column 1; a GPU found recomputed has them read for
    nothing), and the rollups of the hours from theirs on (2: :data:`_STORED`'s columns from
    column 1). Only the GPUs written: a node of a many-node run writes its own.

    SQLite reads the rollups apart: a statement costs it no round trip, and padding every row
    to a rollup's columns in its sorter costs more than a second statement. PostgreSQL gives a
    GPU's rows of kind 1 as one row, each of their columns an array in minute order (the last
    four columns, :data:`_WINDOW_AT`): the driver loads a row at ~0.5 µs however few its
    values, an array's values in C (a live minute's 240 rows of 8 GPUs: 100 µs less)."""
    start, end = min(gpus.values()), max(gpus.values())
    since = epoch_minute(start) - WINDOW_MIN
    names = list(gpus)
    last, rest, stored = _series_sql(q.sqlite, len(names))
    columns, where, params = _between_sql(q, run_id, names, since=_minute_at(since), until=end)
    read = (run_id, q.time_value(start), *names, *params)
    stored_params = (run_id, since // HOUR_MIN, *names)
    if q.sqlite:
        rows = f"{last} UNION ALL SELECT 1, {columns}{rest} {where}"
        found = fetch(conn, f"{rows} ORDER BY 1, 2, 3", read)
        return found + fetch(conn, f"{stored} ORDER BY 2, 3", stored_params)
    rows = f"{last} UNION ALL {rest} {where} GROUP BY gpu"
    return fetch(conn, f"{rows} UNION ALL {stored} ORDER BY 1, 2, 3", (*read, *stored_params))


_STORED = (
    "gpu",
    "hour",
    "covered_s",
    "util_known_s",
    "util_s",
    None,  # the column of a GPU's last minute
    *(
        c
        for c in COLUMNS
        if c not in ("run_id", "gpu", "hour", "covered_s", "util_known_s", "util_s")
    ),
)
"""The rollups' columns as :func:`_read_series` reads them (kind 2) from its column 1: the
types of a context row's (an integer, three floats, a time) first."""
_STORED_AT = operator.itemgetter(*(1 + _STORED.index(name) for name in COLUMNS[1:]))
"""A kind 2 row's values of the rollups' columns after ``run_id``, in their order."""


def _stored_rollup(run_id: str, row: Sequence[Any]) -> Rollup:
    """The rollup of a kind 2 row of :func:`_read_series` (its values as read: the columns'
    types)."""
    return rollup_of(zip(COLUMNS, (run_id, *_STORED_AT(row)), strict=True))


@functools.lru_cache(maxsize=64)
def _series_sql(sqlite: bool, gpus: int) -> tuple[str, str, str]:
    """:func:`_read_series`'s statement but the rows' (:func:`_between_sql`): its kind 0 part,
    the columns padding a context row to a rollup's, and its kind 2 part."""
    mark = "?" if sqlite else "%s"
    marks = ", ".join([mark] * gpus)
    # typed in the first part: a NULL of every part would be text in PostgreSQL's UNION
    rollup = [c for c in _STORED[6:] if c is not None]
    integer = {c for c in rollup if isinstance(rollups_table.c[c].type, sa.Integer)}
    padding = "".join(
        f", CAST(NULL AS {'INTEGER' if c in integer else 'DOUBLE PRECISION'})" for c in rollup
    )
    if sqlite:  # the rollups read apart (_read_series): no padding
        padding = ""
    else:  # and the arrays of a GPU's rows (kind 1) after the rollups' columns
        padding += ", CAST(NULL AS BIGINT[])" + ", CAST(NULL AS DOUBLE PRECISION[])" * 3
    last = (
        f"SELECT 0, gpu, NULL, NULL, NULL, NULL, MAX(minute){padding} FROM samples WHERE "
        f"run_id = {mark} AND minute >= {mark} AND gpu IN ({marks}) GROUP BY gpu"
    )
    columns = ", ".join(c or "NULL" for c in _STORED) + ("" if sqlite else ", NULL" * 4)
    stored = (
        f"SELECT 2, {columns} FROM rollups WHERE run_id = {mark} AND hour >= {mark} "
        f"AND gpu IN ({marks})"
    )
    if sqlite:  # the last minute's column after a row's (_between_sql's)
        return last, ", NULL", stored
    # kind 1: a GPU's rows as arrays (its FROM, WHERE and GROUP BY added by _read_series)
    arrays = ", ".join(f"array_agg({v} ORDER BY minute)" for v in _row_values(False))
    # typed: the first part's NULLs leave the types of columns 2 to 5 to this one
    typed = ", CAST(NULL AS BIGINT)" + ", CAST(NULL AS DOUBLE PRECISION)" * 3
    window = f"SELECT 1, gpu{typed}{', NULL' * (1 + len(rollup))}, {arrays}"
    return last, window, stored


_WINDOW_AT = slice(-4, None)
"""A PostgreSQL kind 1 row's arrays (:func:`_read_series`): minutes, seconds, utilization and
SM activity of a GPU's rows."""
_KIND = operator.itemgetter(0)
_GPU = operator.itemgetter(1)


def _minute_at(epoch_minute: int) -> datetime:
    return datetime.fromtimestamp(epoch_minute * 60, UTC)


def _epoch_minute(q: SampleSQL, raw: Any) -> int | None:
    """A minute as the driver returns it (:meth:`SampleSQL.minute`) as epoch minutes; None
    when it is no time."""
    if type(raw) is int and not q.sqlite:  # PostgreSQL's, computed by the query
        return raw
    if type(raw) is str:
        return _text_minute(raw)
    moment = q.minute(raw)
    return None if moment is None else epoch_minute(moment)


@functools.lru_cache(maxsize=4096)
def _text_minute(raw: str) -> int | None:
    """A SQLite minute's epoch minute (None when it is no time text), parsed once: a live
    run's last rows are its context for every minute it writes."""
    moment = SampleSQL(True).minute(raw)
    return None if moment is None else epoch_minute(moment)


def _between_sql(
    q: SampleSQL, run_id: str, gpus: Sequence[str], *, since: datetime, until: datetime
) -> tuple[str, str, tuple[Any, ...]]:
    """What :func:`_between` reads: its columns, its ``FROM … WHERE …`` and the parameters."""
    columns, where = _between_text(q.sqlite, len(gpus))
    return columns, where, (run_id, q.time_value(since), q.time_value(until), *gpus)


def _row_values(sqlite: bool) -> tuple[str, ...]:
    """The columns :func:`_between` reads of a row after its GPU: the minute (SQLite: as
    stored; PostgreSQL: epoch minutes) and ``covered_s``, ``util_pct``, ``sm_active_pct``
    where they are usable numbers, else NULL."""
    return (
        "minute" if sqlite else "FLOOR(EXTRACT(EPOCH FROM minute) / 60)::bigint",
        checked_value("covered_s", COVERED_S_RANGE),
        checked_value("util_pct", (0.0, 100.0)),
        checked_value("sm_active_pct", (0.0, 100.0)),
    )


@functools.lru_cache(maxsize=64)
def _between_text(sqlite: bool, gpus: int) -> tuple[str, str]:
    """:func:`_between_sql`'s SQL, made once a database and number of GPUs."""
    mark = "?" if sqlite else "%s"
    columns = ", ".join(("gpu", *_row_values(sqlite)))
    where = (
        f"FROM samples WHERE run_id = {mark} AND minute >= {mark} AND minute < {mark} "
        f"AND gpu IN ({', '.join([mark] * gpus)})"
    )
    return columns, where


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
    columns, where, params = _between_sql(q, run_id, gpus, since=since, until=until)
    sql = f"SELECT {columns} {where} ORDER BY minute"
    return fetch(conn, sql, params)


def _append(
    conn: Connection,
    context: Context,
    stored: Stored,
    rows: Iterable[Mapping[str, Any]],
) -> list[Rollup]:
    """The ``stored`` rollups of the hours of ``rows``, appended to the series in ``context``
    (both :func:`_appendable`'s), with the rows added
    (:func:`tracker.store.rollups.appended`): to be written. Reads rows before the appended
    ones only (where a stretch turns idle): the same before or after the rows are written."""
    q, nan = _selection(conn), _nan(conn)
    new: dict[tuple[str, str], list[MinuteRow]] = {key: [] for key in context}
    for r in rows:
        if (key := (r["run_id"], r["gpu"])) in new:
            new[key].append(_as_read(r, nan))
    for series in new.values():
        series.sort(key=lambda row: row[0])
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
    return out


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
    locked: Collection[str] = (),
    touched: Touched | None = None,
    last: bool = False,
) -> None:
    """Store rows (``stmt``: their upsert) and the rollups they change: those of runs in
    ``dropped`` (their old rows deleted in this transaction) are ``rollups[run_id]`` where
    given (:func:`tracker.store.rollups.sample_rollups` of these rows) or computed from the
    rows; the others' are refreshed from the database (``first``: each series' first minute
    written). ``keep_rollups`` False: a version 1 store, which has none. ``locked``: the runs
    whose advisory lock this transaction holds already (PostgreSQL). ``touched``: the change
    counters to raise, sent with the rows where they are one statement (and then cleared).
    ``last``: the caller sends nothing after this in the transaction; where nothing here
    follows the rows' statement either (the live writer's minute), it goes with the
    ``COMMIT`` (:func:`execute_all`)."""
    live = {k: m for k, m in first.items() if k[0] not in dropped}
    context, stored = _appendable(conn, live, locked) if params and keep_rollups else ({}, {})
    appending = (p for p in params if (p["run_id"], p["gpu"]) in context)
    added = _append(conn, context, stored, appending) if context else []
    # the rows, the rollups added to and the counters in one statement where they can be
    rollup_rows = [vars(r) for r in added]  # each field a column (as_row, not copied)
    also = None
    if touched is not None and conn.dialect.name == "postgresql":
        also = touched.statement()
    batches: list[Batch] = [
        (stmt, params, table),
        (_rollup_upsert(conn), rollup_rows, rollups_table),
    ]
    # nothing after the rows' statement: no run dropped, no series recomputed
    last = last and not dropped and len(context) == len(live)
    if execute_all(conn, batches, also=also, last=last) and touched is not None:
        touched.sent()
    if not params or not keep_rollups:
        return
    if dropped:
        given = set(rollups) & dropped
        _write(conn, [r for run_id in given for r in rollups[run_id]])
        fresh = dropped - given
        write_fresh(conn, (p for p in params if p["run_id"] in fresh))
    if len(context) < len(live):  # a live minute's series are all appended to
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
    seconds-weighted idle rule; → 4: create ``changes`` (:mod:`tracker.store.changes`); → 5
    and 6: the runs' new columns (:func:`tracker.store.schema.add_run_columns`)."""
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
    if version < 6:
        add_run_columns(conn)
    conn.execute(
        sa.update(meta_table)
        .where(meta_table.c.key == "schema_version")
        .values(value=str(SCHEMA_VERSION))
    )
