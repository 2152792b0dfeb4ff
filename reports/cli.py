"""The ``gpu-kpi`` command line. Subcommands import what they need when they run, so
``gpu-kpi --help`` pays for no framework, pandas or database driver."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from reports.cli_support import _open_store, _report_section, _settings, printable
from reports.errors import UsageError, writable_dir
from tracker.extras import install_hint
from tracker.text import one_line
from tracker.units import WHOLE_S_PER_HOUR

if TYPE_CHECKING:
    pass


def _user_errors() -> tuple[type[BaseException], ...]:
    """Our own exception types that mean bad input or an unreachable service, not a bug."""
    from reports.errors import ImportFailed, ReportError
    from reports.weeks import WeekError
    from tracker.config import ConfigError
    from tracker.gpu import BackendError
    from tracker.prices import UnknownGpu

    errors: list[type[BaseException]] = [
        UsageError,
        BackendError,
        ConfigError,
        UnknownGpu,
        WeekError,
        ReportError,
        ImportFailed,
    ]
    # a store or mail error can only come from a module that was loaded: importing them here
    # for nothing would cost a bad flag's answer the time it takes to load SQLAlchemy
    store = sys.modules.get("tracker.store.engine")
    if store is not None:
        errors.append(store.StoreError)
    mailer = sys.modules.get("reports.service.mailer")
    if mailer is not None:
        errors.append(mailer.MailError)
    return tuple(errors)


def _shown_url(url: str | None) -> str:
    """``url`` with any password masked, for printing; None: the default store's URL (what
    a command without ``--store`` or ``GPU_KPI_STORE`` wrote to)."""
    from tracker.store import default_store_url
    from tracker.store.engine import mask_text

    return mask_text(url or default_store_url(), None)


# -- output -------------------------------------------------------------------------------------
# -- subcommands -------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from reports.request import CURRENT, Request, parse_formats
    from reports.weeks import parse_week, zone

    # what the flags say is checked first: a bad one is answered before anything heavy loads
    if args.week and (args.since or args.all):
        raise UsageError("--week is one week; --since/--all archive every missing week: not both")
    if args.since == CURRENT:
        raise UsageError(
            "--since takes a complete week (YYYY-Www); --week current is the week so far"
        )
    for week in (args.week, args.since):
        if week and week != CURRENT:
            parse_week(week)  # a bad week is an error before the store is touched
    formats = parse_formats(args.format)
    if args.tz:
        zone(args.tz)
    settings = _settings(args)
    section = _report_section(args)  # [report]: what a flag does not say
    args.tz = args.tz or section.get("timezone", "UTC")
    args.out = args.out or section.get("out_dir", "reports-out")
    args.basis = args.basis or section.get("basis", "util")
    req = Request.from_settings(
        settings,
        week=args.week,
        tz=zone(args.tz),
        formats=formats,
        basis=args.basis,
        report_url=args.report_url or section.get("report_url"),
        budgets=section["budgets"],
    )
    from reports.build import backfill, build

    _open_store(settings.store, create=False).close()
    if args.since or args.all:
        written = backfill(
            settings.store,
            req,
            Path(args.out).expanduser(),
            since=args.since,
            say=_progress(),
            now=args.now,
        )
    else:
        written = build(settings.store, req, Path(args.out).expanduser(), now=args.now)
    for path in written:
        print(path)
    return 0


def cmd_prices(args: argparse.Namespace) -> int:
    from reports.price_list import format_price_lines, price_lines

    settings = _settings(args)
    lines = price_lines(settings.prices, settings.owned, args.gpu)
    print(format_price_lines(lines, args.format))
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    """Each store's spooled records to that store; ``--store`` (or the configured store) also
    takes the records spooled before spools were kept per store."""
    from tracker.store import RunStore
    from tracker.store.spool import Spool

    results = Spool().flush_all(RunStore, default_url=_settings(args).store)
    if not results:
        print("nothing spooled")
    for r in results:
        print(
            printable(
                f"sent {r.sent} spooled record(s) to {r.url}; {r.left} left"
                + (f" ({r.error})" if r.error else "")
            )
        )
    return 1 if any(r.left for r in results) else 0


def cmd_store(args: argparse.Namespace) -> int:
    """``store rebuild-rollups``: every hourly rollup recomputed from the minute rows (and a
    version 1 store migrated), after rows were loaded or repaired behind the store's back."""
    import time

    began = time.perf_counter()
    with _open_store(_settings(args).store, create=False) as store:
        written = store.rebuild_rollups()
        print(
            f"rebuilt {written:,} hourly rollups of {store.url} in "
            f"{time.perf_counter() - began:.1f} s"
        )
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """``import SOURCE PATH...``: the runs and minute samples into the store, all or nothing;
    the runs printed as ``gpu-kpi runs`` prints them, the skipped ones named."""
    from reports.imports.commands import run_import

    settings = _settings(args)
    if args.source == "slurm":
        return _import_slurm(args, settings)
    if args.source == "kubernetes":
        return _import_kubernetes(args, settings)
    done = run_import(args, settings)
    if done.records:
        from reports.listing import format_runs

        print(format_runs(done.records))
    from reports.imports.play import REMEDIES

    for why, names in done.skipped.items():
        print(f"skipped {len(names)} run(s), {why}: {printable(', '.join(names))}")
        if why in REMEDIES:
            print(f"  to import them, run the import again with {REMEDIES[why]}")
    for note in done.notes:
        print(printable(note))
    if done.replaced:
        print(
            f"replaced {len(done.replaced)} earlier import(s) whole (--replace): "
            f"{printable(', '.join(done.replaced))}"
        )
    hours = sum(r.gpu_hours or 0.0 for r in done.records)
    print(
        f"imported {len(done.records)} run(s), {hours:,.1f} GPU-h, {len(done.samples):,} minute "
        f"rows into {_shown_url(settings.store)}"
    )
    return 0


