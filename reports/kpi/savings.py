"""Recurring jobs over the weeks, and what each change to one was worth: its cost per unit of
work before and after (a date marked with ``gpu-kpi mark``, else the change point its runs
show), a bootstrap interval over the runs, and the dollars saved per week and to date.

A recurring job is the runs of one job key (:func:`reports.kpi.jobkeys.job_key`) that ended in
the history read (:data:`HISTORY_WEEKS` up to the report's week). Each run's figures are its
own, whole: its GPU-hours at the report's price for its model, its counted samples or tokens,
its utilization. A job's unit of work is the one every priced run of it counted: 1M tokens,
else 1k samples, else a busy GPU-hour (GPU-hours × utilization); its cost per unit is a ratio
of sums (Σ cost ÷ Σ work), so a long run weighs as much as its work.

Before and after: the runs that started before a change and those from it on (up to the next
change of the same job). The saving is what the work done since would have cost at the old
rate less what it cost: to date, and per week over the weeks since the change (at least one).
A rise is a negative saving. The interval is a percentile bootstrap over runs (each side
resampled with replacement, :data:`BOOTSTRAP` times, a fixed seed): with fewer than
:data:`MIN_RUNS` runs on a side there is none, and the report says so.

Without a mark the runs of a job that counts its work (tokens or samples) are searched for one
change: the split (at least :data:`MIN_RUNS` runs each side) that best separates the runs' log
cost per unit, kept when the change is at least :data:`MIN_CHANGE_PCT` and its interval leaves
out zero (a busy GPU-hour is too noisy a measure for a search: an idle notebook's swings by
tenfold; such a job's changes need a mark). It is tested on the runs it was found
in, so a mark is the stronger evidence; both say how they were found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

import numpy as np
import pandas as pd

from reports.kpi.jobkeys import job_key
from reports.kpi.pricing import run_prices
from tracker.owned import OwnedGpu
from tracker.prices import PriceTable

HISTORY_WEEKS = 26
"""How many weeks of runs, up to the end of the report's week, the recurring jobs are read
over: a change marked earlier than that has no runs before it, and leaves the ledger."""
MIN_RUNS = 3
"""Runs needed on each side of a change for an interval (and for a change point)."""
MIN_CHANGE_PCT = 10.0
"""The smallest change in cost per unit a change point is kept for."""
BOOTSTRAP = 2000
"""Resamples of the interval."""
SEED = 28
"""The bootstrap's seed: the same runs give the same interval, report after report."""
MAX_JOBS = 50
"""Recurring jobs shown (most spend first)."""

UNITS = (("tokens", 1_000_000.0, "1M tokens"), ("samples", 1_000.0, "1k samples"))
BUSY_UNIT = "busy GPU-hour"

JOB_RUN_COLUMNS = (
    "run_id",
    "job_key",
    "name",
    "team",
    "started_at",
    "gpu_hours",
    "cost_usd",
    "utilization_pct",
    "samples",
    "tokens",
    "samples_per_s",
    "tokens_per_s",
    "verdict",
)

RECURRING_COLUMNS = (
    "job_key",
    "team",
    "runs",
    "weeks",
    "runs_this_week",
    "gpu_hours",
    "spend_usd",
    "utilization_pct",
    "unit",
    "usd_per_unit",
    "throughput",
    "throughput_unit",
    "first_week",
    "first_usd_per_unit",
    "last_week",
    "last_usd_per_unit",
    "verdict",
)
"""A recurring job in the history read (:func:`recurring_jobs`)."""


@dataclass(frozen=True, kw_only=True)
class Change:
    """A recurring job's cost per unit of work before and after a change."""

    job_key: str
    team: str
    at: datetime
    """From when (UTC) runs count as after."""
    week: str
    """The ISO week ``at`` falls in, in the report's time zone (``2026-W45``)."""
    how: str
    """``mark`` (``gpu-kpi mark``) or ``change point`` (found in the runs)."""
    note: str
    """The mark's note; empty for a change point."""
    unit: str
    runs_before: int
    runs_after: int
    usd_per_unit_before: float
    usd_per_unit_after: float
    change_pct: float
    """(after ÷ before − 1) × 100: negative is cheaper."""
    low_pct: float | None
    high_pct: float | None
    """The 95% bootstrap interval of ``change_pct``; None with too few runs."""
    verdict_before: str
    verdict_after: str
    weeks: float
    """Weeks from the change to the end of its runs' span (the next change, or the report's
    end), at least one."""
    usd_to_date: float
    """What the runs after would have cost at the rate before, less what they cost."""
    usd_per_week: float

    @property
    def too_few(self) -> bool:
        """Whether a side has fewer than :data:`MIN_RUNS` runs (no interval)."""
        return self.low_pct is None


