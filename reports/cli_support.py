"""What the CLI's commands share (their settings, the store, printing a user's text, the
config's ``[report]``), apart from ``reports.cli`` so that command modules can use it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _settings(args: argparse.Namespace) -> Any:
    from tracker.config import load_settings

    return load_settings(getattr(args, "config", None), store=getattr(args, "store", None))


def _open_store(url: str | None, *, create: bool = True) -> Any:
    """The run store; ``create=False`` for commands that only read: a store that does not exist
    is an error there, not a new empty database and its folders."""
    from tracker.store import RunStore, default_store_url

    return RunStore(url or default_store_url(), create=create)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}


def printable(text: str) -> str:
    """``text`` with terminal control characters (escape sequences, carriage returns, bells)
    shown as ``\\xNN``: a run named by a training script must not rewrite the operator's
    terminal."""
    return text.translate(_CONTROL)


def _report_section(args: argparse.Namespace) -> dict[str, Any]:
    """The config file's ``[report]`` (``GPU_KPI_TIMEZONE``… over it), as the service reads it,
    with its ``[[budgets]]`` under ``budgets``; :class:`ConfigError` naming the key of a bad
    value."""
    import os

    from reports.service.config import SERVICE_SECTIONS, read_budgets
    from tracker.config import Errors, config_path, read_sections, read_toml

    file = Path(args.config) if args.config else config_path(os.environ)
    errors = Errors()
    data = read_toml(file) if file is not None else {}
    found = read_sections(data, {"report": SERVICE_SECTIONS["report"]}, os.environ, errors)
    budgets = read_budgets(data, errors)
    errors.raise_any()
    return {**found["report"], "budgets": budgets}
