"""What one run of the service did: an :class:`Outcome` per delivery (a weekly report, a budget
alert) and the :class:`RunResult` of a weekly run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

STOPPED = "not tried: the service was stopping; owed to the next run"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    kind: str
    """``summary``, ``team:<team>``, ``runs:<user>``; ``budget:<team>:<level>:<USD>`` for an alert."""
    week: str
    """The week (``2026-W49``), or an alert's budget period (``2026-W49``, ``2026-12``)."""
    recipient: str
    status: str
    """sent, empty, failed, deferred; or skipped (another sender has it or it was done)."""
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunResult:
    weeks: tuple[str, ...] = ()
    """The weeks built and archived."""
    archived: tuple[Path, ...] = ()
    outcomes: tuple[Outcome, ...] = ()
    """The weekly reports' deliveries (what :meth:`count` and :attr:`deferred` count)."""
    alerts: tuple[Outcome, ...] = ()
    """The budget alerts of the check after the run: apart, as the budget check tries its own
    again (a deferred alert is no reason to run the weekly job again)."""
    errors: tuple[str, ...] = ()
    """What went wrong outside one delivery (no data, archive not writable, no password)."""
    owed: Mapping[str, int] = field(default_factory=dict)
    """Week → recipients owed it when the run started (0 or absent: nothing owed)."""
    earlier: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Week → status (sent, empty, failed) → configured recipients whose delivery of that week
    was done before this run (nothing owed to them)."""
    stopped: bool = False
    """A stop (SIGTERM) came while the run ran: what it had not tried is left owed (``deferred``
    outcomes with :data:`STOPPED` as their error)."""

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def deferred(self) -> int:
        return self.count("deferred")
