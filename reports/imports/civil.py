"""Calendar arithmetic on numpy arrays of proleptic Gregorian dates, after Howard Hinnant's
``days_from_civil`` and ``civil_from_days`` (https://howardhinnant.github.io/date_algorithms.html):
the importers make times from their digits, no ``datetime`` per value."""

from __future__ import annotations

import numpy as np

MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
"""The days of each month (1-12; index 0 unused), February of a common year."""


def is_leap(year: np.ndarray) -> np.ndarray:
    """Whether each year is a leap year."""
    return (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))


def days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of the dates ``y``-``m``-``d`` (int64 arrays; months 1-12)."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def civil_from_days(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Year, month (1-12) and day of each of ``days`` since 1970-01-01 (int64)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    return yoe + era * 400 + (month <= 2), month, day
