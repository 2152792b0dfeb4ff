"""``gpu-kpi serve``: the scheduler in the foreground until SIGTERM or SIGINT, with the optional
Prometheus endpoint. The job itself is :mod:`reports.service.job`; the scheduler
:mod:`reports.service.scheduler`."""

from __future__ import annotations

import logging
import signal
import threading
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from reports.service.config import ServiceSettings
from reports.service.job import RunResult, Service

log = logging.getLogger("gpu_kpi")

METRICS_REFRESH_S = 300.0
"""How often the Prometheus figures are recomputed from the store."""


class MetricsRefresher:
    """Recomputes the figures ``/metrics`` shows: the last complete week, the current week so
    far, and the delivery counts from the log (so they survive restarts)."""

    def __init__(self, settings: ServiceSettings, exporter: Any) -> None:
        self._settings = settings
        self._exporter = exporter

    def __call__(self, now: datetime | None = None) -> None:
        from reports.build import compute
        from reports.errors import ReportError
        from reports.service.deliveries import DeliveryLog
        from reports.weeks import label_of, week_label, week_of
        from tracker.store import RunStore, StoreError

        s = self._settings
        now = now or datetime.now(UTC)
        service = Service(s)
        try:
            latest = compute(s.tracker.store, service.request(label_of(service.latest_week(now))),
                             now=now)
            current = compute(s.tracker.store, service.request(week_label(*week_of(now, s.tz))),
                              now=now)
            self._exporter.update(latest.kpis, week_to_date=current.kpis)
            with RunStore(s.tracker.store) as store:
                self._exporter.set_email_counts(DeliveryLog(store).counts())
        except (ReportError, StoreError) as e:
            log.warning("gpu-kpi: metrics not refreshed: %s", e)


def serve_forever(settings: ServiceSettings, *, stop: threading.Event | None = None) -> int:
    """Run until ``stop`` is set (SIGTERM/SIGINT set it when this is the main thread)."""
    from reports.service.scheduler import ServiceScheduler
    from tracker.store import RunStore

    stop = stop or threading.Event()
    server = refresh = on_result = None
    if settings.metrics_port:
        from reports.service.prom import KpiExporter

        exporter = KpiExporter()
        server = exporter.serve(settings.metrics_host, settings.metrics_port)
        refresh = MetricsRefresher(settings, exporter)

        def on_result(result: RunResult) -> None:
            for week in result.weeks:
                exporter.report_built(week, datetime.now(UTC))
            refresh()

        log.info("gpu-kpi: metrics on %s", server.url)
    store = RunStore(settings.tracker.store)
    scheduler = ServiceScheduler(settings, store.engine, refresh=refresh,
                                 refresh_s=METRICS_REFRESH_S, on_result=on_result)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("gpu-kpi: %s: stopping after the running job", signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
    try:
        overdue = Service(settings).overdue()
        scheduler.start(run_now=overdue)
        log.info("gpu-kpi: serving; next weekly report at %s%s", scheduler.next_run_time(),
                 " (catching up a missed week now)" if overdue else "")
        stop.wait()
    finally:
        scheduler.shutdown(wait=True)
        if server is not None:
            server.close()
        store.close()
    return 0
