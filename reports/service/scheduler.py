"""The service's scheduler: the only module that imports APScheduler (3.x).

One weekly job under a fixed id, kept in memory (APScheduler's ``MemoryJobStore``) and made anew
at every start: nothing about the schedule is stored in, or read from, the run store's database,
which every training process can write. (Versions before issue 10 kept the job in a pickling
``SQLAlchemyJobStore`` in the table ``gpu_kpi_jobs``; that table is never read, and safe to drop.)
Runs are coalesced, one at a time, and a run missed by up to ``misfire_grace_h`` (the process was
busy or suspended) still happens. What a restart owes (a Monday missed while the service was
down, a delivery left by a stop) is the delivery log's to say: ``serve`` asks
:meth:`reports.service.job.Service.overdue` and starts with ``run_now``.

Two ``serve`` processes each fire their own job (APScheduler 3 does not coordinate schedulers);
the delivery log makes the second one a no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Protocol

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from tracker.units import WHOLE_S_PER_HOUR

log = logging.getLogger("gpu_kpi")

JOB_ID = "gpu-kpi-weekly-report"
RETRY_JOB_ID = "gpu-kpi-retry"
METRICS_JOB_ID = "gpu-kpi-metrics"
BUDGETS_JOB_ID = "gpu-kpi-budgets"
WEEKLY_JOB = "reports.service.job:weekly_job"


def parse_schedule(expr: str, tz: tzinfo | str) -> CronTrigger:
    """A cron trigger from five fields (minute hour day month weekday) in ``tz``; ValueError with
    the reason when the expression is wrong."""
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(
            f"expected 5 cron fields (minute hour day month weekday), got {len(fields)} in {expr!r}"
        )
    try:
        return CronTrigger.from_crontab(expr, timezone=tz)
    except (ValueError, TypeError) as e:
        raise ValueError(f"bad cron expression {expr!r}: {e}") from None


def next_fire_time(expr: str, tz: tzinfo, after: datetime) -> datetime | None:
    """When the schedule fires next after ``after``."""
    trigger = parse_schedule(expr, tz)
    return trigger.get_next_fire_time(None, after.astimezone(tz))


class ScheduleSettings(Protocol):
    """What the scheduler reads of the service's settings
    (:class:`reports.service.config.ServiceSettings`, which also validates ``schedule`` with
    :func:`parse_schedule`: the dependency goes that way only)."""

    @property
    def schedule(self) -> str: ...
    @property
    def misfire_grace_h(self) -> float: ...
    @property
    def retry_after_min(self) -> float: ...
    @property
    def tz(self) -> tzinfo: ...


class ServiceScheduler:
    """The weekly job in a background scheduler, in memory only.

    ``job()`` is one weekly run and returns its :class:`reports.service.job.RunResult` (default:
    :func:`reports.service.job.weekly_job` with ``settings``). ``on_result(result)`` sees each
    run's result (in the scheduler's thread); ``refresh`` (optional) runs every ``refresh_s``
    seconds, from memory only, for the Prometheus figures; ``budgets`` (optional) every
    ``budgets_s`` seconds, the first time at the start."""

    def __init__(
        self,
        settings: ScheduleSettings,
        *,
        job: Callable[[], Any] | None = None,
        refresh: Callable[[], None] | None = None,
        refresh_s: float = 300.0,
        on_result: Callable[[Any], None] | None = None,
        budgets: Callable[[], Any] | None = None,
        budgets_s: float = 900.0,
    ) -> None:
        self._settings = settings
        self._on_result = on_result
        self._tz = settings.tz
        self._refresh = refresh
        self._refresh_s = refresh_s
        self._budgets = budgets
        self._budgets_s = budgets_s
        self._job: tuple[Any, dict[str, Any]] = (
            (job, {}) if job is not None else (WEEKLY_JOB, {"settings": settings})
        )
        self._scheduler = BackgroundScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": ThreadPoolExecutor(1)},
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": max(1, round(settings.misfire_grace_h * WHOLE_S_PER_HOUR)),
            },
            timezone=self._tz,
        )
        self._scheduler.add_listener(self._on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)

    def start(self, *, run_now: bool = False) -> None:
        """Start in the background. ``run_now``: run the weekly job at once (catch-up after
        downtime, ``serve --once``-like), then on schedule."""
        func, kwargs = self._job
        now = {"next_run_time": datetime.now(self._tz)} if run_now else {}
        self._scheduler.add_job(
            func,
            parse_schedule(self._settings.schedule, self._tz),
            id=JOB_ID,
            name="weekly GPU KPI report",
            kwargs=kwargs,
            replace_existing=True,
            **now,
        )
        if self._refresh is not None:
            self._scheduler.add_job(
                self._refresh,
                "interval",
                seconds=self._refresh_s,
                id=METRICS_JOB_ID,
                replace_existing=True,
                next_run_time=datetime.now(self._tz),
            )
        if self._budgets is not None:
            self._scheduler.add_job(
                self._budgets,
                "interval",
                seconds=self._budgets_s,
                id=BUDGETS_JOB_ID,
                replace_existing=True,
                next_run_time=datetime.now(self._tz),
            )
        self._scheduler.start()

    def run_now(self) -> None:
        self._scheduler.modify_job(JOB_ID, next_run_time=datetime.now(self._tz))

    def next_run_time(self) -> datetime | None:
        job = self._scheduler.get_job(JOB_ID)
        return None if job is None else job.next_run_time

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop; ``wait``: let a running report finish first."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)

    def _on_event(self, event: JobExecutionEvent) -> None:
        if event.job_id not in (JOB_ID, RETRY_JOB_ID):
            return
        if event.exception is not None:
            log.error("gpu-kpi: the weekly report job failed: %s", event.exception)
            return
        if self._on_result is not None:
            self._on_result(event.retval)
        if getattr(event.retval, "deferred", 0) and not getattr(event.retval, "stopped", False):
            # a temporary SMTP failure: try again soon rather than next week
            when = datetime.now(UTC) + timedelta(minutes=self._settings.retry_after_min)
            func, kwargs = self._job
            self._scheduler.add_job(
                func, "date", run_date=when, id=RETRY_JOB_ID, replace_existing=True, kwargs=kwargs
            )
            log.warning(
                "gpu-kpi: %d deliveries deferred; trying again at %s",
                event.retval.deferred,
                when.astimezone(self._tz).isoformat(" ", "minutes"),
            )
