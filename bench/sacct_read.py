"""How fast sacct's output is read into allocations (:func:`reports.imports.slurm.read_sacct`):
a year of accounting at ``--jobs-per-day`` jobs, in both forms, against two baselines in the
same run: pandas' C parser reading the same text (``pandas.read_csv(sep="|")``, a table of
columns and no record) and splitting the same lines on ``|`` and nothing else.

Writes ``--days`` days of ``sacct -a -X -P --format=FORMAT`` lines (this import's own, JobName
last) shaped as a real Slurm 22.05 writes them
(``tests/data/slurm/sacct-X.txt``: typed and untyped GPU TRES, a job in ten an array task, one in
twenty cancelled before it started) and the same jobs as ``sacct --json`` (22.05's
``openapi/dbv0.0.38``), then reads the parsable form ``--repeat`` times, each beside pandas and
the split, and prints jobs/s, the ratio to pandas' rate and to the split's (min/median/max over
the repeats), the seconds a year takes, and two CPU figures after it: the import's
``allocations_of`` (:mod:`reports.imports.slurm_jobs`: every job an allocation, the output's own
time after them all), which takes the block reader's jobs as it holds them (numbers and codes
into each batch's distinct texts, :class:`~reports.imports.slurm.JobCodes`), and making the
read's columns Python values (:attr:`~reports.imports.slurm.SlurmJobs.columns`: the lists a
caller without the codes asks for); the JSON form once. Then the parsable form saved to a
file and read as ``gpu-kpi import slurm FILE`` reads it (:func:`read_sacct_stream`, a block at a
time) in a fresh process, with that process's peak memory; and the whole import of the parsable
form (``gpu-kpi import slurm``'s work: read, node lists expanded, the allocations written to a
new SQLite store in one transaction, as ``reports.imports.slurm_jobs`` does). The default is 30
days, and the year extrapolated: the whole year at once holds 525 MiB of text, 1.7 GiB of JSON
and 3.5 M records twice over (22 GiB peak here); an import reads sacct a window at a time.

    .venv/bin/python bench/sacct_read.py [--jobs-per-day 10000] [--days 30] [--repeat 3] [--docs]
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import operator
import os
import random
import statistics
import subprocess
import sys
import tempfile
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
    t0, c0 = time.perf_counter(), time.process_time()
    out = f()
    CPU.append(time.process_time() - c0)
    return time.perf_counter() - t0, out


CPU: list[float] = []
"""Each :func:`timed` call's CPU seconds (this process's), the last one's last: steadier than
the wall clock where other work shares the machine."""


_STREAM_CHILD = """
import io, json, sys, time
sys.path.insert(0, sys.argv[1])
from datetime import UTC
from reports.imports.slurm import read_sacct_stream
with open(sys.argv[2], "rb") as f:
    read_sacct_stream(io.BytesIO(f.read(10_000)), tz=UTC)  # its imports not timed
t0 = time.perf_counter()
with open(sys.argv[2], "rb") as f:
    got = read_sacct_stream(f, tz=UTC)
s = time.perf_counter() - t0
# this image's own peak: ru_maxrss would keep the bench's, forked before the exec
with open("/proc/self/status") as f:
    kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps({"s": s, "jobs": len(got.jobs), "peak_kib": kib}))
