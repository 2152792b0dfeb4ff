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
        [--nounits] [--files 1] [--no-exact] [--prometheus --prom-gpus 100 --prom-hours 24]
"""

from __future__ import annotations

import argparse
import json
import os
import random
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


_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from reports.imports.nvsmi import import_nvsmi, read_nvsmi
t0 = time.perf_counter()
import os
files = sys.argv[2].split(os.pathsep)
if sys.argv[3] in ("read", "exact"):
    done = read_nvsmi(files, fast=sys.argv[3] == "read", workers=None)
else:
    done = import_nvsmi(sys.argv[4], files, workers=None)
s = time.perf_counter() - t0
covered = sum(r.covered_s or 0.0 for r in done.samples)
util_s = sum((r.util_pct or 0.0) * (r.covered_s or 0.0) for r in done.samples)
print(json.dumps({"s": s, "minutes": len(done.samples), "covered_s": covered, "util_s": util_s}))
"""

_DUCKDB_CHILD = """
import json, os, sys, time
t0 = time.perf_counter()
import duckdb
files = sys.argv[1].split(os.pathsep)
con = duckdb.connect()
con.execute("SET threads = 2")
names = ["timestamp", "idx", "uuid", "name", "util", "mem", "total", "power"]
columns = ", ".join(f"'{n}': 'VARCHAR'" for n in names)
source = f"read_csv(?, header = true, delim = ',', quote = '', columns = {{{columns}}})"
def num(c):
    return f"TRY_CAST(split_part(trim({c}), ' ', 1) AS DOUBLE)"
sql = f'''
WITH r AS (
    SELECT trim(uuid) AS uuid,
        epoch(strptime(timestamp, '%Y/%m/%d %H:%M:%S.%g')) AS t,
        {num("util")} AS util, {num("mem")} AS mem, {num("power")} AS power
    FROM {source}),
l AS (SELECT *, t - LAG(t) OVER (PARTITION BY uuid ORDER BY t) AS dt FROM r),
g AS (SELECT uuid, median(dt) AS step FROM l GROUP BY uuid),
m AS (
    SELECT l.uuid, floor((t - dt) / 60) AS minute, SUM(dt) AS covered_s,
        SUM(util * dt) AS util_s, MAX(mem) AS mem, SUM(power * dt) / 3.6e6 AS kwh
    FROM l JOIN g USING (uuid) WHERE dt > 0 AND dt <= 3 * g.step GROUP BY ALL)
SELECT COUNT(*), SUM(covered_s), SUM(util_s) FROM m'''
rows = con.execute(sql, [files]).fetchone()
print(json.dumps({"s": time.perf_counter() - t0, "minutes": rows[0], "covered_s": rows[1],
                  "util_s": rows[2]}))
"""


def measured(args: list[str], child: str = _CHILD) -> tuple[float, int, float]:
    """(seconds inside, minute rows, peak GiB) of one child; its sums go in :data:`SUMS`."""
    ours = child is _CHILD
    argv = [sys.executable, "-c", child, *([str(ROOT)] if ours else []), *args]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as p:
        _, status, usage = os.wait4(p.pid, 0)
        out = p.stdout.read() if p.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"the import failed: {out}")
    r = json.loads(out)
    SUMS[args[1] if ours else "duckdb"] = (r["covered_s"], r["util_s"])
    return r["s"], r["minutes"], usage.ru_maxrss / 2**20


