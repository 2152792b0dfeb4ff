"""The live writer's statements (issue 42): an upsert that JSON holds as it is goes to
PostgreSQL as one statement and stores what SQLAlchemy's row-by-row ``conn.execute`` stores,
value for value; what JSON cannot hold goes row by row; a live minute's samples and rollups are
one statement; the statements sent through the driver's own cursor fail as SQLAlchemy's do
(SQLite and PostgreSQL)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from tracker.record import MinuteSample, RunRecord
from tracker.store import RunStore, StoreError, rollup_sql
from tracker.store.engine import fetch, fetch_first, send, send_last, send_many
from tracker.store.rollups import COLUMNS
from tracker.store.schema import samples_table, upsert

NEW_YORK = ZoneInfo("America/New_York")
# 01:30 twice on 2026-11-01 in New York (05:30 and 06:30 UTC): equal and hashed alike in Python
FIRST, SECOND = (datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK, fold=f) for f in (0, 1))
T0 = datetime(2026, 11, 24, 9, 45, tzinfo=UTC)

# floats whose text a careless writer would round: the smallest subnormal, the largest finite,
# a negative zero, sums with 17 significant digits
FLOATS = [5e-324, 1.7976931348623157e308, -0.0, 0.1 + 0.2, 1 / 3, 1e300, 123456789.12345679]


def sample_row(run: str, minute: datetime, gpu: str, value: float | None) -> dict[str, Any]:
    return {
        "run_id": run,
        "minute": minute,
        "gpu": gpu,
        "covered_s": 60.0,
        "util_pct": value,
        "sm_active_pct": None,
        "mem_used_gib": 40.5,
        "power_w": value,
        "energy_kwh": -0.0,
    }


def stored(store: RunStore, run: str) -> list[tuple[Any, ...]]:
    sql = (
        "SELECT minute, gpu, covered_s, util_pct, sm_active_pct, mem_used_gib, power_w, "
        "energy_kwh FROM samples WHERE run_id = :run ORDER BY minute, gpu"
    )
    return store.transaction(
        lambda conn: [tuple(r) for r in conn.execute(sa.text(sql), {"run": run})], write=False
    )


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements :mod:`tracker.store.rollup_sql` sends that return no rows (a statement
    sent row by row counts once)."""
    out: list[str] = []
    real_send, real_many = rollup_sql.send, rollup_sql.send_many
    real_last = rollup_sql.send_last

    def send(conn: sa.Connection, sql: str, params: Any = ()) -> None:
        out.append(sql)
        real_send(conn, sql, params)

    def send_last(conn: sa.Connection, sql: str, params: Any = ()) -> None:
        out.append(sql)
        real_last(conn, sql, params)

    def send_many(conn: sa.Connection, sql: str, params: Any) -> None:
        out.append(sql)
        real_many(conn, sql, params)

    monkeypatch.setattr(rollup_sql, "send", send)
    monkeypatch.setattr(rollup_sql, "send_last", send_last)
    monkeypatch.setattr(rollup_sql, "send_many", send_many)
    yield out


def write_both(store: RunStore, rows_of: Callable[[str], list[dict[str, Any]]]) -> None:
    """``rows_of("sa")`` through SQLAlchemy's ``conn.execute``, ``rows_of("ours")`` through
    :func:`tracker.store.rollup_sql.execute_many`."""
    stmt = upsert(store.engine.dialect.name, samples_table, ("run_id", "minute", "gpu"))
    store.transaction(lambda conn: conn.execute(stmt, rows_of("sa")), write=True)
    store.transaction(
        lambda conn: rollup_sql.execute_many(conn, stmt, rows_of("ours"), samples_table),
        write=True,
    )


def test_plain_rows_are_one_statement_and_store_what_sqlalchemy_stores(
    store_url: str, sent: list[str]
) -> None:
    """Seven floats JSON must write to the last bit, text JSON must escape, times in three
    zones (the two 01:30s of New York an hour apart), and a key twice in the batch: stored
    alike, value for value; on PostgreSQL as one statement."""
    minutes = [FIRST, SECOND, datetime(2026, 11, 2, 9, tzinfo=timezone(timedelta(hours=5)))]
    gpus = ['GPU "0"', "GPU\\1", "GPU-ü→✓,{x}"]

    def rows_of(run: str) -> list[dict[str, Any]]:
        rows = [
            sample_row(run, minutes[i % 3], f"{gpus[i % 3]}#{i}", value)
            for i, value in enumerate([*FLOATS, None])
        ]
        # the first row's key again: the later values win, as row after row leaves them
        return [*rows, sample_row(run, FIRST, f"{gpus[0]}#0", 42.0)]

    with RunStore(store_url) as store:
        write_both(store, rows_of)
        ours, theirs = stored(store, "ours"), stored(store, "sa")
        postgres = store.engine.dialect.name == "postgresql"
    assert len(ours) == 8  # 9 rows, one key twice
    assert repr(ours) == repr(theirs)  # -0.0 and the subnormal too: the same text
    assert ours[0][1:4] == (f"{gpus[0]}#0", 60.0, 42.0)
    assert len(sent) == 1  # on SQLite too: the library's executemany, sent once
    assert sent[0].startswith("INSERT INTO samples") and ("json_array_elements" in sent[0]) is (
        postgres
    )


