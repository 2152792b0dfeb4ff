"""Build one week's report from the run store and write it.

One bad run or sample row does not stop the report: it is left out, counted and named in every
output and in one warning of the ``gpu_kpi`` logger (:mod:`reports.kpi.checks`).

Every output is rendered in memory, then written into a temporary folder inside the output
folder, then moved into place (``os.replace`` each, the index last): an error before the moves
(a full disk, a failing renderer) changes nothing of the archive and the temporary folder is
removed. The moves are renames in one folder, which take no space. An output folder that cannot
be written is a :class:`ReportError` before anything is computed."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import pandas as pd

from reports import kpi as kpis
from reports.budgets import week_lines
from reports.errors import ReportError
from reports.kpi import WeekKpis
from reports.kpi.budgets import Budget
from reports.kpi.checks import one_line
from reports.render.exports import publish_week, to_csv, to_json
from reports.weeks import label_of, parse_week, shift_week, week_bounds, week_of, weeks_between
from tracker.carbon import Carbon
from tracker.cost import Thresholds, thresholds_for
from tracker.owned import OwnedGpu

log = logging.getLogger("gpu_kpi")

FORMATS = ("html", "email", "json", "csv")


@dataclass(frozen=True, kw_only=True)
class Request:
    week: str | None
    """``YYYY-Www``; None: the last complete week."""
    tz: tzinfo
    formats: Sequence[str] = ("html", "json", "csv")
    basis: str = "util"
    thresholds: Thresholds | None = None
    report_url: str | None = None
    """Base URL where the archive is served: the email links ``<report_url>/<week>.html``."""
    prices: Mapping[str, float] = field(default_factory=dict)
    """Price overrides (USD per GPU-hour by model) over the built-in table."""
    owned: Mapping[str, OwnedGpu] = field(default_factory=dict)
    """Owned models (``[owned.<MODEL>]``): priced at their amortized rate, compared with rent."""
    carbon: Carbon = field(default_factory=Carbon)
    """Grid intensity and PUE for CO2e (``[carbon]``)."""
    budgets: Sequence[Budget] = ()
    """Team budgets (``[[budgets]]``): the report shows each team's spend against them."""

    def kpis(
        self, runs: pd.DataFrame, gt: pd.DataFrame, start: datetime, *, trend_weeks: int = 12
    ) -> kpis.WeekKpis:
        """The KPIs of the week starting ``start`` from these runs and their GPU-time rows."""
        from tracker.prices import PriceTable

        return kpis.kpis_of_gpu_time(
            runs,
            gt,
            start,
            tz=self.tz,
            basis=self.basis,
            thresholds=self.thresholds,
            prices=PriceTable(self.prices),
            owned=self.owned,
            carbon=self.carbon,
            trend_weeks=trend_weeks,
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

    def team(self, req: Request, team: str) -> WeekKpis | None:
        """The week's KPIs of ``team``'s runs alone (None when it had no GPU time), with what
        the whole report left out."""
        runs = self.runs[self.runs["team"] == team]
        gt = self.gpu_time[self.gpu_time["run_id"].isin(runs["id"])]
        tk = dataclasses.replace(
            req.kpis(runs, gt, self.kpis.week),
            skipped=self.kpis.skipped,
            budgets=tuple(b for b in self.kpis.budgets if b.team == team),
        )
        return tk if tk.headline.gpu_hours > 0 else None


def parse_formats(text: str) -> tuple[str, ...]:
    wanted = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in wanted if f not in FORMATS]
    if bad or not wanted:
        raise ReportError(
            f"unknown format {', '.join(bad) or repr(text)}: use a comma-separated "
            f"list of {', '.join(FORMATS)}"
        )
    return wanted


def resolve_week(week: str | None, tz: tzinfo, now: datetime) -> datetime:
    """Monday 00:00 of the requested week in ``tz``; it must have started already."""
    if week is None:
        from reports.weeks import last_complete_week

        start, _ = week_bounds(*last_complete_week(now, tz), tz)
        return start
    start, _ = week_bounds(*parse_week(week), tz)
    if start > now:
        raise ReportError(f"week {week} has not started yet")
    return start


