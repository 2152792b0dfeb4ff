"""The real APScheduler: its trigger fires within the test, the job store lives in the run
store's database, and the delivery log keeps restarts and a second scheduler from sending twice."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import smtp_servers
import sqlalchemy as sa
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import SmtpServer
from test_job import CTO, NLP, add_week, settings

from reports.service.config import ServiceSettings
from reports.service.deliveries import DeliveryLog
from reports.service.job import RunResult, Service
from reports.service.scheduler import JOBS_TABLE, ServiceScheduler, next_fire_time, parse_schedule
from tracker.store import RunStore

pytestmark = pytest.mark.service  # real SMTP servers, schedulers, subprocesses: `make test`


class Results:
    """Collects each weekly run's result; ``wait(n)`` blocks until n have come."""

    def __init__(self) -> None:
        self.items: list[RunResult] = []
        self._cond = threading.Condition()

    def __call__(self, result: RunResult) -> None:
        with self._cond:
            self.items.append(result)
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 60.0) -> list[RunResult]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.items) >= n, timeout), self.items
            return list(self.items)


class HeldData:
    """Holds the first message at the test SMTP server's DATA command until ``release`` is set
    (60 s at most), and lets later ones through: its sender stays mid-send, the delivery claimed
    (``sending``) and not yet sent. ``arrived``: that message has reached DATA."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()
        take = smtp_servers._Handler.handle_DATA

        async def held(handler: Any, *args: Any) -> str:
            if not self.arrived.is_set():  # the server's one event loop: no race here
                self.arrived.set()
                await asyncio.to_thread(self.release.wait, 60.0)
            return await take(handler, *args)

        # aiosmtpd looks the hooks up per connection, so this holds the connections made after it
        monkeypatch.setattr(smtp_servers._Handler, "handle_DATA", held)


def run_scheduler(s: ServiceSettings, engine: object, *, run_now: bool = True,
                  runs: int = 1) -> tuple[list[RunResult], datetime | None]:
    """Start a real scheduler on ``engine``'s job store, wait for ``runs`` weekly runs, stop it;
    their results and the job's next run time at that point."""
    results = Results()
    scheduler = ServiceScheduler(s, engine, on_result=results)
    scheduler.start(run_now=run_now)
    try:
        return results.wait(runs), scheduler.next_run_time()
    finally:
        scheduler.shutdown()


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/runs.db"
    add_week(url, Service(ServiceSettings()).latest_week(datetime.now(UTC)))
    return url


def test_the_cron_schedule_is_monday_eight_in_the_report_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    after = datetime(2026, 11, 30, 7, 59, tzinfo=berlin)  # a Monday, a minute early
    assert next_fire_time("0 8 * * mon", berlin, after) == datetime(2026, 11, 30, 8, 0,
                                                                    tzinfo=berlin)
    nxt = next_fire_time("0 8 * * mon", berlin, after + timedelta(minutes=2))
    assert nxt == datetime(2026, 12, 7, 8, 0, tzinfo=berlin)
    assert nxt is not None and nxt.utcoffset() == timedelta(hours=1)
    # across the spring DST change, still 08:00 local
    spring = next_fire_time("0 8 * * mon", berlin, datetime(2027, 3, 24, tzinfo=berlin))
    assert spring == datetime(2027, 3, 29, 8, 0, tzinfo=berlin)
    assert spring is not None and spring.utcoffset() == timedelta(hours=2)
    with pytest.raises(ValueError, match="5 cron fields"):
        parse_schedule("0 8 * mon", "UTC")


def test_the_trigger_fires_archives_and_mails_once(tmp_path: Path, store: str,
                                                   smtp_server: SmtpServer) -> None:
    s = settings(tmp_path, store, smtp_server, CTO, NLP)
    with RunStore(store) as st:
        (first,), next_run = run_scheduler(s, st.engine)
    assert [o.status for o in first.outcomes] == ["sent", "sent"]
    assert sorted(m.rcpt_tos[0] for m in smtp_server.messages) == [CTO.to, NLP.to]
    assert (tmp_path / "archive" / f"{first.weeks[-1]}.html").exists()
    # after the immediate run, the job waits for the next Monday 08:00 (UTC here)
    now = datetime.now(UTC)
    assert next_run is not None and next_run.weekday() == 0 and next_run.hour == 8
    assert now < next_run <= now + timedelta(days=7)

    # a restart on the same job store: one job, and running it again sends nothing
    with RunStore(store) as st:
        (second,), _ = run_scheduler(s, st.engine)
        with st.engine.connect() as conn:
            jobs = conn.execute(sa.text(f"SELECT id FROM {JOBS_TABLE}")).scalars().all()
    assert second.outcomes == () and len(smtp_server.messages) == 2
    assert jobs == ["gpu-kpi-weekly-report"]


