"""The reports' rollup sums (:func:`reports.data.rollups.rollup_totals`) against DuckDB summing
the same rollup rows, on SQLite and PostgreSQL.

A week of hourly rollups is written straight into a new store (no minutes): ``--gpus`` GPUs in
two layouts, ``runs8`` (runs of 8 GPUs over the whole week: one group per GPU) and
``runs100m`` (one-GPU runs of 100 minutes, back to back: a sweep- or CI-heavy fleet, a group
per run and GPU). It times ``rollup_totals`` over the week (median of ``--repeat``, CPU and
wall) and DuckDB's ``GROUP BY`` of the same rows with the same range checks, from a pandas
frame registered in an in-memory DuckDB (the rows fetched to Python in both), checks that both
give the same groups and sums, and on PostgreSQL prints the plan (``EXPLAIN ANALYZE``). The
ratio is of this process's CPU on SQLite, of the wall time on PostgreSQL (whose server sums).

    .venv/bin/python bench/rollup_sums.py [--gpus 1000] [--repeat 3]
        [--store-url sqlite] [--store-url postgresql://USER:PASSWORD@HOST:PORT/DB]

A ``postgresql://`` URL's server gets a database ``gpu_kpi_bench_sums``, dropped and made again
for each layout (the URL's role needs CREATEDB). Needs DuckDB (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from bench import scale_data as data  # noqa: E402
from reports.data.rollups import rollup_totals  # noqa: E402
from tracker.store import RunStore, rollup_sql  # noqa: E402
from tracker.store.rollups import Rollup  # noqa: E402

WEEK_HOUR = 498_720  # 2026-11-23 00:00 UTC, a Monday
DATABASE = "gpu_kpi_bench_sums"


def new_store(kind: str) -> AbstractContextManager[str]:
    return data.scratch_store(kind, DATABASE)


def rollups(layout: str, gpus: int, rng: random.Random) -> Iterator[Rollup]:
    """A week of rollup rows of ``layout``."""
    for g in range(gpus):
        if layout == "runs8":
            spans = [(f"run-{g // 8}", 0, 168 * 60)]
        else:
            spans = [(f"run-{g}-{k}", k * 100, min(k * 100 + 100, 168 * 60)) for k in range(101)]
        for run_id, start, end in spans:
            for hour in range(start // 60, math.ceil(end / 60)):
                minutes = min(end, hour * 60 + 60) - max(start, hour * 60)
                covered = minutes * 60.0
                util = rng.uniform(0, 100)
                idle = covered * rng.choice([0.0, 0.0, 0.5, 1.0])
                yield Rollup(
                    run_id=run_id,
                    gpu=f"GPU-{g % 8}",
                    hour=WEEK_HOUR + hour,
                    minutes=minutes,
                    covered_s=covered,
                    util_known_s=covered,
                    util_s=util * covered,
                    util_idle_s=idle,
                    util_idle_value_s=idle * 2.0,
                    energy_kwh=0.01 * minutes,
                    mem_peak_gib=40.0,
                )


def load(url: str, layout: str, gpus: int) -> int:
    rng = random.Random(3)
    n = 0
    with RunStore(url) as store:

        def work(conn: sa.Connection) -> None:
            nonlocal n
            batch: list[Rollup] = []
            for r in rollups(layout, gpus, rng):
                batch.append(r)
                if len(batch) == 50_000:
                    rollup_sql._write(conn, batch)
                    n, batch = n + len(batch), []
            rollup_sql._write(conn, batch)
            n += len(batch)

        store.transaction(work, write=True)
        if not url.startswith("sqlite"):
            store.transaction(lambda conn: None, write=False)
    if not url.startswith("sqlite"):  # index-only scans need the visibility map
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE rollups")
        engine.dispose()
    return n


DUCKDB_SQL = """
SELECT run_id, gpu, 0 AS bucket, SUM(minutes), SUM(covered_s), SUM(util_known_s), SUM(util_s),
    SUM(util_idle_s), SUM(util_idle_value_s), SUM(dropped), SUM(bad_util), SUM(bad_minutes)
FROM rollups
WHERE hour >= {lo} AND hour < {hi} AND covered_s BETWEEN 0 AND 3600
    AND util_known_s BETWEEN 0 AND 3600 AND util_s BETWEEN 0 AND 360000
    AND util_idle_s BETWEEN 0 AND 3600 AND util_idle_value_s BETWEEN 0 AND 360000
GROUP BY run_id, gpu
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--store-url", action="append", help="'sqlite' (default) or postgresql://")
    args = ap.parse_args()
    import duckdb
    import pandas as pd

    print(f"{args.gpus} GPUs, one week of rollups; median of {args.repeat}")
    print(
        f"{'store':<9} {'layout':<9} {'rows':>8} {'groups':>8} {'ours cpu':>9} {'wall':>7} "
        f"{'duckdb':>7} {'ratio':>6} {'same':>5}"
    )
    for kind in args.store_url or ["sqlite"]:
        label = "sqlite" if kind == "sqlite" else "postgres"
        for layout in ("runs8", "runs100m"):
            with new_store(kind) as url:
                n = load(url, layout, args.gpus)
                engine = sa.create_engine(url)
                lo, hi = WEEK_HOUR, WEEK_HOUR + 168
                cpu: list[float] = []
                wall: list[float] = []
                with engine.connect() as conn:
                    for _ in range(args.repeat):
                        c, w = time.process_time(), time.perf_counter()
                        ours = rollup_totals(
                            conn, value="util_pct", hour_edges=[], since_hour=lo, until_hour=hi
                        )
                        cpu.append(time.process_time() - c)
                        wall.append(time.perf_counter() - w)
                    frame = pd.read_sql_query(sa.text("SELECT * FROM rollups"), conn)
                    plan = []
                    if not url.startswith("sqlite"):
                        plan = [
                            r[0]
                            for r in conn.exec_driver_sql(
                                "EXPLAIN ANALYZE SELECT run_id, gpu, SUM(minutes), "
                                "SUM(covered_s), SUM(util_s) FROM rollups WHERE hour >= %s "
                                "AND hour < %s AND covered_s BETWEEN 0 AND 3600 "
                                "GROUP BY run_id, gpu",
                                (lo, hi),
                            )
                        ]
                engine.dispose()
            duck = duckdb.connect()
            duck.register("rollups", frame)
            times = []
            for _ in range(args.repeat):
                w = time.perf_counter()
                theirs = duck.execute(DUCKDB_SQL.format(lo=lo, hi=hi)).fetchall()
                times.append(time.perf_counter() - w)
            same = {(r[0], r[1]): round(r[6], 3) for r in ours} == {
                (r[0], r[1]): round(r[6], 3) for r in theirs
            }
            # this process's CPU on SQLite; on PostgreSQL the server sums: the wall time
            ours_s = statistics.median(cpu if kind == "sqlite" else wall)
            duck_s = statistics.median(times)
            print(
                f"{label:<9} {layout:<9} {n:>8,} {len(ours):>8,} {ours_s:>8.2f}s "
                f"{statistics.median(wall):>6.2f}s {duck_s:>6.2f}s {ours_s / duck_s:>5.1f}x "
                f"{'yes' if same else 'NO':>5}"
            )
            for line in plan:
                print(f"    {line}")


if __name__ == "__main__":
    main()
