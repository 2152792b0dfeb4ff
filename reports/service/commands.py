"""The service's subcommands, ``gpu-kpi send`` and ``gpu-kpi serve``: their flags and what they
print. ``reports.cli`` adds them to its parser; nothing here runs at import time."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

AddCommand = Callable[..., argparse.ArgumentParser]

SEND_TIMEOUT_S = 60.0
"""How long ``gpu-kpi send`` tries, retries included, unless ``--timeout`` says otherwise."""


def _service_settings(args: argparse.Namespace) -> Any:
    from reports.service.config import load_service_settings

    return load_service_settings(getattr(args, "config", None), store=getattr(args, "store", None))


def cmd_send(args: argparse.Namespace) -> int:
    from reports.errors import UsageError
    from reports.service.config import parse_address
    from reports.service.job import Service
    from reports.weeks import parse_week

    parse_week(args.week)
    if args.team and args.user:
        raise UsageError("--team and --user: one report at a time (a team's, or a user's runs)")
    if args.kind == "summary" and (args.team or args.user):  # --team T alone means a team's
        args.kind = "team" if args.team else "runs"
    for addr in args.to:
        try:
            parse_address(addr)
        except ValueError as e:
            raise UsageError(f"--to: {e}") from None
    service = Service(_service_settings(args))
    from tracker.store import RunStore

    RunStore(service.settings.tracker.store, create=False).close()  # it only reads: none made
    if args.dry_run:
        from reports.errors import writable_dir

        writable_dir(Path(args.out), "--out")
    if (args.kind == "team" and not args.team) or (args.kind == "runs" and not args.user):
        raise UsageError(f"--kind {args.kind} needs --{'team' if args.kind == 'team' else 'user'}")
    from reports.service.send import NothingToSend, send_now

    try:
        path = send_now(
            service,
            args.week,
            args.to,
            kind=args.kind,
            team=args.team,
            user=args.user,
            dry_run=Path(args.out) if args.dry_run else None,
            timeout_s=args.timeout,
            retry=not args.no_retry,
            now=args.now,
        )
    except NothingToSend as e:
        print(f"gpu-kpi: nothing sent: {e}", file=sys.stderr)
        return 1
    what = {"team": f" (team {args.team})", "runs": f" (runs of {args.user})"}.get(args.kind, "")
    if path is not None:
        print(f"dry run: {path} (not sent)")
    else:
        smtp = service.settings.smtp
        print(
            f"sent {args.week}{what} to {', '.join(args.to)} via {smtp.host}:{smtp.effective_port}"
        )
    return 0


def config_warnings(settings: Any) -> list[str]:
    """What a valid config probably did not mean: nobody to send to; mail to send through the
    built-in SMTP default (no ``[smtp]`` table)."""
    from reports.service.mailer import SmtpSettings

    out = []
    if not settings.recipients:
        out.append("no [[recipients]]: the weekly job archives the report and sends it to nobody")
    elif any(r.to is not None for r in settings.recipients) and settings.smtp == SmtpSettings():
        smtp = settings.smtp
        out.append(
            f"no [smtp] table: mail goes through the built-in default, {smtp.host}:"
            f"{smtp.effective_port} ({smtp.security}), from {smtp.sender}"
        )
    return out


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    from reports.service.config import check_service_settings, read_service_settings

    settings, errors = read_service_settings(args.config, store=args.store)
    if args.check_config:
        errors += check_service_settings(settings) if not errors else []
        for e in errors:
            print(f"gpu-kpi: config error: {e}", file=sys.stderr)
        if errors:
            return 2
        from reports.service.scheduler import next_fire_time

        for w in config_warnings(settings):
            print(f"gpu-kpi: config warning: {w}", file=sys.stderr)
        nxt = next_fire_time(settings.schedule, settings.tz, args.now)
        print(
            f"config OK: {len(settings.recipients)} recipient(s), schedule "
            f"{settings.schedule!r} in {settings.timezone} (next: "
            f"{nxt:%Y-%m-%d %H:%M %Z}), SMTP {settings.smtp.host}:"
            f"{settings.smtp.effective_port} ({settings.smtp.security}), archive in "
            f"{settings.out_dir}"
        )
        return 0
    if errors:
        from tracker.config import ConfigError

        raise ConfigError("; ".join(errors))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.once:
        import signal

        from reports.service.serve import run_once

        result, stopped_by = run_once(settings, retry_failed=args.retry_failed)
        for path in result.archived:
            print(path)
        for o in (*result.outcomes, *result.alerts):
            print(
                f"{o.week} {o.kind} {o.recipient}: {o.status}"
                + (f" ({o.error})" if o.error else "")
            )
        for week in result.weeks:
            if not result.owed.get(week):
                print(nothing_owed(week, result.earlier.get(week, {}), len(settings.recipients)))
        if stopped_by is not None:
            from reports.service.job import STOPPED

            left = sum(o.error == STOPPED for o in result.outcomes)
            print(
                f"gpu-kpi: stopped by {stopped_by}: {result.count('sent')} sent, {left} not "
                f"tried and left owed (the next run sends them)",
                file=sys.stderr,
            )
            return 128 + signal.Signals[stopped_by].value
        alerts_failed = any(o.status in ("failed", "deferred") for o in result.alerts)
        return (
            1 if result.errors or result.count("failed") or result.deferred or alerts_failed else 0
        )
    from reports.service.serve import serve_forever

    return serve_forever(settings, retry_failed=args.retry_failed)


def nothing_owed(week: str, earlier: Mapping[str, int], recipients: int) -> str:
    """The line ``serve --once`` prints for a week it owed nobody, from the log's counts of the
    recipients' earlier deliveries (status → recipients)."""
    if not recipients:
        return f"{week}: archived; no recipients configured"
    line = f"{week}: already delivered to {earlier.get('sent', 0)} recipient(s)"
    if earlier.get("empty"):
        line += f", {earlier['empty']} with nothing to send"
    if earlier.get("failed"):
        line += f", {earlier['failed']} failed (serve --retry-failed tries again)"
    return line + "; nothing owed"


