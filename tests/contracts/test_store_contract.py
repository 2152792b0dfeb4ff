"""The run store contract, run against every database the store supports.

The store comes from ``store_url`` (tests/conftest.py): a fresh SQLite file, and a fresh
PostgreSQL database (marked ``postgres``: skipped locally when no server answers, failing under
CI=true). A new database gets the suite by adding a param there. The store's finer points (every
field round-tripped, sample totals, stretches, schema creation) stay in
tests/tracker/store/test_store.py, on the same fixture.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from fakes import run_record

from tracker.record import MinuteSample, RunRecord
from tracker.store import SCHEMA_VERSION, RunStore

T0 = datetime(2026, 9, 21, 12, 0, tzinfo=UTC)
NEW_YORK_SUMMER = timezone(timedelta(hours=-4))


@pytest.fixture
def store(store_url: str) -> Iterator[RunStore]:
    with RunStore(store_url) as s:
        yield s


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def running(run_id: str, start_min: float, beat_min: float | None) -> RunRecord:
    return run_record(run_id, at(start_min), 0.0).replace(
        status="running", ended_at=None, heartbeat_at=None if beat_min is None else at(beat_min)
    )


def minute(run_id: str, m: int, gpu: str = "GPU-a", util: float = 50.0) -> MinuteSample:
    return MinuteSample(run_id=run_id, minute=at(m), gpu=gpu, util_pct=util, power_w=300.0)


def test_schema_version_is_this_codes(store: RunStore) -> None:
    assert store.schema_version() == SCHEMA_VERSION


def test_a_run_reads_back_equal_with_utc_times(store: RunStore) -> None:
    # 08:00 in New York summer time is 12:00 UTC
    start = datetime(2026, 9, 21, 8, 0, 0, 250_000, tzinfo=NEW_YORK_SUMMER)
    record = run_record(
        "r1",
        start,
        1.5,
        gpus=4,
        util=71.25,
        project="vision",
        tags=("bf16",),
        heartbeat_at=start + timedelta(hours=1),
    )
    store.upsert_run(record)
    got = store.get_run("r1")
    assert got == record
    assert got is not None
    assert got.started_at == datetime(2026, 9, 21, 12, 0, 0, 250_000, tzinfo=UTC)
    assert got.ended_at == datetime(2026, 9, 21, 13, 30, 0, 250_000, tzinfo=UTC)
    for value in (got.started_at, got.ended_at, got.heartbeat_at):
        assert value is not None and value.utcoffset() == timedelta(0)
    assert got.gpu_hours == 6.0  # 4 GPUs x 1.5 h
    assert store.get_run("nope") is None


def test_upserting_a_run_again_keeps_one_row_with_the_newer_values(store: RunStore) -> None:
    store.upsert_run(running("r1", 0, 5))
    final = run_record("r1", at(0), 2.0, util=33.0, cost_usd=7.7, verdict="below-target")
    store.upsert_run(final)
    assert [r.id for r in store.list_runs()] == ["r1"]
    got = store.get_run("r1")
    assert got == final
    assert got is not None
    assert (got.status, got.ended_at, got.heartbeat_at, got.cost_usd) == (
        "finished",
        at(120),
        None,
        7.7,
    )


def test_upsert_samples_is_idempotent_per_run_minute_and_gpu(store: RunStore) -> None:
    batch = [
        minute(run, m, gpu) for run in ("a", "b") for m in (0, 1) for gpu in ("GPU-a", "GPU-b")
    ]
    store.upsert_samples(batch)
    store.upsert_samples(batch)
    assert len(store.samples()) == 8
    assert sorted(store.samples(), key=lambda s: (s.run_id, s.minute, s.gpu)) == batch
    store.upsert_samples([minute("b", 1, "GPU-a", util=99.0)])
    rows = store.samples()
    assert len(rows) == 8  # the same key: updated, not added
    assert [s.util_pct for s in rows if s.util_pct != 50.0] == [99.0]
    assert [(s.run_id, s.minute, s.gpu) for s in rows if s.util_pct == 99.0] == [
        ("b", at(1), "GPU-a")
    ]


def test_samples_come_in_minute_order(store: RunStore) -> None:
    rows = [
        minute(run, m, gpu) for m in range(6) for run in ("x", "a") for gpu in ("GPU-b", "GPU-a")
    ]
    random.Random(7).shuffle(rows)
    store.upsert_samples(rows)
    got = store.samples()
    assert [(s.minute, s.run_id, s.gpu) for s in got] == [
        (at(m), run, gpu) for m in range(6) for run in ("a", "x") for gpu in ("GPU-a", "GPU-b")
    ]
    assert all(s.minute.utcoffset() == timedelta(0) for s in got)
    window = store.samples(run_ids=["x"], since=at(2), until=at(4))
    assert [(s.minute, s.gpu) for s in window] == [
        (at(2), "GPU-a"),
        (at(2), "GPU-b"),
        (at(3), "GPU-a"),
        (at(3), "GPU-b"),
    ]


def test_list_runs_keeps_the_runs_overlapping_the_window(store: RunStore) -> None:
    # the window is [60, 120) minutes; a run overlaps when start < 120 and (no end or end > 60)
    for run_id, start_min, hours in [
        ("before", 0, 0.5),
        ("ends-at-since", 0, 1.0),
        ("across-since", 30, 1.0),
        ("inside", 70, 0.25),
        ("across-until", 110, 1.0),
        ("starts-at-until", 120, 1.0),
        ("after", 200, 1.0),
    ]:
        store.upsert_run(run_record(run_id, at(start_min), hours))
    store.upsert_run(running("still-running", -600, None))
    got = [r.id for r in store.list_runs(since=at(60), until=at(120))]
    assert got == ["still-running", "across-since", "inside", "across-until"]
    assert [r.id for r in store.list_runs(until=at(30))] == [
        "still-running",
        "before",
        "ends-at-since",
    ]
    assert len(store.list_runs()) == 8


def test_mark_crashed_flips_only_stale_running_runs(store: RunStore) -> None:
    now = at(60)  # stale: last seen more than 10 min (600 s) before now
    store.upsert_run(running("stale", 0, 45))
    store.upsert_run(running("never-beat", 0, None))
    store.upsert_run(running("fresh", 0, 55))
    store.upsert_run(run_record("finished", at(0), 0.5))
    assert store.mark_crashed(now=now, stale_after_s=600) == ["never-beat", "stale"]
    status = {r.id: (r.status, r.ended_at) for r in store.list_runs()}
    assert status == {
        "stale": ("crashed", at(45)),
        "never-beat": ("crashed", at(0)),
        "fresh": ("running", None),
        "finished": ("finished", at(30)),
    }
    assert store.mark_crashed(now=now, stale_after_s=600) == []


NAIVE = datetime(2026, 9, 21, 12, 0)
NAIVE_CALLS: dict[str, Callable[[RunStore], object]] = {
    "upsert_run": lambda s: s.upsert_run(RunRecord(id="n", name="n", started_at=NAIVE)),
    "upsert_samples": lambda s: s.upsert_samples([MinuteSample(run_id="n", minute=NAIVE, gpu="g")]),
    "list_runs": lambda s: s.list_runs(since=NAIVE),
    "samples": lambda s: s.samples(until=NAIVE),
    "mark_crashed": lambda s: s.mark_crashed(now=NAIVE),
}


@pytest.mark.parametrize("call", list(NAIVE_CALLS))
def test_a_naive_datetime_is_refused(store: RunStore, call: str) -> None:
    with pytest.raises(ValueError, match="naive"):
        NAIVE_CALLS[call](store)
    assert store.list_runs() == [] and store.samples() == []  # nothing was written