def job_runs(
    runs: pd.DataFrame,
    *,
    since: datetime,
    until: datetime,
    prices: Mapping[str, float],
    owned: Mapping[str, OwnedGpu] | None = None,
) -> pd.DataFrame:
    """The finished runs that started in ``[since, until)``, each with its job key and its
    whole cost at the report's price (NaN: unpriced).

    Args:
        runs: Usable runs (:func:`reports.kpi.runs_frame`).
        since: The history's start (timezone-aware).
        until: Its end, excluded (timezone-aware).
        prices: The report's price overrides (``[prices]``).
        owned: The owned models (``[owned.<MODEL>]``).

    Returns:
        A frame of :data:`JOB_RUN_COLUMNS`, by start.
    """
    if not len(runs):
        return pd.DataFrame(columns=list(JOB_RUN_COLUMNS))
    started = pd.to_datetime(runs["started_at"], utc=True)
    keep = (
        (runs["status"] != "running")
        & (started >= pd.Timestamp(since))
        & (started < pd.Timestamp(until))
    )
    r = runs[keep.to_numpy()]
    if not len(r):
        return pd.DataFrame(columns=list(JOB_RUN_COLUMNS))
    price, _ = run_prices(r, PriceTable(prices), owned)
    keys = [job_key(n, lk) for n, lk in zip(r["name"], r["links"], strict=True)]
    out = pd.DataFrame(
        {
            "run_id": r["id"].astype(object).to_numpy(),
            "job_key": keys,
            "name": r["name"].astype(object).to_numpy(),
            "team": r["team"].astype(object).to_numpy(),
            "started_at": pd.to_datetime(r["started_at"], utc=True).to_numpy(),
            "gpu_hours": r["gpu_hours"].astype(float).to_numpy(),
            "cost_usd": (r["gpu_hours"].astype(float) * price).to_numpy(),
            "utilization_pct": pd.to_numeric(r["util_pct"], errors="coerce").to_numpy(),
            "samples": pd.to_numeric(r["samples"], errors="coerce").astype(float).to_numpy(),
            "tokens": pd.to_numeric(r["tokens"], errors="coerce").astype(float).to_numpy(),
            "samples_per_s": pd.to_numeric(r["samples_per_s"], errors="coerce").to_numpy(),
            "tokens_per_s": pd.to_numeric(r["tokens_per_s"], errors="coerce").to_numpy(),
            "verdict": r["verdict"].fillna("").astype(object).to_numpy(),
        }
    )
    out["started_at"] = pd.to_datetime(out["started_at"], utc=True)
    out = out[out["job_key"] != ""]
    return out.sort_values(["started_at", "run_id"], ignore_index=True)


def week_starts(started: pd.Series, tz: tzinfo) -> pd.Series:
    """Each time's week start (Monday 00:00 in ``tz``, as UTC), by the same index.

    Args:
        started: Aware times.
        tz: The report's time zone.
    """
    from reports.weeks import week_start_of

    if not len(started):
        return pd.Series([], index=started.index, dtype="datetime64[ns, UTC]")
    local = pd.to_datetime(started, utc=True).dt.tz_convert(tz)
    days = local.dt.date
    # a million runs start on a few hundred days: each day's week once, at its local noon
    firsts = {
        d: week_start_of(datetime(d.year, d.month, d.day, 12, tzinfo=tz), tz)
        for d in pd.unique(days)
    }
    return pd.to_datetime(days.map(firsts), utc=True)


