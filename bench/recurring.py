"""What the report's recurring jobs and savings ledger (:func:`reports.sections.savings.recurring_of_weeks`)
cost: reading 26 weeks of runs and grouping them by job key, against reading the reported
week's runs alone (the report reads those anyway).

A new SQLite store gets ``--runs`` finished runs spread over 26 weeks, named as recurring jobs
are (``job-<k>-<run number>``, ``--keys`` jobs), each with its GPU-hours, utilization and samples
(seeded); one job in five has a mark. It times, best of ``--repeat``:

1. the baseline: :func:`reports.gputime.usable_runs` of the last week (what the report
   reads of the runs for its own week);
2. :func:`reports.sections.savings.recurring_of_weeks`: the 26 weeks' runs read, keyed, priced, the
   recurring jobs and the changes worked out;
3. the parts of 2 in memory: job keys and prices (``job_runs``), the table
   (``recurring_jobs``), the changes (``changes``),

and prints the figures, the ratio to the baseline and the peak memory of 2: Python's and
numpy's allocations (tracemalloc), and the process's resident memory at its highest (Linux'
``VmHWM``, reset before the call: Arrow's buffers, which tracemalloc does not see, are in it).

    .venv/bin/python bench/recurring.py [--runs 200000] [--keys 2000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reports.data.marks import add_mark  # noqa: E402
from reports.data.scans import SampleScans  # noqa: E402
from reports.gputime import usable_runs  # noqa: E402
from reports.kpi import savings  # noqa: E402
from reports.request import Request  # noqa: E402
from reports.sections.savings import recurring_of_weeks  # noqa: E402
from tracker.store import RunStore  # noqa: E402

WEEK = datetime(2026, 11, 23, tzinfo=UTC)  # 2026-W48, the reported week
FIRST = WEEK - timedelta(weeks=savings.HISTORY_WEEKS - 1)
NOW = WEEK + timedelta(days=8)
STAMP = "%Y-%m-%d %H:%M:%S.%f"


def load(path: Path, runs: int, keys: int, seed: int) -> None:
    """``runs`` finished runs of ``keys`` jobs over the 26 weeks, written with sqlite3."""
    url = f"sqlite:///{path}"
    with RunStore(url):
        pass  # the tables
    rng = random.Random(seed)
    span = (WEEK + timedelta(weeks=1) - FIRST).total_seconds()
    rows = []
    for i in range(runs):
        k = rng.randrange(keys)
        start = FIRST + timedelta(seconds=rng.uniform(0, span - 36_000))
        hours = rng.uniform(0.5, 10)
        util = rng.uniform(40, 95)
        rows.append(
            (
                f"r{i:08d}",
                f"job-{k}-{1000 + i}",
                "proj",
                f"team-{k % 7}",
                "user",
                "host",
                "[]",
                "plain",
                start.astimezone(UTC).replace(tzinfo=None).strftime(STAMP),
                (start + timedelta(hours=hours))
                .astimezone(UTC)
                .replace(tzinfo=None)
                .strftime(STAMP),
                "finished",
                "nvml",
                "H100",
                1,
                1,
                3.85,
                "table",
                hours,
                util,
                0,
                round(hours * util / 100 * 3_600_000),
                "healthy",
                "tracker",
                "{}",
            )
        )
    con = sqlite3.connect(path)
    con.executemany(
        "INSERT INTO runs (id, name, project, team, user, host, tags, framework, started_at, "
        "ended_at, status, gpu_source, gpu_model, gpu_count, nodes, price_per_gpu_hour, "
        "price_source, gpu_hours, util_pct, steps, samples, verdict, source, links) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    con.commit()
    con.close()
    with RunStore(url) as store:
        for k in range(0, keys, 5):
            add_mark(store, f"job-{k}", "a fix", at=WEEK - timedelta(weeks=8), now=NOW)


def best(f: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "runs.db"
        t = time.perf_counter()
        load(path, args.runs, args.keys, args.seed)
        print(f"loaded {args.runs:,} runs of {args.keys:,} jobs in {time.perf_counter() - t:.1f} s")
        req = Request(week="2026-W48", tz=UTC)
        with RunStore(f"sqlite:///{path}") as store:
            scans = SampleScans(store)
            week_runs = len(usable_runs(scans, since=WEEK, until=WEEK + timedelta(weeks=1))[0])
            base = best(
                lambda: usable_runs(scans, since=WEEK, until=WEEK + timedelta(weeks=1)),
                args.repeat,
            )
            ours = best(lambda: recurring_of_weeks(store, req, WEEK, now=NOW), args.repeat)
            tracemalloc.start()
            table, found = recurring_of_weeks(store, req, WEEK, now=NOW)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            held, rss = rss_peak(lambda: recurring_of_weeks(store, req, WEEK, now=NOW))
            runs, _ = usable_runs(scans, since=FIRST, until=WEEK + timedelta(weeks=1))
        until = WEEK + timedelta(weeks=1)
        t = time.perf_counter()
        jr = savings.job_runs(runs, since=FIRST, until=until, prices={})
        keyed = time.perf_counter() - t
        weeks = savings.week_starts(jr["started_at"], UTC)
        t = time.perf_counter()
        savings.recurring_jobs(jr, weeks_of=weeks, this_week=WEEK)
        tabled = time.perf_counter() - t
        t = time.perf_counter()
        savings.changes(jr, [], end=until, tz=UTC)
        searched = time.perf_counter() - t
    print(f"the week's runs read (baseline): {week_runs:,} runs, {base:.2f} s")
    print(
        f"recurring jobs and changes: {args.runs:,} runs over {savings.HISTORY_WEEKS} weeks, "
        f"{ours:.2f} s ({ours / base:.1f}x the baseline), peak {peak:.0f} MiB; "
        f"{len(table)} jobs shown, {len(found)} changes"
    )
    if rss is not None:
        print(f"  resident: {held:.0f} MiB before the call, {rss:.0f} MiB at its highest during it")
    print(
        f"  in memory: keys and prices {keyed:.2f} s, the table {tabled:.2f} s, "
        f"the change-point search {searched:.2f} s"
    )


def rss_peak(call: Callable[[], object]) -> tuple[float, float | None]:
    """The process's resident MiB before ``call`` and at its highest during it (Linux: the
    high-water mark reset through ``/proc/self/clear_refs``); None elsewhere."""

    def status(field: str) -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise OSError(field)

    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = status("VmRSS")
    except OSError:
        call()
        return 0.0, None
    call()
    return before, status("VmHWM")


if __name__ == "__main__":
    main()
