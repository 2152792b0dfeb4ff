"""Build one week's report from the run store and write it.

One bad run or sample row does not stop the report: it is left out, counted and named in every
output and in one warning of the ``gpu_kpi`` logger (:mod:`reports.kpi.checks`).

Every output is rendered in memory, then written to the archive all or none
(:func:`reports.archive.write_archive`). An output folder that cannot be written is a
:class:`ReportError` before anything is computed."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from reports import kpi as kpis
from reports.archive import Content, check_out_dir, is_archived, write_archive
from reports.data.kpi_tables import publish_week
from reports.errors import ReportError
from reports.gputime import week_gpu_time
from reports.kpi import AllocationWeek, Headline, WeekKpis
from reports.render.exports import CsvExport, to_dict, to_json
from reports.request import FORMATS, Request, parse_formats, resolve_week
from reports.sections import Week, read_parts, team_parts
from reports.weeks import label_of, shift_week, week_bounds, week_of

if TYPE_CHECKING:
    from reports.data.week_cache import CacheKey
    from tracker.store import RunStore

log = logging.getLogger("gpu_kpi")

__all__ = [
    "FORMATS",  # the request's names are reports.request's; here too, as before 2026-12
    "Computed",
    "Request",
    "backfill",
    "build",
    "compute",
    "compute_live",
    "parse_formats",
    "render",
    "resolve_week",
    "week_kpis",
]


TREND_WEEKS = 12
"""Weeks in a report's trend, the reported one the last."""


def week_kpis(
    req: Request,
    runs: pd.DataFrame,
    gt: pd.DataFrame,
    start: datetime,
    *,
    trend_weeks: int = TREND_WEEKS,
    stored: Mapping[pd.Timestamp, Headline] | None = None,
    team_headlines: Collection[pd.Timestamp] = (),
    scheduler: Mapping[pd.Timestamp, AllocationWeek] | None = None,
    now: datetime | None = None,
    fleet: bool = True,
    unsampled: Mapping[pd.Timestamp, Mapping[str, float]] | None = None,
) -> WeekKpis:
    """The KPIs of the week starting ``start`` from these runs and their GPU-time rows, with
    ``req``'s time zone, basis, thresholds, prices, owned GPUs and carbon figures; ``stored``:
    kept headlines of earlier weeks whose rows were not read; ``scheduler``: the scheduler's
    weeks (:func:`scheduler_weeks`), whose GPU-time no run holds joins the runs' (the
    ledger: :mod:`reports.kpi.ledger`); ``now``: where a week under way ends; ``fleet``: False
    for a team's part (no capacity nobody held: that is the fleet's); ``unsampled``: the
    fleet's runs' GPU-hours with no minute sample per week
    (:func:`reports.kpi.ledger.unsampled_run_hours`; None: of ``gt``), for a part of it."""
    from reports.kpi.ledger import job_rows, unsampled_run_hours
    from tracker.cost import thresholds_for
    from tracker.prices import PriceTable

    table = PriceTable(req.prices)
    t = thresholds_for(req.basis, req.thresholds)
    # the weeks whose scheduler held or listed GPUs (one without jobs shows only its section)
    weeks = {wk: w for wk, w in (scheduler or {}).items() if w.jobs or w.capacity}
    held = unsampled if unsampled is not None else unsampled_run_hours(gt) if weeks else {}
    jobs = [
        job_rows(
            w.jobs,
            wk,
            target_util_pct=t.target_util_pct,
            owned=req.owned,
            prices=table,
            runs_held=held.get(wk),
        )
        for wk, w in weeks.items()
    ]

    return kpis.kpis_of_gpu_time(
        runs,
        gt,
        start,
        tz=req.tz,
        basis=req.basis,
        thresholds=req.thresholds,
        prices=table,
        owned=req.owned,
        carbon=req.carbon,
        trend_weeks=trend_weeks,
        stored=stored,
        team_headlines=team_headlines,
        jobs=pd.concat(jobs, ignore_index=True) if jobs else None,
        capacity={wk: w.capacity for wk, w in weeks.items()},
        now=now,
        fleet=fleet,
    )


