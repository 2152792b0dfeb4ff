"""``gpu-kpi runs``: the stored runs, filtered, as a table, JSON or CSV (``--format json`` is
what other tools call ``--json``; both are accepted); ``gpu-kpi chargeback``, the CSV for
finance; ``gpu-kpi budgets``, the teams' spend so far against their budgets."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any

from reports.cli_support import _open_store, _report_section, _settings, printable
from tracker.owned import OwnedGpu
from tracker.peaks import mfu_cell
from tracker.record import RunRecord

STATUSES = ("running", "finished", "failed", "crashed")

# -- output -------------------------------------------------------------------------------------
RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("started", "started_at"),
    ("name", "name"),
    ("team", "team"),
    ("project", "project"),
    ("gpus", "gpus"),
    ("gpu_h", "gpu_hours"),
    ("util_%", "util_pct"),
    ("mfu", "mfu"),
    ("cost_$", "cost_usd"),
    ("waste_$", "waste_usd"),
    ("status", "status"),
    ("verdict", "verdict"),
)


def _cell(r: RunRecord, field: str, tz: tzinfo = UTC) -> str:
    try:
        return _formatted(r, field, tz)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return str(getattr(r, field, "?"))  # a value as stored, e.g. text in a number column


def _formatted(r: RunRecord, field: str, tz: tzinfo = UTC) -> str:
    if field == "gpus":
        if not r.gpu_count:
            return "-"
        mig = f" MIG {r.mig_profile}" if r.mig_profile else ""
        shared = " time-sliced" if r.gpu_split else ""
        return f"{r.gpu_count}x{r.gpu_model}{mig}{shared}"
    if field == "started_at":
        return r.started_at.astimezone(tz).strftime("%Y-%m-%d %H:%M")
    if field == "mfu":  # with its peak and dtype, or why there is none
        return mfu_cell(r)
    value = getattr(r, field)
    if value is None:
        return "n/a"
    if field == "gpu_hours":
        return f"{value:.2f}"
    if field == "util_pct":
        return f"{value:.0f}"
    if field in ("cost_usd", "waste_usd"):
        return f"{value:,.2f}"
    return str(value)


def format_runs(runs: Sequence[RunRecord], tz: tzinfo = UTC) -> str:
    """A fixed-width table, one run a line, its start in ``tz`` (named in the header, where
    it is not UTC: ``started (Europe/Berlin)``)."""
    head = [h for h, _ in RUN_COLUMNS]
    if tz is not UTC:
        head[0] = f"started ({tz})"
    table = [head] + [[printable(_cell(r, f, tz)) for _, f in RUN_COLUMNS] for r in runs]
    widths = [max(len(row[i]) for row in table) for i in range(len(RUN_COLUMNS))]
    right = {"gpu_h", "util_%", "cost_$", "waste_$"}
    lines = []
    for row in table:
        cells = [
            c.rjust(w) if h in right else c.ljust(w)
            for c, w, (h, _) in zip(row, widths, RUN_COLUMNS, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def priced_as_reported(
    r: RunRecord, overrides: Mapping[str, float], owned: Mapping[str, OwnedGpu]
) -> RunRecord:
    """``r`` with the price the reports charge it (:func:`tracker.prices.reported_price`: an
    owned model at its amortized rate, say) and its cost, waste and idle dollars at that price
    (each is GPU-time × price, so they scale with it); as stored when the prices agree. A run
    that failed or crashed has no waste or idle dollars: its GPU-time is the ledger's failed
    work (:func:`reports.kpi.ledger.failed_work`), as the report counts it."""
    from reports.rows import failed_state

    priced = _priced(r, overrides, owned)
    if failed_state(priced.status) and (priced.waste_usd or priced.idle_usd):
        return dataclasses.replace(priced, waste_usd=0.0, idle_usd=0.0)
    return priced


def _priced(
    r: RunRecord, overrides: Mapping[str, float], owned: Mapping[str, OwnedGpu]
) -> RunRecord:
    """:func:`priced_as_reported`'s price and dollars."""
    from tracker.prices import OWNED_SOURCE, reported_price

    try:
        price, owned_gpu = reported_price(
            r.gpu_model, r.price_per_gpu_hour, r.price_source, overrides, owned
        )
    except (ArithmeticError, ValueError, TypeError):  # a bad [owned] or a bad stored value
        return r
    was = r.price_per_gpu_hour
    if price is None or (was is not None and math.isclose(price, was)):
        return r
    if was is not None and was > 0:
        scale = price / was

        def at_price(usd: float | None) -> float | None:
            return None if usd is None else usd * scale

        cost, waste, idle = at_price(r.cost_usd), at_price(r.waste_usd), at_price(r.idle_usd)
    else:  # priced only now: the spend is GPU-hours × price; waste needs the GPUs' minutes
        cost, waste, idle = (r.gpu_hours or 0.0) * price, None, None
    return dataclasses.replace(
        r,
        price_per_gpu_hour=price,
        price_source=OWNED_SOURCE if owned_gpu else r.price_source or "table",
        cost_usd=cost,
        waste_usd=waste,
        idle_usd=idle,
    )


