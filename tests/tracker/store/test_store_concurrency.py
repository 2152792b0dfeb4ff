"""Many training processes writing to one run store at once, as on a shared node."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reports.data.scans import SampleScans
from tracker.record import MinuteSample, RunRecord
from tracker.store import SCHEMA_VERSION, RunStore

PROCESSES = 16
RUNS_PER_PROCESS = 5
MINUTES_PER_RUN = 60
BATCH = 10
T0 = datetime(2024, 5, 6, 9, 0, tzinfo=UTC)


def _write_runs(url: str, worker: int, barrier: Any) -> None:
    """One training process: its runs' start, minute samples in batches, and end."""
    barrier.wait(60)  # every process opens the (new, empty) store at the same moment
    with RunStore(url) as store:
        for r in range(RUNS_PER_PROCESS):
            run_id = f"w{worker:02d}-r{r}"
            started = T0 + timedelta(hours=r)
            record = RunRecord(
                id=run_id,
                name=run_id,
                host=f"node-{worker}",
                started_at=started,
                heartbeat_at=started,
                gpu_count=1,
            )
            store.upsert_run(record)
            for b in range(0, MINUTES_PER_RUN, BATCH):
                store.upsert_samples(
                    [
                        MinuteSample(
                            run_id=run_id,
                            minute=started + timedelta(minutes=m),
                            gpu="GPU-0",
                            util_pct=float(m),
                        )
                        for m in range(b, b + BATCH)
                    ]
                )
            ended = started + timedelta(minutes=MINUTES_PER_RUN)
            store.upsert_run(record.replace(status="finished", ended_at=ended, heartbeat_at=ended))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sixteen_processes_write_at_once(store_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    workers = [
        ctx.Process(target=_write_runs, args=(store_url, n, barrier)) for n in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(90)
    assert [w.exitcode for w in workers] == [0] * PROCESSES

    with RunStore(store_url) as store:
        runs = store.list_runs()
        assert len(runs) == PROCESSES * RUNS_PER_PROCESS
        assert {r.status for r in runs} == {"finished"}
        assert all(r.ended_at == r.started_at + timedelta(minutes=60) for r in runs)
        samples = store.samples()
        assert len(samples) == PROCESSES * RUNS_PER_PROCESS * MINUTES_PER_RUN
        assert sum(s.util_pct or 0 for s in samples) == (
            PROCESSES * RUNS_PER_PROCESS * sum(range(MINUTES_PER_RUN))
        )
        assert store.schema_version() == SCHEMA_VERSION
        # every process kept its runs' rollups: one row per (run, GPU, hour), all minutes in
        totals = SampleScans(store).rollup_totals(
            value="util_pct", hour_edges=[], since_hour=0, until_hour=10**9
        )
        assert sum(t.minutes for t in totals) == len(samples)
        assert sum(t.value_s for t in totals) == pytest.approx(
            60.0 * PROCESSES * RUNS_PER_PROCESS * sum(range(MINUTES_PER_RUN))
        )