@dataclass(frozen=True, kw_only=True)
class Computed:
    """One week's KPIs and the frames they came from (the service derives team reports)."""

    kpis: kpis.WeekKpis
    runs: pd.DataFrame
    gpu_time: pd.DataFrame
    """GPU-time rows (:data:`kpis.GT_COLUMNS`) of every run: a team's KPIs are
    :func:`kpis.kpis_of_gpu_time` of its runs and their rows."""
    now: datetime
    kept: Mapping[str, Mapping[pd.Timestamp, Headline]] = dataclasses.field(default_factory=dict)
    """Per team (``""``: the fleet), the kept headlines of the trend's weeks not read."""
    scheduler: Mapping[pd.Timestamp, AllocationWeek] = dataclasses.field(default_factory=dict)
    """The scheduler's weeks read (:func:`scheduler_weeks`), by week start (UTC)."""
    frames: bool = True
    """Whether ``runs`` and ``gpu_time`` are kept (:func:`compute`'s ``keep_frames``); when not,
    they are empty and :meth:`team` cannot be worked out."""

    def team(self, req: Request, team: str) -> WeekKpis | None:
        """The week's KPIs of ``team``'s runs and jobs alone, with what the whole report left
        out.

        Args:
            req: The report's request (prices, thresholds, time zone).
            team: The team, as the runs name it.

        Returns:
            The team's KPIs; None when it had no GPU time.

        Raises:
            ValueError: The runs and GPU-time rows were not kept."""
        from reports.kpi.ledger import unsampled_run_hours

        if not self.frames:
            raise ValueError("a team's KPIs need the runs and GPU-time rows: not kept")

        runs = self.runs[self.runs["team"] == team]
        gt = self.gpu_time[self.gpu_time["run_id"].isin(runs["id"])]
        jobs = {
            wk: dataclasses.replace(w, jobs=tuple(j for j in w.jobs if j.team == team), capacity=())
            for wk, w in self.scheduler.items()
        }
        tk = dataclasses.replace(
            week_kpis(
                req,
                runs,
                gt,
                self.kpis.week,
                stored=self.kept.get(team),
                scheduler=jobs,
                now=self.now,
                fleet=False,
                unsampled=unsampled_run_hours(self.gpu_time) if jobs else {},
            ),
            skipped=self.kpis.skipped.of_runs(set(runs["id"])),
            parts=team_parts(self.kpis.parts, team),
            allocations=None
            if self.kpis.allocations is None
            else self.kpis.allocations.of_team(team),
        )
        so_far = self.kpis.so_far
        if so_far is not None:  # a week under way: the team's too, compared at the same point
            start = self.kpis.week.to_pydatetime()
            end = shift_week(start, req.tz, 1)
            share = (so_far - start).total_seconds() / (end - start).total_seconds()
            tk = dataclasses.replace(kpis.so_far_week(tk, share), so_far=so_far)
        return tk if tk.headline.gpu_hours > 0 else None


def compute(
    store_url: str | None,
    req: Request,
    *,
    now: datetime,
    warn: bool = True,
    keep_frames: bool = True,
) -> Computed:
    """The KPIs of the requested week from the store (nothing written).

    Args:
        store_url: The run store's URL; None for the default store.
        req: What to report (week, time zone, basis, thresholds, prices, budgets).
        now: The current time (timezone-aware): what counts as complete and as crashed.
        warn: Log what was skipped (the metrics refresh, every few minutes, leaves that to the
            weekly job).
        keep_frames: Keep the runs and GPU-time rows (a team's report is worked out from
            them). False: each is let go as soon as the figures no longer need it (a
            million runs: ~0.1 GB less at the peak, ~0.5 GB less while the files are written).

    Returns:
        The week's KPIs, with the runs and GPU-time rows they were computed from (empty
        where not kept).

    Raises:
        ReportError: The store has no runs, or the week has not started.
        tracker.store.StoreError: The store cannot be read.
    """
    start = resolve_week(req.week, req.tz, now)
    from tracker.store import RunStore, default_store_url

    with RunStore(store_url or default_store_url()) as store:
        return _compute(store_url, store, req, start, now=now, warn=warn, keep=keep_frames)


