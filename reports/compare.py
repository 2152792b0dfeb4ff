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
    """The finished runs of the last 26 weeks (up to ``now``), with their job keys."""
    from reports.data.scans import SampleScans
    from reports.gputime import usable_runs
    from reports.kpi.jobkeys import job_keys
    from reports.kpi.savings import HISTORY_WEEKS

    runs, _ = usable_runs(SampleScans(store), since=now - timedelta(weeks=HISTORY_WEEKS), until=now)
    runs = runs[runs["status"] == "finished"]  # a failed or crashed run measures nothing
    return runs.assign(job_key=job_keys(runs["name"], runs["links"]).to_numpy())


def _dates(text: str) -> datetime:
    from reports.errors import UsageError
    from reports.weeks import WeekError, parse_moment

    try:
        return parse_moment(text, UTC)
    except WeekError as e:
        raise UsageError(f"a range's end: {e}") from None


def _marks_of(store: Any, key: str) -> list[Any]:
    from reports.data.marks import read_marks

    return [m for m in read_marks(store) if m.job_key == key]


def select(spec: str, history: Any, store: Any) -> tuple[str, Any]:
    """The runs a side names: a run id (any age), else ``KEY@before``/``KEY@after`` (the runs
    around the key's last mark), ``KEY@FROM..TO``, else a job key (which may hold an ``@``).

    Raises:
        UsageError: Nothing matches, with what would have.
    """
    from reports.errors import UsageError
    from reports.kpi import runs_frame

    record = store.get_run(spec)
    if record is not None:
        return f"run {spec}", runs_frame([record])
    key, at, span = spec.rpartition("@")
    ranged = bool(at) and (span in ("before", "after") or ".." in span)
    if not ranged:
        key = spec
    runs = history[history["job_key"] == key]
    if ranged and span in ("before", "after"):
        marks = _marks_of(store, key)
        if not marks:
            raise UsageError(f'{spec!r}: {key!r} has no mark (gpu-kpi mark {key} "what changed")')
        last = marks[-1].at
        prev = marks[-2].at if len(marks) > 1 else None
        started = runs["started_at"]
        if span == "after":
            runs = runs[started >= last]
        else:
            runs = runs[(started < last) & (started >= prev if prev is not None else True)]
    elif ranged:
        start_text, _, end_text = span.partition("..")
        if not start_text or not end_text:
            raise UsageError(f"{spec!r}: a range is KEY@FROM..TO, e.g. {key}@2026-W40..2026-W44")
        lo, hi = _dates(start_text), _dates(end_text)
        if hi <= lo:
            raise UsageError(f"{spec!r}: the range ends before it starts")
        started = runs["started_at"]
        runs = runs[(started >= lo) & (started < hi)]
    if not len(runs):
        raise UsageError(
            f"{spec!r}: no run with that id and no finished run of that job key"
            + (" in that range" if ranged else "")
            + " in the last 26 weeks (gpu-kpi report lists the recurring jobs; gpu-kpi runs the "
            "runs)"
        )
    return (f"{key} ({len(runs)} runs)" if not ranged else f"{spec} ({len(runs)} runs)"), runs


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
    if r.change_pct is not None:
        return f"{_signed(r.change_pct)}%"
    return "—" if r.a == r.b else "new"  # from 0: no change in %


def _noise(r: Row) -> str:
    from reports.kpi.comparison import MIN_RUNS

    if r.beyond_noise is None:
        if r.change_pct is None:
            return "no change in % (the first side's figure is 0)"
        return (
            f"noise unknown ({r.runs_a} and {r.runs_b} runs with it; {MIN_RUNS} a side for a band)"
        )
    assert r.low_pct is not None and r.high_pct is not None
    band = f"95%: {_signed(r.low_pct)}…{_signed(r.high_pct)}%"
    return ("beyond noise" if r.beyond_noise else "within noise") + f" ({band})"


def compare_document(a: Side, b: Side, rows: Sequence[Row], unit: str) -> dict[str, Any]:
    """The comparison as JSON."""
    from reports.kpi.comparison import as_plain
    from reports.kpi.savings import mode_of

    return {
        "schema": "gpu-kpi.compare/1",
        "a": {"label": a.label, "runs": list(a.run_ids), "verdict": mode_of(a.verdicts)},
        "b": {"label": b.label, "runs": list(b.run_ids), "verdict": mode_of(b.verdicts)},
        "unit": unit,
        "metrics": as_plain(list(rows)),
        "mfu_peaks": {"a": list(a.peaks), "b": list(b.peaks), "note": peaks_note(a, b)},
    }


