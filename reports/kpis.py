"""Weekly KPIs: pure functions of data frames (no I/O), so a test can state every number.

Inputs are the run store's two tables as frames: ``runs`` (one row per run, the
:class:`tracker.record.RunRecord` fields) and ``samples`` (one row per GPU per minute). The first
step, :func:`gpu_time`, turns them into GPU-time per (run, GPU, week): from the per-minute
samples where a run has them (a run crossing a week boundary is split at the minute), pro rata
by duration where only a summary exists. Everything after that aggregates those rows.

At fleet scale the samples are not read one by one: the store sums them per (run, GPU, week)
(:func:`totals_gpu_time`), and only the stretches around minutes under the idle threshold are
read minute by minute (:func:`idle_candidates`), since the idle rule looks at them in order.

Utilization has a basis: ``util`` (NVML utilization, the share of time a kernel ran) or
``sm_active`` (GPM SM activity, Hopper+). Figures of one basis are never mixed with the other;
GPU-time without a value on the chosen basis is "unknown", never idle.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from tracker.config import Settings
from tracker.prices import PriceTable
from tracker.record import MinuteSample, RunRecord

if TYPE_CHECKING:
    from tracker.store import SampleTotals

BASES = {"util": ("util_pct", "NVML utilization"), "sm_active": ("sm_active_pct", "SM activity")}

GT_COLUMNS = ["run_id", "gpu", "week", "gpu_hours", "known_hours", "used_hours", "idle_hours"]
"""One row per (run, GPU, week): hours allocated, hours with a utilization value, Σ util × hours
(as a fraction, so used/known is the utilization), hours in idle stretches. Summary-only runs
have one row per week with ``gpu = "*"`` standing for all their GPUs."""


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """Per basis; SM activity runs lower than NVML utilization for the same work."""

    target_pct: float = 85.0
    underutilized_pct: float = 50.0
    underutilized_min_gpu_hours: float = 1.0
    idle_pct: float = 5.0
    idle_window_min: int = 30


DEFAULT_THRESHOLDS = {"util": Thresholds(),
                      "sm_active": Thresholds(target_pct=60.0, underutilized_pct=30.0)}


def thresholds_for(basis: str, settings: Settings) -> Thresholds:
    """The thresholds of ``basis``: the configured ones (``[thresholds]``) for NVML utilization,
    the SM activity defaults otherwise: the settings hold NVML-utilization values, and SM
    activity runs lower for the same work."""
    if basis != "util":
        return DEFAULT_THRESHOLDS[basis]
    return Thresholds(target_pct=settings.target_util_pct,
                      underutilized_pct=settings.underutilized_pct, idle_pct=settings.idle_pct,
                      idle_window_min=settings.idle_window_min)


# -- frames from records ----------------------------------------------------------------------
def runs_frame(runs: Iterable[RunRecord]) -> pd.DataFrame:
    rows = [r.as_dict() for r in runs]
    df = pd.DataFrame(rows, columns=list(RunRecord.__dataclass_fields__))
    for col in ("started_at", "ended_at", "heartbeat_at"):
        df[col] = pd.to_datetime(df[col], utc=True)
    return df


def samples_frame(samples: Iterable[MinuteSample]) -> pd.DataFrame:
    df = pd.DataFrame([s.__dict__ for s in samples],
                      columns=list(MinuteSample.__dataclass_fields__))
    df["minute"] = pd.to_datetime(df["minute"], utc=True)
    return df


SAMPLE_COLUMNS = ("run_id", "minute", "gpu", "covered_s", "util_pct", "sm_active_pct")
"""The sample columns the KPIs read (of the two utilization columns, the basis's is enough)."""


def sample_columns(basis: str) -> tuple[str, ...]:
    """The sample columns the KPIs of ``basis`` read."""
    return ("run_id", "minute", "gpu", "covered_s", BASES[basis][0])


class SampleFrameBuilder:
    """Collects chunks of raw sample rows (:data:`SAMPLE_COLUMNS`, as
    :meth:`tracker.store.RunStore.scan_samples` hands them) into one frame, keeping ids as
    categories so that ten million rows fit in a few hundred MB."""

    def __init__(self, columns: Sequence[str] = SAMPLE_COLUMNS) -> None:
        self.columns = tuple(columns)
        self._parts: list[pd.DataFrame] = []

    def __call__(self, chunk: Sequence[tuple[object, ...]]) -> None:
        df = pd.DataFrame.from_records(chunk, columns=list(self.columns))
        for col in ("run_id", "gpu"):
            df[col] = df[col].astype("category")
        if len(df) and isinstance(df["minute"].iloc[0], str):  # SQLite: naive UTC text
            df["minute"] = pd.to_datetime(df["minute"], format="ISO8601", utc=True)
        else:
            df["minute"] = pd.to_datetime(df["minute"], utc=True)
        self._parts.append(df)

    def frame(self) -> pd.DataFrame:
        if not self._parts:
            return pd.DataFrame({c: pd.Series(dtype="float64") for c in self.columns})
        out = {}
        for col in self.columns:
            values = [p[col] for p in self._parts]
            if col in ("run_id", "gpu"):
                out[col] = pd.Series(union_categoricals(values))
            else:
                out[col] = pd.concat(values, ignore_index=True)
        self._parts = []
        return pd.DataFrame(out)


# -- weeks ------------------------------------------------------------------------------------
def week_start(ts: pd.Series, tz: tzinfo) -> pd.Series:
    """Monday 00:00 (in ``tz``, as UTC instants) of each timestamp's ISO week. Computed on the
    local calendar, so a daylight-saving change inside the week does not move it."""
    local = ts.dt.tz_convert(tz).dt.tz_localize(None)
    monday = local.dt.normalize() - pd.to_timedelta(local.dt.day_of_week, unit="D")
    return monday.dt.tz_localize(tz, ambiguous=True,
                                 nonexistent="shift_forward").dt.tz_convert("UTC")


def _week_bounds(start: datetime, end: datetime, tz: tzinfo) -> list[tuple[pd.Timestamp,
                                                                              pd.Timestamp]]:
    """The ISO weeks (in ``tz``) that [start, end) overlaps, as [week start, next) in UTC."""
    first = week_start(pd.Series([pd.Timestamp(start)]), tz).iloc[0]
    out = []
    w = first
    while w < end:
        nxt = _shift_week(w, tz, 1)
        out.append((w, nxt))
        w = nxt
    return out


def weeks_between(start: datetime, end: datetime, tz: tzinfo) -> list[pd.Timestamp]:
    """Monday 00:00 (in ``tz``, as UTC instants) of each ISO week that [start, end) overlaps."""
    return [w0 for w0, _ in _week_bounds(start, end, tz)]


def _shift_week(week: pd.Timestamp, tz: tzinfo, n: int) -> pd.Timestamp:
    """The Monday 00:00 ``n`` weeks after ``week`` (a Monday 00:00 in ``tz``), in UTC."""
    return week_start(pd.Series([week + pd.Timedelta(days=7 * n, hours=12)]), tz).iloc[0]


# -- idle minutes -----------------------------------------------------------------------------
def idle_minutes(util: np.ndarray, group: np.ndarray, *, threshold_pct: float,
                 window: int) -> np.ndarray:
    """Which minutes are idle: the minute's own utilization is under ``threshold_pct`` and it
    lies in some ``window``-minute stretch (consecutive rows of one ``group``) averaging under
    it. NaN (no data) is never idle and breaks a stretch. Rows sorted by group, then minute.
    The same rule as the tracker's streaming detector, vectorized."""
    n = len(util)
    if n < window:
        return np.zeros(n, dtype=bool)
    known = ~np.isnan(util)
    u = np.where(known, util, 0.0)
    cn = np.concatenate(([0], np.cumsum(~known)))
    ends = np.arange(window - 1, n)
    starts = ends - window + 1
    same_group = group[starts] == group[ends]
    full = same_group & (cn[ends + 1] - cn[starts] == 0)
    # each window's own sum, not a difference of running sums: those carry the rounding of
    # every row before, which would decide a window averaging just at the threshold
    sums = np.lib.stride_tricks.sliding_window_view(u, window).sum(axis=1)
    qualifies = np.zeros(n, dtype=bool)
    qualifies[ends] = full & (sums / window < threshold_pct)
    # minute j is covered when some qualifying window ends in [j, j + window - 1]
    cq = np.concatenate(([0], np.cumsum(qualifies)))
    hi = np.minimum(np.arange(n) + window, n)
    covered = cq[hi] - cq[np.arange(n)] > 0
    return covered & known & (u < threshold_pct)


# -- GPU time per (run, GPU, week) ------------------------------------------------------------
def sampled_gpu_time(s: pd.DataFrame, *, tz: tzinfo, basis: str = "util",
                     thresholds: Thresholds | None = None) -> pd.DataFrame:
    """GT rows from minute samples, in arrays: millions of rows take seconds, not minutes."""
    if not len(s):
        return pd.DataFrame(columns=GT_COLUMNS)
    column = BASES[basis][0]
    t = thresholds or DEFAULT_THRESHOLDS[basis]
    run_codes, run_names = pd.factorize(s["run_id"])
    gpu_codes, gpu_names = pd.factorize(s["gpu"])
    minute = s["minute"].dt.as_unit("ns").astype("int64").to_numpy()
    order = np.lexsort((minute, gpu_codes, run_codes))
    run_codes, gpu_codes, minute = run_codes[order], gpu_codes[order], minute[order]
    hours = s["covered_s"].to_numpy(dtype=float)[order] / 3600.0
    util = s[column].to_numpy(dtype=float)[order]
    series = run_codes.astype(np.int64) * len(gpu_names) + gpu_codes
    idle = idle_minutes(util, series, threshold_pct=t.idle_pct, window=t.idle_window_min)
    known = ~np.isnan(util)
    # the week of each minute: its place among the Monday-midnight boundaries in the zone
    first, last = pd.Timestamp(int(minute.min()), tz="UTC"), pd.Timestamp(int(minute.max()),
                                                                          tz="UTC")
    weeks = [week_start(pd.Series([first]), tz).iloc[0]]
    while weeks[-1] <= last:
        weeks.append(_shift_week(weeks[-1], tz, 1))
    bounds = np.array([w.as_unit("ns").value for w in weeks], dtype=np.int64)
    week_idx = np.searchsorted(bounds, minute, side="right") - 1
    cell = series * len(weeks) + week_idx
    cells, inverse = np.unique(cell, return_inverse=True)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(inverse, weights=values, minlength=len(cells))

    ser, wk = np.divmod(cells, len(weeks))
    run_of, gpu_of = np.divmod(ser, len(gpu_names))
    return pd.DataFrame({
        "run_id": np.asarray(run_names)[run_of], "gpu": np.asarray(gpu_names)[gpu_of],
        "week": pd.to_datetime(bounds[wk], utc=True),
        "gpu_hours": total(hours), "known_hours": total(np.where(known, hours, 0.0)),
        "used_hours": total(np.where(known, np.nan_to_num(util) / 100.0 * hours, 0.0)),
        "idle_hours": total(np.where(idle, hours, 0.0))})


def summary_gpu_time(runs: pd.DataFrame, *, sampled: Iterable[str], tz: tzinfo,
                     basis: str = "util", now: datetime | None = None) -> pd.DataFrame:
    """GT rows of the runs not in ``sampled`` (the ids of runs with minute samples), pro rata
    by duration from their summaries."""
    column = BASES[basis][0]
    summary_only = runs[~runs["id"].isin(set(sampled))]
    end_now = pd.Timestamp(now) if now is not None else pd.Timestamp.now(tz="UTC")
    spans = []
    for r in summary_only.itertuples(index=False):
        end = r.ended_at if not pd.isna(r.ended_at) else (
            r.heartbeat_at if not pd.isna(r.heartbeat_at) else end_now)
        if end > r.started_at and r.gpu_hours:
            spans.append((r, end))
    if not spans:
        return pd.DataFrame(columns=GT_COLUMNS)
    # the weeks of all the runs at once: thousands of runs, a few dozen weeks
    weeks = _week_bounds(min(r.started_at for r, _ in spans), max(end for _, end in spans), tz)
    week_starts = [w0 for w0, _ in weeks]
    rows = []
    for r, end in spans:
        start = r.started_at
        total_s = (end - start).total_seconds()
        value = getattr(r, column)
        idle_total = (r.idle_usd / r.price_per_gpu_hour
                      if r.idle_usd and r.price_per_gpu_hour else 0.0)
        overlapped = slice(bisect.bisect_right(week_starts, start) - 1,
                           bisect.bisect_left(week_starts, end))
        for w0, w1 in weeks[overlapped]:
            share = (min(end, w1) - max(start, w0)).total_seconds() / total_s
            h = r.gpu_hours * share
            known = 0.0 if value is None or pd.isna(value) else h
            rows.append((r.id, "*", w0, h, known, known * (value or 0.0) / 100.0,
                         idle_total * share))
    return pd.DataFrame(rows, columns=GT_COLUMNS)


def combine_gpu_time(runs: pd.DataFrame, sampled: pd.DataFrame, *, tz: tzinfo,
                     basis: str = "util", now: datetime | None = None) -> pd.DataFrame:
    """GT rows for every run: ``sampled`` (GT rows from minute samples, of runs in ``runs``)
    and the summaries of the runs without samples."""
    parts = [p for p in (sampled, summary_gpu_time(runs, sampled=sampled["run_id"].unique(),
                                                   tz=tz, basis=basis, now=now)) if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in GT_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    out["week"] = pd.to_datetime(out["week"], utc=True)
    return out[GT_COLUMNS]


def gpu_time(runs: pd.DataFrame, samples: pd.DataFrame, *, tz: tzinfo, basis: str = "util",
             thresholds: Thresholds | None = None, now: datetime | None = None) -> pd.DataFrame:
    """GPU-time rows (:data:`GT_COLUMNS`) for every run, split by ISO week in ``tz``."""
    sampled = sampled_gpu_time(samples[samples["run_id"].isin(runs["id"])], tz=tz, basis=basis,
                               thresholds=thresholds)
    return combine_gpu_time(runs, sampled, tz=tz, basis=basis, now=now)


# -- GPU time from the store's totals ---------------------------------------------------------
TOTALS_COLUMNS = ["run_id", "gpu", "bucket", "minutes", "covered_s", "known_s", "value_s",
                  "first_low", "last_low"]
"""The fields of :class:`tracker.store.SampleTotals`: one row per (run, GPU, week)."""


def totals_frame(totals: Iterable[SampleTotals]) -> pd.DataFrame:
    return pd.DataFrame([t.__dict__ for t in totals], columns=TOTALS_COLUMNS)


def idle_candidates(totals: pd.DataFrame, t: Thresholds) -> list[tuple[str, str, datetime,
                                                                        datetime]]:
    """The stretches of samples that hold every idle minute, as ``(run_id, gpu, first,
    last)``: from the first to the last minute under the idle threshold, of each GPU with
    enough samples for a window. An idle minute is one of those, and its window lies in the
    stretch and the ``idle_window_min - 1`` samples before and after it, which
    :func:`idle_minutes` needs too (:meth:`tracker.store.RunStore.scan_sample_stretches`)."""
    series = totals.groupby(["run_id", "gpu"], observed=True).agg(
        minutes=("minutes", "sum"), first=("first_low", "min"), last=("last_low", "max"))
    ok = series[series["first"].notna() & (series["minutes"] >= t.idle_window_min)]
    return [(run_id, gpu, pd.Timestamp(first).to_pydatetime(), pd.Timestamp(last).to_pydatetime())
            for (run_id, gpu), first, last in zip(ok.index, ok["first"], ok["last"], strict=True)]


def totals_gpu_time(totals: pd.DataFrame, weeks: Sequence[pd.Timestamp],
                    idle: pd.DataFrame) -> pd.DataFrame:
    """GT rows from the store's totals per (run, GPU, week), ``bucket`` indexing ``weeks``
    (:func:`weeks_between`), with the idle hours of ``idle`` (GT rows from the minute samples
    of the :func:`idle_candidates`; 0 for the rest)."""
    week = pd.DatetimeIndex(list(weeks)).tz_convert("UTC").as_unit("ns")
    gt = pd.DataFrame({
        "run_id": totals["run_id"].to_numpy(dtype=object),
        "gpu": totals["gpu"].to_numpy(dtype=object),
        "week": week[totals["bucket"].to_numpy(dtype=int)],
        "gpu_hours": totals["covered_s"].to_numpy(dtype=float) / 3600.0,
        "known_hours": totals["known_s"].to_numpy(dtype=float) / 3600.0,
        "used_hours": totals["value_s"].to_numpy(dtype=float) / 100.0 / 3600.0})
    keys = ["run_id", "gpu", "week"]
    idle_hours = idle.assign(week=pd.to_datetime(idle["week"], utc=True).dt.as_unit("ns"),
                             run_id=idle["run_id"].astype(object),
                             gpu=idle["gpu"].astype(object))[[*keys, "idle_hours"]]
    gt = gt.merge(idle_hours, on=keys, how="left", validate="one_to_one")
    gt["idle_hours"] = gt["idle_hours"].fillna(0.0)
    return gt[GT_COLUMNS]


# -- one week's KPIs --------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Headline:
    gpu_hours: float
    known_gpu_hours: float
    """GPU-hours with a utilization value on the basis; the rest is "unknown", never idle."""
    utilization_pct: float | None
    """Σ util × hours ÷ Σ hours over known GPU-time: weighted by GPU-hours."""
    spend_usd: float
    waste_usd: float
    idle_usd: float
    runs: int
    underutilized_runs: int
    underutilized_gpu_hours_pct: float | None
    usd_per_1k_samples: float | None
    usd_per_1m_tokens: float | None
    unpriced_gpu_hours: float
    """GPU-hours of models without a price: not in spend or waste."""


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


def _price(runs: pd.DataFrame, prices: PriceTable) -> pd.Series:
    """Each run's price per GPU-hour: the one it ran with, else the table's for its model."""
    table = runs["gpu_model"].map(
        lambda m: (p.usd_per_gpu_hour if isinstance(m, str) and (p := prices.lookup(m))
                   else np.nan))
    return runs["price_per_gpu_hour"].astype(float).fillna(table)


def run_weeks(gt: pd.DataFrame, runs: pd.DataFrame, *, prices: PriceTable,
              target_pct: float) -> pd.DataFrame:
    """Per (run, week): GPU-hours, utilization, spend, waste (per GPU: cost × max(0, 1 −
    util ÷ target)), idle $, and the run's attributes."""
    meta = runs.set_index("id")
    price = _price(runs, prices).to_numpy()
    price_of = pd.Series(price, index=runs["id"].to_numpy())
    g = gt.copy()
    g["price"] = g["run_id"].map(price_of)
    util = np.where(g["known_hours"] > 0, g["used_hours"] / g["known_hours"].where(
        g["known_hours"] > 0, 1.0), np.nan)
    g["cost"] = g["gpu_hours"] * g["price"]
    g["waste"] = g["cost"] * np.clip(1.0 - util * 100.0 / target_pct, 0.0, None)
    g["waste"] = g["waste"].where(~np.isnan(util), 0.0)
    g["idle"] = g["idle_hours"] * g["price"]
    per = g.groupby(["run_id", "week"], as_index=False).agg(
        gpu_hours=("gpu_hours", "sum"), known_hours=("known_hours", "sum"),
        used_hours=("used_hours", "sum"), spend_usd=("cost", "sum"),
        waste_usd=("waste", "sum"), idle_usd=("idle", "sum"),
        priced=("price", lambda p: bool(p.notna().all())))
    per["utilization_pct"] = np.where(per["known_hours"] > 0,
                                      100.0 * per["used_hours"] / per["known_hours"].where(
                                          per["known_hours"] > 0, 1.0), np.nan)
    cols = ["name", "project", "team", "user", "gpu_model", "gpu_count", "gpu_hours",
            "samples", "tokens", "verdict", "advice", "links", "mem_peak_gib", "mem_total_gib",
            "status", "started_at", "ended_at"]
    m = meta[cols].rename(columns={"gpu_hours": "run_gpu_hours", "samples": "run_samples",
                                   "tokens": "run_tokens"})
    per = per.astype({"run_id": object}).join(m, on="run_id")  # empty: run_id was float
    share = per["gpu_hours"] / per["run_gpu_hours"].where(per["run_gpu_hours"] > 0)
    per["samples"] = per["run_samples"].astype(float) * share
    per["tokens"] = per["run_tokens"].astype(float) * share
    return per


def _headline(per: pd.DataFrame, t: Thresholds) -> Headline:
    priced = per[per["priced"].astype(bool)]  # an empty object column would select columns
    known = float(per["known_hours"].sum())
    under = per[(per["utilization_pct"] < t.underutilized_pct)
                & (per["gpu_hours"] >= t.underutilized_min_gpu_hours)]
    total = float(per["gpu_hours"].sum())

    def unit(col: str, scale: float) -> float | None:
        rows = priced[priced[col].notna() & (priced[col] > 0)]
        n = float(rows[col].sum())
        return scale * float(rows["spend_usd"].sum()) / n if n > 0 else None

    return Headline(
        gpu_hours=total, known_gpu_hours=known,
        utilization_pct=100.0 * float(per["used_hours"].sum()) / known if known > 0 else None,
        spend_usd=float(priced["spend_usd"].sum()), waste_usd=float(priced["waste_usd"].sum()),
        idle_usd=float(priced["idle_usd"].sum()), runs=int(per["run_id"].nunique()),
        underutilized_runs=int(under["run_id"].nunique()),
        underutilized_gpu_hours_pct=100.0 * float(under["gpu_hours"].sum()) / total
        if total > 0 else None,
        usd_per_1k_samples=unit("samples", 1e3), usd_per_1m_tokens=unit("tokens", 1e6),
        unpriced_gpu_hours=float(per.loc[~per["priced"], "gpu_hours"].sum()))


def _change(now: float | None, before: float | None) -> float | None:
    if now is None or before is None or before == 0:
        return None
    return 100.0 * (now - before) / before


def _breakdown(per: pd.DataFrame, key: str) -> pd.DataFrame:
    g = per.assign(**{key: per[key].fillna("(none)").replace("", "(none)")}).groupby(key)
    out = g.agg(gpu_hours=("gpu_hours", "sum"), known_hours=("known_hours", "sum"),
                used_hours=("used_hours", "sum"), spend_usd=("spend_usd", "sum"),
                waste_usd=("waste_usd", "sum"), idle_usd=("idle_usd", "sum"),
                runs=("run_id", "nunique"))
    out["utilization_pct"] = 100.0 * out["used_hours"] / out["known_hours"].where(
        out["known_hours"] > 0)
    return (out.drop(columns=["known_hours", "used_hours"])
            .sort_values(["waste_usd", "spend_usd"], ascending=False).reset_index())


def rightsizing(per: pd.DataFrame, prices: PriceTable, *, max_util_pct: float = 50.0,
                headroom: float = 1.2) -> pd.DataFrame:
    """Runs that used little of a big GPU: the cheapest model in the price table whose memory
    holds the run's peak (× ``headroom``), and what the week would have cost less on it."""
    rows = []
    priced = [p for p in prices.rows() if p.mem_gib]
    for r in per.itertuples(index=False):
        if (pd.isna(r.utilization_pct) or r.utilization_pct >= max_util_pct
                or pd.isna(r.mem_peak_gib) or not r.priced or r.gpu_hours <= 0):
            continue
        current = r.spend_usd / r.gpu_hours
        fits = [p for p in priced if p.mem_gib >= r.mem_peak_gib * headroom
                and p.usd_per_gpu_hour < current]
        if not fits:
            continue
        best = min(fits, key=lambda p: p.usd_per_gpu_hour)
        rows.append({"run_id": r.run_id, "name": r.name, "team": r.team,
                     "gpu_model": r.gpu_model, "utilization_pct": r.utilization_pct,
                     "mem_peak_gib": r.mem_peak_gib, "suggested_gpu": best.gpu,
                     "saving_usd": r.gpu_hours * (current - best.usd_per_gpu_hour)})
    cols = ["run_id", "name", "team", "gpu_model", "utilization_pct", "mem_peak_gib",
            "suggested_gpu", "saving_usd"]
    return pd.DataFrame(rows, columns=cols).sort_values("saving_usd", ascending=False,
                                                        ignore_index=True)


HEADLINE_FIELDS: Sequence[str] = tuple(Headline.__dataclass_fields__)


def week_kpis(runs: pd.DataFrame, samples: pd.DataFrame, week: datetime, *, tz: tzinfo,
              basis: str = "util", thresholds: Thresholds | None = None,
              prices: PriceTable | None = None, trend_weeks: int = 12,
              now: datetime | None = None) -> WeekKpis:
    """The KPIs of the ISO week starting ``week`` (Monday 00:00 in ``tz``), with the previous
    week for week-over-week change and up to ``trend_weeks`` weeks of trend."""
    gt = gpu_time(runs, samples, tz=tz, basis=basis, thresholds=thresholds, now=now)
    return kpis_of_gpu_time(runs, gt, week, tz=tz, basis=basis, thresholds=thresholds,
                            prices=prices, trend_weeks=trend_weeks)


def kpis_of_gpu_time(runs: pd.DataFrame, gt: pd.DataFrame, week: datetime, *, tz: tzinfo,
                     basis: str = "util", thresholds: Thresholds | None = None,
                     prices: PriceTable | None = None, trend_weeks: int = 12) -> WeekKpis:
    """:func:`week_kpis` from the runs' GPU-time rows (:data:`GT_COLUMNS`)."""
    t = thresholds or DEFAULT_THRESHOLDS[basis]
    prices = prices or PriceTable()
    per = run_weeks(gt, runs, prices=prices, target_pct=t.target_pct)
    w = pd.Timestamp(week).tz_convert("UTC")
    this = per[per["week"] == w]
    prev_w = _shift_week(w, tz, -1)
    prev = per[per["week"] == prev_w]
    head = _headline(this, t)
    previous = _headline(prev, t) if len(prev) else None
    change = {f: _change(getattr(head, f), getattr(previous, f) if previous else None)
              for f in HEADLINE_FIELDS}
    weeks = [_shift_week(w, tz, -k) for k in range(trend_weeks - 1, -1, -1)]
    trend = pd.DataFrame([{"week": wk, **_headline(per[per["week"] == wk], t).__dict__}
                          for wk in weeks])
    ordered = this.sort_values(["waste_usd", "spend_usd"], ascending=False, ignore_index=True)
    under = ordered[(ordered["utilization_pct"] < t.underutilized_pct)
                    & (ordered["gpu_hours"] >= t.underutilized_min_gpu_hours)]
    return WeekKpis(
        week=w, basis=basis, basis_label=BASES[basis][1], thresholds=t, headline=head,
        previous=previous, change_pct=change,
        by={k: _breakdown(this, k) for k in ("team", "project", "user", "gpu_model")},
        runs=ordered, underutilized=under.reset_index(drop=True), trend=trend,
        rightsizing=rightsizing(this, prices, max_util_pct=t.underutilized_pct))
