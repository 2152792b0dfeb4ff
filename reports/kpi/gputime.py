"""GPU-time per (run, GPU, week): the rows every weekly figure is summed from.

:func:`gpu_time` turns the store's runs and minute samples into :data:`GT_COLUMNS` rows: from
the per-minute samples where a run has them (a run crossing a week boundary is split at the
minute), pro rata by duration where only a summary exists. At fleet scale the samples are not
read one by one: the store sums them per (run, GPU, week) (:func:`totals_gpu_time`), and only the
stretches around minutes under the idle threshold are read minute by minute
(:func:`idle_candidates`), since the idle rule looks at them in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, tzinfo

import numpy as np
import pandas as pd

from reports.kpi.frames import BASES, GT_COLUMNS, is_in, shared_objects
from reports.weeks import shift_week, week_spans, week_start_of
from tracker.cost import Thresholds, idle_flags, thresholds_for
from tracker.units import S_PER_HOUR


def _ts(moment: datetime) -> pd.Timestamp:
    return pd.Timestamp(moment).tz_convert("UTC")


# -- idle minutes -----------------------------------------------------------------------------
def idle_of_series(
    util: np.ndarray,
    covered_s: np.ndarray,
    series: np.ndarray,
    minute_ns: np.ndarray,
    *,
    threshold_pct: float,
    window: int,
) -> np.ndarray:
    """Which rows are idle by the idle rule (:func:`tracker.cost.idle_flags`), run on each
    series (consecutive rows of one ``series`` code, in minute order) on its own. ``util``
    NaN: no value; ``minute_ns``: each row's UTC minute in ns (a minute with no row breaks a
    stretch)."""
    n = len(util)
    idle = np.zeros(n, dtype=bool)
    if n < window:
        return idle
    low = np.flatnonzero(util < threshold_pct)
    if not len(low):
        return idle
    cuts = np.flatnonzero(np.diff(series)) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [n]))
    # only the series with a minute under the threshold can hold an idle one
    with_low = np.unique(np.searchsorted(starts, low, side="right") - 1)
    minutes = minute_ns // 60_000_000_000
    for a, b in zip(starts[with_low].tolist(), ends[with_low].tolist(), strict=True):
        if b - a < window:
            continue
        values = util[a:b]
        known = ~np.isnan(values)
        utils = np.where(known, values, 0.0).tolist()
        if not known.all():
            utils = [u if k else None for u, k in zip(utils, known.tolist(), strict=True)]
        idle[a:b] = idle_flags(
            utils,
            covered_s[a:b].tolist(),
            threshold_pct=threshold_pct,
            window=window,
            minutes=minutes[a:b].tolist(),
        )
    return idle


# -- GPU time per (run, GPU, week) ------------------------------------------------------------
def sampled_gpu_time(
    s: pd.DataFrame, *, tz: tzinfo, basis: str = "util", thresholds: Thresholds | None = None
) -> pd.DataFrame:
    """GT rows from minute samples, in arrays: millions of rows take seconds, not minutes."""
    if not len(s):
        return pd.DataFrame(columns=GT_COLUMNS)
    column = BASES[basis][0]
    t = thresholds or thresholds_for(basis)
    run_codes, run_names = pd.factorize(s["run_id"])
    gpu_codes, gpu_names = pd.factorize(s["gpu"])
    minute = s["minute"].dt.as_unit("ns").astype("int64").to_numpy()
    order = np.lexsort((minute, gpu_codes, run_codes))
    run_codes, gpu_codes, minute = run_codes[order], gpu_codes[order], minute[order]
    covered_s = s["covered_s"].to_numpy(dtype=float)[order]
    hours = covered_s / S_PER_HOUR
    util = s[column].to_numpy(dtype=float)[order]
    series = run_codes.astype(np.int64) * len(gpu_names) + gpu_codes
    idle = idle_of_series(
        util, covered_s, series, minute, threshold_pct=t.idle_pct, window=t.idle_window_min
    )
    known = ~np.isnan(util)
    # the week of each minute: its place among the Monday-midnight boundaries in the zone
    first, last = (
        pd.Timestamp(int(minute.min()), tz="UTC"),
        pd.Timestamp(int(minute.max()), tz="UTC"),
    )
    weeks = [_ts(week_start_of(first, tz))]
    while weeks[-1] <= last:
        weeks.append(_ts(shift_week(weeks[-1], tz, 1)))
    bounds = np.array([w.as_unit("ns").value for w in weeks], dtype=np.int64)
    week_idx = np.searchsorted(bounds, minute, side="right") - 1
    cell = series * len(weeks) + week_idx
    cells, inverse = np.unique(cell, return_inverse=True)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(inverse, weights=values, minlength=len(cells))

    ser, wk = np.divmod(cells, len(weeks))
    run_of, gpu_of = np.divmod(ser, len(gpu_names))
    return pd.DataFrame(
        {
            "run_id": np.asarray(run_names)[run_of],
            "gpu": np.asarray(gpu_names)[gpu_of],
            "week": pd.to_datetime(bounds[wk], utc=True),
            "gpu_hours": total(hours),
            "known_hours": total(np.where(known, hours, 0.0)),
            "used_hours": total(np.where(known, np.nan_to_num(util) / 100.0 * hours, 0.0)),
            "idle_hours": total(np.where(idle, hours, 0.0)),
            "idle_used_hours": total(np.where(idle, np.nan_to_num(util) / 100.0 * hours, 0.0)),
        }
    )


def summary_gpu_time(
    runs: pd.DataFrame,
    *,
    sampled: Iterable[str] | np.ndarray,
    tz: tzinfo,
    basis: str = "util",
    now: datetime | None = None,
    spans: Sequence[tuple[datetime, datetime]] | None = None,
) -> pd.DataFrame:
    """GT rows of the runs not in ``sampled`` (the ids of runs with minute samples, or for
    each run whether it has them), pro rata by duration from their summaries; in ISO weeks,
    or in ``spans`` ([start, end), ascending, not overlapping: the ``week`` column holds each
    span's start) when given."""
    column = BASES[basis][0]
    if isinstance(sampled, np.ndarray) and sampled.dtype == bool:
        r = runs[~sampled]
    else:
        r = runs[~is_in(runs["id"], sampled)]
    end_now = pd.Timestamp(now) if now is not None else pd.Timestamp.now(tz="UTC")
    started = _ns(r["started_at"])
    ended = _ns(r["ended_at"])
    ended = np.where(ended == _NAT, _ns(r["heartbeat_at"]), ended)
    ended = np.where(ended == _NAT, _ts(end_now).value, ended)
    hours = _floats(r["gpu_hours"])
    # a summary of GPU-hours over some time (usable runs' figures: finite, or unknown, NaN)
    ok = (started != _NAT) & (ended > started) & np.isfinite(hours) & (hours != 0)
    if not ok.any():
        return pd.DataFrame(columns=GT_COLUMNS)
    ids = r["id"].to_numpy(dtype=object)[ok]
    started, ended, hours = started[ok], ended[ok], hours[ok]
    value = _floats(r[column])[ok]
    idle_usd, price = _floats(r["idle_usd"])[ok], _floats(r["price_per_gpu_hour"])[ok]
    # never more idle hours than GPU-hours, whatever the summary says
    with np.errstate(divide="ignore", invalid="ignore"):
        idle_total = np.where(
            np.isfinite(idle_usd) & (idle_usd != 0) & np.isfinite(price) & (price != 0),
            np.minimum(idle_usd / price, hours),
            0.0,
        )
    # the weeks of all the runs at once: thousands of runs, a few dozen weeks
    weeks = (
        week_spans(pd.Timestamp(started.min(), tz="UTC"), pd.Timestamp(ended.max(), tz="UTC"), tz)
        if spans is None
        else spans
    )
    w0 = np.array([_ts(a).value for a, _ in weeks], dtype=np.int64)
    w1 = np.array([_ts(b).value for _, b in weeks], dtype=np.int64)
    # each run's row per week it overlaps: weeks lo..hi-1
    lo = np.maximum(np.searchsorted(w0, started, side="right") - 1, 0)
    hi = np.searchsorted(w0, ended, side="left")
    count = np.maximum(hi - lo, 0)
    run = np.repeat(np.arange(len(ids)), count)
    week = lo[run] + (np.arange(len(run)) - np.repeat(np.cumsum(count) - count, count))
    a, b = w0[week], w1[week]
    s0, s1 = started[run], ended[run]
    inside = (b > s0) & (a < s1)  # not a gap between spans
    run, a, b, s0, s1 = run[inside], a[inside], b[inside], s0[inside], s1[inside]
    share = ((np.minimum(s1, b) - np.maximum(s0, a)) / 1e9) / ((s1 - s0) / 1e9)
    h = hours[run] * share
    v = value[run]
    known = np.where(np.isnan(v), 0.0, h)
    # a summary does not say how busy its idle minutes were: under idle_pct, taken as 0
    return pd.DataFrame(
        {
            "run_id": ids[run],
            "gpu": "*",
            "week": pd.to_datetime(a, utc=True),
            "gpu_hours": h,
            "known_hours": known,
            "used_hours": known * np.nan_to_num(v) / 100.0,
            "idle_hours": idle_total[run] * share,
            "idle_used_hours": 0.0,
        },
        columns=GT_COLUMNS,
    )


_NAT = np.iinfo(np.int64).min
"""NaT as :func:`_ns` gives it."""


def _ns(column: pd.Series) -> np.ndarray:
    """Times as int64 ns since the epoch, UTC (NaT: :data:`_NAT`)."""
    return pd.DatetimeIndex(pd.to_datetime(column, utc=True)).as_unit("ns").asi8


def _floats(column: pd.Series) -> np.ndarray:
    """A number column as floats (None: NaN)."""
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def combine_gpu_time(
    runs: pd.DataFrame,
    sampled: pd.DataFrame,
    *,
    tz: tzinfo,
    basis: str = "util",
    now: datetime | None = None,
    measured: np.ndarray | None = None,
) -> pd.DataFrame:
    """GT rows for every run: ``sampled`` (GT rows from minute samples, of runs in ``runs``)
    and the summaries of the runs without samples (in ``sampled``, or ``measured``: for each
    run of ``runs``, whether it was sampled at any time; those count by their samples
    alone)."""
    by_samples = is_in(runs["id"], sampled["run_id"])  # looked up, never a set made
    if measured is not None:
        by_samples = by_samples | measured
    parts = [
        p
        for p in (
            sampled,
            summary_gpu_time(runs, sampled=by_samples, tz=tz, basis=basis, now=now),
        )
        if len(p)
    ]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in GT_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    out["week"] = pd.to_datetime(out["week"], utc=True)
    return out[GT_COLUMNS]


def gpu_time(
    runs: pd.DataFrame,
    samples: pd.DataFrame,
    *,
    tz: tzinfo,
    basis: str = "util",
    thresholds: Thresholds | None = None,
    now: datetime | None = None,
) -> pd.DataFrame:
    """GPU-time rows (:data:`GT_COLUMNS`) for every run, split by ISO week in ``tz``."""
    sampled = sampled_gpu_time(
        samples[is_in(samples["run_id"], runs["id"])], tz=tz, basis=basis, thresholds=thresholds
    )
    return combine_gpu_time(runs, sampled, tz=tz, basis=basis, now=now)


def idle_candidates(
    totals: pd.DataFrame, t: Thresholds
) -> list[tuple[str, str, datetime, datetime]]:
    """The stretches of samples that hold every idle minute, as ``(run_id, gpu, first,
    last)``: from the first to the last minute under the idle threshold, of each GPU with
    one. An idle minute is one of those, and its window lies in the
    stretch and the ``idle_window_min - 1`` samples before and after it, which
    :func:`idle_of_series` needs too
    (:meth:`reports.data.scans.SampleScans.scan_sample_stretches`)."""
    series = totals.groupby(["run_id", "gpu"], observed=True).agg(
        minutes=("minutes", "sum"), first=("first_low", "min"), last=("last_low", "max")
    )
    # any GPU with a low minute: one with fewer minutes than a window in these weeks may
    # continue past their edge, where the store reads the rest of its window
    ok = series[series["first"].notna()]
    return [
        (run_id, gpu, pd.Timestamp(first).to_pydatetime(), pd.Timestamp(last).to_pydatetime())
        for (run_id, gpu), first, last in zip(ok.index, ok["first"], ok["last"], strict=True)
    ]


def totals_gpu_time(
    totals: pd.DataFrame, weeks: Sequence[pd.Timestamp], idle: pd.DataFrame
) -> pd.DataFrame:
    """GT rows from the store's totals per (run, GPU, week), ``bucket`` indexing ``weeks``
    (:func:`weeks_between`), with the idle hours of ``idle`` (GT rows from the minute samples
    of the :func:`idle_candidates`; 0 for the rest)."""
    week = pd.DatetimeIndex(list(weeks)).tz_convert("UTC").as_unit("ns")
    gt = pd.DataFrame(
        {
            # the ids in Python objects from the start (not Arrow's text made objects again),
            # a GPU's name one object for all its rows
            "run_id": pd.Series(totals["run_id"].to_numpy(dtype=object), dtype=object),
            "gpu": pd.Series(shared_objects(totals["gpu"]), dtype=object),
            "week": week[totals["bucket"].to_numpy(dtype=int)],
            "gpu_hours": totals["covered_s"].to_numpy(dtype=float) / S_PER_HOUR,
            "known_hours": totals["known_s"].to_numpy(dtype=float) / S_PER_HOUR,
            "used_hours": totals["value_s"].to_numpy(dtype=float) / 100.0 / S_PER_HOUR,
        }
    )
    keys = ["run_id", "gpu", "week"]
    figures = ["idle_hours", "idle_used_hours"]
    idle_hours = idle.assign(
        week=pd.to_datetime(idle["week"], utc=True).dt.as_unit("ns"),
        run_id=idle["run_id"].astype(object),
        gpu=idle["gpu"].astype(object),
    )[[*keys, *figures]]
    gt[figures] = 0.0
    # only the rows of runs with idle time are joined (a million rows' three keys: seconds)
    rows = np.flatnonzero(is_in(gt["run_id"], idle_hours["run_id"]))
    if len(rows):
        part = gt.iloc[rows][keys].merge(idle_hours, on=keys, how="left", validate="one_to_one")
        at = [gt.columns.get_loc(f) for f in figures]
        gt.iloc[rows, at] = part[figures].fillna(0.0).to_numpy()
    # the ids in Python objects, as a join with the idle rows' leaves them
    return gt.astype({"run_id": object, "gpu": object})[GT_COLUMNS]
