"""Rollups per (run, GPU, hour): the idle rule over a list equal to the streamed and the array
rules, hand-computed hours, rollups kept current by every write equal to a rebuild from the
minutes, and a version 1 store migrated in place (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from reports.kpi.gputime import idle_of_series
from tracker.cost import IdleDetector, idle_flags
from tracker.record import MinuteSample
from tracker.store import SCHEMA_VERSION, RunStore, rollup_sql
from tracker.store.rollups import COLUMNS, rollups_of

T0 = datetime(2026, 11, 24, 9, 45, tzinfo=UTC)  # 15 minutes before an hour


def _series(values: list[float | None], minutes: list[int] | None = None) -> np.ndarray:
    """The report's flags of one series (:func:`reports.kpi.gputime.idle_of_series`)."""
    n = len(values)
    at = np.array(minutes if minutes is not None else range(n), dtype=np.int64)
    return idle_of_series(
        np.array([np.nan if v is None else v for v in values]),
        np.full(n, 60.0),
        np.zeros(n, dtype=int),
        at * 60_000_000_000,
        threshold_pct=5.0,
        window=30,
    )


def test_idle_flags_equal_the_streamed_and_the_reports_calls() -> None:
    rng = random.Random(11)
    for _ in range(300):
        n = rng.randint(1, 120)
        values = [
            rng.choice([0.0, 1.0, 2.5, 4.9, 5.0, 5.1, 7.0, 40.0, None])
            if rng.random() < 0.35
            else rng.choice([0.1, 0.2, 4.7, 5.3])
            for _ in range(n)
        ]
        flags = idle_flags(values, [60.0] * n, threshold_pct=5.0, window=30)
        assert flags == _series(values).tolist()
        detector = IdleDetector(window=30, threshold_pct=5.0)
        for v in values:
            detector.add_minute(v, 60.0)
        assert sum(flags) * 60.0 == pytest.approx(detector.idle_s)


def test_a_missing_minute_breaks_a_stretch_in_every_caller() -> None:
    """Minutes without a row (an imported log's gap) break a stretch as a minute without a
    value does, in the list, the report's and the streamed calls alike."""
    values: list[float | None] = [0.0] * 58
    minutes = [*range(29), *range(30, 59)]  # minute 29 has no row
    full = [60.0] * 58
    assert idle_flags(values, full, threshold_pct=5.0, window=30) == [True] * 58  # one stretch
    assert idle_flags(values, full, threshold_pct=5.0, window=30, minutes=minutes) == [False] * 58
    rng = random.Random(12)
    for _ in range(300):
        n = rng.randint(1, 120)
        values = [
            rng.choice([0.0, 2.5, 4.9, 5.1, 40.0, None]) if rng.random() < 0.2 else 1.0
            for _ in range(n)
        ]
        minutes, m = [], 10_000
        for _ in range(n):
            m += rng.choice([1] * 30 + [2, 9])
            minutes.append(m)
        flags = idle_flags(values, [60.0] * n, threshold_pct=5.0, window=30, minutes=minutes)
        assert flags == _series(values, minutes).tolist()
        detector = IdleDetector(window=30, threshold_pct=5.0)
        for v, minute in zip(values, minutes, strict=True):
            detector.add_minute(v, 60.0, minute)
        assert sum(flags) * 60.0 == pytest.approx(detector.idle_s)


def test_a_window_exactly_at_the_threshold_is_not_idle() -> None:
    """30 rows of 4.9 and 5.1 sum to 150.0 only up to rounding: the rule decides it exactly
    (mean 5.0 is not under 5.0), whatever order a caller adds in."""
    values: list[float | None] = [4.9, 5.1] * 15
    assert idle_flags(values, [60.0] * 30, threshold_pct=5.0, window=30) == [False] * 30
    assert not _series(values).any()


