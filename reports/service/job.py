"""The weekly job behind ``gpu-kpi serve`` and ``serve --once``: build the last complete week's
report, archive it (HTML, email, JSON, CSV, index), then deliver it to each recipient once.

Deliveries go through the :mod:`reports.service.deliveries` log: a recipient is sent a week only after
claiming it there, so a restart, a second trigger or a second ``serve`` process sends nothing
twice. Weeks missed while the service was down are caught up once (at most
``catch_up_weeks`` back). The archive is written whatever happens to the mail, and a failure for
one recipient never stops the others.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reports.service.config import Recipient, ServiceSettings
from reports.service.deliveries import DeliveryLog, pending_weeks
from reports.service.mailer import Mailer, MailError, SmtpMailer, read_password
from reports.weeks import label_of, parse_week
from tracker.config import ConfigError

if TYPE_CHECKING:
    from reports.build import Computed, Request
    from reports.kpi import WeekKpis

log = logging.getLogger("gpu_kpi")


@dataclass(frozen=True, kw_only=True)
class Outcome:
    kind: str
    week: str
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
    errors: tuple[str, ...] = ()
    """What went wrong outside one delivery (no data, archive not writable, no password)."""

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def deferred(self) -> int:
        return self.count("deferred")


def weekly_job(settings: ServiceSettings) -> RunResult:
    """The scheduler's entry point (referenced by name from the persistent job store)."""
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


