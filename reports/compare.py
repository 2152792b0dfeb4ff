"""``gpu-kpi compare A B`` and ``gpu-kpi gate``: runs side by side, and an efficiency gate for
CI (:mod:`reports.kpi.comparison`).

A side is a run id, a job key (its runs of the last 26 weeks), a job key and dates
(``resnet-nightly@2026-10-01..2026-11-01``, or weeks: ``resnet-nightly@2026-W40..2026-W44``,
the end excluded), or the runs before or after the job's last mark (``resnet-nightly@before``,
``resnet-nightly@after``: ``gpu-kpi mark``). The gate's candidate is ``--run ID`` or the
newest run of ``--job-key``; its baseline the ``--last`` N runs before it of the same key on
``--branch`` (the ``git_branch`` the tracker recorded from the CI's variables), or a JSON file
(``--baseline FILE``, as ``--write-baseline`` writes it).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reports.cli_support import _open_store, _settings, printable

if TYPE_CHECKING:
    from reports.kpi.comparison import Baseline, GateLine, Row, Side

BASELINE_SCHEMA = "gpu-kpi.gate-baseline/1"
GATE_METRICS = ("tokens_per_s", "samples_per_s", "mfu", "usd_per_unit")
"""What the gate checks, where the run and its baseline have it: throughput (tokens/s, and
samples/s), MFU and the cost per unit of work."""


# -- reading the sides ---------------------------------------------------------------------------


def _history(store: Any, now: datetime) -> Any:
    """The usable runs of the last 26 weeks (up to ``now``), with their job keys, finished."""
    from reports.data.gputime import usable_runs
    from reports.data.scans import SampleScans
    from reports.kpi.jobkeys import job_keys
    from reports.kpi.savings import HISTORY_WEEKS

    runs, _ = usable_runs(SampleScans(store), since=now - timedelta(weeks=HISTORY_WEEKS), until=now)
    runs = runs[runs["status"] != "running"]
    return runs.assign(job_key=job_keys(runs["name"], runs["links"]).to_numpy())


def _dates(text: str, *, end: bool) -> datetime:
    from reports.errors import UsageError
    from reports.weeks import WeekError, parse_week, week_bounds

    if "-W" in text.upper():
        try:
            bounds = week_bounds(*parse_week(text.upper()), UTC)
        except WeekError as e:
            raise UsageError(str(e)) from None
        return bounds[0]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"expected a date (YYYY-MM-DD) or a week (YYYY-Www) in a range, got {text!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def select(spec: str, history: Any, store: Any) -> tuple[str, Any]:
    """The runs a side names: a run id (any age), else a job key, else ``KEY@FROM..TO``.

    Raises:
        UsageError: Nothing matches, with what would have.
    """
    from reports.errors import UsageError
    from reports.kpi import runs_frame

    record = store.get_run(spec)
    if record is not None:
        return f"run {spec}", runs_frame([record])
    key, at, span = spec.partition("@")
    runs = history[history["job_key"] == key]
    if at and span in ("before", "after"):
        from reports.data.marks import read_marks

        marks = [m for m in read_marks(store) if m.job_key == key]
        if not marks:
            raise UsageError(f'{spec!r}: {key!r} has no mark (gpu-kpi mark {key} "what changed")')
        last = marks[-1].at
        prev = marks[-2].at if len(marks) > 1 else None
        started = runs["started_at"]
        if span == "after":
            runs = runs[started >= last]
        else:
            runs = runs[(started < last) & (started >= prev if prev is not None else True)]
    elif at:
        start_text, dots, end_text = span.partition("..")
        if not dots or not start_text or not end_text:
            raise UsageError(f"{spec!r}: a range is KEY@FROM..TO, e.g. {key}@2026-W40..2026-W44")
        lo, hi = _dates(start_text, end=False), _dates(end_text, end=True)
        started = runs["started_at"]
        runs = runs[(started >= lo) & (started < hi)]
    if not len(runs):
        raise UsageError(
            f"{spec!r}: no run with that id and no finished run of that job key in the last 26 "
            "weeks (gpu-kpi report lists the recurring jobs; gpu-kpi runs the runs)"
        )
    return (f"{key} ({len(runs)} runs)" if not at else f"{spec} ({len(runs)} runs)"), runs


# -- compare -------------------------------------------------------------------------------------


def _fmt(v: float | None, metric: str) -> str:
    if v is None:
        return "—"
    if metric == "usd_per_unit":
        from reports.render.fmt import fmt_unit_usd

        return fmt_unit_usd(v)
    if metric == "mfu":
        return f"{100 * v:.1f}%"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.2f}"


def _signed(v: float) -> str:
    """``+54.4``, ``−35.2`` (a typographic minus, as the report writes it)."""
    return f"{'−' if v < 0 else '+'}{abs(v):.1f}"


def _change(r: Row) -> str:
    return "—" if r.change_pct is None else f"{_signed(r.change_pct)}%"


def _noise(r: Row, a: Side, b: Side) -> str:
    if r.beyond_noise is None:
        return f"noise unknown ({a.runs} and {b.runs} runs; {_min_runs()} a side for a band)"
    assert r.low_pct is not None and r.high_pct is not None
    band = f"95%: {_signed(r.low_pct)}…{_signed(r.high_pct)}%"
    return ("beyond noise" if r.beyond_noise else "within noise") + f" ({band})"


def _min_runs() -> int:
    from reports.kpi.comparison import MIN_RUNS

    return MIN_RUNS


def compare_document(a: Side, b: Side, rows: Sequence[Row], unit: str) -> dict[str, Any]:
    """The comparison as JSON."""
    from reports.kpi.comparison import as_plain, mode

    return {
        "schema": "gpu-kpi.compare/1",
        "a": {"label": a.label, "runs": list(a.run_ids), "verdict": mode(a.verdicts)},
        "b": {"label": b.label, "runs": list(b.run_ids), "verdict": mode(b.verdicts)},
        "unit": unit,
        "metrics": as_plain(list(rows)),
    }


def compare_text(a: Side, b: Side, rows: Sequence[Row], *, markdown: bool) -> str:
    """The comparison as a table (Markdown, or plain text)."""
    from reports.kpi.comparison import mode

    head = ["metric", a.label, b.label, "change", "noise"]
    body = [
        [r.label, _fmt(r.a, r.metric), _fmt(r.b, r.metric), _change(r), _noise(r, a, b)]
        for r in rows
    ]
    body.append(["verdict", mode(a.verdicts) or "—", mode(b.verdicts) or "—", "", ""])
    if markdown:
        cells = [[c.replace("|", "\\|") for c in row] for row in [head, *body]]
        lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [head, *body]
    )


def cmd_compare(args: argparse.Namespace) -> int:
    from reports.kpi.comparison import compare, side_of

    settings = _settings(args)
    now = datetime.now(UTC)
    with _open_store(settings.store, create=False) as store:
        history = _history(store, now)
        (la, ra), (lb, rb) = (select(s, history, store) for s in (args.a, args.b))
    a = side_of(la, ra, prices=settings.prices, owned=settings.owned)
    b = side_of(lb, rb, prices=settings.prices, owned=settings.owned)
    rows, unit = compare(a, b)
    if args.format == "json":
        print(json.dumps(compare_document(a, b, rows, unit), indent=2))
    else:
        _print(compare_text(a, b, rows, markdown=args.format == "markdown"))
    return 0


# -- gate ----------------------------------------------------------------------------------------


def _unit_of_run(side: Side) -> tuple[str, str, float]:
    from reports.kpi.comparison import common_unit

    return common_unit(side, side)


def read_baseline(path: Path) -> tuple[str, dict[str, Baseline]]:
    """A baseline file (:data:`BASELINE_SCHEMA`): its unit and its metrics.

    Raises:
        UsageError: It cannot be read, or is not one.
    """
    import math

    from reports.errors import UsageError
    from reports.kpi.comparison import Baseline

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"--baseline {path}: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != BASELINE_SCHEMA:
        raise UsageError(f"--baseline {path}: not a gpu-kpi baseline ({BASELINE_SCHEMA})")
    out = {}
    for key, m in (doc.get("metrics") or {}).items():
        ok = (
            key in GATE_METRICS
            and isinstance(m, dict)
            and isinstance(m.get("mean"), int | float)
            and math.isfinite(m["mean"])
            and isinstance(m.get("runs"), int)
            and m["runs"] >= 1
            and (m.get("sd") is None or isinstance(m.get("sd"), int | float))
        )
        if not ok:
            raise UsageError(f"--baseline {path}: metric {key!r} is not mean, sd, runs")
        out[key] = Baseline(mean=float(m["mean"]), sd=m.get("sd"), runs=m["runs"])
    if not out:
        raise UsageError(f"--baseline {path}: no metric")
    return str(doc.get("unit") or ""), out


def gate_markdown(
    title: str, lines: Sequence[GateLine], base_label: str, threshold: float, unit: str
) -> str:
    failed = [g for g in lines if g.fails]
    status = "fails" if failed else "passes"
    out = [f"### gpu-kpi gate: {title} {status}", ""]
    out += [f"- {g.sentence(threshold)}" for g in lines if g.fails or g.regression_pct > 0]
    if len(out) == 2:
        out.append(f"- no regression beyond the {threshold:g}% gate")
    out += [
        "",
        f"| metric | baseline ({base_label}) | this run | change | noise | gate |",
        "|---|---|---|---|---|---|",
    ]
    for g in lines:
        label = f"$ per {unit}" if g.metric == "usd_per_unit" else g.label
        noise = "unknown" if g.noise_pct is None else f"±{g.noise_pct:.1f}%"
        out.append(
            f"| {label} | {_fmt(g.baseline.mean, g.metric)} | {_fmt(g.value, g.metric)} | "
            f"{'−' if g.change_pct < 0 else '+'}{abs(g.change_pct):.1f}% | {noise} | "
            f"{'fails' if g.fails else 'passes'} |"
        )
    return "\n".join(out).replace("\x00", "")


def cmd_gate(args: argparse.Namespace) -> int:
    from reports.errors import UsageError
    from reports.kpi.comparison import baselines_of, gate, run_values, side_of
    from tracker.scheduler import GIT_BRANCH_LINK

    if (args.run is None) == (args.job_key is None):
        raise UsageError("gate needs the run to check: --run ID or --job-key KEY (its newest run)")
    if not 0 <= args.threshold < 1000:
        raise UsageError(f"--threshold {args.threshold}: a percentage from 0")
    settings = _settings(args)
    now = datetime.now(UTC)
    with _open_store(settings.store, create=False) as store:
        history = _history(store, now)
        if args.run is not None:
            label, run = select(args.run, history, store)
            if len(run) != 1:
                raise UsageError(f"--run {args.run}: no such run")
            key = (
                str(history.loc[history["id"] == args.run, "job_key"].iloc[0])
                if (history["id"] == args.run).any()
                else ""
            )
        else:
            key = " ".join(args.job_key.split())
            of_key = history[history["job_key"] == key]
            if not len(of_key):
                raise UsageError(f"--job-key {key!r}: no finished run in the last 26 weeks")
            run = of_key.tail(1)
            label = f"run {run['id'].iloc[0]}"
    candidate = side_of(label, run, prices=settings.prices, owned=settings.owned)
    unit = _unit_of_run(candidate)
    if args.baseline is not None and args.baseline != "runs":
        base_unit, baselines = read_baseline(Path(args.baseline))
        base_label = f"{Path(args.baseline).name}"
        if "usd_per_unit" in baselines and base_unit != unit[0]:
            baselines.pop("usd_per_unit")  # another unit: not comparable
    else:
        if not key:
            raise UsageError("the run has no job key: give --baseline FILE")
        before = history[
            (history["job_key"] == key)
            & (history["id"] != run["id"].iloc[0])
            & (history["started_at"] < run["started_at"].iloc[0])
        ]
        branch = before["links"].map(
            lambda lk: lk.get(GIT_BRANCH_LINK) if isinstance(lk, Mapping) else None
        )
        if args.branch:
            before = before[branch == args.branch]
        before = before.tail(args.last)
        if not len(before):
            raise UsageError(
                f"no baseline: no earlier finished run of {key!r}"
                + (f" on branch {args.branch!r}" if args.branch else "")
                + " in the last 26 weeks (--branch '' takes any branch; --baseline FILE a file)"
            )
        base = side_of(key, before, prices=settings.prices, owned=settings.owned)
        baselines = baselines_of(base, unit, GATE_METRICS)
        base_label = f"{base.runs} run{'s' if base.runs != 1 else ''}" + (
            f" on {args.branch}" if args.branch else ""
        )
        if args.write_baseline:
            _write_baseline(Path(args.write_baseline), key, unit[0], baselines)
    lines = gate(run_values(candidate, unit, GATE_METRICS), baselines, threshold_pct=args.threshold)
    if not lines:
        raise UsageError("nothing to gate: the run and its baseline share no metric")
    title = f"{key or label}"
    md = gate_markdown(title, lines, base_label, args.threshold, unit[0])
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(md + "\n\n")
        except OSError as e:
            print(
                printable(f"gpu-kpi: GITHUB_STEP_SUMMARY not written: {e}"),
                file=__import__("sys").stderr,
            )
    if args.format == "json":
        from reports.kpi.comparison import as_plain

        print(
            json.dumps(
                {
                    "schema": "gpu-kpi.gate/1",
                    "job_key": key,
                    "run": run["id"].iloc[0],
                    "threshold_pct": args.threshold,
                    "unit": unit[0],
                    "passes": not any(g.fails for g in lines),
                    "lines": as_plain(lines),
                },
                indent=2,
            )
        )
    else:
        _print(md)
    return 1 if any(g.fails for g in lines) else 0


def _print(text: str) -> None:
    """Lines of text, each with a run's or key's control characters shown as ``\\xNN``."""
    for line in text.splitlines():
        print(printable(line))


def _write_baseline(path: Path, key: str, unit: str, baselines: Mapping[str, Baseline]) -> None:
    doc = {
        "schema": BASELINE_SCHEMA,
        "job_key": key,
        "unit": unit,
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "metrics": {k: {"mean": b.mean, "sd": b.sd, "runs": b.runs} for k, b in baselines.items()},
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def add_compare_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    compare = add(
        "compare",
        cmd_compare,
        "two runs, job keys or date ranges of a job side by side: throughput, step time, data "
        "wait, utilization, SM activity, MFU, $ per unit of work, verdict; each difference "
        "beyond the runs' noise or not",
    )
    compare.add_argument(
        "a",
        metavar="A",
        help="a run id, a job key, KEY@FROM..TO (dates or weeks), or KEY@before / KEY@after "
        "(its runs before and after its last mark)",
    )
    compare.add_argument("b", metavar="B", help="the same, compared with A")
    compare.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    gate = add(
        "gate",
        cmd_gate,
        "an efficiency gate for CI: a run against its baseline (the last runs of its job key "
        "on --branch, or --baseline FILE); exit 1 when throughput, MFU or $ per unit of work "
        "regress beyond --threshold and the noise; Markdown to $GITHUB_STEP_SUMMARY",
    )
    which = gate.add_mutually_exclusive_group()
    which.add_argument("--run", metavar="ID", help="the run to check")
    which.add_argument("--job-key", metavar="KEY", help="check the newest run of KEY")
    gate.add_argument(
        "--baseline", metavar="FILE", help="a baseline file (--write-baseline) instead of runs"
    )
    gate.add_argument(
        "--branch",
        default="main",
        help="the baseline's runs are those of this branch (default main; '' any)",
    )
    gate.add_argument("--last", type=int, default=10, metavar="N", help="baseline runs (10)")
    gate.add_argument(
        "--threshold", type=float, default=5.0, metavar="PCT", help="the regression allowed (5)"
    )
    gate.add_argument("--write-baseline", metavar="FILE", help="also write the baseline's figures")
    gate.add_argument("--format", choices=("markdown", "json"), default="markdown")
