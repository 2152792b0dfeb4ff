"""ISO weeks (Monday 00:00 to Monday 00:00) in a report time zone."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tracker.units import FIRST_YEAR, LAST_YEAR


class WeekError(ValueError):
    """A bad week or time zone given by the user."""


_WEEK_RE = re.compile(r"([0-9]{4})-W([0-9]{2})")


def zone(name: str) -> tzinfo:
    """A time zone by IANA name (``UTC``, ``Europe/Berlin``); an unknown name is a WeekError."""
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: "Europe" is a folder
        raise WeekError(
            f"unknown time zone {name!r}: use an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None


def parse_week(text: str) -> tuple[int, int]:
    """``2026-W48`` → (2026, 48); a week that does not exist is a WeekError."""
    m = _WEEK_RE.fullmatch(text.strip())
    if not m:
        raise WeekError(f"bad week {text!r}: use YYYY-Www, e.g. 2026-W48")
    year, week = int(m.group(1)), int(m.group(2))
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise WeekError(f"week {text.strip()!r} is out of range: years {FIRST_YEAR}–{LAST_YEAR}")
    try:
        date.fromisocalendar(year, week, 1)
    except ValueError:
        raise WeekError(
            f"week {text!r} does not exist: {year} has "
            f"{date(year, 12, 28).isocalendar().week} ISO weeks"
        ) from None
    return year, week


def parse_moment(text: str, tz: tzinfo, *, end: bool = False, weeks: bool = True) -> datetime:
    """A moment a user gives (``--since``, ``--until``, ``--at``, a range's ends).

    Args:
        text: An ISO week (its Monday 00:00), a date (its 00:00) or a date and time.
        tz: The zone of a ``text`` that names no offset of its own.
        end: ``--until``: a week or a date is up to its end, included (``--until 2026-W47``
            takes in W47).
        weeks: Whether a week is accepted.

    Returns:
        The moment, timezone-aware.

    Raises:
        WeekError: Not such a moment, or outside the years :data:`tracker.units.FIRST_YEAR`
            to :data:`~tracker.units.LAST_YEAR` (in UTC as well: ``0001-01-01T00:00+05:00``
            is out of range, not an overflow).
    """
    text = text.strip()
    forms = (
        "YYYY-Www, YYYY-MM-DD or YYYY-MM-DDTHH:MM" if weeks else "YYYY-MM-DD or YYYY-MM-DDTHH:MM"
    )
    if weeks and _WEEK_RE.fullmatch(text.upper()):
        return week_bounds(*parse_week(text.upper()), tz)[1 if end else 0]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise WeekError(f"expected {forms}, got {text!r}") from None
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=tz)
    try:
        in_range = FIRST_YEAR <= moment.astimezone(UTC).year <= LAST_YEAR
    except OverflowError:  # beyond datetime's range once in UTC
        in_range = False
    if not in_range:
        raise WeekError(f"{text!r} is out of range: years {FIRST_YEAR}–{LAST_YEAR}")
    if end and len(text) == len("2026-11-16"):  # a day: through its end, as a week is
        moment += timedelta(days=1)
    return moment


def week_bounds(year: int, week: int, tz: tzinfo = UTC) -> tuple[datetime, datetime]:
    """[Monday 00:00, next Monday 00:00) of the ISO week in ``tz``, as aware datetimes."""
    monday = date.fromisocalendar(year, week, 1)
    start = datetime(monday.year, monday.month, monday.day, tzinfo=tz)
    nxt = monday + timedelta(days=7)
    return start, datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz)


def label_of(week_start: datetime) -> str:
    """``2026-W48`` for a week's start (Monday 00:00 in the report zone, as any aware instant,
    a ``pandas.Timestamp`` too): mid-week lies in the same ISO week whatever the zone."""
    year, week, _ = (week_start + timedelta(days=3, hours=12)).isocalendar()
    return week_label(year, week)


def week_label(year: int, week: int) -> str:
    """The label of ISO week ``week`` of ``year``.

    Args:
        year: The ISO year.
        week: The ISO week, 1 to 53.

    Returns:
        ``YYYY-Www``, e.g. ``2026-W48``.
    """
    return f"{year}-W{week:02d}"


def week_dates(label: str) -> str:
    """The days of a week, Monday to Sunday, as the reports show them.

    Args:
        label: The week, ``YYYY-Www``.

    Returns:
        ``23–29 Nov 2026``; ``30 Nov – 6 Dec 2026`` across months; ``28 Dec 2026 – 3 Jan
        2027`` across years.

    Raises:
        WeekError: ``label`` is not a week.
    """
    year, week = parse_week(label)
    monday, sunday = date.fromisocalendar(year, week, 1), date.fromisocalendar(year, week, 7)
    if monday.year != sunday.year:
        return f"{monday:%-d %b %Y} – {sunday:%-d %b %Y}"
    if monday.month != sunday.month:
        return f"{monday:%-d %b} – {sunday:%-d %b %Y}"
    return f"{monday:%-d}–{sunday:%-d %b %Y}"


def week_of(moment: datetime, tz: tzinfo = UTC) -> tuple[int, int]:
    iso = moment.astimezone(tz).isocalendar()
    return iso.year, iso.week


def last_complete_week(now: datetime, tz: tzinfo = UTC) -> tuple[int, int]:
    """The week before the one ``now`` falls in."""
    return week_of(now.astimezone(tz) - timedelta(days=7), tz)


def week_start_of(moment: datetime, tz: tzinfo = UTC) -> datetime:
    """Monday 00:00 in ``tz`` of the ISO week ``moment`` falls in, as an aware UTC datetime.
    Computed on the local calendar, so a daylight-saving change inside the week does not move
    it."""
    local = moment.astimezone(tz)
    monday = local.date() - timedelta(days=local.weekday())
    return datetime(monday.year, monday.month, monday.day, tzinfo=tz).astimezone(UTC)


def shift_week(week: datetime, tz: tzinfo, n: int) -> datetime:
    """The Monday 00:00 ``n`` weeks after ``week`` (a Monday 00:00 in ``tz``), in UTC."""
    return week_start_of(week + timedelta(days=7 * n, hours=12), tz)


def week_spans(start: datetime, end: datetime, tz: tzinfo) -> list[tuple[datetime, datetime]]:
    """The ISO weeks (in ``tz``) that [start, end) overlaps, as [Monday, next Monday) in UTC."""
    out = []
    w = week_start_of(start, tz)
    while w < end:
        nxt = shift_week(w, tz, 1)
        out.append((w, nxt))
        w = nxt
    return out


def weeks_between(start: datetime, end: datetime, tz: tzinfo) -> list[datetime]:
    """Monday 00:00 (in ``tz``, as UTC) of each ISO week that [start, end) overlaps."""
    return [w0 for w0, _ in week_spans(start, end, tz)]


# -- calendar months (budgets) ------------------------------------------------------------------
def month_start_of(moment: datetime, tz: tzinfo = UTC) -> datetime:
    """The 1st 00:00 in ``tz`` of the calendar month ``moment`` falls in, as an aware UTC
    datetime (on the local calendar, as :func:`week_start_of`)."""
    local = moment.astimezone(tz)
    return datetime(local.year, local.month, 1, tzinfo=tz).astimezone(UTC)


def shift_month(month: datetime, tz: tzinfo, n: int) -> datetime:
    """The 1st 00:00 ``n`` months after ``month`` (a 1st 00:00 in ``tz``), in UTC."""
    local = (month + timedelta(hours=12)).astimezone(tz)
    index = local.year * 12 + local.month - 1 + n
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=tz).astimezone(UTC)


def month_label(month_start: datetime, tz: tzinfo = UTC) -> str:
    """``2026-12`` for a month's start (the 1st 00:00 in ``tz``, as any aware instant)."""
    local = (month_start + timedelta(hours=12)).astimezone(tz)
    return f"{local.year}-{local.month:02d}"