def _compute(
    store_url: str | None,
    store: RunStore,
    req: Request,
    start: datetime,
    *,
    now: datetime,
    warn: bool,
    keep: bool,
) -> Computed:
    weeks = [shift_week(start, req.tz, -n) for n in range(TREND_WEEKS - 1, -1, -1)]
    marks, kept = _kept_weeks(store, req, weeks, now=now)
    # the rows of the weeks from the oldest not kept to the reported one
    read = next(i for i, w in enumerate(weeks) if i == len(weeks) - 1 or label_of(w) not in kept)
    kept_before = {label_of(w): kept.pop(label_of(w)) for w in weeks[read:] if label_of(w) in kept}
    runs, gt, skipped = week_gpu_time(
        store.url,
        start,
        tz=req.tz,
        weeks=len(weeks) - read,
        basis=req.basis,
        thresholds=req.thresholds,
        now=now,
        store=store,
    )
    by_start = {label_of(w): pd.Timestamp(w).tz_convert("UTC") for w in weeks}
    teams: dict[str, dict[pd.Timestamp, Headline]] = {}
    for label, of_team in kept.items():
        for team, h in of_team.items():
            teams.setdefault(team, {})[by_start[label]] = h
    # the complete weeks read from rows to keep, but those kept as they are (the reported
    # week, reported again)
    fresh = [
        by_start[label_of(w)]
        for w in weeks[read:]
        if label_of(w) in marks and label_of(w) not in kept_before
    ]
    scheduler = scheduler_weeks(store, req, runs, weeks[read:], now=now)
    k = week_kpis(
        req,
        runs,
        gt,
        start,
        stored=teams.get(""),
        team_headlines=fresh,
        scheduler=scheduler,
        now=now,
    )
    _keep_weeks(store, req, marks, k, fresh, now=now)
    # the GPU-time rows are not read again: not held while the sections are read
    gpu_time = gt if keep else gt.iloc[:0].copy()
    del gt
    k = dataclasses.replace(k, allocations=week_of_scheduler(scheduler, start))
    k = dataclasses.replace(
        k,
        parts=read_parts(
            Week(
                store_url=store_url,
                store=store,
                req=req,
                kpis=k,
                now=now,
                runs=runs,
                runs_since=weeks[read],
            )
        ),
    )
    if skipped and warn:
        log.warning("gpu-kpi: report %s: %s", label_of(k.week), skipped.log_line())
    if shift_week(start, req.tz, 1) > now:
        end = shift_week(start, req.tz, 1)
        share = (now - start).total_seconds() / (end - start).total_seconds()
        k = dataclasses.replace(kpis.so_far_week(k, share), so_far=now.astimezone(req.tz))
    elif k.headline.gpu_hours <= 0:
        k = dataclasses.replace(k, hint=_where_runs_are(store_url, req.tz, now))
        if k.hint and warn:
            log.warning("gpu-kpi: report %s: %s", label_of(k.week), k.hint)
    return Computed(
        kpis=dataclasses.replace(k, skipped=skipped),
        runs=runs if keep else runs.iloc[:0].copy(),
        gpu_time=gpu_time,
        now=now,
        kept=teams,
        scheduler=scheduler,
        frames=keep,
    )


