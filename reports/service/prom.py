"""Live KPIs for Prometheus and Grafana: the last complete week, the week so far and the
service's own counters, on an HTTP ``/metrics`` endpoint. The only module that imports
``prometheus_client`` (the ``[reports]`` extra), and only when it is used.

Every series is declared once in :data:`METRICS`, named as Prometheus' naming practices and
``promtool check metrics`` want: base units (GPU time in GPU-seconds, not hours; utilization as a
ratio 0–1, not a percentage), ``_total`` on counters and only there. Weeks are labelled
``2026-W48``; the KPI series also carry ``basis`` (``util`` | ``sm_active``), since utilization,
waste and the thresholds behind them mean different things on each. A figure that is not known (a week
without utilization data) is absent, never 0, and before the first :meth:`KpiExporter.update`
there are no KPI series at all.

A scrape reads one snapshot: :meth:`KpiExporter.update` replaces all KPI series at once, so a
scrape never sees half a week and the previous week's series vanish with the swap.
"""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING

from reports.kpi import WeekKpis
from reports.kpi.savings import ledger_by_team
from reports.sections.savings import Savings
from reports.weeks import label_of
from tracker.config import ConfigError
from tracker.extras import install_hint
from tracker.units import RATIO_PER_PCT, S_PER_HOUR

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric as Family

    from reports.service.httpd import BoundedServer


@dataclass(frozen=True, kw_only=True)
class PromMetric:
    """One exported series family, by the name a PromQL query uses."""

    name: str
    type: str
    """``gauge`` or ``counter`` (a counter's name ends in ``_total``)."""
    help: str
    labels: tuple[str, ...]
    scope: str
    """Where the value comes from: ``week`` (the last complete week's headline), ``team``
    (its per-team breakdown), ``week_to_date`` (the current week's headline so far),
    ``weekly`` (the headline of each of the last 12 complete weeks, from the report's trend),
    ``cause`` (the last complete week's waste by cause: :mod:`reports.kpi.causes`),
    ``saving_team`` and ``saving_fix`` (what changes to recurring jobs saved, as of the last
    complete week, per team and per change: :mod:`reports.kpi.savings`),
    ``scheduler`` (the last complete week's Slurm jobs and Kubernetes pods, per source:
    :class:`reports.kpi.AllocationWeek`'s totals; none until jobs are imported) or
    ``service`` (counted by the service itself)."""
    field: str = ""
    """The :class:`reports.kpi.Headline` field or team-breakdown column shown."""
    scale: float = 1.0
    """Multiplies ``field`` (in the report's units) into the unit the name says."""


_WEEK = ("week", "basis")
_SCHEDULER = (*_WEEK, "scheduler")
CAPACITY_GAUGES = ("capacity_gpu_hours", "unallocated_gpu_hours")
"""Scheduler gauges of the nodes' capacity (:class:`reports.kpi.allocations.CapacityLine`)."""
_TEAM = ("week", "basis", "team")
_CAUSE = ("week", "basis", "cause")
_SAVING_TEAM = ("week", "basis", "team")
_SAVING_FIX = ("week", "basis", "team", "job_key", "since", "how")
MAX_FIX_SERIES = 20
"""Changes exported one by one (the most saved; the team totals hold every change)."""
_UTIL = (
    "GPU utilization as a ratio (0-1; 0.65 is 65%), Σ util × GPU-time ÷ Σ GPU-time over "
    "GPU-time with a value, on the basis label (util: NVML utilization, nvidia-smi's "
    "GPU-Util; sm_active: GPM SM activity); absent when no GPU-time had a value"
)
_GPU_S = "GPU time in GPU-seconds (GPU-hours × 3600)"
_WASTE = (
    "recoverable waste (USD): cost × max(0, 1 − util ÷ target) per GPU, what the same work "
    "would have cost less at the target utilization"
)
_IDLE = "idle cost (USD): GPU-time whose 30-minute rolling utilization was under the idle threshold"


def _gauge(
    name: str, scope: str, field: str, help: str, labels: tuple[str, ...], *, scale: float = 1.0
) -> PromMetric:
    return PromMetric(
        name=name, type="gauge", help=help, labels=labels, scope=scope, field=field, scale=scale
    )


