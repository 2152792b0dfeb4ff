"""Unit conversions, and the times a reading can have, in one place. Names carry their units."""

from __future__ import annotations

BYTES_PER_GIB = 1024**3
J_PER_KWH = 3.6e6
WHOLE_S_PER_HOUR = 3600
"""Seconds in an hour where the arithmetic is whole numbers (calendars, epoch hours)."""
WHOLE_S_PER_DAY = 24 * WHOLE_S_PER_HOUR
S_PER_HOUR = float(WHOLE_S_PER_HOUR)
S_PER_DAY = float(WHOLE_S_PER_DAY)
RATIO_PER_PCT = 0.01
"""A percentage (0–100) times this is a ratio (0–1)."""
FIRST_YEAR, LAST_YEAR = 1970, 9998
"""The years a reading, a run or a report's week can be in: from the Unix epoch, and one year
short of ``datetime``'s end, so that a week after, a 12-week history and a zone's offset stay
representable."""
LAST_EPOCH_S = 253_370_764_800.0
"""9999-01-01 UTC in seconds since 1970, where :data:`LAST_YEAR` ends: a time at or after it is
no time a GPU was read (a 20-digit epoch, a year past 9998)."""


def bytes_to_gib(n: float) -> float:
    return n / BYTES_PER_GIB


def mib_to_gib(n: float) -> float:
    return n / 1024.0


def mw_to_w(n: float) -> float:
    return n / 1000.0


def mj_to_j(n: float) -> float:
    return n / 1000.0


def j_to_kwh(n: float) -> float:
    return n / J_PER_KWH


def s_to_hours(n: float) -> float:
    return n / S_PER_HOUR


NS_PER_S = 1e9


def ns_to_s(n: float) -> float:
    return n / NS_PER_S
