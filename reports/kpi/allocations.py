"""The GPUs the scheduler handed out in a week, against the minute samples that say what
they did: per job, its allocated GPU-hours, the part with samples, the part of those idle,
and the part with no samples at all, in dollars.

Which samples are a job's (each sampled GPU-second is counted for one job at most):

- **by id**: the samples of runs that recorded the job they ran in (the tracker's ``slurm``
  link, ``CLUSTER/JOBID``: :mod:`tracker.scheduler`). A job with such a run is matched by id
  only.
- **by node and time**: the samples of runs that recorded no job (nvidia-smi logs,
  Prometheus/DCGM imports, runs tracked outside Slurm) on one of the job's hosts, in a minute
  it held GPUs there. sacct does not say which GPUs of a node a job held, so a host's sampled
  GPU-seconds of a minute are shared among the jobs there by their GPUs on it (a job's GPUs
  split evenly over its hosts): a job holding 2 of a node's 4 sampled GPUs takes half of each
  of their seconds, however busy each one was. A minute of a host with more jobs' GPUs than
  samples gives each job its share of the samples it has, and no more.

A job's sampled seconds in a minute are at most the seconds it held its GPUs in it (GPUs ×
the part of the minute between its start and end); the rest of those seconds are **no
samples**: GPU-time nobody measured. Of the sampled seconds, those of minutes the idle rule
(:func:`tracker.cost.idle_flags`, over each sampled GPU's own minutes, windows reaching past
the job) calls idle are **allocated, idle**. Dollars are GPU-hours × the price of the job's
GPU type (sacct's ``gres/gpu:TYPE``), else of the GPU model its matched runs saw; a job with
neither is counted in hours and named unpriced.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tracker.cost import Thresholds, idle_flags
from tracker.owned import OwnedGpu
from tracker.prices import reported_price
from tracker.scheduler import SLURM_LINK, slurm_job_of


@dataclass(frozen=True, kw_only=True)
class JobLine:
    """One job's week: GPU-hours and dollars by what its samples said."""

    source: str
    cluster: str
    job_id: str
    shown_id: str
    name: str
    user: str
    account: str
    team: str
    partition: str
    state: str
    start: datetime
    end: datetime | None
    gpus: int
    gpu_model: str | None
    matched: str
    """``id`` (runs that recorded the job), ``node`` (samples of its hosts) or ``""``."""
    runs: tuple[str, ...]
    """The runs whose samples were matched (by id or node)."""
    allocated_gpu_hours: float
    sampled_gpu_hours: float
    idle_gpu_hours: float
    no_samples_gpu_hours: float
    price_per_gpu_hour: float | None
    """USD; None: unpriced (its dollars are None)."""

    def usd(self, gpu_hours: float) -> float | None:
        return None if self.price_per_gpu_hour is None else gpu_hours * self.price_per_gpu_hour

    @property
    def allocated_usd(self) -> float | None:
        return self.usd(self.allocated_gpu_hours)

    @property
    def idle_usd(self) -> float | None:
        return self.usd(self.idle_gpu_hours)

    @property
    def no_samples_usd(self) -> float | None:
        return self.usd(self.no_samples_gpu_hours)

    @property
    def unused_usd(self) -> float:
        """Dollars allocated and idle or with no samples (0 when unpriced): the order of the
        report's list."""
        return (self.idle_usd or 0.0) + (self.no_samples_usd or 0.0)


@dataclass(frozen=True, kw_only=True)
class AllocationWeek:
    """The scheduler's side of one week."""

    jobs: tuple[JobLine, ...] = ()
    """Every job that held GPUs in the week, most unused dollars first."""
    skipped: tuple[str, ...] = field(default_factory=tuple)
    """Sample rows left out (not a number, out of range), each said once with its count."""

    def total(self, name: str) -> float:
        """The sum of a ``*_gpu_hours`` field over the jobs."""
        return math.fsum(getattr(j, name) for j in self.jobs)

    def total_usd(self, name: str) -> float:
        """The sum of a ``*_usd`` property over the priced jobs."""
        return math.fsum(v for j in self.jobs if (v := getattr(j, name)) is not None)

    @property
    def unpriced_gpu_hours(self) -> float:
        return math.fsum(j.allocated_gpu_hours for j in self.jobs if j.price_per_gpu_hour is None)