@pytest.mark.parametrize("odd", [math.nan, math.inf, -math.inf, 3, Decimal("2.5")])
def test_rows_json_cannot_hold_go_row_by_row_and_store_the_same(
    store_url: str, sent: list[str], odd: Any
) -> None:
    """A NaN or an infinity (no JSON number), an int or a Decimal in a float column (which the
    database converts): the driver's executemany, as before, and the same values stored."""

    def rows_of(run: str) -> list[dict[str, Any]]:
        return [sample_row(run, T0 + timedelta(minutes=m), "g", [1.5, odd][m]) for m in (0, 1)]

    with RunStore(store_url) as store:
        write_both(store, rows_of)
        assert repr(stored(store, "ours")) == repr(stored(store, "sa"))
    assert len(sent) == 1 and "json_array_elements" not in sent[0]


def test_a_live_minute_writes_its_samples_and_rollups_in_one_statement(
    store_url: str, sent: list[str]
) -> None:
    """Minute 40 of a run of 4 GPUs, appended: on PostgreSQL the samples and the rollups they
    change are one statement (a WITH of the samples' upsert and the rollups'), on SQLite two
    (each the library's executemany); the rollups kept equal a rebuild."""
    run = RunRecord(id="r", name="r", started_at=T0, status="running", gpu_count=4)

    def minute(m: int) -> list[MinuteSample]:
        return [
            MinuteSample(
                run_id="r",
                minute=T0 + timedelta(minutes=m),
                gpu=f"GPU-{g}",
                covered_s=60.0,
                util_pct=40.0 + g + m % 3,
                sm_active_pct=20.0 + g / 3,
                energy_kwh=0.0117,
                mem_used_gib=40.5,
            )
            for g in range(4)
        ]

    def rollups(store: RunStore) -> list[tuple[Any, ...]]:
        sql = f"SELECT {', '.join(COLUMNS)} FROM rollups ORDER BY gpu, hour"
        return store.transaction(
            lambda conn: [tuple(r) for r in conn.exec_driver_sql(sql)], write=False
        )

    with RunStore(store_url) as store:
        store.upsert_run(run)
        for m in range(40):
            store.upsert_samples(minute(m))
        sent.clear()
        store.upsert_samples(minute(40))
        statements = list(sent)
        postgres = store.engine.dialect.name == "postgresql"
        kept = rollups(store)
        store.rebuild_rollups()
        assert rollups(store) == kept
    assert len(kept) == 4 * 2  # 09:45 + 41 minutes: two hours a GPU
    if postgres:
        assert len(statements) == 1
        assert statements[0].startswith("WITH w0 AS (INSERT INTO samples")
        assert "INSERT INTO rollups" in statements[0]
    else:
        assert [sql.split(" (")[0] for sql in statements] == [
            "INSERT INTO samples",
            "INSERT INTO rollups",
        ]


def test_a_driver_statements_error_is_sqlalchemys_and_the_stores(store_url: str) -> None:
    """The same failing statement through SQLAlchemy's ``exec_driver_sql`` and through the
    driver's own cursor (:func:`tracker.store.engine.fetch`) in :meth:`RunStore.transaction`:
    the same error, a division by zero a refused value on PostgreSQL, a missing table an
    unavailable store on SQLite."""
    with RunStore(store_url) as store:
        if store.engine.dialect.name == "postgresql":
            sql, refused = "SELECT 1 / 0", True
        else:
            sql, refused = "SELECT * FROM no_such_table", False
        errors = []
        for run in (lambda c: c.exec_driver_sql(sql).all(), lambda c: fetch(c, sql)):
            with pytest.raises(StoreError) as caught:
                store.transaction(run, write=False)
            errors.append(caught.value)
        # and the store still answers: the failed transaction was rolled back
        assert store.transaction(lambda c: fetch(c, "SELECT 1"), write=False) == [(1,)]
    assert [e.refused for e in errors] == [refused, refused]
    assert str(errors[0]) == str(errors[1])