def compute(store_url: str | None, req: Request, *, now: datetime, warn: bool = True) -> Computed:
    """The KPIs of the requested week from the store (nothing written). ``warn``: log what was
    skipped (the metrics refresh, every few minutes, leaves that to the weekly job)."""
    start = resolve_week(req.week, req.tz, now)
    runs, sampled, skipped = load(
        store_url, start, tz=req.tz, basis=req.basis, thresholds=req.thresholds, now=now
    )
    gt = kpis.combine_gpu_time(runs, sampled, tz=req.tz, basis=req.basis, now=now)
    k = req.kpis(runs, gt, start)
    if req.budgets:
        k = dataclasses.replace(k, budgets=week_lines(store_url, req, k, now=now))
    if skipped and warn:
        log.warning("gpu-kpi: report %s: %s", label_of(k.week), skipped.log_line())
    return Computed(kpis=dataclasses.replace(k, skipped=skipped), runs=runs, gpu_time=gt, now=now)


def compute_live(
    store_url: str | None, req: Request, *, now: datetime
) -> tuple[WeekKpis, WeekKpis]:
    """The last complete week and the current week so far (``req.week`` is not used), as
    ``/metrics`` shows them: one read of those two weeks, where :func:`compute` of each reads
    twelve for the trend. Headline and breakdowns equal :func:`compute`'s; the trend holds the
    two weeks and the last complete week has no previous week to compare with."""
    current = week_bounds(*week_of(now, req.tz), req.tz)[0]
    runs, sampled, skipped = load(
        store_url, current, tz=req.tz, weeks=2, basis=req.basis, thresholds=req.thresholds, now=now
    )
    gt = kpis.combine_gpu_time(runs, sampled, tz=req.tz, basis=req.basis, now=now)
    latest, so_far = (
        dataclasses.replace(req.kpis(runs, gt, start, trend_weeks=2), skipped=skipped)
        for start in (shift_week(current, req.tz, -1), current)
    )
    return latest, so_far


