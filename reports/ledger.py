"""``gpu-kpi mark``: the date a team changed a recurring job, and what it changed
(``gpu-kpi mark resnet-nightly "loader: 8 workers"``), kept in the run store; the weekly report
measures the job's runs before and after it (:mod:`reports.kpi.savings`). ``--list`` shows the
marks kept."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime

from reports.cli_support import _open_store, _settings, printable


def _at(value: str | None, tz: str, now: datetime) -> datetime:
    """``--at``: a date (its 00:00) or a date and time, in ``tz``; None: now."""
    from reports.errors import UsageError
    from reports.weeks import zone

    if value is None:
        return now
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--at: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM, got {value!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone(tz))


def cmd_mark(args: argparse.Namespace) -> int:
    from reports.data.marks import add_mark, read_marks
    from reports.errors import UsageError
    from reports.weeks import zone

    settings = _settings(args)
    now = datetime.now(UTC)
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
    if args.key is None or args.note is None:
        raise UsageError('mark needs a job key and a note: gpu-kpi mark KEY "what changed"')
    at = _at(args.at, args.tz, now)
    if at > now:
        raise UsageError(f"--at {args.at}: in the future; mark a change once it is made")
    try:
        with _open_store(settings.store, create=False) as store:
            m = add_mark(store, args.key, args.note, at=at, now=now)
    except ValueError as e:
        raise UsageError(str(e)) from None
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
