"""Text on one line: an error's reason in a one-line error or a log line, a user's string (a run
or team name) in a subject, a table cell or a chat card."""

from __future__ import annotations

import re

_BREAKS = re.compile(r"[\s\x00-\x1f\x7f]+")
"""Whitespace (line and paragraph separators included) and control characters."""


def one_line(value: object, limit: int | None = None) -> str:
    """``value`` as one line of text.

    Bytes are decoded as UTF-8 (a bad byte becomes U+FFFD); an exception is its message, or its
    type's name when the message is blank. Every run of whitespace and control characters
    becomes one space, and the ends are stripped.

    Args:
        value: A string, bytes, an exception or anything ``str`` takes.
        limit: The most characters; a longer line is cut and ends in ``…``. None: no limit.

    Returns:
        The line.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        text = bytes(value).decode("utf-8", errors="replace")
    else:
        text = str(value)
    line = _BREAKS.sub(" ", text).strip()
    if not line and isinstance(value, BaseException):
        line = type(value).__name__
    if limit is not None and len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line


def storable(text: str) -> str:
    """``text`` as every store keeps it, the same on SQLite and PostgreSQL: a NUL (which
    PostgreSQL's text refuses) and a character UTF-8 cannot encode (a lone surrogate, as
    ``os.fsdecode`` makes of a non-UTF-8 file name) become U+FFFD.

    Args:
        text: A run's name, id, team, a GPU's UUID…

    Returns:
        The text, unchanged when it holds neither.
    """
    if "\x00" not in text:
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            pass
    try:
        raw = text.encode("utf-8", "surrogateescape")  # a file name's bytes, as they were
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "replace")
    return raw.decode("utf-8", "replace").replace("\x00", "\ufffd")
