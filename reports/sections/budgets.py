"""The budgets section: each team's spend against its ``[[budgets]]``, for the week and the
month the week ends in (:func:`reports.budgets.week_lines`), on the page, in the email, the
JSON (``budgets``), the CSV (section ``budget``) and, when one is reached or on course to be,
the chat card."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, ClassVar

from reports.kpi.budgets import BudgetLine
from reports.render.email import MAX_NAME_CHARS
from reports.render.exports import plain
from reports.render.fmt import budget_row
from tracker.text import one_line

if TYPE_CHECKING:
    from reports.sections.week import Week

BUDGET_FIELDS = (
    "spend_usd",
    "budget_usd",
    "used_pct",
    "forecast_usd",
    "forecast_pct",
    "level",
    "complete",
)
"""A budget line's figures in the CSV, each as ``<label>:<field>`` (``complete`` 1 or 0)."""


@dataclass(frozen=True)
class Budgets:
    """The week's budget lines, by team."""

    lines: tuple[BudgetLine, ...] = ()
    name: ClassVar[str] = "budgets"
    place: ClassVar[str] = "top"

    def of_team(self, team: str) -> Budgets:
        return Budgets(tuple(b for b in self.lines if b.team == team))

    def view(self, *, brief: bool = False) -> Mapping[str, Any] | None:
        if not self.lines:
            return None
        rows = [budget_row(b) for b in self.lines]
        if brief:
            rows = [{**r, "team": one_line(r["team"], MAX_NAME_CHARS)} for r in rows]
        return {"rows": rows}

    def summary(self) -> list[tuple[str, str, str]]:
        return []

    def document(self, tz: tzinfo) -> dict[str, Any]:
        return {"budgets": [plain(b.as_dict()) for b in self.lines]}

    def csv_rows(self, doc: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
        for row in doc["budgets"]:
            yield (
                "budget",
                row["team"],
                {
                    f"{row['label']}:{f}": int(row[f]) if f == "complete" else row[f]
                    for f in BUDGET_FIELDS
                },
            )

    def card_lines(self) -> list[str]:
        # a budget reached or on course to be
        flagged = [
            r for r in (self.view(brief=True) or {"rows": []})["rows"] if r["tone"] != "good"
        ]
        if not flagged:
            return []
        return [
            "Budgets:",
            *(
                f"{b['team']}, {b['period']}: {b['spend']} of {b['budget']}"
                f" ({b['used']}), {b['status']}"
                for b in flagged
            ),
        ]


def read(week: Week) -> Budgets:
    """The budget lines of ``week`` for its request's ``[[budgets]]`` (none without)."""
    from reports.budgets import week_lines

    if not week.req.budgets:
        return Budgets()
    return Budgets(week_lines(week.store_url, week.req, week.kpis, now=week.now))