def test_rollups_of_one_gpu_by_hand() -> None:
    """Minutes 09:45-10:44: 15 in the 09 hour, 45 in the 10 hour. Minutes 0-39 at 2% (one idle
    stretch of 40), 40-59 at 60%; minute 50 unknown; minute 51 covers 30 s; minute 52 is text.
    09h: 15 min x 60 s, all idle at 2%. 10h: 44 usable minutes (52 dropped): 25 at 2% (idle),
    then 40-59 less 52: 18 rows at 60%, one unknown (50), minute 51 30 s."""
    rows = []
    for i in range(60):
        util = 2.0 if i < 40 else 60.0
        rows.append(
            (
                T0 + timedelta(minutes=i),
                "x" if i == 52 else (30.0 if i == 51 else 60.0),
                None if i == 50 else util,
                None,
                0.01,
                7.0 + i / 100,
            )
        )
    h9, h10 = rollups_of("r", "g", rows)
    assert (h9.hour, h9.minutes, h9.covered_s) == (int(T0.timestamp()) // 3600, 15, 900.0)
    assert (h9.util_known_s, h9.util_s, h9.util_idle_s) == (900.0, 1800.0, 900.0)
    assert h10.minutes == 44 and h10.dropped == 1
    assert h10.covered_s == 43 * 60.0 + 30.0
    assert h10.util_known_s == 42 * 60.0 + 30.0  # minute 50 unknown
    assert h10.util_s == pytest.approx(25 * 60 * 2.0 + 17 * 60 * 60.0 + 30 * 60.0)
    assert h10.util_idle_s == 25 * 60.0 and h10.util_idle_value_s == 25 * 60 * 2.0
    assert h10.sm_known_s == 0.0 and h10.energy_kwh == pytest.approx(0.44)
    assert h10.mem_peak_gib == pytest.approx(7.59)
    assert h10.bad_util == 0  # None is unknown, not bad; text covered_s is dropped


def samples_of(
    run_id: str,
    gpu: str,
    utils: list[float | None],
    start: datetime = T0,
) -> list[MinuteSample]:
    return [
        MinuteSample(
            run_id=run_id,
            minute=start + timedelta(minutes=i),
            gpu=gpu,
            covered_s=60.0,
            util_pct=u,
            sm_active_pct=None if u is None else u / 2,
            energy_kwh=0.01,
        )
        for i, u in enumerate(utils)
    ]


def rollup_rows(store: RunStore) -> list[tuple[object, ...]]:
    def work(conn: sa.Connection) -> list[tuple[object, ...]]:
        sql = f"SELECT {', '.join(COLUMNS)} FROM rollups ORDER BY run_id, gpu, hour"
        return [
            tuple(round(v, 6) if isinstance(v, float) else v for v in r)
            for r in conn.exec_driver_sql(sql).all()
        ]

    return store.transaction(work, write=False)


def test_rollups_kept_by_every_write_equal_a_rebuild(store_url: str) -> None:
    """Two runs, three GPUs, 300 minutes each of idle and busy stretches with gaps, written in
    random batches (some into the past, some rewriting minutes): the rollups kept by the writes
    are the rollups rebuilt from the minutes."""
    rng = random.Random(5)
    every: list[MinuteSample] = []
    for run_id, gpu in (("a", "GPU-0"), ("a", "GPU-1"), ("b", "GPU-0")):
        utils: list[float | None] = []
        while len(utils) < 300:
            utils += [rng.choice([0.0, 1.0, 4.0, 6.0, None, 50.0, 95.0])] * rng.randint(1, 40)
        every += [s for s in samples_of(run_id, gpu, utils[:300]) if rng.random() > 0.05]
    with RunStore(store_url) as store:
        order = sorted(every, key=lambda s: s.minute)
        batches = []
        while order:
            n = rng.randint(1, 90)
            batches.append(order[:n])
            order = order[n:]
        rng.shuffle(batches[len(batches) // 2 :])  # the later half out of order
        for batch in batches:
            store.upsert_samples(batch)
        store.upsert_samples(
            [
                s.replace(util_pct=3.0)
                if hasattr(s, "replace")
                else MinuteSample(**{**s.__dict__, "util_pct": 3.0})
                for s in rng.sample(every, 25)
            ]
        )
        kept = rollup_rows(store)
        assert len(kept) >= 3 * 5
        store.rebuild_rollups()
        assert rollup_rows(store) == kept


def test_rollups_added_to_minute_by_minute_equal_a_rebuild_to_the_bit(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live writer's pattern: every call appends the next minute or three of three series
    (two runs; the GPUs of one run at times in calls of their own, as nodes write),
    utilization and SM activity in stretches around the 5% threshold, partial and
    unusable minutes, gaps, energy and memory. Each call adds to the stored rollups without
    recomputing an hour (no series is refreshed); stretches turning idle read the rows further
    back. The kept rollups equal a rebuild from the minutes exactly, float for float; then a
    rewritten past minute takes the refresh path, and they still do."""
    refreshed: list[tuple[str, str]] = []
    deeper_reads: list[str] = []
    real_refresh, real_appended = rollup_sql.refresh, rollup_sql.appended

    def refresh(conn: sa.Connection, first: dict[tuple[str, str], datetime]) -> None:
        refreshed.extend(first)
        real_refresh(conn, first)

    def appended(*args: Any, deeper: Callable[[], Any]) -> Any:
        def read() -> Any:  # the rows further back: a stretch turned idle
            deeper_reads.append(str(args[1]))
            return deeper()

        return real_appended(*args, deeper=read)

    monkeypatch.setattr(rollup_sql, "refresh", refresh)
    monkeypatch.setattr(rollup_sql, "appended", appended)
    rng = random.Random(7)

    def stretches(n: int, values: list[float | None]) -> list[float | None]:
        out: list[float | None] = []
        while len(out) < n:
            out += [rng.choice(values)] * rng.randint(1, 80)
        return out[:n]

    series = (("a", "GPU-0"), ("a", "GPU-1"), ("b", "GPU-0"))
    n = 240
    rows: dict[tuple[str, str], list[MinuteSample]] = {}
    for run_id, gpu in series:
        utils = stretches(n, [0.0, 1.0, 4.0, 4.9, 5.1, 6.0, None, 50.0, 95.0])
        sms = stretches(n, [0.0, 3.0, 4.99, 7.0, None, 40.0])
        rows[(run_id, gpu)] = [
            MinuteSample(
                run_id=run_id,
                minute=T0 + timedelta(minutes=i, seconds=rng.choice([0, 0, 0, 30])),
                gpu=gpu,
                covered_s=61.0
                if rng.random() < 0.01
                else rng.choice([60.0] * 6 + [59.5, 30.25, 0.1]),
                util_pct=utils[i],
                sm_active_pct=sms[i],
                energy_kwh=rng.choice([None, 0.0123, 0.01 / 3]),
                mem_used_gib=rng.choice([None, 7.5, 70.25]),
            )
            for i in range(n)
            if rng.random() > 0.01
        ]
        # now and then a second row in a minute (45 s in): two rows of one minute break a stretch
        twice = [
            dataclasses.replace(r, minute=r.minute.replace(second=45))
            for r in rows[(run_id, gpu)]
            if r.minute.second == 0 and rng.random() < 0.05
        ]
        rows[(run_id, gpu)] = sorted([*rows[(run_id, gpu)], *twice], key=lambda r: r.minute)
    with RunStore(store_url) as store:
        done = dict.fromkeys(series, 0)
        while any(done[k] < len(rows[k]) for k in series):
            batches: list[list[MinuteSample]] = [[]]
            for key in series:
                step = rng.choice([1, 1, 1, 2, 3])
                batches[-1] += rows[key][done[key] : done[key] + step]
                done[key] += step
                if rng.random() < 0.3:  # a GPU of run a apart: nodes of one run write apart
                    batches.append([])
            for batch in batches:
                store.upsert_samples(batch)
        assert refreshed == []
        assert deeper_reads  # a stretch turned idle
        kept = exact_rollups(store)
        assert len(kept) == 3 * 5  # 09:45 + 240 minutes: five hours a series
        assert sum(r[COLUMNS.index("util_idle_s")] for r in kept) > 0
        assert sum(r[COLUMNS.index("sm_idle_s")] for r in kept) > 0
        assert sum(r[COLUMNS.index("dropped")] for r in kept) > 0
        store.rebuild_rollups()
        assert exact_rollups(store) == kept
        past = rows[("a", "GPU-1")][100]
        store.upsert_samples([MinuteSample(**{**past.__dict__, "util_pct": 3.0})])
        assert refreshed == [("a", "GPU-1")]
        kept = exact_rollups(store)
        store.rebuild_rollups()
        assert exact_rollups(store) == kept


def test_damaged_rows_before_an_append_count_as_a_rebuild_counts_them(store_url: str) -> None:
    """Rows in the window before an append that no writer of ours makes (text or NaN where a
    number goes, a utilization of 150, seconds out of range), put there by hand: the rollups
    the append adds to read them as a rebuild does (unknown, or left out)."""
    sqlite = store_url.startswith("sqlite")
    bad = "'abc'" if sqlite else "'NaN'::float8"
    q = rollup_sql.SampleSQL(sqlite)
    with RunStore(store_url) as store:
        store.upsert_samples(samples_of("d", "GPU-0", [1.0] * 50))
        damage = [
            f"UPDATE samples SET util_pct = {bad} WHERE minute = {q.mark}",
            f"UPDATE samples SET util_pct = 150.0 WHERE minute = {q.mark}",
            f"UPDATE samples SET covered_s = {bad} WHERE minute = {q.mark}",
            f"UPDATE samples SET covered_s = 75.0 WHERE minute = {q.mark}",
            f"UPDATE samples SET sm_active_pct = {bad} WHERE minute = {q.mark}",
        ]

        def work(conn: sa.Connection) -> None:
            for i, sql in zip((25, 33, 40, 44, 47), damage, strict=True):
                conn.exec_driver_sql(sql, (q.time_value(T0 + timedelta(minutes=i)),))

        store.transaction(work, write=True)
        store.rebuild_rollups()
        for i in range(50, 90):
            store.upsert_samples(samples_of("d", "GPU-0", [0.5], T0 + timedelta(minutes=i)))
        kept = exact_rollups(store)
        assert sum(r[COLUMNS.index("dropped")] for r in kept) == 2
        assert sum(r[COLUMNS.index("bad_util")] for r in kept) == 2  # the text (NaN) and 150
        store.rebuild_rollups()
        assert exact_rollups(store) == kept


def exact_rollups(store: RunStore) -> list[tuple[object, ...]]:
    def work(conn: sa.Connection) -> list[tuple[object, ...]]:
        sql = f"SELECT {', '.join(COLUMNS)} FROM rollups ORDER BY run_id, gpu, hour"
        return [tuple(r) for r in conn.exec_driver_sql(sql).all()]

    return store.transaction(work, write=False)


def test_a_version_1_store_is_migrated_when_opened_to_write(store_url: str) -> None:
    """A store as version 1 left it (no rollups table): a reader (create=False) leaves it so;
    a writer builds its rollups from the minutes and marks it the current version."""
    with RunStore(store_url) as store:
        store.upsert_samples(samples_of("r", "g", [2.0] * 40 + [80.0] * 40))
        expected = rollup_rows(store)

        def downgrade(conn: sa.Connection) -> None:
            conn.exec_driver_sql("DROP TABLE rollups")
            conn.exec_driver_sql("UPDATE meta SET value = '1' WHERE key = 'schema_version'")

        store.transaction(downgrade, write=True)
    with RunStore(store_url, create=False) as reader:
        assert reader.version == 1 and reader.schema_version() == 1
    with RunStore(store_url) as writer:
        assert writer.version == writer.schema_version() == SCHEMA_VERSION == 7
        assert rollup_rows(writer) == expected
        # the 40 idle minutes at 2%: 15 in the first hour, 25 in the next
        assert [r[COLUMNS.index("util_idle_s")] for r in expected[:2]] == [900.0, 1500.0]


def test_a_version_2_stores_rollups_are_rebuilt_by_the_seconds_weighted_rule(
    store_url: str,
) -> None:
    """Version 2 kept idle seconds by equal-weight windows: a first minute of 20 s at 40% and
    29 at 4% averaged (40 + 29 x 4) / 30 = 5.2%, not idle. Seconds-weighted it is 4.41%: the
    29 minutes are idle. A reader leaves a version 2 store as it is (and the report reads its
    minutes, build._rollups_answer); a writer rebuilds the rollups and marks it version 4 (3:
    the idle rule; 4: change counters)."""
    rows = samples_of("r", "g", [40.0] + [4.0] * 29 + [90.0] * 10)
    rows[0] = dataclasses.replace(rows[0], covered_s=20.0)
    with RunStore(store_url) as store:
        store.upsert_samples(rows)

        def as_version_2(conn: sa.Connection) -> None:  # idle seconds as version 2 kept them
            conn.exec_driver_sql("UPDATE rollups SET util_idle_s = 0, util_idle_value_s = 0")
            conn.exec_driver_sql("UPDATE meta SET value = '2' WHERE key = 'schema_version'")

        store.transaction(as_version_2, write=True)
    with RunStore(store_url, create=False) as reader:
        assert reader.version == 2
        assert sum(r[COLUMNS.index("util_idle_s")] for r in rollup_rows(reader)) == 0.0
    with RunStore(store_url) as writer:
        assert writer.version == 7
        assert sum(r[COLUMNS.index("util_idle_s")] for r in rollup_rows(writer)) == 29 * 60.0


def _indexes(store: RunStore) -> set[str]:
    return {ix["name"] for ix in sa.inspect(store.engine).get_indexes("rollups")}


def test_the_reports_sums_read_an_index_that_covers_them(store_url: str) -> None:
    """A new store's rollups have an index on (hour, run, GPU, every figure summed): SQLite
    answers the week's sums from it alone. A store made with the index on the hour alone gets
    it from ``rebuild-rollups``, in place of the old one, and sums the same."""
    from reports.data.rollups import rollup_totals

    hour = int(T0.timestamp()) // 3600
    with RunStore(store_url) as store:
        store.upsert_samples(samples_of("r", "g", [1.0] * 40 + [50.0] * 40))
        assert "ix_rollups_sums" in _indexes(store)

        def sums(conn: sa.Connection) -> list[tuple[object, ...]]:
            return sorted(
                rollup_totals(
                    conn,
                    value="util_pct",
                    hour_edges=[hour + 1],
                    since_hour=hour,
                    until_hour=hour + 3,
                )
            )

        before = store.transaction(sums, write=False)
        assert [(t.bucket, t.minutes) for t in before] == [(0, 15), (1, 65)]  # 09:45-10:00, on
        if store_url.startswith("sqlite"):

            def plan(conn: sa.Connection) -> str:
                sql = "EXPLAIN QUERY PLAN SELECT run_id, gpu, SUM(util_s) FROM rollups "
                sql += "WHERE hour >= ? AND hour < ? GROUP BY run_id, gpu"
                return " ".join(str(r[-1]) for r in conn.exec_driver_sql(sql, (hour, hour + 3)))

            assert "COVERING INDEX ix_rollups_sums" in store.transaction(plan, write=False)

        def as_before(conn: sa.Connection) -> None:
            conn.exec_driver_sql("DROP INDEX ix_rollups_sums")
            conn.exec_driver_sql("CREATE INDEX ix_rollups_hour ON rollups (hour)")

        store.transaction(as_before, write=True)
        assert "ix_rollups_sums" not in _indexes(store)
        store.rebuild_rollups()
        assert "ix_rollups_sums" in _indexes(store)
        assert "ix_rollups_hour" not in _indexes(store)
        assert store.transaction(sums, write=False) == before


def test_a_sqlite_minute_stored_as_a_number_leaves_live_rollups_equal_a_rebuild(
    tmp_path: Path,
) -> None:
    """A damaged SQLite row whose minute is an integer (no time text; SQLite orders every
    number before every text, so no window of minutes holds it): the minutes written live
    after it keep rollups equal to a rebuild's."""
    with RunStore(f"sqlite:///{tmp_path / 'store.db'}") as store:
        first = [
            MinuteSample(
                run_id="r",
                minute=T0 + timedelta(minutes=i),
                gpu="GPU-0",
                covered_s=60.0,
                util_pct=0.0 if i > 3 else 50.0,
            )
            for i in range(40)
        ]
        store.upsert_samples(first)
        with store.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE samples SET minute = 29394245 WHERE minute = :m"),
                {
                    "m": (T0 + timedelta(minutes=30))
                    .replace(tzinfo=None)
                    .isoformat(" ", "microseconds")
                },
            )
        store.rebuild_rollups()  # the damage as a rebuild sees it
        for i in range(40, 45):
            store.upsert_samples(
                [
                    MinuteSample(
                        run_id="r",
                        minute=T0 + timedelta(minutes=i),
                        gpu="GPU-0",
                        covered_s=60.0,
                        util_pct=0.0,
                    )
                ]
            )
        kept = exact_rollups(store)
        store.rebuild_rollups()
        assert exact_rollups(store) == kept
