"""Recurring jobs over the weeks, and what each change to one was worth: its cost per unit of
work before and after (a date marked with ``gpu-kpi mark``, else the change point its runs
show), an interval over the runs, and the dollars saved per week and to date.

A recurring job is the runs of one job key (:func:`reports.kpi.jobkeys.job_key`) that started
in the history read (:data:`HISTORY_WEEKS` up to the report's week). Each run's figures are its
own, whole: its GPU-hours at the report's price for its model, its counted samples or tokens,
its utilization. A job's unit of work is the one every priced run of it counted: 1M tokens,
else 1k samples, else a busy GPU-hour (GPU-hours × utilization); its cost per unit is a ratio
of sums (Σ cost ÷ Σ work), so a long run weighs as much as its work.

Before and after: the runs that started before a change and those from it on (up to the next
change of the same job). The saving is what the work done since would have cost at the old
rate less what it cost: to date, and per week over the weeks since the change (at least one).
A rise is a negative saving. The interval is Welch's t on the runs' log cost per unit (95%,
the unrounded Satterthwaite degrees of freedom: :func:`reports.kpi.intervals.change_interval_pct`,
the one ``gpu-kpi compare`` gives its cost per unit): it covers the change in the sides'
geometric means of the per-run cost per unit, the typical run's, where the change it stands
beside is that of the ratios of sums, the dollars'. With fewer than :data:`MIN_RUNS` runs on a
side there is none, and the report says so.

Without a mark the runs of a job that counts its work (tokens or samples) are searched for one
change: the split (at least :data:`MIN_RUNS` runs each side) that best separates the runs' log
cost per unit, kept when the change is at least :data:`MIN_CHANGE_PCT` and the t statistic of
the two sides' log cost per unit at least :data:`MIN_T` (which puts its interval clear of zero:
t(0.975) is at most 4.30 at 3 runs a side); its time is the start of the first run after the
split (a busy GPU-hour is too noisy a measure for a search: an idle notebook's swings by
tenfold; such a job's changes need a mark). It is tested on the runs it was found
in, so a mark is the stronger evidence; both say how they were found.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

import numpy as np
import pandas as pd

from reports.kpi.frames import shared_objects, sorted_moving
from reports.kpi.intervals import change_interval_pct
from reports.kpi.jobkeys import job_keys
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
MIN_T = 5.0
"""The smallest t statistic between the two sides' log cost per unit (Welch's: the difference
of their means ÷ its standard error) a change point is kept for: the search tries every split,
so noise alone often gives a t of 2 or 3 at the best one."""
MAX_JOBS = 50
"""Recurring jobs shown (most spend first)."""

UNITS = (("tokens", 1_000_000.0, "1M tokens"), ("samples", 1_000.0, "1k samples"))
UNIT_COVER = 0.9
"""The share of a job's priced cost whose runs must count a unit for the job to be priced in
it."""
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
    "unit",
    "work",
)
"""A run of the history (:func:`job_runs`): ``unit`` its job's unit of work, ``work`` the run's
in it (NaN: none)."""

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
    """The 95% interval of the change in the geometric mean of the runs' cost per unit, in %
    (Welch's t on their logs: :func:`reports.kpi.intervals.change_interval_pct`); None with
    too few runs. It is the typical run's change; ``change_pct`` is the ratio of sums', which a
    long run moves more: the two agree where the runs are alike."""
    verdict_before: str
    verdict_after: str
    weeks_since: float
    """Weeks from the change to the report's end, at least one."""
    usd_to_date: float
    """(Cost per unit before − after) × the work done since the change (a later change's runs
    too): what the change saved; a job's changes add up to its first cost per unit × its work
    since less what that work cost."""
    usd_per_week: float

    @property
    def too_few(self) -> bool:
        """Whether a side has fewer than :data:`MIN_RUNS` runs (no interval)."""
        return self.low_pct is None


def job_runs(
    runs: pd.DataFrame | Sequence[pd.DataFrame],
    *,
    since: datetime,
    until: datetime,
    prices: Mapping[str, float],
    owned: Mapping[str, OwnedGpu] | None = None,
) -> pd.DataFrame:
    """The finished runs that started in ``[since, until)``, each with its job key, its whole
    cost at the report's price (NaN: unpriced) and its work in its job's unit (NaN: none), by
    key and start.

    Args:
        runs: Usable runs (:func:`reports.kpi.runs_frame`), or parts of them (no run in two):
            each part's rows are taken on their own (a million runs are not copied to join
            a few earlier ones).
        since: The history's start (timezone-aware).
        until: Its end, excluded (timezone-aware).
        prices: The report's price overrides (``[prices]``).
        owned: The owned models (``[owned.<MODEL>]``).

    Returns:
        A frame of :data:`JOB_RUN_COLUMNS`.
    """
    parts = [runs] if isinstance(runs, pd.DataFrame) else list(runs)
    made = [_job_rows(p, since=since, until=until, prices=prices, owned=owned) for p in parts]
    rows = [r for r in made if r is not None]
    if not rows:
        return pd.DataFrame(columns=list(JOB_RUN_COLUMNS))
    some = [r for r in rows if len(r)] or rows[:1]
    out = some[0] if len(some) == 1 else pd.concat(some, ignore_index=True)
    out = sorted_moving(out, ["job_key", "started_at", "run_id"])  # not held twice
    out["unit"], out["work"] = _units(out)
    return out[list(JOB_RUN_COLUMNS)]


def _job_rows(
    runs: pd.DataFrame,
    *,
    since: datetime,
    until: datetime,
    prices: Mapping[str, float],
    owned: Mapping[str, OwnedGpu] | None,
) -> pd.DataFrame | None:
    """:func:`job_runs`' rows of ``runs`` with a job key, in no order and without units; None
    where no run of ``runs`` that is not running started in the span."""
    if not len(runs):
        return None
    started = pd.to_datetime(runs["started_at"], utc=True)
    keep = (
        (runs["status"] != "running")
        & (started >= pd.Timestamp(since))
        & (started < pd.Timestamp(until))
    )
    r = runs[keep.to_numpy()]
    if not len(r):
        return None
    price, _ = run_prices(r, PriceTable(prices), owned)
    hours = pd.to_numeric(r["gpu_hours"], errors="coerce").astype(float)
    cost = (hours * price).to_numpy()
    out = pd.DataFrame(
        {
            "run_id": _text_values(r["id"]),
            "job_key": job_keys(r["name"], r["links"]).to_numpy(),
            "name": _text_values(r["name"]),
            "team": _text_values(r["team"]),
            "started_at": started[keep.to_numpy()].reset_index(drop=True),
            "gpu_hours": hours.to_numpy(),
            "cost_usd": np.where(np.isfinite(cost) & (cost >= 0), cost, np.nan),
            "utilization_pct": numbers(r["util_pct"]),
            "samples": numbers(r["samples"]),
            "tokens": numbers(r["tokens"]),
            "samples_per_s": numbers(r["samples_per_s"]),
            "tokens_per_s": numbers(r["tokens_per_s"]),
            "verdict": r["verdict"].fillna("").astype(object).to_numpy(),
        }
    )
    return out[out["job_key"] != ""]


def _text_values(column: pd.Series) -> Any:
    """``column.astype(object).to_numpy()`` as :class:`pandas.DataFrame` takes it in a column of
    its own: Arrow's text as it is (the frame would make the same text of a Python string per
    value), any other column as those objects."""
    if (
        isinstance(column.dtype, pd.StringDtype)
        and column.dtype == _TEXT
        and column.notna().any()  # no text at all: the objects' column is not text
    ):
        return column.array
    return column.astype(object).to_numpy()


_TEXT = pd.DataFrame({"t": np.array(["t"], dtype=object)})["t"].dtype
"""The type :class:`pandas.DataFrame` gives a column of Python strings (pandas' ``str``)."""


def _objects(column: pd.Series) -> np.ndarray:
    """``column.to_numpy()`` with one Python object per distinct text of Arrow's
    (:func:`reports.kpi.frames.shared_objects`); any other column as it is."""
    if not isinstance(column.dtype, pd.StringDtype):
        return column.to_numpy()
    return shared_objects(column)


def numbers(column: pd.Series) -> np.ndarray:
    """A column as floats, what is no finite number NaN.

    Args:
        column: Any values (text, None, numbers).
    """
    v = pd.to_numeric(column, errors="coerce").astype(float).to_numpy()
    return np.where(np.isfinite(v), v, np.nan)


def _units(jr: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each run's job's unit of work and the run's work in it (NaN where it has none): the
    count (tokens, else samples) of the runs that hold :data:`UNIT_COVER` or more of the job's
    priced cost, else busy GPU-hours likewise; else ``""``. A run without it (one that crashed
    before counting) is left out of the job's cost per unit, not its unit."""
    codes, _ = pd.factorize(jr["job_key"])
    keys = int(codes.max()) + 1 if len(codes) else 0
    cost = jr["cost_usd"].to_numpy()
    busy = jr["gpu_hours"].to_numpy() * jr["utilization_pct"].to_numpy() / 100.0
    options = [(name, jr[column].to_numpy() / scale) for column, scale, name in UNITS] + [
        (BUSY_UNIT, busy)
    ]
    unit = np.full(keys, "", dtype=object)
    chosen = np.zeros(keys, dtype=bool)
    for name, work in options:
        take = covers(codes, keys, cost, work) & ~chosen
        unit[take] = name
        chosen |= take
    row_unit = unit[codes]
    work = np.full(len(jr), np.nan)
    for name, w in options:
        at = (row_unit == name) & (w > 0)
        work[at] = w[at]
    return row_unit, work


def covers(codes: np.ndarray, keys: int, cost: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Per group, whether the runs with ``work`` hold :data:`UNIT_COVER` or more of its priced
    cost (and it has some): the rule by which a job, or a comparison's sides, take a unit.

    Args:
        codes: Each run's group, 0 to ``keys`` - 1.
        keys: How many groups.
        cost: Each run's cost (NaN: unpriced).
        work: Each run's work in the unit (NaN or 0: none).
    """
    weight = np.where(~np.isnan(cost) & (cost > 0), cost, 0.0)
    total = np.bincount(codes, weights=weight, minlength=keys)
    covered = np.bincount(codes, weights=np.where(work > 0, weight, 0.0), minlength=keys)
    return (total > 0) & (covered >= UNIT_COVER * total)


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
    days = local.dt.tz_localize(None).dt.floor("D")  # the local day, as a column
    # a million runs start on a few hundred days: each day's week once, at its local noon
    firsts = {
        d: week_start_of(datetime(d.year, d.month, d.day, 12, tzinfo=tz), tz)
        for d in days.dropna().unique()
    }
    return pd.to_datetime(days.map(firsts), utc=True)


def _rate(cost: np.ndarray, work: np.ndarray) -> float | None:
    total = float(work.sum())
    return float(cost.sum()) / total if total > 0 else None


def recurring_jobs(
    jr: pd.DataFrame, *, weeks_of: pd.Series, this_week: pd.Timestamp
) -> pd.DataFrame:
    """The job keys with two runs or more, most spend first (:data:`MAX_JOBS`): their runs,
    weeks, GPU-hours, spend, utilization (weighted by GPU-hours), cost per unit of work (all
    runs; the first week's and the last week's), median throughput, most common team and the
    latest run's verdict.

    Args:
        jr: The history's runs (:func:`job_runs`).
        weeks_of: Each run's week start (in the report's time zone), by ``jr``'s index.
        this_week: The report's week start.

    Returns:
        A frame of :data:`RECURRING_COLUMNS`.
    """
    # run ids as integers, counted per key: a million text ids are hashed once, not twice
    codes = pd.factorize(jr["run_id"])[0]
    run_code = pd.Series(codes, index=jr.index).where(codes >= 0)  # a missing id: none
    counts = run_code.groupby(jr["job_key"], sort=False).transform("nunique")
    many = (counts >= 2).to_numpy()
    del codes, counts
    if not many.any():
        return pd.DataFrame(columns=list(RECURRING_COLUMNS))
    j = jr[list(_RECURRING_READS)][many]  # the columns read below, not every one
    # as naive UTC datetime64 (an aware column's numpy is an object per value: slow)
    week = pd.DatetimeIndex(weeks_of[many]).tz_convert("UTC").tz_localize(None).to_numpy()
    this = pd.Timestamp(this_week).tz_convert("UTC").tz_localize(None).to_datetime64()
    cost = j["cost_usd"].to_numpy()
    work = j["work"].to_numpy()
    ok = ~np.isnan(cost) & ~np.isnan(work)
    hours = j["gpu_hours"].to_numpy()
    util = j["utilization_pct"].to_numpy()
    known = ~np.isnan(util) & ~np.isnan(hours)
    tokens = _objects(j["unit"]) == "1M tokens"
    tp = np.where(tokens, j["tokens_per_s"].to_numpy(), j["samples_per_s"].to_numpy())
    f = pd.DataFrame(
        {
            "job_key": _text_values(j["job_key"]),
            "run": run_code.to_numpy()[many],
            "week": week,
            "this": week == this,
            "hours": np.nan_to_num(hours),
            "spend": np.nan_to_num(cost),
            "ok_cost": np.where(ok, cost, 0.0),
            "ok_work": np.where(ok, work, 0.0),
            "known_hours": np.where(known, hours, 0.0),
            "used": np.where(known, util * np.nan_to_num(hours), 0.0),
            "tp": tp,
            "tokens": tokens,
            "unit": _text_values(j["unit"]),
            "verdict": _text_values(j["verdict"]),
        }
    )
    del run_code, week, tp, tokens  # in ``f`` now
    g = f.groupby("job_key", sort=False)
    out = pd.DataFrame(
        {
            "runs": g["run"].nunique(),
            "weeks": g["week"].nunique(),
            "runs_this_week": g["this"].sum().astype(int),
            "gpu_hours": g["hours"].sum(),
            "spend_usd": g["spend"].sum(),
            "used": g["used"].sum(),
            "known_hours": g["known_hours"].sum(),
            "ok_cost": g["ok_cost"].sum(),
            "ok_work": g["ok_work"].sum(),
            "throughput": g["tp"].median(),
            "tokens": g["tokens"].any(),
            "unit": g["unit"].first(),
            "verdict": g["verdict"].last(),
        }
    )
    # each week's cost per unit (of the rows with both: their columns alone), then the runs'
    # frame goes before the teams are counted
    keyed = f[["job_key", "week", "ok_cost", "ok_work"]]
    weekly = keyed[ok].groupby(["job_key", "week"], sort=True)[["ok_cost", "ok_work"]].sum()
    del g, f, keyed
    out["utilization_pct"] = (out["used"] / out["known_hours"]).where(out["known_hours"] > 0)
    out["usd_per_unit"] = (out["ok_cost"] / out["ok_work"]).where(out["ok_work"] > 0)
    out["throughput_unit"] = np.where(
        out["throughput"].notna(), np.where(out["tokens"], "tokens/s", "samples/s"), ""
    )
    # the most common team (the first by name among equals): its two columns, not a copy of
    # every column of the runs
    teams = pd.DataFrame({"job_key": j["job_key"], "team": j["team"].fillna("").astype(str)})
    by_team = teams[teams["team"] != ""].groupby(["job_key", "team"]).size()
    if len(by_team):
        top = by_team.reset_index(name="n").sort_values(
            ["job_key", "n", "team"], ascending=[True, False, True]
        )
        out["team"] = top.drop_duplicates("job_key").set_index("job_key")["team"]
    out["team"] = out.get("team", pd.Series(dtype=object)).reindex(out.index).fillna("")
    # the first and the last week that has a cost per unit
    weekly = weekly[weekly["ok_work"] > 0]
    weekly["rate"] = weekly["ok_cost"] / weekly["ok_work"]
    weekly = weekly.reset_index()
    first = weekly.drop_duplicates("job_key", keep="first").set_index("job_key")
    last = weekly.drop_duplicates("job_key", keep="last").set_index("job_key")
    two = weekly.groupby("job_key").size() > 1
    out["first_week"] = first["week"].reindex(out.index)
    out["first_usd_per_unit"] = first["rate"].reindex(out.index)
    out["last_week"] = (
        last["week"].where(two.reindex(last.index, fill_value=False)).reindex(out.index)
    )
    out["last_usd_per_unit"] = (
        last["rate"].where(two.reindex(last.index, fill_value=False)).reindex(out.index)
    )
    out = out.reset_index(names="job_key")
    out = out.sort_values(["spend_usd", "job_key"], ascending=[False, True], ignore_index=True)
    out = out.head(MAX_JOBS)
    for column in ("first_week", "last_week"):
        out[column] = [None if pd.isna(v) else pd.Timestamp(v, tz="UTC") for v in out[column]]
    return out[list(RECURRING_COLUMNS)].astype({"runs": int, "weeks": int, "runs_this_week": int})


_RECURRING_READS = (
    "job_key",
    "team",
    "gpu_hours",
    "cost_usd",
    "utilization_pct",
    "samples_per_s",
    "tokens_per_s",
    "verdict",
    "unit",
    "work",
)
"""The columns of :func:`job_runs` that :func:`recurring_jobs` reads past the run ids."""


def mode_of(values: Iterable[Any]) -> str:
    """The most common non-empty text (the latest among equals); ``""`` where none.

    Args:
        values: Verdicts, teams… in order.
    """
    v = [x for x in values if isinstance(x, str) and x]
    if not v:
        return ""
    counts: dict[str, int] = {}
    for x in v:
        counts[x] = counts.get(x, 0) + 1
    best = max(counts.values())
    return next(x for x in reversed(v) if counts[x] == best)


@dataclass(frozen=True)
class _Job:
    """One job's usable runs (priced, with work), by start."""

    key: str
    unit: str
    starts: pd.DatetimeIndex
    cost: np.ndarray
    work: np.ndarray
    teams: np.ndarray
    verdicts: np.ndarray


def _jobs(jr: pd.DataFrame) -> list[_Job]:
    """The jobs of ``jr`` (sorted by key and start) with a unit, one slice each."""
    cost = jr["cost_usd"].to_numpy(dtype=float)
    work = jr["work"].to_numpy(dtype=float)
    ok = (cost > 0) & (work > 0)  # NaN compares False: unpriced, or no work counted
    j = jr[["job_key", "started_at", "team", "verdict", "unit"]][ok]  # not every column
    if not len(j):
        return []
    keys = _objects(j["job_key"])
    bounds = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    starts = pd.DatetimeIndex(j["started_at"])
    cost, work = cost[ok], work[ok]
    teams, verdicts, units = (_objects(j[c]) for c in ("team", "verdict", "unit"))
    return [
        _Job(
            key=str(keys[a]),
            unit=str(units[a]),
            starts=starts[a:b],
            cost=cost[a:b],
            work=work[a:b],
            teams=teams[a:b],
            verdicts=verdicts[a:b],
        )
        for a, b in zip([0, *bounds], [*bounds, len(j)], strict=True)
    ]


def changes(
    jr: pd.DataFrame,
    marks: Sequence[Any],
    *,
    end: datetime,
    tz: tzinfo,
) -> tuple[Change, ...]:
    """Each recurring job's changes: one per mark with runs on both sides, else the change
    point its runs show (if any), most saved first.

    Args:
        jr: The history's runs (:func:`job_runs`).
        marks: The marks (:class:`reports.data.marks.Mark`: ``job_key``, ``at``, ``note``).
        end: The end of the report's span (the week's end, or now): what "to date" runs to.
        tz: The report's time zone (for the week of a change).
    """
    by_key: dict[str, list[Any]] = {}
    for m in marks:
        by_key.setdefault(m.job_key, []).append(m)
    out: list[Change] = []
    for job in _jobs(jr):
        key_marks = sorted(by_key.get(job.key, []), key=lambda m: m.at)
        found = 0
        bounds = [pd.Timestamp(m.at) for m in key_marks]
        for i, m in enumerate(key_marks):
            # the rates: the runs between the previous mark and this one, and this one and the
            # next; the saving: on all the work from this mark on (a later fix builds on it)
            before = np.array(job.starts < bounds[i], dtype=bool)
            after = np.array(job.starts >= bounds[i], dtype=bool)
            since = after.copy()
            if i:
                before &= np.array(job.starts >= bounds[i - 1], dtype=bool)
            if i + 1 < len(bounds):
                after &= np.array(job.starts < bounds[i + 1], dtype=bool)
            c = _change(
                job, before, after, since=since, at=m.at, end=end, how="mark", note=m.note, tz=tz
            )
            if c is not None:
                out.append(c)
                found += 1
        if found:
            continue
        if job.unit == BUSY_UNIT:
            continue  # utilization alone is too noisy a measure of work to search for a change
        split = _change_point(job.cost, job.work)
        if split is None:
            continue
        idx = np.arange(len(job.cost))
        c = _change(
            job,
            idx < split,
            idx >= split,
            since=idx >= split,
            at=job.starts[split].to_pydatetime(),
            end=end,
            how="change point",
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
    unit (least squares of two means), with :data:`MIN_RUNS` runs or more on each side; None
    where there is none, or where its change (of the ratios of sums) is under
    :data:`MIN_CHANGE_PCT` or the t statistic of the two sides' log costs under :data:`MIN_T`."""
    n = len(cost)
    if n < 2 * MIN_RUNS:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(cost / work)
    if not np.isfinite(y).all():
        return None
    s, s2 = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(MIN_RUNS, n - MIN_RUNS + 1)
    left = s2[k - 1] - s[k - 1] ** 2 / k
    right = (s2[-1] - s2[k - 1]) - (s[-1] - s[k - 1]) ** 2 / (n - k)
    at = int(k[np.argmin(left + right)])
    rb, ra = _rate(cost[:at], work[:at]), _rate(cost[at:], work[at:])
    if rb is None or ra is None or abs(100.0 * (ra / rb - 1.0)) < MIN_CHANGE_PCT:
        return None
    a, b = y[:at], y[at:]
    spread = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    if spread > 0 and abs(b.mean() - a.mean()) / spread < MIN_T:
        return None
    return at


def _change(
    job: _Job,
    before: np.ndarray,
    after: np.ndarray,
    *,
    since: np.ndarray,
    at: datetime,
    end: datetime,
    how: str,
    note: str,
    tz: tzinfo,
) -> Change | None:
    """The change from the runs ``before`` to those ``after``; its saving on the work of the
    runs ``since`` (from the change to the end, later changes' runs too): (rate before − rate
    after) × that work, so that a job's changes add up to its first rate × its work since less
    what that work cost."""
    from reports.weeks import week_label, week_of

    cost, work = job.cost, job.work
    rb, ra = _rate(cost[before], work[before]), _rate(cost[after], work[after])
    if rb is None or ra is None or rb <= 0:
        return None
    low: float | None = None
    high: float | None = None
    if before.sum() >= MIN_RUNS and after.sum() >= MIN_RUNS:
        band = change_interval_pct(cost[before] / work[before], cost[after] / work[after])
        if band is not None and math.isfinite(band[0]) and math.isfinite(band[1]):
            low, high = band
    to_date = (rb - ra) * float(work[since].sum())
    if abs(to_date) < 0.005:  # float noise of equal rates: nothing saved, nothing lost
        to_date = 0.0
    weeks = max((end - at) / timedelta(weeks=1), 1.0)
    return Change(
        job_key=job.key,
        team=mode_of(job.teams[after]) or mode_of(job.teams),
        at=at,
        week=week_label(*week_of(at, tz)),
        how=how,
        note=note,
        unit=job.unit,
        runs_before=int(before.sum()),
        runs_after=int(after.sum()),
        usd_per_unit_before=rb,
        usd_per_unit_after=ra,
        change_pct=100.0 * (ra / rb - 1.0),
        low_pct=low,
        high_pct=high,
        verdict_before=mode_of(job.verdicts[before]),
        verdict_after=mode_of(job.verdicts[after]),
        weeks_since=weeks,
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
        f"({spread}); {_usd(c.usd_per_week)}/week {saved}, {_usd(c.usd_to_date)} to date"
    )


def _usd(v: float) -> str:
    """``$2,140`` from $100 on, ``$48.40`` under it."""
    return f"${abs(v):,.0f}" if abs(v) >= 100 else f"${abs(v):,.2f}"


def _pct(v: float) -> str:
    if round(abs(v)) == 0:
        return "0%"
    return f"{'−' if v < 0 else '+'}{abs(v):.0f}%"
