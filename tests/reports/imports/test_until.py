"""One meaning of ``--until`` everywhere: a week or a day given as ``--until`` is taken in whole
(``runs`` and ``chargeback`` did; the imports stopped at its start)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reports.errors import UsageError
from reports.imports.commands import _moment


@pytest.mark.parametrize(
    ("text", "since", "until"),
    [
        ("2026-W47", datetime(2026, 11, 16, tzinfo=UTC), datetime(2026, 11, 23, tzinfo=UTC)),
        ("2026-11-16", datetime(2026, 11, 16, tzinfo=UTC), datetime(2026, 11, 17, tzinfo=UTC)),
        (
            "2026-11-16T08:00",
            datetime(2026, 11, 16, 8, tzinfo=UTC),
            datetime(2026, 11, 16, 8, tzinfo=UTC),
        ),
    ],
)
def test_a_week_or_a_day_as_until_is_taken_in_whole(
    text: str, since: datetime, until: datetime
) -> None:
    assert _moment(text, "--since") == since
    assert _moment(text, "--until", end=True) == until


def test_one_week_is_since_and_until_the_same_week() -> None:
    # --since 2026-W47 --until 2026-W47: the week W47 (before, an empty range and an error)
    assert _moment("2026-W47", "--since") < _moment("2026-W47", "--until", end=True)
    with pytest.raises(
        UsageError, match="--until: expected YYYY-Www, YYYY-MM-DD or YYYY-MM-DDTHH:MM"
    ):
        _moment("next week", "--until", end=True)