METRICS: tuple[PromMetric, ...] = (
    # the last complete ISO week, as the weekly report has it
    _gauge(
        "gpu_kpi_week_gpu_seconds",
        "week",
        "gpu_hours",
        f"{_GPU_S} allocated to runs in the last complete week",
        _WEEK,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_week_waste_by_cause_usd",
        "cause",
        "waste_usd",
        "recoverable waste (USD) of the last complete week by cause (idle, input-bound, "
        "small-batch, communication-bound, low-efficiency, imbalanced, oversized, below-target): each "
        "run's idle part idle, the rest its verdict's; they add up to gpu_kpi_week_waste_usd",
        _CAUSE,
    ),
    _gauge(
        "gpu_kpi_savings_usd_per_week",
        "saving_team",
        "usd_per_week",
        "what changes to a team's recurring jobs saved per week (USD), as of the last complete "
        "week: the work done since each change at its old cost per unit less its cost, over the "
        "weeks since; negative: they cost more",
        _SAVING_TEAM,
    ),
    _gauge(
        "gpu_kpi_savings_to_date_usd",
        "saving_team",
        "usd_to_date",
        "what changes to a team's recurring jobs saved since each was made (USD), as of the "
        "last complete week, over the runs the report reads",
        _SAVING_TEAM,
    ),
    _gauge(
        "gpu_kpi_fix_savings_usd_per_week",
        "saving_fix",
        "usd_per_week",
        "one change to a recurring job (gpu-kpi mark, else a change point in its runs): saved "
        "per week (USD); the 20 that saved most",
        _SAVING_FIX,
    ),
    _gauge(
        "gpu_kpi_fix_savings_to_date_usd",
        "saving_fix",
        "usd_to_date",
        "one change to a recurring job: saved since it was made (USD); the 20 that saved most",
        _SAVING_FIX,
    ),
    _gauge(
        "gpu_kpi_week_spend_usd",
        "week",
        "spend_usd",
        "spend (USD) in the last complete week: GPU-hours × price of the GPU model",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_utilization_ratio",
        "week",
        "utilization_pct",
        f"{_UTIL}; last complete week",
        _WEEK,
        scale=RATIO_PER_PCT,
    ),
    _gauge("gpu_kpi_week_waste_usd", "week", "waste_usd", f"{_WASTE}; last complete week", _WEEK),
    _gauge("gpu_kpi_week_idle_usd", "week", "idle_usd", f"{_IDLE}; last complete week", _WEEK),
    _gauge(
        "gpu_kpi_week_unmeasured_usd",
        "week",
        "unmeasured_usd",
        "paid GPU-time no sample measured (USD), in gpu_kpi_week_spend_usd, beside the waste: "
        "scheduler jobs' unsampled time and runs without a utilization value; last complete week",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_failed_usd",
        "week",
        "failed_usd",
        "paid GPU-time of runs and jobs that failed, crashed or were cancelled (USD), in "
        "gpu_kpi_week_spend_usd, beside the waste; last complete week",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_redone_usd",
        "week",
        "redone_usd",
        "paid GPU-time on steps a later run ran again after resuming from an earlier checkpoint "
        "(USD), in gpu_kpi_week_spend_usd, beside the waste; last complete week",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_throttled_usd",
        "week",
        "throttled_usd",
        "paid GPU-time the machine held below its clocks for power or thermal reasons (USD), in "
        "gpu_kpi_week_spend_usd, beside the waste; last complete week",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_slow_node_usd",
        "week",
        "slow_node_usd",
        "paid GPU-time lost to nodes a recurring job runs slower on than on its others (USD), in "
        "gpu_kpi_week_spend_usd, beside the waste; last complete week",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_unallocated_usd",
        "week",
        "unallocated_usd",
        "capacity nobody held (USD): owned GPUs ([owned.<MODEL>] gpus) no run or job held, at "
        "their amortized rate, not in gpu_kpi_week_spend_usd; absent when no capacity is known; "
        "last complete week",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_runs", "week", "runs", "runs with GPU-time in the last complete week", _WEEK
    ),
    _gauge(
        "gpu_kpi_week_underutilized_runs",
        "week",
        "underutilized_runs",
        "runs under the underutilized threshold with at least the minimum GPU-hours, "
        "last complete week",
        _WEEK,
    ),
    # the same week by team ("(none)" for runs without one)
    _gauge(
        "gpu_kpi_team_gpu_seconds",
        "team",
        "gpu_hours",
        f"{_GPU_S} per team, last complete week",
        _TEAM,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_team_spend_usd",
        "team",
        "spend_usd",
        "spend (USD) per team, last complete week",
        _TEAM,
    ),
    _gauge(
        "gpu_kpi_team_utilization_ratio",
        "team",
        "utilization_pct",
        f"{_UTIL}; per team, last complete week",
        _TEAM,
        scale=RATIO_PER_PCT,
    ),
    _gauge(
        "gpu_kpi_team_waste_usd",
        "team",
        "waste_usd",
        f"{_WASTE}; per team, last complete week",
        _TEAM,
    ),
    _gauge(
        "gpu_kpi_team_idle_usd", "team", "idle_usd", f"{_IDLE}; per team, last complete week", _TEAM
    ),
    # the current week so far: running totals, rising through the week
    _gauge(
        "gpu_kpi_week_to_date_gpu_seconds",
        "week_to_date",
        "gpu_hours",
        f"{_GPU_S} so far in the current week",
        _WEEK,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_week_to_date_spend_usd",
        "week_to_date",
        "spend_usd",
        "spend (USD) so far in the current week",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_to_date_utilization_ratio",
        "week_to_date",
        "utilization_pct",
        f"{_UTIL}; current week so far",
        _WEEK,
        scale=RATIO_PER_PCT,
    ),
    _gauge(
        "gpu_kpi_week_to_date_waste_usd",
        "week_to_date",
        "waste_usd",
        f"{_WASTE}; current week so far",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_week_to_date_idle_usd",
        "week_to_date",
        "idle_usd",
        f"{_IDLE}; current week so far",
        _WEEK,
    ),
    # each of the last 12 complete weeks, labelled by week, so a trend panel is full on day one
    _gauge(
        "gpu_kpi_weekly_gpu_seconds",
        "weekly",
        "gpu_hours",
        f"{_GPU_S} in each of the last 12 complete weeks (week label)",
        _WEEK,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_weekly_spend_usd",
        "weekly",
        "spend_usd",
        "spend (USD) in each of the last 12 complete weeks (week label)",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_weekly_utilization_ratio",
        "weekly",
        "utilization_pct",
        f"{_UTIL}; each of the last 12 complete weeks",
        _WEEK,
        scale=RATIO_PER_PCT,
    ),
    _gauge(
        "gpu_kpi_weekly_waste_usd",
        "weekly",
        "waste_usd",
        f"{_WASTE}; each of the last 12 complete weeks",
        _WEEK,
    ),
    _gauge(
        "gpu_kpi_weekly_idle_usd",
        "weekly",
        "idle_usd",
        f"{_IDLE}; each of the last 12 complete weeks",
        _WEEK,
    ),
    # the last complete week's Slurm jobs and Kubernetes pods against their samples (gpu-kpi
    # import slurm, import kubernetes), per scheduler
    _gauge(
        "gpu_kpi_week_scheduler_allocated_gpu_seconds",
        "scheduler",
        "allocated_gpu_hours",
        f"{_GPU_S} the scheduler (slurm, kubernetes) allocated to jobs or pods in the last "
        "complete week",
        _SCHEDULER,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_week_scheduler_idle_gpu_seconds",
        "scheduler",
        "idle_gpu_hours",
        f"{_GPU_S} allocated to jobs or pods whose samples the idle rule calls idle, last "
        "complete week",
        _SCHEDULER,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_week_scheduler_unsampled_gpu_seconds",
        "scheduler",
        "no_samples_gpu_hours",
        f"{_GPU_S} allocated to jobs or pods that no minute sample covers (nobody measured "
        "them), last complete week",
        _SCHEDULER,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_week_scheduler_capacity_gpu_seconds",
        "scheduler",
        "capacity_gpu_hours",
        f"{_GPU_S} the scheduler's nodes could hand out (sinfo, kube_node_status_capacity) in "
        "the last complete week",
        _SCHEDULER,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_week_scheduler_unallocated_gpu_seconds",
        "scheduler",
        "unallocated_gpu_hours",
        f"{_GPU_S} of the scheduler's nodes allocated to no job or pod, last complete week",
        _SCHEDULER,
        scale=S_PER_HOUR,
    ),
    _gauge(
        "gpu_kpi_week_scheduler_idle_usd",
        "scheduler",
        "idle_usd",
        "cost (USD) of the allocated GPU-time that sat idle, last complete week",
        _SCHEDULER,
    ),
    _gauge(
        "gpu_kpi_week_scheduler_unsampled_usd",
        "scheduler",
        "no_samples_usd",
        "cost (USD) of the allocated GPU-time with no samples, last complete week",
        _SCHEDULER,
    ),
    # the service itself
    PromMetric(
        name="gpu_kpi_emails_total",
        type="counter",
        labels=("kind", "outcome"),
        scope="service",
        help="report emails in the delivery log by kind (summary, team, "
        "runs) and outcome (sending, sent, empty, deferred, failed, skipped)",
    ),
    PromMetric(
        name="gpu_kpi_reports_built_total",
        type="counter",
        labels=(),
        scope="service",
        help="weekly reports built since the service started",
    ),
    _gauge(
        "gpu_kpi_last_report_timestamp_seconds",
        "service",
        "",
        "when the last weekly report was built (Unix seconds); its week in the week label",
        ("week",),
    ),
)

