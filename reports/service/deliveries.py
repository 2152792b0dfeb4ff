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
- ``failed``: a permanent failure (5xx, refused address): not tried again for that week, unless
  it was a fault of the SMTP settings (authentication, TLS: the row keeps the settings'
  fingerprint in ``smtp_config``) and those settings have changed since, or ``serve
  --retry-failed`` asks.

A sender stopped by SIGTERM finishes the message in flight, then gives back its claims
(:meth:`DeliveryLog.release`) and logs what it did not try as ``deferred`` with 0 attempts
(:meth:`DeliveryLog.defer_unclaimed`): the next run sends those at once.

A sender that dies between the server's acceptance and the ``sent`` mark leaves a ``sending``
row; after the lease it is sent again. That window (milliseconds) is the only way to get two
copies; the alternative, never retrying a stale claim, would lose a report whenever a process is
killed while building it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from typing import TYPE_CHECKING

from reports.data import deliveries as sql
from reports.service.config import Recipient
from reports.service.mailer import Mailer, MailError
from reports.service.outcomes import STOPPED, Outcome
from tracker.store import RunStore
from tracker.units import S_PER_HOUR

if TYPE_CHECKING:
    from reports.render.chat import Card

log = logging.getLogger("gpu_kpi")

FINAL = ("sent", "empty", "failed")
STATUSES = ("sending", "deferred", *FINAL)
LEASE_S = S_PER_HOUR
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
    smtp_config: str | None = None
    """Fingerprint of the SMTP settings of a ``failed`` row that failed for their fault
    (:func:`reports.service.mailer.config_fingerprint`); None otherwise."""

    def owed_again(self, *, smtp_config: str | None = None, retry_failed: bool = False) -> bool:
        """A ``failed`` row that is owed once more: every one with ``retry_failed``, else one that
        failed for a fault of SMTP settings other than ``smtp_config`` (the current ones)."""
        if self.status != "failed":
            return False
        return retry_failed or (
            smtp_config is not None
            and self.smtp_config is not None
            and self.smtp_config != smtp_config
        )


class DeliveryLog:
    """The log in ``store``'s database (the table ``gpu_kpi_deliveries``, created when
    missing)."""

    def __init__(self, store: RunStore, *, lease_s: float = LEASE_S) -> None:
        self._store = store
        self._lease_s = lease_s
        sql.ensure_table(store)

    def claim(
        self,
        kind: str,
        week: str,
        recipient: str,
        *,
        owner: str,
        now: datetime,
        smtp_config: str | None = None,
        retry_failed: bool = False,
    ) -> bool:
        """True when this caller may send (and must then :meth:`finish` or :meth:`release`);
        False when another sender has it or it is done. A ``failed`` row is claimed again as
        :meth:`Delivery.owed_again` says."""
        return sql.claim(
            self._store,
            kind,
            week,
            recipient,
            owner=owner,
            now=now,
            lease_s=self._lease_s,
            smtp_config=smtp_config,
            retry_failed=retry_failed,
        )

    def finish(
        self,
        kind: str,
        week: str,
        recipient: str,
        *,
        status: str,
        now: datetime,
        message_id: str | None = None,
        error: str | None = None,
        smtp_config: str | None = None,
    ) -> None:
        """``smtp_config``: with ``failed``, the fingerprint of the SMTP settings at fault."""
        if status not in STATUSES or status == "sending":
            raise ValueError(f"not a final delivery status: {status!r}")
        sql.finish(
            self._store,
            kind,
            week,
            recipient,
            status=status,
            now=now,
            message_id=message_id,
            error=error,
            smtp_config=smtp_config if status == "failed" else None,
        )

    def release(
        self, kind: str, week: str, recipient: str, *, owner: str, now: datetime, error: str
    ) -> None:
        """Give back a claim that was not tried after all: ``deferred``, the attempt uncounted."""
        sql.release(self._store, kind, week, recipient, owner=owner, now=now, error=error)

    def defer_unclaimed(
        self, kind: str, week: str, recipient: str, *, owner: str, now: datetime, error: str
    ) -> bool:
        """Log an owed delivery that was not tried as ``deferred`` (0 attempts) unless it has a
        row already; True when it was logged."""
        return sql.defer_unclaimed(
            self._store, kind, week, recipient, owner=owner, now=now, error=error
        )

    def entries(self, *, kind: str | None = None, recipient: str | None = None) -> list[Delivery]:
        return [Delivery(**row) for row in sql.rows(self._store, kind=kind, recipient=recipient)]

    def counts(self) -> dict[tuple[str, str], int]:
        """(report, status) → deliveries; report is the kind without its team or user."""
        out: dict[tuple[str, str], int] = {}
        for (kind, status), n in sql.counts(self._store).items():
            key = (kind.partition(":")[0], status)
            out[key] = out.get(key, 0) + n
        return out