class Service:
    """``mailer``: where messages go (default: SMTP from the settings, the password read when
    :meth:`run` starts). ``owner``: this sender's name in the delivery log."""

    def __init__(self, settings: ServiceSettings, *, mailer: Mailer | None = None,
                 owner: str | None = None) -> None:
        self.settings = settings
        self._mailer = mailer
        self.owner = owner or _owner()

    # -- what is owed ---------------------------------------------------------------------------
    def latest_week(self, now: datetime) -> datetime:
        from reports.build import resolve_week

        return resolve_week(None, self.settings.tz, now)

    def candidates(self, now: datetime) -> list[str]:
        """The weeks a run at ``now`` may deliver, oldest first: the last complete week and up to
        ``catch_up_weeks`` before it."""
        latest = self.latest_week(now)
        n = self.settings.catch_up_weeks
        return [label_of(latest - timedelta(days=7 * i)) for i in range(n, -1, -1)]

    def owed(self, deliveries: DeliveryLog, now: datetime) -> dict[str, list[Recipient]]:
        """Week → the recipients still owed it."""
        weeks = self.candidates(now)
        out: dict[str, list[Recipient]] = {}
        for r in self.settings.recipients:
            for week in pending_weeks(deliveries.entries(kind=r.kind, recipient=r.to), weeks):
                out.setdefault(week, []).append(r)
        return out

    def overdue(self, now: datetime | None = None) -> bool:
        """Whether a recipient who was sent reports before is owed one now (the service was
        down when the schedule fired): ``serve`` then runs the job at once."""
        from tracker.store import RunStore

        now = now or datetime.now(UTC)
        with RunStore(self.settings.tracker.store) as store:
            deliveries = DeliveryLog(store)
            return any(deliveries.entries(kind=r.kind, recipient=r.to)
                       for rs in self.owed(deliveries, now).values() for r in rs)

    # -- the job ----------------------------------------------------------------------------------
    def run(self, now: datetime | None = None) -> RunResult:
        """Build, archive and deliver what is due at ``now`` (default: the current time)."""
        from reports.errors import ReportError
        from tracker.store import RunStore, StoreError

        now = now or datetime.now(UTC)
        s = self.settings
        try:
            with RunStore(s.tracker.store) as store:
                deliveries = DeliveryLog(store)
                owed = self.owed(deliveries, now)
                weeks = sorted({*owed, label_of(self.latest_week(now))})
                mailer, errors = self._open_mailer() if owed else (None, [])
                built: list[str] = []
                archived: list[Path] = []
                outcomes: list[Outcome] = []
                for label in weeks:
                    try:
                        week = self._build(label, now)
                    except ReportError as e:
                        errors.append(f"{label}: {e}")
                        log.error("gpu-kpi: no report for %s: %s", label, e)
                        continue
                    built.append(label)
                    archived += self._archive(week, errors)
                    for r in owed.get(label, []):
                        if mailer is not None:
                            outcomes.append(self._deliver(deliveries, mailer, r, week, now))
        except StoreError as e:
            log.error("gpu-kpi: the weekly report did not run: %s", e)
            return RunResult(errors=(str(e),))
        result = RunResult(weeks=tuple(built), archived=tuple(archived),
                           outcomes=tuple(outcomes), errors=tuple(errors))
        log.info("gpu-kpi: weekly report %s: %d sent, %d empty, %d deferred, %d failed, "
                 "%d skipped", ", ".join(built) or "none", result.count("sent"), result.count("empty"),
                 result.deferred, result.count("failed"), result.count("skipped"))
        return result

    def _open_mailer(self) -> tuple[Mailer | None, list[str]]:
        if self._mailer is not None:
            return self._mailer, []
        try:
            password = read_password(self.settings.smtp)
            return SmtpMailer(self.settings.smtp, password=password), []
        except ConfigError as e:  # no password, an unreadable password or CA file
            log.error("gpu-kpi: nothing mailed: %s", e)
            return None, [str(e)]

    def request(self, label: str) -> Request:
        """The report request of week ``label`` with this service's settings."""
        from reports.build import FORMATS, Request

        s = self.settings
        return Request(week=label, tz=s.tz, formats=FORMATS, basis=s.basis,
                       thresholds=s.thresholds(), report_url=s.report_url,
                       prices=s.tracker.prices)

    def _build(self, label: str, now: datetime) -> _Week:
        from reports.build import compute
        from reports.render.charts import charts

        computed = compute(self.settings.tracker.store, self.request(label), now=now)
        return _Week(label=label, computed=computed, images=charts(computed.kpis))

    def _archive(self, week: _Week, errors: list[str]) -> list[Path]:
        from reports.build import render, write_archive

        req = self.request(week.label)
        try:
            files = render(week.computed.kpis, req, images=week.images)
            return write_archive(Path(self.settings.out_dir).expanduser(), week.label, files,
                                 index=True)
        except OSError as e:
            errors.append(f"report.out_dir: {e}")
            log.error("gpu-kpi: the %s report was not archived: %s", week.label, e)
            return []

    # -- one recipient --------------------------------------------------------------------------
    def _deliver(self, deliveries: DeliveryLog, mailer: Mailer, r: Recipient, week: _Week,
                 now: datetime) -> Outcome:
        key = (r.kind, week.label, r.to)
        if not deliveries.claim(*key, owner=self.owner, now=now):
            return Outcome(kind=r.kind, week=week.label, recipient=r.to, status="skipped")
        status, error, message_id = "sent", None, None
        try:
            msg = self.message(r, week, now)
            if msg is None:
                status = "empty"
            else:
                message_id = msg["Message-ID"]
                mailer.send(msg, [r.to])
        except MailError as e:
            status, error = ("deferred" if e.temporary else "failed"), str(e)
            log.warning("gpu-kpi: %s for %s to %s %s: %s", r.kind, week.label, r.to,
                        "deferred" if e.temporary else "failed", e)
        except Exception as e:  # a bug in one recipient's message must not stop the others
            status, error = "failed", f"{type(e).__name__}: {e}"
            log.exception("gpu-kpi: %s for %s to %s failed", r.kind, week.label, r.to)
        deliveries.finish(*key, status=status, now=now, message_id=message_id, error=error)
        return Outcome(kind=r.kind, week=week.label, recipient=r.to, status=status, error=error)

    def message(self, r: Recipient, week: _Week, now: datetime) -> EmailMessage | None:
        """The email for ``r``, or None when it would be empty (no GPU time for the team, no
        underutilized runs of the user)."""
        from reports.render.charts import charts
        from reports.render.email import build_email, build_runs_email

        s = self.settings
        common: dict[str, Any] = {"tz": s.tz, "sender": s.smtp.sender, "recipients": [r.to],
                                  "report_url": s.report_url, "now": now}
        k = week.computed.kpis
        if r.report == "team":
            assert r.team is not None
            if r.team not in week.teams:
                week.teams[r.team] = self._team_kpis(week, r.team)
            tk = week.teams[r.team]
            if tk is None:
                return None
            return build_email(tk, charts(tk), scope=f"team {r.team}", **common)
        if r.report == "runs":
            assert r.user is not None
            return build_runs_email(k, r.user, **common)
        return build_email(k, week.images, **common)

    def _team_kpis(self, week: _Week, team: str) -> WeekKpis | None:
        from reports.kpi import kpis_of_gpu_time
        from tracker.prices import PriceTable

        c, s = week.computed, self.settings
        runs = c.runs[c.runs["team"] == team]
        gt = c.gpu_time[c.gpu_time["run_id"].isin(runs["id"])]
        tk = kpis_of_gpu_time(runs, gt, c.kpis.week, tz=s.tz, basis=s.basis,
                              thresholds=s.thresholds(), prices=PriceTable(s.tracker.prices))
        return tk if tk.headline.gpu_hours > 0 else None

    # -- one report now (``gpu-kpi send``) ------------------------------------------------------
    def send(self, label: str, to: Sequence[str], *, now: datetime | None = None,
             dry_run: Path | None = None) -> Path | None:
        """Mail the week's summary to ``to`` now, outside the schedule and the delivery log;
        ``dry_run``: write the message to ``<dry_run>/<week>.eml`` instead (returned)."""
        from reports.build import write_atomically
        from reports.render.email import build_email

        now = now or datetime.now(UTC)
        parse_week(label)
        week = self._build(label, now)
        s = self.settings
        msg = build_email(week.computed.kpis, week.images, tz=s.tz, sender=s.smtp.sender,
                          recipients=list(to), report_url=s.report_url, now=now)
        if dry_run is not None:
            dry_run.mkdir(parents=True, exist_ok=True)
            path = dry_run / f"{label}.eml"
            write_atomically(path, msg.as_bytes())
            return path
        mailer, errors = self._open_mailer()
        if mailer is None:
            raise ConfigError(errors[0])
        mailer.send(msg, list(to))
        return None