def unit_of(g: pd.DataFrame) -> tuple[str, np.ndarray]:
    """A job's unit of work and each run's work in it (NaN where the run has none): the count
    every priced run has (tokens, else samples), else busy GPU-hours where every priced run's
    utilization is known; else ``""``.

    Args:
        g: Runs of one job (:func:`job_runs`).
    """
    priced = g["cost_usd"].notna().to_numpy()
    for column, scale, name in UNITS:
        counted = g[column].to_numpy(dtype=float)
        if priced.any() and (counted[priced] > 0).all():
            return name, np.where(counted > 0, counted / scale, np.nan)
    util = g["utilization_pct"].to_numpy(dtype=float)
    busy = g["gpu_hours"].to_numpy(dtype=float) * util / 100.0
    if priced.any() and (busy[priced] > 0).all():
        return BUSY_UNIT, np.where(busy > 0, busy, np.nan)
    return "", np.full(len(g), np.nan)


def _rate(cost: np.ndarray, work: np.ndarray) -> float | None:
    total = float(work.sum())
    return float(cost.sum()) / total if total > 0 else None


def recurring_jobs(
    jr: pd.DataFrame, *, weeks_of: pd.Series, this_week: pd.Timestamp
) -> pd.DataFrame:
    """The job keys with two runs or more, most spend first (:data:`MAX_JOBS`): their runs,
    weeks, GPU-hours, spend, utilization, cost per unit of work (all runs; the first week's and
    the last week's), median throughput and the latest run's verdict.

    Args:
        jr: The history's runs (:func:`job_runs`).
        weeks_of: Each run's week start (in the report's time zone), by ``jr``'s index.
        this_week: The report's week start.

    Returns:
        A frame of :data:`RECURRING_COLUMNS`.
    """
    out = []
    for key, g in jr.groupby("job_key", sort=False):
        if g["run_id"].nunique() < 2:
            continue
        unit, work = unit_of(g)
        cost = g["cost_usd"].to_numpy(dtype=float)
        ok = ~np.isnan(cost) & ~np.isnan(work)
        wk = weeks_of[g.index].to_numpy()
        per_week = [
            (w, _rate(cost[ok & (wk == w)], work[ok & (wk == w)])) for w in sorted(set(wk[ok]))
        ]
        per_week = [(w, r) for w, r in per_week if r is not None]
        util = g["utilization_pct"].to_numpy(dtype=float)
        hours = g["gpu_hours"].to_numpy(dtype=float)
        known = ~np.isnan(util)
        tp_col = "tokens_per_s" if unit == "1M tokens" else "samples_per_s"
        tp = g[tp_col].dropna()
        out.append(
            {
                "job_key": key,
                "team": _mode(g["team"]),
                "runs": int(g["run_id"].nunique()),
                "weeks": len(set(wk)),
                "runs_this_week": int((wk == this_week).sum()),
                "gpu_hours": float(hours.sum()),
                "spend_usd": float(np.nansum(cost)),
                "utilization_pct": float((util[known] * hours[known]).sum() / hours[known].sum())
                if known.any() and hours[known].sum() > 0
                else None,
                "unit": unit,
                "usd_per_unit": _rate(cost[ok], work[ok]),
                "throughput": float(tp.median()) if len(tp) else None,
                "throughput_unit": ("tokens/s" if tp_col == "tokens_per_s" else "samples/s")
                if len(tp)
                else "",
                "first_week": per_week[0][0] if per_week else None,
                "first_usd_per_unit": per_week[0][1] if per_week else None,
                "last_week": per_week[-1][0] if len(per_week) > 1 else None,
                "last_usd_per_unit": per_week[-1][1] if len(per_week) > 1 else None,
                "verdict": str(g["verdict"].iloc[-1]),
            }
        )
    frame = pd.DataFrame(out, columns=list(RECURRING_COLUMNS))
    frame = frame.sort_values(["spend_usd", "job_key"], ascending=[False, True], ignore_index=True)
    return frame.head(MAX_JOBS)


def _mode(values: pd.Series) -> str:
    """The most common non-empty value (the latest among equals); ``""`` where none."""
    v = [str(x) for x in values if isinstance(x, str) and x]
    if not v:
        return ""
    counts: dict[str, int] = {}
    for x in v:
        counts[x] = counts.get(x, 0) + 1
    best = max(counts.values())
    return next(x for x in reversed(v) if counts[x] == best)


