"""The speed guard CI runs: a 100,800-run week reported, each step's CPU time against DuckDB
computing the week's figures from the same rows in the same process, held to the ratios kept
in ``bench/baseline.json``.

A step that gets slower fails the guard when its CPU time passes twice its kept ratio × the
reference's CPU time here (and by more than :data:`SLACK_S`, so that a step of a few
milliseconds does not fail on noise): the machine's own speed cancels out, a step's own
regression does not. Numbers at full scale (a million runs, imports) are
``bench/report_scale.py`` and ``bench/import_scale.py``; this is their fast sentinel.

Then the nvidia-smi import (:data:`IMPORT_STEPS`): two logs of 64 GPUs read every second for
6 hours (2,764,800 rows, 280 MiB; written untimed) imported into a new SQLite store in this
process, as ``gpu-kpi import nvidia-smi`` does (one reading process), each step's CPU seconds
against DuckDB's ``read_csv`` of the same logs and the same minute arithmetic in SQL
(``bench/import_scale.py``'s reference), held to the ratios kept beside the report's; their
minute rows' covered seconds and utilization × seconds must agree.

The week: 10 GPUs, each cut into one-minute single-GPU runs (``bench/scale_data.py``'s
``split1``: 100,800 runs, as many minute samples) plus 11 earlier weeks of run summaries, in
a SQLite store built here (untimed). The report is made as ``gpu-kpi report`` makes it
(:func:`reports.build.build`, every format, the earlier weeks worked out from rows each time),
``--repeat`` times: each step's fastest. Steps are functions of the report's path, timed where
they are called (:data:`STEPS`); a step's time includes the steps it calls. Two steps the
report runs side by side (the runs and the rollups' sums, the CSV and the page:
:data:`IN_TURN`) run in turn here:
a process's CPU clock cannot tell two threads apart, and each would count the other's work.

    .venv/bin/python bench/smoke.py [--repeat 2] [--dir DIR]
        [--write-baseline] [--slow MODULE:FUNCTION=FACTOR]

``--write-baseline`` records this run's ratios as the new baseline (after a change that is
meant to make a step slower or faster: say why in the commit). ``--slow`` plants a slowdown
(the step's function spins for ``FACTOR - 1`` times its own CPU time after each call): the
guard must fail on it. Exit status 1 when a step passes its limit or the figures disagree
with DuckDB's.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import scale_data as data  # noqa: E402
from bench.docs_block import write_block  # noqa: E402
from bench.report_scale import (  # noqa: E402
    AGREE,
    HEADLINE,
    forget_kept_weeks,
    prepare,
    rel_diff,
)

BASELINE = ROOT / "bench" / "baseline.json"
IN_TURN = ("reports.gputime", "reports.archive")
"""Modules whose thread pool runs two steps side by side (the runs and the rollups' sums; the
CSV and the page): timed, their calls run in turn."""
GPUS, CASE = 10, "split1"
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)  # 2026-W48 complete
LIMIT = 2.0
"""A step fails at this many times its kept ratio."""
SLACK_S = 0.15
"""...and only when over its kept time (ratio × this run's reference) by this much CPU."""

STEPS: tuple[tuple[str, str], ...] = (
    ("report", "reports.build:build"),
    ("read runs", "reports.gputime:usable_runs"),
    ("rollup sums", "reports.gputime:_from_rollups"),
    ("gpu-time", "reports.kpi.gputime:combine_gpu_time"),
    ("week kpis", "reports.kpi.weekly:kpis_of_gpu_time"),
    ("run weeks", "reports.kpi.weekly:run_weeks"),
    ("waste by cause", "reports.kpi.causes:waste_by_cause"),
    ("section fix-first", "reports.sections.first:read"),
    ("section budgets", "reports.sections.budgets:read"),
    ("section scheduler", "reports.sections.scheduler:read"),
    ("section savings", "reports.sections.savings:read"),
    ("document", "reports.render.exports:to_dict"),
    ("json", "reports.render.exports:to_json"),
    ("csv", "reports.render.exports:CsvExport.write_to"),
    ("charts", "reports.render.charts:charts"),
    ("html", "reports.render.html:render_html"),
    ("email", "reports.render.email:build_email"),
)
"""(step, ``module:function``) timed in the report; ``Class.method`` for a method."""

IMPORT_STEPS: tuple[tuple[str, str], ...] = (
    ("nvidia-smi import", "reports.imports.nvsmi:import_nvsmi"),
    ("nvidia-smi read", "reports.imports.nvsmi:read_nvsmi"),
    ("nvidia-smi parse", "reports.imports.nvsmi_fast:parse"),
    ("nvidia-smi write", "reports.imports.play:write_imported"),
)
"""(step, ``module:function``) timed in the nvidia-smi import, each against DuckDB's
``read_csv`` and minute SQL of the same logs (``bench/import_scale.py``'s reference)."""
NVSMI_GPUS, NVSMI_HOURS, NVSMI_FILES = 64, 6, 2
"""The import's logs: 2 of 64 GPUs read every second for 6 hours, 2,764,800 rows."""


# -- timing the steps where they are called --------------------------------------------------
def cpu() -> float:
    """CPU seconds of this process and of the processes it started and waited for (the runs'
    read by ADBC's driver runs in one)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


class InTurn:
    """A stand-in for ``ThreadPoolExecutor``: each call runs at once on the caller's thread, so
    that its CPU seconds are its own (the same work, done in turn)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> InTurn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as e:  # as a pool's future holds it, raised by result()
            done.set_exception(e)
        return done

    def map(self, fn: Callable[..., Any], *iterables: Any) -> Iterator[Any]:
        return iter(list(map(fn, *iterables)))


def _resolve(target: str) -> tuple[Any, str, Any]:
    """``module:function`` (or ``module:Class.method``): the object holding it, its name
    there, and the function."""
    import importlib

    module, _, path = target.partition(":")
    owner: Any = importlib.import_module(module)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    return owner, name, getattr(owner, name)


@contextmanager
def timed_steps(
    steps: tuple[tuple[str, str], ...], slow: dict[str, float]
) -> Iterator[dict[str, float]]:
    """Every step's function wrapped, wherever a module bound it by name (``from m import
    f``) or the registry of sections holds it: the CPU seconds of its calls (:func:`cpu`)
    summed per step, in the dict yielded. ``slow``: target → factor, a planted slowdown."""
    import dataclasses
    import importlib

    from reports import sections

    spent: dict[str, float] = defaultdict(float)
    undo: list[Callable[[], None]] = []

    def wrap(step: str, target: str, f: Callable[..., Any]) -> Callable[..., Any]:
        factor = slow.get(target, 1.0)

        @functools.wraps(f)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = cpu()
            try:
                return f(*args, **kwargs)
            finally:
                used = cpu() - t0
                if factor > 1:  # the planted slowdown: spin on the CPU
                    end = cpu() + (factor - 1) * used
                    while cpu() < end:
                        pass
                spent[step] += cpu() - t0

        return timed

    def swap(owner: Any, name: str, new: Any) -> None:
        old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, new)
        undo.append(lambda: setattr(owner, name, old))

    try:
        for pooled in IN_TURN:
            swap(importlib.import_module(pooled), "ThreadPoolExecutor", InTurn)
        for step, target in steps:
            owner, name, f = _resolve(target)
            new = wrap(step, target, f)
            swap(owner, name, new)
            if isinstance(owner, type):
                continue
            for module in list(sys.modules.values()):  # bound by name elsewhere
                if module is not owner and getattr(module, "__dict__", {}).get(name) is f:
                    swap(module, name, new)
            if any(s.read is f for s in sections.SECTIONS):
                swap(
                    sections,
                    "SECTIONS",
                    tuple(
                        dataclasses.replace(s, read=new) if s.read is f else s
                        for s in sections.SECTIONS
                    ),
                )
        yield spent
    finally:
        for u in reversed(undo):
            u()


