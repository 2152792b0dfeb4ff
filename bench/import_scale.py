"""How fast ``gpu-kpi import nvidia-smi`` reads a log, in rows per second, and its peak memory;
and with ``--prometheus``, how fast ``gpu-kpi import prometheus`` reads DCGM-exporter samples.

Writes an nvidia-smi CSV log of ``--gpus`` GPUs sampled every ``--interval`` seconds for
``--hours`` hours (utilization 0-100 with units, memory, power), then times, each in a fresh
subprocess with its peak RSS (``wait4``): reading it (:func:`reports.imports.nvsmi.read_nvsmi`:
parsing, the minute rows, the run; nothing written; vectorized by
:mod:`reports.imports.nvsmi_fast`) and the whole import into a new SQLite store. It prints
rows/s, and what a 1,000-GPU week at 1 s would take at that rate, against the goal of 1 M
rows/s for CSV; and beside them the exact path (a sampler call per reading, what
every log that is not the common UTC one takes) on the same log. With an even ``--files`` of
4 or more it also imports half the files and judges the rate of each further row: a week's
import runs ~10 minutes, where the ~0.5 s of start-up (pandas, SQLAlchemy, the processes, the
store's schema) that dominates a small log's figure does not count. With DuckDB installed
(``pip install -e '.[bench]'``) it times a reference beside them: DuckDB's ``read_csv`` of the
same files and the same minute arithmetic in SQL (a reading covers the time since its GPU's
last, up to three median intervals), in a subprocess, and checks that its covered seconds and
Σ utilization × seconds equal the read's.

With ``--prometheus`` it also writes ``--prom-gpus`` GPUs' DCGM-exporter series (utilization,
memory, power; a scrape every 15 s for ``--prom-hours``, each GPU a new pod every 6 hours),
builds a TSDB of them with ``promtool tsdb create-blocks-from openmetrics``, starts a real
Prometheus over it (Debian's ``prometheus``, as the tests do) and times
:func:`reports.imports.prom.read_prometheus` over the whole range in a fresh subprocess: DCGM
samples/s (what Prometheus averaged into the minutes) and minute rows/s, peak memory.

    .venv/bin/python bench/import_scale.py [--gpus 8] [--hours 1] [--interval 1] [--dir DIR]
        [--nounits] [--files 1] [--no-exact] [--reuse] [--prometheus --prom-gpus 100
        --prom-hours 24]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_ROWS_PER_S = 1_000_000
WEEK_ROWS = 1_000 * 7 * 24 * 3600  # a 1,000-GPU week at 1 s


def write_log(
    path: Path, gpus: int, hours: float, interval: float, *, units: bool = True, first_gpu: int = 0
) -> int:
    rng = random.Random(0)
    t0 = datetime(2026, 11, 23, 9, 0)
    steps = int(hours * 3600 / interval)
    pct, mib, w = (" %", " MiB", " W") if units else ("", "", "")
    with open(path, "w") as f:
        f.write(
            "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], "
            "memory.total [MiB], power.draw [W]\n"
            if units
            else "timestamp, index, uuid, "
            "name, utilization.gpu, memory.used, memory.total, power.draw\n"
        )
        for i in range(steps):
            ts = (t0 + timedelta(seconds=i * interval)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            for g in range(first_gpu, first_gpu + gpus):
                f.write(
                    f"{ts}, {g - first_gpu}, GPU-{g:08d}-bench, NVIDIA H100 80GB HBM3, "
                    f"{rng.randint(0, 100)}{pct}, {rng.randint(1000, 80000)}{mib}, "
                    f"81559{mib}, {rng.uniform(60, 700):.2f}{w}\n"
                )
    return steps * gpus


HEADER = (
    "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], "
    "power.draw [W]\n"
)


def write_log_quick(path: Path, gpus: int, hours: float, *, first_gpu: int = 0) -> int:
    """:func:`write_log`'s log (with units, a reading a second) in under half its time (the
    speed guard's: no float formatted per row, each value picked from a table of its texts by
    numpy's random numbers). Returns its rows."""
    import numpy as np

    rng = np.random.default_rng(first_gpu)
    t0 = datetime(2026, 11, 23, 9, 0)
    steps = int(hours * 3600)
    util = [f"{u} %, " for u in range(101)]
    mem = [f"{m} MiB, 81559 MiB, " for m in range(1000, 80000, 37)]
    power = [f"{w / 100:.2f} W\n" for w in range(6000, 70000, 13)]
    gpu = [
        f", {g - first_gpu}, GPU-{g:08d}-bench, NVIDIA H100 80GB HBM3, "
        for g in range(first_gpu, first_gpu + gpus)
    ]
    with open(path, "w") as f:
        f.write(HEADER)
        for i in range(0, steps, 60):  # a minute of readings at a time
            n = min(60, steps - i) * gpus
            picks = zip(
                rng.integers(0, len(util), n).tolist(),
                rng.integers(0, len(mem), n).tolist(),
                rng.integers(0, len(power), n).tolist(),
                strict=True,
            )
            stamps = [
                (t0 + timedelta(seconds=i + k)).strftime("%Y/%m/%d %H:%M:%S.000")
                for k in range(min(60, steps - i))
            ]
            f.write(
                "".join(
                    stamps[j // gpus] + gpu[j % gpus] + util[u] + mem[m] + power[w]
                    for j, (u, m, w) in enumerate(picks)
                )
            )
    return steps * gpus


MINUTES_SQL = """
WITH r AS (
    SELECT trim(uuid) AS uuid,
        epoch(strptime(timestamp, '%Y/%m/%d %H:%M:%S.%g')) AS t,
        {util} AS util, {mem} AS mem, {power} AS power
    FROM {source}),
l AS (SELECT *, t - LAG(t) OVER (PARTITION BY uuid ORDER BY t) AS dt FROM r),
g AS (SELECT uuid, median(dt) AS step FROM l GROUP BY uuid),
m AS (
    SELECT l.uuid, floor((t - dt) / 60) AS minute, SUM(dt) AS covered_s,
        SUM(util * dt) AS util_s, MAX(mem) AS mem, SUM(power * dt) / 3.6e6 AS kwh
    FROM l JOIN g USING (uuid) WHERE dt > 0 AND dt <= 3 * g.step GROUP BY ALL)
SELECT COUNT(*), SUM(covered_s), SUM(util_s) FROM m"""
"""DuckDB's reference: the minute rows of nvidia-smi logs (``?``: their paths) in SQL, a
reading covering the time since its GPU's last, up to three median intervals: their count,
Σ covered seconds and Σ utilization × seconds."""


def minutes_sql() -> str:
    """:data:`MINUTES_SQL` over ``read_csv`` of the logs given as its one parameter."""
    names = ["timestamp", "idx", "uuid", "name", "util", "mem", "total", "power"]
    columns = ", ".join(f"'{n}': 'VARCHAR'" for n in names)
    source = f"read_csv(?, header = true, delim = ',', quote = '', columns = {{{columns}}})"

    def num(c: str) -> str:
        return f"TRY_CAST(split_part(trim({c}), ' ', 1) AS DOUBLE)"

    return MINUTES_SQL.format(util=num("util"), mem=num("mem"), power=num("power"), source=source)


_CPU = """
import resource
def cpu():
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (0, -1)))
"""
"""CPU seconds of a child (its threads) and the processes it waited for (its readers)."""

_CHILD = (
    _CPU
    + """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from reports.imports.nvsmi import import_nvsmi, read_nvsmi
t0, c0 = time.perf_counter(), cpu()
import os
files = sys.argv[2].split(os.pathsep)
if sys.argv[3] in ("read", "exact"):
    done = read_nvsmi(files, fast=sys.argv[3] == "read", workers=None)
else:
    done = import_nvsmi(sys.argv[4], files, workers=None)
s = time.perf_counter() - t0
covered = sum(r.covered_s or 0.0 for r in done.samples)
util_s = sum((r.util_pct or 0.0) * (r.covered_s or 0.0) for r in done.samples)
print(json.dumps({"s": s, "cpu": cpu() - c0, "minutes": len(done.samples), "covered_s": covered,
                  "util_s": util_s}))
"""
)

_DUCKDB_CHILD = (
    _CPU
    + """
import json, os, sys, time
t0, c0 = time.perf_counter(), cpu()
import duckdb
files = sys.argv[1].split(os.pathsep)
con = duckdb.connect()
con.execute("SET threads = 2")
con.execute("SET enable_progress_bar = false")  # it writes to stdout past 2 s
rows = con.execute(sys.argv[2], [files]).fetchone()
print(json.dumps({"s": time.perf_counter() - t0, "cpu": cpu() - c0, "minutes": rows[0],
                  "covered_s": rows[1], "util_s": rows[2]}))
"""
)


def measured(args: list[str], child: str = _CHILD) -> tuple[float, int, float]:
    """(seconds inside, minute rows, peak GiB) of one child; its sums go in :data:`SUMS`, its
    CPU seconds inside (its readers' too) in :data:`CPU`."""
    ours = child is _CHILD
    argv = [sys.executable, "-c", child, *([str(ROOT)] if ours else []), *args]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as p:
        _, status, usage = os.wait4(p.pid, 0)
        out = p.stdout.read() if p.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"the import failed: {out}")
    r = json.loads(out)
    SUMS[args[1] if ours else "duckdb"] = (r["covered_s"], r["util_s"])
    CPU[args[1] if ours else "duckdb"] = r["cpu"]
    return r["s"], r["minutes"], usage.ru_maxrss / 2**20


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}/{statistics.median(xs):.2f}/{max(xs):.2f}"


