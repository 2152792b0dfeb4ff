"""The scheduler's jobs against the store's hourly rollups: the hours in which nothing depends
on the minute come from the rollups, the others' minutes are read around them, and every
job's figures are still those of the minute-by-minute oracle (``allocation_oracle``), on
SQLite and PostgreSQL, for a week, a week under way and a week on half hours (+05:30)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from allocation_oracle import job, oracle
from fakes import examples

from reports import gputime
from reports.data.allocations import (
    TABLE,
    Allocation,
    ensure_table,
    write_allocations,
)
from reports.gputime import week_allocations
from reports.kpi.allocations import AllocationJoin, JobLine, allocation_week
from reports.kpi.frames import SAMPLE_COLUMNS, SampleFrameBuilder
from tracker.cost import Thresholds
from tracker.record import MinuteSample
from tracker.store import RunStore

MON = datetime(2026, 11, 23, tzinfo=UTC)
HOUR = timedelta(hours=1)
Row = tuple[str, str, datetime, float, float | None]


def generated(seed: int) -> tuple[list[Allocation], list[dict[str, Any]], list[Row]]:
    """Jobs mostly on whole hours (some not), node logs mostly of whole hours (some minutes
    missing or half covered), runs by id with as many GPUs as their job or more, and pods of a
    workload whose DCGM runs are theirs."""
    rng = random.Random(seed)
    jobs: list[Allocation] = []
    runs: list[dict[str, Any]] = []
    rows: list[Row] = []

    def odd() -> timedelta:
        return timedelta(seconds=rng.choice((0, 0, 0, rng.randint(1, 3599))))

    for k in range(rng.randint(3, 10)):
        start = MON + (rng.randint(-1, 6)) * HOUR + odd()
        end = start + rng.randint(1, 4) * HOUR + odd()
        hosts = tuple(rng.sample(["n1", "n2"], rng.choice((1, 1, 2))))
        jobs.append(job(str(100 + k), rng.randint(1, 4), start, end, hosts))
    for h in ("n1", "n2"):
        run_id = f"smi-{h}"
        runs.append({"id": run_id, "host": h, "links": {}, "gpu_model": "A100-80GB"})
        for g in range(rng.randint(1, 4)):
            util: float | None = 0.0
            for i in range(-90, 12 * 60):
                if rng.random() < 0.03:
                    util = rng.choice((0.0, 1.0, 50.0, 95.0, None))
                if rng.random() < 0.995:
                    covered = 60.0 if rng.random() < 0.995 else 30.0
                    rows.append((run_id, f"{h}g{g}", MON + timedelta(minutes=i), covered, util))
    for r in range(rng.randint(1, 3)):  # tracked runs in a job, on as many GPUs or more
        target = rng.choice(jobs)
        run_id = f"t{r}"
        runs.append(
            {
                "id": run_id,
                "host": "n1",
                "links": {"slurm": f"c/{target.job_id}"},
                "gpu_model": "H100",
            }
        )
        # from the job's start minute, or a few minutes before it (those are no one's)
        first = target.start_at.replace(second=0) - timedelta(minutes=rng.choice((0, 0, 5)))
        # for the job's time, less, or more (after the job: no one's), each GPU
        # busy or idle: what no minute may exceed shows in the job's total
        minutes = int((target.until - first).total_seconds() // 60) + 1
        minutes = rng.choice((minutes, rng.randint(60, minutes), minutes + 30))
        for g in range(rng.randint(1, target.gpus + 1)):
            busy = rng.choice((0.0, 70.0))
            rows += [
                (
                    run_id,
                    f"{run_id}g{g}",
                    first + timedelta(minutes=i),
                    60.0,
                    busy or rng.choice((2.0, 70.0)),
                )
                for i in range(minutes)
            ]
    for k in range(rng.randint(0, 3)):  # pods of workload w0, its DCGM run on their node
        start = MON + rng.randint(0, 5) * HOUR + odd()
        jobs.append(
            job(
                f"uid-{k}",
                rng.randint(1, 2),
                start,
                start + rng.randint(1, 3) * HOUR,
                ("n2",),
                source="kubernetes",
                cluster="",
                shown_id=f"ns/pod-{k}",
                name="Job/w0",
                account="ns",
            )
        )
    if any(j.source == "kubernetes" for j in jobs):
        runs.append(
            {
                "id": "dcgm-w0",
                "host": "n2",
                "links": {"kubernetes_workload": "ns/Job/w0"},
                "gpu_model": "H100",
            }
        )
        rows += [
            ("dcgm-w0", "w0g0", MON + timedelta(minutes=i), 60.0, rng.choice((0.0, 80.0)))
            for i in range(10 * 60)
        ]
    for r in runs:
        r["started_at"] = None
    return jobs, runs, rows


def sm_of(minute: datetime, util: float | None) -> float | None:
    """A minute's SM activity: 40% of its utilization, none in every seventh minute."""
    return None if util is None or minute.minute % 7 == 0 else 0.4 * util


