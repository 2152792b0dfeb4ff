"""``gpu-kpi serve``: the scheduler in the foreground until SIGTERM or SIGINT, with the optional
Prometheus endpoint; and ``serve --once``. The job itself is :mod:`reports.service.job`; the
scheduler :mod:`reports.service.scheduler`.

SIGTERM or SIGINT never cuts a message off: the job finishes the message in flight, then leaves
what it has not tried owed to the next run (which ``serve`` runs at once on its next start).
"""

from __future__ import annotations

import logging
import re
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from reports.service.config import ServiceSettings
from reports.service.job import RunResult, Service
from tracker.units import S_PER_HOUR

log = logging.getLogger("gpu_kpi")

METRICS_REFRESH_S = 300.0
"""How often the Prometheus figures are recomputed from the store."""
OLD_JOBS_TABLE = "gpu_kpi_jobs"
"""Where versions before issue 10 pickled the scheduler's job: never read now."""


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[list[str]]:
    """Within the block, SIGTERM and SIGINT set ``stop`` (main thread only; elsewhere nothing is
    installed); yields the list of the signals' names received, in order. The old handlers come
    back afterwards."""
    got: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        got.append(name)
        log.info("gpu-kpi: %s: stopping after the message in flight", name)
        stop.set()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield got
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def run_once(
    settings: ServiceSettings, *, retry_failed: bool = False, stop: threading.Event | None = None
) -> tuple[RunResult, str | None]:
    """``gpu-kpi serve --once``: the weekly job now, stopping gracefully on SIGTERM/SIGINT.

    Args:
        settings: The service's settings.
        retry_failed: Owe again the failed deliveries of the catch-up window.
        stop: Set to stop the job between two deliveries; None: one of its own.

    Returns:
        The job's result, and the name of the signal that stopped it (None when none came).
    """
    stop = stop or threading.Event()
    with stop_on_signals(stop) as got:
        result = Service(settings, stop=stop).run(retry_failed=retry_failed)
    return result, (got[0] if got else None)


_WEEK_JSON = re.compile(r"\d{4}-W\d{2}\.json")


def last_archived(out_dir: Path) -> tuple[str, float] | None:
    """The newest week in the archive (``2026-W48``) and when its report was written (its
    JSON's modification time, Unix seconds); None when the archive holds none."""
    try:
        weeks = sorted(p for p in out_dir.iterdir() if _WEEK_JSON.fullmatch(p.name))
        return (weeks[-1].stem, weeks[-1].stat().st_mtime) if weeks else None
    except OSError:
        return None


class MetricsRefresher:
    """Recomputes the figures ``/metrics`` shows: the last complete week, the current week so
    far, the delivery counts from the log (so they survive restarts), and the last 12 complete
    weeks week by week: those from a full report's trend, recomputed when the last complete
    week changes and at most every :attr:`history_max_age_s` (imports and late runs change old
    weeks), not at every refresh."""

    history_max_age_s = S_PER_HOUR

    def __init__(self, settings: ServiceSettings, exporter: Any) -> None:
        self._settings = settings
        self._exporter = exporter
        self._history: tuple[Any, datetime, Any] | None = None  # (week, computed at, kpis)

    def forget_history(self) -> None:
        """Recompute the 12 weeks at the next refresh (a weekly report was just built)."""
        self._history = None

    def _weeks(self, latest: Any, now: datetime) -> Any:
        from reports.build import compute
        from reports.weeks import label_of

        held = self._history
        if (
            held is None
            or held[0] != latest.week
            or ((now - held[1]).total_seconds() >= self.history_max_age_s)
        ):
            req = Service(self._settings).request(label_of(latest.week))
            held = self._history = (
                latest.week,
                now,
                compute(self._settings.tracker.store, req, now=now, keep_frames=False).kpis,
            )
        return held[2]

    def __call__(self, now: datetime | None = None) -> None:
        from reports.build import compute_live
        from reports.errors import ReportError
        from reports.service.deliveries import DeliveryLog
        from tracker.store import RunStore, StoreError

        s = self._settings
        now = now or datetime.now(UTC)
        try:
            # the two weeks in one read, without the trend a report needs
            latest, current = compute_live(s.tracker.store, Service(s).request(None), now=now)
            self._exporter.update(latest, week_to_date=current, history=self._weeks(latest, now))
            with RunStore(s.tracker.store) as store:
                self._exporter.set_email_counts(DeliveryLog(store).counts())
        except (ReportError, StoreError) as e:
            log.warning("gpu-kpi: metrics not refreshed: %s", e)