def _said_skipped(unreadable: Sequence[Any], jobs: Sequence[Any], what: str) -> float:
    """Print the first 20 rows an allocation import left out (and how many more ``what``);
    return the GPU-hours its jobs held."""
    for u in unreadable[:20]:
        print(printable(f"skipped {u.where}: {u.reason}"))
    if len(unreadable) > 20:
        print(f"skipped {len(unreadable) - 20} more {what}")
    return sum(a.gpus * (a.until - a.start_at).total_seconds() for a in jobs) / WHOLE_S_PER_HOUR


def _import_slurm(args: argparse.Namespace, settings: Any) -> int:
    """``import slurm``: the jobs written, what was left out, and the store."""
    from reports.imports.commands import run_slurm_import

    done = run_slurm_import(args, settings, now=args.now)
    hours = _said_skipped(done.unreadable, done.jobs, "unreadable row(s)")
    parts = [f"{done.steps} step row(s)"] if done.steps else []
    parts += [f"{done.not_started} job(s) that never started"] if done.not_started else []
    left = f"; left out {', '.join(parts)}" if parts else ""
    for note in done.notes:
        print(printable(note))
    nodes = (
        f"; {len(done.capacity)} node(s) with {sum(c.gpus for c in done.capacity):,} GPUs (sinfo)"
        if done.capacity
        else ""
    )
    print(
        f"imported {len(done.jobs)} Slurm job(s) holding {hours:,.1f} GPU-h{nodes} into "
        f"{_shown_url(settings.store)}{left}"
    )
    return 0


