"""Week maths: local calendar Mondays, each converted to UTC on its own."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from reports.weeks import (
    WeekError,
    parse_moment,
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


def test_a_moment_is_a_week_a_day_or_a_time_and_an_until_takes_in_the_day() -> None:
    assert parse_moment("2026-W48", BERLIN) == datetime(2026, 11, 23, tzinfo=BERLIN)
    assert parse_moment("2026-W48", BERLIN, end=True) == datetime(2026, 11, 30, tzinfo=BERLIN)
    assert parse_moment("2026-11-23", UTC, end=True) == utc("2026-11-24T00:00:00")
    assert parse_moment("2026-11-23T09:30", UTC, end=True) == utc("2026-11-23T09:30:00")
    assert parse_moment("2026-11-23T09:30+01:00", UTC) == utc("2026-11-23T08:30:00")


@pytest.mark.parametrize(
    "text",
    # the attacks' own: each an OverflowError traceback in mark --at and runs --since before
    ["0001-01-01T00:00+05:00", "9999-12-31T23:59-05:00", "9999-12-31", "1969-12-31"],
)
def test_a_moment_outside_the_years_is_a_week_error_not_an_overflow(text: str) -> None:
    with pytest.raises(WeekError, match="out of range: years 1970–9998"):
        parse_moment(text, UTC, end=True)


def test_the_commands_say_an_absurd_moment_in_one_line(tmp_path: Path) -> None:
    from clirun import gpu_kpi
    from fakes import run_record

    from tracker.store import RunStore

    store = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(store) as s:
        s.upsert_run(run_record("a", utc("2026-11-24T10:00:00"), 1))
    for args in (
        ("mark", "resnet", "loader", "--at", "0001-01-01T00:00+05:00"),
        ("runs", "--since", "9999-12-31T23:59-05:00"),
        ("compare", "resnet@0001-01-01T00:00+05:00..2026-11-30", "a"),
    ):
        p = gpu_kpi(*args, "--store", store)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.count("\n") == 1 and "out of range: years 1970–9998" in p.stderr, p.stderr
