"""Running the gpu-kpi command line in a test.

:func:`gpu_kpi` runs it in this process (``reports.cli.main``): what a user sees (the exit
status, stdout, stderr with the warnings) without paying ~0.3 s of CPU for a fresh Python that
imports pandas again. :func:`gpu_kpi_process` starts ``python -m reports.cli``, for the tests
whose subject is the process itself: what it imports, how it exits, the shell it runs in.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]


def gpu_kpi(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    now: datetime | None = None,
) -> subprocess.CompletedProcess[str]:
    """``gpu-kpi ARGS`` in this process, as a subprocess would report it.

    Args:
        *args: The command line after ``gpu-kpi``.
        cwd: The working folder during the command; None keeps the current one.
        env: Variables added to the environment during the command (restored after).
        now: The time the command reads as now (``reports.cli.main``'s); None for the clock's.

    Returns:
        The exit status (argparse's own exits included), stdout, and stderr, which also holds
        the ``gpu_kpi`` logger's warnings as Python prints them in a process with no logging
        set up (the message alone).
    """
    import reports.cli

    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("gpu_kpi")
    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    os.environ.update(env or {})
    logger.addHandler(handler)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            # the parser this process built first: build_parser costs ~6 ms of CPU, and the
            # fast suite calls main hundreds of times. A parser keeps no state between
            # parse_args calls (it holds each command's function as it was when built)
            mock.patch.object(reports.cli, "build_parser", _built(reports.cli.build_parser)),
        ):
            try:
                code = reports.cli.main(list(args), now=now)
            except SystemExit as e:  # argparse: --help, a bad flag
                code = e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        logger.removeHandler(handler)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["gpu-kpi", *args], code, out.getvalue(), err.getvalue())


@functools.cache
def _built(
    build_parser: Callable[[], argparse.ArgumentParser],
) -> Callable[[], argparse.ArgumentParser]:
    """``build_parser``, called once: what it returns the first time, every time."""
    parser = build_parser()
    return lambda: parser


def gpu_kpi_process(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m reports.cli ARGS`` in a fresh process, this checkout importable.

    Args:
        *args: The command line after ``gpu-kpi``.
        cwd: The process's working folder.
        env: Variables added to this process's environment for the child.

    Returns:
        The finished process, its output as text.
    """
    return subprocess.run(
        [sys.executable, "-m", "reports.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def python_c(code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh process, this checkout importable; it must exit 0.

    Args:
        code: The program.

    Returns:
        The finished process, its output as text.
    """
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def home_env(home: Path) -> dict[str, str]:
    """This process's environment as a user's shell with ``home`` for a home folder has it: no
    ``GPU_KPI_*``, ``XDG_*`` or ``WANDB_*`` variable and no ``PGPASSWORD`` (so the default
    store, config and data folders are ``home``'s), ``HOME`` set."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPU_KPI_", "XDG_", "WANDB_")) and k not in ("HOME", "PGPASSWORD")
    }
    env["HOME"] = str(home)
    return env
