"""The hourly rollups summed for the reports: per run, GPU and time bucket, in the database
(a version 2 store; :mod:`tracker.store.rollup_sql` keeps them as samples are written)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy.engine import Connection

from tracker.store.rollups import MISSHAPED_HOUR
from tracker.store.sample_sql import in_range
from tracker.units import S_PER_HOUR

if TYPE_CHECKING:
    import pandas as pd


class RollupTotals(NamedTuple):
    """One GPU of one run over one bucket of hours, summed from its rollups."""

    run_id: str
    gpu: str
    bucket: int
    """The number of hour edges at or before the hours; -1: rows whose minute is no time."""
    minutes: int
    covered_s: float
    """Seconds of the GPU's time the minutes cover."""
    known_s: float
    """Seconds with a value on the basis."""
    value_s: float
    """Σ value × seconds (value in %)."""
    idle_s: float
    """Seconds of idle minutes."""
    idle_value_s: float
    """Σ value × seconds of the idle minutes."""
    dropped: int
    """Sample rows left out (``covered_s`` unusable)."""
    bad_values: int
    """Sample rows counted with their value unknown."""
    bad_minutes: int
    """Sample rows whose minute is no time."""
    damaged: int
    """Rollup rows left out for a figure that is not a finite number in range."""


BASIS_COLUMNS = {
    "util_pct": ("util_known_s", "util_s", "util_idle_s", "util_idle_value_s", "bad_util"),
    "sm_active_pct": ("sm_known_s", "sm_s", "sm_idle_s", "sm_idle_value_s", "bad_sm"),
}
"""Per sample column (a utilization basis): its rollup columns."""


def rollup_totals(
    conn: Connection, *, value: str, hour_edges: Sequence[int], since_hour: int, until_hour: int
) -> list[RollupTotals]:
    """The rollups of the hours in ``[since_hour, until_hour)`` summed per run, GPU and bucket
    (the number of ``hour_edges`` at or before the hour), and the rows whose minute is no time
    (bucket -1). A rollup row with a figure that is not a finite number in range is left out
    and counted in ``damaged``.

    Args:
        conn: A connection to a version 2 store (it has the ``rollups`` table).
        value: The sample column of the utilization basis, a key of :data:`BASIS_COLUMNS`.
        hour_edges: Hours since the epoch (UTC) that cut the span into buckets.
        since_hour: The first hour (since the epoch, UTC) summed.
        until_hour: The hour the span ends before.

    Returns:
        One :class:`RollupTotals` per run, GPU and bucket, in no order.
    """
    sql = _totals_sql(conn, value, hour_edges)
    return _merged(_rows(conn, sql, (since_hour, until_hour)))


def _merged(rows: Iterable[Sequence[Any]]) -> list[RollupTotals]:
    """:func:`_totals_sql`'s rows as totals: a damaged group's counts added to its sound
    group's (or to one of no figure)."""
    out: dict[tuple[str, str, int], RollupTotals] = {}
    hurt = []
    for r in rows:
        if r[-1]:
            out[(r[0], r[1], r[2])] = RollupTotals._make((*r[:-2], 0))
        else:
            hurt.append(r)
    for run_id, gpu, b, *_, dropped, bad_values, bad_minutes, n, _sound in hurt:
        key = (run_id, gpu, b)
        kept = out.get(key) or RollupTotals(run_id, gpu, b, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0)
        out[key] = kept._replace(
            dropped=kept.dropped + dropped,
            bad_values=kept.bad_values + bad_values,
            bad_minutes=kept.bad_minutes + bad_minutes,
            damaged=n,
        )
    return list(out.values())


def rollup_totals_frame(
    conn: Connection,
    *,
    value: str,
    hour_edges: Sequence[int],
    since_hour: int,
    until_hour: int,
    chunk_rows: int = 200_000,
) -> pd.DataFrame:
    """:func:`rollup_totals` as a frame of :class:`RollupTotals`' fields, fetched
    ``chunk_rows`` rows at a time: a million runs' totals are never a million tuples (and as
    many named ones) at once. Where rollup rows are damaged (few or none), the rows of
    :func:`rollup_totals`."""
    import pandas as pd

    sql = _totals_sql(conn, value, hour_edges)
    result = conn.exec_driver_sql(sql, (since_hour, until_hour))
    try:
        parts = []
        while chunk := result.cursor.fetchmany(chunk_rows):
            parts.append(pd.DataFrame.from_records(chunk, columns=SUMMED, nrows=len(chunk)))
    finally:
        result.close()
    if not parts:
        return pd.DataFrame(columns=RollupTotals._fields)
    return totals_of(pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0])