def load(
    store_url: str | None,
    start: datetime,
    *,
    tz: tzinfo,
    weeks: int = 12,
    basis: str = "util",
    thresholds: Thresholds | None = None,
    now: datetime,
) -> tuple[pd.DataFrame, pd.DataFrame, kpis.Skipped]:
    """Runs from ``weeks`` weeks back up to the end of the week at ``start``, the GPU-time
    rows (:data:`kpis.GT_COLUMNS`) of those with minute samples in that time, and what was
    left out (runs that cannot be used, sample rows that cannot be used as they are).

    The store sums the samples per (run, GPU, week); only the stretches that may hold idle
    minutes are read minute by minute (:func:`kpis.idle_candidates`)."""
    from tracker.store import RunStore, default_store_url

    t = thresholds or thresholds_for(basis)
    value = kpis.BASES[basis][0]
    # each bound a local calendar Monday on its own: across a DST change a week is 167 or 169 h
    since = pd.Timestamp(shift_week(start, tz, -(weeks - 1)))
    until = pd.Timestamp(shift_week(start, tz, 1))
    week_starts = weeks_between(since, until, tz)
    window = {"since": since.to_pydatetime(), "until": until.to_pydatetime()}
    with RunStore(store_url or default_store_url()) as store:
        store.mark_crashed(now=now)
        if not store.has_runs():
            raise ReportError(f"the run store {store.url} has no runs: nothing to report")
        records, unreadable = store.read_runs(**window)
        good, excluded = kpis.usable_runs(records)
        excluded = [
            kpis.ExcludedRun(run_id=u.run_id, name=u.name, reason=u.reason) for u in unreadable
        ] + excluded
        runs = kpis.runs_frame(good)
        if _rollups_answer(store.version, t, basis, [*week_starts, until]):
            totals, idle = _from_rollups(store, value, week_starts, until)
            totals = totals[totals["run_id"].isin(runs["id"])]
            bad = kpis.bad_samples(
                totals, dict(zip(runs["id"], runs["name"], strict=True)), value=value
            )
            totals = totals[totals["minutes"] > 0]
            skipped = kpis.Skipped(runs=tuple(excluded), samples=tuple(bad))
            return runs, kpis.totals_gpu_time(totals, week_starts, idle), skipped
        totals = kpis.totals_frame(
            store.sample_totals(
                value=value,
                low_under=t.idle_pct,
                bucket_edges=week_starts[1:],
                value_range=kpis.PCT_RANGE,
                **window,
            )
        )
        totals = totals[totals["run_id"].isin(runs["id"])]
        bad = kpis.bad_samples(
            totals, dict(zip(runs["id"], runs["name"], strict=True)), value=value
        )
        totals = totals[totals["minutes"] > 0]  # buckets of only unusable rows
        samples = kpis.SampleFrameBuilder(kpis.sample_columns(basis))
        # idle windows reach across the window's edges: read the idle_window_min - 1 minutes
        # either side, so that a week's idle is final and equal to what later reports show
        reach = timedelta(minutes=t.idle_window_min - 1)
        store.scan_sample_stretches(
            samples,
            columns=samples.columns,
            stretches=kpis.idle_candidates(totals, t),
            margin=t.idle_window_min - 1,
            since=window["since"] - reach,
            until=window["until"] + reach,
        )
    idle = kpis.sampled_gpu_time(samples.frame(), tz=tz, basis=basis, thresholds=t)
    skipped = kpis.Skipped(runs=tuple(excluded), samples=tuple(bad))
    return runs, kpis.totals_gpu_time(totals, week_starts, idle), skipped


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
    store: Any, value: str, week_starts: Sequence[pd.Timestamp], until: pd.Timestamp
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The store's totals per (run, GPU, week) (:data:`kpis.TOTALS_COLUMNS`, with ``damaged``
    rollup rows) and the idle GPU-time rows, summed from the hourly rollups."""
    hours = [pd.Timestamp(w).value // 3_600_000_000_000 for w in [*week_starts, until]]
    rows = store.rollup_totals(
        value=value, hour_edges=hours[1:-1], since_hour=hours[0], until_hour=hours[-1]
    )
    columns = [
        "run_id",
        "gpu",
        "bucket",
        "minutes",
        "covered_s",
        "known_s",
        "value_s",
        "idle_s",
        "idle_value_s",
        "dropped",
        "bad_values",
        "bad_minutes",
        "damaged",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    totals = frame.assign(first_low=pd.NaT, last_low=pd.NaT)[[*kpis.TOTALS_COLUMNS, "damaged"]]
    timed = frame[frame["bucket"] >= 0]
    idle = pd.DataFrame(
        {
            "run_id": timed["run_id"].astype(object),
            "gpu": timed["gpu"].astype(object),
            "week": [pd.Timestamp(week_starts[b]) for b in timed["bucket"]],
            "idle_hours": timed["idle_s"].astype(float) / 3600.0,
            "idle_used_hours": timed["idle_value_s"].astype(float) / 100.0 / 3600.0,
        }
    )
    return totals, idle


def render(
    k: kpis.WeekKpis, req: Request, images: Mapping[str, bytes] | None = None
) -> dict[str, bytes]:
    """File suffix → content for each requested format (nothing written). ``images``: the
    charts when already drawn."""
    out: dict[str, bytes] = {}
    if "json" in req.formats:
        out["json"] = to_json(k, req.tz).encode()
    if "csv" in req.formats:
        out["csv"] = to_csv(k, req.tz).encode()
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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``path`` (mode 0666 less the umask, as ``open`` makes
    it), and to the disk: a full disk shows here, before any rename."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide the archive from a web server
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_out_dir(out_dir: Path) -> None:
    """ReportError (one line: ``cannot write the report to PATH: reason``) unless ``out_dir``
    is a folder this process may write in, or can be made in the nearest folder above it that
    exists. Nothing is created."""
    there = out_dir
    while not there.exists() and there.parent != there:
        there = there.parent
    if not there.is_dir():
        what = "it is" if there == out_dir else f"{there} is"
        raise ReportError(f"cannot write the report to {out_dir}: {what} not a folder")
    if not os.access(there, os.W_OK | os.X_OK):
        where = "" if there == out_dir else f" in {there}"
        raise ReportError(f"cannot write the report to {out_dir}: permission denied{where}")


def archive_index(out_dir: Path) -> list[dict[str, object]]:
    """Headline figures of every archived week (from its JSON), for the index page; files that
    are not ours are left out (:func:`reports.render.index.read_archive`)."""
    from reports.render.index import read_archive

    return list(read_archive(out_dir)[0])


def write_archive(
    out_dir: Path, label: str, files: Mapping[str, bytes], *, index: bool
) -> list[Path]:
    """Write ``<out_dir>/<label>.<suffix>`` for each file and (``index``) the index page of
    every archived week, all or none (see the module docstring); return the paths written.
    OSError when the folder cannot be written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".gpu-kpi-{label}-", suffix=".tmp"))
    try:
        names = [f"{label}.{suffix}" for suffix in files]
        for name, data in zip(names, files.values(), strict=True):
            _write_new(staging / name, data)
        if index:
            from reports.render.index import read_archive, render_index

            weeks, left_out = read_archive(out_dir, staged=staging)
            if left_out:
                log.warning(
                    "gpu-kpi: the index of %s leaves out %d file(s) that are not "
                    "gpu-kpi week reports: %s",
                    out_dir,
                    len(left_out),
                    one_line("; ".join(f"{f.name} ({f.reason})" for f in left_out)),
                )
            _write_new(staging / "index.html", render_index(weeks, left_out=left_out).encode())
            names.append("index.html")
        for name in names:  # the index last: it links the week's page
            os.replace(staging / name, out_dir / name)
        return [out_dir / name for name in names]
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build(
    store_url: str | None, req: Request, out_dir: Path, *, now: datetime | None = None
) -> list[Path]:
    """Make the week's report and write it under ``out_dir``; return the paths written.
    ReportError when ``out_dir`` cannot be written (checked first) or writing fails."""
    check_out_dir(out_dir)
    c = compute(store_url, req, now=now or datetime.now(UTC))
    publish_week(store_url, c.kpis, req.tz, now=c.now)
    files = render(c.kpis, req)
    if "json" not in files:  # the index reads the archive's JSON: keep it current
        files["json"] = to_json(c.kpis, req.tz).encode()
    try:
        return write_archive(out_dir, label_of(c.kpis.week), files, index="html" in req.formats)
    except OSError as e:
        reason = e.strerror or str(e)
        raise ReportError(f"cannot write the report to {out_dir}: {reason}") from e


