"""Build one week's report from the run store and write it: every output is rendered in memory
first and written only when all of them succeeded, each through a temporary file and an atomic
rename, so a failure leaves nothing half-written."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path

import pandas as pd

from reports import kpi as kpis
from reports.errors import ReportError
from reports.render.exports import to_json
from reports.weeks import label_of, parse_week, week_bounds, weeks_between
from tracker.cost import Thresholds, thresholds_for

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


@dataclass(frozen=True, kw_only=True)
class Computed:
    """One week's KPIs and the frames they came from (the service derives team reports)."""

    kpis: kpis.WeekKpis
    runs: pd.DataFrame
    gpu_time: pd.DataFrame
    """GPU-time rows (:data:`kpis.GT_COLUMNS`) of every run: a team's KPIs are
    :func:`kpis.kpis_of_gpu_time` of its runs and their rows."""
    now: datetime


def parse_formats(text: str) -> tuple[str, ...]:
    wanted = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in wanted if f not in FORMATS]
    if bad or not wanted:
        raise ReportError(f"unknown format {', '.join(bad) or repr(text)}: use a comma-separated "
                        f"list of {', '.join(FORMATS)}")
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


def compute(store_url: str | None, req: Request, *, now: datetime) -> Computed:
    """The KPIs of the requested week from the store (nothing written)."""
    from tracker.prices import PriceTable

    start = resolve_week(req.week, req.tz, now)
    runs, sampled = load(store_url, start, tz=req.tz, basis=req.basis,
                         thresholds=req.thresholds, now=now)
    gt = kpis.combine_gpu_time(runs, sampled, tz=req.tz, basis=req.basis, now=now)
    k = kpis.kpis_of_gpu_time(runs, gt, start, tz=req.tz, basis=req.basis,
                              thresholds=req.thresholds, prices=PriceTable(req.prices))
    return Computed(kpis=k, runs=runs, gpu_time=gt, now=now)


def load(store_url: str | None, start: datetime, *, tz: tzinfo, weeks: int = 12,
         basis: str = "util", thresholds: Thresholds | None = None,
         now: datetime) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs from ``weeks`` weeks back up to the end of the week at ``start``, and the GPU-time
    rows (:data:`kpis.GT_COLUMNS`) of those with minute samples in that time.

    The store sums the samples per (run, GPU, week); only the stretches that may hold idle
    minutes are read minute by minute (:func:`kpis.idle_candidates`)."""
    from tracker.store import RunStore, default_store_url

    t = thresholds or thresholds_for(basis)
    since = pd.Timestamp(start) - pd.Timedelta(days=7 * (weeks - 1))
    until = pd.Timestamp(start) + pd.Timedelta(days=7)
    week_starts = weeks_between(since, until, tz)
    window = {"since": since.to_pydatetime(), "until": until.to_pydatetime()}
    with RunStore(store_url or default_store_url()) as store:
        store.mark_crashed(now=now)
        if not store.list_runs():
            raise ReportError(f"the run store {store.url} has no runs: nothing to report")
        runs = kpis.runs_frame(store.list_runs(**window))
        totals = kpis.totals_frame(store.sample_totals(
            value=kpis.BASES[basis][0], low_under=t.idle_pct,
            bucket_edges=week_starts[1:], **window))
        totals = totals[totals["run_id"].isin(runs["id"])]
        samples = kpis.SampleFrameBuilder(kpis.sample_columns(basis))
        store.scan_sample_stretches(samples, columns=samples.columns,
                                    stretches=kpis.idle_candidates(totals, t),
                                    margin=t.idle_window_min - 1, **window)
    idle = kpis.sampled_gpu_time(samples.frame(), tz=tz, basis=basis, thresholds=t)
    return runs, kpis.totals_gpu_time(totals, week_starts, idle)


def render(k: kpis.WeekKpis, req: Request,
           images: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
    """File suffix → content for each requested format (nothing written). ``images``: the
    charts when already drawn."""
    out: dict[str, bytes] = {}
    if "json" in req.formats:
        out["json"] = to_json(k, req.tz).encode()
    if "csv" in req.formats:
        from reports.render.exports import to_csv

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

            out["eml"] = build_email(k, images, tz=req.tz,
                                     report_url=req.report_url).as_bytes()
    return out


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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


def archive_index(out_dir: Path) -> list[dict[str, object]]:
    """Headline figures of every archived week (from its JSON), for the index page."""
    weeks = []
    for p in sorted(out_dir.glob("*-W*.json")):
        try:
            d = json.loads(p.read_text())
            label, head = d["week"], d["headline"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not one of ours
        row: dict[str, object] = {"label": label, "basis_label": d.get("basis_label"),
                                  **{k: head.get(k) for k in ("gpu_hours", "spend_usd",
                                                              "utilization_pct", "waste_usd",
                                                              "idle_usd", "runs")}}
        if (out_dir / f"{label}.html").exists():
            row["href"] = f"{label}.html"
        weeks.append(row)
    return weeks


def write_archive(out_dir: Path, label: str, files: Mapping[str, bytes], *,
                  index: bool) -> list[Path]:
    """Write ``<out_dir>/<label>.<suffix>`` for each file, each atomically, and (``index``)
    the index page of every archived week; return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, data in files.items():
        path = out_dir / f"{label}.{suffix}"
        write_atomically(path, data)
        written.append(path)
    if index:
        from reports.render.index import render_index

        path = out_dir / "index.html"
        write_atomically(path, render_index(archive_index(out_dir)).encode())
        written.append(path)
    return written


def build(store_url: str | None, req: Request, out_dir: Path, *,
          now: datetime | None = None) -> list[Path]:
    """Make the week's report and write it under ``out_dir``; return the paths written."""
    c = compute(store_url, req, now=now or datetime.now(UTC))
    files = render(c.kpis, req)
    if "json" not in files:  # the index reads the archive's JSON: keep it current
        files["json"] = to_json(c.kpis, req.tz).encode()
    return write_archive(out_dir, label_of(c.kpis.week), files, index="html" in req.formats)
