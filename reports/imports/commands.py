"""``gpu-kpi import SOURCE …``: its flags, one source after another. ``reports.cli`` adds it to
its parser; nothing here runs at import time."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reports.errors import UsageError

if TYPE_CHECKING:
    from reports.imports.kube import KubeImported
    from reports.imports.play import Imported
    from reports.imports.slurm_jobs import SlurmImported

AddCommand = Callable[..., argparse.ArgumentParser]
MAPPABLE = ("util_pct", "samples_per_s", "tokens_per_s")
SOURCES = ("nvidia-smi", "wandb", "tensorboard", "prometheus", "slurm", "kubernetes")
MAP_KEYS = ("run", "team", "project", "user")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def add_import_commands(add: AddCommand, run: Callable[[argparse.Namespace], int]) -> None:
    """``gpu-kpi import`` on the CLI's parser: ``add`` is its subcommand helper, ``run`` the
    command (``reports.cli.cmd_import``, which prints runs as ``gpu-kpi runs`` does)."""
    imp = add(
        "import",
        run,
        "bring runs our callback did not track into the store: "
        "nvidia-smi CSV logs (--query-gpu=timestamp,uuid,name,utilization.gpu,... "
        "--format=csv -l N) at their own timestamps; W&B run directories (their "
        ".wandb logs: W&B's own GPU metrics) or W&B chart exports (.csv); TensorBoard logdirs; "
        "DCGM-exporter "
        "metrics from Prometheus; and Slurm's jobs (sacct) and Kubernetes pods "
        "(kube-state-metrics in Prometheus): the GPUs each held, "
        "matched in the report to the samples that say what they did",
    )
    imp.add_argument("source", choices=SOURCES)
    imp.add_argument(
        "files",
        nargs="*",
        metavar="PATH",
        help="nvidia-smi: CSV files; slurm: sacct's output saved (-P or --json; - for standard "
        "input), none to run sacct here for --since/--until; wandb: "
        ".wandb files or directories holding W&B runs (e.g. ./wandb), CSV exports of W&B "
        "system charts, or with "
        "--since/--until one ENTITY/PROJECT through W&B's API; "
        "tensorboard: logdirs; prometheus, kubernetes: the Prometheus server's URL",
    )
    imp.add_argument(
        "--tz",
        help="nvidia-smi: time zone of the log's timestamps; slurm: of the times in saved "
        "sacct output (the zone of the machine sacct ran on; default UTC)",
    )
    imp.add_argument(
        "--cluster",
        metavar="NAME",
        help="slurm: the cluster of jobs whose output does not name it (no Cluster field); "
        "kubernetes: of pods whose series carry no cluster label",
    )
    imp.add_argument(
        "--account-team",
        action="append",
        default=[],
        metavar="ACCOUNT=TEAM",
        help="slurm: the team of a Slurm account; kubernetes: of a namespace (repeat the "
        "option; default: the account or namespace)",
    )
    imp.add_argument(
        "--query-gpu",
        metavar="LIST",
        help="nvidia-smi: the --query-gpu list of logs written with --format=csv,noheader, "
        "exactly as given to nvidia-smi (timestamp,index,utilization.gpu,...)",
    )
    for label in ("project", "team", "user", "host"):
        imp.add_argument(
            f"--{label}", default="", help=f"the runs' {label} (W&B: over the run's own)"
        )
    imp.add_argument(
        "--gpu-model",
        metavar="MODEL",
        help="GPU model when the log has no 'name' column, or to override it (e.g. H100)",
    )
    imp.add_argument("--price", type=float, metavar="USD", help="USD per GPU-hour for these runs")
    imp.add_argument(
        "--per-gpu", action="store_true", help="nvidia-smi: one run per GPU UUID, not per file"
    )
    imp.add_argument(
        "--replace",
        action="store_true",
        help="drop earlier imports of the source "
        "that hold minutes of the same GPUs in the same time (other options)",
    )
    imp.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="tensorboard: GPUs of each run not logged by gpu-kpi (default 1)",
    )
    imp.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=TAG",
        help="tensorboard: the scalar tag holding KEY, one of "
        f"{', '.join(MAPPABLE)} (repeat the option)",
    )
    imp.add_argument(
        "--since",
        metavar="WHEN",
        help="prometheus, kubernetes, wandb ENTITY/PROJECT, slurm without files: from "
        "(2026-W47, 2026-11-16, 2026-11-16T08:00; UTC unless it says otherwise; slurm: "
        "default 8 days ago)",
    )
    imp.add_argument(
        "--until",
        metavar="WHEN",
        help="prometheus, kubernetes, wandb ENTITY/PROJECT, slurm without files: to (the same forms; "
        "slurm: default now)",
    )
    imp.add_argument(
        "--started",
        metavar="WHEN",
        help="wandb chart exports (.csv) by Relative Time: when the run started "
        "(2026-11-16T08:00; UTC unless it says otherwise)",
    )
    imp.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="KEY=LABEL",
        help="prometheus: the series label naming KEY, one of "
        f"{', '.join(MAP_KEYS)} (run takes labels in order: run=pod,hpc_job; "
        "default run=pod,hpc_job team=namespace); kubernetes: team=LABEL, user=LABEL, the pod "
        "label naming them (kube-state-metrics must export it: --metric-labels-allowlist)",
    )
    imp.add_argument(
        "--max-gap",
        type=float,
        metavar="S",
        help="seconds between two readings "
        "that count as a gap, not GPU-time (default: 3 x the GPU's median interval; at most "
        "86400, a day)",
    )


def run_import(args: argparse.Namespace, settings: Any) -> Imported:
    """``gpu-kpi import``: the import ``args`` ask for, written to ``settings.store``.

    Args:
        args: The parsed ``gpu-kpi import SOURCE …`` flags.
        settings: The tracker's settings (the store, prices, thresholds).

    Returns:
        What was imported: the run records and minute samples written, the runs found but
        skipped (by reason) and the earlier imports replaced.

    Raises:
        reports.errors.UsageError: An option the source does not take, or out of range.
    """
    from reports.imports.play import Labels
    from reports.weeks import zone

    if not args.files:
        raise UsageError(f"{args.source} takes at least one PATH")
    if args.source != "slurm" and (args.cluster or args.account_team):
        raise UsageError("--cluster and --account-team are for Slurm and Kubernetes")
    if args.price is not None and not 0 <= args.price <= 10_000:
        raise UsageError(f"--price {args.price:g}: USD per GPU-hour from 0 to 10,000")
    if args.max_gap is not None and not args.max_gap > 0:
        raise UsageError(f"--max-gap {args.max_gap:g}: seconds, more than 0")
    labels = Labels(
        project=args.project,
        team=args.team,
        user=args.user,
        host=args.host,
        gpu_model=args.gpu_model,
        price=args.price,
    )
    common = {
        "labels": labels,
        "settings": settings,
        "max_gap_s": args.max_gap,
        "replace": args.replace,
    }
    if args.source not in ("prometheus", "wandb") and (args.since or args.until):
        raise UsageError("--since and --until are for Prometheus and the W&B API")
    if args.source != "prometheus" and args.map:
        raise UsageError("--map is for Prometheus")
    if args.started and (args.source != "wandb" or args.since or args.until):
        raise UsageError("--started is for W&B chart exports (.csv) by relative time")
    if args.source == "prometheus":
        return _prometheus(args, settings, common)
    if args.source != "tensorboard" and (args.gpus is not None or args.tag):
        raise UsageError("--gpus and --tag are for TensorBoard logdirs")
    if args.source != "nvidia-smi" and args.query_gpu:
        raise UsageError("--query-gpu is for nvidia-smi logs written without a header")
    if args.source != "nvidia-smi" and (args.tz is not None or args.per_gpu):
        raise UsageError(
            f"--tz and --per-gpu are for nvidia-smi logs: {args.source} keeps "
            "UTC times and one run per run"
        )
    if args.source == "wandb" and (args.since or args.until):
        from reports.imports.wandb_runs import import_wandb_api

        if len(args.files) != 1 or not re.fullmatch(r"[\w.-]+/[\w.-]+", args.files[0]):
            raise UsageError("the W&B API takes one ENTITY/PROJECT with --since and --until")
        if Path(args.files[0]).exists():
            raise UsageError(
                f"{args.files[0]} is a local path: import it without --since and "
                "--until (they are for a W&B project, ENTITY/PROJECT)"
            )
        since, until = _range(args)
        return import_wandb_api(settings.store, args.files[0], since=since, until=until, **common)
    if args.source == "wandb":
        from reports.imports.wandb_runs import import_wandb

        started = _moment(args.started, "--started") if args.started else None
        return import_wandb(settings.store, args.files, started=started, **common)
    if args.source == "tensorboard":
        from reports.imports.tb_runs import import_tensorboard

        return import_tensorboard(
            settings.store, args.files, gpus=_gpus(args.gpus), tags=_tags(args.tag), **common
        )
    from reports.imports.nvsmi import import_nvsmi

    return import_nvsmi(
        settings.store,
        args.files,
        tz=zone(args.tz or "UTC"),
        per_gpu=args.per_gpu,
        workers=None,
        columns=_query_gpu(args.query_gpu),
        **common,
    )


def _runs_options(args: argparse.Namespace, also: str) -> bool:
    """Whether ``args`` give an option of the imports of runs (labels, prices, nvidia-smi's,
    TensorBoard's…) or ``also``: none is an allocation import's."""
    others = (args.query_gpu, args.per_gpu, args.replace, args.gpus, args.tag, getattr(args, also))
    labels = (args.project, args.team, args.user, args.host, args.gpu_model, args.price)
    return bool(
        any(others) or any(x not in ("", None) for x in labels) or args.started or args.max_gap
    )


def run_slurm_import(args: argparse.Namespace, settings: Any, *, now: datetime) -> SlurmImported:
    """``gpu-kpi import slurm``: the jobs in the files given, or from this machine's sacct for
    the range, written to ``settings.store`` all or none.

    Args:
        args: The parsed ``gpu-kpi import slurm …`` flags.
        settings: The tracker's settings (the store).
        now: The time of the import (timezone-aware).

    Raises:
        reports.errors.UsageError: An option Slurm does not take, or a bad range.
        reports.errors.ImportFailed: An input that is not sacct's, or sacct failing.
    """
    from collections import Counter

    from reports.imports.slurm_jobs import (
        parse_account_teams,
        read_files,
        run_sacct,
        sinfo_capacity,
        sinfo_nodes,
    )
    from reports.weeks import zone

    if _runs_options(args, "map"):
        raise UsageError(
            "slurm takes --since, --until, --tz, --cluster and --account-team (a job's team "
            "comes from its account)"
        )
    teams = parse_account_teams(args.account_team)
    cluster = (args.cluster or "").strip()
    if "/" in cluster:
        raise UsageError(f"--cluster {cluster!r}: a name without /")
    if args.files:
        if args.since or args.until:
            raise UsageError("--since and --until are for running sacct, not for its saved output")
        if args.files.count("-") > 1:
            raise UsageError("- (standard input) given twice")
        done = read_files(
            args.files,
            tz=zone(args.tz or "UTC"),
            cluster=cluster,
            teams=teams,
            now=now,
            gres_models=settings.gres_models,
        )
    else:
        if args.tz:
            raise UsageError("--tz is for saved sacct output (run here, sacct writes UTC)")
        since = _moment(args.since, "--since") if args.since else now - timedelta(days=8)
        until = _moment(args.until, "--until", end=True) if args.until else now
        if not since < until:
            shown = (args.since or since.isoformat(), args.until or until.isoformat())
            raise UsageError(f"--since {shown[0]} is not before --until {shown[1]}")
        if until - since > timedelta(days=366):
            raise UsageError("--since to --until is over a year: import a range at a time")
        seen_nodes = sinfo_nodes()  # first: a job over its nodes' GPUs is no real one
        done = run_sacct(
            since,
            min(until, now),
            cluster=cluster,
            teams=teams,
            now=now,
            gres_models=settings.gres_models,
            node_gpus={node: gpus for node, (gpus, _) in seen_nodes.nodes.items()},
        )
        named = Counter(a.cluster for a in done.jobs if a.cluster)
        done.capacity, done.notes = sinfo_capacity(
            since,
            min(until, now),
            cluster=cluster or (named.most_common(1)[0][0] if named else ""),
            gres_models=settings.gres_models,
            shown=seen_nodes,
        )
    from reports.data.allocations import write_allocations
    from reports.imports.slurm import Unreadable
    from reports.imports.slurm_jobs import owned_type_notes
    from tracker.store import RunStore

    with RunStore(settings.store) as store:
        settled = write_allocations(store, done.jobs, done.capacity, done.usage, settle=True)
    done.jobs = settled.jobs
    done.unreadable += [Unreadable(f"job {a.shown_id}", why) for a, why in settled.refused]
    done.notes += owned_type_notes(done.types, settings.owned, settings.gres_models)
    return done


def run_kube_import(args: argparse.Namespace, settings: Any, *, now: datetime) -> KubeImported:
    """``gpu-kpi import kubernetes URL --since --until``: the pods that held GPUs, from
    kube-state-metrics in Prometheus, written to ``settings.store`` all or none.

    Args:
        args: The parsed ``gpu-kpi import kubernetes …`` flags.
        settings: The tracker's settings (the store).
        now: The time of the import (timezone-aware).

    Raises:
        reports.errors.UsageError: An option Kubernetes does not take, or a bad range.
        reports.errors.ImportFailed: Prometheus unreachable or answering something else.
    """
    from reports.imports.kube import read_kubernetes, write_pods
    from reports.imports.slurm_jobs import parse_account_teams
    from tracker.store import RunStore

    if _runs_options(args, "tz"):
        raise UsageError(
            "kubernetes takes one URL, --since, --until, --cluster, --account-team and "
            "--map team=LABEL / user=LABEL (a pod's team comes from its label or namespace)"
        )
    if len(args.files) != 1:
        raise UsageError("kubernetes takes one URL: the Prometheus that scrapes kube-state-metrics")
    since, until = _range(args)
    given: dict[str, str] = {}
    for item in args.map:
        key, eq, label = item.partition("=")
        if not eq or key not in ("team", "user") or not _POD_LABEL.fullmatch(label):
            raise UsageError(
                f"--map {item!r}: team=LABEL or user=LABEL, LABEL a pod label's key (team, "
                "app.kubernetes.io/part-of)"
            )
        if key in given:
            raise UsageError(f"--map {key}= given twice")
        given[key] = label
    cluster = (args.cluster or "").strip()
    if "/" in cluster:
        raise UsageError(f"--cluster {cluster!r}: a name without /")
    done = read_kubernetes(
        args.files[0],
        since=since,
        until=min(until, now),
        cluster=cluster,
        teams=parse_account_teams(args.account_team),
        team_label=given.get("team", ""),
        user_label=given.get("user", ""),
        now=now,
        mig_share=settings.mig_share,
    )
    with RunStore(settings.store) as store:
        return write_pods(store, done)


_POD_LABEL = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
"""A Kubernetes label key: an optional DNS prefix and ``/``, a name."""


def _query_gpu(text: str | None) -> list[str] | None:
    """``--query-gpu timestamp,index,utilization.gpu``: the columns of a log without a header."""
    if text is None:
        return None
    columns = [c.strip() for c in text.split(",")]
    if not all(columns) or not {"timestamp", "utilization.gpu"} <= set(columns):
        raise UsageError(
            f"--query-gpu {text!r}: the list given to nvidia-smi, comma-separated, with "
            "timestamp and utilization.gpu"
        )
    return columns


def _gpus(n: int | None) -> int:
    if n is not None and not 1 <= n <= 4096:
        raise UsageError(f"--gpus {n}: from 1 to 4096")
    return n or 1


def _tags(given: list[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for item in given:
        key, eq, tag = item.partition("=")
        if not eq or key not in MAPPABLE or not tag:
            raise UsageError(f"--tag {item!r}: KEY=TAG with KEY one of {', '.join(MAPPABLE)}")
        if key in tags:
            raise UsageError(f"--tag {key}= given twice")
        tags[key] = tag
    return tags


def _moment(text: str | None, flag: str, *, end: bool = False) -> datetime:
    """A week (its Monday 00:00 UTC), a date (its 00:00) or a date and time (UTC unless it
    says); ``end`` (``--until``): a week or a date is up to its end, included, as everywhere
    (``--until 2026-W47`` takes in W47, as ``runs`` and ``chargeback`` do)."""
    from reports.weeks import WeekError, parse_moment

    if not text:
        raise UsageError(f"this import needs {flag} (2026-W47, 2026-11-16 or 2026-11-16T08:00)")
    try:
        return parse_moment(text, UTC, end=end)
    except WeekError as e:
        raise UsageError(f"{flag}: {e}") from None


def _range(args: argparse.Namespace) -> tuple[datetime, datetime]:
    since, until = _moment(args.since, "--since"), _moment(args.until, "--until", end=True)
    if not since < until:
        raise UsageError(f"--since {args.since} is not before --until {args.until}")
    if until - since > timedelta(days=366):
        raise UsageError("--since to --until is over a year: import a range at a time")
    return since, until


def _prometheus(args: argparse.Namespace, settings: Any, common: dict[str, Any]) -> Imported:
    from reports.imports.prom import LabelMap, import_prometheus

    if args.tz is not None or args.per_gpu or args.gpus is not None or args.tag:
        raise UsageError("--tz, --per-gpu, --gpus and --tag are not for Prometheus")
    if len(args.files) != 1:
        raise UsageError("prometheus takes one URL (http://prometheus:9090)")
    since, until = _range(args)
    given: dict[str, str] = {}
    for item in args.map:
        key, eq, label = item.partition("=")
        names = label.split(",") if key == "run" else [label]
        if not eq or key not in MAP_KEYS or not all(_LABEL.fullmatch(n) for n in names):
            raise UsageError(
                f"--map {item!r}: KEY=LABEL with KEY one of {', '.join(MAP_KEYS)} "
                "and LABEL a Prometheus label name (run= takes several: "
                "run=pod,hpc_job)"
            )
        if key in given:
            raise UsageError(f"--map {key}= given twice")
        given[key] = label
    default = LabelMap()
    mapping = LabelMap(
        run=tuple(x for x in given["run"].split(",") if x) if "run" in given else default.run,
        team=given.get("team", default.team),
        project=given.get("project", default.project),
        user=given.get("user", default.user),
    )
    return import_prometheus(
        settings.store, args.files[0], since=since, until=until, mapping=mapping, **common
    )
