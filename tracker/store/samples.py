"""Driver-level SQL for reading millions of minute samples, and the per-bucket sums it returns.

The database is dynamically typed (SQLite keeps ``'abc'`` in a REAL column) and a float column
can hold ``inf``: the readers here take only **usable** rows, those whose ``covered_s`` is a
number of seconds in ``[0, 60]`` (:data:`COVERED_S_RANGE`); the rest are left out and counted
(:attr:`SampleTotals.dropped`). A usable row whose utilization value is not a number in the
range asked for is kept with the value unknown (:attr:`SampleTotals.bad_values`), like a minute
the GPU gave no value for. A SQLite ``minute`` that is not shaped like a time (``'2026-11-25
zz'``, :func:`time_shaped`) is left out and counted apart (:attr:`SampleTotals.bad_minutes`):
one ``LIKE`` per row, in the bucket's ``CASE`` (no cost a scan of millions shows; a ``GLOB`` of
digits would cost a tenth more). Text shaped like a time that still is none (``2026-02-31``)
is not caught there: it is counted by its text's order, and read as no time (None; the row is
left out) where minutes are parsed one by one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tracker.store.rollups import MISSHAPED_HOUR
from tracker.store.schema import (
    rollups_table,
    samples_table,
    utc,
)

COVERED_S_RANGE = (0.0, 60.0)
"""A sample covers this many seconds of its minute; a row outside it (or text, or non-finite) is
not a sample the readers use."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleTotals:
    """One GPU of one run over one time bucket, summed from its minute samples
    (:meth:`RunStore.sample_totals`)."""

    run_id: str
    gpu: str
    bucket: int
    """Index of the time bucket: the number of bucket edges at or before the minutes."""
    minutes: int
    """Minute samples summed."""
    covered_s: float
    """Σ covered_s: seconds of the GPU's time the samples cover."""
    known_s: float
    """Σ covered_s of the samples with a value."""
    value_s: float
    """Σ value × covered_s (the value in %, e.g. ``util_pct``): divided by ``known_s``, the
    time-weighted mean value."""
    first_low: datetime | None
    """The first minute whose value is under the ``low_under`` asked for; None: none is."""
    last_low: datetime | None
    """The last such minute."""
    dropped: int = 0
    """Rows left out, not in the figures above: ``covered_s`` not in :data:`COVERED_S_RANGE`
    (text, non-finite, out of range). A bucket of only such rows has ``minutes == 0``."""
    bad_values: int = 0
    """Rows counted with their value unknown: a value that is not a number in the range asked
    for (text, non-finite, out of range)."""
    bad_minutes: int = 0
    """Rows left out because their minute is not shaped like a time (SQLite text), in a bucket
    of their own (-1, ``minutes == 0``); not in ``dropped``."""

    @classmethod
    def misshaped(cls, run_id: str, gpu: str, rows: int) -> SampleTotals:
        """``rows`` sample rows of a GPU whose minute is not shaped like a time: all left out."""
        return cls(
            run_id=run_id,
            gpu=gpu,
            bucket=MISSHAPED_BUCKET,
            minutes=0,
            covered_s=0.0,
            known_s=0.0,
            value_s=0.0,
            first_low=None,
            last_low=None,
            bad_minutes=rows,
        )

    def merge(self, other: SampleTotals) -> SampleTotals:
        """The totals of both (of the same run, GPU and bucket) together."""
        firsts = [t for t in (self.first_low, other.first_low) if t is not None]
        lasts = [t for t in (self.last_low, other.last_low) if t is not None]
        return dataclasses.replace(
            self,
            minutes=self.minutes + other.minutes,
            covered_s=self.covered_s + other.covered_s,
            known_s=self.known_s + other.known_s,
            value_s=self.value_s + other.value_s,
            first_low=min(firsts, default=None),
            last_low=max(lasts, default=None),
            dropped=self.dropped + other.dropped,
            bad_values=self.bad_values + other.bad_values,
            bad_minutes=self.bad_minutes + other.bad_minutes,
        )