@dataclass
class _Minutes:
    """Sampled seconds and idle seconds per epoch minute."""

    covered: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    idle: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    gpus: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    runs: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))


def short_host(name: str) -> str:
    """A host as jobs and runs are matched on it: its first label, lower case
    (``gpu01.cluster.local`` and Slurm's ``gpu01`` are one host)."""
    return name.strip().split(".", 1)[0].lower()


def allocation_week(
    allocations: Sequence[Any],
    runs: Iterable[Mapping[str, Any]],
    minutes: Iterable[Sequence[Any]],
    *,
    since: datetime,
    until: datetime,
    thresholds: Thresholds,
    overrides: Mapping[str, float] | None = None,
    owned: Mapping[str, OwnedGpu] | None = None,
) -> AllocationWeek:
    """Each job's week (:class:`JobLine`), matched to the runs' minute samples.

    Args:
        allocations: The jobs (:class:`reports.data.allocations.Allocation`) that held GPUs in
            the span.
        runs: The runs that may hold their samples: ``id``, ``host``, ``links`` (a mapping),
            ``gpu_model``.
        minutes: Those runs' minute samples, ``(run_id, gpu, minute, covered_s, value)``,
            the minute timezone-aware, from the idle window before ``since`` to the one after
            ``until`` (the idle rule's windows reach across the span's edges).
        since: The span's start (timezone-aware).
        until: The span's end, excluded (timezone-aware).
        thresholds: The idle rule's threshold and window.
        overrides: The config's ``[prices]``.
        owned: The config's ``[owned.<MODEL>]``.

    Returns:
        The jobs' lines, most unused dollars first, and the sample rows left out.
    """
    t0, t1 = since.timestamp(), until.timestamp()
    by_key = {(a.cluster, a.job_id): a for a in allocations}
    ids_alone: dict[str, list[Any]] = defaultdict(list)
    for a in allocations:
        ids_alone[a.job_id].append(a)
    job_of_run: dict[str, Any] = {}
    host_of_run: dict[str, str] = {}
    model_of_run: dict[str, str] = {}
    for r in runs:
        links = r.get("links")
        link = links.get(SLURM_LINK) if isinstance(links, Mapping) else None
        if isinstance(r.get("gpu_model"), str) and r["gpu_model"]:
            model_of_run[r["id"]] = r["gpu_model"]
        if isinstance(link, str):
            job = slurm_job_of(link)
            if job is None:
                continue
            cluster, jid = job
            found = by_key.get((cluster, jid))
            if found is None and (not cluster or len(ids_alone[jid]) == 1):
                # one side does not name the cluster: the job id alone, when it is one job
                cand = [a for a in ids_alone[jid] if not cluster or not a.cluster]
                found = cand[0] if len(cand) == 1 else None
            if found is not None:
                job_of_run[r["id"]] = found
            continue  # a run in another job (or one not imported) is no node's sample
        host = r.get("host")
        if isinstance(host, str) and host.strip():
            host_of_run[r["id"]] = short_host(host)

    series: dict[tuple[str, str], list[tuple[int, float, float | None]]] = defaultdict(list)
    bad: dict[str, int] = defaultdict(int)
    for run_id, gpu, minute, covered_s, value in minutes:
        if run_id not in job_of_run and run_id not in host_of_run:
            continue
        problem = _sample_problem(covered_s, value)
        if problem:
            bad[problem] += 1
            continue
        stamp = minute if minute.tzinfo else minute.replace(tzinfo=UTC)
        series[(run_id, gpu)].append(
            (
                int(stamp.timestamp()) // 60,
                float(covered_s),
                None if value is None else float(value),
            )
        )

    # the idle rule over each GPU's own minutes, then the span's minutes summed
    of_job: dict[int, _Minutes] = defaultdict(_Minutes)  # by id(allocation)
    of_host: dict[str, _Minutes] = defaultdict(_Minutes)
    runs_of_job: dict[int, set[str]] = defaultdict(set)
    for (run_id, _gpu), rows in series.items():
        rows.sort()
        flags = idle_flags(
            [u for _, _, u in rows],
            [c for _, c, _ in rows],
            threshold_pct=thresholds.idle_pct,
            window=thresholds.idle_window_min,
            minutes=[m for m, _, _ in rows],
        )
        job = job_of_run.get(run_id)
        target = of_job[id(job)] if job is not None else of_host[host_of_run[run_id]]
        for (m, covered, _), is_idle in zip(rows, flags, strict=True):
            if not t0 <= m * 60 < t1:
                continue
            if job is not None:
                runs_of_job[id(job)].add(run_id)
            target.covered[m] += covered
            target.gpus[m] += 1
            target.runs[m].add(run_id)
            if is_idle:
                target.idle[m] += covered

    # the GPUs of jobs on each host in each minute (by node: the shares' denominator)
    on_host: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for a in allocations:
        if id(a) in of_job or not a.hosts:
            continue
        per_host = a.gpus / len(a.hosts)
        for h in {short_host(h) for h in a.hosts}:
            if h in of_host:
                for m, _ in _held(a, t0, t1):
                    on_host[h][m] += per_host

    lines = []
    for a in allocations:
        held = list(_held(a, t0, t1))
        allocated = sampled = idle = 0.0
        matched, their_runs = "", set[str]()
        minutes_of = of_job.get(id(a))
        hosts = sorted({short_host(h) for h in a.hosts})
        per_host = a.gpus / len(hosts) if hosts else 0.0
        for m, seconds in held:
            alloc_s = a.gpus * seconds
            allocated += alloc_s
            if minutes_of is not None:
                got, got_idle = minutes_of.covered.get(m, 0.0), minutes_of.idle.get(m, 0.0)
            else:
                got = got_idle = 0.0
                for h in hosts:
                    mh = of_host.get(h)
                    if mh is None or m not in mh.covered:
                        continue
                    share = per_host / max(mh.gpus[m], on_host[h][m])
                    got += share * mh.covered[m]
                    got_idle += share * mh.idle.get(m, 0.0)
                    their_runs |= mh.runs[m]
            if got > alloc_s:  # never more than it held: the idle part in proportion
                got_idle *= alloc_s / got
                got = alloc_s
            sampled += got
            idle += got_idle
        if minutes_of is not None:
            matched, their_runs = "id", runs_of_job[id(a)]
        elif sampled > 0:
            matched = "node"
        model = a.gpu_model or next(
            (model_of_run[r] for r in sorted(their_runs) if r in model_of_run), None
        )
        price = reported_price(model, None, None, overrides, owned)[0] if model else None
        lines.append(
            JobLine(
                source=a.source,
                cluster=a.cluster,
                job_id=a.job_id,
                shown_id=a.shown_id,
                name=a.name,
                user=a.user,
                account=a.account,
                team=a.team,
                partition=a.partition,
                state=a.state,
                start=a.start_at,
                end=a.end_at,
                gpus=a.gpus,
                gpu_model=model,
                matched=matched,
                runs=tuple(sorted(their_runs)),
                allocated_gpu_hours=allocated / 3600.0,
                sampled_gpu_hours=sampled / 3600.0,
                idle_gpu_hours=idle / 3600.0,
                no_samples_gpu_hours=max(0.0, allocated - sampled) / 3600.0,
                price_per_gpu_hour=price,
            )
        )
    lines.sort(
        key=lambda j: (
            -j.unused_usd,
            -(j.idle_gpu_hours + j.no_samples_gpu_hours),
            j.start,
            j.job_id,
        )
    )
    skipped = tuple(
        f"{n} sample row{'s' if n != 1 else ''}: {why}" for why, n in sorted(bad.items())
    )
    return AllocationWeek(jobs=tuple(lines), skipped=skipped)


def _held(a: Any, t0: float, t1: float) -> Iterable[tuple[int, float]]:
    """The epoch minutes in which ``a`` held its GPUs within ``[t0, t1)``, each with the
    seconds it held them in it."""
    start = max(a.start_at.timestamp(), t0)
    end = min(a.until.timestamp(), t1)
    if a.gpus <= 0 or end <= start:
        return
    m = int(start // 60)
    while m * 60 < end:
        seconds = min(end, (m + 1) * 60) - max(start, m * 60)
        if seconds > 0:
            yield m, seconds
        m += 1


def _sample_problem(covered_s: Any, value: Any) -> str:
    if not isinstance(covered_s, int | float) or not 0 <= covered_s <= 60:
        return "seconds held not from 0 to 60"
    if value is not None and (not isinstance(value, int | float) or not 0 <= value <= 100):
        return "utilization not from 0 to 100"
    return ""
