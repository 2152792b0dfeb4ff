"""Issue 10: one spool per store. Records spooled while store A was down go to A, never to the
store B that the next run opens. Two real SQLite stores; A is unreachable while its directory
is a plain file, and reachable again once that file is gone."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fakes import T0, Clock

from tracker import track
from tracker.record import MinuteSample, RunRecord
from tracker.session import Session
from tracker.store import RunStore, StoreError
from tracker.store.spool import Spool, store_identity

START = datetime.fromtimestamp(T0, UTC)


class Stores:
    """Store A (down until :meth:`bring_a_up`) and store B (up), both SQLite under ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.blocker = tmp / "a"
        self.blocker.write_text("not a directory")
        self.a = f"sqlite:///{self.blocker}/runs.db"
        self.b = f"sqlite:///{tmp}/b/runs.db"

    def bring_a_up(self) -> None:
        self.blocker.unlink()


def run_once(url: str, name: str, minutes: int = 2) -> Session:
    clock = Clock()
    with track(
        name=name,
        backend="simulated:healthy@H100",
        store=url,
        clock=clock,
        threaded=False,
        log_to_python=False,
    ) as run:
        for _ in range(minutes * 60):
            clock.t += 1.0
            run.sampler.sample()  # type: ignore[union-attr]
    return run


def runs_in(url: str) -> dict[str, RunRecord]:
    with RunStore(url) as store:
        return {r.id: r for r in store.list_runs()}


def test_a_run_spooled_for_a_down_store_never_lands_in_another(tmp_path: Path) -> None:
    stores = Stores(tmp_path)
    with pytest.raises(StoreError):
        RunStore(stores.a)
    first = run_once(stores.a, "while-a-was-down")
    assert first.record is not None and first.record.status == "finished"
    # A's spool holds 5 ops: the start; minute 1's samples and heartbeat; minute 2's samples
    # (closed by the end, so no heartbeat of its own); the end
    assert Spool.for_store(stores.a).pending() == 5
    assert Spool.for_store(stores.b).pending() == 0

    second = run_once(stores.b, "on-b")  # B's writer flushes B's spool: nothing of A's
    assert set(runs_in(stores.b)) == {second.id}
    assert Spool.for_store(stores.a).pending() == 5

    stores.bring_a_up()
    third = run_once(stores.a, "a-is-back")  # A's writer sends A's spool first
    in_a = runs_in(stores.a)
    assert set(in_a) == {first.id, third.id}
    assert in_a[first.id] == first.record
    with RunStore(stores.a) as store:
        assert len(store.samples(run_ids=[first.id])) == 2
    assert Spool().pending() == 0
    assert set(runs_in(stores.b)) == {second.id}


def record(run_id: str, status: str = "finished") -> RunRecord:
    return RunRecord(
        id=run_id,
        name=run_id,
        started_at=START,
        status=status,
        ended_at=START + timedelta(hours=1) if status != "running" else None,
    )


def samples(run_id: str, minutes: int) -> list[MinuteSample]:
    return [
        MinuteSample(run_id=run_id, minute=START + timedelta(minutes=m), gpu="GPU-0", util_pct=50.0)
        for m in range(minutes)
    ]


def spool_run(spool: Spool, run_id: str) -> None:
    """Three ops: started, 3 minutes of samples, finished."""
    spool.append(run_id, "run", record(run_id, "running"))
    spool.append(run_id, "samples", samples(run_id, 3))
    spool.append(run_id, "run", record(run_id))


def test_flush_all_sends_each_store_its_own_and_keeps_what_cannot_go(tmp_path: Path) -> None:
    """A's run (3 ops) waits while A is down; B takes its own run (3 ops) and the 3 ops that an
    earlier version spooled without a store (B is the configured store)."""
    stores = Stores(tmp_path)
    root = tmp_path / "spool"
    spool_run(Spool(root), "legacy")  # no store: today's files, at the top of the spool
    spool_run(Spool(root, store_url=stores.a), "run-a")
    spool_run(Spool(root, store_url=stores.b), "run-b")
    assert Spool(root).pending() == 9

    results = Spool(root).flush_all(RunStore, default_url=stores.b)
    assert [(r.url, r.sent, r.left) for r in results] == [
        (store_identity(stores.b)[1], 6, 0),
        (store_identity(stores.a)[1], 0, 3),
    ]
    error = results[1].error
    assert error is not None and "cannot create its directory" in error
    assert set(runs_in(stores.b)) == {"legacy", "run-b"}

    stores.bring_a_up()
    (again,) = Spool(root).flush_all(RunStore, default_url=stores.b)
    assert (again.url, again.sent, again.left, again.error) == (
        store_identity(stores.a)[1],
        3,
        0,
        None,
    )
    assert runs_in(stores.a) == {"run-a": record("run-a")}
    with RunStore(stores.a) as store:
        assert len(store.samples(run_ids=["run-a"])) == 3
    assert Spool(root).pending() == 0
    assert Spool(root).flush_all(RunStore, default_url=stores.b) == []


