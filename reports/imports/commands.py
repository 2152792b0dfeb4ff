"""``gpu-kpi import SOURCE …``: its flags, one source after another. ``reports.cli`` adds it to
its parser; nothing here runs at import time."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reports.errors import UsageError

if TYPE_CHECKING:
    from reports.imports.play import Imported

AddCommand = Callable[..., argparse.ArgumentParser]
MAPPABLE = ("util_pct", "samples_per_s", "tokens_per_s")
SOURCES = ("nvidia-smi", "wandb", "tensorboard")


def add_import_commands(add: AddCommand, run: Callable[[argparse.Namespace], int]) -> None:
    """``gpu-kpi import`` on the CLI's parser: ``add`` is its subcommand helper, ``run`` the
    command (``reports.cli.cmd_import``, which prints runs as ``gpu-kpi runs`` does)."""
    imp = add("import", run, "bring runs our callback did not track into the store: "
              "nvidia-smi CSV logs (--query-gpu=timestamp,uuid,name,utilization.gpu,... "
              "--format=csv -l N) at their own timestamps; W&B run directories (their "
              ".wandb logs: W&B's own GPU metrics); TensorBoard logdirs")
    imp.add_argument("source", choices=SOURCES)
    imp.add_argument("files", nargs="+", metavar="PATH", help="nvidia-smi: CSV files; wandb: "
                     ".wandb files or directories holding W&B runs (e.g. ./wandb); "
                     "tensorboard: logdirs")
    imp.add_argument("--tz", help="nvidia-smi: time zone of the log's timestamps (default UTC)")
    for label in ("project", "team", "user", "host"):
        imp.add_argument(f"--{label}", default="", help=f"the runs' {label} (W&B: over the "
                         "run's own)")
    imp.add_argument("--gpu-model", metavar="MODEL", help="GPU model when the log has no 'name' "
                     "column, or to override it (e.g. H100)")
    imp.add_argument("--price", type=float, metavar="USD", help="USD per GPU-hour for these runs")
    imp.add_argument("--per-gpu", action="store_true", help="nvidia-smi: one run per GPU UUID, "
                     "not per file")
    imp.add_argument("--replace", action="store_true", help="drop earlier imports of the source "
                     "that hold minutes of the same GPUs in the same time (other options)")
    imp.add_argument("--gpus", type=int, metavar="N", help="tensorboard: GPUs of each run "
                     "not logged by gpu-kpi (default 1)")
    imp.add_argument("--tag", action="append", default=[], metavar="KEY=TAG",
                     help="tensorboard: the scalar tag holding KEY, one of "
                     f"{', '.join(MAPPABLE)} (repeat the option)")
    imp.add_argument("--max-gap", type=float, metavar="S", help="seconds between two readings "
                     "that count as a gap, not GPU-time (default: 3 x the GPU's median interval)")


def run_import(args: argparse.Namespace, settings: Any) -> Imported:
    """The import ``args`` ask for, written to ``settings.store``. Raises
    :class:`reports.errors.UsageError` for options the source does not take."""
    from reports.imports.play import Labels
    from reports.weeks import zone

    if args.price is not None and not 0 <= args.price <= 10_000:
        raise UsageError(f"--price {args.price:g}: USD per GPU-hour from 0 to 10,000")
    if args.max_gap is not None and not args.max_gap > 0:
        raise UsageError(f"--max-gap {args.max_gap:g}: seconds, more than 0")
    labels = Labels(project=args.project, team=args.team, user=args.user, host=args.host,
                    gpu_model=args.gpu_model, price=args.price)
    common = {"labels": labels, "settings": settings, "max_gap_s": args.max_gap,
              "replace": args.replace}
    if args.source != "tensorboard" and (args.gpus is not None or args.tag):
        raise UsageError("--gpus and --tag are for TensorBoard logdirs")
    if args.source != "nvidia-smi" and (args.tz is not None or args.per_gpu):
        raise UsageError(f"--tz and --per-gpu are for nvidia-smi logs: {args.source} keeps "
                         "UTC times and one run per run")
    if args.source == "wandb":
        from reports.imports.wandb_runs import import_wandb

        return import_wandb(settings.store, args.files, **common)
    if args.source == "tensorboard":
        from reports.imports.tb_runs import import_tensorboard

        return import_tensorboard(settings.store, args.files, gpus=_gpus(args.gpus),
                                  tags=_tags(args.tag), **common)
    from reports.imports.nvsmi import import_nvsmi

    return import_nvsmi(settings.store, args.files, tz=zone(args.tz or "UTC"),
                        per_gpu=args.per_gpu, **common)


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
