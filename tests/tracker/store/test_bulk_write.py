"""The store's bulk write (:func:`tracker.store.rollup_sql.execute_many`, the driver's own
executemany) stores what SQLAlchemy's ``conn.execute(stmt, rows)`` stores, value for value; and
the rollups an import's write computes from the rows it holds equal a rebuild from what the
database holds (SQLite and PostgreSQL)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from tracker.record import MinuteSample
from tracker.store import RunStore
from tracker.store.rollup_sql import execute_many
from tracker.store.rollups import COLUMNS
from tracker.store.schema import samples_table, upsert

NEW_YORK = ZoneInfo("America/New_York")
# 01:30 twice on 2026-11-01 in New York (05:30 and 06:30 UTC): equal and hashed alike in Python
FIRST, SECOND = (datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK, fold=f) for f in (0, 1))


def rows_of(values: list[Any], minutes: list[datetime], run: str) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run,
            "minute": m,
            "gpu": "GPU-a",
            "covered_s": 60.0,
            "util_pct": v,
            "sm_active_pct": None,
            "mem_used_gib": 1,
            "power_w": math.inf,
            "energy_kwh": -0.0,
        }
        for v, m in zip(values, minutes, strict=True)
    ]


def stored(store: RunStore, run: str) -> list[tuple[Any, ...]]:
    return store.transaction(
        lambda conn: [
            tuple(r)
            for r in conn.exec_driver_sql(
                "SELECT minute, covered_s, util_pct, sm_active_pct, mem_used_gib, power_w, energy_kwh "
                "FROM samples WHERE run_id = '" + run + "' ORDER BY minute"
            ).all()
        ],
        write=False,
    )


def test_the_bulk_write_stores_what_sqlalchemy_stores(store_url: str) -> None:
    minutes = [
        FIRST,
        SECOND,
        datetime(2026, 11, 2, 9, 0, tzinfo=timezone(timedelta(hours=5))),
        datetime(2026, 11, 2, 4, 1, tzinfo=UTC),
        datetime(2026, 11, 2, 4, 2, tzinfo=UTC),
    ]
    values: list[Any] = [None, 3, 2.5, math.nan, 1e300]
    with RunStore(store_url) as store:
        stmt = upsert(store.engine.dialect.name, samples_table, ("run_id", "minute", "gpu"))
        store.transaction(
            lambda conn: conn.execute(stmt, rows_of(values, minutes, "sa")), write=True
        )
        store.transaction(
            lambda conn: execute_many(conn, stmt, rows_of(values, minutes, "bulk"), samples_table),
            write=True,
        )
        ours, theirs = stored(store, "bulk"), stored(store, "sa")
    assert len(ours) == 5  # the two 01:30s are two minutes, an hour apart
    assert repr(ours) == repr(theirs)  # NaN and -0.0 as well: the same text, value for value


def test_an_imports_rollups_equal_a_rebuild_whatever_the_values_type(store_url: str) -> None:
    """A write that drops its runs first computes their rollups from its rows: values bound as
    floats (``"50"``, a Decimal, an int), a NaN as the database reads it back."""
    t0 = datetime(2026, 11, 24, 9, 50, tzinfo=UTC)
    cycle: list[Any] = ["50", Decimal("2"), 1, math.nan, 3.0, None]
    rows = [
        MinuteSample(
            run_id="r",
            minute=t0 + timedelta(minutes=m),
            gpu="GPU-a",
            covered_s=60.0,
            util_pct=cycle[m % len(cycle)] if m < 30 else 1.0,
        )
        for m in range(90)
    ]
    with RunStore(store_url) as store:
        store.put([], rows, drop=["r"])

        def read(conn: sa.Connection) -> list[tuple[Any, ...]]:
            return [
                tuple(r)
                for r in conn.exec_driver_sql(
                    f"SELECT {', '.join(COLUMNS)} FROM rollups ORDER BY run_id, gpu, hour"
                ).all()
            ]

        written = store.transaction(read, write=False)
        store.rebuild_rollups()
        assert store.transaction(read, write=False) == written
    # 09:50-10:00: "50", 2, 1, NaN, 3, None, "50", 2, 1, NaN: seven minutes with a value
    assert [r[COLUMNS.index("minutes")] for r in written] == [10, 60, 20]
    assert written[0][COLUMNS.index("util_known_s")] == 7 * 60.0