def peaks_note(a: Side, b: Side) -> str | None:
    """What the MFU row is measured against, when the sides' runs do not share one peak:
    their MFUs are then shares of different denominators (another GPU, another dtype)."""
    if not a.peaks and not b.peaks:
        return None
    if len(a.peaks) == 1 and a.peaks == b.peaks:
        return None
    return (
        f"MFU against different peaks: {a.label} {'; '.join(a.peaks) or 'none'}, "
        f"{b.label} {'; '.join(b.peaks) or 'none'} (compare the throughput)"
    )


def compare_text(a: Side, b: Side, rows: Sequence[Row], *, markdown: bool) -> str:
    """The comparison as a table (Markdown, or plain text)."""
    from reports.kpi.savings import mode_of

    head = ["metric", a.label, b.label, "change", "noise"]
    body = [
        [r.label, _fmt(r.a, r.metric), _fmt(r.b, r.metric), _change(r), _noise(r)] for r in rows
    ]
    body.append(["verdict", mode_of(a.verdicts) or "—", mode_of(b.verdicts) or "—", "", ""])
    if a.peaks or b.peaks:  # MFU's denominator on each side
        body.append(["MFU's peak", _peak_cell(a), _peak_cell(b), "", ""])
    note = peaks_note(a, b)
    if markdown:
        cells = [[md(c) for c in row] for row in [head, *body]]  # a side's label is the user's
        lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
        return "\n".join(lines + ([f"\n{md(note)}"] if note else []))
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join(
        [
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in [head, *body]
        ]
        + ([note] if note else [])
    )


def _peak_cell(side: Side) -> str:
    """A side's MFU denominator: its one peak, or the first and how many others."""
    if not side.peaks:
        return "—"
    more = f" (+{len(side.peaks) - 1} others)" if len(side.peaks) > 1 else ""
    return side.peaks[0] + more


def cmd_compare(args: argparse.Namespace) -> int:
    from reports.kpi.comparison import compare, side_of

    settings = _settings(args)
    now = args.now
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


MAX_BASELINE_RUNS = 1_000_000


def read_baseline(path: Path) -> tuple[str, str, dict[str, Baseline]]:
    """A baseline file (:data:`BASELINE_SCHEMA`): its job key, unit and metrics.

    Raises:
        UsageError: It cannot be read, or is not one (a mean that is no positive number, a
            standard deviation that is no number from 0, a count of runs that is no whole
            number from 1).
    """
    import math

    from reports.errors import UsageError
    from reports.kpi.comparison import Baseline

    def number(v: object) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

    from reports.userfiles import read_file

    try:  # a FIFO or a device is refused before it is read: nothing waits on a writer
        doc = json.loads(read_file(path, flag="--baseline").decode("utf-8"))
    except ValueError as e:
        raise UsageError(f"--baseline {path}: {e}") from None
    except RecursionError:  # '[' * 100000: nested deeper than the parser goes
        raise UsageError(f"--baseline {path}: not a gpu-kpi baseline (nested too deep)") from None
    if not isinstance(doc, dict) or doc.get("schema") != BASELINE_SCHEMA:
        raise UsageError(f"--baseline {path}: not a gpu-kpi baseline ({BASELINE_SCHEMA})")
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict):
        raise UsageError(f"--baseline {path}: its metrics are not an object")
    out = {}
    for key, m in metrics.items():
        ok = (
            key in GATE_METRICS
            and isinstance(m, dict)
            and number(m.get("mean"))
            and m["mean"] > 0
            and isinstance(m.get("runs"), int)
            and not isinstance(m.get("runs"), bool)
            and 1 <= m["runs"] <= MAX_BASELINE_RUNS
            and (m.get("sd") is None or (number(m.get("sd")) and m["sd"] >= 0))
        )
        if not ok:
            raise UsageError(
                f"--baseline {path}: metric {str(key)[:40]!r} is not a mean (> 0), an sd (>= 0 "
                "or null) and runs (1 or more)"
            )
        sd = None if m.get("sd") is None else float(m["sd"])
        out[str(key)] = Baseline(mean=float(m["mean"]), sd=sd, runs=int(m["runs"]))
    if not out:
        raise UsageError(f"--baseline {path}: no metric")
    return str(doc.get("job_key") or ""), str(doc.get("unit") or ""), out


