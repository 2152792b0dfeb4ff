"""``gpu-kpi mark``: the date a team changed a recurring job, and what it changed
(``gpu-kpi mark resnet-nightly "loader: 8 workers"``), kept in the run store; the weekly report
measures the job's runs before and after it (:mod:`reports.kpi.savings`). ``--list`` shows the
marks kept, ``--delete`` forgets one; a key no run of the last 26 weeks has is marked with a
warning naming the keys there are."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

from reports.cli_support import _open_store, _settings, printable


def _at(value: str | None, tz: str, now: datetime) -> datetime:
    """``--at``: a date (its 00:00) or a date and time, in ``tz``; None: now."""
    from reports.errors import UsageError
    from reports.weeks import WeekError, parse_moment, zone

    if value is None:
        return now
    try:
        return parse_moment(value, zone(tz), weeks=False)
    except WeekError as e:
        raise UsageError(f"--at: {e}") from None


MAX_KEYS_SHOWN = 20


def _known_keys(store: Any, now: datetime) -> set[str]:
    """The job keys of the runs of the report's savings history (the last
    :data:`reports.kpi.savings.HISTORY_WEEKS` weeks), as the report keys them
    (:func:`reports.kpi.jobkeys.job_key`)."""
    from datetime import timedelta

    from reports.data.scans import SampleScans
    from reports.kpi.jobkeys import job_key
    from reports.kpi.savings import HISTORY_WEEKS

    runs, _ = SampleScans(store).read_runs(since=now - timedelta(weeks=HISTORY_WEEKS), until=now)
    return {job_key(r.name, r.links) for r in runs}


def cmd_mark(args: argparse.Namespace) -> int:
    from reports.data.marks import add_mark, delete_marks, read_marks
    from reports.errors import UsageError
    from reports.weeks import zone

    settings = _settings(args)
    now = args.now
    zone(args.tz)  # an unknown zone is an error whether --at needs it or not
    if args.list:
        if args.note is not None:
            raise UsageError("--list takes a job key at most, not a note")
        with _open_store(settings.store, create=False) as store:
            marks = [m for m in read_marks(store) if args.key in (None, m.job_key)]
        if not marks:
            print("no marks" + (f" for {printable(args.key)!r}" if args.key else ""))
        for m in marks:
            print(printable(f"{m.at.isoformat(' ', 'minutes')[:16]} UTC  {m.job_key}  {m.note}"))
        return 0
    if args.delete:
        if args.key is None or args.note is not None:
            raise UsageError("--delete takes a job key (and --at WHEN for one of its marks)")
        at = _at(args.at, args.tz, now) if args.at else None
        with _open_store(settings.store, create=False) as store:
            gone = delete_marks(store, args.key, at=at)
        if not gone:
            raise UsageError(
                f"no mark of {printable(args.key)!r}"
                + (f" at {args.at}" if args.at else "")
                + " to delete: gpu-kpi mark --list shows them"
            )
        print(printable(f"deleted {gone} mark(s) of {args.key!r}"))
        return 0
    if args.key is None or args.note is None:
        raise UsageError('mark needs a job key and a note: gpu-kpi mark KEY "what changed"')
    at = _at(args.at, args.tz, now)
    if at > now:
        raise UsageError(f"--at {args.at}: in the future; mark a change once it is made")
    try:
        with _open_store(settings.store, create=False) as store:
            m = add_mark(store, args.key, args.note, at=at, now=now)
            known = _known_keys(store, now)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if m.job_key not in known:
        from reports.kpi.savings import HISTORY_WEEKS

        shown = ", ".join(sorted(known)[:MAX_KEYS_SHOWN]) or "none"
        more = f" and {len(known) - MAX_KEYS_SHOWN} more" if len(known) > MAX_KEYS_SHOWN else ""
        print(
            printable(
                f"gpu-kpi: warning: no run of the last {HISTORY_WEEKS} weeks has the job key "
                f"{m.job_key!r}: the report compares the runs of the key a run recorded (its "
                f"name without run number or date); the keys: {shown}{more}"
            ),
            file=sys.stderr,
        )
    print(
        printable(
            f"marked {m.job_key!r} from {m.at:%Y-%m-%d %H:%M} UTC: {m.note} "
            "(the weekly report compares its runs before and after)"
        )
    )
    return 0


def add_mark_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    mark = add(
        "mark",
        cmd_mark,
        "mark the date a recurring job was changed (KEY as the report's recurring jobs show "
        'it, NOTE what changed: gpu-kpi mark resnet-nightly "loader: 8 workers"); the weekly '
        "report compares its runs before and after, in dollars",
    )
    mark.add_argument("key", nargs="?", metavar="KEY", help="the job key")
    mark.add_argument("note", nargs="?", metavar="NOTE", help="what changed, one line")
    mark.add_argument(
        "--at",
        metavar="WHEN",
        help="when the change took effect: YYYY-MM-DD or YYYY-MM-DDTHH:MM in --tz "
        "(default: now); runs that started from then on are after it",
    )
    mark.add_argument("--tz", default="UTC", help="time zone of --at (default UTC)")
    mark.add_argument(
        "--list", action="store_true", help="show the marks kept (of KEY, when given)"
    )
    mark.add_argument(
        "--delete",
        action="store_true",
        help="forget KEY's marks (the one at --at WHEN alone, to the minute --list shows)",
    )