# -- the week --------------------------------------------------------------------------------
DataFiles = tuple[Path, Path]
"""The week's samples and runs in Parquet (what DuckDB reads)."""


def make_week(d: Path) -> tuple[str, DataFiles]:
    """The store (SQLite, rollups built) and the Parquet DuckDB reads."""
    samples, runs = d / "samples.parquet", d / "runs.parquet"
    data.write_parquet(GPUS, CASE, samples, runs)
    db = d / "store.db"
    data.load_sqlite(db, GPUS, CASE, samples)
    url = f"sqlite:///{db}"
    prepare(url)
    return url, (samples, runs)


def report_once(url: str, out: Path) -> dict[str, Any]:
    """``gpu-kpi report`` of the week, every format, no week kept: its JSON headline."""
    from reports.build import build
    from reports.request import Request

    forget_kept_weeks(url)
    shutil.rmtree(out, ignore_errors=True)
    req = Request(week="2026-W48", tz=UTC, formats=("html", "email", "json", "csv"))
    written = build(url, req, out, now=NOW)
    (doc,) = [p for p in written if p.name == "2026-W48.json"]
    return json.loads(doc.read_text())["headline"]


def reference_cpu(files: DataFiles, repeat: int) -> tuple[float, dict[str, Any]]:
    """DuckDB's figures of the week (``bench/scale_data.py``'s reference) in this process:
    its fastest CPU seconds of ``repeat`` and the figures."""
    best, ref = float("inf"), {}
    for _ in range(repeat):
        t0 = time.process_time()
        ref = data.reference(*files)
        best = min(best, time.process_time() - t0)
    return best, ref


