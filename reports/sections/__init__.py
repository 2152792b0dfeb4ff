"""The report's sections that are units of their own: one module each, registered here.

A section is one module that reads its typed part of the week (a :class:`reports.rows.Part`)
from the week's ledger (:class:`Week`: the KPIs the ledger made, and the store where it needs
more), and says how each format shows it: its view for the page and the email (display
strings made by :mod:`reports.render.fmt`), its JSON value, its CSV rows, its lines on the chat
card, and its team's part. The formats know the :class:`~reports.rows.Part` interface and none
of the sections; the page and the email include the section's partials
(``templates/_<name>.html.j2``, ``_<name>.email.html.j2``, ``_<name>.email.txt.j2``) in the
order of :data:`SECTIONS`.

A new section touches its module, its partials, its test and one line here
(ARCHITECTURE.md, "Adding a report section").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reports.sections import budgets, first, savings, scheduler, slownodes
from reports.sections.week import Week

if TYPE_CHECKING:
    from reports.rows import Part

__all__ = ["SECTIONS", "Section", "Week", "read_parts", "team_parts"]


@dataclass(frozen=True)
class Section:
    """A registered section: its name and how its part is read."""

    name: str
    read: Callable[[Week], Part]


SECTIONS: tuple[Section, ...] = (
    Section(first.FixFirst.name, first.read),
    Section(budgets.Budgets.name, budgets.read),
    Section(scheduler.Scheduler.name, scheduler.read),
    Section(savings.Savings.name, savings.read),
    Section(slownodes.SlowNodes.name, slownodes.read),
)
"""Every section that is a unit, in the order the page and the email show them."""


def read_parts(week: Week) -> dict[str, Part]:
    """Every section's part of ``week``, by name in :data:`SECTIONS`' order."""
    return {s.name: s.read(week) for s in SECTIONS}


def team_parts(parts: Mapping[str, Part], team: str) -> dict[str, Part]:
    """Each part of ``parts`` as ``team``'s report has it: the team's own rows only."""
    return {name: p.of_team(team) for name, p in parts.items()}
