"""One week's KPIs from GPU-time rows: the headline, week-over-week change, breakdowns, the
runs ordered by waste, the 12-week trend. Money comes from :mod:`tracker.cost`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from typing import Any

import numpy as np
import pandas as pd

from reports.kpi.allocations import AllocationWeek, CapacityLine
from reports.kpi.causes import CauseLine, week_causes
from reports.kpi.checks import Skipped
from reports.kpi.fleet import rent_vs_own_lines
from reports.kpi.frames import BASES, positions_in, sorted_codes_at, sorted_moving
from reports.kpi.gputime import gpu_time
from reports.kpi.ledger import (
    BESIDE_WASTE_USD,
    JOB_KIND,
    RUN_KIND,
    Unallocated,
    failed_work,
    redone_shares,
    redone_work,
    throttled_work,
    unallocated,
)
from reports.kpi.pricing import run_prices
from reports.kpi.rightsizing import READS as RIGHTSIZING_READS
from reports.kpi.rightsizing import rightsizing
from reports.kpi.slownodes import SLOW_NODE_COLUMNS, slow_node_work
from reports.kpi.whatif import WhatIf, what_if
from reports.rows import Headline, Part
from reports.weeks import shift_week
from tracker.carbon import Carbon
from tracker.cost import Thresholds, gpu_waste_usd, spend_usd, thresholds_for, weighted_util_pct
from tracker.owned import OwnedGpu, RentVsOwn
from tracker.peaks import MFU_FIELDS
from tracker.prices import PriceTable
from tracker.units import S_PER_HOUR


# -- one week's KPIs --------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class WeekKpis:
    week: pd.Timestamp
    basis: str
    basis_label: str
    thresholds: Thresholds
    headline: Headline
    previous: Headline | None
    change_pct: dict[str, float | None]
    """Week-over-week change of each headline figure, in %; None when there is no previous
    week or it was 0."""
    by: dict[str, pd.DataFrame]
    """Breakdowns by team, project, user and gpu_model: gpu_hours, utilization_pct, spend_usd,
    waste_usd, idle_usd, runs."""
    runs: pd.DataFrame
    """One row per run with GPU time in the week, with its week figures, ordered by waste."""
    underutilized: pd.DataFrame
    trend: pd.DataFrame
    """One row per week (up to 12, oldest first) of headline figures."""
    rightsizing: pd.DataFrame = field(default_factory=pd.DataFrame)
    causes: tuple[CauseLine, ...] = ()
    """The week's waste by cause, most dollars first (:func:`reports.kpi.causes.week_causes`
    of ``runs`` and ``rightsizing``): worked out once, for every output of the week."""
    what_if: WhatIf | None = None
    """What fixing the most wasteful runs would return in GPUs, and defer
    (:mod:`reports.kpi.whatif`); None without recoverable waste."""
    rent_vs_own: tuple[RentVsOwn, ...] = ()
    """One line per owned model (``[owned.<MODEL>]``): its week owned vs rented."""
    carbon: Carbon = field(default_factory=Carbon)
    """The grid intensity and PUE behind ``co2e_kg``."""
    skipped: Skipped = field(default_factory=Skipped)
    """Runs and sample rows left out of these figures, with the reason (set by the report
    builder, which reads the store)."""
    parts: Mapping[str, Part] = field(default_factory=dict)
    """The report's sections that are units of their own, by name in the order shown
    (:mod:`reports.sections`; set by the report builder)."""
    allocations: AllocationWeek | None = None
    """The scheduler's jobs of the week against their samples (``gpu-kpi import slurm``; set
    by the report builder); None when no job was ever imported."""
    so_far: datetime | None = None
    """For a week still under way: the time its figures run to, in the report's time zone
    (set by the report builder); None for a complete week."""
    slow_nodes: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The week's slow nodes (:func:`reports.kpi.slownodes.slow_node_work`: judged among its
    runs, their dollars the ledger's)."""
    hint: str = ""
    """Where the runs are when this week has none (set by the report builder)."""
    week_headlines: Mapping[pd.Timestamp, Headline] = field(default_factory=dict)
    """The headline of each week of the trend worked out from the rows (not a kept one)."""
    team_headlines: Mapping[tuple[str, pd.Timestamp], Headline] = field(default_factory=dict)
    """Per (team, week) of the trend with rows, the team's headline (when asked for)."""