def scheduler_weeks(
    store: RunStore, req: Request, runs: pd.DataFrame, starts: Sequence[datetime], *, now: datetime
) -> dict[pd.Timestamp, AllocationWeek]:
    """The scheduler's side of each week (:func:`allocations_of_week`), by its start (UTC), a
    week without jobs too (its section says none held GPUs): nothing (one catalogue look-up)
    when no job was ever imported."""
    from reports.data.allocations import has_allocations
    from tracker.store import StoreError

    try:
        if not starts or not has_allocations(store):
            return {}
    except StoreError:
        return {}
    out = {}
    for w in starts:
        week = allocations_of_week(store, req, runs, w, now=now)
        if week is not None:
            out[pd.Timestamp(w).tz_convert("UTC")] = week
    return out


def week_of_scheduler(
    scheduler: Mapping[pd.Timestamp, AllocationWeek], start: datetime
) -> AllocationWeek | None:
    """The scheduler's week starting ``start`` of :func:`scheduler_weeks`' (None: none)."""
    return scheduler.get(pd.Timestamp(start).tz_convert("UTC"))


def allocations_of_week(
    store: RunStore, req: Request, runs: pd.DataFrame, start: datetime, *, now: datetime
) -> kpis.AllocationWeek | None:
    """The week's Slurm jobs and Kubernetes pods against the runs' samples, to the end of the
    week or now (:func:`reports.gputime.span_allocations`)."""
    from reports.gputime import span_allocations

    return span_allocations(store, req, runs, start, min(shift_week(start, req.tz, 1), now))


def _kept_weeks(
    store: RunStore, req: Request, weeks: Sequence[datetime], *, now: datetime
) -> tuple[dict[str, str], dict[str, dict[str, Headline]]]:
    """The change marks of the complete weeks of a trend (read before their rows), and the
    kept headlines (per team, ``""`` the fleet) of those that still hold
    (:mod:`reports.data.week_cache`; the last week's rows are read whatever is kept). Nothing
    when the store has no counters (older than version 4) or cannot be read here (the report's
    own read says why)."""
    from reports.data import week_cache
    from reports.data.allocations import allocations_marks
    from tracker.cost import thresholds_for
    from tracker.store import StoreError

    t = req.thresholds or thresholds_for(req.basis)
    reach = timedelta(minutes=t.idle_window_min - 1)
    spans = [s for s in week_cache.week_spans(weeks, req.tz) if s[2] <= now]
    try:
        # (runs the report's read marks crashed raise counters after this: those weeks are
        # computed again next time, never kept stale)
        marks = week_cache.week_marks(store, spans, reach=reach)
        # a kept week counts the jobs of its time: their imports are part of its mark
        scheduler = allocations_marks(store, [s for s in spans if s[0] in marks])
        marks = {
            label: f"{m};{scheduler[label]}" if label in scheduler else m
            for label, m in marks.items()
        }
        return marks, week_cache.kept_headlines(store, _cache_key(req), marks)
    except StoreError:
        return {}, {}  # the report's own read says what is wrong


def _cache_key(req: Request) -> CacheKey:
    """What the report's kept weeks are kept under: its settings."""
    from reports.data.week_cache import cache_key

    return cache_key(
        tz=req.tz,
        basis=req.basis,
        thresholds=req.thresholds,
        prices=req.prices,
        owned=req.owned,
        carbon=req.carbon,
    )


def _keep_weeks(
    store: RunStore,
    req: Request,
    marks: Mapping[str, str],
    k: WeekKpis,
    read: Sequence[pd.Timestamp],
    *,
    now: datetime,
) -> None:
    """Keep the headlines (the fleet's and each team's) of the complete weeks read from rows
    that have a mark (:func:`_kept_weeks`)."""
    from reports.data import week_cache

    keep: dict[str, dict[str, tuple[str, Headline]]] = {}
    for w in read:
        label = label_of(w)
        if label not in marks or w not in k.week_headlines:
            continue
        keep[label] = {"": (marks[label], k.week_headlines[w])}
        for (team, wk), h in k.team_headlines.items():
            if wk == w:
                keep[label][team] = (marks[label], h)
    if not keep:
        return
    week_cache.keep_headlines(store, _cache_key(req), keep, now=now)