def test_an_unbound_flush_sends_only_the_stores_own_ops(tmp_path: Path) -> None:
    """What ``gpu-kpi sync --store B`` calls today (``Spool().flush(store)``): B's ops and the
    ops without a store, never A's."""
    stores = Stores(tmp_path)
    root = tmp_path / "spool"
    spool_run(Spool(root, store_url=stores.a), "run-a")
    spool_run(Spool(root, store_url=stores.b), "run-b")
    with RunStore(stores.b) as store:
        assert Spool(root).flush(store) == 3
    assert set(runs_in(stores.b)) == {"run-b"}
    assert Spool(root).has_pending("run-a") and not Spool(root).has_pending("run-b")


def test_a_bound_spool_can_be_sent_to_another_store_on_purpose(tmp_path: Path) -> None:
    """A store that is gone for good: its spool is flushed into B explicitly."""
    stores = Stores(tmp_path)
    root = tmp_path / "spool"
    spool_run(Spool(root, store_url=stores.a), "run-a")
    with RunStore(stores.b) as store:
        assert Spool(root, store_url=stores.a).flush(store) == 3
    assert runs_in(stores.b) == {"run-a": record("run-a")}


def test_ops_spooled_without_a_store_go_to_the_store_being_opened(tmp_path: Path) -> None:
    """Spool files written by the earlier code (no store key) are sent, as that code did, by
    the next run's writer into its store."""
    stores = Stores(tmp_path)
    spool_run(Spool(), "from-an-older-version")  # the default spool directory, no store
    run = run_once(stores.b, "next-run", minutes=0)
    assert set(runs_in(stores.b)) == {"from-an-older-version", run.id}
    assert Spool().pending() == 0


class Recorder:
    """A store double that keeps what it is sent."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.runs: list[RunRecord] = []
        self.closed = False

    def upsert_run(self, record: RunRecord) -> None:
        self.runs.append(record)

    def upsert_samples(self, rows: Sequence[MinuteSample]) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_the_spool_keeps_no_password_and_sync_reconnects_with_the_configured_one(
    tmp_path: Path,
) -> None:
    root = tmp_path / "spool"
    configured = "postgresql://kpi:hunter2@db.internal/gpu_kpi"
    other = "postgresql://kpi:other-secret@db2.internal/gpu_kpi"
    spool_run(Spool(root, store_url=configured), "run-1")
    spool_run(Spool(root, store_url=other), "run-2")
    on_disk = [p.read_bytes() for p in root.rglob("*") if p.is_file()]
    assert on_disk and not any(b"hunter2" in d or b"other-secret" in d for d in on_disk)
    stored_urls = {json.loads(p.read_text())["url"] for p in root.rglob("store.json")}
    assert stored_urls == {
        "postgresql+psycopg://kpi@db.internal/gpu_kpi",
        "postgresql+psycopg://kpi@db2.internal/gpu_kpi",
    }

    opened: list[Recorder] = []

    def open_store(url: str) -> Recorder:
        opened.append(Recorder(url))
        return opened[-1]

    results = Spool(root).flush_all(open_store, default_url=configured)
    # the configured store with its password; the other without (PGPASSWORD, ~/.pgpass)
    assert [s.url for s in opened] == [configured, "postgresql+psycopg://kpi@db2.internal/gpu_kpi"]
    assert [[r.id for r in s.runs] for s in opened] == [["run-1"] * 2, ["run-2"] * 2]
    assert all(s.closed for s in opened)
    assert [(r.sent, r.left) for r in results] == [(3, 0), (3, 0)]
    assert all("hunter2" not in r.url and "other-secret" not in r.url for r in results)


def test_every_spelling_of_a_store_has_one_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, plain = store_identity("postgres://kpi:hunter2@db.internal:5432/gpu_kpi")
    assert plain == "postgresql+psycopg://kpi@db.internal:5432/gpu_kpi"
    # RunStore.url shows the password masked; the key is the same
    assert store_identity("postgresql+psycopg://kpi:***@db.internal:5432/gpu_kpi")[0] == key
    assert store_identity("postgresql://kpi@db.internal:5432/gpu_kpi?password=x")[0] == key
    assert store_identity("postgresql://kpi@db.internal:5432/other")[0] != key
    assert len(key) == 32 and int(key, 16) >= 0
    monkeypatch.chdir(tmp_path)
    assert store_identity("sqlite:///runs.db") == store_identity(f"sqlite:///{tmp_path}/runs.db")
    # not a URL a store can open: keyed by its text, the password masked
    assert store_identity("mysql://u:pw@h/db")[1] == "mysql://u:***@h/db"


def test_a_run_on_the_default_store_uses_the_default_stores_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stores = Stores(tmp_path)
    monkeypatch.setenv("GPU_KPI_STORE", stores.a)  # the store= argument left out
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        run = run_once(None, "default", minutes=0)  # type: ignore[arg-type]
    assert Spool.for_store(None).has_pending(run.id)
    assert Spool.for_store(stores.a).has_pending(run.id)
    assert not Spool.for_store(stores.b).has_pending(run.id)
    assert sum("run store unavailable" in m for m in caplog.messages) == 1
