"""The real APScheduler: its trigger fires within the test, the schedule lives in memory only
(nothing is read from the run store's database, which every tracker can write: a pickle planted
there never runs), and the delivery log keeps restarts and a second scheduler from sending
twice, and tells a restart what was missed."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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

from reports.data.deliveries import has_table
from reports.service.config import ServiceSettings
from reports.service.deliveries import DeliveryLog
from reports.service.job import RunResult, Service
from reports.service.scheduler import JOB_ID, ServiceScheduler, next_fire_time, parse_schedule
from reports.service.serve import OLD_JOBS_TABLE, serve_forever
from reports.weeks import label_of
from tracker.store import RunStore

pytestmark = pytest.mark.service  # real SMTP servers, schedulers, subprocesses: `make test`


class Results:
    """Collects each weekly run's result; ``wait(n)`` blocks until n have come."""

    def __init__(self) -> None:
        self.items: list[RunResult] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()

    def __call__(self, result: RunResult) -> None:
        with self._cond:
            self.items.append(result)
            self._cond.notify_all()

    def failed(self, error: BaseException) -> None:
        with self._cond:
            self.error = error
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 60.0) -> list[RunResult]:
        with self._cond:
            done = self._cond.wait_for(lambda: len(self.items) >= n or self.error, timeout)
            if self.error is not None:
                raise self.error
            assert done, self.items
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


def run_scheduler(
    s: ServiceSettings, *, run_now: bool = True, runs: int = 1
) -> tuple[list[RunResult], datetime | None]:
    """Start a real scheduler, wait for ``runs`` weekly runs, stop it; their results and the
    job's next run time at that point."""
    results = Results()
    scheduler = ServiceScheduler(s, on_result=results)
    scheduler.start(run_now=run_now)
    try:
        return results.wait(runs), scheduler.next_run_time()
    finally:
        scheduler.shutdown()


@contextmanager
def serving(s: ServiceSettings, results: Results) -> Iterator[threading.Event]:
    """``serve_forever`` on a thread until the block ends; yields its stop event (set at the end
    of the block in any case). An exception of ``serve_forever`` is raised here."""
    stop = threading.Event()

    def serve() -> None:
        try:
            serve_forever(s, stop=stop, on_result=results)
        except BaseException as e:
            results.failed(e)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    if results.error is not None:
        raise results.error


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/runs.db"
    add_week(url, Service(ServiceSettings()).latest_week(datetime.now(UTC)))
    return url


def test_the_cron_schedule_is_monday_eight_in_the_report_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    after = datetime(2026, 11, 30, 7, 59, tzinfo=berlin)  # a Monday, a minute early
    assert next_fire_time("0 8 * * mon", berlin, after) == datetime(
        2026, 11, 30, 8, 0, tzinfo=berlin
    )
    nxt = next_fire_time("0 8 * * mon", berlin, after + timedelta(minutes=2))
    assert nxt == datetime(2026, 12, 7, 8, 0, tzinfo=berlin)
    assert nxt is not None and nxt.utcoffset() == timedelta(hours=1)
    # across the spring DST change, still 08:00 local
    spring = next_fire_time("0 8 * * mon", berlin, datetime(2027, 3, 24, tzinfo=berlin))
    assert spring == datetime(2027, 3, 29, 8, 0, tzinfo=berlin)
    assert spring is not None and spring.utcoffset() == timedelta(hours=2)
    with pytest.raises(ValueError, match="5 cron fields"):
        parse_schedule("0 8 * mon", "UTC")