def _import_kubernetes(args: argparse.Namespace, settings: Any) -> int:
    """``import kubernetes``: the pods written, what was left out, and the store."""
    from reports.imports.commands import run_kube_import

    done = run_kube_import(args, settings, now=args.now)
    hours = _said_skipped(done.unreadable, done.jobs, "pod(s)")
    parts = [f"{done.short} pod(s) seen for one minute only"] if done.short else []
    parts += [f"{done.extended} pod(s) an earlier import had, now longer"] if done.extended else []
    if not done.jobs and not done.capacity:
        print(
            "no pod held a GPU and no node had one in the range: does this Prometheus scrape "
            "kube-state-metrics (kube_pod_container_resource_requests, resource=nvidia_com_gpu)?"
        )
    print(
        f"imported {len(done.jobs)} Kubernetes pod(s) holding {hours:,.1f} GPU-h into "
        f"{_shown_url(settings.store)}{'; ' + ', '.join(parts) if parts else ''}"
    )
    return 0


def _progress() -> Callable[[str], None]:
    """A long command's progress on stderr: rewritten in place on a terminal, only the closing
    line (one without ``/``) into a log or a pipe."""
    tty = sys.stderr.isatty()

    def say(line: str) -> None:
        if tty:
            end = "\r" if "/" in line else "\n"
            print(f"\r{line}\033[K", end=end, file=sys.stderr, flush=True)
        elif "/" not in line:
            print(line, file=sys.stderr)

    return say


def _prog() -> str:
    """How to run this ``gpu-kpi`` again from the shell the user is in: ``gpu-kpi`` when that
    is what PATH finds, else the path that was run (``.venv/bin/gpu-kpi`` after
    ``make demo``), else ``python -m reports.cli``."""
    import shlex
    import shutil

    argv0 = Path(sys.argv[0])
    if argv0.name != "gpu-kpi":
        return f"{shlex.quote(sys.executable)} -m reports.cli"
    found = shutil.which("gpu-kpi")
    if found and Path(found).resolve() == argv0.resolve():
        return "gpu-kpi"
    return shlex.quote(_shown_path(argv0))


def _shown_path(path: Path) -> str:
    """``path`` relative to the working folder when it is inside it, else absolute."""
    full = path.resolve()
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


