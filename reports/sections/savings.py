"""The savings section: the recurring jobs of the last :data:`reports.kpi.savings.HISTORY_WEEKS`
weeks and what each change to one saved (:mod:`reports.kpi.savings`: a mark's, else a change
point's), per change and per team; the page's "Before and after" and "Recurring jobs", the
summary's "What fixes saved" line, the JSON (``recurring_jobs``, ``savings``,
``savings_by_team``) and the CSV (sections ``recurring_job``, ``saving``, ``saving_team``).
Read from the runs' own figures (no sample): a failure to read costs the section, never the
report."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd

from reports.kpi import savings
from reports.kpi.savings import Change
from reports.render.exports import plain, rows_of
from reports.render.fmt import (
    fmt_change,
    fmt_hours,
    fmt_pct,
    fmt_unit_usd,
    fmt_usd,
    missing,
    text_or_dash,
)
from reports.weeks import label_of, shift_week

if TYPE_CHECKING:
    from reports.request import Request
    from reports.sections.week import Week
    from tracker.store import RunStore

log = logging.getLogger("gpu_kpi")

RECURRING_FIELDS = tuple(
    f for f in savings.RECURRING_COLUMNS if f not in ("first_week", "last_week")
)
"""A recurring job (:func:`reports.kpi.savings.recurring_jobs`): its key, team (the most
common), runs, weeks with runs and runs this week, GPU-hours, spend, utilization, unit of work
and cost per unit, median throughput, the first and last week's cost per unit, latest verdict;
with ``first_week``/``last_week`` as ``2026-W45``."""
SAVING_FIELDS = (
    "job_key",
    "team",
    "week",
    "how",
    "note",
    "unit",
    "runs_before",
    "runs_after",
    "usd_per_unit_before",
    "usd_per_unit_after",
    "change_pct",
    "low_pct",
    "high_pct",
    "verdict_before",
    "verdict_after",
    "weeks_since",
    "usd_per_week",
    "usd_to_date",
)
"""A change to a recurring job (:class:`reports.kpi.savings.Change`): before and after, the
95% interval (null with too few runs), the saving per week and to date (negative: it costs
more); with ``at`` (ISO 8601) and ``sentence``."""


@dataclass(frozen=True)
class Savings:
    """The recurring jobs (:data:`reports.kpi.savings.RECURRING_COLUMNS`, most spend first)
    and their changes, most saved first."""

    recurring: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(savings.RECURRING_COLUMNS))
    )
    changes: tuple[Change, ...] = ()
    name: ClassVar[str] = "savings"
    place: ClassVar[str] = "detail"

    def of_team(self, team: str) -> Savings:
        rec = self.recurring
        return Savings(
            rec[rec["team"] == team].reset_index(drop=True) if len(rec) else rec,
            tuple(c for c in self.changes if c.team == team),
        )

    def view(self, *, brief: bool = False) -> Mapping[str, Any] | None:
        """Its two page sections' strings; each shows where it has rows (its partial keeps
        the place of one that has none)."""
        changes = [
            {
                "sentence": savings.sentence(c),
                "team": text_or_dash(c.team),
                "job_key": c.job_key,
                "since": c.week,
                "how": f"mark: {c.note}" if c.how == "mark" else "change point",
                "unit": c.unit,
                "before": fmt_unit_usd(c.usd_per_unit_before),
                "after": fmt_unit_usd(c.usd_per_unit_after),
                "change": fmt_change(c.change_pct),
                "interval": "too few runs"
                if c.too_few
                else f"95%: {fmt_change(c.low_pct)} to {fmt_change(c.high_pct)}",
                "per_week": fmt_usd(c.usd_per_week),
                "to_date": fmt_usd(c.usd_to_date),
            }
            for c in self.changes
        ]
        teams = [
            {
                "team": f"{text_or_dash(team)}: total",
                "fixes": f"{n} change{'s' if n != 1 else ''}",
                "per_week": fmt_usd(week),
                "to_date": fmt_usd(to_date),
            }
            for team, week, to_date, n in savings.ledger_by_team(self.changes)
        ]
        recurring = [
            {
                "job_key": j["job_key"],
                "team": text_or_dash(j["team"]),
                "runs": f"{j['runs']:,}",
                "weeks": f"{j['weeks']} week{'s' if j['weeks'] != 1 else ''}, "
                f"{j['runs_this_week']} this week",
                "gpu_hours": fmt_hours(j["gpu_hours"]),
                "spend": fmt_usd(j["spend_usd"]),
                "util": fmt_pct(j["utilization_pct"], 0),
                "throughput": "—"
                if missing(j["throughput"])
                else f"{j['throughput']:,.0f} {j['throughput_unit']}",
                "unit_cost": _unit_cost_span(j),
                "verdict": text_or_dash(j["verdict"]),
            }
            for j in self.recurring.to_dict("records")
        ]
        return {
            "changes": changes,
            "savings_by_team": teams,
            "recurring": recurring,
            "min_runs": savings.MIN_RUNS,
            "history_weeks": savings.HISTORY_WEEKS,
        }

    def summary(self) -> list[tuple[str, str, str]]:
        """What fixes saved, net, as the team totals, the JSON and ``/metrics`` have it."""
        if not self.changes:
            return []
        week = sum(c.usd_per_week for c in self.changes)
        to_date = sum(c.usd_to_date for c in self.changes)
        n = len(self.changes)
        return [
            (
                "savings-line",
                "What fixes saved",
                f"{fmt_usd(week)} a week, {fmt_usd(to_date)} to date, net of {n} "
                f"change{'s' if n != 1 else ''} to recurring jobs",
            )
        ]

    def document(self, tz: tzinfo) -> dict[str, Any]:
        return {
            "recurring_jobs": [
                {
                    **{f: plain(row[f]) for f in RECURRING_FIELDS},
                    "first_week": None
                    if row["first_week"] is None
                    else label_of(row["first_week"]),
                    "last_week": None if row["last_week"] is None else label_of(row["last_week"]),
                }
                for row in rows_of(self.recurring)
            ],
            "savings": [
                plain(
                    {
                        **{f: getattr(c, f) for f in SAVING_FIELDS},
                        "at": c.at.astimezone(tz).isoformat(),
                        "sentence": savings.sentence(c),
                    }
                )
                for c in self.changes
            ],
            "savings_by_team": [
                plain({"team": t, "usd_per_week": w, "usd_to_date": d, "changes": n})
                for t, w, d, n in savings.ledger_by_team(self.changes)
            ],
        }

    def csv_rows(self, doc: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
        for row in doc["recurring_jobs"]:
            yield "recurring_job", row["job_key"], {f: v for f, v in row.items() if f != "job_key"}
        for row in doc["savings"]:
            key = f"{row['job_key']}@{row['at']}"
            yield "saving", key, {f: v for f, v in row.items() if f not in ("job_key", "at")}
        for row in doc["savings_by_team"]:
            yield "saving_team", row["team"], {f: v for f, v in row.items() if f != "team"}

    def card_lines(self) -> list[str]:
        return []


def _unit_cost_span(j: Mapping[str, Any]) -> str:
    """``$0.20 → $0.12 per 1k samples`` (first week → last), or the one figure there is."""
    if not j["unit"]:
        return "—"
    first, last = j["first_usd_per_unit"], j["last_usd_per_unit"]
    if missing(first):
        return f"{fmt_unit_usd(j['usd_per_unit'])} per {j['unit']}"
    if missing(last):
        return f"{fmt_unit_usd(first)} per {j['unit']}"
    return f"{fmt_unit_usd(first)} → {fmt_unit_usd(last)} per {j['unit']}"


def read(week: Week) -> Savings:
    """The recurring jobs and their changes up to the end of the week (or now)."""
    start = week.kpis.week.to_pydatetime().astimezone(week.req.tz)
    return Savings(
        *recurring_of_weeks(
            week.store, week.req, start, now=week.now, runs=week.runs, runs_since=week.runs_since
        )
    )


def recurring_of_weeks(
    store: RunStore,
    req: Request,
    start: datetime,
    *,
    now: datetime,
    runs: pd.DataFrame | None = None,
    runs_since: datetime | None = None,
) -> tuple[pd.DataFrame, tuple[Change, ...]]:
    """The recurring jobs of the :data:`reports.kpi.savings.HISTORY_WEEKS` weeks up to the
    report's (or now), and their changes (a mark's, else a change point's): runs' own
    figures, no sample read. Nothing (with a warning) when the runs or marks cannot be read:
    the rest of the report does not depend on them.

    Args:
        store: The open run store.
        req: The report's request (time zone, prices, owned GPUs).
        start: The report's week start.
        now: The current time.
        runs: The usable runs the report already read, every run overlapping
            ``[runs_since, the week's end)``: only the runs before ``runs_since`` are read
            (a million runs in the week are read once, not twice). None: all are read.
        runs_since: The start of the span ``runs`` covers.
    """
    from reports.kpi.frames import hand_back_freed

    end = min(shift_week(start, req.tz, 1), now)
    since = shift_week(start, req.tz, -(savings.HISTORY_WEEKS - 1))
    # what the week's figures freed is handed back before these grow, and what these freed
    # after (a million runs: each step's frames would otherwise stay the process's)
    hand_back_freed()
    try:
        return _recurring(store, req, start, since=since, end=end, runs=runs, runs_since=runs_since)
    finally:
        hand_back_freed()


def _recurring(
    store: RunStore,
    req: Request,
    start: datetime,
    *,
    since: datetime,
    end: datetime,
    runs: pd.DataFrame | None,
    runs_since: datetime | None,
) -> tuple[pd.DataFrame, tuple[Change, ...]]:
    """:func:`recurring_of_weeks` from ``since`` to ``end``."""
    from reports.data.marks import read_marks
    from reports.data.scans import SampleScans
    from reports.gputime import usable_runs
    from reports.kpi.frames import is_in
    from tracker.store import StoreError

    try:
        parts: list[pd.DataFrame] = []
        if runs is None or runs_since is None:
            parts.append(usable_runs(SampleScans(store), since=since, until=end)[0])
        else:
            scans = SampleScans(store)
            if since < runs_since and scans.any_started_before(runs_since):
                # the runs started before the span read; one that reaches into it is in both
                # (taken from ``runs``): each part's job rows on their own, no run copied
                earlier, _ = usable_runs(scans, since=since, until=runs_since)
                if len(earlier):
                    parts.append(earlier[~is_in(earlier["id"], runs["id"])])
            parts.append(runs)
        marks = read_marks(store, until=end)
        jr = savings.job_runs(parts, since=since, until=end, prices=req.prices, owned=req.owned)
        recurring = savings.recurring_jobs(
            jr,
            weeks_of=savings.week_starts(jr["started_at"], req.tz),
            this_week=pd.Timestamp(start),
        )
        return recurring, savings.changes(jr, marks, end=end, tz=req.tz)
    except StoreError as e:
        log.warning("gpu-kpi: report %s: recurring jobs left out: %s", label_of(start), e)
    except Exception as e:  # a fault of ours in a part the rest of the report does not need
        log.warning(
            "gpu-kpi: report %s: recurring jobs left out (%s: %s)",
            label_of(start),
            type(e).__name__,
            e,
            exc_info=True,
        )
    return pd.DataFrame(columns=list(savings.RECURRING_COLUMNS)), ()
