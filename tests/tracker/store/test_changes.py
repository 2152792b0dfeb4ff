"""Every write that can change a day's figures raises that day's counter in the write's own
transaction, on SQLite and PostgreSQL; a rebuild makes every mark new; a version 3 store gains
the counters without its rollups being rebuilt."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from fakes import run_record

from tracker.record import MinuteSample
from tracker.store import RunStore
from tracker.store import changes as ch

DAY0 = datetime(2026, 11, 23, tzinfo=UTC)  # a Monday
D = ch.day_of(DAY0)


def counters(url: str) -> dict[tuple[int, int], int]:
    with RunStore(url) as s, s.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT day, shard, version FROM changes"))
        return {(int(d) - D, int(sh)): int(v) for d, sh, v in rows}


def epoch(url: str) -> int:
    with RunStore(url) as s:
        return s.transaction(lambda conn: ch.marks(conn, 0, -1)[0], write=False)


def test_day_of_and_shards() -> None:
    assert ch.day_of(datetime(1970, 1, 2, 23, 59, tzinfo=UTC)) == 1
    assert ch.day_of(datetime(1969, 12, 31, 23, tzinfo=UTC)) == -1
    assert list(ch.span_days(DAY0, DAY0 + timedelta(days=2, hours=1))) == [D, D + 1, D + 2]
    assert ch.shard_of("run-a") == ch.shard_of("run-a") < ch.SHARDS
    assert len({ch.shard_of(f"r{i}") for i in range(200)}) == ch.SHARDS


def test_each_write_raises_the_days_it_changes(store_url: str) -> None:
    a, b = ch.shard_of("a"), ch.shard_of("b")
    with RunStore(store_url) as s:
        # a: from day 0, 10:00 to day 2, 10:00 (50 h)
        s.upsert_run(run_record("a", DAY0 + timedelta(hours=10), 48))
    assert counters(store_url) == {(0, a): 1, (1, a): 1, (2, a): 1}
    with RunStore(store_url) as s:  # moved to day 5: its old days and its new one
        s.upsert_run(run_record("a", DAY0 + timedelta(days=5, hours=1), 2))
    assert counters(store_url) == {(0, a): 2, (1, a): 2, (2, a): 2, (5, a): 1}

    samples = [
        MinuteSample(run_id="b", minute=DAY0 + timedelta(days=3, hours=23, minutes=m), gpu="g")
        for m in range(90)  # day 3, 23:00 to day 4, 00:29
    ]
    with RunStore(store_url) as s:
        s.put([run_record("b", DAY0 + timedelta(days=3, hours=23), 1.5)], samples)
    got = counters(store_url)
    assert {k: v for k, v in got.items() if k[1] == b and k[1] != a} == {(3, b): 1, (4, b): 1}

    # an import that drops b: the days of its record and of its samples
    with RunStore(store_url) as s:
        s.put([], [], drop=["b"])
    got = counters(store_url)
    assert {k: v for k, v in got.items() if k[1] == b and k[1] != a} == {(3, b): 2, (4, b): 2}


def test_a_crashed_run_raises_its_days_to_now_and_a_rebuild_the_epoch(store_url: str) -> None:
    c = ch.shard_of("c")
    with RunStore(store_url) as s:
        run = run_record("c", DAY0, 1).replace(status="running", ended_at=None, heartbeat_at=None)
        s.upsert_run(run)
        assert counters(store_url) == {(0, c): 1}
        assert s.mark_crashed(now=DAY0 + timedelta(days=2)) == ["c"]
        assert counters(store_url) == {(0, c): 2, (1, c): 1, (2, c): 1}
        assert epoch(store_url) == 0
        s.rebuild_rollups()
        s.rebuild_rollups()
    assert epoch(store_url) == 2


def test_a_version_3_store_gains_counters_without_a_rebuild(store_url: str) -> None:
    with RunStore(store_url) as s:
        s.upsert_samples([MinuteSample(run_id="v3", minute=DAY0, gpu="g", util_pct=50.0)])

        def as_version_3(conn: sa.Connection) -> None:
            conn.exec_driver_sql("DROP TABLE changes")
            conn.exec_driver_sql("UPDATE rollups SET util_s = 1234")  # a rebuild would undo it
            conn.exec_driver_sql("UPDATE meta SET value = '3' WHERE key = 'schema_version'")

        s.transaction(as_version_3, write=True)
    with RunStore(store_url) as s:
        assert s.version == 7
        util_s = s.transaction(
            lambda conn: conn.exec_driver_sql("SELECT util_s FROM rollups").scalar(), write=False
        )
        s.upsert_run(run_record("v3", DAY0, 1))
    assert util_s == 1234
    assert counters(store_url) == {(0, ch.shard_of("v3")): 1}


def test_a_runs_write_raises_the_days_of_its_spans_before_and_after(store_url: str) -> None:
    """PostgreSQL reads the stored span in the statement that writes the run, SQLite apart:
    the same days either way. A heartbeat before the start (the days between, swapped), an
    end at midnight, a start 3,700 days back (only the last 3,661 days counted) and back."""
    from tracker.record import RunRecord

    start = datetime(2026, 11, 23, 23, 59, 59, 999999, tzinfo=UTC)  # day 0's last µs
    writes = [
        RunRecord(
            id="s",
            name="s",
            started_at=start,
            status="running",
            heartbeat_at=start - timedelta(days=2),
        ),  # day -2 to day 0
        RunRecord(
            id="s", name="s", started_at=start, status="done", ended_at=DAY0 + timedelta(days=1)
        ),  # day 0 to day 1 (midnight)
        RunRecord(
            id="s",
            name="s",
            started_at=DAY0 - timedelta(days=3700),
            status="running",
            heartbeat_at=DAY0,
        ),  # days -3660 to 0
        RunRecord(id="s", name="s", started_at=start, status="running"),  # day 0
    ]
    with RunStore(store_url) as s:
        for record in writes:
            s.upsert_run(record)
    got = counters(store_url)
    shard = ch.shard_of("s")
    assert {k[1] for k in got} == {shard}
    by_day = {day: v for (day, _), v in got.items()}
    # a write raises each day of its spans before and after once: days -2..0, then -2..1,
    # then -3660..1 (the stored 0..1 and the new -3660..0), then -3660..0
    assert by_day[0] == by_day[-1] == by_day[-2] == 4
    assert by_day[1] == 2
    assert by_day[-3] == by_day[-3660] == 2 and -3661 not in by_day
    assert len(by_day) == 3662  # days -3660 to 1