def _weeks_with_runs(runs: Sequence[Any], tz: tzinfo, now: datetime) -> set[datetime]:
    """The starts of the weeks (in ``tz``) that some run overlaps, from its start to its end
    (its last heartbeat, or ``now`` for a run without either)."""
    busy: set[datetime] = set()
    for r in runs:
        end = r.ended_at or r.heartbeat_at or now
        week = week_bounds(*week_of(r.started_at, tz), tz)[0]
        busy.add(week)
        while (week := shift_week(week, tz, 1)) <= end:
            busy.add(week)
    return busy


def _where_runs_are(store_url: str | None, tz: tzinfo, now: datetime) -> str:
    """For a week without runs: how many runs the week under way has so far, and the command
    that reports it (empty when it has none either)."""
    from reports.data.scans import SampleScans
    from tracker.store import RunStore, default_store_url

    start = week_bounds(*week_of(now, tz), tz)[0]
    with RunStore(store_url or default_store_url()) as store:
        # row by row, as the report reads runs: a row that cannot be read is not counted and
        # never ends the report (the week's own read names it)
        n = len(SampleScans(store).read_runs(since=start)[0])
    if not n:
        return ""
    return (
        f"no runs in this week; {n} run{'s' if n != 1 else ''} so far in "
        f"{label_of(start)}: gpu-kpi report --week current"
    )


def compute_live(
    store_url: str | None, req: Request, *, now: datetime
) -> tuple[WeekKpis, WeekKpis]:
    """The last complete week and the current week so far, as ``/metrics`` shows them: one
    read of those two weeks, where :func:`compute` of each reads twelve for the trend.
    Headline and breakdowns equal :func:`compute`'s; the trend holds the two weeks and the
    last complete week has no previous week to compare with.

    Args:
        store_url: The run store's URL; None for the default store.
        req: What to report (``req.week`` is not used).
        now: The current time (timezone-aware).

    Returns:
        The last complete week's KPIs and the current week's so far.
    """
    current = week_bounds(*week_of(now, req.tz), req.tz)[0]
    runs, gt, skipped = week_gpu_time(
        store_url, current, tz=req.tz, weeks=2, basis=req.basis, thresholds=req.thresholds, now=now
    )
    from tracker.store import RunStore, default_store_url

    starts = [shift_week(current, req.tz, -1), current]
    with RunStore(store_url or default_store_url()) as store:
        scheduler = scheduler_weeks(store, req, runs, starts, now=now)
    latest, so_far = (
        dataclasses.replace(
            week_kpis(req, runs, gt, start, trend_weeks=2, scheduler=scheduler, now=now),
            skipped=skipped,
            allocations=week_of_scheduler(scheduler, start),
        )
        for start in starts
    )
    return latest, so_far


def render(
    k: kpis.WeekKpis,
    req: Request,
    images: Mapping[str, bytes] | None = None,
    *,
    week: Mapping[str, Any] | None = None,
) -> dict[str, Content]:
    """The week's report in each requested format (nothing written).

    Args:
        k: The week's KPIs.
        req: The formats (``req.formats``), the time zone and the report's link.
        images: The charts (name → PNG bytes) when already drawn; None draws them.
        week: The week's document (:func:`reports.render.exports.to_dict`) when already made;
            None makes it when the JSON or the CSV is asked for.

    Returns:
        File suffix (``html``, ``eml``, ``json``, ``csv``, ``parquet``) → content (the CSV's
        and the Parquet's written as they are made: ``bytes()`` of one makes it whole).
    """
    out: dict[str, Content] = {}
    if {"json", "csv", "parquet"} & set(req.formats):
        d = week if week is not None else to_dict(k, req.tz)
        if "json" in req.formats:
            out["json"] = to_json(d).encode()
        if "csv" in req.formats:
            out["csv"] = CsvExport(d, k.runs, k.parts)  # every run: written as it is made
        if "parquet" in req.formats:
            from reports.render.parquet import ParquetExport

            out["parquet"] = ParquetExport(d, k.runs)  # every run, a row group at a time
    if "html" in req.formats or "email" in req.formats:
        if images is None:
            from reports.render.charts import charts

            images = charts(k)
        if "html" in req.formats:
            from reports.render.email import report_link
            from reports.render.html import render_html

            page = report_link(req.report_url, label_of(k.week))
            out["html"] = render_html(k, images, report_url=page).encode()
        if "email" in req.formats:
            from reports.render.email import build_email

            out["eml"] = build_email(k, images, tz=req.tz, report_url=req.report_url).as_bytes()
    return out