_MD = str.maketrans(
    {
        "\\": "\\\\",
        "|": "\\|",
        "<": "&lt;",
        ">": "&gt;",
        "&": "&amp;",
        "[": "\\[",
        "]": "\\]",
        "*": "\\*",
        "_": "\\_",
        "`": "\\`",
        "#": "\\#",
        "\n": " ",
        "\r": " ",
    }
)


def md(text: str) -> str:
    """``text`` as literal Markdown (a job key or file name a user chose): no table cell, link,
    image, emphasis or HTML of its own."""
    return text.translate(_MD)


def gate_markdown(
    title: str,
    *,
    run_id: str,
    lines: Sequence[GateLine],
    base_label: str,
    threshold: float,
    unit: str,
) -> str:
    failed = [g for g in lines if g.fails]
    status = "fails" if failed else "passes"
    out = [f"### gpu-kpi gate: {md(title)} {status}", "", f"Run {md(run_id)}.", ""]
    out += [
        f"- {md(g.sentence(threshold, unit))}" for g in lines if g.fails or g.regression_pct > 0
    ]
    if len(out) == 4:
        out.append(f"- no regression beyond the {threshold:g}% gate")
    out += [
        "",
        f"| metric | baseline ({md(base_label)}) | this run | change | noise | gate |",
        "|---|---|---|---|---|---|",
    ]
    for g in lines:
        label = f"$ per {unit}" if g.metric == "usd_per_unit" else g.label
        noise = "unknown" if g.noise_pct is None else f"±{g.noise_pct:.1f}%"
        out.append(
            f"| {md(label)} | {_fmt(g.baseline.mean, g.metric)} | {_fmt(g.value, g.metric)} | "
            f"{'−' if g.change_pct < 0 else '+'}{abs(g.change_pct):.1f}% | {noise} | "
            f"{'fails' if g.fails else 'passes'} |"
        )
    return "\n".join(out).replace("\x00", "")


def _branch_of(links: object) -> str | None:
    from reports.rows import parsed_links
    from tracker.scheduler import GIT_BRANCH_LINK

    return (links if isinstance(links, Mapping) else parsed_links(links)).get(GIT_BRANCH_LINK)


def _candidate(args: argparse.Namespace, history: Any, store: Any) -> tuple[str, Any, str]:
    """The run to gate: (its key, its one-row frame, its label)."""
    from reports.errors import UsageError
    from reports.kpi import runs_frame
    from reports.kpi.jobkeys import job_key
    from tracker.scheduler import git_branch_of

    if args.run is not None:
        record = store.get_run(args.run)
        if record is None:
            raise UsageError(f"--run {args.run}: no such run")
        if record.status != "finished":
            raise UsageError(f"--run {args.run}: the run is {record.status}, not finished")
        return job_key(record.name, record.links), runs_frame([record]), f"run {args.run}"
    key = " ".join(args.job_key.split())
    of_key = history[history["job_key"] == key]
    if not len(of_key):
        raise UsageError(f"--job-key {key!r}: no finished run in the last 26 weeks")
    here = git_branch_of(os.environ)  # in CI: this job's own run, not a neighbour's
    mine = of_key[of_key["links"].map(_branch_of) == here] if here else of_key
    run = (mine if len(mine) else of_key).tail(1)
    return key, run, f"run {run['id'].iloc[0]}"