def test_the_trigger_fires_archives_and_mails_once(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    s = settings(tmp_path, store, smtp_server, CTO, NLP)
    (first,), next_run = run_scheduler(s)
    assert [o.status for o in first.outcomes] == ["sent", "sent"]
    assert sorted(m.rcpt_tos[0] for m in smtp_server.messages) == [CTO.to, NLP.to]
    assert (tmp_path / "archive" / f"{first.weeks[-1]}.html").exists()
    # after the immediate run, the job waits for the next Monday 08:00 (UTC here)
    now = datetime.now(UTC)
    assert next_run is not None and next_run.weekday() == 0 and next_run.hour == 8
    assert now < next_run <= now + timedelta(days=7)

    # a restart: running it again sends nothing; the schedule was never written to the store
    (second,), _ = run_scheduler(s)
    assert second.outcomes == () and len(smtp_server.messages) == 2
    with RunStore(store) as st:
        assert not has_table(st, OLD_JOBS_TABLE)


class Planted:
    """Unpickling this creates ``path``: what anyone who can write to the run store's database
    (every training process) could have the service run, with its SMTP password at hand."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return open, (str(self.path), "w")


@pytest.mark.parametrize("planted", ["pickle", "garbage"])
def test_serve_never_reads_the_old_job_table_and_catches_up_from_the_log(
    tmp_path: Path,
    store_url: str,
    smtp_server: SmtpServer,
    planted: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A job row in ``gpu_kpi_jobs`` (APScheduler's columns), due five minutes ago: a pickle
    whose loading creates a file, or bytes that are no pickle. The week before was sent and the
    last one missed (the service was down): serve starts, says the table is ignored, and sends
    the missed week at once; the file never appears and the row stays as it was. On SQLite and
    on PostgreSQL."""
    latest = Service(ServiceSettings()).latest_week(datetime.now(UTC))
    add_week(store_url, latest)
    s = settings(tmp_path, store_url, smtp_server, CTO)
    Service(s).run(now=datetime.now(UTC) - timedelta(days=7))
    pickle.loads(pickle.dumps(Planted(tmp_path / "armed")))  # the pickle does what it says
    assert (tmp_path / "armed").exists()
    marker = tmp_path / "planted-pickle-ran"
    state = pickle.dumps(Planted(marker)) if planted == "pickle" else b"\x80\x05no pickle\x00"
    due = (datetime.now(UTC) - timedelta(minutes=5)).timestamp()
    jobs = sa.Table(
        OLD_JOBS_TABLE,
        sa.MetaData(),
        sa.Column("id", sa.Unicode(191), primary_key=True),
        sa.Column("next_run_time", sa.Float(25), index=True),
        sa.Column("job_state", sa.LargeBinary, nullable=False),
    )
    with RunStore(store_url) as st:
        jobs.metadata.create_all(st.engine)
        with st.engine.begin() as conn:
            conn.execute(jobs.insert().values(id=JOB_ID, next_run_time=due, job_state=state))

    results = Results()
    with caplog.at_level(logging.INFO, logger="gpu_kpi"), serving(s, results):
        (caught_up,) = results.wait(1)
    assert not marker.exists()
    assert [(o.week, o.status) for o in caught_up.outcomes] == [(label_of(latest), "sent")]
    assert len(smtp_server.messages) == 2  # the week before, then the missed one
    logged = [r.getMessage() for r in caplog.records]
    assert any(OLD_JOBS_TABLE in m and "ignored; safe to drop" in m for m in logged), logged
    assert any("catching up a missed week now" in m for m in logged), logged
    with RunStore(store_url) as st, st.engine.connect() as conn:
        assert conn.execute(sa.select(jobs)).all() == [(JOB_ID, due, state)]


def test_overdue_only_for_recipients_with_history(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    s = settings(tmp_path, store, smtp_server, CTO)
    now = datetime.now(UTC)
    assert Service(s).overdue(now) is False  # a first start owes nothing
    Service(s).run(now=now - timedelta(days=7))  # the week before was sent
    assert Service(s).overdue(now) is True  # the last week was missed
    Service(s).run(now=now)
    assert Service(s).overdue(now) is False


def test_a_second_scheduler_fired_mid_send_skips_then_owes_nothing(
    tmp_path: Path, store_url: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two schedulers (two ``serve`` processes) each fire the job (APScheduler 3 does not
    coordinate them). The second fires while the first is held at the SMTP server's DATA, its
    delivery claimed and not yet sent: it finds the claim and skips. Fired again once the first
    has sent, it finds nothing owed. One email in all; on SQLite and on PostgreSQL."""
    add_week(store_url, Service(ServiceSettings()).latest_week(datetime.now(UTC)))
    # a held DATA must not time out the sender
    s = replace(
        settings(tmp_path, store_url, smtp_server, CTO), smtp=smtp_server.settings(timeout_s=60.0)
    )
    held = HeldData(monkeypatch)
    first, second = Results(), Results()
    with RunStore(store_url) as st_a:
        a = ServiceScheduler(s, on_result=first)
        b = ServiceScheduler(s, on_result=second)
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


def test_a_temporary_failure_is_retried_soon(
    tmp_path: Path, store: str, smtp_server_factory: object
) -> None:
    server = smtp_server_factory(data_replies=["451 4.3.0 try again later"])  # type: ignore[operator]
    s = settings(tmp_path, store, server, CTO, retry_after_min=1 / 60)  # 1 s
    (first, retry), _ = run_scheduler(s, runs=2)
    assert [o.status for o in first.outcomes] == ["deferred"]
    assert [o.status for o in retry.outcomes] == ["sent"]
    assert len(server.messages) == 1


def test_the_last_report_is_on_metrics_after_a_restart(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    """A service restarted after a report was built says when, before the next one: from the
    archive (the newest week's JSON and when it was written)."""
    import time
    import urllib.request

    archive = tmp_path / "archive"
    archive.mkdir()
    for week, mtime in (("2026-W47", 1_763_942_400.0), ("2026-W48", 1_764_547_200.0)):
        (archive / f"{week}.json").write_text("{}")
        os.utime(archive / f"{week}.json", (mtime, mtime))
    (archive / "notes.json").write_text("{}")  # not a week
    port = smtp_servers.unused_port()
    s = replace(
        settings(tmp_path, store, smtp_server),
        metrics_port=port,
        recipients=(),
        out_dir=str(archive),
    )
    with serving(s, Results()):
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    line = next(
        x for x in text.splitlines() if x.startswith("gpu_kpi_last_report_timestamp_seconds{")
    )
    assert line == 'gpu_kpi_last_report_timestamp_seconds{week="2026-W48"} 1.7645472e+09'
    assert "gpu_kpi_reports_built_total 0.0" in text
