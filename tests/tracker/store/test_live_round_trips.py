"""The live writer's round trips on PostgreSQL (issue 42): a pooled connection used within
``PING_AFTER_S`` goes out unpinged, one idle longer is pinged and replaced when its server
end is gone; a run's advisory lock is taken with its stored span, in one statement; the change
counters are raised in the statement that writes the samples and rollups; a live minute is
three round trips (the ``BEGIN`` sent with the span and the lock, the read, the write sent
with the ``COMMIT``), a heartbeat one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tracker.record import MinuteSample, RunRecord
from tracker.store import RunStore, StoreError, changes, engine, rollup_sql
from tracker.store.engine import fetch
from tracker.store.rollups import _Span
from tracker.store.schema import RUN_LOCK_CLASS

T0 = datetime(2026, 11, 24, 9, 45, tzinfo=UTC)


@pytest.fixture
def pg_store(store_url: str) -> Iterator[RunStore]:
    if not store_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's round trips")
    with RunStore(store_url) as store:
        yield store


def two_gpus(m: int) -> list[MinuteSample]:
    """Minute ``m`` of run ``r``'s GPUs g0 and g1, idle (1%)."""
    moment = T0 + timedelta(minutes=m)
    return [
        MinuteSample(run_id="r", minute=moment, gpu=f"g{g}", covered_s=60.0, util_pct=1.0)
        for g in range(2)
    ]


def backend_pid(store: RunStore) -> int:
    return int(store.transaction(lambda c: fetch(c, "SELECT pg_backend_pid()"), write=False)[0][0])


def end_backend(url: str, pid: int) -> None:
    """The server end of another connection, ended (as a server restart ends it)."""
    other = sa.create_engine(url)
    try:
        with other.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
    finally:
        other.dispose()