def cmd_gate(args: argparse.Namespace) -> int:
    from reports.errors import UsageError
    from reports.kpi.comparison import as_plain, baselines_of, gate, run_values, side_of
    from reports.userfiles import check_file

    if (args.run is None) == (args.job_key is None):
        raise UsageError("gate needs the run to check: --run ID or --job-key KEY (its newest run)")
    if not 0 <= args.threshold < 1000:
        raise UsageError(f"--threshold {args.threshold}: a percentage from 0")
    if not 1 <= args.last <= MAX_BASELINE_RUNS:
        raise UsageError(f"--last {args.last}: a number of runs from 1")
    if args.baseline is not None and args.write_baseline:
        raise UsageError("--write-baseline writes the runs' baseline: not with --baseline FILE")
    if args.write_baseline:  # a folder, a link to nothing: said before any work
        check_file(Path(args.write_baseline), flag="--write-baseline")
    kept = None
    if args.baseline is not None:
        kept = read_baseline(Path(args.baseline))
    settings = _settings(args)
    now = args.now
    since_mark = ""
    with _open_store(settings.store, create=False) as store:
        history = _history(store, now)
        key, run, label = _candidate(args, history, store)
        start = run["started_at"].iloc[0]
        if args.baseline is None:
            if not key:
                raise UsageError("the run has no job key: give --baseline FILE")
            before = history[
                (history["job_key"] == key)
                & (history["id"] != run["id"].iloc[0])
                & (history["started_at"] < start)
            ]
            # a marked change of the job is a new baseline: the runs since its last mark
            marks = [m for m in _marks_of(store, key) if m.at <= start]
            if marks:
                before = before[before["started_at"] >= marks[-1].at]
                since_mark = f", since the mark of {marks[-1].at:%Y-%m-%d}"
    candidate = side_of(label, run, prices=settings.prices, owned=settings.owned)
    unit = _unit_of_run(candidate)
    if kept is not None:
        base_key, base_unit, baselines = kept
        if key and base_key and base_key != key:
            raise UsageError(f"--baseline {args.baseline}: a baseline of {base_key!r}, not {key!r}")
        base_label = Path(args.baseline).name
        if "usd_per_unit" in baselines and base_unit != unit[0]:
            baselines.pop("usd_per_unit")  # another unit: not comparable
    else:
        if args.branch:
            before = before[before["links"].map(_branch_of) == args.branch.removeprefix("origin/")]
        before = before.tail(args.last)
        if not len(before):
            raise UsageError(
                f"no baseline: no earlier finished run of {key!r}"
                + (f" on branch {args.branch!r}" if args.branch else "")
                + since_mark
                + " in the last 26 weeks (--branch '' takes any branch; --baseline FILE a file)"
            )
        base = side_of(key, before, prices=settings.prices, owned=settings.owned)
        baselines = baselines_of(base, unit, GATE_METRICS)
        base_label = (
            f"{base.runs} run{'s' if base.runs != 1 else ''}"
            + (f" on {args.branch}" if args.branch else "")
            + since_mark
        )
        if args.write_baseline:
            _write_baseline(Path(args.write_baseline), key, unit[0], baselines, written_at=now)
    lines = gate(run_values(candidate, unit, GATE_METRICS), baselines, threshold_pct=args.threshold)
    if not lines:
        raise UsageError("nothing to gate: the run and its baseline share no metric")
    run_id = str(run["id"].iloc[0])
    text = gate_markdown(
        key or label,
        run_id=run_id,
        lines=lines,
        base_label=base_label,
        threshold=args.threshold,
        unit=unit[0],
    )
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        _append_summary(Path(summary), text + "\n\n")
    if args.format == "json":
        doc = {
            "schema": "gpu-kpi.gate/1",
            "job_key": key,
            "run": run_id,
            "baseline": base_label,
            "threshold_pct": args.threshold,
            "unit": unit[0],
            "passes": not any(g.fails for g in lines),
            "lines": as_plain(lines),
        }
        print(json.dumps(doc, indent=2))
    else:
        _print(text)
    return 1 if any(g.fails for g in lines) else 0


def _append_summary(path: Path, text: str) -> None:
    """The gate's Markdown added to the step summary; a warning when it cannot be (a FIFO
    nobody reads is skipped, not waited on): the gate's verdict stands either way."""
    import errno
    import sys

    from reports.userfiles import append_file

    try:
        append_file(path, text.encode("utf-8"))
    except OSError as e:
        reason = f"{e.strerror or e}"
        if e.errno == errno.ENXIO:
            reason = "a FIFO nobody reads (skipped)"
        print(
            printable(f"gpu-kpi: GITHUB_STEP_SUMMARY not written: {path}: {reason}"),
            file=sys.stderr,
        )


def _print(text: str) -> None:
    """Lines of text, each with a run's or key's control characters shown as ``\\xNN``."""
    for line in text.splitlines():
        print(printable(line))


def _write_baseline(
    path: Path, key: str, unit: str, baselines: Mapping[str, Baseline], *, written_at: datetime
) -> None:
    """The baseline as a file, whole or not at all (:func:`reports.userfiles.write_file`).

    Raises:
        UsageError: It cannot be written.
    """
    from reports.errors import UsageError
    from reports.userfiles import write_file

    if not baselines:
        raise UsageError(f"--write-baseline {path}: the baseline's runs have no metric to keep")
    doc = {
        "schema": BASELINE_SCHEMA,
        "job_key": key,
        "unit": unit,
        "written_at": written_at.isoformat(timespec="seconds"),
        "metrics": {k: {"mean": b.mean, "sd": b.sd, "runs": b.runs} for k, b in baselines.items()},
    }
    write_file(path, (json.dumps(doc, indent=2) + "\n").encode(), flag="--write-baseline")


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
