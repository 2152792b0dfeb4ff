"""CSV cells a spreadsheet will not run as formulas (OWASP "CSV Injection").

Excel, LibreOffice Calc and Google Sheets evaluate a cell that begins with ``=``, ``+``, ``-``
or ``@`` as a formula (``=HYPERLINK(…)``, ``+cmd|' /C calc'!A0``, ``@SUM(…)``), and some strip
a leading tab, carriage return or line feed first. :func:`safe_cell` prefixes such a text cell
with a single quote, which spreadsheets show as text. Numbers are not text: ``-3.5`` stays the
number ``-3.5``. Stdlib only, so the CLI can use it without pandas.

A cell must also stay one cell: :mod:`csv` quotes a cell only when it holds the delimiter, the
quote or a character of the *line terminator*, so with ``lineterminator="\n"`` a cell
``"x\r=1"`` is written bare and read back as two rows, the second starting ``=1``.
:func:`writer` keeps the ``excel`` dialect's ``\r\n`` (RFC 4180): a cell with a carriage
return or a line feed is quoted, and embedded quotes are doubled.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any, Protocol

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
"""A text cell that begins with one of these is neutralized: OWASP's list (= + - @ tab CR) and
the line feed, which some importers skip like a carriage return."""


QUOTED = r'[,"\r\n]'
"""What makes :func:`csv.writer` (``excel``: ``QUOTE_MINIMAL``, ``\r\n``) quote a cell: the
delimiter, the quote, a character of the line end (a regular expression's class)."""


def safe_cell(value: object) -> object:
    """``value`` as a CSV cell that no spreadsheet runs: a ``str`` beginning with a character
    of :data:`FORMULA_START` gets a leading ``'``; anything else (numbers, None, an already
    harmless string) is returned unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def safe_row(values: Iterable[object]) -> list[object]:
    """:func:`safe_cell` of each value of a row."""
    return [safe_cell(v) for v in values]


class _Writable(Protocol):
    def write(self, text: str, /) -> Any: ...


class SafeWriter:
    """A :func:`csv.writer` (``excel`` dialect) whose rows go through :func:`safe_row`."""

    def __init__(self, f: _Writable) -> None:
        self._writer = csv.writer(f, dialect="excel")

    def writerow(self, row: Iterable[object]) -> None:
        self._writer.writerow(safe_row(row))

    def writerows(self, rows: Iterable[Iterable[object]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(f: _Writable) -> SafeWriter:
    """A CSV writer on ``f`` (opened with ``newline=""``) that neutralizes formula cells and
    quotes any cell with a line break (see the module docstring)."""
    return SafeWriter(f)