def pings(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Where the store's dialect is asked to ping: one entry a ping."""
    out: list[int] = []
    dialect = store.engine.dialect
    real = dialect.do_ping

    def ping(dbapi_conn: Any) -> bool:
        out.append(1)
        return real(dbapi_conn)

    monkeypatch.setattr(dialect, "do_ping", ping)
    return out


def test_a_connection_used_within_seconds_is_not_pinged(
    pg_store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = pings(pg_store, monkeypatch)
    for _ in range(3):
        backend_pid(pg_store)
    assert sent == []
    monkeypatch.setattr(engine, "PING_AFTER_S", 0.0)  # every connection idle too long
    backend_pid(pg_store)
    assert sent == [1]


def test_an_idle_connection_whose_server_end_is_gone_is_replaced(
    pg_store: RunStore, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pinged after ``PING_AFTER_S``: the pool replaces it and the transaction runs; within
    it (the trade-off of skipping the ping) the transaction fails once as the store's error,
    and the next one gets a new connection."""
    first = backend_pid(pg_store)
    end_backend(store_url, first)
    monkeypatch.setattr(engine, "PING_AFTER_S", 0.0)
    second = backend_pid(pg_store)
    assert second != first

    monkeypatch.setattr(engine, "PING_AFTER_S", 3600.0)
    end_backend(store_url, second)
    with pytest.raises(StoreError):
        backend_pid(pg_store)
    assert backend_pid(pg_store) not in (first, second)


def test_the_runs_lock_is_taken_with_its_span(pg_store: RunStore, store_url: str) -> None:
    """Held from the statement that reads the spans to the end of the transaction (another
    connection cannot take it), for a run with no record too; the spans of the runs found."""
    pg_store.upsert_run(RunRecord(id="r", name="r", started_at=T0, status="running"))
    other = sa.create_engine(store_url)
    try:

        def work(conn: sa.Connection) -> tuple[list[dict[str, Any]], list[bool]]:
            # two locks a statement: the third in one of its own
            spans = changes.stored_spans(conn, ["r", "none"], chunk=2, lock=["new", "r", "z"])
            with other.connect() as probe:
                sql = "SELECT pg_try_advisory_lock(:c, hashtext(:r))"
                free = [
                    bool(probe.execute(sa.text(sql), {"c": RUN_LOCK_CLASS, "r": run}).scalar())
                    for run in ("new", "r", "z", "another")
                ]
            return spans, free

        spans, free = pg_store.transaction(work, write=True)
    finally:
        other.dispose()
    assert [(s["id"], s["started_at"]) for s in spans] == [("r", T0)]
    assert free == [False, False, False, True]


def test_a_live_minute_raises_its_counter_in_the_write(
    pg_store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three statements between BEGIN and COMMIT: the spans with the lock, the read of the
    series and their rollups, the write of samples, rollups and the day's counter (raised by
    one)."""
    run = RunRecord(id="r", name="r", started_at=T0, status="running", gpu_count=2)
    pg_store.upsert_run(run)

    def counter() -> int:
        sql = "SELECT version FROM changes WHERE day = %s AND shard = %s"
        key = (changes.day_of(T0), changes.shard_of("r"))
        return int(pg_store.transaction(lambda c: fetch(c, sql, key), write=False)[0][0])

    for m in range(5):
        pg_store.upsert_samples(two_gpus(m))
    before = counter()
    statements: list[str] = []
    for module in (changes, rollup_sql):
        for name in ("fetch", "send", "fetch_first", "send_last"):
            if not hasattr(module, name):
                continue
            real = getattr(module, name)

            def sent(conn: sa.Connection, sql: str, params: Any = (), real: Any = real) -> Any:
                statements.append(sql)
                return real(conn, sql, params)

            monkeypatch.setattr(module, name, sent)
    pg_store.upsert_samples(two_gpus(5))
    assert counter() == before + 1
    assert len(statements) == 3
    assert "pg_advisory_xact_lock" in statements[0] and "JOIN runs" in statements[0]
    assert "FROM samples" in statements[1] and "FROM rollups" in statements[1]
    assert statements[2].startswith("WITH w0 AS (INSERT INTO samples")
    assert "INSERT INTO changes" in statements[2]


def test_a_span_of_rows_minute_after_minute_is_keyed_without_its_minutes() -> None:
    """So that a steady series' span reads alike minute after minute; two rows of one minute
    (with a gap making up the count) or a gap keep theirs."""
    row = (60.0, 1.0, 1.0)
    assert _Span([(m, *row) for m in (5, 6, 7)], []).minutes is None
    assert _Span([(m, *row) for m in (5, 6, 6, 8)], []).minutes == (5, 6, 6, 8)
    assert _Span([(m, *row) for m in (5, 7)], []).minutes == (5, 7)


def round_trips(store: RunStore, trace: Path) -> Callable[[], list[str]]:
    """What the store's connections send to the server from now on, read when the function
    returned is called: one entry a round trip, a simple query's text, or ``"extended"`` for
    a statement of the extended protocol (its ``Sync``), from libpq's own trace of the
    messages."""
    opened = trace.open("w")

    def checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.pgconn.trace(opened.fileno())
        dbapi_conn.pgconn.set_trace_flags(0)

    sa.event.listen(store.engine, "checkout", checkout)

    def read() -> list[str]:
        opened.flush()
        out: list[str] = []
        for line in trace.read_text().splitlines():
            fields = line.split("\t")
            if len(fields) >= 4 and fields[1] == "F" and fields[3] in ("Query", "Sync"):
                out.append(fields[4].strip(' "') if fields[3] == "Query" else "extended")
        return out

    return read


def test_a_live_minute_is_three_round_trips_and_a_heartbeat_one(
    pg_store: RunStore, tmp_path: Path
) -> None:
    """Minute 10 of a run of 2 GPUs: the BEGIN goes with the span's read and the run's lock,
    the COMMIT with the write of samples, rollups and counters (psycopg would send each
    alone: five round trips); its heartbeat: one statement alone (the server's transaction of
    one statement), the counters of the run's span read by it and the run's upsert. What is
    stored is as before: the day's counter one up a write, the minutes and the heartbeat
    there. (The minutes before: psycopg prepares the read on its
    sixth use, a round trip once.)"""
    run = RunRecord(id="r", name="r", started_at=T0, status="running", gpu_count=2)
    pg_store.upsert_run(run)

    for m in range(10):
        pg_store.upsert_samples(two_gpus(m))
    key = (changes.day_of(T0), changes.shard_of("r"))
    sql = "SELECT version FROM changes WHERE day = %s AND shard = %s"
    before = pg_store.transaction(lambda c: fetch(c, sql, key), write=False)[0][0]
    sent_so_far = round_trips(pg_store, tmp_path / "trace.txt")
    pg_store.upsert_samples(two_gpus(10))
    heartbeat = T0 + timedelta(minutes=10)
    pg_store.upsert_run(run.replace(heartbeat_at=heartbeat))
    sent = sent_so_far()
    assert len(sent) == 4
    assert sent[0].startswith("BEGIN; SELECT") and "pg_advisory_xact_lock" in sent[0]
    assert sent[1] == "extended"  # the read, its rows in binary
    assert sent[2].startswith("WITH w0 AS (INSERT INTO samples") and sent[2].endswith("COMMIT")
    assert sent[3].startswith("WITH w0 AS (INSERT INTO changes") and "FROM runs" in sent[3]
    assert "INSERT INTO runs" in sent[3] and "COMMIT" not in sent[3]
    after = pg_store.transaction(lambda c: fetch(c, sql, key), write=False)[0][0]
    assert after == before + 2  # the minute's write and the heartbeat's
    stored = pg_store.get_run("r")
    assert stored is not None and stored.heartbeat_at == heartbeat
    assert len(pg_store.samples(run_ids=["r"])) == 22
