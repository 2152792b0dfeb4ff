"""Unit conversions, in one place. Names carry their units."""

from __future__ import annotations

BYTES_PER_GIB = 1024**3
J_PER_KWH = 3.6e6
S_PER_HOUR = 3600.0
RATIO_PER_PCT = 0.01
"""A percentage (0–100) times this is a ratio (0–1)."""


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
