"""Week maths: local calendar Mondays, each converted to UTC on its own."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from reports.weeks import (
    WeekError,
    shift_week,
    week_dates,
    week_spans,
    week_start_of,
    weeks_between,
)

BERLIN = ZoneInfo("Europe/Berlin")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_week_start_is_monday_midnight_local_across_dst() -> None:
    # 2026-03-29: Europe/Berlin springs forward; the week of Thursday 2 April starts Monday 30
    assert week_start_of(utc("2026-04-02T12:00:00"), BERLIN) == utc("2026-03-29T22:00:00")  # CEST
    assert week_start_of(utc("2026-03-29T12:00:00"), BERLIN) == utc("2026-03-22T23:00:00")  # CET
    # Sunday 23:30 UTC is already Monday 00:30 in Berlin (CET): the next week
    assert week_start_of(utc("2026-03-22T23:30:00"), BERLIN) == utc("2026-03-22T23:00:00")


def test_weeks_with_a_dst_change_have_167_or_169_hours() -> None:
    spring = week_start_of(utc("2026-03-25T12:00:00"), BERLIN)  # W13: Mon 23 March
    autumn = week_start_of(utc("2026-10-21T12:00:00"), BERLIN)  # W43: Mon 19 October
    assert (shift_week(spring, BERLIN, 1) - spring).total_seconds() == 167 * 3600
    assert (shift_week(autumn, BERLIN, 1) - autumn).total_seconds() == 169 * 3600
    assert shift_week(shift_week(autumn, BERLIN, 1), BERLIN, -1) == autumn


def test_week_spans_cover_the_interval_without_gaps() -> None:
    spans = week_spans(utc("2026-10-20T00:00:00"), utc("2026-11-03T00:00:00"), BERLIN)
    assert [a for a, _ in spans] == [
        utc("2026-10-18T22:00:00"),
        utc("2026-10-25T23:00:00"),
        utc("2026-11-01T23:00:00"),
    ]
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(spans))
    assert weeks_between(utc("2026-10-20T00:00:00"), utc("2026-10-21T00:00:00"), UTC) == [
        utc("2026-10-19T00:00:00")
    ]


def test_the_dates_of_a_week_name_the_month_and_year_once_unless_they_change() -> None:
    assert week_dates("2026-W48") == "23–29 Nov 2026"
    assert week_dates("2026-W49") == "30 Nov – 6 Dec 2026"
    assert week_dates("2026-W53") == "28 Dec 2026 – 3 Jan 2027"
    with pytest.raises(WeekError):
        week_dates("2027-W53")  # 2027 has 52 ISO weeks
