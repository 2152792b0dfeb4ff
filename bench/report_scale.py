"""How long ``gpu-kpi report`` takes for a 1,000-GPU fleet, and how much memory.

Generates (once, reused when present) a SQLite run store with one week of per-minute samples for
1,000 GPUs (125 runs x 8 GPUs x 10,080 minutes = 10.08 M rows) plus 11 earlier weeks of run
summaries, then times ``gpu-kpi report`` for that week in a subprocess and reads its peak RSS.
Target on the 2-core machine: under 15 s and under 3 GB.

    .venv/bin/python bench/report_scale.py [--dir /tmp/gpu-kpi-scale] [--formats json,csv,html]

The store is written with sqlite3 directly (fast, untimed); reading it is what is measured.
"""

from __future__ import annotations

import argparse
import random
import resource
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WEEK = datetime(2026, 11, 23, tzinfo=UTC)  # 2026-W48
RUNS, GPUS_PER_RUN, MINUTES = 125, 8, 7 * 24 * 60
MODELS = ("H100", "A100-80GB", "H200", "L40S")
TEAMS = ("nlp", "vision", "search", "research", "speech")


def _ts(t: datetime) -> str:
    """The store's SQLite text form of a UTC datetime (SQLAlchemy's DateTime)."""
    return t.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")


def generate(path: Path) -> None:
    from tracker.record import RunRecord
    from tracker.store import RunStore

    rng = random.Random(1000)
    url = f"sqlite:///{path}"
    history = []
    for w in range(1, 12):
        monday = WEEK - timedelta(days=7 * w)
        for i in range(RUNS):
            util = rng.uniform(5, 95)
            history.append(RunRecord(
                id=f"h{w:02d}-{i:03d}", name=f"job-{i:03d}", team=TEAMS[i % 5],
                project=f"p{i % 17}", user=f"u{i % 40}", started_at=monday,
                ended_at=monday + timedelta(days=7), status="finished", gpu_source="nvml",
                gpu_model=MODELS[i % 4], gpu_count=GPUS_PER_RUN, price_per_gpu_hour=3.0,
                gpu_hours=GPUS_PER_RUN * 168.0, util_pct=util))
    week_runs = [RunRecord(
        id=f"w-{i:03d}", name=f"job-{i:03d}", team=TEAMS[i % 5], project=f"p{i % 17}",
        user=f"u{i % 40}", started_at=WEEK, ended_at=WEEK + timedelta(days=7),
        status="finished", gpu_source="nvml", gpu_model=MODELS[i % 4], gpu_count=GPUS_PER_RUN,
        price_per_gpu_hour=3.0, gpu_hours=GPUS_PER_RUN * 168.0, util_pct=50.0,
        mem_peak_gib=20.0, mem_total_gib=80.0) for i in range(RUNS)]
    with RunStore(url) as store:
        for r in history + week_runs:
            store.upsert_run(r)
    minutes = [_ts(WEEK + timedelta(minutes=m)) for m in range(MINUTES)]
    con = sqlite3.connect(path)
    con.execute("PRAGMA synchronous=OFF")
    t0 = time.perf_counter()
    for i in range(RUNS):
        base = rng.uniform(0, 100)
        rows = []
        for g in range(GPUS_PER_RUN):
            gpu = f"GPU-{i:04d}-{g}"
            # a run idles for its first 2 hours when i % 7 == 0: idle minutes to find
            for m, minute in enumerate(minutes):
                u = 1.0 if (i % 7 == 0 and m < 120) else min(100.0, max(0.0, base + (m % 13)))
                rows.append((f"w-{i:03d}", minute, gpu, 60.0, u, u * 0.7, 20.0, 300.0, 0.005))
        con.executemany("INSERT INTO samples (run_id, minute, gpu, covered_s, util_pct, "
                        "sm_active_pct, mem_used_gib, power_w, energy_kwh) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        con.commit()
    con.close()
    print(f"generated {RUNS * GPUS_PER_RUN * MINUTES:,} sample rows in "
          f"{time.perf_counter() - t0:.0f} s: {path} ({path.stat().st_size / 2**30:.2f} GiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/gpu-kpi-scale")
    ap.add_argument("--formats", default="json,csv,html")
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    db = d / "runs.db"
    if not db.exists():
        generate(db)
    cmd = [sys.executable, "-m", "reports.cli", "report", "--week", "2026-W48", "--store",
           f"sqlite:///{db}", "--out", str(d / "out"), "--format", args.formats]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - t0
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    if p.returncode != 0:
        sys.exit(f"gpu-kpi report failed: {p.stderr.strip()}")
    print(f"gpu-kpi report --format {args.formats}: {wall:.1f} s (target < 15 s), "
          f"peak RSS {peak_gib:.2f} GiB (target < 3 GB)")
    print(f"ratios to target: time {wall / 15:.2f}, memory {peak_gib * 2**30 / 3e9:.2f}")


if __name__ == "__main__":
    main()