SUMS: dict[str, tuple[float, float]] = {}
"""What each child measured: (Σ covered seconds, Σ utilization × seconds) of its minutes."""
CPU: dict[str, float] = {}
"""Each child's CPU seconds inside: on a machine other work shares, a steadier figure than
the wall clock's (which the rates and the goal are judged by)."""


_PROM_CHILD = """
import json, sys, time
from datetime import datetime, UTC
sys.path.insert(0, sys.argv[1])
from reports.imports.prom import read_prometheus
since, until = (datetime.fromtimestamp(float(x), UTC) for x in sys.argv[3:5])
t0 = time.perf_counter()
done = read_prometheus(sys.argv[2], since=since, until=until, progress=False)
print(json.dumps({"s": time.perf_counter() - t0, "minutes": len(done.samples),
                  "runs": len(done.records)}))
"""


def write_openmetrics(path: Path, gpus: int, hours: float, t0: float) -> int:
    """DCGM-exporter series as OpenMetrics, streamed (each metric's series together, each in
    time order), never held in memory: a child spawned later inherits the peak."""
    metrics = (
        ("DCGM_FI_DEV_GPU_UTIL", lambda r: r.randint(0, 100)),
        ("DCGM_FI_DEV_FB_USED", lambda r: r.randint(1000, 80000)),
        ("DCGM_FI_DEV_POWER_USAGE", lambda r: round(r.uniform(60, 700), 1)),
    )
    scrapes = int(hours * 3600 / 15)
    n = 0
    with open(path, "w") as f:
        for name, value in metrics:
            rng = random.Random(name)
            f.write(f"# TYPE {name} gauge\n")
            for g in range(gpus):
                for i in range(scrapes + 1):
                    labels = (
                        f'Hostname="node{g // 8}",UUID="GPU-{g:06d}",gpu="{g % 8}",'
                        f'modelName="NVIDIA H100 80GB HBM3",namespace="team{g % 5}",'
                        f'pod="job-{g}-{i * 15 // 21600}"'
                    )
                    f.write(f"{name}{{{labels}}} {value(rng)} {t0 + 15 * i:.3f}\n")
                    n += 1
        f.write("# EOF\n")
    return n


