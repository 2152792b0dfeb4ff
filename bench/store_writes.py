"""The live writer's cost: CPU per GPU-minute of ``RunStore.upsert_samples`` as the tracker's
store writer calls it (every minute, one row per GPU of a run), and of the heartbeat
``upsert_run`` beside it, against the same writes recomputing the hours they touch (the path
every write took before appends were added to the stored rollups), in one process.

For each case (``busy``: 50% utilization; ``idle``: 1%, every minute idle once the first
window has passed; ``mixed``: 45 minutes of each in turn, so a stretch turns idle, reading
the rows further back, twice every 90 minutes; ``spread``: ``mixed`` with each GPU's values
its own, so that no two series are alike, where the other cases give every GPU the same
value, as NVML's whole percents often do) it writes ``--minutes`` minutes of one run of
``--gpus`` GPUs into a new store, twice: with the rollups added to (ours) and with every
written series' hours recomputed from the minutes (baseline). It prints the CPU (this
process's ``time.process_time``: on PostgreSQL the server's own work is not in it; the wall
time is printed beside), ours as the least, the median and the most of ``--repeat`` stores,
and checks that the kept rollups equal a rebuild from the minutes, float for float.

    .venv/bin/python bench/store_writes.py [--gpus 8] [--minutes 240] [--repeat 3]
        [--store-url sqlite] [--store-url postgresql://USER:PASSWORD@HOST:PORT/DB]

A ``postgresql://`` URL's server gets a database ``gpu_kpi_bench_writes``, dropped and made
again for each store written (the URL's role needs CREATEDB; its own database is never
written to). With the tests' server (``bash tests/pg-up.sh``):
``postgresql://gpu_kpi:gpu_kpi@127.0.0.1:5432/gpu_kpi_test``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from bench import scale_data as data  # noqa: E402
from tracker.record import MinuteSample, RunRecord  # noqa: E402
from tracker.store import RunStore, rollup_sql  # noqa: E402
from tracker.store.rollups import COLUMNS  # noqa: E402

T0 = datetime(2026, 11, 23, 9, 45, tzinfo=UTC)
DATABASE = "gpu_kpi_bench_writes"

CASES: dict[str, Callable[[int, int], float]] = {
    "busy": lambda minute, gpu: 50.0,
    "idle": lambda minute, gpu: 1.0,
    "mixed": lambda minute, gpu: 1.0 if (minute // 45) % 2 else 50.0,
    "spread": lambda minute, gpu: (
        1.0 + gpu / 10 if (minute // 45) % 2 else 45.0 + gpu + (minute % 4) / 4
    ),
}
"""Utilization (%) by minute and GPU; SM activity is half of it."""


def new_store(kind: str) -> AbstractContextManager[str]:
    return data.scratch_store(kind, DATABASE)


def write(url: str, util: Callable[[int, int], float], gpus: int, minutes: int) -> dict[str, float]:
    """Write the run minute by minute; CPU and wall seconds of the samples and the heartbeats,
    and whether the kept rollups equal a rebuild."""
    cpu_samples = cpu_runs = wall_samples = 0.0
    with RunStore(url) as store:
        run = RunRecord(
            id="live",
            name="live",
            started_at=T0,
            status="running",
            gpu_count=gpus,
            gpu_model="NVIDIA H100 80GB HBM3",
        )
        store.upsert_run(run)
        for m in range(minutes):
            moment = T0 + timedelta(minutes=m)
            rows = [
                MinuteSample(
                    run_id="live",
                    minute=moment,
                    gpu=f"GPU-{g}",
                    covered_s=60.0,
                    util_pct=util(m, g),
                    sm_active_pct=util(m, g) / 2,
                    energy_kwh=0.0117,
                    mem_used_gib=40.5,
                )
                for g in range(gpus)
            ]
            c0, w0 = time.process_time(), time.perf_counter()
            store.upsert_samples(rows)
            c1, w1 = time.process_time(), time.perf_counter()
            store.upsert_run(run.replace(heartbeat_at=moment))
            cpu_runs += time.process_time() - c1
            cpu_samples += c1 - c0
            wall_samples += w1 - w0
        kept = _rollups(store)
        store.rebuild_rollups()
        same = _rollups(store) == kept
    n = minutes * gpus
    return {
        "samples_us": cpu_samples / n * 1e6,
        "samples_wall_us": wall_samples / n * 1e6,
        "heartbeat_us": cpu_runs / minutes * 1e6,
        "same": float(same),
    }


def _rollups(store: RunStore) -> list[tuple[object, ...]]:
    def work(conn: sa.Connection) -> list[tuple[object, ...]]:
        sql = f"SELECT {', '.join(COLUMNS)} FROM rollups ORDER BY run_id, gpu, hour"
        return [tuple(r) for r in conn.exec_driver_sql(sql).all()]

    return store.transaction(work, write=False)


@contextmanager
def recomputing() -> Iterator[None]:
    """Every write recomputes the hours it touches: no series is taken as appended to."""
    real = rollup_sql._appendable
    rollup_sql._appendable = lambda conn, first, locked=(): ({}, {})
    try:
        yield
    finally:
        rollup_sql._appendable = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8, help="GPUs of the run (default 8)")
    ap.add_argument("--minutes", type=int, default=240, help="minutes written (default 240)")
    ap.add_argument("--repeat", type=int, default=3, help="stores written per figure")
    ap.add_argument(
        "--store-url",
        action="append",
        help="'sqlite' (default) or a postgresql:// server URL; repeatable",
    )
    args = ap.parse_args()
    stores = args.store_url or ["sqlite"]
    print(
        f"{args.gpus} GPUs x {args.minutes} minutes, {args.repeat} stores each; CPU per "
        "GPU-minute of upsert_samples (ours: least/median/most; the rest medians; wall "
        "beside), heartbeat upsert_run per call"
    )
    print(
        f"{'store':<10} {'case':<6} {'ours':>17} {'wall':>9} {'recompute':>10} {'ratio':>6} "
        f"{'heartbeat':>10} {'= rebuild':>9}"
    )
    for kind in stores:
        label = "sqlite" if kind == "sqlite" else "postgres"
        for case, util in CASES.items():
            ours: list[dict[str, float]] = []
            base: list[dict[str, float]] = []
            for _ in range(args.repeat):  # alternated: the machine's drift falls on both
                with new_store(kind) as url:
                    ours.append(write(url, util, args.gpus, args.minutes))
                with new_store(kind) as url, recomputing():
                    base.append(write(url, util, args.gpus, args.minutes))

            def median(figures: list[dict[str, float]], key: str) -> float:
                return statistics.median(f[key] for f in figures)

            us, before = median(ours, "samples_us"), median(base, "samples_us")
            spread = [f["samples_us"] for f in ours]
            figures = f"{min(spread):.0f}/{us:.0f}/{max(spread):.0f}µs"
            same = all(f["same"] for f in ours + base)
            print(
                f"{label:<10} {case:<6} {figures:>17} {median(ours, 'samples_wall_us'):>7.0f}µs "
                f"{before:>8.0f}µs {us / before:>5.2f}x "
                f"{median(ours, 'heartbeat_us'):>8.0f}µs {'yes' if same else 'NO':>9}"
            )


if __name__ == "__main__":
    main()
