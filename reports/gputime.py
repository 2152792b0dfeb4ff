"""GPU-time read from the run store: the rows (:data:`reports.kpi.GT_COLUMNS`) every figure
of a week, a month or a budget is summed from.

:func:`week_gpu_time` is the one read of weeks (the weekly report, ``/metrics``, chargeback):
the store sums the minute samples per run, GPU and week (from the hourly rollups where they
answer), only the stretches that may hold idle minutes are read minute by minute
(:func:`reports.kpi.idle_candidates`), and runs without samples count pro rata by their summary.
:func:`span_gpu_time` reads any span (a calendar month in a zone, a period up to now) for the
budgets, as one bucket: its whole hours from the rollups, the rest from the minutes
(:func:`span_totals`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from reports import kpi as kpis
from reports.data.allocations import (
    JOB_LINKS,
    allocations_in,
    capacity_in,
    has_allocations,
    read_errors,
    usage_of,
)
from reports.data.arrow_pool import use_returning_arrow_pool
from reports.data.columns import arrow_run_columns, run_columns
from reports.data.samples import SampleTotals
from reports.data.scans import SampleScans, database_per_connection, mark_crashed, records_of
from reports.errors import ReportError
from reports.kpi.frames import hand_back_freed
from reports.rows import parsed_links
from reports.weeks import shift_week, weeks_between
from tracker.cost import Thresholds, thresholds_for
from tracker.store import RunStore, StoreError, default_store_url
from tracker.store.runs import STALE_AFTER_S
from tracker.units import S_PER_HOUR, WHOLE_S_PER_HOUR

if TYPE_CHECKING:
    from reports.kpi.allocations import AllocationWeek
    from tracker.owned import OwnedGpu

log = logging.getLogger("gpu_kpi")

_HOUR_NS = 3_600_000_000_000


class GpuTime(NamedTuple):
    """What :func:`week_gpu_time` or :func:`span_gpu_time` read."""

    runs: pd.DataFrame
    """The usable runs (:func:`reports.kpi.runs_frame`)."""
    gpu_time: pd.DataFrame
    """GT rows (:data:`reports.kpi.GT_COLUMNS`) of every run: from minute samples, and pro
    rata from the summary of a run never sampled."""
    skipped: kpis.Skipped
    """Runs and sample rows left out, and why."""


def week_gpu_time(
    store_url: str | None,
    start: datetime,
    *,
    tz: tzinfo,
    weeks: int = 12,
    basis: str = "util",
    thresholds: Thresholds | None = None,
    now: datetime,
    store: RunStore | None = None,
) -> GpuTime:
    """The GPU-time of ``weeks`` weeks up to the end of the week at ``start``.

    Args:
        store_url: The run store's URL (None: the default store).
        start: The last week's start (timezone-aware).
        tz: The report's time zone: weeks are its ISO weeks.
        weeks: How many weeks, the one at ``start`` the last.
        basis: ``util`` or ``sm_active``.
        thresholds: The idle rule and targets (None: the basis' defaults).
        now: The time of the read (timezone-aware): runs without a heartbeat are marked
            crashed, and a running run's summary counts up to it.
        store: The store, already open (``store_url`` is not used); None opens it.

    Returns:
        The runs, their GPU-time rows and what was left out.

    Raises:
        ReportError: The store holds no run.
        StoreError: The store cannot be read.
    """
    use_returning_arrow_pool()
    read = load(
        store_url,
        start,
        tz=tz,
        weeks=weeks,
        basis=basis,
        thresholds=thresholds,
        now=now,
        store=store,
    )
    gt = kpis.combine_gpu_time(
        read.runs, read.sampled, tz=tz, basis=basis, now=now, measured=read.measured
    )
    runs, skipped = read.runs, read.skipped
    del read  # the sampled rows: in ``gt`` now
    hand_back_freed()
    return GpuTime(runs=runs, gpu_time=gt, skipped=skipped)


def span_gpu_time(
    store: RunStore,
    since: datetime,
    until: datetime,
    *,
    tz: tzinfo,
    basis: str = "util",
    now: datetime,
) -> GpuTime:
    """The GPU-time of any span (a calendar month in a zone, a period up to now), as one
    bucket: what budgets count. The minutes' idle is not read (spend does not need it).

    A run with usable minute samples at any time is measured by them, even where it has none in
    the span (its sampler stopped); its summary counts pro rata only for a run that never had
    any. :func:`week_gpu_time` counts the same way, so a week reads the same whichever span
    holds it.

    Args:
        store: The open run store.
        since: The span's start (timezone-aware).
        until: The span's end, excluded (timezone-aware).
        tz: The report's time zone.
        basis: ``util`` or ``sm_active``.
        now: The time of the read (timezone-aware): a running run's summary counts up to it.

    Returns:
        The usable runs, their GPU-time rows (``week``: the span's start) and the runs left out
        (unreadable or unusable; sample rows are not checked here).

    Raises:
        StoreError: The store cannot be read.
    """
    scans = SampleScans(store)
    runs, excluded = usable_runs(scans, since=since, until=until)
    skipped = kpis.Skipped(runs=tuple(excluded))
    if runs.empty:
        return GpuTime(runs=runs, gpu_time=pd.DataFrame(columns=kpis.GT_COLUMNS), skipped=skipped)
    totals = span_totals(scans, kpis.BASES[basis][0], since, until)
    totals = totals[kpis.is_in(totals["run_id"], runs["id"])]
    sampled = pd.DataFrame(
        {
            "run_id": totals["run_id"].astype(object),
            "gpu": totals["gpu"].astype(object),
            "week": pd.Timestamp(since).tz_convert("UTC"),
            "gpu_hours": totals["covered_s"].astype(float) / S_PER_HOUR,
            "known_hours": totals["known_s"].astype(float) / S_PER_HOUR,
            "used_hours": totals["value_s"].astype(float) / 100.0 / S_PER_HOUR,
            "idle_hours": 0.0,
            "idle_used_hours": 0.0,
        }
    )[kpis.GT_COLUMNS]
    summary = kpis.summary_gpu_time(
        runs,
        sampled=scans.sampled_runs(runs["id"]),
        tz=tz,
        basis=basis,
        now=now,
        spans=[(since, until)],
    )
    gt = pd.concat([p for p in (sampled, summary) if len(p)] or [sampled], ignore_index=True)
    gt["week"] = pd.to_datetime(gt["week"], utc=True)
    return GpuTime(runs=runs, gpu_time=gt, skipped=skipped)


def usable_runs(
    scans: SampleScans,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    ids: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, list[kpis.ExcludedRun]]:
    """The runs of a span (or of ``ids``) that the figures can use, and those left out.

    Args:
        scans: The store's reads.
        since: The span's start (timezone-aware).
        until: The span's end, excluded (timezone-aware).
        ids: The runs with these ids instead, wherever they lie.

    Returns:
        The usable runs (:func:`reports.kpi.runs_frame`), and the runs left out with the
        reason: those that could not be read, then those whose figures cannot be used
        (:func:`reports.kpi.usable_runs`).
    """
    nan = scans.store.engine.dialect.name != "sqlite"

    def columns(rows: list[tuple[Any, ...]]) -> _Part:
        # columns for the runs that are surely as the store writes them and usable; one
        # record each, through the checks that name what is wrong, for the others
        frame, ok = run_columns(rows, nan=nan)
        ok &= kpis.surely_usable(frame)
        return _Part(frame[ok], np.flatnonzero(ok), [rows[i] for i in np.flatnonzero(~ok)], ok)

    arrow = _arrow_part(scans, since=since, until=until) if ids is None else None
    if arrow is not None:
        parts = [arrow]
    elif ids is None:
        parts = scans.run_row_parts(columns, since=since, until=until)
    else:
        parts = [columns(scans.run_rows(ids=ids))]
    # each part's first position in the whole read
    offsets = np.cumsum([0, *(len(p.ok) for p in parts[:-1])])
    slow_rows = [row for p in parts for row in p.slow]
    frames = [p.frame for p in parts if len(p.frame)] or [p.frame for p in parts[:1]]
    runs = (
        pd.concat(frames, ignore_index=True)
        if len(frames) > 1
        else frames[0]
        if frames
        else run_columns([], nan=nan)[0]
    )
    records, unreadable = records_of(slow_rows)
    good, excluded = kpis.usable_runs(records)
    unread = [kpis.ExcludedRun(run_id=u.run_id, name=u.name, reason=u.reason) for u in unreadable]
    if good:
        # in the order read (by start and id): a good record's id is text, and ids are unique
        slow_at = np.concatenate(
            [o + np.flatnonzero(~p.ok) for p, o in zip(parts, offsets, strict=True)]
        )
        fast_at = np.concatenate([o + p.at for p, o in zip(parts, offsets, strict=True)])
        at = {
            row[0]: int(i) for row, i in zip(slow_rows, slow_at, strict=True) if type(row[0]) is str
        }
        runs = pd.concat(
            [runs.set_axis(fast_at), kpis.runs_frame(good).set_axis([at[r.id] for r in good])]
        ).sort_index(kind="stable")
    # a column's type as a frame of these runs alone has it (a left-out row's text made the
    # whole column object)
    return runs.reset_index(drop=True).infer_objects(), unread + excluded


def _arrow_part(
    scans: SampleScans, *, since: datetime | None, until: datetime | None
) -> _Part | None:
    """The runs of a span read into Arrow (:meth:`reports.data.scans.SampleScans.run_table`)
    as one part of :func:`usable_runs`' read, the rows not surely usable read again as the
    driver's tuples; None where that read does not apply (the tuples are read)."""
    # the table as the call's own value: its columns are freed as they are converted
    read = arrow_run_columns(scans.run_table(since=since, until=until))
    if read is None:
        return None
    frame, ok, rowids = read
    ok &= kpis.surely_usable(frame)
    slow = rowids[~ok].tolist()
    rows = scans.run_rows_at(slow) if slow else {}
    if len(rows) < len(slow):  # deleted since: the read starts again, as tuples
        return None
    kept = frame if ok.all() else frame[ok]
    return _Part(kept, np.flatnonzero(ok), [rows[r] for r in slow], ok)


class _Part(NamedTuple):
    """One part of a read of runs (:meth:`reports.data.scans.SampleScans.run_row_parts`)."""

    frame: pd.DataFrame
    """Its runs read as columns, surely usable."""
    at: np.ndarray
    """Their positions in the part."""
    slow: list[tuple[Any, ...]]
    """The other rows, to be read one by one."""
    ok: np.ndarray
    """For each row of the part, whether it is in ``frame``."""


def _and_runs_of(
    scans: SampleScans,
    runs: pd.DataFrame,
    excluded: list[kpis.ExcludedRun],
    totals: pd.DataFrame,
) -> tuple[pd.DataFrame, list[kpis.ExcludedRun], np.ndarray]:
    """``runs`` and the runs of ``totals`` (samples in the span) whose record does not overlap
    the span (minutes after its end: a late sampler, a clock): a week counts a run's minutes
    whatever span the report reads around it. Also, for each row of ``totals``, whether its
    run is among the runs returned (the one look-up of a million ids, not two)."""
    # the few ids of no run read, found by one hash of both columns (no set of a million ids)
    known = kpis.is_in(totals["run_id"], runs["id"])
    unread = totals["run_id"][~known]
    missing = sorted(set(unread.astype(object)) - {e.run_id for e in excluded})
    if not missing:
        return runs, excluded, known
    more, more_excluded = usable_runs(scans, ids=missing)
    if len(more):
        runs = pd.concat([runs, more], ignore_index=True).infer_objects()
        known = known | kpis.is_in(totals["run_id"], more["id"])
    return runs, [*excluded, *more_excluded], known


def totals_frame(totals: Iterable[SampleTotals]) -> pd.DataFrame:
    """:class:`SampleTotals` as a frame of :data:`reports.kpi.TOTALS_COLUMNS`."""
    return pd.DataFrame([t.__dict__ for t in totals], columns=kpis.TOTALS_COLUMNS)


class SampledTime(NamedTuple):
    """What :func:`load` read."""

    runs: pd.DataFrame
    """The usable runs (:func:`reports.kpi.runs_frame`)."""
    sampled: pd.DataFrame
    """GT rows of the runs with minute samples in the weeks read."""
    skipped: kpis.Skipped
    """Runs and sample rows left out, and why."""
    measured: np.ndarray
    """For each of ``runs``, whether it has usable minute samples at any time: measured by
    them, never by its summary, even in weeks where it has none."""


def _as_crashed(runs: pd.DataFrame, now: datetime) -> pd.DataFrame:
    """``runs`` as :meth:`tracker.store.RunStore.mark_crashed` would have left them, in the
    frame only (a store the report may not write): a ``running`` run without a heartbeat for
    :data:`tracker.store.runs.STALE_AFTER_S` is ``crashed``, ended at its last heartbeat."""
    last = runs["heartbeat_at"].fillna(runs["started_at"])
    stale = (runs["status"] == "running") & (
        last < pd.Timestamp(now) - pd.Timedelta(seconds=STALE_AFTER_S)
    )
    if not stale.any():
        return runs
    runs = runs.copy()
    runs.loc[stale, "status"] = "crashed"
    runs.loc[stale, "ended_at"] = last[stale]
    return runs


def load(
    store_url: str | None,
    start: datetime,
    *,
    tz: tzinfo,
    weeks: int = 12,
    basis: str = "util",
    thresholds: Thresholds | None = None,
    now: datetime,
    store: RunStore | None = None,
) -> SampledTime:
    """The runs and the GPU-time from minute samples of ``weeks`` weeks up to the end of the
    week at ``start`` (:func:`week_gpu_time` adds the summaries of runs never sampled).

    The store sums the samples per (run, GPU, week), from the hourly rollups where they answer
    (a version 3 store, the idle rule they were kept by, weeks on whole UTC hours); only the
    stretches that may hold idle minutes are read minute by minute
    (:func:`reports.kpi.idle_candidates`).

    Args:
        store_url: The run store's URL (None: the default store).
        start: The last week's start (timezone-aware).
        tz: The report's time zone.
        weeks: How many weeks.
        basis: ``util`` or ``sm_active``.
        thresholds: The idle rule (None: the basis' defaults).
        now: Runs without a heartbeat since well before it are marked crashed first.
        store: The store, already open (``store_url`` is not used); None opens it.

    Returns:
        The usable runs, the GPU-time rows (:data:`reports.kpi.GT_COLUMNS`) of those with
        minute samples in that time, what was left out (runs that cannot be used, sample
        rows that cannot be used as they are) and which runs were ever sampled.

    Raises:
        ReportError: The store holds no run.
        StoreError: The store cannot be read.
    """
    t = thresholds or thresholds_for(basis)
    if store is None:
        with RunStore(store_url or default_store_url()) as opened:
            return _read(opened, start, tz=tz, weeks=weeks, basis=basis, t=t, now=now)
    return _read(store, start, tz=tz, weeks=weeks, basis=basis, t=t, now=now)


def _read(
    store: RunStore,
    start: datetime,
    *,
    tz: tzinfo,
    weeks: int,
    basis: str,
    t: Thresholds,
    now: datetime,
) -> SampledTime:
    """:func:`load` from an open store."""
    value = kpis.BASES[basis][0]
    # each bound a local calendar Monday on its own: across a DST change a week is 167 or 169 h
    since = pd.Timestamp(shift_week(start, tz, -(weeks - 1)))
    until = pd.Timestamp(shift_week(start, tz, 1))
    week_starts = weeks_between(since, until, tz)
    window = {"since": since.to_pydatetime(), "until": until.to_pydatetime()}
    marked = mark_crashed(store, now=now)
    scans = SampleScans(store)
    if not scans.has_runs() and not has_allocations(store):  # a site's first day: jobs alone
        raise ReportError(f"the run store {store.url} has no runs: nothing to report")
    if _rollups_answer(store.version, t, basis, [*week_starts, until]):
        if not database_per_connection(store.engine):
            # the runs and the rollups' sums read at once, each on a connection of its own
            # (the databases work with the GIL released)
            with ThreadPoolExecutor(1) as pool:
                sums = pool.submit(_from_rollups, scans, value, week_starts, until)
                runs, excluded = usable_runs(scans, **window)
                totals, idle = sums.result()
        else:
            runs, excluded = usable_runs(scans, **window)
            totals, idle = _from_rollups(scans, value, week_starts, until)
        runs, excluded, known = _and_runs_of(scans, runs, excluded, totals)
        if not marked:
            runs = _as_crashed(runs, now)
        # a run with a usable minute in the window's rollups has one: the store is asked
        # about the others only (a week of 100,000 runs: none)
        sampled = totals.loc[(totals["minutes"] > 0) & (totals["bucket"] >= 0), "run_id"]
        seen = kpis.is_in(runs["id"], sampled)
        ever = seen.copy()
        if not seen.all():
            others = runs["id"][~seen]
            ever[~seen] = kpis.is_in(others, list(scans.sampled_runs(others.tolist())))
        totals = totals[known]
        bad = kpis.bad_samples(totals, runs, value=value)
        totals = totals[totals["minutes"] > 0]
        skipped = kpis.Skipped(runs=tuple(excluded), samples=tuple(bad))
        return SampledTime(runs, kpis.totals_gpu_time(totals, week_starts, idle), skipped, ever)
    runs, excluded = usable_runs(scans, **window)
    totals = totals_frame(
        scans.sample_totals(
            value=value,
            low_under=t.idle_pct,
            bucket_edges=week_starts[1:],
            value_range=kpis.PCT_RANGE,
            **window,
        )
    )
    runs, excluded, known = _and_runs_of(scans, runs, excluded, totals)
    if not marked:
        runs = _as_crashed(runs, now)
    ever = kpis.is_in(runs["id"], list(scans.sampled_runs(runs["id"].tolist())))
    totals = totals[known]
    bad = kpis.bad_samples(totals, runs, value=value)
    totals = totals[totals["minutes"] > 0]  # buckets of only unusable rows
    samples = kpis.SampleFrameBuilder(kpis.sample_columns(basis))
    # idle windows reach across the window's edges: read the idle_window_min - 1 minutes
    # either side, so that a week's idle is final and equal to what later reports show
    reach = timedelta(minutes=t.idle_window_min - 1)
    scans.scan_sample_stretches(
        samples,
        columns=samples.columns,
        stretches=kpis.idle_candidates(totals, t),
        margin=t.idle_window_min - 1,
        since=window["since"] - reach,
        until=window["until"] + reach,
    )
    idle = kpis.sampled_gpu_time(samples.frame(), tz=tz, basis=basis, thresholds=t)
    skipped = kpis.Skipped(runs=tuple(excluded), samples=tuple(bad))
    return SampledTime(runs, kpis.totals_gpu_time(totals, week_starts, idle), skipped, ever)


def _rollups_answer(
    version: int, t: Thresholds, basis: str, week_starts: Sequence[pd.Timestamp]
) -> bool:
    """Whether the store's rollups answer this report: a version 3 store (a version 2 store's
    idle seconds were kept by the equal-weight idle rule), the idle rule they were kept by
    (:data:`tracker.store.rollups.ROLLUP_RULES`), and week bounds on whole UTC hours (not in a
    zone like Asia/Kolkata, +05:30). Otherwise the minutes are read."""
    from tracker.store.rollups import ROLLUP_RULES

    return (
        version >= 3
        and ROLLUP_RULES[basis] == (t.idle_pct, t.idle_window_min)
        and all(pd.Timestamp(w).value % 3_600_000_000_000 == 0 for w in week_starts)
    )


def _from_rollups(
    scans: SampleScans, value: str, week_starts: Sequence[pd.Timestamp], until: pd.Timestamp
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The store's totals per (run, GPU, week) (:data:`reports.kpi.TOTALS_COLUMNS`, with ``damaged``
    rollup rows) and the idle GPU-time rows, summed from the hourly rollups."""
    hours = [pd.Timestamp(w).value // 3_600_000_000_000 for w in [*week_starts, until]]
    frame = scans.rollup_totals_frame(
        value=value, hour_edges=hours[1:-1], since_hour=hours[0], until_hour=hours[-1]
    )
    totals = frame.assign(first_low=pd.NaT, last_low=pd.NaT)[[*kpis.TOTALS_COLUMNS, "damaged"]]
    # the rows with idle time (a GPU-week without any counts 0 idle hours without a row)
    idle_s, idle_value_s = frame["idle_s"].to_numpy(), frame["idle_value_s"].to_numpy()
    timed = frame[(frame["bucket"].to_numpy() >= 0) & ((idle_s != 0) | (idle_value_s != 0))]
    idle = pd.DataFrame(
        {
            "run_id": timed["run_id"].astype(object),
            "gpu": timed["gpu"].astype(object),
            "week": pd.DatetimeIndex(week_starts)[timed["bucket"].to_numpy(dtype=int)],
            "idle_hours": timed["idle_s"].astype(float) / S_PER_HOUR,
            "idle_used_hours": timed["idle_value_s"].astype(float) / 100.0 / S_PER_HOUR,
        }
    )
    return totals, idle


def span_totals(scans: SampleScans, value: str, since: datetime, until: datetime) -> pd.DataFrame:
    """The minute samples of a span summed per run and GPU: its whole hours from the rollups
    (a version 2 store), the part before the first and after the last whole hour from the
    samples.

    Args:
        scans: The store's reads.
        value: The sample column of the basis (``util_pct`` or ``sm_active_pct``).
        since: The span's start (timezone-aware).
        until: The span's end, excluded (timezone-aware).

    Returns:
        A frame of ``run_id``, ``gpu``, ``covered_s``, ``known_s``, ``value_s``: a row per
        part read, usable minutes only.
    """
    columns = ["run_id", "gpu", "covered_s", "known_s", "value_s"]
    a, b = pd.Timestamp(since).value, pd.Timestamp(until).value
    first, last = -(-a // _HOUR_NS), b // _HOUR_NS  # the first and the last whole hour's edge
    if scans.store.version < 2 or first >= last:
        first = last = a // _HOUR_NS  # no whole hour: the samples for the whole span
        edges = [(since, until)]
    else:
        edges = [(since, _at(first)), (_at(last), until)]
    parts = []
    if first < last:
        rows = scans.rollup_totals(value=value, hour_edges=[], since_hour=first, until_hour=last)
        parts += [
            (r.run_id, r.gpu, r.covered_s, r.known_s, r.value_s)
            for r in rows
            if r.bucket >= 0 and r.minutes > 0
        ]
    for lo, hi in edges:
        if lo < hi:
            parts += [
                (t.run_id, t.gpu, t.covered_s, t.known_s, t.value_s)
                for t in scans.sample_totals(
                    value=value, low_under=0.0, since=lo, until=hi, value_range=kpis.PCT_RANGE
                )
                if t.minutes > 0
            ]
    return pd.DataFrame(parts, columns=columns)


def _at(hour: int) -> datetime:
    return pd.Timestamp(hour * _HOUR_NS, tz="UTC").to_pydatetime()


# -- the scheduler's side of a span ----------------------------------------------------------
STRETCH_COST = 5
"""A minute row read by stretch (:meth:`reports.data.scans.SampleScans.scan_sample_stretches`)
against one read by a scan of the window, in time (``bench/allocations.py``)."""


def span_allocations(
    store: RunStore, req: Any, runs: Any, since: datetime, until: datetime
) -> AllocationWeek | None:
    """The Slurm jobs and Kubernetes pods of ``[since, until)`` against the runs' samples
    (:func:`week_allocations`); None when none was ever imported, or (with a warning) when they
    cannot be read: what reads them (the report's week, a budget's period) does not depend on
    them.

    Args:
        store: The open run store.
        req: The report's settings (:class:`reports.request.Request`: basis, thresholds,
            prices, owned GPUs).
        runs: The span's runs, a frame (``id``, ``host``, ``links``, ``gpu_model``,
            ``started_at``).
        since: The span's start (timezone-aware).
        until: Its end, excluded.
    """
    from tracker.cost import thresholds_for

    if until <= since:
        return None
    try:
        if not has_allocations(store):
            return None
        return week_allocations(
            store,
            runs[["id", "host", "links", "gpu_model", "started_at"]].to_dict("records"),
            since,
            until,
            basis=req.basis,
            thresholds=thresholds_for(req.basis, req.thresholds),
            prices=req.prices,
            owned=req.owned,
        )
    except (StoreError, ValueError) as e:
        log.warning(
            "gpu-kpi: %s to %s: scheduler allocations left out: %s",
            f"{since:%Y-%m-%d %H:%M}",
            f"{until:%Y-%m-%d %H:%M}",
            e,
        )
        return None


def week_allocations(
    store: RunStore,
    runs: Iterable[Mapping[str, Any]],
    since: datetime,
    until: datetime,
    *,
    basis: str,
    thresholds: Thresholds,
    prices: Mapping[str, float],
    owned: Mapping[str, OwnedGpu],
) -> AllocationWeek:
    """The scheduler's side of a span (:func:`reports.kpi.allocations.allocation_week`): the
    jobs that held GPUs in it, matched to the minute samples of ``runs`` (the store must have
    the table: :func:`has_allocations`).

    Args:
        store: The run store.
        runs: The runs of the span, each with ``id``, ``host``, ``links``, ``gpu_model`` and
            ``started_at``.
        since: The span's start (timezone-aware).
        until: Its end, excluded (timezone-aware; the week's, or now for a week under way).
        basis: ``util`` or ``sm_active``: the idle rule's column.
        thresholds: The idle rule.
        prices: The config's ``[prices]``.
        owned: The config's ``[owned.<MODEL>]``.
    """
    from reports.data.scans import SampleScans
    from reports.kpi.allocations import AllocationJoin, capacity_lines, short_host
    from reports.kpi.frames import SAMPLE_COLUMNS, SampleFrameBuilder, sample_columns
    from tracker.store.rollups import ROLLUP_RULES

    with read_errors(
        "the scheduler's allocations"
    ):  # the reads; what is done with them is the kpi's
        jobs, bad = allocations_in(store, since, until)
        spans, bad_spans = capacity_in(store, since, until)
        steps = usage_of(store, jobs)
        hosts = {short_host(h) for j in jobs for h in j.hosts}
        wanted = []
        sources = {j.source for j in jobs}
        named = [k for k, source in JOB_LINKS.items() if source in sources]
        for r in runs:
            links = parsed_links(r["links"])
            host = r["host"] if isinstance(r["host"], str) else ""
            if any(links.get(k) is not None for k in named) or short_host(host) in hosts:
                wanted.append({**r, "links": links, "host": host})
        join = AllocationJoin(jobs, wanted, since=since, until=until)
        window = timedelta(minutes=thresholds.idle_window_min)
        # both utilization columns: the basis's for the idle rule, SM activity for "useful"
        columns: tuple[str, ...] = SAMPLE_COLUMNS
        value = sample_columns(basis)[-1]
        scans = SampleScans(store)
        rollups = store.version >= 3 and ROLLUP_RULES[basis] == (
            thresholds.idle_pct,
            thresholds.idle_window_min,
        )
        hours = stretches = None
        if jobs and wanted and rollups:
            # the hours the rollups answer from them, the minutes of the others
            hourly = scans.rollup_hours(
                value=value, since_hour=join.h0, until_hour=join.h0 + join.span_h - 1
            )
            stretches = join.use_rollups(hourly)
            hours = len(hourly)
            # no SM activity anywhere (nvidia-smi logs): the minutes are read without it
            if not any(h.sm_known_s or not h.sound for h in hourly):
                columns = sample_columns(basis)
        frames = SampleFrameBuilder(columns, runs=[r["id"] for r in wanted])
        if stretches is not None and hours is not None:
            # a stretch is read through the primary key, ~5x a scanned row's cost: where most
            # hours need their minutes (short jobs starting and ending in most hours of every
            # node), the window is scanned instead and the whole hours' minutes left unused
            needed = sum((last - first).total_seconds() for _, _, first, last in stretches)
            if needed / WHOLE_S_PER_HOUR * STRETCH_COST < hours:
                scans.scan_sample_stretches(
                    frames,
                    columns=columns,
                    stretches=stretches,
                    margin=thresholds.idle_window_min - 1,
                    since=since - window,
                    until=until + window,
                )
            else:
                scans.scan_samples(
                    frames, columns=columns, since=since - window, until=until + window
                )
        elif jobs and wanted:
            scans.scan_samples(frames, columns=columns, since=since - window, until=until + window)
    week = join.week(
        frames.frame(),
        value=value,
        thresholds=thresholds,
        overrides=prices,
        owned=owned,
        usage=steps,
    )
    if spans:
        held_on = {(a.source, a.cluster, a.job_id): a.hosts for a in jobs}
        lines = capacity_lines(
            spans, week.jobs, held_on, since=since, until=until, overrides=prices, owned=owned
        )
        week = dataclasses.replace(week, capacity=lines)
    if bad_spans:
        left = f"{bad_spans} capacity row{'s' if bad_spans != 1 else ''}: not a node's span"
        week = dataclasses.replace(week, skipped=(*week.skipped, left))
    if bad:
        left = f"{bad} allocation row{'s' if bad != 1 else ''}: not a job (hosts, GPUs or times)"
        week = dataclasses.replace(week, skipped=(*week.skipped, left))
    return week
