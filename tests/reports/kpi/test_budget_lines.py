"""Budget lines by hand: the share used, the alert level, the straight-line forecast over
DST-exact months, and what the report says of each (:mod:`reports.kpi.budgets`,
:func:`reports.render.fmt.budget_row`); the calendar months of :mod:`reports.weeks`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from reports.kpi.budgets import BudgetLine
from reports.render.fmt import budget_row
from reports.weeks import month_label, month_start_of, shift_month

BERLIN = ZoneInfo("Europe/Berlin")
DEC = datetime(2026, 12, 1, tzinfo=UTC)
JAN = datetime(2027, 1, 1, tzinfo=UTC)


def line(
    spend: float,
    budget: float = 1000.0,
    *,
    until: datetime,
    start: datetime = DEC,
    end: datetime = JAN,
    period: str = "month",
) -> BudgetLine:
    return BudgetLine(
        team="nlp",
        period=period,
        label="2026-12",
        start=start,
        end=end,
        until=until,
        spend_usd=spend,
        budget_usd=budget,
    )


def test_used_level_and_forecast_by_hand() -> None:
    # $300 in the first 6 of December's 31 days: 30% used; at that rate 300 x 31 / 6 = $1,550
    b = line(300.0, until=DEC + timedelta(days=6))
    assert b.used_pct == pytest.approx(30.0)
    assert b.level is None
    assert b.forecast_usd == pytest.approx(1550.0)
    assert b.forecast_pct == pytest.approx(155.0)
    assert not b.complete


@pytest.mark.parametrize(
    ("spend", "level"), [(799.99, None), (800.0, 80), (999.0, 80), (1000.0, 100), (2500.0, 100)]
)
def test_the_level_is_the_highest_reached(spend: float, level: int | None) -> None:
    assert line(spend, until=DEC + timedelta(days=20)).level == level


def test_no_forecast_before_a_day_and_the_spend_itself_once_over() -> None:
    assert line(50.0, until=DEC + timedelta(hours=23, minutes=59)).forecast_usd is None
    assert line(50.0, until=DEC + timedelta(hours=24)).forecast_usd == pytest.approx(50.0 * 31)
    whole = line(640.0, until=JAN)
    assert whole.complete and whole.forecast_usd == 640.0


def test_a_dst_month_is_forecast_over_its_own_hours() -> None:
    """March 2026 in Berlin: 1 Mar 00:00 CET to 1 Apr 00:00 CEST is 743 h. $100 over its first
    10 days (240 h): 100 x 743 / 240 = $309.58."""
    start = month_start_of(datetime(2026, 3, 15, tzinfo=UTC), BERLIN)
    end = shift_month(start, BERLIN, 1)
    assert (end - start) == timedelta(hours=743)
    b = line(100.0, start=start, end=end, until=start + timedelta(days=10))
    assert b.forecast_usd == pytest.approx(100.0 * 743 / 240)
    # the same line with its times in Berlin (as the report makes them): the same 743 h
    local = line(
        100.0,
        start=start.astimezone(BERLIN),
        end=end.astimezone(BERLIN),
        until=(start + timedelta(days=10)).astimezone(BERLIN),
    )
    assert local.forecast_usd == pytest.approx(100.0 * 743 / 240)
    assert not local.complete


def test_months_in_a_zone() -> None:
    # 1 Dec 00:00 in Berlin is 30 Nov 23:00 UTC: that instant is in Berlin's December
    moment = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    start = month_start_of(moment, BERLIN)
    assert start == datetime(2026, 11, 30, 23, tzinfo=UTC)
    assert month_label(start, BERLIN) == "2026-12"
    assert shift_month(start, BERLIN, 1) == datetime(2026, 12, 31, 23, tzinfo=UTC)
    assert month_label(shift_month(start, BERLIN, 1), BERLIN) == "2027-01"
    assert shift_month(start, BERLIN, -12) == datetime(2025, 11, 30, 23, tzinfo=UTC)
    assert month_start_of(moment, UTC) == datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spend", "days", "status", "tone"),
    [
        (300.0, 6, "on course to exceed", "warn"),  # 30%, forecast 155%
        (100.0, 20, "within budget", "good"),  # 10%, forecast 15.5%
        (850.0, 28, "80% reached", "warn"),  # forecast 941: under
        (850.0, 20, "80% reached, on course to exceed", "warn"),
        (1200.0, 20, "over budget", "bad"),
    ],
)
def test_what_the_report_says(spend: float, days: int, status: str, tone: str) -> None:
    row = budget_row(line(spend, until=DEC + timedelta(days=days)))
    assert (row["status"], row["tone"]) == (status, tone)


def test_the_row_strings() -> None:
    row = budget_row(line(300.0, until=DEC + timedelta(days=6)))
    assert row == {
        "team": "nlp",
        "period": "December 2026 to 6 Dec",
        "spend": "$300.00",
        "budget": "$1,000.00",
        "used": "30%",
        "forecast": "$1,550.00 (155%)",
        "status": "on course to exceed",
        "tone": "warn",
        "meter": "30.0",
    }
    over = budget_row(line(1500.0, until=JAN))
    assert (over["period"], over["forecast"], over["meter"]) == ("December 2026", "—", "100.0")
    week = budget_row(
        BudgetLine(
            team="nlp",
            period="week",
            label="2026-W49",
            start=DEC,
            end=DEC + timedelta(days=7),
            until=DEC + timedelta(days=7),
            spend_usd=10.0,
            budget_usd=100.0,
        )
    )
    assert week["period"] == "week 2026-W49"