MISSHAPED_BUCKET = -1
"""The bucket of the rows whose minute is not shaped like a time."""

TIME_SHAPE = "____-__-__ __:__%"
"""The ``LIKE`` pattern of a time as SQLite holds it (``2026-11-25 10:00:00.000000``)."""


def time_shaped(column: str) -> str:
    """SQLite SQL true when ``column`` (a name of ours, never user input) holds text shaped
    like a time (:data:`TIME_SHAPE`); false for other text, a number or a blob, NULL for NULL.
    Only a value so shaped sorts among the times."""
    return f"({column} LIKE '{TIME_SHAPE}')"


def text_of(value: object) -> str:
    """A stored value as text, to name a run: bytes decoded as UTF-8 (a bad byte replaced)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


@contextmanager
def lenient_text(conn: Connection) -> Iterator[None]:
    """On SQLite, the reads inside decode text that is not UTF-8 with the bad bytes replaced
    (the driver would fail the whole read on one such value); the connection goes back to the
    pool as it was. A Python call per text value: for reads of thousands of rows, not of
    millions."""
    raw = conn.connection.dbapi_connection
    if conn.dialect.name != "sqlite" or raw is None:
        yield
        return
    before = getattr(raw, "text_factory", str)
    setattr(raw, "text_factory", text_of)  # noqa: B010 — not in the DB-API protocol's type
    try:
        yield
    finally:
        setattr(raw, "text_factory", before)  # noqa: B010


def check_sample_columns(columns: Sequence[str]) -> None:
    # Column names go into SQL text: only the table's own.
    unknown = [name for name in columns if name not in samples_table.c]
    if unknown:
        raise ValueError(f"no sample column {', '.join(unknown)}")


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


def checked_value(column: str, value_range: tuple[float, float] | None) -> str:
    """SQL for ``column`` (a checked name) where it is a number in ``value_range``, else NULL
    (unknown); the column itself when ``value_range`` is None."""
    if value_range is None:
        return column
    lo, hi = (_literal(v) for v in value_range)
    return f"(CASE WHEN {column} BETWEEN {lo} AND {hi} THEN {column} END)"


def bucket_case(
    selection: SampleSQL, edges: Sequence[datetime], first: int = 0
) -> tuple[str, list[Any]]:
    """SQL for the time bucket of a sample's minute (``first`` + the number of ``edges`` at or
    before it) and its parameters: a binary search, so a row costs log2 of the comparisons."""
    if not edges:
        return str(first), []
    mid = len(edges) // 2
    below, below_params = bucket_case(selection, edges[:mid], first)
    above, above_params = bucket_case(selection, edges[mid + 1 :], first + mid + 1)
    return (
        f"CASE WHEN minute < {selection.mark} THEN {below} ELSE {above} END",
        [selection.time_value(edges[mid]), *below_params, *above_params],
    )


def sampled_run_ids(
    conn: Connection, ids: Iterable[str], *, rollups: bool, sqlite: bool
) -> set[str]:
    """:meth:`RunStore.sampled_runs`: from the hourly rollups (an hour with a usable minute,
    60 times fewer rows than the samples) where the store keeps them, else from the samples."""
    wanted = list(dict.fromkeys(ids))
    usable: list[Any]
    if rollups:
        c = rollups_table.c
        usable = [c.minutes > 0, c.hour != MISSHAPED_HOUR]
    else:
        c, check = samples_table.c, SampleSQL(sqlite)
        usable = [sa.text(check.usable), sa.text(check.shaped)]
    return {
        row[0]
        for i in range(0, len(wanted), 500)
        for row in conn.execute(
            sa.select(c.run_id).where(c.run_id.in_(wanted[i : i + 500]), *usable).distinct()
        )
    }