SUMS: dict[str, tuple[float, float]] = {}
"""What each child measured: (Σ covered seconds, Σ utilization × seconds) of its minutes."""


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
    ap.add_argument("--prometheus", action="store_true", help="also time the Prometheus import")
    ap.add_argument("--prom-gpus", type=int, default=100)
    ap.add_argument("--prom-hours", type=float, default=24.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.dir or tmp)
        d.mkdir(parents=True, exist_ok=True)
        logs = [d / f"nvsmi-{args.gpus}g-{args.hours:g}h-{n}.csv" for n in range(args.files)]
        t = time.perf_counter()
        rows = sum(
            write_log(
                log,
                args.gpus,
                args.hours,
                args.interval,
                units=not args.nounits,
                first_gpu=n * args.gpus,
            )
            for n, log in enumerate(logs)
        )
        size = sum(log.stat().st_size for log in logs)
        print(
            f"log: {rows:,} rows in {len(logs)} file(s), {size / 2**20:.1f} MiB "
            f"(written in {time.perf_counter() - t:.1f} s)"
        )
        log = os.pathsep.join(map(str, logs))
        db = d / "import.db"
        rates = {}
        runs = [("read", []), ("import", [f"sqlite:///{db}"])]
        for what, extra in ([] if args.no_exact else [("exact", [])]) + runs:
            db.unlink(missing_ok=True)
            s, minutes, gib = measured([log, what, *extra])
            rates[what] = rows / s
            print(
                f"{what:6s}: {s:6.2f} s, {rates[what]:>10,.0f} rows/s, {minutes:,} minute rows, "
                f"peak {gib:.2f} GiB; a 1,000-GPU week at 1 s: "
                f"{WEEK_ROWS / rates[what] / 3600:.1f} h"
            )
        try:
            import duckdb  # noqa: F401
        except ImportError:
            print("duckdb: not installed (pip install -e '.[bench]'): no reference")
        else:
            s, minutes, gib = measured([log], child=_DUCKDB_CHILD)
            rates["duckdb"] = rows / s
            pairs = zip(SUMS["read"], SUMS["duckdb"], strict=True)
            worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs)
            print(
                f"duckdb: {s:6.2f} s, {rates['duckdb']:>10,.0f} rows/s, {minutes:,} minute rows, "
                f"peak {gib:.2f} GiB (read_csv and the minute SQL: a reading covers the time "
                f"since its GPU's last, up to 3 median intervals); covered seconds and "
                f"utilization x seconds agree with the read to {worst:.1e}"
            )
            print(
                f"the import's rate is {rates['import'] / rates['duckdb']:.2f}x DuckDB's "
                f"(the read alone {rates['read'] / rates['duckdb']:.2f}x)"
            )
        if "exact" in rates:
            print(
                f"the vectorized read is {rates['read'] / rates['exact']:.1f}x the exact "
                "(sampler) path's rate on the same log"
            )
        rate, judged = rates["import"], "the whole import, its start-up included"
        if len(logs) >= 4 and len(logs) % 2 == 0:
            # half the files, then all: what each further row costs, the start-up (imports,
            # processes, the store's schema) taken out, as in a 1,000-GPU week's 10 minutes
            db.unlink(missing_ok=True)
            half = rows // 2
            s_half, _, _ = measured(
                [os.pathsep.join(map(str, logs[: len(logs) // 2])), "import", f"sqlite:///{db}"]
            )
            s_all = rows / rates["import"]
            rate = (rows - half) / (s_all - s_half)
            judged = (
                f"each further row ({half:,} rows took {s_half:.2f} s, {rows:,} took "
                f"{s_all:.2f} s; start-up {s_half - half / rate:.2f} s)"
            )
            print(
                f"import, start-up taken out: {rate:,.0f} rows/s; a 1,000-GPU week at 1 s: "
                f"{WEEK_ROWS / rate / 60:.1f} min"
            )
        verdict = "PASS" if rate >= GOAL_ROWS_PER_S else "FAIL"
        print(
            f"{verdict}  import >= {GOAL_ROWS_PER_S:,} rows/s: {rate:,.0f} rows/s "
            f"({rate / GOAL_ROWS_PER_S:.3f}x the goal), {judged}"
        )
        if args.prometheus:
            (d / "prom").mkdir(exist_ok=True)
            prometheus(d / "prom", args.prom_gpus, args.prom_hours)


if __name__ == "__main__":
    main()