def prometheus(d: Path, gpus: int, hours: float) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from prom_server import serving

    t0 = datetime(2026, 11, 23, 0, 0, tzinfo=UTC).timestamp()
    t = time.perf_counter()
    samples = write_openmetrics(d / "dcgm.om", gpus, hours, t0)
    with serving(d, d / "dcgm.om") as url:
        print(
            f"prometheus: {samples:,} DCGM samples of {gpus} GPUs over {hours:g} h, "
            f"TSDB built and served in {time.perf_counter() - t:.1f} s"
        )
        with subprocess.Popen(
            [sys.executable, "-c", _PROM_CHILD, str(ROOT), url, str(t0), str(t0 + hours * 3600)],
            stdout=subprocess.PIPE,
            text=True,
        ) as p:
            _, status, usage = os.wait4(p.pid, 0)
            out = p.stdout.read() if p.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"the Prometheus import failed: {out}")
    r = json.loads(out)
    print(
        f"read  : {r['s']:6.2f} s, {samples / r['s']:>10,.0f} DCGM samples/s, "
        f"{r['minutes'] / r['s']:>8,.0f} minute rows/s ({r['minutes']:,} rows, "
        f"{r['runs']:,} runs), peak {usage.ru_maxrss / 2**20:.2f} GiB; a 1,000-GPU week: "
        f"{1000 * 7 * 24 * 60 / (r['minutes'] / r['s']) / 60:.1f} min"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between readings")
    ap.add_argument("--dir", help="where the log and store go (default: a temporary folder)")
    ap.add_argument("--nounits", action="store_true", help="a --format=csv,nounits log")
    ap.add_argument(
        "--files",
        type=int,
        default=1,
        help="logs of --gpus GPUs each, imported "
        "together (one per node; files are read side by side, a process per CPU)",
    )
    ap.add_argument("--no-exact", action="store_true", help="skip the exact path (slow)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep the logs an earlier run wrote in --dir (the same sizes write the same logs)",
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs of the read, the import and DuckDB's"
    )
    ap.add_argument(
        "--docs",
        action="store_true",
        help="write what it prints into docs/benchmarks.md (its block of this bench)",
    )
    ap.add_argument("--prometheus", action="store_true", help="also time the Prometheus import")
    ap.add_argument("--prom-gpus", type=int, default=100)
    ap.add_argument("--prom-hours", type=float, default=24.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.dir or tmp)
        d.mkdir(parents=True, exist_ok=True)
        shape = (
            f"{args.gpus}g-{args.hours:g}h-{args.interval:g}s{'-nounits' if args.nounits else ''}"
        )
        logs = [d / f"nvsmi-{shape}-{n}.csv" for n in range(args.files)]
        t = time.perf_counter()
        rows = 0
        for n, path in enumerate(logs):
            if args.reuse and args.dir and path.exists():
                rows += sum(1 for _ in path.open("rb")) - 1
                continue
            rows += write_log(
                path,
                args.gpus,
                args.hours,
                args.interval,
                units=not args.nounits,
                first_gpu=n * args.gpus,
            )
        size = sum(log.stat().st_size for log in logs)
        print(
            f"log: {rows:,} rows in {len(logs)} file(s), {size / 2**20:.1f} MiB "
            f"(written in {time.perf_counter() - t:.1f} s)"
        )
        log = os.pathsep.join(map(str, logs))
        db = d / "import.db"
        said: list[str] = []

        def say(line: str) -> None:
            print(line)
            said.append(line)

        try:
            import duckdb  # noqa: F401
        except ImportError:
            reference = False
            say("duckdb: not installed (pip install -e '.[bench]'): no reference")
        else:
            reference = True
        rates: dict[str, list[float]] = {}
        ratios: dict[str, list[float]] = {}
        for i in range(args.repeat):
            exact: list[tuple[str, list[str]]] = [] if args.no_exact or i else [("exact", [])]
            for what, extra in [*exact, ("read", []), ("import", [f"sqlite:///{db}"])]:
                db.unlink(missing_ok=True)
                s, minutes, gib = measured([log, what, *extra])
                rates.setdefault(what, []).append(rows / s)
                say(
                    f"{what:6s}: {s:6.2f} s, {rows / s:>10,.0f} rows/s, {minutes:,} minute "
                    f"rows, peak {gib:.2f} GiB, {CPU[what]:.2f} CPU s; a 1,000-GPU week at 1 s: "
                    f"{WEEK_ROWS / (rows / s) / 3600:.1f} h"
                )
            if not reference:
                continue
            s, minutes, gib = measured([log, minutes_sql()], child=_DUCKDB_CHILD)
            rates.setdefault("duckdb", []).append(rows / s)
            pairs = zip(SUMS["read"], SUMS["duckdb"], strict=True)
            worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs)
            say(
                f"duckdb: {s:6.2f} s, {rows / s:>10,.0f} rows/s, {minutes:,} minute rows, "
                f"peak {gib:.2f} GiB, {CPU['duckdb']:.2f} CPU s (read_csv and the minute SQL: a "
                f"reading covers the time since its GPU's last, up to 3 median intervals); "
                f"covered seconds and utilization x seconds agree with the read to {worst:.1e}"
            )
            for what in ("import", "read"):
                ratios.setdefault(what, []).append(rates[what][-1] / rates["duckdb"][-1])
                ratios.setdefault(f"{what} CPU", []).append(CPU["duckdb"] / CPU[what])
            say(
                f"the import's rate is {ratios['import'][-1]:.2f}x DuckDB's (the read alone "
                f"{ratios['read'][-1]:.2f}x); in CPU seconds {ratios['import CPU'][-1]:.2f}x "
                f"({ratios['read CPU'][-1]:.2f}x)  [{i + 1}/{args.repeat}]"
            )
        if ratios and args.repeat > 1:
            say(
                f"over {args.repeat} runs (min/median/max), the import's rate against DuckDB's: "
                f"{spread(ratios['import'])}x (CPU seconds {spread(ratios['import CPU'])}x); "
                f"the read's: {spread(ratios['read'])}x ({spread(ratios['read CPU'])}x)"
            )
        if "exact" in rates:
            say(
                f"the vectorized read is {rates['read'][0] / rates['exact'][0]:.1f}x the exact "
                "(sampler) path's rate on the same log"
            )
        imported = statistics.median(rates["import"])
        rate, judged = imported, "the whole import, its start-up included"
        if len(logs) >= 4 and len(logs) % 2 == 0:
            # half the files, then all: what each further row costs, the start-up (imports,
            # processes, the store's schema) taken out, as in a 1,000-GPU week's 10 minutes
            db.unlink(missing_ok=True)
            half = rows // 2
            s_half, _, _ = measured(
                [os.pathsep.join(map(str, logs[: len(logs) // 2])), "import", f"sqlite:///{db}"]
            )
            s_all = rows / imported
            rate = (rows - half) / (s_all - s_half)
            judged = (
                f"each further row ({half:,} rows took {s_half:.2f} s, {rows:,} took "
                f"{s_all:.2f} s; start-up {s_half - half / rate:.2f} s)"
            )
            say(
                f"import, start-up taken out: {rate:,.0f} rows/s; a 1,000-GPU week at 1 s: "
                f"{WEEK_ROWS / rate / 60:.1f} min"
            )
        verdict = "PASS" if rate >= GOAL_ROWS_PER_S else "FAIL"
        say(
            f"{verdict}  import >= {GOAL_ROWS_PER_S:,} rows/s: {rate:,.0f} rows/s "
            f"({rate / GOAL_ROWS_PER_S:.3f}x the goal), {judged}"
        )
        if args.docs:
            sys.path.insert(0, str(ROOT))
            from bench.docs_block import write_block

            command = " ".join(["bench/import_scale.py", *sys.argv[1:]])
            write_block(
                "bench/import_scale.py",
                f"`{command}`, {datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} cores, "
                f"{rows:,} rows in {len(logs)} file(s), {size / 2**20:.0f} MiB (written by the "
                "bench; seconds are wall time, CPU seconds those of the process and its "
                "readers, peak the largest process's resident memory):\n\n```text\n"
                + "\n".join(said)
                + "\n```",
            )
            print("wrote its block in docs/benchmarks.md")
        if args.prometheus:
            (d / "prom").mkdir(exist_ok=True)
            prometheus(d / "prom", args.prom_gpus, args.prom_hours)


if __name__ == "__main__":
    main()
