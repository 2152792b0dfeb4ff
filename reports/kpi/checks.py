"""What the report leaves out, and why: runs whose figures cannot be used, and sample rows that
cannot. One bad run or row never stops the weekly report; it is skipped, counted and named.

A **run** is excluded (all of it: its summary and its samples) when a figure of its record is
not a number (SQLite is dynamically typed: ``util_pct = 'abc'`` is stored as text), is not
finite (``inf``, or PostgreSQL's ``NaN``), or lies outside what the figure can be
(:data:`NOT_NEGATIVE`, :data:`PERCENT`, :data:`MAX_FIGURE`); or when the store could not read
its row at all. A **sample row** is not a run's whole story: a row whose ``covered_s`` is
unusable, or whose minute is not shaped like a time, is left out (its GPU-time with it), and a
row whose utilization is unusable counts with utilization unknown, as when the GPU gave none
(:mod:`reports.data.samples`). A run whose sample rows in the window are all unusable is
reported from its summary, like a run without samples.

A **text field** (:data:`TEXTS`) that the store gives as bytes (SQLite keeps a BLOB in a TEXT
column: a tracker that passed ``bytes``, a hand-made ``X'…'``) is decoded as UTF-8, a bad byte
replaced by U+FFFD, and the run counts: a name in the wrong type is no reason to lose a run's
GPU-hours from the fleet's. A text field that is neither text nor bytes (a number, a list;
None where text is required) excludes the run (``name is not text``), as does an ``id`` that
is not text: the id joins a run to its samples, and decoded it could equal another run's.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracker.record import RunRecord
from tracker.text import one_line

NUMBERS = (
    "price_per_gpu_hour",
    "gpu_hours",
    "util_pct",
    "sm_active_pct",
    "gpu_count",
    "nodes",
    "mem_peak_gib",
    "mem_total_gib",
    "energy_kwh",
    "steps",
    "samples",
    "tokens",
    "samples_per_s",
    "tokens_per_s",
    "mfu",
    "data_wait_pct",
    "cost_usd",
    "waste_usd",
    "idle_usd",
)
"""The number fields of a run record: each is a finite number or unknown (None)."""
NOT_NEGATIVE = (
    "price_per_gpu_hour",
    "gpu_hours",
    "gpu_count",
    "mem_peak_gib",
    "mem_total_gib",
    "samples",
    "tokens",
    "idle_usd",
    "energy_kwh",
)
"""Figures the KPIs read that cannot be negative."""
PERCENT = ("util_pct", "sm_active_pct")
"""Utilization figures: 0–100."""
TEXTS = (
    "id",
    "name",
    "project",
    "team",
    "user",
    "host",
    "framework",
    "status",
    "gpu_source",
    "gpu_model",
    "price_source",
    "verdict",
    "advice",
    "source",
)
"""The text fields of a run record."""
OPTIONAL_TEXTS = ("gpu_model", "price_source", "verdict", "advice")
"""Text fields that may be unknown (None)."""
MAX_FIGURE = 1e18
"""No figure of a run is this large (a run of 10^13 tokens is one of the biggest trained): a
larger one is corrupt, and sums and products of such figures would pass float's range (inf),
which no chart or JSON can show."""
PCT_RANGE = (0.0, 100.0)
"""A utilization value (a run's or a minute's) outside this range is not a utilization."""

MAX_NAMED = 20
"""Runs named one by one in the email and the log line; the report, JSON and CSV name all."""


@dataclass(frozen=True, kw_only=True)
class ExcludedRun:
    run_id: str
    name: str
    reason: str
    """``non-finite price_per_gpu_hour``, ``text in util_pct``, ``negative gpu_hours``,
    ``util_pct out of 0–100``, ``unreadable started_at``…"""


@dataclass(frozen=True, kw_only=True)
class BadSamples:
    """Sample rows of one run the report could not use as they are."""

    run_id: str
    name: str
    rows: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class Skipped:
    """Everything one report left out or read as unknown."""

    runs: tuple[ExcludedRun, ...] = ()
    samples: tuple[BadSamples, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.runs or self.samples)

    def of_runs(self, ids: Collection[str]) -> Skipped:
        """What was left out of the runs ``ids`` alone (a team's report). A run excluded whole
        is left out of it: its row could not be read, so no team is known to be its owner (the
        fleet's report names it)."""
        return Skipped(samples=tuple(b for b in self.samples if b.run_id in ids))

    @property
    def sample_rows(self) -> int:
        return sum(b.rows for b in self.samples)

    def summary(self) -> str:
        """One sentence: ``2 runs excluded: non-finite price_per_gpu_hour (1), text in util_pct
        (1); 3 sample rows of 1 run not used as they are``; empty when nothing was skipped."""
        parts = []
        if self.runs:
            reasons = Counter(r.reason for r in self.runs)
            parts.append(
                f"{_count(len(self.runs), 'run')} excluded: "
                + ", ".join(f"{reason} ({n})" for reason, n in sorted(reasons.items()))
            )
        if self.samples:
            runs = len({b.run_id for b in self.samples})
            parts.append(
                f"{_count(self.sample_rows, 'sample row')} of {_count(runs, 'run')} "
                "left out or read as unknown"
            )
        return "; ".join(parts)

    def log_line(self) -> str:
        """The summary and each run by name, id and reason, on one line (user strings with
        line breaks cannot split it)."""
        named = [f"{r.name} ({r.run_id}): {r.reason}" for r in self.runs]
        named += [
            f"{b.name} ({b.run_id}): {_count(b.rows, 'sample row')}, {b.reason}"
            for b in self.samples
        ]
        more = len(named) - MAX_NAMED
        text = f"{self.summary()} — {'; '.join(named[:MAX_NAMED])}"
        return one_line(text + (f"; and {more} more" if more > 0 else ""))


def as_text(value: object) -> str:
    """``value`` as text: bytes decoded as UTF-8 (a bad byte becomes U+FFFD), anything else
    by ``str``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _problem(field: str, value: object) -> str | None:
    """Why ``value`` cannot be the run's ``field``, or None when it can."""
    if value is None:
        return None
    if isinstance(value, str):
        return f"text in {field}"
    if not isinstance(value, numbers.Real):
        return f"unreadable {field}"
    try:
        number = float(value)
    except OverflowError:  # a whole number no float holds
        return f"{field} out of range"
    if not math.isfinite(number):
        return f"non-finite {field}"
    if field in NOT_NEGATIVE and number < 0:
        return f"negative {field}"
    if field in PERCENT and not PCT_RANGE[0] <= number <= PCT_RANGE[1]:
        return f"{field} out of 0–100"
    if abs(number) > MAX_FIGURE:
        return f"{field} out of range"
    return None


def readable_texts(run: RunRecord) -> tuple[RunRecord, str | None]:
    """``run`` with its text fields that are bytes decoded (see the module docstring), and
    why it cannot be used when a text field is no text at all (None when all are)."""
    changes: dict[str, str] = {}
    for field in TEXTS:
        value = getattr(run, field)
        if isinstance(value, str) or (value is None and field in OPTIONAL_TEXTS):
            continue
        if field == "id" or not isinstance(value, bytes | bytearray | memoryview):
            return run, f"{field} is not text"
        changes[field] = as_text(value)
    return (run.replace(**changes) if changes else run), None


def run_problem(run: RunRecord) -> str | None:
    """Why the report cannot use ``run`` (a text field that is no text, or the first figure
    that is wrong), or None."""
    _, problem = readable_texts(run)
    if problem:
        return problem
    for field in NUMBERS:
        problem = _problem(field, getattr(run, field))
        if problem:
            return problem
    return None


def usable_runs(runs: Iterable[RunRecord]) -> tuple[list[RunRecord], list[ExcludedRun]]:
    """The runs the report can use (text fields that were bytes decoded), and the others with
    the reason."""
    good, excluded = [], []
    for run in runs:
        fixed, problem = readable_texts(run)
        problem = problem or run_problem(fixed)
        if problem is None:
            good.append(fixed)
        else:
            excluded.append(
                ExcludedRun(run_id=as_text(run.id), name=as_text(run.name), reason=problem)
            )
    return good, excluded


def surely_usable(runs: pd.DataFrame) -> np.ndarray:
    """Per row of a runs frame (:func:`reports.kpi.runs_frame`'s columns, values as stored):
    True where :func:`run_problem` surely finds nothing and no text needs decoding, decided
    column by column for a million runs; False where a row must go through
    :func:`usable_runs` (which names the problem, or decodes bytes and keeps the run).

    Args:
        runs: The runs, one per row.

    Returns:
        A boolean array, a value per row.
    """
    n = len(runs)
    ok = np.ones(n, dtype=bool)
    for field in TEXTS:
        col = runs[field]
        optional = field in OPTIONAL_TEXTS
        if isinstance(col.dtype, pd.StringDtype):  # text or missing
            if not optional:
                ok &= col.notna().to_numpy()
            continue
        missing = col.isna().to_numpy()
        texts = np.zeros(n, dtype=bool)
        at = np.flatnonzero(~missing)  # a column of only None (no verdicts) costs nothing
        texts[at] = [type(v) is str for v in col.to_numpy(dtype=object)[at]]
        ok &= texts | (missing if optional else False)
    for field in NUMBERS:
        col = runs[field]
        if pd.api.types.is_bool_dtype(col):  # no store gives these: the row path decides
            ok[:] = False
            continue
        if pd.api.types.is_numeric_dtype(col):
            x = col.to_numpy(dtype=float)
        else:  # numbers and something else (text, bytes, a number past int64), or only None
            values = col.to_numpy(dtype=object)
            at = np.flatnonzero(~col.isna().to_numpy())
            x = np.full(n, np.nan)
            plain = np.ones(n, dtype=bool)
            plain[at] = [type(v) in (int, float) for v in values[at]]
            ok &= plain
            x[at] = [_float_or_inf(v) if type(v) in (int, float) else np.nan for v in values[at]]
        known = ~np.isnan(x)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(x) | (np.abs(x) > MAX_FIGURE)
            if field in NOT_NEGATIVE:
                bad |= x < 0
            if field in PERCENT:
                bad |= (x < PCT_RANGE[0]) | (x > PCT_RANGE[1])
        ok &= ~(known & bad)
    return ok


def _float_or_inf(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # a whole number no float holds: out of range
        return math.inf


def bad_samples(totals: pd.DataFrame, runs: pd.DataFrame, *, value: str) -> list[BadSamples]:
    """Per run of ``runs`` (``id``, ``name``), the sample rows the store's totals
    (:data:`reports.kpi.TOTALS_COLUMNS`) say were left out or read with ``value`` unknown."""
    if totals.empty:
        return []
    counts = [c for c in ("dropped", "bad_minutes", "bad_values", "damaged") if c in totals.columns]
    # the rows with something to say: a week of a million runs has a few
    totals = totals[(totals[counts] > 0).any(axis=1)]
    per = totals.astype({"run_id": object}).groupby("run_id")[counts].sum()
    hurt = runs[runs["id"].isin(per.index.tolist()).to_numpy()]  # few looked for: cheap
    names = dict(zip(hurt["id"].tolist(), hurt["name"].tolist(), strict=True))
    out = []
    for run_id, row in per.iterrows():
        if run_id not in names:
            continue
        if row["dropped"] > 0:
            out.append(
                BadSamples(
                    run_id=str(run_id),
                    name=names[run_id],
                    rows=int(row["dropped"]),
                    reason="unusable covered_s: left out",
                )
            )
        if row.get("bad_minutes", 0) > 0:
            out.append(
                BadSamples(
                    run_id=str(run_id),
                    name=names[run_id],
                    rows=int(row["bad_minutes"]),
                    reason="unreadable minute: left out",
                )
            )
        if row.get("damaged", 0) > 0:
            out.append(
                BadSamples(
                    run_id=str(run_id),
                    name=names[run_id],
                    rows=int(row["damaged"]),
                    reason="damaged hourly rollups: left out (rebuild them with "
                    "gpu-kpi store rebuild-rollups)",
                )
            )
        if row["bad_values"] > 0:
            out.append(
                BadSamples(
                    run_id=str(run_id),
                    name=names[run_id],
                    rows=int(row["bad_values"]),
                    reason=f"unusable {value}: read as unknown",
                )
            )
    return out