SUMMED = [*RollupTotals._fields[:-1], "rows", "sound"]
"""The columns of the rollups summed per run, GPU, bucket and whether sound (the rows of
:func:`_totals_sql`, or :func:`hour_rows_sql`'s rows summed)."""


def totals_of(summed: pd.DataFrame) -> pd.DataFrame:
    """:data:`SUMMED` rows as :func:`rollup_totals_frame` gives them: a damaged group's
    counts added to its sound group's.

    Args:
        summed: The rollups summed per run, GPU, bucket and whether sound (:data:`SUMMED`).

    Returns:
        A frame of :class:`RollupTotals`' fields (seconds, value × seconds in %·s, counts).
    """
    import pandas as pd

    if not summed["sound"].to_numpy(dtype=bool).all():  # damaged rollup rows (few or none)
        rows = summed[SUMMED].itertuples(index=False, name=None)
        return pd.DataFrame(_merged(rows), columns=RollupTotals._fields)
    # every group sound: no damaged row
    return summed[SUMMED[:-2]].assign(damaged=0)


def hour_rows_sql(value: str, hour_edges: Sequence[int], since_hour: int, until_hour: int) -> str:
    """The SQLite query of the rollup rows :func:`rollup_totals` sums, each with its bucket and
    whether it is sound, named as :data:`SUMMED` (but ``rows``), the hours written in: summed
    by run, GPU, bucket and whether sound, they are :func:`_totals_sql`'s rows.

    Args:
        value: The sample column of the utilization basis, a key of :data:`BASIS_COLUMNS`.
        hour_edges: Hours since the epoch (UTC) that cut the span into buckets.
        since_hour: The first hour (since the epoch, UTC).
        until_hour: The hour the span ends before.

    Returns:
        One query, no parameter (every value in it is an integer of ours).
    """
    bucket, figures, ok = _figures(value, hour_edges)
    named = ", ".join(f"{c} AS {n}" for c, n in zip(figures, SUMMED[3:-2], strict=True))
    span = f"(hour >= {int(since_hour)} AND hour < {int(until_hour)}) OR hour = {MISSHAPED_HOUR}"
    return (
        f"SELECT run_id, gpu, {bucket} AS bucket, {named}, COALESCE({ok}, FALSE) AS sound "
        f"FROM rollups WHERE {span}"
    )


def _figures(value: str, hour_edges: Sequence[int]) -> tuple[str, list[str], str]:
    """A rollup row's bucket (SQL), its summed columns, and the SQL condition that its
    figures are finite numbers in range."""
    known, used, idle, idle_used, bad = BASIS_COLUMNS[value]
    bucket = "0"
    for i, edge in enumerate(sorted(hour_edges)):
        bucket = f"CASE WHEN hour < {int(edge)} THEN ({bucket}) ELSE {i + 1} END"
    bucket = f"CASE WHEN hour = {MISSHAPED_HOUR} THEN -1 ELSE {bucket} END"
    hour_s = S_PER_HOUR
    # a figure damaged in the database (text on SQLite, inf, NaN) is out of range
    ok = " AND ".join(
        (
            in_range("covered_s", (0.0, hour_s)),
            in_range(known, (0.0, hour_s)),
            in_range(used, (0.0, 100 * hour_s)),
            in_range(idle, (0.0, hour_s)),
            in_range(idle_used, (0.0, 100 * hour_s)),
        )
    )
    figures = ["minutes", "covered_s", known, used, idle, idle_used, "dropped", bad, "bad_minutes"]
    return bucket, figures, ok


def _totals_sql(conn: Connection, value: str, hour_edges: Sequence[int]) -> str:
    """The query of :func:`rollup_totals`: per run, GPU and bucket, the sound rows summed and
    the damaged ones apart (parameters: the first hour and the hour the span ends before).
    Each row: :class:`RollupTotals`' fields up to ``bad_minutes``, the rows, whether sound."""
    bucket, figures, ok = _figures(value, hour_edges)
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    if conn.dialect.name == "sqlite":
        hours = f"rollups WHERE (hour >= {mark} AND hour < {mark}) OR hour = {MISSHAPED_HOUR}"
    else:
        # the span's hours and the misshaped row apart, each a range of the index that leads
        # with the hour (ix_rollups_sums): with an OR of the two PostgreSQL scans the whole
        # table (12 weeks at 10,000 GPUs, 20 M rows: 2.4 s against 1.1 s). SQLite takes the
        # OR as two ranges itself, and the subquery would cost it twice the time.
        hours = (
            f"(SELECT * FROM rollups WHERE hour >= {mark} AND hour < {mark} UNION ALL "
            f"SELECT * FROM rollups WHERE hour = {MISSHAPED_HOUR}) AS r"
        )
    # one pass: the sound rows and (few or none) the damaged ones grouped apart, the check
    # made once a row; a damaged group's figures are not read, only its counts
    return (
        f"SELECT run_id, gpu, {bucket} AS bucket, {', '.join(f'SUM({c})' for c in figures)}, "
        f"COUNT(*), COALESCE({ok}, FALSE) AS sound FROM {hours} "
        "GROUP BY run_id, gpu, bucket, sound"
    )