def _record_json(r: RunRecord) -> dict[str, Any]:
    d = r.as_dict()
    for k in ("started_at", "ended_at", "heartbeat_at"):
        d[k] = d[k].isoformat() if isinstance(d[k], datetime) else d[k]
    d["tags"] = list(d["tags"])
    for k, v in d.items():  # text the store holds as bytes
        if isinstance(v, bytes):
            d[k] = v.decode("utf-8", errors="replace")
    return d


def _when(value: str, tz: str, *, end: bool) -> datetime:
    """``--since``/``--until``: an ISO week (its Monday 00:00, or the next Monday's for
    ``--until``), a date or a date and time, in ``tz``."""
    from reports.errors import UsageError
    from reports.weeks import WeekError, parse_moment, zone

    try:
        return parse_moment(value, zone(tz), end=end)
    except WeekError as e:
        raise UsageError(f"--{'until' if end else 'since'}: {e}") from None


def cmd_runs(args: argparse.Namespace) -> int:
    from reports.data.scans import SampleScans, mark_crashed
    from reports.errors import UsageError
    from reports.weeks import parse_week, week_bounds, zone

    if args.week and (args.since or args.until):
        raise UsageError("--week is one week; --since/--until a range: not both")
    tz = zone(args.tz)  # an unknown zone is an error whether a range needs it or not
    since = until = None
    if args.week:
        since, until = week_bounds(*parse_week(args.week), zone(args.tz))
    if args.since:
        since = _when(args.since, args.tz, end=False)
    if args.until:
        until = _when(args.until, args.tz, end=True)
    if since is not None and until is not None and until <= since:
        raise UsageError(
            f"--until ({until:%Y-%m-%d %H:%M}) is not after --since ({since:%Y-%m-%d %H:%M})"
        )
    settings = _settings(args)
    with _open_store(settings.store, create=False) as store:
        mark_crashed(store, now=args.now)  # a read-only store: a warning
        # row by row: a row that cannot be read is named, not a traceback for every run
        runs, unreadable = SampleScans(store).read_runs(since=since, until=until)
    runs = [
        r
        for r in runs
        if args.project in (None, r.project)
        and args.team in (None, r.team)
        and args.user in (None, r.user)
        and args.status in (None, r.status)
    ]
    runs = [priced_as_reported(r, settings.prices, settings.owned) for r in runs]
    runs.sort(key=lambda r: r.started_at, reverse=True)  # the newest first
    if args.limit is not None:
        runs = runs[: args.limit]
    if unreadable:
        print(
            printable(
                f"gpu-kpi: {len(unreadable)} run(s) could not be read: "
                + "; ".join(f"{u.run_id} ({u.reason})" for u in unreadable[:5])
            ),
            file=sys.stderr,
        )
    if args.format == "json":
        print(json.dumps([_record_json(r) for r in runs], indent=2, default=str))
    elif args.format == "csv":
        from reports.render.csvsafe import safe_cell

        rows = [_record_json(r) for r in runs]
        # the default dialect ends lines with CRLF, so a cell holding a CR is quoted
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["id"])
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    k: safe_cell(json.dumps(v, default=str) if isinstance(v, list | dict) else v)
                    for k, v in row.items()
                }
            )
    else:
        print(
            format_runs(runs, tz) if runs else "no runs" + (f" in {args.week}" if args.week else "")
        )
    return 0


def _limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return n


