"""Runs from the CSV a W&B chart exports (the chart's menu, "Export → CSV"): the fourth form of
W&B history, for a team that kept the charts but not the run directories.

A system chart's export has the x-axis first (``Relative Time (Process)``, ``Relative Time
(Wall)``, or ``Wall Time``) and, for each run shown, ``<run> - system/gpu.N.<metric>`` with its
bucket's ``__MIN`` and ``__MAX`` beside it. Each run's GPUs (``gpu.N``) and W&B metrics
(``gpu`` utilization, ``powerWatts``, ``memoryAllocatedBytes``, ``temp``, ``smClock``,
``smActive``) become the readings a ``.wandb`` log would have given, and play the same way
(:mod:`reports.imports.wandb_runs`): a run is one run whatever file its charts came in
(utilization in one export, power in another, merged by run name and time).

What the export does not say must be given: the GPU model (``--gpu-model``), and for relative
times when the run started (``--started``; a file of several runs by relative time cannot be
placed, each run's zero being its own start: export them one per file, or with the x-axis Wall
Time). A chart by ``Step`` has no time at all and is refused, naming the axis to choose.
"""

from __future__ import annotations

import contextlib
import csv
import math
import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from reports.errors import ImportFailed
from reports.imports.wandb_log import WandbLog
from tracker.units import LAST_EPOCH_S

RELATIVE = ("Relative Time (Process)", "Relative Time (Wall)")
WALL = "Wall Time"
_COLUMN = re.compile(r"^(?P<run>.+) - system[/.](?P<key>gpu\.\d+\.[A-Za-z]+)$")
_MS = 1e11
"""A Wall Time above this is milliseconds since 1970 (seconds stay below it until year 5138)."""


def is_export(path: Path) -> bool:
    """``path`` is a CSV file (by its name): a chart's export, not a run directory."""
    return path.suffix.lower() == ".csv"


def _number(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


@contextlib.contextmanager
def _rows(path: Path) -> Iterator[tuple[list[str], Iterator[tuple[int, list[str]]]]]:
    """The header and the (line, cells) rows of one export, streamed: a huge file is read as
    far as it is a chart's export, never whole."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            try:
                header = [h.strip() for h in next(reader, [])]
            except csv.Error as e:
                raise ImportFailed(f"{path}: not a W&B chart export ({e})") from None
            if not header or not header[0]:
                raise ImportFailed(f"{path}: empty: not a W&B chart export")

            def rows() -> Iterator[tuple[int, list[str]]]:
                try:
                    for cells in reader:
                        yield reader.line_num, cells
                except csv.Error as e:
                    raise ImportFailed(f"{path}:{reader.line_num}: {e}") from None

            yield header, rows()
    except UnicodeDecodeError:
        raise ImportFailed(f"{path}: not UTF-8 text: not a W&B chart export") from None
    except OSError as e:
        raise ImportFailed(f"{path}: cannot read it ({e.strerror or e})") from None


def read_exports(paths: Sequence[Path], *, started: datetime | None) -> list[WandbLog]:
    """The runs of W&B chart exports, as :class:`WandbLog` s holding their GPU samples.

    Args:
        paths: The CSV files (one chart each; a run may be in several).
        started: When the run began, for exports by relative time; None for Wall Time.

    Returns:
        One log per run name, its samples merged across the files, in time order.

    Raises:
        reports.errors.ImportFailed: A file that is no system chart's export, an x-axis that
            is no time, relative times without ``started`` (or of several runs), a bad row. A
            row whose time is no time (a 20-digit Wall Time, a year past 9998) is left out and
            named in its runs' ``no_time``.
    """
    runs: dict[str, WandbLog] = {}
    points: dict[str, dict[float, dict[str, Any]]] = {}
    for path in paths:
        with _rows(path) as (header, rows):
            _read_export(path, header, rows, started=started, runs=runs, points=points)
    for run, log in runs.items():
        log.stats = sorted(points.get(run, {}).items())
        if log.start is None and log.stats:
            log.start = log.stats[0][0]
    return list(runs.values())


def _read_export(
    path: Path,
    header: list[str],
    rows: Iterator[tuple[int, list[str]]],
    *,
    started: datetime | None,
    runs: dict[str, WandbLog],
    points: dict[str, dict[float, dict[str, Any]]],
) -> None:
    """One export's runs (into ``runs``) and readings (into ``points``); its x-axis is its
    header's first column."""
    axis = header[0]
    columns = {
        i: (m["run"].strip(), m["key"])
        for i, h in enumerate(header)
        if i > 0 and (m := _COLUMN.match(h))
    }
    if not columns:
        raise ImportFailed(
            f"{path}: no column '<run> - system/gpu.N.<metric>': export a W&B system chart "
            "(GPU Utilization, GPU Power…) as CSV"
        )
    names = list(dict.fromkeys(run for run, _ in columns.values()))  # as shown
    if any(n.startswith("Group: ") for n in names):
        raise ImportFailed(
            f"{path}: a grouped chart holds a group's mean, not its runs: export it with "
            "grouping off"
        )
    base = 0.0
    if axis in RELATIVE:
        if started is None:
            raise ImportFailed(
                f"{path}: times relative to the run's start ({axis}): say when it started "
                "with --started (its Overview page shows it), or export the chart with the "
                "x-axis Wall Time"
            )
        if len(names) > 1:
            raise ImportFailed(
                f"{path}: {len(names)} runs by {axis}, each from its own start: export "
                "one run per file, or the chart with the x-axis Wall Time"
            )
        base = started.timestamp()
    elif axis != WALL:
        raise ImportFailed(
            f"{path}: a chart by {axis!r} has no time: export it with the x-axis Wall Time "
            "or Relative Time (Process)"
        )
    elif started is not None:
        raise ImportFailed(f"{path}: --started is for exports by relative time, not {WALL}")
    no_time: list[str] = []
    for line, row in rows:
        if not row or not row[0].strip():
            continue
        x = _number(row[0])
        if x is None:
            raise ImportFailed(f"{path}:{line}: {axis} {row[0][:40]!r} is no number")
        t = base + x if axis in RELATIVE else x / 1000.0 if x > _MS else x
        if not 0 <= t < LAST_EPOCH_S:  # a 20-digit time, a year past 9998: a bad row
            no_time.append(f"{path}:{line}")
            continue
        for i, (run, key) in columns.items():
            if i < len(row) and (v := _number(row[i])) is not None:
                points.setdefault(run, {}).setdefault(t, {})[key] = v
    for run in names:
        if run not in runs:
            runs[run] = WandbLog(
                path, run_id=run, name=run, start=base if axis in RELATIVE else None
            )
        runs[run].no_time += no_time
