"""The delivery log: one row per (report kind, week, recipient), in the run store's database, so
that each report reaches each recipient once whatever restarts, triggers or processes race.

A sender *claims* a row before sending, in one transaction: the insert succeeds for exactly one
claimer (the primary key), and a row can be claimed again only when its last attempt failed for
a temporary reason (``deferred``) or its claim went stale (the sender died mid-send, ``sending``
for longer than the lease). Statuses:

- ``sending``: claimed, being sent;
- ``sent``: the SMTP server accepted it;
- ``empty``: nothing to send this week (an engineer with no underutilized runs);
- ``deferred``: a temporary failure (4xx, server unreachable): the next run tries again;
- ``failed``: a permanent failure (5xx, refused address): not tried again for that week.

A sender that dies between the server's acceptance and the ``sent`` mark leaves a ``sending``
row; after the lease it is sent again. That window (milliseconds) is the only way to get two
copies; the alternative, never retrying a stale claim, would lose a report whenever a process is
killed while building it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from tracker.store import RunStore
from tracker.store import deliveries as sql

FINAL = ("sent", "empty", "failed")
STATUSES = ("sending", "deferred", *FINAL)
LEASE_S = 3600.0
"""How long a claim holds: longer than any send with its retries."""


@dataclass(frozen=True, kw_only=True)
class Delivery:
    kind: str
    week: str
    recipient: str
    status: str
    attempts: int
    claimed_by: str
    claimed_at: datetime
    finished_at: datetime | None
    message_id: str | None
    error: str | None


class DeliveryLog:
    """The log in ``store``'s database (the table ``gpu_kpi_deliveries``, created when
    missing)."""

    def __init__(self, store: RunStore, *, lease_s: float = LEASE_S) -> None:
        self._store = store
        self._lease_s = lease_s
        sql.ensure_table(store)

    def claim(self, kind: str, week: str, recipient: str, *, owner: str, now: datetime) -> bool:
        """True when this caller may send (and must then :meth:`finish`); False when another
        sender has it or it is done."""
        return sql.claim(self._store, kind, week, recipient, owner=owner, now=now,
                         lease_s=self._lease_s)

    def finish(self, kind: str, week: str, recipient: str, *, status: str, now: datetime,
               message_id: str | None = None, error: str | None = None) -> None:
        if status not in STATUSES or status == "sending":
            raise ValueError(f"not a final delivery status: {status!r}")
        sql.finish(self._store, kind, week, recipient, status=status, now=now,
                   message_id=message_id, error=error)

    def entries(self, *, kind: str | None = None, recipient: str | None = None) -> list[Delivery]:
        return [Delivery(**row) for row in sql.rows(self._store, kind=kind, recipient=recipient)]

    def counts(self) -> dict[tuple[str, str], int]:
        """(report, status) → deliveries; report is the kind without its team or user."""
        out: dict[tuple[str, str], int] = {}
        for (kind, status), n in sql.counts(self._store).items():
            key = (kind.partition(":")[0], status)
            out[key] = out.get(key, 0) + n
        return out


def pending_weeks(entries: Sequence[Delivery], candidates: Sequence[str]) -> list[str]:
    """Which of ``candidates`` (week labels, oldest first, the latest last) one recipient of one
    kind is still owed, given its log ``entries``: a recipient with no history gets only the
    latest week (no back issues), one with history every candidate since its first logged week
    that has no final entry."""
    if not candidates:
        return []
    if not entries:
        return [candidates[-1]]
    done = {e.week for e in entries if e.status in FINAL}
    first = min(e.week for e in entries)
    return [w for w in candidates if w >= first and w not in done]