def serve_forever(
    settings: ServiceSettings,
    *,
    stop: threading.Event | None = None,
    retry_failed: bool = False,
    on_result: Callable[[RunResult], None] | None = None,
) -> int:
    """``gpu-kpi serve``: the weekly schedule (and the budget checks, ``/metrics`` and the
    archive over HTTP where configured) until ``stop`` is set. A job running then finishes its
    message in flight and leaves the rest owed.

    Args:
        settings: The service's settings.
        stop: Set to stop; SIGTERM and SIGINT set it when this is the main thread.
        retry_failed: Run the job at once, with the failed deliveries of the catch-up window
            owed again (that first run only).
        on_result: Called with each weekly run's result.

    Returns:
        The exit status: 0.
    """
    from reports.data.deliveries import has_table
    from reports.service.scheduler import ServiceScheduler
    from tracker.store import RunStore

    stop = stop or threading.Event()
    server = refresh = None
    archive = None
    if settings.http_port:
        from reports.service.archive_http import ArchiveServer, read_auth

        out = Path(settings.out_dir).expanduser()
        out.mkdir(parents=True, exist_ok=True)
        archive = ArchiveServer(
            out,
            settings.http_host,
            settings.http_port,
            read_auth(settings.http_user, settings.http_password_file),
        )
        log.info(
            "gpu-kpi: the archive on %s%s",
            archive.url,
            " (basic auth)" if settings.http_user else "",
        )
    hooks = [on_result] if on_result is not None else []
    if settings.metrics_port:
        from reports.service.prom import KpiExporter

        exporter = KpiExporter()
        if (last := last_archived(Path(settings.out_dir).expanduser())) is not None:
            exporter.report_seen(*last)
        server = exporter.serve(settings.metrics_host, settings.metrics_port)
        refresh = MetricsRefresher(settings, exporter)

        def export(result: RunResult) -> None:
            for week in result.weeks:
                exporter.report_built(week, datetime.now(UTC))
            refresh.forget_history()
            refresh()

        hooks.insert(0, export)
        log.info("gpu-kpi: metrics on %s", server.url)
    retry = [retry_failed]

    def job() -> RunResult:
        first, retry[0] = retry[0], False
        return Service(settings, stop=stop).run(retry_failed=first)

    def results(result: RunResult) -> None:
        for hook in hooks:
            hook(result)

    def budgets() -> None:
        Service(settings, stop=stop).budget_alerts()

    scheduler = ServiceScheduler(
        settings,
        job=job,
        refresh=refresh,
        refresh_s=METRICS_REFRESH_S,
        on_result=results,
        budgets=budgets if settings.budgets else None,
        budgets_s=settings.budget_check_min * 60.0,
    )
    with stop_on_signals(stop):
        try:
            with RunStore(settings.tracker.store) as store:
                if has_table(store, OLD_JOBS_TABLE):
                    log.warning(
                        "gpu-kpi: table %s (the pickled job store of older versions) is "
                        "ignored; safe to drop",
                        OLD_JOBS_TABLE,
                    )
            overdue = Service(settings).overdue()
            scheduler.start(run_now=overdue or retry_failed)
            log.info(
                "gpu-kpi: serving; next weekly report at %s%s",
                scheduler.next_run_time(),
                " (catching up a missed week now)" if overdue else "",
            )
            stop.wait()
        finally:
            scheduler.shutdown(wait=True)
            if server is not None:
                server.close()
            if archive is not None:
                archive.close()
    return 0
