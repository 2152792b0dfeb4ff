"""Team budgets against the store: each team's spend in a period (a week, a month, up to now),
the lines the weekly report shows, and the ones the service checks for alerts
(:mod:`reports.service.budget_alerts`). The arithmetic is :mod:`reports.kpi.budgets`'.

A period's spend is priced exactly as the weekly report prices it (:func:`reports.kpi.run_weeks`:
the price table, overrides, owned GPUs), and counts the scheduler's GPU-time no run holds as the
report's ledger does (:func:`reports.kpi.ledger.job_rows`): GPU-hours in the period from the store's hourly
rollups where its bounds fall on whole hours, from the minute samples for the rest (the start of
a month in Asia/Kolkata, the current hour), and pro rata by duration for runs with only a
summary. The runs the report leaves out (unreadable, absurd figures) are left out here too.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from reports import kpi as kpis
from reports.data.scans import mark_crashed
from reports.kpi import WeekKpis
from reports.kpi.budgets import PERIODS, TOP_RUNS, Budget, BudgetLine
from reports.weeks import (
    label_of,
    month_label,
    month_start_of,
    shift_month,
    shift_week,
    week_start_of,
)

log = logging.getLogger("gpu_kpi")


@dataclasses.dataclass(frozen=True)
class Spend:
    """What a span cost: USD per team, and each team's :data:`TOP_RUNS` largest runs."""

    by_team: dict[str, float]
    tops: dict[str, tuple[tuple[str, float], ...]]
    """Team → its largest runs (name, USD), largest first (then by run id)."""

    def top_runs(self, team: str) -> tuple[tuple[str, float], ...]:
        return self.tops.get(team, ())


def top_runs(
    runs: pd.DataFrame, teams: Collection[str] | None = None
) -> dict[str, tuple[tuple[str, float], ...]]:
    """Each team's :data:`TOP_RUNS` runs with the most ``spend_usd``, ties by ``run_id``: the
    team as ``str()`` writes it (a missing one ``nan``), only the ``teams`` asked for (None:
    every one); a pair made only for a run that is shown.

    Args:
        runs: Runs with ``run_id``, ``name``, ``team`` and ``spend_usd`` (USD, each above 0).
        teams: The teams wanted.
    """
    if not len(runs):
        return {}
    codes, uniques = pd.factorize(runs["team"])  # a missing one: -1, each as it is
    team = pd.Series([str(u) for u in uniques] + [""], dtype=object).take(codes)
    team.index = runs.index
    missing = codes == -1
    team[missing] = [str(v) for v in runs["team"][missing].tolist()]  # None, NaN: as str() has it
    if teams is not None:
        wanted = team.isin(list(teams)).to_numpy()
        runs, team = runs[wanted], team[wanted]
    ranked = runs.assign(_team=team).sort_values(["spend_usd", "run_id"], ascending=[False, True])
    shown = ranked.groupby("_team", sort=False).head(TOP_RUNS)
    tops: dict[str, list[tuple[str, float]]] = {}
    for t, n, v in zip(shown["_team"], shown["name"], shown["spend_usd"], strict=True):
        tops.setdefault(t, []).append((str(n), float(v)))
    return {t: tuple(pairs) for t, pairs in tops.items()}


