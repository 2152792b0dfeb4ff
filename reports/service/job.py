"""The weekly job behind ``gpu-kpi serve`` and ``serve --once``: build the last complete week's
report, archive it (HTML, email, JSON, CSV, index), then deliver it to each recipient once.

Deliveries go through the :mod:`reports.service.deliveries` log: a recipient is sent a week only after
claiming it there, so a restart, a second trigger or a second ``serve`` process sends nothing
twice. Weeks missed while the service was down are caught up once (at most
``catch_up_weeks`` back). The archive is written whatever happens to the mail, and a failure for
one recipient never stops the others. A failure of the SMTP settings (authentication, TLS) is
tried again once they change (or with ``retry_failed``); a stop (SIGTERM) lets the message in
flight finish and leaves the rest owed to the next run at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reports.service.config import Recipient, ServiceSettings
from reports.service.deliveries import Delivery, DeliveryLog, deliver, pending_weeks
from reports.service.mailer import (
    Mailer,
    SmtpMailer,
    config_fingerprint,
    read_password,
)
from reports.service.outcomes import STOPPED, Outcome, RunResult
from reports.weeks import label_of
from tracker.config import ConfigError

if TYPE_CHECKING:
    from reports.build import Computed
    from reports.kpi import WeekKpis
    from reports.render.chat import Card
    from reports.request import Request

log = logging.getLogger("gpu_kpi")


def weekly_job(settings: ServiceSettings) -> RunResult:
    """The scheduler's default job (by name, ``reports.service.job:weekly_job``)."""
    return Service(settings).run()


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class _Week:
    """One week's computed report, and what the recipients' messages reuse."""

    label: str
    computed: Computed
    images: Mapping[str, bytes]
    teams: dict[str, WeekKpis | None] = field(default_factory=dict)
    team_images: dict[str, Mapping[str, bytes]] = field(default_factory=dict)


History = dict[tuple[str, str], list[Delivery]]
"""(kind, recipient) → its delivery log entries."""