def cmd_demo(args: argparse.Namespace) -> int:
    import shlex

    from reports.demo import demo_config, run_demo
    from reports.weeks import week_label, week_of

    out = writable_dir(Path(args.dir).resolve(), "--dir")
    url = args.store or f"sqlite:///{out / 'runs.db'}"
    config = out / "gpu-kpi.toml"
    config.write_text(demo_config(url), encoding="utf-8")
    records, monday = run_demo(url, config=str(config), now=args.now)
    from reports.listing import format_runs

    print(format_runs(records))
    print()
    for r in records:
        if r.verdict and r.verdict != "healthy":
            print(f"{r.name}: {r.verdict}: {r.advice}")
    label = week_label(*week_of(monday))
    print(
        f"\n{len(records)} simulated runs in {label}, and 12 weeks of fleet history, "
        f"written to {_shown_url(url)}"
    )
    from reports.build import backfill, build
    from reports.request import FORMATS, Request
    from reports.weeks import zone

    settings = _settings(argparse.Namespace(config=str(config), store=url))
    section = _report_section(argparse.Namespace(config=str(config)))
    req = Request.from_settings(
        settings, week=label, tz=zone("UTC"), formats=FORMATS, budgets=section["budgets"]
    )
    # every week of the history, so the index and its trends are full on the first look; the
    # demo's own week again, as a second demo replaced its runs
    reports = out / "reports"
    written = [*backfill(url, req, reports, since=None), *build(url, req, reports)]
    html = next(p for p in written if p.name == f"{label}.html")
    weeks = len({p.stem for p in written if p.suffix == ".json"})
    print(f"\nthe weekly report of {label}: {html}")
    week = json.loads(html.with_suffix(".json").read_text(encoding="utf-8"))
    causes = " · ".join(
        f"{c['label']} ${c['cents'] / 100:,.2f}" for c in week["waste_by_cause"][:3]
    )
    if causes:
        print(f"  where the waste went: {causes}")
    h = week["headline"]
    beside = [
        f"{what} ${h[key]:,.2f}"
        for what, key in (
            ("not measured", "unmeasured_usd"),
            ("failed work", "failed_usd"),
            ("re-done work", "redone_usd"),
            ("throttled", "throttled_usd"),
            ("slow nodes", "slow_node_usd"),
            ("nobody held", "unallocated_usd"),
        )
        if (h.get(key) or 0.0) >= 0.005
    ]
    if beside:  # paid, and in no cause of waste (the week's ledger)
        print(f"  paid beside the waste: {' · '.join(beside)}")
    for c in week["savings"]:
        print(printable(f"  what a fix saved: {c['sentence']}"))
    print(
        f"every week so far ({weeks} written now, each a page, an email, JSON and CSV): "
        f"{reports / 'index.html'}"
    )
    prog, cfg = _prog(), shlex.quote(_shown_path(config))
    print(f"\nthe demo's config (store, owned GPUs, budgets): {_shown_path(config)}; again:")
    print(f"  {prog} runs --config {cfg} --week {label}")
    print(
        f"  {prog} report --config {cfg} --week {label} --out {shlex.quote(_shown_path(reports))}"
    )
    print(f"  {prog} budgets --config {cfg} --week {label}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line (``gpu-kpi report: error: argument
    --basis: invalid choice: 'foo' …``, exit status 2): the usage block is ``--help``'s."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from tracker import __version__

    p = _Parser(
        prog="gpu-kpi",
        description="Are we wasting our GPUs? GPU "
        "utilization, cost and waste per run and per week.",
    )
    p.add_argument("--version", action="version", version=f"gpu-kpi {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, func: Callable[[argparse.Namespace], int], help: str, store: bool = True
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.set_defaults(func=func)
        sp.add_argument(
            "--config",
            metavar="FILE",
            help="TOML config file (default: $GPU_KPI_CONFIG or the user config dir)",
        )
        if store:
            sp.add_argument(
                "--store",
                metavar="URL",
                help="run store URL, sqlite:///PATH or "
                "postgresql://USER@HOST/DB (default: $GPU_KPI_STORE or a local "
                "SQLite file); put passwords in PGPASSWORD or ~/.pgpass, not here",
            )
        return sp

    from reports.listing import add_budgets_command, add_chargeback_command, add_runs_command

    add_runs_command(add)
    add_chargeback_command(add)
    add_budgets_command(add)

    report = add(
        "report",
        cmd_report,
        "the weekly KPI report: HTML, email (.eml), JSON and "
        "CSV of one week, and the index of every archived week",
    )
    report.add_argument(
        "--week",
        metavar="YYYY-Www",
        help="ISO week, or 'current' for the week so far (written as YYYY-Www-so-far.*, never "
        "archived as the week); default: the last complete week",
    )
    when = report.add_mutually_exclusive_group()
    when.add_argument(
        "--since",
        metavar="YYYY-Www",
        help="archive every week from this one to "
        "the last complete week that --out does not hold yet, then the index once",
    )
    when.add_argument("--all", action="store_true", help="--since the week of the oldest run")
    report.add_argument("--tz", help="report time zone (default: [report] timezone, else UTC)")
    report.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (default: [report] out_dir, else ./reports-out)",
    )
    report.add_argument(
        "--format",
        default="html,email,json,csv",
        help="comma-separated: html, email, json, csv (default all four), parquet (every run, "
        "typed; needs pyarrow)",
    )
    report.add_argument(
        "--report-url",
        metavar="URL",
        help="base URL where the archive is "
        "served (the email links to it; default: [report] report_url)",
    )
    report.add_argument(
        "--basis",
        choices=("util", "sm_active"),
        help="utilization basis: NVML "
        "utilization or GPM SM activity (default: [report] basis, else util)",
    )

    prices = add(
        "prices",
        cmd_prices,
        "show the rate each GPU model is charged (USD per GPU-hour) and its source: owned "
        "(amortized), [prices], else the table",
        store=False,
    )
    prices.add_argument("--gpu", metavar="MODEL", help="one model, e.g. H100")
    prices.add_argument("--format", choices=("table", "json"), default="table")

    from reports.imports.commands import add_import_commands

    add_import_commands(add, cmd_import)
    add("sync", cmd_sync, "send runs spooled while the store was unreachable")
    store = add(
        "store",
        cmd_store,
        "look after the run store: rebuild-rollups recomputes the "
        "hourly rollups the weekly report reads from the minute rows",
    )
    store.add_argument("action", choices=("rebuild-rollups",))

    from reports.service.commands import add_service_commands
    from reports.service.job_notes import add_job_command

    add_service_commands(add)
    add_job_command(add)

    from reports.compare import add_compare_commands
    from reports.ledger import add_mark_command

    add_mark_command(add)
    add_compare_commands(add)

    demo = add("demo", cmd_demo, "simulated training runs into a local store, then list them")
    demo.add_argument(
        "--dir", default=".gpu-kpi-demo", help="where the demo store goes (default ./.gpu-kpi-demo)"
    )
    return p


