"""The weekly report's Slurm section (:func:`reports.gputime.week_allocations`): what
matching a week of jobs to a week of minute samples by node and time costs, against the same
report without it.

A new SQLite store gets ``--hosts`` hosts of 8 GPUs, each with one nvidia-smi-like run of the
whole week (2026-W48) that names no job (a minute row per GPU: busy 60-95%, or 0% in stretches
of an hour or more), and Slurm jobs on them: each host's four 2-GPU slots run jobs of 1 or 2
GPUs, 10 minutes to 12 hours long, with gaps of up to 2 hours (``--jobs mixed``, seeded), or
whole-node jobs of 8 GPUs, 6 to 72 hours long, with gaps of up to 4 hours (``--jobs
whole-node``, a training fleet's). It times the report's ``compute`` of the week without the
jobs (the baseline), with them, and the section alone: as the report runs it (the hours the
rollups answer from them, the other hours' minutes) and from every minute (the scan and the
match alone, the way before the rollups), and checks that both give the same figures and that
the jobs' sampled GPU-hours add up to no more than the samples'.

    .venv/bin/python bench/allocations.py [--hosts 32] [--jobs mixed|whole-node] [--repeat 2] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reports.build import compute  # noqa: E402
from reports.data.allocations import Allocation, write_allocations  # noqa: E402
from reports.data.scans import SampleScans  # noqa: E402
from reports.gputime import week_allocations  # noqa: E402
from reports.kpi.allocations import AllocationJoin, AllocationWeek, allocation_week  # noqa: E402
from reports.kpi.frames import SampleFrameBuilder, sample_columns  # noqa: E402
from reports.request import Request  # noqa: E402
from tracker.cost import Thresholds  # noqa: E402
from tracker.record import RunRecord  # noqa: E402
from tracker.store import RunStore  # noqa: E402

WEEK = datetime(2026, 11, 23, tzinfo=UTC)  # 2026-W48
MINUTES = 7 * 24 * 60
NOW = WEEK + timedelta(days=8)


def fill(url: str, path: Path, hosts: int, rng: random.Random) -> int:
    """The runs through the store, their minute rows straight into SQLite; the rollups made."""
    with RunStore(url) as store:
        for h in range(hosts):
            store.upsert_run(
                RunRecord(
                    id=f"smi-{h:04d}",
                    name=f"nvidia-smi node{h:04d}",
                    host=f"node{h:04d}",
                    started_at=WEEK,
                    ended_at=WEEK + timedelta(minutes=MINUTES),
                    status="finished",
                    gpu_source="nvidia-smi",
                    source="nvidia-smi",
                    gpu_model="H100",
                    gpu_count=8,
                    gpu_hours=8 * 168.0,
                )
            )
    con = sqlite3.connect(path)
    rows = 0
    for h in range(hosts):
        batch = []
        for g in range(8):
            m = 0
            while m < MINUTES:
                span = rng.randint(60, 600)
                util = 0.0 if rng.random() < 0.3 else None
                for k in range(m, min(m + span, MINUTES)):
                    u = util if util is not None else rng.uniform(60, 95)
                    stamp = (WEEK + timedelta(minutes=k)).strftime("%Y-%m-%d %H:%M:%S.%f")
                    batch.append((f"smi-{h:04d}", stamp, f"GPU-{h:04d}-{g}", 60.0, u))
                m += span
        con.executemany(
            "INSERT INTO samples (run_id, minute, gpu, covered_s, util_pct) VALUES (?, ?, ?, ?, ?)",
            batch,
        )
        rows += len(batch)
    con.commit()
    con.close()
    with RunStore(url) as store:
        store.rebuild_rollups()
    return rows


def jobs(hosts: int, rng: random.Random, kind: str) -> list[Allocation]:
    out = []
    whole = kind == "whole-node"
    for h in range(hosts):
        for slot in range(1 if whole else 4):
            t = rng.randint(0, 120)
            while t < MINUTES:
                length = rng.randint(360, 72 * 60) if whole else rng.randint(10, 720)
                start = WEEK + timedelta(minutes=t, seconds=rng.randint(0, 59))
                out.append(
                    Allocation(
                        source="slurm",
                        cluster="bench",
                        job_id=str(len(out) + 1),
                        shown_id=str(len(out) + 1),
                        name=f"job-{len(out) + 1}",
                        user=f"u{h % 40}",
                        account=f"a{slot}",
                        team=f"a{slot}",
                        partition="gpu",
                        state="COMPLETED",
                        start_at=start,
                        end_at=start + timedelta(minutes=length),
                        seen_at=NOW,
                        gpus=8 if whole else rng.choice((1, 2)),
                        gpu_model="H100",
                        hosts=(f"node{h:04d}",),
                    )
                )
                t += length + rng.randint(0, 240 if whole else 120)
    return out


def timed(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--jobs", choices=("mixed", "whole-node"), default="mixed")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.db"
        url = f"sqlite:///{path}"
        t0 = time.perf_counter()
        rows = fill(url, path, args.hosts, rng)
        print(
            f"store: {args.hosts} hosts, {args.hosts * 8} GPUs, {rows:,} minute rows "
            f"({time.perf_counter() - t0:.0f} s to write)"
        )
        req = Request(week="2026-W48", tz=UTC)
        base, _ = timed(lambda: compute(url, req, now=NOW, warn=False), args.repeat)
        allocations = jobs(args.hosts, rng, args.jobs)
        with RunStore(url) as store:
            write_allocations(store, allocations)
        full, done = timed(lambda: compute(url, req, now=NOW, warn=False), args.repeat)
        week = done.kpis.allocations  # type: ignore[attr-defined]
        runs = [
            {"id": f"smi-{h:04d}", "host": f"node{h:04d}", "links": {}, "gpu_model": "H100"}
            for h in range(args.hosts)
        ]
        with RunStore(url) as store:
            end = WEEK + timedelta(days=7)

            def every_minute() -> object:
                frames = SampleFrameBuilder(sample_columns("util"))
                SampleScans(store).scan_samples(
                    frames,
                    columns=sample_columns("util"),
                    since=WEEK - timedelta(minutes=30),
                    until=end + timedelta(minutes=30),
                )
                return allocation_week(
                    allocations,
                    runs,
                    frames.frame(),
                    value="util_pct",
                    since=WEEK,
                    until=end,
                    thresholds=Thresholds(),
                )

            answered: list[tuple[int, int]] = []
            use = AllocationJoin.use_rollups

            def spy(self: AllocationJoin, hourly: Any) -> Any:
                out = use(self, hourly)
                answered.append(self.hours_from_rollups)
                return out

            def section() -> AllocationWeek:
                return week_allocations(
                    store,
                    runs,
                    WEEK,
                    end,
                    basis="util",
                    thresholds=Thresholds(),
                    prices={},
                    owned={},
                )

            AllocationJoin.use_rollups = spy  # type: ignore[method-assign]
            alone, got = timed(section, args.repeat)
            AllocationJoin.use_rollups = use  # type: ignore[method-assign]
            minutes, plain = timed(every_minute, args.repeat)
            tracemalloc.start()
            section()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    sampled = week.total("sampled_gpu_hours")
    print(
        f"jobs: {len(allocations):,}; allocated {week.total('allocated_gpu_hours'):,.1f} GPU-h, "
        f"sampled {sampled:,.1f}, idle {week.total('idle_gpu_hours'):,.1f}, "
        f"no samples {week.total('no_samples_gpu_hours'):,.1f}"
    )
    assert sampled <= rows / 60 + 1e-6, "the jobs took more GPU-hours than the samples hold"
    for name in ("sampled_gpu_hours", "idle_gpu_hours", "known_gpu_hours"):
        a = {j.job_id: getattr(j, name) for j in got.jobs}  # type: ignore[attr-defined]
        b = {j.job_id: getattr(j, name) for j in plain.jobs}  # type: ignore[attr-defined]
        assert a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-9 for k in a), name
    host_hours = args.hosts * 7 * 24
    print(
        f"host-hours the rollups answered: {answered[-1][1]:,} of {host_hours:,} "
        f"({100 * answered[-1][1] / host_hours:.0f}%); the same figures as from every minute"
    )
    print(f"report without the jobs (baseline): {base:.2f} s")
    print(f"report with the jobs:               {full:.2f} s ({full / base:.2f}x the baseline)")
    print(
        f"the section alone:                  {alone:.2f} s, peak {peak / 2**20:.0f} MiB traced; "
        f"from every minute {minutes:.2f} s ({minutes / alone:.1f}x)"
    )


if __name__ == "__main__":
    main()
