"""The hourly rollups summed for the reports: per run, GPU and time bucket, in the database
(a version 2 store; :mod:`tracker.store.rollup_sql` keeps them as samples are written)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy.engine import Connection

from tracker.store.rollups import MISSHAPED_HOUR
from tracker.store.sample_sql import checked_value


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
    known, used, idle, idle_used, bad = BASIS_COLUMNS[value]
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    bucket = "0"
    for i, edge in enumerate(sorted(hour_edges)):
        bucket = f"CASE WHEN hour < {int(edge)} THEN ({bucket}) ELSE {i + 1} END"
    bucket = f"CASE WHEN hour = {MISSHAPED_HOUR} THEN -1 ELSE {bucket} END"
    hour_s = 3600.0
    # a figure damaged in the database (text on SQLite, inf, NaN) reads as NULL
    checks = [
        checked_value("covered_s", (0.0, hour_s)),
        checked_value(known, (0.0, hour_s)),
        checked_value(used, (0.0, 100 * hour_s)),
        checked_value(idle, (0.0, hour_s)),
        checked_value(idle_used, (0.0, 100 * hour_s)),
    ]
    ok = " AND ".join(f"{c} IS NOT NULL" for c in checks)
    sql = (
        f"SELECT run_id, gpu, {bucket} AS bucket, "
        f"SUM(CASE WHEN {ok} THEN minutes ELSE 0 END), "
        f"SUM(CASE WHEN {ok} THEN covered_s ELSE 0 END), "
        f"SUM(CASE WHEN {ok} THEN {known} ELSE 0 END), "
        f"SUM(CASE WHEN {ok} THEN {used} ELSE 0 END), "
        f"SUM(CASE WHEN {ok} THEN {idle} ELSE 0 END), "
        f"SUM(CASE WHEN {ok} THEN {idle_used} ELSE 0 END), "
        f"SUM(dropped), SUM({bad}), SUM(bad_minutes), "
        f"SUM(CASE WHEN {ok} THEN 0 ELSE 1 END) "
        f"FROM rollups WHERE (hour >= {mark} AND hour < {mark}) OR hour = {MISSHAPED_HOUR} "
        f"GROUP BY run_id, gpu, bucket"
    )
    return [RollupTotals(*r) for r in conn.exec_driver_sql(sql, (since_hour, until_hour)).all()]