def measure(url: str, files: DataFiles, d: Path, repeat: int, slow: dict[str, float]) -> dict:
    """Each step's fastest CPU seconds over ``repeat`` reports, DuckDB's, and how far the
    headlines differ."""
    ref_s, ref = reference_cpu(files, 3)
    best: dict[str, float] = {}
    head: dict[str, Any] = {}
    for _ in range(repeat):
        # DuckDB's fastest is taken beside each report too: a slow minute of a shared machine
        # slows both, not one side of the ratio
        ref_s = min(ref_s, reference_cpu(files, 3)[0])
        with timed_steps(STEPS, slow) as spent:
            head = report_once(url, d / "out")
        for step, s in spent.items():
            best[step] = min(best.get(step, s), s)
    diff = max(rel_diff(head[k], ref[k]) for k in HEADLINE)
    return {"reference_cpu_s": ref_s, "steps": best, "max_rel_diff": diff}


def make_logs(d: Path) -> list[Path]:
    """The import's nvidia-smi logs (:data:`NVSMI_FILES`, untimed): the second the first's
    readings of other GPUs (their uuids renamed), written in a fraction of the time."""
    from bench.import_scale import write_log_quick

    first = d / "nvsmi-0.csv"
    write_log_quick(first, NVSMI_GPUS, NVSMI_HOURS)
    logs = [first]
    for n in range(1, NVSMI_FILES):
        logs.append(d / f"nvsmi-{n}.csv")
        logs[-1].write_bytes(first.read_bytes().replace(b"-bench,", f"-bench{n},".encode()))
    return logs


def nvsmi_sums(samples: Any) -> tuple[int, float, float]:
    """Minute rows, Σ covered seconds and Σ utilization × seconds of an import's samples."""
    covered = sum(r.covered_s or 0.0 for r in samples)
    util_s = sum((r.util_pct or 0.0) * (r.covered_s or 0.0) for r in samples)
    return len(samples), covered, util_s


def measure_import(logs: list[Path], d: Path, slow: dict[str, float]) -> dict:
    """The nvidia-smi import of ``logs`` into a new SQLite store in this process (one reading
    process: CPU seconds are this process's), each step's CPU seconds; DuckDB's ``read_csv``
    and minute SQL of the same logs, its CPU seconds; and how far their minute sums
    differ."""
    import duckdb

    from bench.import_scale import minutes_sql
    from reports.imports import nvsmi

    paths = [str(p) for p in logs]

    def reference() -> tuple[float, tuple[int, float, float]]:
        # one thread, as our import reads (two spin on a 2-core machine: ±15% CPU a run)
        t0 = time.process_time()
        con = duckdb.connect()
        con.execute("SET threads = 1")
        row = con.execute(minutes_sql(), [paths]).fetchone()
        con.close()
        assert row is not None
        return time.process_time() - t0, (int(row[0]), float(row[1]), float(row[2]))

    ref_s, ref = reference()
    db = d / "import.db"
    db.unlink(missing_ok=True)
    with timed_steps(IMPORT_STEPS, slow) as spent:
        done = nvsmi.import_nvsmi(f"sqlite:///{db}", paths, workers=1)
    ref_s = min(ref_s, reference()[0])  # its faster of two, one each side of ours
    ours = nvsmi_sums(done.samples)
    diff = max(rel_diff(a, b) for a, b in zip(ours, ref, strict=True))
    return {"reference_cpu_s": ref_s, "steps": dict(spent), "max_rel_diff": diff, "rows": ours}


# -- the verdict -----------------------------------------------------------------------------
def judged(
    steps: tuple[tuple[str, str], ...], spent: dict[str, float], ref: float, kept: dict
) -> tuple[list[str], bool]:
    """A line per step of ``steps`` (its CPU seconds in ``spent``, against ``ref``, the
    reference's CPU seconds here, and its kept ratio in ``kept``) and whether each is within
    its limit (a step the baseline lacks is shown, not judged)."""
    lines, ok = [], True
    for step, _ in steps:
        s = spent.get(step)
        if s is None:
            lines.append(f"{step:<20} {'-':>8} {'-':>8} {'-':>8} {'-':>8}  not called")
            ok = False
            continue
        r = kept.get(step)
        if r is None:
            lines.append(f"{step:<20} {s:8.3f} {s / ref:8.2f} {'-':>8} {'-':>8}  new")
            continue
        limit = max(LIMIT * r * ref, r * ref + SLACK_S)
        good = s <= limit
        ok &= good
        lines.append(
            f"{step:<20} {s:8.3f} {s / ref:8.2f} {r:8.2f} {limit:8.3f}  "
            + ("ok" if good else f"FAIL: {s / (r * ref):.1f}x its kept time")
        )
    return lines, ok


