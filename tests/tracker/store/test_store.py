"""Contract of the run store (on SQLite and PostgreSQL), the spool and the store writer."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tracker.record import MinuteSample, RunRecord
from tracker.store import SCHEMA_VERSION, RunStore, StoreError
from tracker.store.schema import RUN_COLUMNS_SINCE
from tracker.store.spool import Spool
from tracker.store.writer import StoreWriter

T0 = datetime(2024, 5, 6, 9, 0, tzinfo=UTC)
CEST = timezone(timedelta(hours=2))


def full_run(**changes: object) -> RunRecord:
    """A run with every field set to something other than its default."""
    record = RunRecord(
        id="run-1",
        name="llama-ft",
        project="vision",
        team="research",
        user="ada",
        host="node-7",
        tags=("ablation", "bf16"),
        framework="lightning",
        started_at=datetime(2024, 5, 6, 11, 0, 0, 123456, tzinfo=CEST),
        ended_at=T0 + timedelta(hours=2, microseconds=7),
        heartbeat_at=T0 + timedelta(hours=1, minutes=59),
        status="finished",
        gpu_source="simulated",
        gpu_model="H100",
        gpu_count=8,
        nodes=2,
        price_per_gpu_hour=2.99,
        price_source="lambda 2024-05",
        gpu_hours=16.000001,
        util_pct=87.25,
        sm_active_pct=61.5,
        mem_peak_gib=71.3,
        mem_total_gib=79.6,
        energy_kwh=9.87654321,
        steps=12_000,
        samples=3_072_000,
        tokens=6_291_456_000,
        samples_per_s=426.7,
        tokens_per_s=873_813.3,
        mfu=0.4123456789,
        data_wait_pct=3.2,
        cost_usd=47.84,
        waste_usd=6.1,
        idle_usd=0.5,
        throttled_gpu_hours=1.25,
        throttle_source="counter",
        sm_active_source="sampled every 1 s",
        resumed_from_step=4_000,
        mig_profile="3g.40gb",
        gpu_split="measured",
        verdict="healthy",
        advice="nothing to do",
        source="tensorboard",
        links={"wandb": "https://wandb.ai/x/y/runs/1", "tensorboard": "/logs/run-1"},
    )
    return record.replace(**changes)


def sample(run_id: str, minute: int, gpu: str = "GPU-a", **changes: object) -> MinuteSample:
    row = MinuteSample(
        run_id=run_id, minute=T0 + timedelta(minutes=minute), gpu=gpu, util_pct=50.0 + minute
    )
    return dataclasses.replace(row, **changes)


def _engine(url: str) -> sa.Engine:
    parsed = sa.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return sa.create_engine(parsed)


@pytest.fixture
def store(store_url: str) -> Iterator[RunStore]:
    with RunStore(store_url) as s:
        yield s


# -- the store contract --------------------------------------------------------------------------


def test_full_record_round_trips(store: RunStore) -> None:
    record = full_run()
    store.upsert_run(record)
    got = store.get_run("run-1")
    assert got == record
    assert got is not None
    for value in (got.started_at, got.ended_at, got.heartbeat_at):
        assert value is not None
        assert value.tzinfo is not None
        assert value.utcoffset() == timedelta(0)
    assert got.started_at == datetime(2024, 5, 6, 9, 0, 0, 123456, tzinfo=UTC)
    assert got.tags == ("ablation", "bf16")
    assert got.links == {"wandb": "https://wandb.ai/x/y/runs/1", "tensorboard": "/logs/run-1"}


def test_unknown_figures_stay_none(store: RunStore) -> None:
    store.upsert_run(RunRecord(id="bare", name="bare", started_at=T0))
    got = store.get_run("bare")
    assert got is not None
    assert got.util_pct is None
    assert got.cost_usd is None
    assert got.samples is None
    assert got.ended_at is None
    assert got.tags == ()
    assert got.links == {}
    assert store.get_run("missing") is None


def test_naive_datetime_is_refused(store: RunStore) -> None:
    with pytest.raises(ValueError, match="naive"):
        store.upsert_run(RunRecord(id="n", name="n", started_at=datetime(2024, 5, 6, 9)))


def test_upsert_run_replaces(store: RunStore) -> None:
    store.upsert_run(full_run(status="running", ended_at=None, util_pct=None))
    final = full_run(status="failed", util_pct=12.5, tags=("retry",), links={})
    store.upsert_run(final)
    assert store.get_run("run-1") == final
    assert len(store.list_runs()) == 1


def test_samples_upsert_updates_same_key(store: RunStore) -> None:
    store.upsert_samples([sample("r", m, gpu) for m in (0, 1) for gpu in ("GPU-a", "GPU-b")])
    store.upsert_samples([sample("r", 1, "GPU-b", util_pct=99.0, power_w=None, covered_s=30.0)])
    rows = store.samples()
    assert len(rows) == 4
    changed = [s for s in rows if s.minute == T0 + timedelta(minutes=1) and s.gpu == "GPU-b"]
    assert changed == [sample("r", 1, "GPU-b", util_pct=99.0, covered_s=30.0)]
    assert changed[0].power_w is None
    assert [s.util_pct for s in rows if s.gpu == "GPU-a"] == [50.0, 51.0]
    assert rows[0].minute.tzinfo is not None and rows[0].minute.utcoffset() == timedelta(0)


def test_duplicate_keys_in_one_batch_keep_the_last(store: RunStore) -> None:
    store.upsert_samples([sample("r", 0, util_pct=1.0), sample("r", 0, util_pct=2.0)])
    assert [s.util_pct for s in store.samples()] == [2.0]


def test_list_runs_returns_runs_overlapping_the_window(store: RunStore) -> None:
    since, until = T0 + timedelta(hours=1), T0 + timedelta(hours=2)

    def run(run_id: str, start_min: int, end_min: int | None, **kw: object) -> RunRecord:
        start = T0 + timedelta(minutes=start_min)
        end = None if end_min is None else T0 + timedelta(minutes=end_min)
        status = "running" if end is None else "finished"
        fields = {"status": status, "project": "vision", "team": "research", **kw}
        return full_run(id=run_id, started_at=start, ended_at=end, **fields)

    for record in (
        run("before", 0, 59),
        run("ends-at-since", 10, 60),
        run("crossing-since", 30, 90, team="infra"),
        run("inside", 70, 80, status="crashed"),
        run("still-running", -24 * 60, None, project="nlp"),
        run("starts-at-until", 120, 150),
        run("after", 130, None),
    ):
        store.upsert_run(record)

    def ids(**kw: object) -> list[str]:
        return [r.id for r in store.list_runs(since=since, until=until, **kw)]  # type: ignore[arg-type]

    assert ids() == ["still-running", "crossing-since", "inside"]
    assert ids(status="running") == ["still-running"]
    assert ids(status=["finished", "crashed"]) == ["crossing-since", "inside"]
    assert ids(project="vision") == ["crossing-since", "inside"]
    assert ids(team="infra") == ["crossing-since"]
    assert [r.id for r in store.list_runs(since=since)] == [
        "still-running",
        "crossing-since",
        "inside",
        "starts-at-until",
        "after",
    ]
    assert len(store.list_runs()) == 7


def test_samples_time_and_run_filter(store: RunStore) -> None:
    store.upsert_samples([sample(run_id, m) for run_id in ("a", "b") for m in range(5)])
    window = store.samples(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3))
    assert [(s.run_id, s.minute.minute) for s in window] == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    only_a = store.samples(run_ids=["a"], since=T0 + timedelta(minutes=3))
    assert [(s.run_id, s.minute.minute) for s in only_a] == [("a", 3), ("a", 4)]
    assert store.samples(run_ids=[]) == []


def test_mark_crashed_ends_stale_running_runs_at_their_heartbeat(store: RunStore) -> None:
    now = T0 + timedelta(hours=3)
    stale_beat = now - timedelta(minutes=11)
    records = [
        full_run(id="stale", status="running", ended_at=None, heartbeat_at=stale_beat),
        full_run(
            id="fresh", status="running", ended_at=None, heartbeat_at=now - timedelta(minutes=9)
        ),
        full_run(id="done", status="finished", heartbeat_at=stale_beat),
        full_run(id="never-beat", status="running", ended_at=None, heartbeat_at=None),
    ]
    for record in records:
        store.upsert_run(record)

    assert store.mark_crashed(now=now, stale_after_s=600) == ["never-beat", "stale"]

    stale = store.get_run("stale")
    assert stale is not None
    assert (stale.status, stale.ended_at) == ("crashed", stale_beat)
    never = store.get_run("never-beat")
    assert never is not None
    assert (never.status, never.ended_at) == ("crashed", records[3].started_at)
    assert store.get_run("fresh") == records[1]
    assert store.get_run("done") == records[2]
    assert store.mark_crashed(now=now, stale_after_s=600) == []


def test_schema_is_created_once_at_version_5(store_url: str) -> None:
    with RunStore(store_url) as first:
        first.upsert_run(full_run())
        assert first.schema_version() == first.version == 7
    with RunStore(store_url) as again:
        assert again.get_run("run-1") == full_run()
    engine = _engine(store_url)
    try:
        inspector = sa.inspect(engine)
        assert {"runs", "samples", "meta", "rollups"} <= set(inspector.get_table_names())
        assert inspector.get_pk_constraint("rollups")["constrained_columns"] == [
            "run_id",
            "gpu",
            "hour",
        ]
        indexes = {ix["name"] for t in ("runs", "samples") for ix in inspector.get_indexes(t)}
        assert {"ix_runs_started_at", "ix_runs_status", "ix_samples_minute"} <= indexes
        assert inspector.get_pk_constraint("samples")["constrained_columns"] == [
            "run_id",
            "minute",
            "gpu",
        ]
    finally:
        engine.dispose()


@pytest.mark.parametrize("version", [4, 5])
def test_an_older_store_is_read_as_it_is_and_gains_the_new_run_columns_when_written(
    store_url: str, version: int
) -> None:
    newer = [name for name, since in RUN_COLUMNS_SINCE.items() if since > version]
    with RunStore(store_url) as s:
        s.upsert_run(full_run())

        def as_older(conn: sa.Connection) -> None:
            for name in newer:
                conn.exec_driver_sql(f"ALTER TABLE runs DROP COLUMN {name}")
            conn.exec_driver_sql(
                f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'"
            )

        s.transaction(as_older, write=True)
    old = full_run(**dict.fromkeys(newer))
    with RunStore(store_url, create=False) as reader:  # a reader changes nothing
        assert reader.version == version
        assert reader.get_run("run-1") == old
        assert reader.list_runs() == [old]
    with RunStore(store_url) as writer:
        assert writer.version == 7
        assert writer.get_run("run-1") == old  # tracked before: not measured, never 0
        writer.upsert_run(full_run(id="run-2"))
        assert writer.get_run("run-2") == full_run(id="run-2")


def test_newer_schema_is_refused(store_url: str) -> None:
    RunStore(store_url).close()
    engine = _engine(store_url)
    try:
        with engine.begin() as conn:
            newer = SCHEMA_VERSION + 1  # a store a later gpu-kpi wrote
            conn.execute(
                sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'"),
                {"v": str(newer)},
            )
    finally:
        engine.dispose()
    with pytest.raises(StoreError, match=f"schema version {newer}"):
        RunStore(store_url)


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql://x:y@127.0.0.1:1/db", ":y@"),
        ("postgres://ada:s3cret-pw@127.0.0.1:1/db", "s3cret-pw"),
        ("sqlite:////proc/gpu-kpi-nowhere/runs.db", None),
        ("mysql://ada:s3cret-pw@127.0.0.1/db", "s3cret-pw"),
    ],
)
def test_unreachable_store_raises_one_line_store_error(url: str, secret: str | None) -> None:
    # Each fails on its first try, before any timeout could run out (a refused port, a path that
    # cannot be made, a dialect without a driver): how long it takes says only how busy the
    # machine is, so it is not asserted.
    with pytest.raises(StoreError) as info:
        RunStore(url, connect_timeout_s=2)
    message = str(info.value)
    assert "\n" not in message
    if secret is not None:
        assert secret not in message
        assert "***@" in message
    else:
        assert "/proc/gpu-kpi-nowhere" in message


# -- the spool and the writer --------------------------------------------------------------------


class DownStore:
    """A store that is unreachable for every write."""

    def __init__(self) -> None:
        self.calls = 0

    def upsert_run(self, record: RunRecord) -> None:
        self.calls += 1
        raise StoreError("run store postgresql://ada:***@db/x: connection refused")

    def upsert_samples(self, rows: Sequence[MinuteSample]) -> None:
        self.calls += 1
        raise StoreError("run store postgresql://ada:***@db/x: connection refused")


def spool_one_run(spool: Spool, run_id: str, batches: int = 2) -> RunRecord:
    """Append a run's life to the spool: started, ``batches`` x 10 samples, finished."""
    started = full_run(id=run_id, status="running", ended_at=None)
    spool.append(run_id, "run", started)
    for b in range(batches):
        spool.append(run_id, "samples", [sample(run_id, b * 10 + m) for m in range(10)])
    finished = started.replace(status="finished", ended_at=T0 + timedelta(hours=2))
    spool.append(run_id, "run", finished)
    return finished