def backfill(
    store_url: str | None,
    req: Request,
    out_dir: Path,
    *,
    since: str | None,
    now: datetime | None = None,
) -> list[Path]:
    """Archive every week from ``since`` (``YYYY-Www``, but not before the week of the oldest
    run; None: that week) to the last complete week that ``out_dir`` does not hold yet (no
    ``<week>.json``), then write the index once; return the paths written. Weeks already
    archived are left as they are."""
    from tracker.store import RunStore, default_store_url

    check_out_dir(out_dir)
    now = now or datetime.now(UTC)
    last = resolve_week(None, req.tz, now)
    with RunStore(store_url or default_store_url(), create=False) as store:
        runs, _ = store.read_runs(until=now)
    if not runs:
        raise ReportError(f"the run store {store.url} has no runs: nothing to report")
    # no empty weeks before the first run, however far back --since reaches
    start = week_bounds(*week_of(min(r.started_at for r in runs), req.tz), req.tz)[0]
    if since is not None:
        wanted = resolve_week(since, req.tz, now)
        if wanted > last:
            raise ReportError(f"--since {since}: after the last complete week, {label_of(last)}")
        start = max(start, wanted)
    written: list[Path] = []
    try:
        week = start
        while week <= last:
            label = label_of(week)
            if not (out_dir / f"{label}.json").exists():
                c = compute(store_url, dataclasses.replace(req, week=label), now=now)
                publish_week(store_url, c.kpis, req.tz, now=now)
                files = render(c.kpis, req)
                files.setdefault("json", to_json(c.kpis, req.tz).encode())
                written += write_archive(out_dir, label, files, index=False)
            week = shift_week(week, req.tz, 1)
        if "html" in req.formats:
            written += write_archive(out_dir, "index", {}, index=True)
    except OSError as e:
        raise ReportError(f"cannot write the report to {out_dir}: {e.strerror or e}") from e
    return written