def spend(store: Any, req: Any, since: datetime, until: datetime, *, now: datetime) -> Spend:
    """What [since, until) cost, from ``store`` (an open :class:`tracker.store.RunStore`) with
    ``req``'s prices, owned GPUs and basis (a :class:`reports.request.Request`)."""
    from reports.gputime import span_allocations, span_gpu_time
    from reports.kpi.ledger import job_rows, unsampled_run_hours
    from tracker.cost import thresholds_for
    from tracker.prices import PriceTable

    runs, gt, _ = span_gpu_time(store, since, until, tz=req.tz, basis=req.basis, now=now)
    t = req.thresholds or thresholds_for(req.basis)
    table = PriceTable(req.prices)
    per = kpis.run_weeks(
        gt,
        runs,
        prices=table,
        target_util_pct=t.target_util_pct,
        owned=req.owned,
        carbon=req.carbon,
    )
    # the scheduler's GPU-time no run holds, as the report's week counts it (the ledger)
    scheduler = span_allocations(store, req, runs, since, until)
    if scheduler is not None and scheduler.jobs:
        held: dict[str, float] = {}
        for of_week in unsampled_run_hours(gt).values():  # the span's, whatever its weeks
            for run, hours in of_week.items():
                held[run] = held.get(run, 0.0) + hours
        jobs = job_rows(
            scheduler.jobs,
            pd.Timestamp(since),
            target_util_pct=t.target_util_pct,
            owned=req.owned,
            prices=table,
            runs_held=held,
        )
        per = pd.concat([per, jobs.astype({"run_id": object})], ignore_index=True)
    if per.empty:
        return Spend({}, {})
    priced = per[per["priced"].astype(bool) & (per["spend_usd"] > 0)]
    by_run = priced.groupby(["run_id", "name", "team"], as_index=False)["spend_usd"].sum()
    return Spend(
        {str(k): float(v) for k, v in by_run.groupby("team")["spend_usd"].sum().items()},
        top_runs(by_run),
    )


def _line(
    b: Budget,
    period: str,
    label: str,
    span: tuple[datetime, datetime],
    *,
    until: datetime,
    usd: float,
    runs: tuple[tuple[str, float], ...],
    tz: Any,
) -> BudgetLine:
    """The line, its times in the report zone ``tz``."""
    return BudgetLine(
        team=b.team,
        period=period,
        label=label,
        start=span[0].astimezone(tz),
        end=span[1].astimezone(tz),
        until=until.astimezone(tz),
        spend_usd=usd,
        budget_usd=dict(b.amounts())[period],
        runs=runs,
    )


def week_lines(
    store_url: str | None, req: Any, k: WeekKpis, *, now: datetime
) -> tuple[BudgetLine, ...]:
    """The report's budget lines of week ``k`` for ``req.budgets``: each weekly budget against
    the week's spend; each monthly one against the month the week ends in, to the week's end
    (with its forecast), and the month before it, whole, when the week began in it. A failure
    costs the lines (and a warning), never the report."""
    try:
        return _week_lines(store_url, req, k, now=now)
    except Exception as e:
        log.warning(
            "gpu-kpi: report %s: no budget lines: %s: %s", label_of(k.week), type(e).__name__, e
        )
        return ()


def _week_lines(
    store_url: str | None, req: Any, k: WeekKpis, *, now: datetime
) -> tuple[BudgetLine, ...]:
    from tracker.store import RunStore, default_store_url

    tz = req.tz
    w0 = k.week.to_pydatetime()
    w1 = shift_week(w0, tz, 1)
    until = min(w1, now)  # the current week: so far
    m0 = month_start_of(until - timedelta(microseconds=1), tz)
    months = [(m0, shift_month(m0, tz, 1), until)]
    if w0 < m0:
        months.insert(0, (shift_month(m0, tz, -1), m0, m0))
    teams = k.by.get("team", pd.DataFrame(columns=["team", "spend_usd"]))
    week_usd = {str(t): float(v) for t, v in zip(teams["team"], teams["spend_usd"], strict=True)}
    paid = pd.to_numeric(k.runs["spend_usd"], errors="coerce") > 0 if len(k.runs) else None
    week_runs = Spend(
        week_usd,
        top_runs(k.runs[paid] if paid is not None else k.runs, {b.team for b in req.budgets}),
    )
    spent: list[Spend] = []
    if any(b.usd_per_month is not None for b in req.budgets):
        with RunStore(store_url or default_store_url(), create=False) as store:
            spent = [spend(store, req, a, u, now=now) for a, _, u in months]
    lines = []
    for b in sorted(req.budgets, key=lambda b: b.team):
        if b.usd_per_week is not None:
            lines.append(
                _line(
                    b,
                    "week",
                    label_of(k.week),
                    (w0, w1),
                    until=until,
                    usd=week_usd.get(b.team, 0.0),
                    runs=week_runs.top_runs(b.team),
                    tz=tz,
                )
            )
        if b.usd_per_month is not None:
            for (a, e, u), s in zip(months, spent, strict=True):
                lines.append(
                    _line(
                        b,
                        "month",
                        month_label(a, tz),
                        (a, e),
                        until=u,
                        usd=s.by_team.get(b.team, 0.0),
                        runs=s.top_runs(b.team),
                        tz=tz,
                    )
                )
    return tuple(lines)


