"""Week maths: local calendar Mondays, each converted to UTC on its own."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from reports.weeks import shift_week, week_spans, week_start_of, weeks_between

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
