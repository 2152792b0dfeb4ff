"""The service's subcommands, ``gpu-kpi send`` and ``gpu-kpi serve``: their flags and what they
print. ``reports.cli`` adds them to its parser; nothing here runs at import time."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

AddCommand = Callable[..., argparse.ArgumentParser]


def _service_settings(args: argparse.Namespace) -> Any:
    from reports.service.config import load_service_settings

    return load_service_settings(getattr(args, "config", None), store=getattr(args, "store", None))


def cmd_send(args: argparse.Namespace) -> int:
    from reports.errors import UsageError
    from reports.service.config import parse_address
    from reports.service.job import Service
    from reports.weeks import parse_week

    parse_week(args.week)
    for addr in args.to:
        try:
            parse_address(addr)
        except ValueError as e:
            raise UsageError(f"--to: {e}") from None
    service = Service(_service_settings(args))
    path = service.send(args.week, args.to, dry_run=Path(args.out) if args.dry_run else None)
    if path is not None:
        print(f"dry run: {path} (not sent)")
    else:
        smtp = service.settings.smtp
        print(f"sent {args.week} to {', '.join(args.to)} via {smtp.host}:{smtp.effective_port}")
    return 0


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

        nxt = next_fire_time(settings.schedule, settings.tz, datetime.now(UTC))
        print(f"config OK: {len(settings.recipients)} recipient(s), schedule "
              f"{settings.schedule!r} in {settings.timezone} (next: "
              f"{nxt:%Y-%m-%d %H:%M %Z}), SMTP {settings.smtp.host}:"
              f"{settings.smtp.effective_port} ({settings.smtp.security}), archive in "
              f"{settings.out_dir}")
        return 0
    if errors:
        from tracker.config import ConfigError

        raise ConfigError("; ".join(errors))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.once:
        from reports.service.job import Service

        result = Service(settings).run()
        for path in result.archived:
            print(path)
        for o in result.outcomes:
            print(f"{o.week} {o.kind} {o.recipient}: {o.status}" + (f" ({o.error})" if o.error else ""))
        return 1 if result.errors or result.count("failed") or result.deferred else 0
    from reports.service.serve import serve_forever

    return serve_forever(settings)


def add_service_commands(add: AddCommand) -> None:
    """Adds ``send`` and ``serve`` through ``reports.cli``'s ``add``."""
    send = add("send", cmd_send, "mail one week's report now (outside the schedule); the SMTP "
               "settings come from the config file, the password from $GPU_KPI_SMTP_PASSWORD "
               "or smtp.password_file, never from the command line")
    send.add_argument("--week", required=True, metavar="YYYY-Www", help="ISO week")
    send.add_argument("--to", required=True, action="append", metavar="ADDR",
                      help="recipient (repeat for more)")
    send.add_argument("--dry-run", action="store_true",
                      help="write <out>/<week>.eml instead of sending")
    send.add_argument("--out", default="reports-out", metavar="DIR",
                      help="where --dry-run writes (default ./reports-out)")

    serve = add("serve", cmd_serve, "the scheduled service: every week (default Monday 08:00 "
                "in the report time zone) archive the last week's report and mail it to the "
                "configured recipients, once each")
    serve.add_argument("--once", action="store_true",
                       help="run the job now (build, archive, deliver what is owed) and exit")
    serve.add_argument("--check-config", action="store_true",
                       help="validate the config and exit: every error with its key")