def run_weeks(
    gt: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    prices: PriceTable,
    target_util_pct: float,
    owned: Mapping[str, OwnedGpu] | None = None,
    carbon: Carbon | None = None,
) -> pd.DataFrame:
    """Per (run, week): GPU-hours, utilization, spend, waste (per GPU: its idle hours in full,
    the rest × max(0, 1 − util of the rest ÷ target)), idle $, energy and CO2e (the run's, pro
    rata by GPU-hours), and the run's attributes."""
    price_of_run, owned_gpu = run_prices(runs, prices, owned)
    redone_share, resumed = redone_shares(runs)
    # floats, NaN unpriced (an empty frame's column would otherwise be of strings)
    price = pd.to_numeric(price_of_run, errors="coerce").to_numpy(dtype=float)
    # each row's run by its place in ``runs`` (-1: none): the text ids are looked up once,
    # the run's figures then taken by integer (a million runs: each look-up costs a second)
    at = positions_in(gt["run_id"], runs["id"])
    g = gt.copy()
    g["price"] = _taken(price, at, np.nan)
    g["_at"] = at
    g["cost"] = spend_usd(g["gpu_hours"], g["price"])

    def waste(amount: pd.Series) -> pd.Series:
        """The per-GPU waste rule on ``amount`` (dollars, or GPU-hours for the ledger)."""
        return gpu_waste_usd(
            amount,
            held=g["gpu_hours"],
            known=g["known_hours"],
            util_time=100.0 * g["used_hours"],
            idle=g["idle_hours"],
            idle_util_time=100.0 * g["idle_used_hours"],
            target_util_pct=target_util_pct,
        )

    g["waste"] = waste(g["cost"])
    g["idle"] = g["idle_hours"] * g["price"]
    g["unpriced"] = g["price"].isna().astype(int)
    # the ledger's buckets in GPU-hours (reports.kpi.ledger): the waste rule on hours, and a
    # GPU-week with no utilization value at all as not measured
    g["waste_hours"] = waste(g["gpu_hours"])
    g["unmeasured_hours"] = g["gpu_hours"].where(g["known_hours"] <= 0, 0.0)
    # per (run, week), in the order of run id (as text) then week: grouped by one integer
    # (a million runs' text ids grouped as text: seconds)
    run_codes, run_ids = sorted_codes_at(g["run_id"], at, runs["id"])
    week_codes, week_values = pd.factorize(g["week"], sort=True)
    weeks_n = max(len(week_values), 1)
    kept = (run_codes >= 0) & (week_codes >= 0)  # as groupby leaves out a missing key
    key = run_codes[kept] * weeks_n + week_codes[kept]
    grouped = (g if kept.all() else g[kept]).groupby(key, sort=True)
    # the sums in one aggregation of the frame's columns (one named aggregation a column
    # costs ~1.5 ms each whatever the rows), and a row's run the same in its group
    per = grouped[list(_RUN_WEEK_SUMS)].sum().rename(columns=_RUN_WEEK_SUMS)
    per["_at"] = grouped["_at"].first()
    k = per.index.to_numpy(dtype=np.int64)
    # the ids as objects, not made Arrow's text and then objects again
    per.insert(0, "run_id", pd.Series(run_ids[k // weeks_n], index=per.index, dtype=object))
    per.insert(1, "week", week_values[k % weeks_n])
    per = per.reset_index(drop=True)
    per_at = per.pop("_at").to_numpy()
    per["priced"] = per.pop("unpriced") == 0
    per["kind"] = RUN_KIND
    per["utilization_pct"] = weighted_util_pct(100.0 * per["used_hours"], per["known_hours"])
    cols = [
        "name",
        "project",
        "team",
        "user",
        "host",
        "gpu_model",
        "gpu_count",
        "mig_profile",
        "gpu_split",
        "gpu_hours",
        *MFU_FIELDS,
        "samples",
        "tokens",
        "energy_kwh",
        "verdict",
        "advice",
        "links",
        "throttled_gpu_hours",
        "throttle_source",
        "mem_peak_gib",
        "mem_total_gib",
        "status",
        "started_at",
        "ended_at",
        "source",
    ]
    names = {
        "gpu_hours": "run_gpu_hours",
        "samples": "run_samples",
        "tokens": "run_tokens",
        "energy_kwh": "run_energy_kwh",
        "throttled_gpu_hours": "run_throttled_gpu_hours",
    }
    per = per.astype({"run_id": object})  # empty: run_id was float
    if len(per) and (per_at >= 0).all():
        # a column of the runs that is None throughout is one column of None shared here too
        # (not a copy of a million Nones each: copy on write keeps them apart)
        blank = [c for c in cols if _all_none(runs[c])]
        m = runs[[c for c in cols if c not in blank]].iloc[per_at].set_axis(per.index)
        if blank:
            nothing = pd.Series(
                np.full(len(per), None, dtype=object), index=per.index, dtype=object
            )
            for c in blank:
                m[c] = nothing
            m = m[cols]
        per = pd.concat([per, m.rename(columns=names)], axis=1)
    else:  # a row of no run in ``runs``: its attributes missing, as a join leaves them
        per = per.join(runs.set_index("id")[cols].rename(columns=names), on="run_id")
    share = per["gpu_hours"] / per["run_gpu_hours"].where(per["run_gpu_hours"] > 0)
    per["samples"] = per["run_samples"].astype(float) * share
    per["tokens"] = per["run_tokens"].astype(float) * share
    per["energy_kwh"] = per["run_energy_kwh"].astype(float) * share
    per["owned_gpu"] = pd.Series(_taken(owned_gpu.to_numpy(), per_at, np.nan), index=per.index)
    per["owned_gpu"] = per["owned_gpu"].astype(object)
    per["co2e_kg"] = (carbon or Carbon()).co2e_kg_series(per["energy_kwh"], per["host"].fillna(""))
    per["price_per_gpu_hour"] = _taken(price, per_at, np.nan)
    per["unmeasured_usd"] = per["unmeasured_hours"] * per["price_per_gpu_hour"]
    per["run_redone_share"] = _taken(redone_share, per_at, 0.0)
    per["run_resumed"] = _taken(resumed, per_at, False).astype(bool)
    return throttled_work(redone_work(failed_work(per)))


_RUN_WEEK_SUMS = {
    "gpu_hours": "gpu_hours",
    "known_hours": "known_hours",
    "used_hours": "used_hours",
    "cost": "spend_usd",
    "waste": "waste_usd",
    "idle": "idle_usd",
    "unpriced": "unpriced",
    "unmeasured_hours": "unmeasured_hours",
    "waste_hours": "waste_hours",
    "idle_hours": "idle_hours",
}
""":func:`run_weeks`' columns summed per run and week, and their names there."""

_NONE = np.array(None, dtype=object)
"""None as an array numpy compares each object with."""


def _all_none(column: pd.Series) -> bool:
    """Whether ``column`` holds Python objects, each of them None (and at least one)."""
    if column.dtype != object or not len(column):
        return False
    values = column.to_numpy()
    return values[0] is None and bool(np.equal(values, _NONE).all())


def _taken(values: np.ndarray, at: np.ndarray, missing: Any) -> np.ndarray:
    """``values[at]``, ``missing`` where ``at`` is -1 (as :meth:`pandas.Series.map` leaves a
    key it does not find)."""
    if len(at) and (at >= 0).all():
        return values[at]
    out = np.full(len(at), missing, dtype=float if values.dtype.kind == "f" else object)
    found = at >= 0
    out[found] = values[at[found]]
    return out


def _headline(per: pd.DataFrame, t: Thresholds, free: Unallocated | None = None) -> Headline:
    # arrays, not frames: a report works out a headline per week of its trend and per team
    def col(name: str) -> np.ndarray:
        if name not in per:
            return np.zeros(len(per))
        return per[name].to_numpy(dtype=float, na_value=np.nan)

    def total(values: np.ndarray, where: np.ndarray | None = None) -> float:
        return float(np.nansum(values if where is None else values[where]))

    priced = per["priced"].astype(bool).to_numpy()
    hours, known, util = col("gpu_hours"), col("known_hours"), col("utilization_pct")
    spend = col("spend_usd")
    is_job = per["kind"].to_numpy() == JOB_KIND if "kind" in per else np.zeros(len(per), bool)
    with np.errstate(invalid="ignore"):
        under = (util < t.underutilized_pct) & (hours >= t.underutilized_min_gpu_hours)
    under &= ~is_job  # an underutilized run is a run; a job's time is in the runs to fix
    ids = per["run_id"].where(~is_job)  # a job's row is no run
    energy = col("energy_kwh")
    metered = ~np.isnan(energy)
    all_hours = total(hours)

    def unit(name: str, scale: float) -> float | None:
        values = col(name)
        with np.errstate(invalid="ignore"):
            rows = priced & ~np.isnan(values) & (values > 0)
        n = total(values, rows)
        return scale * total(spend, rows) / n if n > 0 else None

    unmeasured = col("unmeasured_hours")
    return Headline(
        gpu_hours=all_hours,
        known_gpu_hours=total(known),
        utilization_pct=weighted_util_pct(100.0 * total(col("used_hours")), total(known)),
        spend_usd=total(spend, priced),
        waste_usd=total(col("waste_usd"), priced),
        idle_usd=total(col("idle_usd"), priced),
        runs=int(ids.nunique()),
        underutilized_runs=int(ids[under].nunique()),
        underutilized_gpu_hours_pct=100.0 * total(hours, under) / all_hours
        if all_hours > 0
        else None,
        usd_per_1k_samples=unit("samples", 1e3),
        usd_per_1m_tokens=unit("tokens", 1e6),
        unpriced_gpu_hours=total(hours, ~priced),
        energy_kwh=total(energy, metered) if metered.any() else None,
        co2e_kg=total(col("co2e_kg"), metered) if metered.any() else None,
        energy_gpu_hours=total(hours, metered),
        unmeasured_gpu_hours=total(unmeasured),
        unmeasured_usd=total(col("unmeasured_usd"), priced),
        failed_gpu_hours=total(col("failed_hours")),
        failed_usd=total(col("failed_usd"), priced),
        redone_gpu_hours=total(col("redone_hours")),
        redone_usd=total(col("redone_usd"), priced),
        throttled_gpu_hours=total(col("throttled_hours")),
        throttled_usd=total(col("throttled_usd"), priced),
        slow_node_gpu_hours=total(col("slow_node_hours")),
        slow_node_usd=total(col("slow_node_usd"), priced),
        unallocated_gpu_hours=None if free is None else free.gpu_hours,
        unallocated_usd=None if free is None else free.usd,
        unallocated_unpriced_gpu_hours=0.0 if free is None else free.unpriced_gpu_hours,
        jobs=int(np.count_nonzero(is_job)),
    )


def _change(now: float | None, before: float | None) -> float | None:
    if now is None or before is None or before == 0:
        return None
    return 100.0 * (now - before) / before


_SUMMED = [
    "gpu_hours",
    "known_hours",
    "used_hours",
    "spend_usd",
    "waste_usd",
    "idle_usd",
    *BESIDE_WASTE_USD,
]
_BREAKDOWN = [
    "gpu_hours",
    "spend_usd",
    "waste_usd",
    "idle_usd",
    *BESIDE_WASTE_USD,
    "co2e_kg",
    "runs",
    "utilization_pct",
]


NONE = "(none)"
"""The breakdowns' name for a run without a value of the key (missing or empty)."""


def breakdown_groups(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Each run's group in a breakdown by ``column`` and the groups' names, sorted (as
    :meth:`pandas.DataFrame.groupby` sorts them): a run without a value (missing or empty) is
    in :data:`NONE`.

    Args:
        column: The key of each run (``team``, ``project``, ``user``, ``gpu_model``, ``source``).

    Returns:
        Each run's group (a position in the names) and the names; a name may have no run.
    """
    if isinstance(column.dtype, pd.StringDtype):  # text in Arrow: its own hash, no objects
        codes, uniques = pd.factorize(column)  # missing: -1
    else:
        codes, uniques = pd.factorize(column.to_numpy(dtype=object))
    named = [NONE if isinstance(u, str) and u == "" else u for u in uniques]
    names = np.empty(len(named) + 1, dtype=object)
    names[:-1], names[-1] = named, NONE
    try:
        names, where = np.unique(names, return_inverse=True)
    except TypeError:  # names of mixed types (not from the store): in the order found
        where, names = pd.factorize(names)
    # -1 (missing) takes the last: NONE
    return where[codes], names


def unpriced_groups(runs: pd.DataFrame, key: str) -> set[str]:
    """The values of ``key`` (as the breakdowns name them) whose runs this week are all
    unpriced: their dollars are unknown, not $0.

    Args:
        runs: The week's runs, with ``priced`` (bool) and the ``key`` column.
        key: The breakdown's key column.

    Returns:
        The names of the groups with runs and none of them priced.
    """
    if not len(runs) or "priced" not in runs or key not in runs:
        return set()
    codes, names = breakdown_groups(runs[key])
    priced = runs["priced"].astype(bool).to_numpy()
    n = np.bincount(codes, minlength=len(names))
    with_price = np.bincount(codes, weights=priced, minlength=len(names))
    return {str(names[i]) for i in np.flatnonzero((n > 0) & (with_price == 0))}


def _breakdown(per: pd.DataFrame, key: str, run_codes: np.ndarray | None = None) -> pd.DataFrame:
    """The week's totals per value of ``key`` (a run without one is ``(none)``), most waste
    first. ``run_codes``: ``per``'s run ids factorized (:func:`pandas.factorize`), shared by
    the breakdowns of one week."""
    # the keys factorized once, in the order groupby sorts them; the runs counted by integer
    codes, names = breakdown_groups(per[key])
    if run_codes is None:
        run_codes = _run_codes(per)
    g = per[[*_SUMMED, "co2e_kg"]].groupby(codes)  # one pass for every sum (named aggs: 2x slower)
    out = g.sum()
    out["co2e_kg"] = g["co2e_kg"].sum(min_count=1)  # NaN for a group that measured none
    out["runs"] = _distinct_runs(run_codes, codes, len(names))[out.index.to_numpy()]
    out.index = pd.Index(names[out.index.to_numpy()], name=key)
    out["utilization_pct"] = weighted_util_pct(100.0 * out["used_hours"], out["known_hours"])
    return out[_BREAKDOWN].sort_values(["waste_usd", "spend_usd"], ascending=False).reset_index()


def _distinct_runs(run_codes: np.ndarray, codes: np.ndarray, groups: int) -> np.ndarray:
    """How many distinct runs (``run_codes``, NaN: no run) each group of ``codes`` holds."""
    known = ~np.isnan(run_codes)
    runs = run_codes[known].astype(np.int64)
    width = int(runs.max(initial=-1)) + 1
    pairs = np.sort(codes[known].astype(np.int64) * width + runs)
    first = np.ones(len(pairs), dtype=bool)
    first[1:] = pairs[1:] != pairs[:-1]  # sorted: np.unique's hash costs a second a call
    return np.bincount(pairs[first] // max(width, 1), minlength=groups)


def _run_codes(per: pd.DataFrame) -> np.ndarray:
    """``per``'s run ids factorized, NaN for a job's row (a job is no run)."""
    codes = pd.factorize(per["run_id"].to_numpy(dtype=object))[0].astype(float)
    if "kind" in per:
        codes[per["kind"].to_numpy() == JOB_KIND] = np.nan
    return codes


HEADLINE_FIELDS: Sequence[str] = tuple(Headline.__dataclass_fields__)


def week_kpis(
    runs: pd.DataFrame,
    samples: pd.DataFrame,
    week: datetime,
    *,
    tz: tzinfo,
    basis: str = "util",
    thresholds: Thresholds | None = None,
    prices: PriceTable | None = None,
    trend_weeks: int = 12,
    now: datetime | None = None,
    owned: Mapping[str, OwnedGpu] | None = None,
    carbon: Carbon | None = None,
) -> WeekKpis:
    """The KPIs of the ISO week starting ``week`` (Monday 00:00 in ``tz``), with the previous
    week for week-over-week change and up to ``trend_weeks`` weeks of trend."""
    gt = gpu_time(runs, samples, tz=tz, basis=basis, thresholds=thresholds, now=now)
    return kpis_of_gpu_time(
        runs,
        gt,
        week,
        tz=tz,
        basis=basis,
        thresholds=thresholds,
        prices=prices,
        trend_weeks=trend_weeks,
        owned=owned,
        carbon=carbon,
    )


def kpis_of_gpu_time(
    runs: pd.DataFrame,
    gt: pd.DataFrame,
    week: datetime,
    *,
    tz: tzinfo,
    basis: str = "util",
    thresholds: Thresholds | None = None,
    prices: PriceTable | None = None,
    trend_weeks: int = 12,
    owned: Mapping[str, OwnedGpu] | None = None,
    carbon: Carbon | None = None,
    stored: Mapping[pd.Timestamp, Headline] | None = None,
    team_headlines: Collection[pd.Timestamp] = (),
    jobs: pd.DataFrame | None = None,
    capacity: Mapping[pd.Timestamp, Sequence[CapacityLine]] | None = None,
    now: datetime | None = None,
    fleet: bool = True,
) -> WeekKpis:
    """:func:`week_kpis` from the runs' GPU-time rows (:data:`GT_COLUMNS`). ``prices``: the
    rental table (with the config's ``[prices]``); ``owned`` models are priced at their
    amortized rate and compared with it. ``stored``: the headlines of earlier weeks whose rows
    were not read (kept by an earlier report: :mod:`reports.data.week_cache`), by week start;
    ``team_headlines``: the weeks (starts) to work out each team's headline of too. ``jobs``:
    the scheduler's GPU-time no run holds (:func:`reports.kpi.ledger.job_rows`, any weeks),
    summed with the runs' rows; ``capacity``: per week start, the scheduler's node capacity
    not of owned models (its unallocated hours are capacity nobody held, with ``[owned]``'s);
    ``now``: where a week under way ends for its capacity; ``fleet``: False for a part of the
    fleet (a team's runs): capacity nobody held is the fleet's, no team's (None there)."""
    t = thresholds or thresholds_for(basis)
    prices = prices or PriceTable()
    carbon = carbon or Carbon()
    per = run_weeks(
        gt, runs, prices=prices, target_util_pct=t.target_util_pct, owned=owned, carbon=carbon
    )
    if jobs is not None and len(jobs):
        per = pd.concat([per, jobs.astype({"run_id": object})], ignore_index=True)
    per, slow = slow_node_work(per, runs, prices=prices.overrides, owned=owned)
    w = pd.Timestamp(week).tz_convert("UTC")
    weeks = [shift_week(w, tz, -k) for k in range(max(trend_weeks, 2) - 1, -1, -1)]
    # each week's rows by position, a frame made only as it is used (a week that holds every
    # row is ``per`` itself, not a copy of a million rows)
    of_week = _week_positions(per["week"], weeks)
    this = _rows_at(per, of_week.get(w))
    prev = _rows_at(per, of_week.get(weeks[-2]))
    stored = {pd.Timestamp(k).tz_convert("UTC"): v for k, v in (stored or {}).items()}

    def free(wk: pd.Timestamp, rows: pd.DataFrame) -> Unallocated | None:
        if not fleet:
            return None
        end = shift_week(wk, tz, 1)
        if now is not None:
            end = max(min(end, pd.Timestamp(now)), wk)
        return unallocated(
            rows,
            hours_in_week=(end - wk).total_seconds() / S_PER_HOUR,
            owned=owned,
            capacity=(capacity or {}).get(wk, ()),
        )

    empty = _headline(per.iloc[:0], t)  # a week without rows or known capacity, worked out once
    worked: dict[pd.Timestamp, Headline] = {}
    for i, wk in enumerate(weeks):
        last = len(weeks) - 1 - i
        rows = this if last == 0 else prev if last == 1 else _rows_at(per, of_week.get(wk))
        spare = free(wk, rows)
        worked[wk] = empty if not len(rows) and spare is None else _headline(rows, t, spare)
    del rows
    headlines = {
        wk: stored[wk] if wk in stored and wk not in of_week else worked[wk] for wk in weeks
    }
    head = headlines[w]
    previous = headlines[weeks[-2]] if len(prev) or headlines[weeks[-2]].runs > 0 else None
    change = {
        f: _change(getattr(head, f), getattr(previous, f) if previous else None)
        for f in HEADLINE_FIELDS
    }
    trend = pd.DataFrame(
        [
            {"week": pd.Timestamp(wk), **headlines[wk].__dict__}
            for wk in weeks[len(weeks) - trend_weeks :]
        ]
    )
    run_codes = _run_codes(this)
    by = {
        k: _breakdown(this, k, run_codes)
        for k in ("team", "project", "user", "gpu_model", "source")
    }
    del run_codes
    hours_in_week = (shift_week(w, tz, 1) - w).total_seconds() / S_PER_HOUR
    # the columns right-sizing reads, not a copy of every column of the runs it picks
    measured = this[[c for c in RIGHTSIZING_READS if c in this]]
    is_run = (this["kind"] == RUN_KIND).to_numpy(dtype=bool)
    sized = rightsizing(
        measured if is_run.all() else measured[is_run],
        prices,
        max_util_pct=t.underutilized_pct,
        target_util_pct=t.target_util_pct,
    )
    del measured, is_run
    rent = (
        tuple(rent_vs_own_lines(this, owned, rent=prices, hours_in_week=hours_in_week))
        if owned
        else ()
    )
    teams = (
        {
            (str(team), pd.Timestamp(wk)): _headline(rows, t, None)
            for (team, wk), rows in per[per["week"].isin(list(team_headlines))].groupby(
                ["team", "week"]
            )
        }
        if len(team_headlines)
        else {}
    )
    # the week's rows move into ``ordered`` a column at a time: ``per`` (or the week's copy)
    # is not held beside them
    rows = this
    del this, prev, per
    ordered = sorted_moving(rows, ["waste_usd", "spend_usd"], ascending=False)
    del rows
    under = ordered[
        (ordered["utilization_pct"] < t.underutilized_pct)
        & (ordered["gpu_hours"] >= t.underutilized_min_gpu_hours)
        & (ordered["kind"] == RUN_KIND)
    ]
    return WeekKpis(
        week=w,
        basis=basis,
        basis_label=BASES[basis][1],
        thresholds=t,
        headline=head,
        previous=previous,
        change_pct=change,
        by=by,
        runs=ordered,
        underutilized=under.reset_index(drop=True),
        trend=trend,
        rightsizing=sized,
        causes=week_causes(ordered, sized),
        rent_vs_own=rent,
        what_if=what_if(
            ordered,
            trend,
            head.gpu_hours,
            owned,
            hours_in_week=hours_in_week,
            free_gpu_hours=head.unallocated_gpu_hours,
        ),
        carbon=carbon,
        week_headlines={wk: worked[wk] for wk in weeks if wk not in stored or wk in of_week},
        team_headlines=teams,
        slow_nodes=slow.get(w, pd.DataFrame(columns=list(SLOW_NODE_COLUMNS))),
    )


def _rows_at(per: pd.DataFrame, at: np.ndarray | None) -> pd.DataFrame:
    """The rows of ``per`` at the positions ``at`` (None: none), ``per`` itself where they are
    all of its rows (:func:`_week_positions`' are ascending): no copy of a million rows."""
    if at is None:
        return per.iloc[:0]
    return per if len(at) == len(per) else per.take(at)


def _week_positions(week: pd.Series, weeks: Sequence[pd.Timestamp]) -> dict[Any, np.ndarray]:
    """The positions of the rows of each of ``weeks`` in ``week`` (the rows' week starts),
    ascending, by the week as the rows hold it: a week without rows is not a key (as
    :meth:`pandas.DataFrame.groupby` of the rows in ``weeks`` leaves it out)."""
    codes, values = pd.factorize(week)  # a missing week: -1, in no group
    wanted = np.flatnonzero(pd.Index(values).isin(weeks))
    return {values[i]: np.flatnonzero(codes == i) for i in wanted.tolist()}


RATE_FIELDS = frozenset(
    {"utilization_pct", "underutilized_gpu_hours_pct", "usd_per_1k_samples", "usd_per_1m_tokens"}
)
"""Headline figures that are rates or shares: a part of a week compares them as they are."""


def so_far_week(k: WeekKpis, share: float) -> WeekKpis:
    """A week under way, ``share`` of it elapsed (0-1), compared with the week before at the
    same point: its totals pro rata (``share`` of them: the week before's rows are not read
    again by hour), its rates and shares as they were. Comparing a Tuesday with a whole week
    said "spend ▼ 80%" of every week under way."""
    prev = k.previous
    if prev is None:
        return k
    share = min(max(share, 0.0), 1.0)
    pro_rata: dict[str, Any] = {}
    for f, v in prev.__dict__.items():
        if f in RATE_FIELDS or v is None or isinstance(v, bool):
            continue
        if isinstance(v, int):
            pro_rata[f] = round(v * share)  # a count of runs: whole ones
        elif isinstance(v, float):
            pro_rata[f] = v * share
    scaled = replace(prev, **pro_rata)
    change = {f: _change(getattr(k.headline, f), getattr(scaled, f)) for f in HEADLINE_FIELDS}
    return replace(k, previous=scaled, change_pct=change)


def user_week(k: WeekKpis, user: str) -> WeekKpis:
    """The week as one engineer's own outputs show it (their runs mail, their chat card): their
    underutilized runs alone, in ``runs`` and ``underutilized``, their right-sizing and their
    waste by cause; no other owner's row anywhere (no breakdowns, sections, jobs, teams'
    headlines, skipped runs: the fleet's report has those). The headline and trend stay the
    fleet's totals: figures, not anybody's runs."""
    under = k.underutilized
    mine = under[under["user"] == user].reset_index(drop=True) if len(under) else under
    ids = set(mine["run_id"]) if len(mine) else set()
    runs = k.runs[k.runs["run_id"].isin(ids)].reset_index(drop=True) if len(k.runs) else k.runs
    sized = k.rightsizing
    if len(sized) and "run_id" in sized:
        sized = sized[sized["run_id"].isin(ids)].reset_index(drop=True)
    return replace(
        k,
        runs=runs,
        underutilized=mine,
        rightsizing=sized,
        causes=week_causes(runs, sized),
        by={},
        parts={},
        allocations=None,
        skipped=Skipped(),
        team_headlines={},
        what_if=None,
    )


def fix_order(k: WeekKpis) -> np.ndarray:
    """The positions in ``k.runs`` of the week's runs and jobs worth an engineer's look, by
    recoverable waste plus dollars not measured (largest first, ties as listed): every run
    with either or a verdict other than healthy, whatever its utilization. An input-bound run
    at 60%, a low-MFU run or a job nothing measured is as much to fix as one under the
    underutilized threshold.

    Args:
        k: The week.

    Returns:
        Positions (int64) into ``k.runs``, in the order to fix them.
    """
    r = k.runs
    if not len(r):
        return np.zeros(0, dtype=np.int64)
    waste = pd.to_numeric(r["waste_usd"], errors="coerce").fillna(0.0).to_numpy(dtype=float)
    # paid beside the waste: not measured, not finished, re-done or the machine's
    for lost in BESIDE_WASTE_USD:
        if lost in r:
            waste = waste + pd.to_numeric(r[lost], errors="coerce").fillna(0.0).to_numpy(
                dtype=float
            )
    verdict = r["verdict"].astype(object)
    flagged = (verdict.notna() & ~verdict.isin(["healthy", ""])).to_numpy(dtype=bool)
    at = np.flatnonzero((waste >= 0.005) | flagged)
    return at[np.argsort(-waste[at], kind="stable")]  # waste first, as before


def runs_to_fix(k: WeekKpis, *, first: int | None = None, by_team: bool = False) -> pd.DataFrame:
    """The week's runs and jobs worth an engineer's look (:func:`fix_order`), in that order.

    Args:
        k: The week.
        first: Only the first so many (None: all): a million runs are not copied for a page
            that shows fifty.
        by_team: With ``first``, each team's first so many too (its own list's first rows,
            in the same order): what a team's page shows of them.

    Returns:
        Those rows of ``k.runs``, in that order, indexed from 0.
    """
    r = k.runs
    if not len(r):
        return r
    order = fix_order(k)
    if first is not None:
        keep = np.arange(len(order)) < first
        if by_team and "team" in r:
            team, _ = pd.factorize(r["team"].take(order), use_na_sentinel=False)
            keep |= pd.Series(team).groupby(team).cumcount().to_numpy() < first
        order = order[keep]
    return r.iloc[order].reset_index(drop=True)