def test_spool_keeps_ops_until_a_store_takes_them(store_url: str, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    assert spool.pending() == 0
    finished_a = spool_one_run(spool, "a/1")
    finished_b = spool_one_run(spool, "b.2", batches=1)
    assert spool.pending() == 7

    down = DownStore()
    with pytest.raises(StoreError):
        spool.flush(down)
    assert down.calls == 1
    assert spool.pending() == 7

    with RunStore(store_url) as store:
        assert spool.flush(store) == 7
        assert spool.pending() == 0
        assert not spool.has_pending()
        assert store.get_run("a/1") == finished_a
        assert store.get_run("b.2") == finished_b
        assert len(store.samples(run_ids=["a/1"])) == 20
        assert store.samples(run_ids=["b.2"]) == [sample("b.2", m) for m in range(10)]
    assert [p.name for p in (tmp_path / "spool").iterdir() if not p.name.startswith(".")] == []


def test_an_op_the_store_refuses_is_set_aside_and_the_rest_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path / "spool")
    naive = full_run(id="bad", started_at=datetime(2024, 5, 6, 9))  # no timezone: refused
    spool.append("bad", "run", naive)
    spool.append("bad", "samples", [sample("bad", 0)])
    finished = spool_one_run(spool, "good")
    with (spool.directory / "good.jsonl").open("ab") as f:
        f.write(b'{"op":"run","run_id":"good","pay')  # cut short by a crash

    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        assert spool.flush(store) == 5
        assert store.get_run("bad") is None
        assert [s.run_id for s in store.samples(run_ids=["bad"])] == ["bad"]
        assert store.get_run("good") == finished
    assert spool.pending() == 0
    assert len((spool.directory / ".rejected.jsonl").read_text().splitlines()) == 2
    assert len(_warnings(caplog)) == 2