def bootstrap_change(
    cost_before: np.ndarray,
    work_before: np.ndarray,
    cost_after: np.ndarray,
    work_after: np.ndarray,
    *,
    resamples: int = BOOTSTRAP,
    seed: int = SEED,
) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the change in cost per unit, in percent: each
    side's runs resampled with replacement (``before`` first, then ``after``, each a
    ``resamples × runs`` draw of :meth:`numpy.random.Generator.integers` from
    ``default_rng(seed)``), the ratio of sums after ÷ before − 1 of each resample, its 2.5th and
    97.5th percentiles (numpy's linear interpolation).

    Args:
        cost_before: Each run's cost before the change.
        work_before: Each run's work before (in the job's unit).
        cost_after: Each run's cost after.
        work_after: Each run's work after.
        resamples: How many resamples.
        seed: The generator's seed.
    """
    rng = np.random.default_rng(seed)
    ib = rng.integers(0, len(cost_before), size=(resamples, len(cost_before)))
    ia = rng.integers(0, len(cost_after), size=(resamples, len(cost_after)))
    before = cost_before[ib].sum(axis=1) / work_before[ib].sum(axis=1)
    after = cost_after[ia].sum(axis=1) / work_after[ia].sum(axis=1)
    change = 100.0 * (after / before - 1.0)
    low, high = np.percentile(change, [2.5, 97.5])
    return float(low), float(high)


def changes(
    jr: pd.DataFrame,
    marks: Sequence[Any],
    *,
    end: datetime,
    tz: tzinfo,
    seed: int = SEED,
) -> tuple[Change, ...]:
    """Each recurring job's changes: one per mark with runs on both sides, else the change
    point its runs show (if any), most saved first.

    Args:
        jr: The history's runs (:func:`job_runs`).
        marks: The marks (:class:`reports.data.marks.Mark`: ``job_key``, ``at``, ``note``).
        end: The end of the report's span (the week's end, or now): what "to date" runs to.
        tz: The report's time zone (for the week of a change).
        seed: The bootstrap's seed.
    """
    by_key: dict[str, list[Any]] = {}
    for m in marks:
        by_key.setdefault(m.job_key, []).append(m)
    out: list[Change] = []
    for key, of_key in jr.groupby("job_key", sort=False):
        unit, work = unit_of(of_key)
        if not unit:
            continue
        cost = of_key["cost_usd"].to_numpy(dtype=float)
        ok = ~np.isnan(cost) & ~np.isnan(work)
        g, cost, work = of_key[ok], cost[ok], work[ok]
        starts = pd.to_datetime(g["started_at"], utc=True)
        key_marks = sorted(by_key.get(str(key), []), key=lambda m: m.at)
        if key_marks:
            bounds = [pd.Timestamp(m.at) for m in key_marks]
            for i, m in enumerate(key_marks):
                lo = bounds[i - 1] if i else None
                hi = bounds[i + 1] if i + 1 < len(bounds) else None
                before = (starts < bounds[i]).to_numpy()
                after = (starts >= bounds[i]).to_numpy()
                if lo is not None:
                    before &= (starts >= lo).to_numpy()
                if hi is not None:
                    after &= (starts < hi).to_numpy()
                span_end = key_marks[i + 1].at if i + 1 < len(key_marks) else end
                c = _change(
                    str(key),
                    g,
                    cost,
                    work,
                    unit,
                    before=before,
                    after=after,
                    at=m.at,
                    span_end=span_end,
                    seed=seed,
                    note=m.note,
                    tz=tz,
                )
                if c is not None:
                    out.append(c)
            continue
        if unit == BUSY_UNIT:
            continue  # utilization alone is too noisy a measure of work to search for a change
        split = _change_point(cost, work)
        if split is None:
            continue
        at = starts.iloc[split].to_pydatetime()
        idx = np.arange(len(cost))
        c = _change(
            str(key),
            g,
            cost,
            work,
            unit,
            before=idx < split,
            after=idx >= split,
            at=at,
            span_end=end,
            seed=seed,
            note="",
            tz=tz,
        )
        if c is not None and not c.too_few and abs(c.change_pct) >= MIN_CHANGE_PCT:
            assert c.low_pct is not None and c.high_pct is not None
            if c.low_pct > 0 or c.high_pct < 0:
                out.append(c)
    return tuple(sorted(out, key=lambda c: (-c.usd_to_date, c.job_key, c.at)))


def _change_point(cost: np.ndarray, work: np.ndarray) -> int | None:
    """The split (index of the first run after) that best separates the runs' log cost per
    unit (least squares of two means), with :data:`MIN_RUNS` runs or more on each side."""
    n = len(cost)
    if n < 2 * MIN_RUNS:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(cost / work)
    if not np.isfinite(y).all():
        return None
    s, s2 = np.cumsum(y), np.cumsum(y * y)
    best, at = None, None
    for k in range(MIN_RUNS, n - MIN_RUNS + 1):
        left = s2[k - 1] - s[k - 1] ** 2 / k
        right = (s2[-1] - s2[k - 1]) - (s[-1] - s[k - 1]) ** 2 / (n - k)
        if best is None or left + right < best - 1e-12:
            best, at = left + right, k
    return at


def _change(
    key: str,
    g: pd.DataFrame,
    cost: np.ndarray,
    work: np.ndarray,
    unit: str,
    *,
    before: Any,
    after: Any,
    at: datetime,
    span_end: datetime,
    seed: int,
    note: str,
    tz: tzinfo,
) -> Change | None:
    from reports.weeks import week_label, week_of

    before, after = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    rb, ra = _rate(cost[before], work[before]), _rate(cost[after], work[after])
    if rb is None or ra is None or rb <= 0:
        return None
    low = high = None
    if before.sum() >= MIN_RUNS and after.sum() >= MIN_RUNS:
        low, high = bootstrap_change(
            cost[before], work[before], cost[after], work[after], seed=seed
        )
    to_date = rb * float(work[after].sum()) - float(cost[after].sum())
    weeks = max((span_end - at) / timedelta(weeks=1), 1.0)
    return Change(
        job_key=key,
        team=_mode(g["team"][after]) or _mode(g["team"]),
        at=at,
        week=week_label(*week_of(at, tz)),
        how="mark" if note else "change point",
        note=note,
        unit=unit,
        runs_before=int(before.sum()),
        runs_after=int(after.sum()),
        usd_per_unit_before=rb,
        usd_per_unit_after=ra,
        change_pct=100.0 * (ra / rb - 1.0),
        low_pct=low,
        high_pct=high,
        verdict_before=_mode(g["verdict"][before]),
        verdict_after=_mode(g["verdict"][after]),
        weeks=weeks,
        usd_to_date=to_date,
        usd_per_week=to_date / weeks,
    )


def ledger_by_team(found: Sequence[Change]) -> list[tuple[str, float, float, int]]:
    """Per team (most saved first): the saving per week and to date of its changes, and how
    many.

    Args:
        found: The changes (:func:`changes`).
    """
    teams: dict[str, list[float]] = {}
    for c in found:
        t = teams.setdefault(c.team, [0.0, 0.0, 0])
        t[0] += c.usd_per_week
        t[1] += c.usd_to_date
        t[2] += 1
    rows = [(team, w, d, int(n)) for team, (w, d, n) in teams.items()]
    return sorted(rows, key=lambda r: (-r[2], r[0]))


def sentence(c: Change) -> str:
    """The change in one line: ``resnet-nightly: input-bound → healthy since 2026-W45 (mark:
    loader: 8 workers); $ per 1k samples −38% (95% interval −44…−31%); $2,140/week saved,
    $19,300 to date``.

    Args:
        c: The change.
    """
    verdicts = (
        f"{c.verdict_before or '?'} → {c.verdict_after or '?'}"
        if c.verdict_before != c.verdict_after
        else c.verdict_after or "no verdict"
    )
    how = f"mark: {c.note}" if c.how == "mark" else "change point in its runs"
    if c.too_few:
        spread = f"too few runs for an interval ({c.runs_before} before, {c.runs_after} after)"
    else:
        assert c.low_pct is not None and c.high_pct is not None
        spread = f"95% interval {_pct(c.low_pct)[:-1]}…{_pct(c.high_pct)}"
    saved = "saved" if c.usd_to_date >= 0 else "lost"
    return (
        f"{c.job_key}: {verdicts} since {c.week} ({how}); $ per {c.unit} {_pct(c.change_pct)} "
        f"({spread}); ${abs(c.usd_per_week):,.0f}/week {saved}, ${abs(c.usd_to_date):,.0f} to date"
    )


def _pct(v: float) -> str:
    return f"{'−' if v < 0 else '+'}{abs(v):.0f}%"