NAMES: frozenset[str] = frozenset(m.name for m in METRICS)
EMAIL_OUTCOMES = ("sending", "sent", "empty", "deferred", "failed", "skipped")

Samples = Mapping[str, tuple[tuple[tuple[str, ...], float], ...]]
"""Metric name → (label values, value) per series."""


def _finite(value: object) -> float | None:
    if value is None:
        return None
    v = float(value)  # type: ignore[arg-type]
    return v if math.isfinite(v) else None


def kpi_samples(
    latest: WeekKpis, week_to_date: WeekKpis | None = None, history: WeekKpis | None = None
) -> Samples:
    """The KPI series of the week, the week so far and each week of ``history``'s trend (from
    the first with GPU-time on: no row of zeros for the weeks before there were runs); unknown
    figures are left out."""
    out: dict[str, list[tuple[tuple[str, ...], float]]] = {}

    def add(m: PromMetric, labels: tuple[str, ...], value: object) -> None:
        if (v := _finite(value)) is not None:
            out.setdefault(m.name, []).append((labels, v * m.scale))

    week = (label_of(latest.week), latest.basis)
    teams = latest.by.get("team")
    # what fixes saved is read from the runs of 26 weeks: the full report of the week has it
    # (``history``), the two-week read the refresh makes for the rest does not
    full = history if history is not None and history.week == latest.week else latest
    saved = full.parts.get(Savings.name)
    changes = saved.changes if isinstance(saved, Savings) else ()
    for m in METRICS:
        if m.scope == "week":
            add(m, week, getattr(latest.headline, m.field))
        elif m.scope == "team" and teams is not None:
            for team, value in zip(teams["team"], teams[m.field], strict=True):
                add(m, (*week, str(team)), value)
        elif m.scope == "cause":
            for c in latest.causes:
                add(m, (*week, c.cause), getattr(c, m.field))
        elif m.scope == "saving_team":
            for team, per_week, to_date, _ in ledger_by_team(changes):
                add(m, (*week, team), per_week if m.field == "usd_per_week" else to_date)
        elif m.scope == "saving_fix":
            for ch in changes[:MAX_FIX_SERIES]:
                since = ch.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")  # one series a change
                add(m, (*week, ch.team, ch.job_key, since, ch.how), getattr(ch, m.field))
        elif m.scope == "week_to_date" and week_to_date is not None:
            add(
                m,
                (label_of(week_to_date.week), week_to_date.basis),
                getattr(week_to_date.headline, m.field),
            )
        elif m.scope == "scheduler" and history is not None and history.allocations is not None:
            for source, a in history.allocations.by_source().items():
                if m.field in CAPACITY_GAUGES:
                    if not a.capacity:  # not imported: unknown, not 0
                        continue
                    total = math.fsum(getattr(c, m.field) for c in a.capacity)
                elif m.field.endswith("_usd"):
                    total = a.total_usd(m.field)
                else:
                    total = a.total(m.field)
                add(m, (label_of(history.week), history.basis, source), total)
        elif m.scope == "weekly" and history is not None:
            rows = history.trend.to_dict("records")
            first = next((i for i, r in enumerate(rows) if r["gpu_hours"]), len(rows))
            for row in rows[first:]:
                add(m, (label_of(row["week"]), history.basis), row[m.field])
    return MappingProxyType({k: tuple(v) for k, v in out.items()})