EXTRAS = {
    "pandas": "reports",
    "numpy": "reports",
    "jinja2": "reports",
    "matplotlib": "reports",
    "PIL": "reports",
    "apscheduler": "reports",
    "prometheus_client": "reports",
    "psycopg": "postgres",
}
"""Top-level modules of the optional extras (pyproject.toml), by the extra that installs them."""


WEEK_COMMANDS = frozenset(
    {"runs", "chargeback", "budgets", "report", "send", "serve", "job", "compare", "demo"}
)
"""The commands that read weeks of runs into frames: Arrow's pool is chosen before pandas is
imported (:func:`reports.data.arrow_pool.use_returning_arrow_pool`)."""


def main(argv: Sequence[str] | None = None, *, now: datetime | None = None) -> int:
    """Run ``gpu-kpi ARGV``: its exit status; a user's error is one line on stderr (status 2).

    Args:
        argv: The command line after ``gpu-kpi``; None for ``sys.argv[1:]``.
        now: The current time (timezone-aware) every command reads as "now": which week is
            the last complete one, what ``compare`` and ``gate`` call recent, when a mark or a
            baseline was written. None reads the clock once, before the command runs. Tests
            inject one; the ``serve`` loop reads its scheduler's clock as it goes.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if now is not None and now.utcoffset() is None:
        raise ValueError("main(now=...) takes a timezone-aware time")
    args.now = now if now is not None else datetime.now(UTC)
    if args.command in WEEK_COMMANDS and importlib.util.find_spec("pyarrow") is not None:
        from reports.data.arrow_pool import use_returning_arrow_pool

        use_returning_arrow_pool()
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a full disk or a closed pipe is seen here, not at exit
        return code
    except _user_errors() as e:
        print(f"gpu-kpi: error: {printable(str(e))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        extra = EXTRAS.get((e.name or "").partition(".")[0])
        if extra is None:
            raise
        print(
            f"gpu-kpi: error: {args.command!r} needs the {extra} extra ({e.name} is not "
            f"installed): {install_hint(extra)}",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:
        # `gpu-kpi runs | head`: the reader left; say nothing more, and keep Python from
        # complaining when it flushes stdout at exit
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as e:  # writing the output: a full disk, /dev/full, a vanished folder
        where = f": {e.filename}" if e.filename else ""
        print(f"gpu-kpi: error: {e.strerror or e}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def entry() -> NoReturn:
    """The ``gpu-kpi`` program (and ``python -m reports.cli``): :func:`main`, then its exit
    status. Every object still alive is frozen out of the garbage collector first: at exit the
    interpreter tears down its modules with full collector passes over what pandas,
    matplotlib and SQLAlchemy made, for objects the process is about to hand back whole (a
    week's report of 125 runs 2.05-2.20 s, frozen 1.73-1.86 s; ``gpu-kpi runs`` of that week
    0.43-0.46 s, frozen 0.34-0.36 s). Exit handlers run as before (logging's flush, thread
    pools' joins). Tests call :func:`main`, whose garbage is collected as ever."""
    import gc

    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
