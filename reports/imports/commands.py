"""``gpu-kpi import SOURCE …``: its flags, one source after another. ``reports.cli`` adds it to
its parser; nothing here runs at import time."""

from __future__ import annotations

import argparse
from collections.abc import Callable

AddCommand = Callable[..., argparse.ArgumentParser]


def add_import_commands(add: AddCommand, run: Callable[[argparse.Namespace], int]) -> None:
    """``gpu-kpi import`` on the CLI's parser: ``add`` is its subcommand helper, ``run`` the
    command (``reports.cli.cmd_import``, which prints runs as ``gpu-kpi runs`` does)."""
    imp = add("import", run, "bring runs our callback did not track into the store: "
              "nvidia-smi CSV logs (--query-gpu=timestamp,uuid,name,utilization.gpu,... "
              "--format=csv -l N), at their own timestamps")
    imp.add_argument("source", choices=("nvidia-smi",))
    imp.add_argument("files", nargs="+", metavar="FILE")
    imp.add_argument("--tz", default="UTC", help="time zone of the log's timestamps (default UTC)")
    for label in ("project", "team", "user", "host"):
        imp.add_argument(f"--{label}", default="", help=f"the runs' {label}")
    imp.add_argument("--gpu-model", metavar="MODEL", help="GPU model when the log has no 'name' "
                     "column, or to override it (e.g. H100)")
    imp.add_argument("--price", type=float, metavar="USD", help="USD per GPU-hour for these runs")
    imp.add_argument("--per-gpu", action="store_true", help="one run per GPU UUID, not per file")
    imp.add_argument("--replace", action="store_true", help="drop earlier nvidia-smi imports "
                     "that hold minutes of the same GPUs in the same time (other options)")
    imp.add_argument("--max-gap", type=float, metavar="S", help="seconds between two readings "
                     "that count as a gap, not GPU-time (default: 3 x the GPU's median interval)")
