"""How fast sacct's output is read into allocations (:func:`reports.imports.slurm.read_sacct`):
a year of accounting at ``--jobs-per-day`` jobs, in both forms, against a baseline in the
same run (splitting the same lines on ``|`` and nothing else).

Writes ``--days`` days of ``sacct -a -X -P --format=FORMAT`` lines (this import's own, JobName
last) shaped as a real Slurm 22.05 writes them
(``tests/data/slurm/sacct-X.txt``: typed and untyped GPU TRES, a job in ten an array task, one in
twenty cancelled before it started) and the same jobs as ``sacct --json`` (22.05's
``openapi/dbv0.0.38``), then reads each once and prints jobs/s, the seconds a year takes, and
the ratio to the bare split, and this process's peak memory; then the whole import of the
parsable form (``gpu-kpi import slurm``'s work: read, node lists expanded, the allocations
written to a new SQLite store in one transaction, as ``reports.imports.slurm_jobs`` does).
The default is 30 days, and the year extrapolated: the whole year at once holds 525 MiB of
text, 1.7 GiB of JSON and 3.5 M records twice over (22 GiB peak here); an import reads
sacct a window at a time.

    .venv/bin/python bench/sacct_read.py [--jobs-per-day 10000] [--days 30]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reports.imports.slurm import FORMAT, read_sacct  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)
T = TypeVar("T")


def jobs(n: int, days: int, seed: int = 7) -> tuple[str, str]:
    """``n`` jobs a day for ``days`` days, as parsable text and as JSON."""
    rng = random.Random(seed)
    lines = [FORMAT.replace(",", "|")]
    records = []
    job = 1000
    for d in range(days):
        for _ in range(n):
            job += 1
            start = START + timedelta(days=d, seconds=rng.randrange(86_400))
            end = start + timedelta(seconds=rng.randrange(60, 36_000))
            gpus = rng.choice((1, 1, 2, 4, 8))
            never = rng.random() < 0.05
            array = rng.random() < 0.1
            job_id = f"{job}_{rng.randrange(100)}" if array else str(job)
            tres = (
                ""
                if never
                else f"billing={gpus},cpu={gpus * 4},gres/gpu:h100={gpus},gres/gpu={gpus},"
                f"mem={gpus * 32}G,node=1"
            )
            state = "CANCELLED by 1001" if never else rng.choice(("COMPLETED", "FAILED", "TIMEOUT"))
            s = start.strftime("%Y-%m-%dT%H:%M:%S")
            e = s if never else end.strftime("%Y-%m-%dT%H:%M:%S")
            node = "None assigned" if never else f"gpu{rng.randrange(1, 65):03d}"
            account = rng.choice(("nlp", "vision", "speech", "search"))
            elapsed = 0 if never else int((end - start).total_seconds())
            row = {
                "Cluster": "gpukpi",
                "JobID": job_id,
                "JobIDRaw": str(job),
                "JobName": f"train-{job % 97}",
                "User": f"u{job % 53}",
                "Account": account,
                "Partition": "gpu",
                "State": state,
                "Start": s,
                "End": e,
                "ElapsedRaw": str(elapsed),
                "AllocTRES": tres,
                "NodeList": node,
            }
            lines.append("|".join(row[k] for k in FORMAT.split(",")))
            allocated = (
                []
                if never
                else [
                    {"type": "cpu", "name": None, "id": 1, "count": gpus * 4},
                    {"type": "gres", "name": "gpu", "id": 1001, "count": gpus},
                    {"type": "gres", "name": "gpu:h100", "id": 1002, "count": gpus},
                ]
            )
            records.append(
                {
                    "job_id": job,
                    "array": {
                        "job_id": int(job_id.split("_")[0]) if array else 0,
                        "task_id": int(job_id.split("_")[1]) if array else None,
                    },
                    "name": f"train-{job % 97}",
                    "user": f"u{job % 53}",
                    "account": account,
                    "partition": "gpu",
                    "state": {"current": state.split(" ")[0], "reason": "None"},
                    "time": {
                        "start": int(start.timestamp()),
                        "end": int(start.timestamp() if never else end.timestamp()),
                    },
                    "tres": {"allocated": allocated},
                    "nodes": node,
                    "het": {"job_id": 0, "job_offset": None},
                    "cluster": "gpukpi",
                }
            )
    return "\n".join(lines) + "\n", json.dumps({"jobs": records})


def timed(f: Callable[[], T]) -> tuple[float, T]:
    t0 = time.perf_counter()
    out = f()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs-per-day", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=30)
    args = ap.parse_args()
    n = args.jobs_per_day * args.days
    t_make, (text, js) = timed(lambda: jobs(args.jobs_per_day, args.days))
    print(
        f"{n:,} jobs ({args.jobs_per_day:,} a day x {args.days} days): parsable "
        f"{len(text) / 2**20:.0f} MiB, JSON {len(js) / 2**20:.0f} MiB (made in {t_make:.0f} s)"
    )
    t_split, _ = timed(lambda: [line.split("|") for line in text.splitlines()])
    for form, data in (("parsable", text), ("json", js)):
        t, got = timed(functools.partial(read_sacct, data, tz=UTC))
        print(
            f"{form:>8}: {t:6.1f} s, {n / t:,.0f} jobs/s, {len(got.jobs):,} allocations, "
            f"{got.not_started:,} never started; {t / t_split:.1f}x splitting the lines "
            f"({t_split:.1f} s); a year at {args.jobs_per_day:,} a day: "
            f"{t * 365 / args.days:.0f} s"
        )
    import tempfile

    from reports.data.allocations import write_allocations
    from reports.imports.slurm_jobs import SlurmImported, allocations_of
    from tracker.store import RunStore

    with tempfile.TemporaryDirectory() as tmp, RunStore(f"sqlite:///{tmp}/runs.db") as store:

        def whole() -> SlurmImported:
            out = SlurmImported()
            read = read_sacct(text, tz=UTC)
            allocations_of(read, where="-", seen_at=START, cluster="", teams={}, out=out)
            write_allocations(store, out.jobs)
            return out

        t, done = timed(whole)
        print(
            f"  import: {t:6.1f} s, {n / t:,.0f} jobs/s ({len(done.jobs):,} written); a year at "
            f"{args.jobs_per_day:,} a day: {t * 365 / args.days:.0f} s"
        )
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(f"peak memory of this process (both texts and both reads held): {peak:.2f} GiB")


if __name__ == "__main__":
    main()