def verdict(m: dict, baseline: dict) -> tuple[list[str], bool]:
    """The table's lines and whether every step is within its limit: the report's steps
    against DuckDB's week, then the nvidia-smi import's (``m["import"]``) against DuckDB's
    read of the same logs."""
    ref = m["reference_cpu_s"]
    lines = [
        f"DuckDB reference: {ref:.3f} s CPU (baseline {baseline.get('reference_cpu_s', 0):.3f} s)",
        f"{'step':<20} {'cpu_s':>8} {'ratio':>8} {'kept':>8} {'limit_s':>8}  verdict",
    ]
    got, ok = judged(STEPS, m["steps"], ref, baseline.get("ratios", {}))
    lines += got
    agree = m["max_rel_diff"] <= AGREE
    ok &= agree
    lines.append(
        f"headline vs DuckDB: max relative difference {m['max_rel_diff']:.1e} "
        + ("ok" if agree else f"FAIL (> {AGREE:g})")
    )
    imp = m.get("import") or {"reference_cpu_s": 0.0, "steps": {}, "max_rel_diff": 0.0}
    ref = imp["reference_cpu_s"]
    lines.append(
        f"DuckDB read_csv + minute SQL: {ref:.3f} s CPU (baseline "
        f"{baseline.get('import_reference_cpu_s', 0):.3f} s)"
    )
    got, good = judged(IMPORT_STEPS, imp["steps"], ref, baseline.get("import_ratios", {}))
    lines += got
    agree = imp["max_rel_diff"] <= AGREE
    ok &= good and agree
    lines.append(
        f"minute sums vs DuckDB: max relative difference {imp['max_rel_diff']:.1e} "
        + ("ok" if agree else f"FAIL (> {AGREE:g})")
    )
    return lines, ok


# -- the docs' table ----------------------------------------------------------------------------
def docs_table(baseline: dict) -> str:
    """The kept baseline as docs/benchmarks.md shows it (its block ``bench/smoke.py``;
    ``--write-baseline`` writes it there, a test holds it equal)."""
    lines = []
    for steps, ratios, ref, against in (
        (STEPS, "ratios", baseline["reference_cpu_s"], "DuckDB"),
        (
            IMPORT_STEPS,
            "import_ratios",
            baseline["import_reference_cpu_s"],
            "DuckDB read_csv + minute SQL",
        ),
    ):
        if lines:
            lines.append("")
        lines += [f"| step | CPU | × {against} ({ref:.3f} s) |", "|---|---|---|"]
        for step, target in steps:
            r = baseline[ratios][step]
            lines.append(f"| {step} (`{target.split(':')[1]}`) | {r * ref:.3f} s | {r:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2, help="reports made: each step's fastest")
    ap.add_argument("--dir", help="work folder (default: a temporary one, removed after)")
    ap.add_argument("--write-baseline", action="store_true", help="record this run's ratios")
    ap.add_argument(
        "--slow",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION=FACTOR",
        help="plant a slowdown of one step's function (the guard must fail)",
    )
    args = ap.parse_args(argv)
    slow = {}
    for s in args.slow:
        target, _, factor = s.rpartition("=")
        targets = [t for _, t in (*STEPS, *IMPORT_STEPS)]
        if target not in targets:
            ap.error(f"--slow {s}: not a step's function ({', '.join(targets)})")
        slow[target] = float(factor)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.dir or tmp)
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        url, files = make_week(d)
        print(
            f"{data.week_run_count(GPUS, CASE):,} runs in the week; store built in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        m = measure(url, files, d, args.repeat, slow)
        t0 = time.perf_counter()
        logs = make_logs(d)
        print(
            f"{m['steps'].get('report', 0):.1f} s CPU the report; nvidia-smi logs of "
            f"{NVSMI_FILES * NVSMI_GPUS * NVSMI_HOURS * 3600:,} rows written in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        m["import"] = measure_import(logs, d, slow)
    if args.write_baseline:
        ratios = {k: round(v / m["reference_cpu_s"], 3) for k, v in m["steps"].items()}
        imp = m["import"]
        import_ratios = {k: round(v / imp["reference_cpu_s"], 3) for k, v in imp["steps"].items()}
        BASELINE.write_text(
            json.dumps(
                {
                    "reference_cpu_s": round(m["reference_cpu_s"], 4),
                    "ratios": ratios,
                    "import_reference_cpu_s": round(imp["reference_cpu_s"], 4),
                    "import_ratios": import_ratios,
                },
                indent=2,
            )
            + "\n"
        )
        write_block("bench/smoke.py", docs_table(json.loads(BASELINE.read_text())))
        print(f"wrote {BASELINE.relative_to(ROOT)} and its table in docs/benchmarks.md")
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    lines, ok = verdict(m, baseline)
    print("\n".join(lines))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
