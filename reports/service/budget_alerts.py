"""Budget alerts: when a team's spend in a week or month reaches 80% or 100% of its budget
(``[[budgets]]``), each recipient of the summary, and of that team's report, gets one alert per
(team, period, level, amount), by email or chat.

``serve`` checks every ``[service] budget_check_min`` minutes and after each weekly run (so a
``serve --once`` from cron checks too), the current week and month so far and the week and
month before, whole: spend that lands after a period's last check (an import, a late run) or
while the service is down at its end is still alerted. Alerts go through the delivery log like
the weekly reports: the kind is ``budget:<team>:<level>:<USD>`` (a budget changed in a current
period alerts anew against the new amount; a period that is over is alerted once a level,
whatever the amount) and the week column holds the period (``2026-W49``,
``2026-12``), so a restart, a second check or a second ``serve`` sends nothing twice, and a
temporary failure (a 4xx, a 429, no connection) is tried again at the next check.
A spend that passes both levels between two checks gets the 100% alert only; the 80% one is
logged ``empty`` ("covered"). A recipient opts out with ``budget_alerts = false``.

A failure here (the store, a bug) costs a warning, never the weekly report.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any

from reports.kpi.budgets import LEVELS, BudgetLine
from reports.service.config import Recipient, ServiceSettings
from reports.service.deliveries import FINAL, DeliveryLog, deliver
from reports.service.mailer import Mailer, config_fingerprint
from reports.service.outcomes import Outcome

if TYPE_CHECKING:
    from reports.render.chat import Card

log = logging.getLogger("gpu_kpi")

COVERED = "covered by the 100% alert"


def alert_kind(b: BudgetLine, level: int) -> str:
    """``budget:<team>:<level>:<USD, in cents>``: a budget changed in the period alerts anew
    against the new amount."""
    return f"budget:{b.team}:{level}:{b.budget_usd:.2f}"


def _sent_before(kind: str) -> str:
    """The kind without its amount: a period that is over was alerted at that level whatever
    the budget was then (today's amount was not in force all of it)."""
    return kind.rpartition(":")[0]


def alert_recipients(settings: ServiceSettings, team: str) -> list[Recipient]:
    """Who gets ``team``'s alerts: the summary's recipients and the team's, unless opted out."""
    return [
        r
        for r in settings.recipients
        if r.budget_alerts and (r.report == "summary" or (r.report == "team" and r.team == team))
    ]


def check_budgets(
    settings: ServiceSettings,
    req: Any,
    *,
    owner: str,
    now: datetime,
    open_mailer: Callable[[], Mailer | None],
    stop: threading.Event | None = None,
) -> list[Outcome]:
    """Alert what is due at ``now``; one :class:`Outcome` per alert tried or found done.
    ``req``: the service's report request (prices, zone); ``open_mailer``: called once, when
    an email is due (None: the SMTP settings cannot send, said already)."""
    from reports.budgets import current_lines
    from tracker.store import RunStore

    if not settings.budgets:
        return []
    try:
        with RunStore(settings.tracker.store) as store:
            lines = current_lines(store, req, settings.budgets, now=now, previous=True)
            due = [
                (b, r)
                for b in lines
                if b.level is not None
                for r in alert_recipients(settings, b.team)
            ]
            if not due:
                return []
            deliveries = DeliveryLog(store)
            fingerprint = config_fingerprint(settings.smtp)
            done = {
                (e.kind, e.week, e.recipient)
                for e in deliveries.entries()
                if e.kind.startswith("budget:")
                and e.status in FINAL
                and not e.owed_again(smtp_config=fingerprint)
            }
            done |= {(_sent_before(k), w, a) for k, w, a in done}
            due = [
                (b, r)
                for b, r in due
                if (
                    (_sent_before if b.complete else str)(alert_kind(b, b.level or 0)),
                    b.label,
                    r.address,
                )
                not in done
            ]
            mailer = open_mailer() if any(r.to is not None for _, r in due) else None
            out = []
            for b, r in due:
                if stop is not None and stop.is_set():
                    break
                if r.to is not None and mailer is None:
                    continue  # no SMTP: the error was logged; owed to the next check
                out += _alert(settings, deliveries, mailer, b, r, owner=owner, now=now)
    except Exception as e:  # the store, a bug: the alerts wait, nothing else does
        log.warning("gpu-kpi: budgets not checked: %s: %s", type(e).__name__, e)
        return []
    sent = sum(o.status == "sent" for o in out)
    if out:
        log.info("gpu-kpi: budget alerts: %d sent, %d not", sent, len(out) - sent)
    return out


def _alert(
    settings: ServiceSettings,
    deliveries: DeliveryLog,
    mailer: Mailer | None,
    b: BudgetLine,
    r: Recipient,
    *,
    owner: str,
    now: datetime,
) -> list[Outcome]:
    from reports.render.alerts import budget_card, budget_email

    assert b.level is not None
    kind = alert_kind(b, b.level)

    def make() -> EmailMessage | Card:
        if r.to is None:
            return budget_card(b, report_url=settings.report_url)
        return budget_email(
            b,
            sender=settings.smtp.sender,
            recipients=[r.to],
            report_url=settings.report_url,
            now=now,
        )

    sent = deliver(
        deliveries,
        kind,
        b.label,
        r,
        make,
        what=f"budget alert {kind} {b.label}",
        mailer=mailer,
        owner=owner,
        now=now,
        smtp_config=config_fingerprint(settings.smtp),
    )
    out = [sent]
    if sent.status == "sent":  # the lower levels passed at once: covered by this one
        for level in _below(b.level):
            lower = (alert_kind(b, level), b.label, r.address)
            if deliveries.claim(*lower, owner=owner, now=now):
                deliveries.finish(*lower, status="empty", now=now, error=COVERED)
                out.append(
                    Outcome(
                        kind=lower[0],
                        week=b.label,
                        recipient=r.address,
                        status="empty",
                        error=COVERED,
                    )
                )
    return out


def _below(level: int) -> Sequence[int]:
    return [lv for lv in LEVELS if lv < level]
