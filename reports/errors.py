"""Errors the CLI shows as one line (kept light: importing this pulls no pandas)."""

from __future__ import annotations


class ReportError(Exception):
    """The report cannot be made as asked (empty store, an unknown format, a week that has not
    started)."""


class UsageError(Exception):
    """Bad input on the command line: printed as one line, exit status 2."""