def add_runs_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    runs = add("runs", cmd_runs, "list tracked runs, the newest first")
    runs.add_argument("--week", metavar="YYYY-Www", help="only runs overlapping this ISO week")
    runs.add_argument(
        "--since",
        metavar="WHEN",
        help="only runs still going at or after WHEN: "
        "YYYY-Www (its Monday), YYYY-MM-DD or YYYY-MM-DDTHH:MM, in --tz",
    )
    runs.add_argument(
        "--until",
        metavar="WHEN",
        help="only runs started before WHEN (a week or a day: before its end)",
    )
    runs.add_argument(
        "--tz",
        default="UTC",
        help="time zone of --week/--since/--until and of the start times shown (default UTC)",
    )
    runs.add_argument("--project")
    runs.add_argument("--team")
    runs.add_argument("--user")
    runs.add_argument("--status", choices=STATUSES)
    runs.add_argument("--limit", type=_limit, metavar="N", help="the N newest only")
    runs.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="table (default), json (what other tools call --json) or csv",
    )
    runs.add_argument(
        "--json",
        dest="format",
        action="store_const",
        const="json",
        help="the same as --format json",
    )


MAX_WEEKS = 520


def cmd_chargeback(args: argparse.Namespace) -> int:
    """``gpu-kpi chargeback``: the wide CSV for finance, week by week over a range."""
    import dataclasses
    from pathlib import Path

    from reports.build import scheduler_weeks, week_kpis, week_of_scheduler
    from reports.errors import UsageError
    from reports.gputime import week_gpu_time
    from reports.kpi.chargeback import ALLOCATION_COLUMNS, COLUMNS, chargeback_rows
    from reports.render.csvsafe import safe_cell
    from reports.request import Request, resolve_week
    from reports.userfiles import check_file, write_file
    from reports.weeks import label_of, parse_week, shift_week, week_bounds, zone
    from tracker.store import RunStore

    if args.out:  # a folder, a link to nothing: said before any work
        check_file(Path(args.out), flag="--out")
    section = _report_section(args)  # the report's own time zone and basis, as in report
    args.tz = args.tz or section.get("timezone", "UTC")
    args.basis = args.basis or section.get("basis", "util")
    tz = zone(args.tz)
    now = args.now
    first = week_bounds(*parse_week(args.since), tz)[0]
    last = resolve_week(args.until, tz, now)
    weeks = [first]
    while weeks[-1] < last and len(weeks) <= MAX_WEEKS:
        weeks.append(shift_week(weeks[-1], tz, 1))
    if first > last:
        raise UsageError(f"--since {args.since} is after --until {label_of(last)}")
    if len(weeks) > MAX_WEEKS:
        raise UsageError(f"--since {args.since}: at most {MAX_WEEKS} weeks at once")
    settings = _settings(args)
    req = Request.from_settings(settings, week=label_of(last), tz=tz, basis=args.basis)
    runs, gt, _ = week_gpu_time(
        settings.store,
        last,
        tz=tz,
        weeks=len(weeks),
        basis=args.basis,
        thresholds=req.thresholds,
        now=now,
    )
    rows = []
    weeks_kpis = []
    with RunStore(settings.store) as store:
        scheduler = scheduler_weeks(store, req, runs, weeks, now=now)
        for start in weeks:
            k = week_kpis(req, runs, gt, start, trend_weeks=1, scheduler=scheduler, now=now)
            k = dataclasses.replace(k, allocations=week_of_scheduler(scheduler, start))
            weeks_kpis.append(k)
            rows += chargeback_rows(k, label_of(start))
    text = io.StringIO(newline="")
    allocated = any(k.allocations is not None for k in weeks_kpis)
    writer = csv.DictWriter(text, fieldnames=[*COLUMNS, *(ALLOCATION_COLUMNS if allocated else ())])
    writer.writeheader()
    for row in rows:  # a team named "=cmd|..." stays text in a spreadsheet
        writer.writerow({k: safe_cell(v) if isinstance(v, str) else v for k, v in row.items()})
    if args.out:  # a file whole or not at all; a FIFO or a device in place
        write_file(Path(args.out), text.getvalue().encode(), flag="--out")
    else:
        sys.stdout.write(text.getvalue())
    if args.out:
        print(f"{len(rows)} row(s), {len(weeks)} week(s): {args.out}")
    return 0


def add_chargeback_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    cb = add(
        "chargeback",
        cmd_chargeback,
        "a CSV for finance: GPU-hours, spend, waste and idle "
        "per (week, team, project, GPU model), as the weekly report counts them; with Slurm "
        "jobs or Kubernetes pods imported, each team's allocated dollars split into "
        "productive, allocated-idle and allocated with no samples",
    )
    cb.add_argument("--since", required=True, metavar="YYYY-Www", help="the first week")
    cb.add_argument(
        "--until", metavar="YYYY-Www", help="the last week (default: the last complete week)"
    )
    cb.add_argument("--tz", help="the weeks' time zone (default: [report] timezone, else UTC)")
    cb.add_argument(
        "--basis",
        choices=("util", "sm_active"),
        help="utilization basis (default: [report] basis, else util)",
    )
    cb.add_argument("--out", metavar="FILE", help="write here (default: standard output)")


