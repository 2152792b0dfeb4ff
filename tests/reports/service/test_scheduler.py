"""The real APScheduler: its trigger fires within the test, the job store lives in the run
store's database, and the delivery log keeps restarts and a second scheduler from sending twice."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import SmtpServer
from test_job import CTO, NLP, add_week, settings

from reports.service.config import ServiceSettings
from reports.service.job import RunResult, Service
from reports.service.scheduler import JOBS_TABLE, ServiceScheduler, next_fire_time, parse_schedule
from tracker.store import RunStore


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


def test_two_schedulers_on_one_database_send_once(tmp_path: Path, store_url: str,
                                                  smtp_server: SmtpServer) -> None:
    """Both fire the job when they see it due (APScheduler 3 does not coordinate schedulers
    sharing a job store; the first to run it may also move it on before the other looks): in
    every case, one email. On SQLite and on PostgreSQL."""
    store = store_url
    add_week(store, Service(ServiceSettings()).latest_week(datetime.now(UTC)))
    s = settings(tmp_path, store, smtp_server, CTO)
    results = Results()
    stores = [RunStore(store), RunStore(store)]
    schedulers = [ServiceScheduler(s, st.engine, on_result=results) for st in stores]
    try:
        for scheduler in schedulers:
            scheduler.start(run_now=True)
        results.wait(1)
        time.sleep(2)  # room for the other scheduler's run, if it fires
    finally:
        for scheduler in schedulers:
            scheduler.shutdown()
        for st in stores:
            st.close()
    statuses = sorted(o.status for r in results.items for o in r.outcomes)
    assert statuses in (["sent"], ["sent", "skipped"])  # a loser found it claimed or done
    assert [m.rcpt_tos for m in smtp_server.messages] == [[CTO.to]]


def test_a_temporary_failure_is_retried_soon(tmp_path: Path, store: str,
                                             smtp_server_factory: object) -> None:
    server = smtp_server_factory(data_replies=["451 4.3.0 try again later"])  # type: ignore[operator]
    s = settings(tmp_path, store, server, CTO, retry_after_min=1 / 60)  # 1 s
    with RunStore(store) as st:
        (first, retry), _ = run_scheduler(s, st.engine, runs=2)
    assert [o.status for o in first.outcomes] == ["deferred"]
    assert [o.status for o in retry.outcomes] == ["sent"]
    assert len(server.messages) == 1
