"""Errors the CLI shows as one line (kept light: importing this pulls no pandas)."""

from __future__ import annotations

import os
from pathlib import Path


class ReportError(Exception):
    """The report cannot be made as asked (empty store, an unknown format, a week that has not
    started)."""


class ImportFailed(Exception):
    """An import cannot read its input (a file and line, a URL): nothing was imported."""


class UsageError(Exception):
    """Bad input on the command line: printed as one line, exit status 2."""


def writable_dir(path: Path, flag: str) -> Path:
    """``path`` created as a folder we can write to, or a one-line error naming ``flag``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{flag} {path}: exists and is not a folder") from None
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot create it: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: not writable") from None
    return path