def _month_start(text: str, tz: Any, now: datetime) -> datetime:
    """The 1st 00:00 in ``tz`` of ``--month YYYY-MM``; a malformed month is a
    :class:`UsageError`, one that has not started a :class:`ReportError`."""
    import re

    from reports.errors import ReportError, UsageError
    from reports.weeks import month_start_of
    from tracker.units import FIRST_YEAR, LAST_YEAR

    m = re.fullmatch(r"([0-9]{4})-([0-9]{2})", text.strip())
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise UsageError(f"--month {text!r}: expected YYYY-MM, e.g. 2026-11")
    year, month = int(m.group(1)), int(m.group(2))
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise UsageError(f"--month {text!r} is out of range: years {FIRST_YEAR}–{LAST_YEAR}")
    start = month_start_of(datetime(year, month, 1, 12, tzinfo=tz), tz)
    if start > now:
        raise ReportError(f"month {text.strip()} has not started yet")
    return start


def cmd_budgets(args: argparse.Namespace) -> int:
    """``gpu-kpi budgets``: each team's spend so far this week and month against its budget,
    as the service checks it for alerts; with ``--week`` or ``--month``, the lines of that
    period instead, its spend to the period's end (to now for one under way), as the weekly
    report counts it."""
    from reports.errors import UsageError
    from reports.render.fmt import budget_row
    from reports.request import Request, resolve_week
    from reports.weeks import zone

    if args.week is not None and args.month is not None:
        raise UsageError("--week is one ISO week, --month one calendar month: not both")
    section = _report_section(args)
    if not section["budgets"]:
        raise UsageError(
            "no budgets: add [[budgets]] (team, usd_per_week or usd_per_month) to the config file"
        )
    now = args.now
    tz = zone(section.get("timezone", "UTC"))
    chosen: tuple[str, datetime] | None = None
    if args.week is not None:
        chosen = ("week", resolve_week(args.week, tz, now))
    elif args.month is not None:
        chosen = ("month", _month_start(args.month, tz, now))
    if chosen is not None and not any(chosen[0] in dict(b.amounts()) for b in section["budgets"]):
        flag, other = ("week", "month") if chosen[0] == "week" else ("month", "week")
        raise UsageError(
            f"--{flag}: no [[budgets]] entry has usd_per_{flag} (--{other} shows usd_per_{other})"
        )
    settings = _settings(args)
    basis = section.get("basis", "util")
    req = Request.from_settings(settings, week=None, tz=tz, basis=basis)
    with _open_store(settings.store, create=False) as store:
        if chosen is None:
            from reports.budgets import current_lines

            lines = current_lines(store, req, section["budgets"], now=now)
        else:
            from reports.budgets import period_lines

            lines = period_lines(store, req, section["budgets"], *chosen, now=now)
    if args.format == "json":
        json.dump([b.as_dict() for b in lines], sys.stdout, indent=2, ensure_ascii=False)
        print()
        return 0
    rows = [budget_row(b) for b in lines]
    table = [
        ("team", "period", "spend", "budget", "used", "forecast", "status"),
        *(
            (
                printable(r["team"]),
                r["period"],
                r["spend"],
                r["budget"],
                r["used"],
                r["forecast"],
                r["status"],
            )
            for r in rows
        ),
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def add_budgets_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    b = add(
        "budgets",
        cmd_budgets,
        "each team's spend so far this week and month against its "
        "[[budgets]], with the forecast for the period; or of one week or month",
    )
    b.add_argument(
        "--week",
        metavar="YYYY-Www",
        help="the weekly budgets' lines of this ISO week, or 'current' (the week so far), "
        "as the week's report counts them; in the [report] timezone",
    )
    b.add_argument(
        "--month",
        metavar="YYYY-MM",
        help="the monthly budgets' lines of this calendar month (so far, for this month)",
    )
    b.add_argument("--format", choices=("table", "json"), default="table")
    b.add_argument(
        "--json", dest="format", action="store_const", const="json", help="same as --format json"
    )