def test_a_run_missed_while_down_fires_on_restart(tmp_path: Path, store: str,
                                                  smtp_server: SmtpServer) -> None:
    """The job store says the weekly run was due five minutes ago (the service was down at
    08:00): within the misfire grace, the restarted scheduler runs it once."""
    from apscheduler.job import Job
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    from reports.service.scheduler import JOB_ID, WEEKLY_JOB

    s = settings(tmp_path, store, smtp_server, CTO)
    with RunStore(store) as st:
        # what a service that stopped before 08:00 left in the job store
        jobs = SQLAlchemyJobStore(engine=st.engine, tablename=JOBS_TABLE)
        owner = BackgroundScheduler(timezone=UTC)
        jobs.start(owner, "default")
        jobs.add_job(Job(owner, id=JOB_ID, func=WEEKLY_JOB, trigger=parse_schedule(s.schedule, UTC),
                         executor="default", args=(), kwargs={"settings": s}, name="weekly",
                         misfire_grace_time=3600, coalesce=True, max_instances=1,
                         next_run_time=datetime.now(UTC) - timedelta(minutes=5)))

        # no run_now: the stored, missed run is what fires
        (missed,), next_run = run_scheduler(s, st.engine, run_now=False)
    assert [o.status for o in missed.outcomes] == ["sent"]
    assert [m.rcpt_tos for m in smtp_server.messages] == [[CTO.to]]
    assert next_run is not None and next_run > datetime.now(UTC)


def test_overdue_only_for_recipients_with_history(tmp_path: Path, store: str,
                                                  smtp_server: SmtpServer) -> None:
    s = settings(tmp_path, store, smtp_server, CTO)
    now = datetime.now(UTC)
    assert Service(s).overdue(now) is False  # a first start owes nothing
    Service(s).run(now=now - timedelta(days=7))  # the week before was sent
    assert Service(s).overdue(now) is True  # the last week was missed
    Service(s).run(now=now)
    assert Service(s).overdue(now) is False


def test_a_second_scheduler_fired_mid_send_skips_then_owes_nothing(
        tmp_path: Path, store_url: str, smtp_server: SmtpServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two schedulers on one job store each fire the job (APScheduler 3 does not coordinate
    them). The second fires while the first is held at the SMTP server's DATA, its delivery
    claimed and not yet sent: it finds the claim and skips. Fired again once the first has sent,
    it finds nothing owed. One email in all; on SQLite and on PostgreSQL."""
    add_week(store_url, Service(ServiceSettings()).latest_week(datetime.now(UTC)))
    # a held DATA must not time out the sender
    s = replace(settings(tmp_path, store_url, smtp_server, CTO),
                smtp=smtp_server.settings(timeout_s=60.0))
    held = HeldData(monkeypatch)
    first, second = Results(), Results()
    with RunStore(store_url) as st_a, RunStore(store_url) as st_b:
        a = ServiceScheduler(s, st_a.engine, on_result=first)
        b = ServiceScheduler(s, st_b.engine, on_result=second)
        try:
            a.start(run_now=True)
            assert held.arrived.wait(60), "the first scheduler never reached DATA"
            moved_on = a.next_run_time()  # a fired and moved the job to next Monday
            b.start(run_now=True)
            (mid_send,) = second.wait(1)
            held.release.set()
            (sent,) = first.wait(1)
            b.run_now()
            _, after = second.wait(2)
        finally:
            held.release.set()
            a.shutdown()
            b.shutdown()
        entries = DeliveryLog(st_a).entries()
    assert moved_on is not None and moved_on > datetime.now(UTC)
    assert [o.status for o in mid_send.outcomes] == ["skipped"]
    assert [o.status for o in sent.outcomes] == ["sent"]
    assert after.outcomes == () and after.weeks == sent.weeks
    assert (len(first.items), len(second.items)) == (1, 2)
    assert [m.rcpt_tos for m in smtp_server.messages] == [[CTO.to]]
    assert [(e.recipient, e.status, e.attempts) for e in entries] == [(CTO.to, "sent", 1)]


def test_a_temporary_failure_is_retried_soon(tmp_path: Path, store: str,
                                             smtp_server_factory: object) -> None:
    server = smtp_server_factory(data_replies=["451 4.3.0 try again later"])  # type: ignore[operator]
    s = settings(tmp_path, store, server, CTO, retry_after_min=1 / 60)  # 1 s
    with RunStore(store) as st:
        (first, retry), _ = run_scheduler(s, st.engine, runs=2)
    assert [o.status for o in first.outcomes] == ["deferred"]
    assert [o.status for o in retry.outcomes] == ["sent"]
    assert len(server.messages) == 1