"""


def streamed(path: str) -> tuple[float, int, float]:
    """(seconds, jobs, peak GiB) of reading the saved output in a process of its own (Linux:
    the peak is its ``VmHWM``)."""
    argv = [sys.executable, "-c", _STREAM_CHILD, str(ROOT), path]
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the read failed: {done.stdout}")
    r = json.loads(done.stdout)
    return r["s"], r["jobs"], r["peak_kib"] / 2**20


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}/{statistics.median(xs):.2f}/{max(xs):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs-per-day", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="reads of the parsable form")
    ap.add_argument(
        "--docs",
        action="store_true",
        help="write what it prints into docs/benchmarks.md (its block of this bench)",
    )
    args = ap.parse_args()
    said: list[str] = []

    def say(line: str) -> None:
        print(line)
        said.append(line)

    n = args.jobs_per_day * args.days
    t_make, (text, js) = timed(lambda: jobs(args.jobs_per_day, args.days))
    say(
        f"{n:,} jobs ({args.jobs_per_day:,} a day x {args.days} days): parsable "
        f"{len(text) / 2**20:.0f} MiB, JSON {len(js) / 2**20:.0f} MiB (made in {t_make:.0f} s)"
    )
    import pandas as pd

    pd.read_csv(io.StringIO(text[:10_000]), sep="|")  # pandas' imports not timed
    read_sacct(text[:10_000], tz=UTC)  # nor ours
    from reports.imports.slurm_jobs import SlurmImported, allocations_of

    after_all = START + timedelta(days=args.days + 1)  # the output's time: every job read
    to_pandas, to_split, cpu_pandas, cpu_made, cpu_kept = [], [], [], [], []
    for i in range(args.repeat):
        # the order turned each time: what runs first does not always meet the same machine
        t_pandas = t_split = t = 0.0
        for what in ("pandas", "split", "read")[i % 3 :] + ("pandas", "split", "read")[: i % 3]:
            if what == "pandas":
                t_pandas, _ = timed(lambda: pd.read_csv(io.StringIO(text), sep="|"))
                c_pandas = CPU[-1]
            elif what == "split":
                t_split, _ = timed(lambda: [line.split("|") for line in text.splitlines()])
            else:
                t, got = timed(functools.partial(read_sacct, text, tz=UTC))
                c_read = CPU[-1]
                kept = SlurmImported()
                timed(
                    functools.partial(
                        allocations_of,
                        got,
                        where="-",
                        seen_at=after_all,
                        cluster="",
                        teams={},
                        out=kept,
                    )
                )
                c_kept = CPU[-1]
                timed(functools.partial(operator.attrgetter("jobs.columns"), got))
                c_made = CPU[-1]
        to_pandas.append(t_pandas / t)
        to_split.append(t_split / t)
        cpu_pandas.append(c_pandas / c_read)
        cpu_made.append(c_pandas / (c_read + c_made))
        cpu_kept.append(c_pandas / (c_read + c_kept))
        say(
            f"parsable: {t:6.2f} s ({c_read:.2f} CPU s), {n / t:,.0f} jobs/s, "
            f"{len(got.jobs):,} allocations, {got.not_started:,} never started; "
            f"pandas.read_csv {t_pandas:.2f} s ({c_pandas:.2f} CPU s; {to_pandas[-1]:.3f}x its "
            f"rate, {cpu_pandas[-1]:.3f}x in CPU), the split {t_split:.2f} s "
            f"({to_split[-1]:.3f}x); allocations_of {c_kept:.2f} CPU s "
            f"({len(kept.jobs):,} allocations; {cpu_kept[-1]:.3f}x pandas in CPU with it), the "
            f"columns made Python values {c_made:.2f} CPU s ({cpu_made[-1]:.3f}x pandas in CPU "
            f"with them); a year at {args.jobs_per_day:,} a "
            f"day: {t * 365 / args.days:.0f} s  [{i + 1}/{args.repeat}]"
        )
        del got, kept
    say(
        f"parsable: the read's rate is {spread(to_pandas)}x pandas.read_csv's "
        f"({spread(cpu_pandas)}x in CPU seconds; {spread(cpu_kept)}x with allocations_of, "
        f"{spread(cpu_made)}x with its columns made "
        f"Python values) and {spread(to_split)}x the bare split's (min/median/max of "
        f"{args.repeat})"
    )
    t, got = timed(functools.partial(read_sacct, js, tz=UTC))
    say(
        f"    json: {t:6.1f} s, {n / t:,.0f} jobs/s, {len(got.jobs):,} allocations, "
        f"{got.not_started:,} never started; a year at {args.jobs_per_day:,} a day: "
        f"{t * 365 / args.days:.0f} s"
    )
    del got, js
    with tempfile.TemporaryDirectory() as tmp:
        saved = os.path.join(tmp, "sacct.txt")
        with open(saved, "w") as f:
            f.write(text)
        t, count, gib = streamed(saved)
        say(
            f"  stream: {t:6.2f} s, {n / t:,.0f} jobs/s ({count:,} allocations) from a file, "
            f"as `gpu-kpi import slurm FILE` reads it, in a process of its own: peak {gib:.2f} GiB"
        )
    from reports.data.allocations import write_allocations
    from tracker.store import RunStore

    with tempfile.TemporaryDirectory() as tmp, RunStore(f"sqlite:///{tmp}/runs.db") as store:

        def whole() -> SlurmImported:
            out = SlurmImported()
            read = read_sacct(text, tz=UTC)
            allocations_of(read, where="-", seen_at=START, cluster="", teams={}, out=out)
            write_allocations(store, out.jobs)
            return out

        t, done = timed(whole)
        say(
            f"  import: {t:6.1f} s, {n / t:,.0f} jobs/s ({len(done.jobs):,} written); a year at "
            f"{args.jobs_per_day:,} a day: {t * 365 / args.days:.0f} s"
        )
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    say(f"peak memory of this process (both texts held, a read at a time): {peak:.2f} GiB")
    if args.docs:
        from datetime import datetime

        from bench.docs_block import write_block

        command = " ".join(["bench/sacct_read.py", *sys.argv[1:]])
        write_block(
            "bench/sacct_read.py",
            f"`{command}`, {datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} cores (written by the "
            "bench; seconds are wall time, CPU seconds this process's):\n\n```text\n"
            + "\n".join(said)
            + "\n```",
        )
        print("wrote its block in docs/benchmarks.md")


if __name__ == "__main__":
    main()
