"""The reports' SQL for reading millions of minute samples, and the per-bucket sums it returns.

The database is dynamically typed (SQLite keeps ``'abc'`` in a REAL column) and a float column
can hold ``inf``: the readers here take only **usable** rows, those whose ``covered_s`` is a
number of seconds in ``[0, 60]`` (:data:`tracker.store.sample_sql.COVERED_S_RANGE`); the rest
are left out and counted (:attr:`SampleTotals.dropped`). A usable row whose utilization value
is not a number in the range asked for is kept with the value unknown
(:attr:`SampleTotals.bad_values`), like a minute the GPU gave no value for. A SQLite ``minute``
that is not shaped like a time (``'2026-11-25 zz'``, :func:`tracker.store.sample_sql.time_shaped`)
is left out and counted apart (:attr:`SampleTotals.bad_minutes`): one ``LIKE`` per row, in the
bucket's ``CASE`` (no cost a scan of millions shows; a ``GLOB`` of digits would cost a tenth
more). Text shaped like a time that still is none (``2026-02-31``) is not caught there: it is
counted by its text's order, and read as no time (None; the row is left out) where minutes are
parsed one by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tracker.store.rollups import MISSHAPED_HOUR
from tracker.store.sample_sql import SampleSQL
from tracker.store.schema import rollups_table, samples_table


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleTotals:
    """One GPU of one run over one time bucket, summed from its minute samples
    (:meth:`reports.data.scans.SampleScans.sample_totals`)."""

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
    """Rows left out, not in the figures above: ``covered_s`` not in
    :data:`tracker.store.sample_sql.COVERED_S_RANGE` (text, non-finite, out of range). A bucket
    of only such rows has ``minutes == 0``."""
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
    """:meth:`reports.data.scans.SampleScans.sampled_runs`: from the hourly rollups (an hour
    with a usable minute, 60 times fewer rows than the samples) where the store keeps them, else
    from the samples."""
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
