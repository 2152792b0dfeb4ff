"""The importers' calendar arithmetic against Python's own dates."""

from __future__ import annotations

import calendar
from datetime import date, timedelta

import numpy as np

from reports.imports.civil import MONTH_DAYS, civil_from_days, days_from_civil, is_leap

EPOCH = date(1970, 1, 1).toordinal()


def test_days_and_dates_are_pythons_both_ways() -> None:
    rng = np.random.default_rng(7)
    # every day of the years around the edges that break formulas (1600, 1700, 1900, 2000,
    # 2100: centuries leap or not), and random days from year 1 to 9999
    days = [
        date(y, 1, 1).toordinal() + i for y in (1600, 1700, 1900, 2000, 2100) for i in range(731)
    ]
    days += rng.integers(date(1, 1, 1).toordinal(), date(9999, 12, 31).toordinal(), 20_000).tolist()
    dates = [date.fromordinal(d) for d in days]
    y = np.array([x.year for x in dates], dtype=np.int64)
    m = np.array([x.month for x in dates], dtype=np.int64)
    d = np.array([x.day for x in dates], dtype=np.int64)
    since = np.array(days, dtype=np.int64) - EPOCH
    assert (days_from_civil(y, m, d) == since).all()
    y2, m2, d2 = civil_from_days(since)
    assert (y2 == y).all() and (m2 == m).all() and (d2 == d).all()


def test_months_and_leap_years() -> None:
    years = np.arange(1, 10_000, dtype=np.int64)
    assert is_leap(years).tolist() == [calendar.isleap(int(y)) for y in years]
    assert [int(MONTH_DAYS[m]) for m in range(1, 13)] == [
        calendar.monthrange(2026, m)[1] for m in range(1, 13)
    ]
    one = days_from_civil(np.array([2026]), np.array([12]), np.array([7]))
    assert date(1970, 1, 1) + timedelta(days=int(one[0])) == date(2026, 12, 7)