def test_the_kept_cursor_follows_the_pool_to_a_new_connection(store_url: str) -> None:
    """The driver's cursor is kept with its pooled connection: when the pool replaces the
    connection (invalidated, as after a server restart), the next statement gets a cursor of
    the new one, not the closed one."""
    with RunStore(store_url) as store:
        assert store.transaction(lambda c: fetch(c, "SELECT 1"), write=False) == [(1,)]
        with store.engine.connect() as conn:
            before = conn.connection.dbapi_connection
            conn.invalidate()  # closes the driver's connection: its cursor with it
        assert store.transaction(lambda c: fetch(c, "SELECT 2"), write=False) == [(2,)]
        with store.engine.connect() as conn:
            assert conn.connection.dbapi_connection is not before


def test_the_drivers_errors_come_out_as_sqlalchemys(store_url: str) -> None:
    """A statement sent through the driver's cursor fails as one SQLAlchemy sent would, for
    every caller, not only RunStore's transactions: the driver's error its ``.orig``."""
    with RunStore(store_url):  # the store made (its folder, its tables)
        pass
    engine = sa.create_engine(store_url)
    mark = "?" if engine.dialect.name == "sqlite" else "%s"
    calls: list[Callable[[sa.Connection], object]] = [
        lambda conn: fetch(conn, "SELECT * FROM no_such_table"),
        lambda conn: send(conn, f"INSERT INTO no_such_table VALUES ({mark})", (1,)),
        lambda conn: send_many(conn, f"INSERT INTO no_such_table VALUES ({mark})", [(1,), (2,)]),
        lambda conn: fetch_first(conn, f"SELECT * FROM no_such_table WHERE 1 = {mark}", (1,)),
        lambda conn: send_last(conn, f"INSERT INTO no_such_table VALUES ({mark})", (1,)),
    ]
    try:
        for call in calls:
            with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as caught:
                call(conn)
            assert isinstance(caught.value.orig, engine.dialect.loaded_dbapi.Error)
            assert "no_such_table" in str(caught.value.orig)
    finally:
        engine.dispose()


def test_the_first_statement_brings_the_begin_and_the_last_the_commit(store_url: str) -> None:
    """``fetch_first`` gives the rows ``fetch`` gives (PostgreSQL: text, a NULL, an integer, a
    float to the bit, a time; loaded from text); on PostgreSQL it opens the transaction the
    statements after it are in (one transaction id), and a ``send_last`` commits it: another
    connection sees its rows before SQLAlchemy's commit, and a failing one commits nothing.
    SQLite sends both as ``fetch`` and ``send``: its rows are seen after the commit."""
    with RunStore(store_url) as store:
        postgres = store.engine.dialect.name == "postgresql"
        mark = "%s" if postgres else "?"
        store.transaction(lambda c: send(c, "CREATE TABLE t (x INTEGER)"), write=True)
        values = ("a'b", None, 7, 0.1 + 0.2, T0) if postgres else ("a'b", None, 7, 0.1 + 0.2)
        casts = ("text", "text", "integer", "float8", "timestamptz")
        columns = ", ".join(
            f"CAST({mark} AS {cast})" if postgres else mark for cast in casts[: len(values)]
        )
        sql = f"SELECT {columns}"
        first = store.transaction(lambda c: fetch_first(c, sql, values), write=False)
        plain = store.transaction(lambda c: fetch(c, sql, values), write=False)
        assert first == plain == [values]

        def count() -> int:
            other = sa.create_engine(store_url)
            try:
                with other.connect() as conn:
                    return int(conn.exec_driver_sql("SELECT count(*) FROM t").scalar_one())
            finally:
                other.dispose()

        def work(conn: sa.Connection) -> tuple[list[Any], int]:
            ids = fetch_first(conn, "SELECT txid_current()") if postgres else []
            send(conn, f"INSERT INTO t VALUES ({mark})", (1,))
            ids += fetch_first(conn, "SELECT txid_current()") if postgres else []
            send_last(conn, f"INSERT INTO t VALUES ({mark})", (2,))
            return ids, count()

        ids, seen = store.transaction(work, write=True)
        assert seen == (2 if postgres else 0)
        assert count() == 2
        if postgres:
            assert len(set(ids)) == 1 and len(ids) == 2

        def failing(conn: sa.Connection) -> None:
            send(conn, f"INSERT INTO t VALUES ({mark})", (3,))
            send_last(conn, "INSERT INTO no_such_table SELECT x FROM t")

        # a missing table: the store's error on SQLite, SQLAlchemy's (a bug of ours) on PostgreSQL
        with pytest.raises((StoreError, sa.exc.ProgrammingError)):
            store.transaction(failing, write=True)
        assert count() == 2