def current_lines(
    store: Any, req: Any, budgets: Sequence[Budget], *, now: datetime, previous: bool = False
) -> list[BudgetLine]:
    """Each budget's line of the period ``now`` falls in (this week, this month), spend to
    ``now``, and with ``previous`` of the period before, whole: what the service checks against
    the alert levels (spend that lands after a period's last check, or while the service is
    down at its end, is still alerted). Runs whose process died are marked first, as the report
    marks them."""
    tz = req.tz
    mark_crashed(store, now=now)
    w0, m0 = week_start_of(now, tz), month_start_of(now, tz)
    spans = {("week", 0): (w0, shift_week(w0, tz, 1)), ("month", 0): (m0, shift_month(m0, tz, 1))}
    if previous:
        spans |= {
            ("week", -1): (shift_week(w0, tz, -1), w0),
            ("month", -1): (shift_month(m0, tz, -1), m0),
        }
    wanted = {p for b in budgets for p, _ in b.amounts()}
    keys = sorted((k for k in spans if k[0] in wanted), key=lambda k: (k[1], PERIODS.index(k[0])))
    spent = {k: spend(store, req, spans[k][0], min(spans[k][1], now), now=now) for k in keys}

    def label(k: tuple[str, int]) -> str:
        return label_of(spans[k][0]) if k[0] == "week" else month_label(spans[k][0], tz)

    return [
        _line(
            b,
            k[0],
            label(k),
            spans[k],
            until=min(spans[k][1], now),
            usd=spent[k].by_team.get(b.team, 0.0),
            runs=spent[k].top_runs(b.team),
            tz=tz,
        )
        for b in sorted(budgets, key=lambda b: b.team)
        for k in keys
        if k[0] in dict(b.amounts())
    ]


def period_lines(
    store: Any,
    req: Any,
    budgets: Sequence[Budget],
    period: str,
    start: datetime,
    *,
    now: datetime,
) -> list[BudgetLine]:
    """Each budget's line of one chosen period: the ISO week or the calendar month (``period``,
    one of :data:`reports.kpi.budgets.PERIODS`) that begins at ``start`` in ``req.tz``, its
    spend to the period's end, or to ``now`` for a period under way, priced by :func:`spend` as
    the report prices it; only the budgets with an amount for that period. Runs whose process
    died are marked first, as the report marks them.

    Args:
        store: An open :class:`tracker.store.RunStore`.
        req: The prices, owned GPUs, basis and time zone (a :class:`reports.request.Request`).
        budgets: The teams' budgets.
        period: ``week`` or ``month``.
        start: The period's start (Monday 00:00, or the 1st 00:00, in ``req.tz``).
        now: The current time (timezone-aware).

    Returns:
        The lines, by team.
    """
    if period not in PERIODS:
        raise ValueError(f"period {period!r}: expected one of {PERIODS}")
    tz = req.tz
    wanted = sorted((b for b in budgets if period in dict(b.amounts())), key=lambda b: b.team)
    if not wanted:
        return []
    mark_crashed(store, now=now)
    week = period == "week"
    end = shift_week(start, tz, 1) if week else shift_month(start, tz, 1)
    until = min(end, now)
    spent = spend(store, req, start, until, now=now)
    label = label_of(start) if week else month_label(start, tz)
    return [
        _line(
            b,
            period,
            label,
            (start, end),
            until=until,
            usd=spent.by_team.get(b.team, 0.0),
            runs=spent.top_runs(b.team),
            tz=tz,
        )
        for b in wanted
    ]