_STREAMED = ("csv", "parquet")
"""The formats written as they are made, every run of the week (:class:`reports.archive.Streamed`)."""


def write_week(
    out_dir: Path,
    label: str,
    k: kpis.WeekKpis,
    req: Request,
    *,
    index: bool,
    images: Mapping[str, bytes] | None = None,
    week: dict[str, Any] | None = None,
    archived: Callable[[dict[str, Any]], None] | None = None,
) -> list[Path]:
    """Render the week's files and write them into the archive (all or none): the CSV and the
    Parquet, every run of the week, in another thread while the pages are drawn.

    Args:
        out_dir: The archive folder.
        label: The files' name (``2026-W48``, ``2026-W49-so-far``).
        k: The week's KPIs.
        req: What to report.
        index: Whether to write the index too.
        images: The charts when already drawn (:func:`render`'s); None draws them.
        week: The week's document when already made; None makes it where needed.
        archived: For a complete week: called with its document (the BI tables) once every
            file is made, before any is moved into place; the JSON is then written whether
            asked for or not (the index reads it). None: nothing is called.

    Returns:
        The paths written.

    Raises:
        OSError: Writing fails (the archive is left as it was).
    """
    if week is None and (archived is not None or set(req.formats) - {"html", "email"}):
        week = to_dict(k, req.tz)
    streamed = [f for f in req.formats if f in _STREAMED]
    every_run = (
        render(k, dataclasses.replace(req, formats=tuple(streamed)), week=week) if streamed else {}
    )

    def pages() -> dict[str, Content]:
        rest = dataclasses.replace(req, formats=tuple(f for f in req.formats if f not in _STREAMED))
        files = render(k, rest, images, week=week)
        if archived is not None:
            assert week is not None
            if "json" not in files:
                files["json"] = to_json(week).encode()
            archived(week)
        return files

    if not every_run:
        return write_archive(out_dir, label, pages(), index=index)
    return write_archive(out_dir, label, every_run, index=index, later=pages)


def _written(out_dir: Path, write: Callable[[], list[Path]]) -> list[Path]:
    """``write()``, an error writing ``out_dir`` said on one line."""
    try:
        return write()
    except OSError as e:
        reason = e.strerror or str(e)
        raise ReportError(f"cannot write the report to {out_dir}: {reason}") from e