def _seconds(value: str) -> float:
    try:
        s = float(value)
    except ValueError:
        s = float("nan")
    if not s > 0 or s == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {value!r}")
    return s


def add_service_commands(add: AddCommand) -> None:
    """Adds ``send`` and ``serve`` through ``reports.cli``'s ``add``."""
    send = add(
        "send",
        cmd_send,
        "mail one week's report now (outside the schedule); the SMTP "
        "settings come from the config file, the password from $GPU_KPI_SMTP_PASSWORD "
        "or smtp.password_file, never from the command line",
    )
    send.add_argument("--week", required=True, metavar="YYYY-Www", help="ISO week")
    send.add_argument(
        "--to", required=True, action="append", metavar="ADDR", help="recipient (repeat for more)"
    )
    send.add_argument(
        "--kind",
        choices=("summary", "team", "runs"),
        default="summary",
        help="the whole week's report (default), one team's (--team), or one "
        "engineer's underutilized runs (--user), as the service sends them",
    )
    send.add_argument("--team", metavar="TEAM", help="the team of --kind team (implies it)")
    send.add_argument("--user", metavar="USER", help="the user of --kind runs (implies it)")
    send.add_argument(
        "--dry-run", action="store_true", help="write <out>/<week>.eml instead of sending"
    )
    send.add_argument(
        "--out",
        default="reports-out",
        metavar="DIR",
        help="where --dry-run writes (default ./reports-out)",
    )
    send.add_argument(
        "--timeout",
        type=_seconds,
        default=SEND_TIMEOUT_S,
        metavar="SECONDS",
        help="give up after this long, retries and their waits included "
        f"(default {SEND_TIMEOUT_S:g})",
    )
    send.add_argument(
        "--no-retry", action="store_true", help="one attempt only, none of smtp.retries"
    )

    serve = add(
        "serve",
        cmd_serve,
        "the scheduled service: every week (default Monday 08:00 "
        "in the report time zone) archive the last week's report and mail it to the "
        "configured recipients, once each",
    )
    serve.add_argument(
        "--once",
        action="store_true",
        help="run the job now (build, archive, deliver what is owed) and exit",
    )
    serve.add_argument(
        "--check-config",
        action="store_true",
        help="validate the config and exit: every error with its key",
    )
    serve.add_argument(
        "--retry-failed",
        action="store_true",
        help="run the job now and send again the deliveries that failed for good "
        "in the catch-up window (those that failed for a fault of the [smtp] "
        "settings are tried again anyway once the settings change)",
    )