def pending_weeks(
    entries: Sequence[Delivery],
    candidates: Sequence[str],
    *,
    smtp_config: str | None = None,
    retry_failed: bool = False,
) -> list[str]:
    """Which of ``candidates`` (week labels, oldest first, the latest last) one recipient of one
    kind is still owed, given its log ``entries``: a recipient with no history gets only the
    latest week (no back issues), one with history every candidate since its first logged week
    that has no final entry, or a ``failed`` one that is owed again
    (:meth:`Delivery.owed_again` with ``smtp_config`` and ``retry_failed``)."""
    if not candidates:
        return []
    if not entries:
        return [candidates[-1]]
    done = {
        e.week
        for e in entries
        if e.status in FINAL
        and not e.owed_again(smtp_config=smtp_config, retry_failed=retry_failed)
    }
    first = min(e.week for e in entries)
    return [w for w in candidates if w >= first and w not in done]


def deliver(
    deliveries: DeliveryLog,
    kind: str,
    week: str,
    r: Recipient,
    make: Callable[[], EmailMessage | Card | None],
    *,
    what: str,
    mailer: Mailer | None,
    owner: str,
    now: datetime,
    smtp_config: str,
    retry_failed: bool = False,
    stopping: Callable[[], bool] = lambda: False,
    chat_until: float | None = None,
) -> Outcome:
    """Send one delivery through the log: claim it, make the message, send the email or post
    the card, and record how it went. A failure is recorded and logged, never raised, so one
    recipient's fault does not stop the others.

    Args:
        deliveries: The delivery log.
        kind: The delivery's kind (``summary``, ``team:<team>``, ``budget:…``).
        week: The week (``2026-W49``) or the alert's period (``2026-12``).
        r: The recipient: an email address (``r.to``) or a chat channel.
        make: Makes the email or the card; None: nothing to send (logged ``empty``).
        what: The delivery as log lines name it (``summary for 2026-W49``).
        mailer: Sends the email (needed when ``r.to`` is set).
        owner: This sender's name in the log.
        now: The time of the claim and the record (timezone-aware).
        smtp_config: The SMTP settings' fingerprint: a failure for their fault is recorded
            with it, and a row failed under other settings is claimed again.
        retry_failed: Claim a ``failed`` row again.
        stopping: True once the sender is stopping: a message made by then is not sent, its
            claim given back (``deferred``).
        chat_until: When (``time.monotonic``) the job's time for chat posts ends: a card
            after it is ``deferred`` to the next run, one before it gets what is left.

    Returns:
        The outcome: ``skipped`` when another sender has it or it was done.
    """
    from reports.render.chat import Card
    from reports.service.chat import CHAT_POST_S, post_card

    key = (kind, week, r.address)
    if not deliveries.claim(
        *key, owner=owner, now=now, smtp_config=smtp_config, retry_failed=retry_failed
    ):
        return Outcome(kind=kind, week=week, recipient=r.address, status="skipped")
    status, error, message_id, at_fault = "sent", None, None, None
    try:
        msg = make()
        if stopping():  # stopped while the message was being made: not in flight yet
            deliveries.release(*key, owner=owner, now=now, error=STOPPED)
            return Outcome(
                kind=kind, week=week, recipient=r.address, status="deferred", error=STOPPED
            )
        if msg is None:
            status = "empty"
        elif isinstance(msg, Card):
            left = None if chat_until is None else chat_until - time.monotonic()
            if left is not None and left <= 0:
                raise MailError(
                    "the weekly job's time for chat posts ran out: owed to the next run",
                    temporary=True,
                )
            total_s = CHAT_POST_S if left is None else min(CHAT_POST_S, left)
            post_card(r, msg, total_s=total_s, stopping=stopping)
        else:
            assert mailer is not None and r.to is not None
            message_id = msg["Message-ID"]
            mailer.send(msg, [r.to])
    except MailError as e:
        status, error = ("deferred" if e.temporary else "failed"), str(e)
        at_fault = smtp_config if e.config else None
        log.warning(
            "gpu-kpi: %s to %s %s: %s%s",
            what,
            r.address,
            status,
            e,
            "; a fault of the [smtp] settings: tried again when they change, or "
            "with serve --retry-failed"
            if e.config
            else "",
        )
    except Exception as e:  # a bug in one recipient's message must not stop the others
        status, error = "failed", f"{type(e).__name__}: {e}"
        log.exception("gpu-kpi: %s to %s failed", what, r.address)
    deliveries.finish(
        *key, status=status, now=now, message_id=message_id, error=error, smtp_config=at_fault
    )
    return Outcome(kind=kind, week=week, recipient=r.address, status=status, error=error)