def build(
    store_url: str | None, req: Request, out_dir: Path, *, now: datetime | None = None
) -> list[Path]:
    """Make the week's report and write it under ``out_dir`` (``gpu-kpi report``): the
    week's files and the index, all or none, and the week's BI tables in the store.

    Args:
        store_url: The run store's URL; None for the default store.
        req: What to report.
        out_dir: The archive folder (created when missing).
        now: The current time (timezone-aware); None for the clock's.

    Returns:
        The paths written.

    Raises:
        ReportError: ``out_dir`` cannot be written (checked first), writing fails, the store
            has no runs or the week has not started.
        tracker.store.StoreError: The store cannot be read.
    """
    check_out_dir(out_dir)
    c = compute(store_url, req, now=now or datetime.now(UTC), keep_frames=False)
    label, index = label_of(c.kpis.week), "html" in req.formats
    if c.kpis.so_far is not None:
        # a week under way is never archived as the week: its own files, out of the index's
        # weeks (it links them as the week under way) and of the BI tables, so a later report
        # (or --all) writes the complete week
        so_far = f"{label}-so-far"
        return _written(out_dir, lambda: write_week(out_dir, so_far, c.kpis, req, index=index))

    def published(week: dict[str, Any]) -> None:
        publish_week(store_url, week, now=c.now)

    return _written(
        out_dir, lambda: write_week(out_dir, label, c.kpis, req, index=index, archived=published)
    )


def backfill(
    store_url: str | None,
    req: Request,
    out_dir: Path,
    *,
    since: str | None,
    now: datetime | None = None,
    say: Callable[[str], None] | None = None,
) -> list[Path]:
    """Archive every week up to the last complete one that ``out_dir`` does not hold yet (no
    ``<week>.json``), then write the index once (``gpu-kpi report --all``). Weeks already
    archived are left as they are, and so are weeks no run overlaps (skipped and counted): an
    interrupted backfill goes on where it stopped when run again.

    Args:
        store_url: The run store's URL; None for the default store.
        req: What to report (``req.week`` is not used).
        out_dir: The archive folder.
        since: The first week, ``YYYY-Www`` (never before the week of the oldest run); None:
            the week of the oldest run.
        now: The current time (timezone-aware); None for the clock's.
        say: Where progress goes (``2026-W31: 14/52 weeks``) and the closing count of the
            weeks archived and skipped; None: nowhere.

    Returns:
        The paths written.

    Raises:
        ReportError: The store has no runs, ``since`` is after the last complete week, or
            ``out_dir`` cannot be written.
    """
    from reports.data.scans import SampleScans
    from tracker.store import RunStore, default_store_url

    check_out_dir(out_dir)
    now = now or datetime.now(UTC)
    last = resolve_week(None, req.tz, now)
    with RunStore(store_url or default_store_url(), create=False) as store:
        runs, _ = SampleScans(store).read_runs(until=now)
    if not runs:
        raise ReportError(f"the run store {store.url} has no runs: nothing to report")
    # no empty weeks before the first run, however far back --since reaches
    start = week_bounds(*week_of(min(r.started_at for r in runs), req.tz), req.tz)[0]
    if since is not None:
        wanted = resolve_week(since, req.tz, now)
        if wanted > last:
            raise ReportError(f"--since {since}: after the last complete week, {label_of(last)}")
        start = max(start, wanted)
    weeks = []
    week = start
    while week <= last:
        weeks.append(week)
        week = shift_week(week, req.tz, 1)
    busy = _weeks_with_runs(runs, req.tz, now)

    def published(doc: dict[str, Any]) -> None:
        publish_week(store_url, doc, now=now)

    written: list[Path] = []
    archived = empty = kept = 0
    try:
        for n, week in enumerate(weeks, 1):
            label = label_of(week)
            if is_archived(out_dir, label):
                kept += 1
                continue
            if week not in busy:
                empty += 1  # no run overlaps it: no page of zeros
                continue
            if say is not None:
                say(f"{label}: {n}/{len(weeks)} weeks")
            c = compute(store_url, dataclasses.replace(req, week=label), now=now, keep_frames=False)
            written += write_week(out_dir, label, c.kpis, req, index=False, archived=published)
            archived += 1
        if say is not None:
            say(
                f"archived {archived} week(s); skipped {empty} without GPU time and "
                f"{kept} already archived"
            )
        if "html" in req.formats:
            written += write_archive(out_dir, "index", {}, index=True)
    except OSError as e:
        raise ReportError(f"cannot write the report to {out_dir}: {e.strerror or e}") from e
    return written
