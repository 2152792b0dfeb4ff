"""The session and the run store together: start, heartbeats, summary, SIGKILL, spool."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from clirun import gpu_kpi
from fakes import T0, Clock

from tracker import track
from tracker.store import RunStore
from tracker.store.spool import Spool

ROOT = Path(__file__).resolve().parents[2]


def test_run_and_its_minutes_reach_the_store(store_url: str) -> None:
    clock = Clock()
    with track(
        name="five-minutes",
        project="p",
        team="t",
        tags=("a", "b"),
        backend="simulated:input-bound@H100:2",
        store=store_url,
        clock=clock,
        threaded=False,
        log_to_python=False,
    ) as run:
        for _ in range(300):
            clock.t += 1.0
            run.sampler.sample()  # type: ignore[union-attr]
    with RunStore(store_url) as store:
        stored = store.get_run(run.id)
        rows = store.samples(run_ids=[run.id])
    assert stored == run.record
    assert stored is not None and stored.status == "finished" and stored.tags == ("a", "b")
    # 5 minutes x 2 GPUs; each minute of the 10 s input-bound cycle averages 60%
    assert len(rows) == 10
    assert {r.gpu for r in rows} == {g.uuid for g in run.gpus}
    assert all(r.covered_s == 60.0 and r.util_pct == pytest.approx(60.0) for r in rows)
    # per-minute energy adds up to the run's energy
    assert sum(r.energy_kwh or 0 for r in rows) == pytest.approx(stored.energy_kwh)
    assert rows[0].minute == datetime.fromtimestamp(T0, UTC)


KILLED_RUN = textwrap.dedent("""
    import sys, time
    from tracker import track
    from tracker.store import RunStore
    clock = [1_790_000_040.0]
    run = track(name="killed", backend="simulated:healthy@H100", store=sys.argv[1],
                clock=lambda: clock[0], threaded=False, log_to_python=False).start()
    for _ in range(150):            # 2.5 minutes: two full minutes close, two heartbeats
        clock[0] += 1.0
        run.sampler.sample()
    with RunStore(sys.argv[1]) as store:  # wait for the writer thread, then report
        for _ in range(200):
            if len(store.samples(run_ids=[run.id])) == 2:
                break
            time.sleep(0.05)
    print(run.id, flush=True)
    time.sleep(60)
""")


def test_sigkill_keeps_the_heartbeats_and_the_run_is_marked_crashed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    p = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert p.stdout is not None
    run_id = p.stdout.readline().strip()
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    assert run_id
    with RunStore(url) as store:
        r = store.get_run(run_id)
        assert r is not None and r.status == "running"
        # the reading at 2:01 closed the second minute and sent the heartbeat
        assert r.heartbeat_at == datetime.fromtimestamp(T0 + 121, UTC)
        assert r.gpu_hours == pytest.approx(121 / 3600)  # up to the last heartbeat
        assert len(store.samples(run_ids=[run_id])) == 2
        assert store.mark_crashed(now=r.heartbeat_at + timedelta(minutes=5)) == []
        assert store.mark_crashed(now=r.heartbeat_at + timedelta(minutes=11)) == [run_id]
        crashed = store.get_run(run_id)
    assert crashed is not None and crashed.status == "crashed"
    assert crashed.ended_at == r.heartbeat_at


def test_unreachable_store_spools_and_sync_to_another_store_leaves_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 10: a run spooled for store A is A's. ``gpu-kpi sync --store B`` must not write it
    into B; it stays in A's spool (sync exits non-zero: ops left). Sent on purpose, through A's
    spool, it arrives whole: 180 s make 7 ops (the start; minutes 1 and 2, samples and a
    heartbeat each; minute 3's samples, closed by the end; the end)."""
    clock = Clock()
    store_a = "postgresql://kpi:hunter2@127.0.0.1:1/runs"
    with (
        caplog.at_level(logging.WARNING, logger="gpu_kpi"),
        track(
            name="offline",
            backend="simulated:healthy",
            clock=clock,
            threaded=False,
            store=store_a,
            log_to_python=False,
        ) as run,
    ):
        for _ in range(180):
            clock.t += 1.0
            run.sampler.sample()  # type: ignore[union-attr]
    assert run.record is not None and run.record.status == "finished"
    warnings = [m for m in caplog.messages if "store" in m]
    assert len(warnings) == 1 and "hunter2" not in warnings[0]
    spool_a = Spool.for_store(store_a)
    assert spool_a.pending() == 7

    url = f"sqlite:///{tmp_path}/runs.db"
    p = gpu_kpi("sync", "--store", url)
    assert p.returncode == 1, p.stderr
    # one line per store: A could not be reached and keeps its 7 ops; its password never shows
    (line,) = p.stdout.splitlines()
    assert (
        line.startswith(
            "sent 0 spooled record(s) to postgresql+psycopg://kpi@127.0.0.1:1/runs; 7 left ("
        )
        and "hunter2" not in p.stdout + p.stderr
    )
    with RunStore(url) as store:
        assert store.get_run(run.id) is None
        assert spool_a.pending() == 7
        assert spool_a.flush(store) == 7
        assert store.get_run(run.id) == run.record
        assert len(store.samples(run_ids=[run.id])) == 3
    assert Spool().pending() == 0


def test_threaded_session_on_a_real_clock(tmp_path: Path) -> None:
    """The defaults: a real sampler thread and writer thread, a few real steps."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with track(
        name="real-clock",
        backend="simulated:healthy@L4",
        store=url,
        interval_s=0.02,
        warmup_steps=1,
        log_to_python=False,
    ) as run:
        for _ in range(20):
            run.data_ready()
            time.sleep(0.005)
            run.step(samples=2)
    with RunStore(url) as store:
        r = store.get_run(run.id)
    assert r is not None and r.status == "finished" and r.steps == 20 and r.samples == 40
    assert r.util_pct == pytest.approx(92.0)
    assert r.gpu_model == "L4" and r.cost_usd is not None and r.cost_usd > 0


def test_the_summary_says_a_run_went_nowhere_when_the_spool_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store is unreachable and the spool's folder cannot be made (its parent is a file).
    Before, the summary said "stored: run … in postgresql://…". Now it says the run is lost."""
    blocked = tmp_path / "data"
    blocked.write_text("a file where the data folder should be")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocked))
    clock = Clock()
    with track(
        name="lost",
        backend="simulated:healthy",
        clock=clock,
        threaded=False,
        store="postgresql://kpi:hunter2@127.0.0.1:1/runs",
        log_to_python=False,
    ) as run:
        for _ in range(90):
            clock.t += 1.0
            run.sampler.sample()  # type: ignore[union-attr]
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "stored:" in x]
    assert line.startswith("  stored: nowhere whole: the store was unreachable and the spool ")
    assert "could not be written (some of the run is lost) (run " in line
    assert "hunter2" not in line