def _rows(conn: Connection, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The driver's tuples (no SQLAlchemy Row each: a 100,000-run week has as many)."""
    result = conn.exec_driver_sql(sql, params)
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


class RollupHour(NamedTuple):
    """One GPU of one run over one UTC hour, as its rollup row holds it."""

    run_id: str
    gpu: str
    hour: int
    """Hours since the epoch (UTC)."""
    minutes: int
    """Its usable minute rows."""
    covered_s: float
    known_s: float
    value_s: float
    idle_s: float
    sm_known_s: float
    """Seconds with an SM activity value (whatever the basis)."""
    sm_value_s: float
    sound: bool
    """False: a figure is not a finite number in range (the row's minutes must be read)."""


def rollup_hours(
    conn: Connection, *, value: str, since_hour: int, until_hour: int
) -> list[RollupHour]:
    """The rollup rows of the hours in ``[since_hour, until_hour)``, one per run, GPU and
    hour, for a reader that needs the hours apart (the scheduler's jobs, which start and end
    inside hours: :class:`reports.kpi.allocations.AllocationJoin`).

    Args:
        conn: A connection to a version 2 store (it has the ``rollups`` table).
        value: The sample column of the utilization basis, a key of :data:`BASIS_COLUMNS`.
        since_hour: The first hour (since the epoch, UTC).
        until_hour: The hour the span ends before.

    Returns:
        One :class:`RollupHour` per row, in no order; a damaged row's figures as 0, and a row
        of no usable minute (its rows all dropped) not sound: its hour's minutes are read.
    """
    known, used, idle, _, _ = BASIS_COLUMNS[value]
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    hour_s = S_PER_HOUR
    ok = " AND ".join(
        (
            in_range("minutes", (1.0, 60.0)),
            in_range("covered_s", (0.0, hour_s)),
            in_range(known, (0.0, hour_s)),
            in_range(used, (0.0, 100 * hour_s)),
            in_range(idle, (0.0, hour_s)),
            in_range("sm_known_s", (0.0, hour_s)),
            in_range("sm_s", (0.0, 100 * hour_s)),
        )
    )
    # a damaged row (text on SQLite, inf, NaN) comes back as zeros and not sound
    figures = ", ".join(
        f"CASE WHEN {ok} THEN {c} ELSE 0 END"
        for c in ("minutes", "covered_s", known, used, idle, "sm_known_s", "sm_s")
    )
    sql = (
        f"SELECT run_id, gpu, hour, {figures}, CASE WHEN {ok} THEN 1 ELSE 0 END FROM rollups "
        f"WHERE hour >= {mark} AND hour < {mark}"
    )
    return [
        RollupHour(
            r[0],
            r[1],
            int(r[2]),
            int(r[3]),
            float(r[4]),
            float(r[5]),
            float(r[6]),
            float(r[7]),
            float(r[8]),
            float(r[9]),
            r[10] == 1,
        )
        for r in _rows(conn, sql, (since_hour, until_hour))
    ]


def summed_as_sqlite(rows: pd.DataFrame, keys: list[str], figures: list[str]) -> pd.DataFrame:
    """``rows`` summed per distinct ``keys`` as SQLite's ``SUM`` adds them: one after another
    in the rows' order, a NULL (NaN) left out, integers kept integers (pandas' grouped ``sum``
    adds floats with Kahan's compensation: its sums differ from SQLite's in the last bits).

    Args:
        rows: The rows, in the order SQLite would add them (the store's hours in order).
        keys: The columns that group them (hashed: no sort of the rows).
        figures: The columns summed.

    Returns:
        One row per group in the order each first appears: the keys, each figure's sum, and
        ``rows``, how many.
    """
    import numpy as np

    # groups numbered as they first appear: a group's first row is where the number grows
    codes = rows.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    groups = int(codes.max()) + 1 if len(codes) else 0
    first = np.ones(len(codes), dtype=bool)
    first[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
    out = rows.loc[first, keys].reset_index(drop=True)
    for name in figures:
        values = rows[name].to_numpy()
        weights = np.nan_to_num(values.astype(float), nan=0.0, posinf=np.inf, neginf=-np.inf)
        total = np.bincount(codes, weights=weights, minlength=groups)
        out[name] = total.astype(values.dtype) if values.dtype.kind in "iu" else total
    out["rows"] = np.bincount(codes, minlength=groups)
    return out
