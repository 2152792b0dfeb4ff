"""Driver-level SQL of the samples table, shared by the rollups kept at write time
(:mod:`.rollup_sql`) and the reports' fleet-scale reads (:mod:`reports.data.samples`): which rows
are usable samples, placeholders, and a minute as the driver binds and returns it.

The database is dynamically typed (SQLite keeps ``'abc'`` in a REAL column) and a float column
can hold ``inf``: a **usable** row is one whose ``covered_s`` is a number of seconds in
``[0, 60]`` (:data:`COVERED_S_RANGE`), and a SQLite ``minute`` counts only when it is shaped like
a time (:func:`time_shaped`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from tracker.store.schema import utc

COVERED_S_RANGE = (0.0, 60.0)
"""A sample covers this many seconds of its minute; a row outside it (or text, or non-finite) is
not a sample the readers use."""

TIME_SHAPE = "____-__-__ __:__%"
"""The ``LIKE`` pattern of a time as SQLite holds it (``2026-11-25 10:00:00.000000``)."""


def time_shaped(column: str) -> str:
    """SQLite SQL true when ``column`` (a name of ours, never user input) holds text shaped
    like a time (:data:`TIME_SHAPE`); false for other text, a number or a blob, NULL for NULL.
    Only a value so shaped sorts among the times."""
    return f"({column} LIKE '{TIME_SHAPE}')"


class SampleSQL:
    """Driver-level SQL for the readers of millions of samples: FROM and WHERE (placeholders,
    parameters apart) for the minutes in ``[since, until)`` and (SQLite) the row ids in
    ``rowids`` = ``(first, end)``, and the minute's values as the driver binds and returns them.

    On SQLite a range over most of the table reads 3x faster as a scan than through an index,
    so the table is read NOT INDEXED (its planner would take the minute or the primary key
    index)."""

    def __init__(
        self,
        sqlite: bool,
        since: datetime | None = None,
        until: datetime | None = None,
        *,
        rowids: tuple[int | None, int | None] = (None, None),
    ) -> None:
        self.sqlite = sqlite
        self.mark = "?" if sqlite else "%s"
        self.table = "samples NOT INDEXED" if sqlite else "samples"
        clauses: list[str] = []
        self.params: list[Any] = []
        first, end = rowids
        bounds = (
            ("minute >=", None if since is None else self.time_value(since)),
            ("minute <", None if until is None else self.time_value(until)),
            ("rowid >=", first),
            ("rowid <", end),
        )
        for condition, value in bounds:
            if value is not None:
                clauses.append(f"{condition} {self.mark}")
                self.params.append(value)
        self.where = f" WHERE {' AND '.join(clauses)}" if clauses else ""

    @property
    def usable(self) -> str:
        """SQL true for a row the readers use (see the module docstring). ``x BETWEEN a AND b``
        is false for text on SQLite (numbers sort before text), for NULL, for ±inf and for
        PostgreSQL's NaN (which sorts above every number)."""
        lo, hi = (_literal(v) for v in COVERED_S_RANGE)
        return f"(covered_s BETWEEN {lo} AND {hi})"

    @property
    def shaped(self) -> str:
        """SQL true for a row whose minute is shaped like a time (:func:`time_shaped`; always on
        PostgreSQL, whose ``timestamptz`` holds only times)."""
        return time_shaped("minute") if self.sqlite else "TRUE"

    def minute(self, raw: Any) -> datetime | None:
        """A minute as the driver returns it (naive UTC text on SQLite), as an aware datetime;
        None for a value that is no time (text shaped like one, ``2026-02-31``, passes
        :attr:`shaped`)."""
        if raw is None:
            return None
        if isinstance(raw, str):
            try:
                value = datetime.fromisoformat(raw)
            except ValueError:
                return None
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if isinstance(raw, datetime) and raw.tzinfo is not None:
            return utc(raw)
        return None

    def time_value(self, value: datetime) -> Any:
        """``value`` as the driver binds it for the minute column: naive UTC text (the form
        :class:`UTCDateTime` stores) on SQLite."""
        value = utc(value)
        return value.replace(tzinfo=None).isoformat(" ", "microseconds") if self.sqlite else value


def _literal(value: float) -> str:
    """A finite float as SQL text (our own constants and bounds, never user input)."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite bound: {value!r}")
    return repr(number)


def in_range(column: str, value_range: tuple[float, float]) -> str:
    """SQL true where ``column`` is a number in ``value_range``: false for text on SQLite,
    ±inf and PostgreSQL's NaN, NULL for NULL (:attr:`SampleSQL.usable`).

    Args:
        column: A column name of ours (never user input: it goes into the SQL text).
        value_range: The inclusive bounds, finite, in the column's unit.

    Returns:
        The SQL condition, parenthesized.
    """
    lo, hi = (_literal(v) for v in value_range)
    return f"({column} BETWEEN {lo} AND {hi})"


def checked_value(column: str, value_range: tuple[float, float] | None) -> str:
    """SQL for ``column`` (a checked name) where it is a number in ``value_range``, else NULL
    (unknown); the column itself when ``value_range`` is None."""
    if value_range is None:
        return column
    return f"(CASE WHEN {in_range(column, value_range)} THEN {column} END)"