class Service:
    """``mailer``: where messages go (default: SMTP from the settings, the password read when
    :meth:`run` starts). ``owner``: this sender's name in the delivery log. ``stop``: once set,
    :meth:`run` finishes the message in flight, tries no other and leaves them owed."""

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        mailer: Mailer | None = None,
        owner: str | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self._mailer = mailer
        self.owner = owner or _owner()
        self._stop = stop
        self._chat_until: float | None = None  # set by run(): when its time for cards ends

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    # -- what is owed ---------------------------------------------------------------------------
    def latest_week(self, now: datetime) -> datetime:
        from reports.request import resolve_week

        return resolve_week(None, self.settings.tz, now)

    def candidates(self, now: datetime) -> list[str]:
        """The weeks a run at ``now`` may deliver, oldest first: the last complete week and up to
        ``catch_up_weeks`` before it."""
        latest = self.latest_week(now)
        n = self.settings.catch_up_weeks
        return [label_of(latest - timedelta(days=7 * i)) for i in range(n, -1, -1)]

    def owed(
        self, deliveries: DeliveryLog, now: datetime, *, retry_failed: bool = False
    ) -> dict[str, list[Recipient]]:
        """Week → the recipients still owed it; a delivery that failed for a fault of other SMTP
        settings than today's is owed again, and with ``retry_failed`` every failed one."""
        return self._owed(
            _history(deliveries), now, config_fingerprint(self.settings.smtp), retry_failed
        )

    def _owed(
        self, history: History, now: datetime, smtp_config: str, retry_failed: bool
    ) -> dict[str, list[Recipient]]:
        weeks = self.candidates(now)
        out: dict[str, list[Recipient]] = {}
        for r in self.settings.recipients:
            for week in pending_weeks(
                history.get((r.kind, r.address), []),
                weeks,
                smtp_config=smtp_config,
                retry_failed=retry_failed,
            ):
                out.setdefault(week, []).append(r)
        return out

    def overdue(self, now: datetime | None = None) -> bool:
        """Whether a recipient who was sent reports before (or whose delivery was left owed by a
        stop) is owed one now, e.g. the service was down when the schedule fired: ``serve``
        then runs the job at once. The delivery log decides; no schedule is persisted."""
        from tracker.store import RunStore

        now = now or datetime.now(UTC)
        with RunStore(self.settings.tracker.store) as store:
            history = _history(DeliveryLog(store))
        owed = self._owed(history, now, config_fingerprint(self.settings.smtp), False)
        return any(history.get((r.kind, r.address)) for rs in owed.values() for r in rs)

    # -- the job ----------------------------------------------------------------------------------
    def run(self, now: datetime | None = None, *, retry_failed: bool = False) -> RunResult:
        """Build, archive and deliver what is due at ``now`` (default: the current time);
        ``retry_failed``: failed deliveries of the weeks in the catch-up window are owed again."""
        from reports.errors import ReportError
        from reports.service import chat
        from tracker.store import RunStore, StoreError

        started = datetime.now(UTC)
        now = now or started
        self._chat_until = time.monotonic() + chat.CHAT_JOB_S
        s = self.settings
        smtp_config = config_fingerprint(s.smtp)
        try:
            with RunStore(s.tracker.store) as store:
                deliveries = DeliveryLog(store)
                history = _history(deliveries)
                owed = self._owed(history, now, smtp_config, retry_failed)
                weeks = sorted({*owed, label_of(self.latest_week(now))})
                mailer, errors = self._open_mailer() if owed else (None, [])
                built: list[str] = []
                archived: list[Path] = []
                outcomes: list[Outcome] = []
                for label in weeks:
                    if self._stopping():
                        break
                    try:
                        week = self._build(label, now)
                    except ReportError as e:
                        errors.append(f"{label}: {e}")
                        log.error("gpu-kpi: no report for %s: %s", label, e)
                        continue
                    built.append(label)
                    archived += self._archive(week, errors)
                    for r in owed.get(label, []):  # a chat channel needs no mailer
                        if (mailer is not None or r.to is None) and not self._stopping():
                            outcomes.append(
                                self._deliver(
                                    deliveries,
                                    mailer,
                                    r,
                                    week,
                                    now,
                                    smtp_config=smtp_config,
                                    retry_failed=retry_failed,
                                )
                            )
                stopped = self._stopping()
                if stopped and mailer is not None:
                    outcomes += self._leave_owed(deliveries, owed, outcomes, now)
        except StoreError as e:
            log.error("gpu-kpi: the weekly report did not run: %s", e)
            return RunResult(errors=(str(e),))
        # a cron's serve --once checks the budgets too, at the time it has reached
        alerts = [] if stopped else self.budget_alerts(now + (datetime.now(UTC) - started))
        result = RunResult(
            weeks=tuple(built),
            archived=tuple(archived),
            outcomes=tuple(outcomes),
            alerts=tuple(alerts),
            errors=tuple(errors),
            owed={w: len(rs) for w, rs in owed.items()},
            earlier=self._earlier(history, owed, built),
            stopped=stopped,
        )
        log.info(
            "gpu-kpi: weekly report %s: %d sent, %d empty, %d deferred, %d failed, %d skipped%s",
            ", ".join(built) or "none",
            result.count("sent"),
            result.count("empty"),
            result.deferred,
            result.count("failed"),
            result.count("skipped"),
            "; stopped early" if stopped else "",
        )
        return result

    def budget_alerts(self, now: datetime | None = None) -> list[Outcome]:
        """Alert the teams' budgets that reached 80% or 100% (:mod:`.budget_alerts`)."""
        from reports.service.budget_alerts import check_budgets

        return check_budgets(
            self.settings,
            self.request(None),
            owner=self.owner,
            now=now or datetime.now(UTC),
            stop=self._stop,
            open_mailer=lambda: self._open_mailer()[0],
        )

    def _earlier(
        self, history: History, owed: Mapping[str, list[Recipient]], weeks: Sequence[str]
    ) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for week in weeks:
            owed_now = {(r.kind, r.address) for r in owed.get(week, [])}
            done = Counter(
                e.status
                for r in self.settings.recipients
                if (r.kind, r.address) not in owed_now
                for e in history.get((r.kind, r.address), [])
                if e.week == week
            )
            out[week] = dict(done)
        return out

    def _leave_owed(
        self,
        deliveries: DeliveryLog,
        owed: Mapping[str, list[Recipient]],
        tried: Sequence[Outcome],
        now: datetime,
    ) -> list[Outcome]:
        """After a stop: log each owed delivery not tried as ``deferred`` (0 attempts), so the
        next run, and ``overdue``, find it owed at once."""
        done = {(o.kind, o.week, o.recipient) for o in tried}
        out = []
        for week, recipients in sorted(owed.items()):
            for r in recipients:
                if (r.kind, week, r.address) not in done:
                    deliveries.defer_unclaimed(
                        r.kind, week, r.address, owner=self.owner, now=now, error=STOPPED
                    )
                    out.append(
                        Outcome(
                            kind=r.kind,
                            week=week,
                            recipient=r.address,
                            status="deferred",
                            error=STOPPED,
                        )
                    )
        if out:
            log.warning(
                "gpu-kpi: stopping: %d deliveries not tried, left owed to the next run", len(out)
            )
        return out

    def _open_mailer(
        self, *, total_s: float | None = None, retry: bool = True
    ) -> tuple[Mailer | None, list[str]]:
        if self._mailer is not None:
            return self._mailer, []
        smtp = self.settings.smtp if retry else replace(self.settings.smtp, retries=0)
        try:
            password = read_password(smtp)
            return SmtpMailer(smtp, password=password, total_s=total_s, stop=self._stop), []
        except ConfigError as e:  # no password, an unreadable password or CA file
            log.error("gpu-kpi: nothing mailed: %s", e)
            return None, [str(e)]

    def request(self, label: str | None) -> Request:
        """The report request of week ``label`` (None: the last complete week) with this
        service's settings."""
        from reports.request import FORMATS, Request

        s = self.settings
        return Request.from_settings(
            s.tracker,
            week=label,
            tz=s.tz,
            basis=s.basis,
            formats=FORMATS,
            report_url=s.report_url,
            budgets=s.budgets,
        )

    def _build(self, label: str, now: datetime) -> _Week:
        from reports.build import compute
        from reports.render.charts import charts

        computed = compute(self.settings.tracker.store, self.request(label), now=now)
        return _Week(label=label, computed=computed, images=charts(computed.kpis))

    def _archive(self, week: _Week, errors: list[str]) -> list[Path]:
        """The week's report, and a page per team that has a team recipient (their email
        links it: ``teams/<slug>/<week>.html``)."""
        from reports.archive import write_team_page
        from reports.build import write_week
        from reports.data.kpi_tables import publish_week
        from reports.render.email import report_link
        from reports.render.exports import to_dict
        from reports.render.html import render_html

        req = self.request(week.label)
        out = Path(self.settings.out_dir).expanduser()
        doc = to_dict(week.computed.kpis, req.tz)
        publish_week(self.settings.tracker.store, doc, now=week.computed.now)
        try:
            written = write_week(
                out, week.label, week.computed.kpis, req, index=True, images=week.images, week=doc
            )
            for team in dict.fromkeys(
                r.team
                for r in self.settings.recipients
                if r.report == "team" and r.team is not None
            ):
                tk = self._team(week, team)
                if tk is None:
                    continue
                page = render_html(
                    tk,
                    week.team_images[team],
                    title=f"GPU efficiency report — team {team}",
                    report_url=report_link(req.report_url, week.label, team),
                    fleet_url=report_link(req.report_url, week.label),
                )
                written += write_team_page(out, team, week.label, page.encode())
            return written
        except OSError as e:
            errors.append(f"report.out_dir: {e}")
            log.error("gpu-kpi: the %s report was not archived: %s", week.label, e)
            return []

    def _team(self, week: _Week, team: str) -> WeekKpis | None:
        """The team's KPIs of the week (and its charts), made once per week."""
        from reports.render.charts import charts

        if team not in week.teams:  # with what the week's report left out, said in every email
            tk = week.teams[team] = week.computed.team(self.request(week.label), team)
            if tk is not None:
                week.team_images[team] = charts(tk)
        return week.teams[team]

    # -- one recipient --------------------------------------------------------------------------
    def _deliver(
        self,
        deliveries: DeliveryLog,
        mailer: Mailer | None,
        r: Recipient,
        week: _Week,
        now: datetime,
        *,
        smtp_config: str,
        retry_failed: bool,
    ) -> Outcome:
        return deliver(
            deliveries,
            r.kind,
            week.label,
            r,
            lambda: self.message(r, week, now) if r.to is not None else self.card(r, week),
            what=f"{r.kind} for {week.label}",
            mailer=mailer,
            owner=self.owner,
            now=now,
            smtp_config=smtp_config,
            retry_failed=retry_failed,
            stopping=self._stopping,
            chat_until=self._chat_until,
        )

    def card(self, r: Recipient, week: _Week) -> Card | None:
        """The chat card for ``r`` (None when empty, as :meth:`message`)."""
        from reports.render.chat import chat_card

        s = self.settings
        if r.report == "team":
            assert r.team is not None
            tk = self._team(week, r.team)
            return (
                None
                if tk is None
                else chat_card(
                    tk, tz=s.tz, report_url=s.report_url, scope=f"team {r.team}", team=r.team
                )
            )
        return chat_card(
            week.computed.kpis,
            tz=s.tz,
            report_url=s.report_url,
            user=r.user if r.report == "runs" else None,
        )

    def message(
        self, r: Recipient, week: _Week, now: datetime, *, to: Sequence[str] | None = None
    ) -> EmailMessage | None:
        """The email for ``r`` (addressed to ``to``, default ``r.to``), or None when it would be
        empty (no GPU time for the team, no underutilized runs of the user)."""
        from reports.render.email import build_email, build_runs_email

        s = self.settings
        common: dict[str, Any] = {
            "tz": s.tz,
            "sender": s.smtp.sender,
            "recipients": list(to) if to is not None else [r.to],
            "report_url": s.report_url,
            "now": now,
        }
        k = week.computed.kpis
        if r.report == "team":
            assert r.team is not None
            tk = self._team(week, r.team)
            if tk is None:
                return None
            return build_email(
                tk, week.team_images[r.team], scope=f"team {r.team}", team=r.team, **common
            )
        if r.report == "runs":
            assert r.user is not None
            return build_runs_email(k, r.user, **common)
        return build_email(k, week.images, **common)


def _history(deliveries: DeliveryLog) -> History:
    out: History = {}
    for e in deliveries.entries():
        out.setdefault((e.kind, e.recipient), []).append(e)
    return out