class KpiExporter:
    """Holds the latest figures and serves them; thread-safe (update from the scheduler's
    thread, scrape from the HTTP thread). Own ``CollectorRegistry``, never the global one."""

    def __init__(self) -> None:
        try:
            from prometheus_client import CollectorRegistry
        except ImportError as e:  # pragma: no cover - the [reports] extra is missing
            raise ImportError(
                f"the metrics endpoint needs prometheus-client: {install_hint('reports')}"
            ) from e
        self._lock = threading.Lock()
        self._kpis: Samples = MappingProxyType({})
        self._emails: dict[tuple[str, str], int] = {}
        self._reports_built = 0
        self._last_report: tuple[str, float] | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)  # a collector: it has collect()

    def update(
        self,
        latest: WeekKpis,
        *,
        week_to_date: WeekKpis | None = None,
        history: WeekKpis | None = None,
    ) -> None:
        """latest: the last complete week; week_to_date: the current week so far (running
        totals); history: a week's full KPIs, whose 12-week trend is exported week by week.
        Replaces every KPI series: a week not given here is no longer exported."""
        samples = kpi_samples(latest, week_to_date, history)
        with self._lock:
            self._kpis = samples

    def count_email(self, kind: str, outcome: str) -> None:
        """One report email of ``kind`` (``weekly``…) ended ``outcome``: sent, failed or
        skipped (already delivered, or nobody to send to)."""
        if outcome not in EMAIL_OUTCOMES:
            raise ValueError(f"email outcome {outcome!r}: use one of {', '.join(EMAIL_OUTCOMES)}")
        with self._lock:
            self._emails[kind, outcome] = self._emails.get((kind, outcome), 0) + 1

    def set_email_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Every email count at once, (kind, outcome) → total, as the delivery log holds them:
        the log survives restarts and counts every ``serve`` process, so it is the source."""
        bad = sorted({o for _, o in counts if o not in EMAIL_OUTCOMES})
        if bad:
            raise ValueError(f"email outcome {bad[0]!r}: use one of {', '.join(EMAIL_OUTCOMES)}")
        with self._lock:
            self._emails = dict(counts)

    def report_built(self, week: str, at: datetime) -> None:
        """The weekly report of ``week`` (``2026-W48``) was built at ``at`` (timezone-aware)."""
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(f"report time {at.isoformat()} has no time zone")
        with self._lock:
            self._reports_built += 1
            self._last_report = (week, at.timestamp())

    def report_seen(self, week: str, at_s: float) -> None:
        """The last report as the archive holds it (``week``, built at ``at_s`` Unix seconds),
        when the service starts: ``gpu_kpi_last_report_timestamp_seconds`` is there after a
        restart, not only once the next report is built. The built counter is unchanged."""
        with self._lock:
            if self._last_report is None:
                self._last_report = (week, at_s)

    def samples(self) -> Samples:
        """Every series as a scrape would show it, as one consistent snapshot."""
        with self._lock:
            out = dict(self._kpis)
            out["gpu_kpi_reports_built_total"] = (((), float(self._reports_built)),)
            if self._emails:
                out["gpu_kpi_emails_total"] = tuple(
                    (key, float(n)) for key, n in sorted(self._emails.items())
                )
            if self._last_report is not None:
                week, ts = self._last_report
                out["gpu_kpi_last_report_timestamp_seconds"] = (((week,), ts),)
        return MappingProxyType(out)

    def collect(self) -> Iterator[Family]:
        """The prometheus_client collector protocol: one family per metric that has series."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        samples = self.samples()
        for m in METRICS:
            if m.name not in samples:
                continue
            cls = CounterMetricFamily if m.type == "counter" else GaugeMetricFamily
            family = cls(m.name, m.help, labels=m.labels)
            for labels, value in samples[m.name]:
                family.add_metric(list(labels), value)
            yield family

    def serve(self, host: str = "127.0.0.1", port: int = 9464) -> MetricsServer:
        """Serve ``/metrics`` on a daemon thread; ``port`` 0 takes any free port. A port in use
        or a host that cannot be bound is a :class:`ConfigError` naming ``host:port``. The
        server is :class:`reports.service.httpd.BoundedServer`: slow or idle clients cannot
        use up its threads (prometheus_client's own server had no such bound)."""
        from prometheus_client.exposition import choose_encoder

        from reports.service.httpd import BoundedServer, LimitedHandler

        registry = self.registry

        class Handler(LimitedHandler):
            def _metrics(self, head: bool) -> None:
                encode, ctype = choose_encoder(self.headers.get("Accept", ""))
                body = encode(registry)
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._metrics(head=False)

            def do_HEAD(self) -> None:
                self._metrics(head=True)

            def log_message(self, format: str, *args: object) -> None:
                pass

        try:
            httpd = BoundedServer.on(host, port, Handler)
        except OSError as e:
            key = "metrics_host" if isinstance(e, socket.gaierror) else "metrics_port"
            where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            raise ConfigError(
                f"service.{key}: cannot serve /metrics on {where}: {e.strerror or e}"
            ) from None
        thread = threading.Thread(
            target=httpd.serve_forever, daemon=True, name="gpu-kpi-metrics-http"
        )
        thread.start()
        return MetricsServer(httpd, thread)


class MetricsServer:
    """A running metrics endpoint: ``host``, ``port`` (the bound one) and :meth:`close`."""

    def __init__(self, httpd: BoundedServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self._closed = False
        self.host: str = str(httpd.server_address[0])
        self.port: int = int(httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port; closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