def minute_frame(rows: list[Row]) -> pd.DataFrame:
    """Every minute row as the store's reads give them, one frame for all the spans."""
    frames = SampleFrameBuilder(SAMPLE_COLUMNS)
    frames([(r, m.strftime("%Y-%m-%d %H:%M:%S"), g, c, u, sm_of(m, u)) for r, g, m, c, u in rows])
    return frames.frame()


def every_minute(
    jobs: list[Allocation],
    runs: list[dict[str, Any]],
    minutes: pd.DataFrame,
    since: datetime,
    until: datetime,
) -> tuple[JobLine, ...]:
    """The jobs' lines from every minute row (no rollups)."""
    week = allocation_week(
        jobs,
        runs,
        minutes.copy(),
        value="util_pct",
        since=since,
        until=until,
        thresholds=Thresholds(),
    )
    return week.jobs


SPANS = {
    "week": (MON, MON + timedelta(days=7)),
    "under way": (MON, MON + 7 * HOUR + timedelta(seconds=1234)),
    "half hours": (MON + timedelta(minutes=30), MON + timedelta(days=1, minutes=30)),
}


def test_rollup_hours_give_the_oracles_figures(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    answered: list[tuple[int, int]] = []
    use = AllocationJoin.use_rollups

    def spy(self: AllocationJoin, hourly: Any) -> Any:
        out = use(self, hourly)
        answered.append(self.hours_from_rollups)
        return out

    monkeypatch.setattr(AllocationJoin, "use_rollups", spy)
    t = Thresholds()
    for seed in range(examples(10)):  # seed 3 damages a rollup row: within the fast suite's 5
        jobs, runs, rows = generated(seed)
        with RunStore(store_url) as store:
            ensure_table(store)
            with store.engine.begin() as conn:  # each seed on an empty store
                for table in ("samples", "rollups", TABLE):
                    conn.execute(sa.text(f"DELETE FROM {table}"))
            store.upsert_samples(
                [
                    MinuteSample(
                        run_id=r,
                        gpu=g,
                        minute=m,
                        covered_s=c,
                        util_pct=u,
                        sm_active_pct=sm_of(m, u),
                    )
                    for r, g, m, c, u in rows
                ]
            )
            write_allocations(store, jobs)
            if seed == 3:  # a damaged rollup row: its hour's minutes are read instead
                with store.engine.begin() as conn:
                    conn.execute(
                        sa.text("UPDATE rollups SET util_s = :v WHERE hour = :h"),
                        {"v": -5.0, "h": int((MON + 3 * HOUR).timestamp()) // 3600},
                    )
            minutes = minute_frame(rows)
            for span, (since, until) in SPANS.items():
                # the other hours' minutes read by stretch, or by a scan of the window
                how = "stretch" if (seed + len(span)) % 2 else "scan"
                monkeypatch.setattr(gputime, "STRETCH_COST", 0 if how == "stretch" else 10**9)
                got = week_allocations(
                    store, runs, since, until, basis="util", thresholds=t, prices={}, owned={}
                )
                want = oracle(jobs, runs, rows, since=since, until=until, thresholds=t)
                # SM activity ("useful"), which the oracle leaves out: as from every minute
                plain = {j.job_id: j for j in every_minute(jobs, runs, minutes, since, until)}
                # every job that held GPUs in the span (the store leaves out one that ended
                # at its start)
                assert {j.job_id for j in got.jobs} == {k for k, v in want.items() if v[2] > 0}
                for line in got.jobs:
                    matched, their, allocated, sampled, idle = want[line.job_id]
                    where = (span, how, seed, line.job_id)
                    assert (line.matched, line.runs) == (matched, their), where
                    assert line.allocated_gpu_hours * 3600 == pytest.approx(allocated, abs=1e-6), (
                        where
                    )
                    assert line.sampled_gpu_hours * 3600 == pytest.approx(sampled, abs=1e-6), where
                    assert line.idle_gpu_hours * 3600 == pytest.approx(idle, abs=1e-6), where
                    sm = plain[line.job_id]
                    # the utilization of the sampled time too, which the oracle leaves out
                    assert line.known_gpu_hours == pytest.approx(sm.known_gpu_hours, abs=1e-9)
                    assert line.util_pct == pytest.approx(sm.util_pct, abs=1e-9)
                    assert line.sm_known_gpu_hours == pytest.approx(sm.sm_known_gpu_hours, abs=1e-9)
                    assert line.sm_active_pct == pytest.approx(sm.sm_active_pct, abs=1e-9)
    # the rollups answered job-hours by id and host-hours by node, not only minutes
    assert sum(a for a, _ in answered) > 0 and sum(b for _, b in answered) > 0, answered