class LoggingSink:
    """Records every op it receives, one line per op, in a file of its own process."""

    def __init__(self, path: Path, die_at_call: int | None = None) -> None:
        self.path = path
        self.die_at_call = die_at_call
        self.calls = 0

    def _log(self, line: str) -> None:
        self.calls += 1
        if self.calls == self.die_at_call:
            os._exit(3)  # a crash mid-flush, no cleanup
        with self.path.open("a") as f:
            f.write(line + "\n")
        time.sleep(0.002)

    def upsert_run(self, record: RunRecord) -> None:
        self._log(f"run {record.id} {record.status}")

    def upsert_samples(self, rows: Sequence[MinuteSample]) -> None:
        self._log(f"samples {rows[0].run_id} {rows[0].minute.minute}")


def _flush_in_child(
    spool_dir: Path, log: Path, barrier: Any, results: Any, die_at_call: int | None
) -> None:
    if barrier is not None:
        barrier.wait(30)
    results.put(Spool(spool_dir).flush(LoggingSink(log, die_at_call)))


def test_two_flushers_at_once_send_each_op_once(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    for i in range(25):
        spool_one_run(spool, f"run-{i}")
    assert spool.pending() == 100

    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    children = [
        ctx.Process(
            target=_flush_in_child,
            args=(spool.directory, tmp_path / f"calls-{n}.log", barrier, results, None),
        )
        for n in range(2)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [child.exitcode for child in children] == [0, 0]
    assert results.get(timeout=5) + results.get(timeout=5) == 100

    lines = [
        line
        for n in range(2)
        if (tmp_path / f"calls-{n}.log").exists()
        for line in (tmp_path / f"calls-{n}.log").read_text().splitlines()
    ]
    counts = collections.Counter(lines)
    assert len(lines) == 100
    assert set(counts.values()) == {1}
    assert spool.pending() == 0


def test_a_dead_flushers_claim_is_sent_by_the_next_flush(store_url: str, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    finished = spool_one_run(spool, "r")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(
        target=_flush_in_child, args=(spool.directory, tmp_path / "calls.log", None, results, 2)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 3
    assert (tmp_path / "calls.log").read_text() == "run r running\n"
    assert len(list(spool.directory.glob("*.claimed"))) == 1
    assert spool.pending() == 4

    with RunStore(store_url) as store:
        assert spool.flush(store) == 4
        assert store.get_run("r") == finished
        assert len(store.samples()) == 20
    assert spool.pending() == 0


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gpu_kpi" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("failure", ["open", "write"])
def test_writer_with_a_failing_store_spools_everything_and_warns_once(
    failure: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    opened = []

    def factory() -> DownStore:
        opened.append(1)
        if failure == "open":
            raise StoreError("run store postgresql://ada:***@db/x: connection refused")
        return DownStore()

    spool = Spool(tmp_path / "spool")
    # Retry at every op, so that every op meets the failure.
    writer = StoreWriter(factory, spool=spool, retry_after_s=0.0)
    record = full_run(status="running", ended_at=None)
    writer.submit_run(record)
    for b in range(3):
        writer.submit_samples([sample(record.id, b * 10 + m) for m in range(10)])
    writer.submit_run(record.replace(status="finished"))
    writer.close()

    assert spool.pending() == 5
    assert len(opened) == 5
    assert len(_warnings(caplog)) == 1
    assert "connection refused" in _warnings(caplog)[0].getMessage()


def test_writer_sends_the_spool_first_when_the_store_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    attempts = []

    def factory() -> RunStore:
        attempts.append(1)
        if len(attempts) == 1:
            raise StoreError("run store: down")
        return RunStore(url)

    spool = Spool(tmp_path / "spool")
    # Each reading of the clock is 100 s later: the retry delay has passed by the next op.
    clock = itertools.count(0.0, 100.0).__next__
    writer = StoreWriter(factory, spool=spool, retry_after_s=60.0, clock=clock)
    record = full_run(status="running", ended_at=None)
    writer.submit_run(record)
    writer.submit_samples([sample(record.id, m) for m in range(10)])
    writer.submit_run(record.replace(status="finished", ended_at=T0 + timedelta(hours=1)))
    writer.close()

    assert len(attempts) == 2
    assert spool.pending() == 0
    with RunStore(url) as store:
        got = store.get_run(record.id)
        assert got is not None and got.status == "finished"
        assert len(store.samples()) == 10
    assert len(_warnings(caplog)) == 1


def test_writer_with_a_working_store_writes_everything(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path / "spool")
    writer = StoreWriter(store_url, spool=spool)
    record = full_run(status="running", ended_at=None)
    writer.submit_run(record)
    for b in range(3):
        writer.submit_samples(
            [sample(record.id, b * 10 + m, gpu) for m in range(10) for gpu in ("GPU-a", "GPU-b")]
        )
    finished = record.replace(status="finished")
    writer.submit_run(finished)
    # no timing: a close that ran out of its 30 s would have spooled and warned (below)
    writer.close(timeout_s=30)

    with RunStore(store_url) as store:
        assert store.get_run(record.id) == finished
        assert len(store.samples(run_ids=[record.id])) == 60
    assert spool.pending() == 0
    assert _warnings(caplog) == []


def test_writer_close_spools_what_the_store_did_not_take_in_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    class StuckStore(DownStore):
        def upsert_run(self, record: RunRecord) -> None:
            release.wait(30)

    spool = Spool(tmp_path / "spool")
    writer = StoreWriter(StuckStore, spool=spool)
    record = full_run(status="running", ended_at=None)
    writer.submit_run(record)
    writer.submit_samples([sample(record.id, m) for m in range(10)])
    writer.submit_run(record.replace(status="finished"))
    writer.close(timeout_s=0.3)
    # close() gave up on the store rather than wait for it: the store still holds the writer
    # (for up to 30 s), and what it never took is in the spool
    assert writer._thread.is_alive() and not release.is_set()
    assert spool.pending() == 3

    release.set()  # the store answers late: the writer must not send anything any more
    writer._thread.join(5)
    assert not writer._thread.is_alive()
    writer.submit_run(record)  # after close: straight to the spool
    assert spool.pending() == 4
    assert len(_warnings(caplog)) == 1
