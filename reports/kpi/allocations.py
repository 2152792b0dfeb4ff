"""The GPUs the scheduler handed out in a week, against the minute samples that say what
they did: per job, its allocated GPU-hours, the part with samples, the part of those idle,
and the part with no samples at all, in dollars.

Which samples are a job's (each sampled GPU-second is counted for one job at most):

- **by id**: the samples of runs that recorded the job they ran in (the tracker's ``slurm``
  link, ``CLUSTER/JOBID``; a pod's ``kubernetes`` link, ``NAMESPACE/POD``, which the DCGM
  import sets too: :mod:`tracker.scheduler`). A job with such samples in the week is matched
  by id only.
- **by workload and node** (a Kubernetes pod): the samples of its workload's DCGM runs (their
  ``kubernetes_workload`` link) on its node in its minutes, shared among the workload's pods
  there as below; a pod whose workload has such runs takes no other node's samples.
- **by node and time**: the samples of runs that recorded no job (nvidia-smi logs,
  Prometheus/DCGM imports, runs tracked outside Slurm) on one of the job's hosts, in a minute
  it held GPUs there. sacct does not say which GPUs of a node a job held, so a host's sampled
  GPU-seconds of a minute are shared among the jobs there by their GPUs on it (a job's GPUs
  split evenly over its hosts, every job there counted, those matched by id too): a job
  holding 2 of a node's 4 sampled GPUs takes half of each of their seconds, however busy each
  one was. A minute of a host with more jobs' GPUs than samples gives each job its share of
  the samples it has, and no more.

A job's sampled seconds in a minute are at most the seconds it held its GPUs in it (GPUs ×
the part of the minute between its start and end); the rest of those seconds are **no
samples**: GPU-time nobody measured. Of the sampled seconds, those of minutes the idle rule
(:func:`reports.kpi.gputime.idle_of_series`, over each sampled GPU's own minutes, windows
reaching past the job; the samples read as the report reads them, a utilization out of range
unknown, so never idle) calls idle are **allocated, idle**. Dollars are GPU-hours × the price of the
GPU model its matched runs' samples saw, else of its GPU type (sacct's ``gres/gpu:TYPE``): the
samples name the card (``A100-SXM4-80GB``) where a gres type may not (``a100``); a job with
neither is counted in hours and named unpriced. A Slurm job no sample covers, with its steps'
``TRESUsageInAve`` GPU average, is counted at that average (``sacct``).

:func:`capacity_lines` sets the nodes' capacity against the jobs: capacity → allocated → busy →
useful (SM activity, where the samples have it) per scheduler and cluster.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from reports.kpi.gputime import idle_of_series
from reports.rows import Allocation, Capacity, parsed_links
from tracker.cost import Thresholds, weighted_util_pct
from tracker.owned import OwnedGpu
from tracker.prices import canonical_gpu, reported_price
from tracker.scheduler import KUBERNETES_LINK, SLURM_LINK, WORKLOAD_LINK, slurm_job_of
from tracker.units import S_PER_HOUR, WHOLE_S_PER_HOUR

_HOUR = WHOLE_S_PER_HOUR
_HOUR_MINUTES = 60
_PARTS = ("covered_s", "idle_s", "known_s", "value_s", "sm_known_s", "sm_value_s")
"""A job's seconds summed in the join: sampled, idle, with a value on the basis, Σ value ×
seconds, with an SM activity value, Σ SM activity × seconds (the rollups' names)."""


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
    gpus: float
    """GPUs held (a share where a pod held MIG instances)."""
    gpu_model: str | None
    matched: str
    """``id`` (runs that recorded the job), ``node`` (samples of its hosts), ``workload`` (a
    pod's: the samples of its workload's runs on its node), ``sacct`` (no samples: its steps'
    ``TRESUsageInAve`` average) or ``""``."""
    runs: tuple[str, ...]
    """The runs whose samples were matched (by id or node)."""
    named_by: tuple[str, ...] = ()
    """The runs that name it (their ``slurm``/``kubernetes`` link, as :func:`runs_of_jobs`
    matches them), sampled or not: a summary-only run's time is the run's, not the job's too."""
    allocated_gpu_hours: float
    sampled_gpu_hours: float
    idle_gpu_hours: float
    no_samples_gpu_hours: float
    known_gpu_hours: float = 0.0
    """Of the sampled GPU-hours, those with a utilization value."""
    util_pct: float | None = None
    """Utilization over its sampled GPU-time with a value (the duty cycle of what it held and
    was measured), weighted by GPU-seconds; None: no value."""
    sm_known_gpu_hours: float = 0.0
    """Of the sampled GPU-hours, those with an SM activity value (DCGM's profiling metric, or
    the tracker's where it reads it)."""
    sm_active_pct: float | None = None
    """SM activity over those: how much of the GPU the work kept busy, which utilization (a
    kernel running, however small) does not say; None: no value."""
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
    def productive_gpu_hours(self) -> float:
        """Allocated, sampled and not idle: the GPU-time that did something."""
        return max(0.0, self.sampled_gpu_hours - self.idle_gpu_hours)

    @property
    def productive_usd(self) -> float | None:
        return self.usd(self.productive_gpu_hours)

    @property
    def unused_usd(self) -> float:
        """Dollars allocated and idle or with no samples (0 when unpriced): the order of the
        report's list."""
        return (self.idle_usd or 0.0) + (self.no_samples_usd or 0.0)


@dataclass(frozen=True, kw_only=True)
class CapacityLine:
    """One scheduler's (and cluster's) nodes in the span: what they could hand out, what was
    handed out, what of that was measured busy. Each figure has its own name and basis; none is
    a mix of the others."""

    source: str
    cluster: str
    nodes: int
    gpus: int
    """Σ over the nodes of the most GPUs each had in the span."""
    capacity_gpu_hours: float
    allocated_gpu_hours: float
    """Jobs' GPU-hours on these nodes (a job's split evenly over its hosts), each node's at
    most its capacity."""
    sampled_gpu_hours: float
    """Of those, the GPU-hours minute samples cover."""
    busy_gpu_hours: float
    """Of those, not idle by the idle rule."""
    known_gpu_hours: float
    util_pct: float | None
    """Utilization over the allocated GPU-time with a value (the duty cycle of what was
    handed out and measured), weighted by GPU-hours."""
    sm_known_gpu_hours: float = 0.0
    """Of the allocated GPU-hours, those with an SM activity value."""
    sm_active_pct: float | None = None
    """Useful: SM activity over those, weighted by GPU-hours (None: no SM samples)."""
    unallocated_gpu_hours: float
    unallocated_owned_usd: float | None
    """The unallocated GPU-hours of owned models at their amortized rate (an owned GPU costs
    the same allocated or not); None: no owned model among the nodes."""
    unallocated_owned_gpu_hours: float = 0.0
    """Of ``unallocated_gpu_hours``, those of owned models' nodes (``[owned]`` counts them)."""

    @property
    def allocation_pct(self) -> float | None:
        """Allocated ÷ capacity, percent."""
        return (
            100.0 * self.allocated_gpu_hours / self.capacity_gpu_hours
            if self.capacity_gpu_hours > 0
            else None
        )


@dataclass(frozen=True, kw_only=True)
class TeamAllocation:
    """A team's allocated GPU-time of a week, split by what its samples said: the chargeback
    of a scheduler-run fleet (a team pays for what it held)."""

    team: str
    jobs: int
    allocated_gpu_hours: float
    productive_gpu_hours: float
    """Sampled and not idle."""
    idle_gpu_hours: float
    no_samples_gpu_hours: float
    allocated_usd: float
    """Of priced jobs: ``productive_usd + idle_usd + no_samples_usd``."""
    productive_usd: float
    idle_usd: float
    no_samples_usd: float
    unpriced_gpu_hours: float


@dataclass(frozen=True, kw_only=True)
class AllocationWeek:
    """The scheduler's side of one week."""

    jobs: tuple[JobLine, ...] = ()
    """Every job that held GPUs in the week, most unused dollars first."""
    capacity: tuple[CapacityLine, ...] = ()
    """Per scheduler and cluster whose nodes' GPUs were imported: capacity → allocated → busy."""
    skipped: tuple[str, ...] = ()
    """Allocation rows left out (a job the table cannot hold: hosts, GPUs or times), said with
    their count; the bad sample rows are the report's (``bad_samples``)."""

    def of_team(self, team: str) -> AllocationWeek:
        """The jobs of ``team`` (by their account's team); the nodes stay the fleet's."""
        return dataclasses.replace(self, jobs=tuple(j for j in self.jobs if j.team == team))

    def total(self, name: str) -> float:
        """The sum of a ``*_gpu_hours`` field over the jobs."""
        return math.fsum(getattr(j, name) for j in self.jobs)

    def total_usd(self, name: str) -> float:
        """The sum of a ``*_usd`` property over the priced jobs."""
        return math.fsum(v for j in self.jobs if (v := getattr(j, name)) is not None)

    @property
    def unpriced_gpu_hours(self) -> float:
        return math.fsum(j.allocated_gpu_hours for j in self.jobs if j.price_per_gpu_hour is None)

    def by_team(self) -> tuple[TeamAllocation, ...]:
        """The week's allocated spend per team, split into productive, allocated-idle and
        allocated with no samples (their dollars add up to the allocated), most allocated
        dollars first."""
        teams: dict[str, list[JobLine]] = defaultdict(list)
        for j in self.jobs:
            teams[j.team].append(j)
        out = []
        for team, jobs in teams.items():
            week = AllocationWeek(jobs=tuple(jobs))
            out.append(
                TeamAllocation(
                    team=team,
                    jobs=len(jobs),
                    allocated_gpu_hours=week.total("allocated_gpu_hours"),
                    productive_gpu_hours=week.total("productive_gpu_hours"),
                    idle_gpu_hours=week.total("idle_gpu_hours"),
                    no_samples_gpu_hours=week.total("no_samples_gpu_hours"),
                    allocated_usd=week.total_usd("allocated_usd"),
                    productive_usd=week.total_usd("productive_usd"),
                    idle_usd=week.total_usd("idle_usd"),
                    no_samples_usd=week.total_usd("no_samples_usd"),
                    unpriced_gpu_hours=week.unpriced_gpu_hours,
                )
            )
        out.sort(key=lambda t: (-t.allocated_usd, -t.allocated_gpu_hours, t.team))
        return tuple(out)

    def by_source(self) -> dict[str, AllocationWeek]:
        """The week per scheduler (``slurm``, ``kubernetes``), those with jobs or capacity in
        it."""
        sources = sorted({j.source for j in self.jobs} | {c.source for c in self.capacity})
        return {
            s: AllocationWeek(
                jobs=tuple(j for j in self.jobs if j.source == s),
                capacity=tuple(c for c in self.capacity if c.source == s),
            )
            for s in sources
        }


def short_host(name: str) -> str:
    """A host as jobs and runs are matched on it: its first label, lower case
    (``gpu01.cluster.local`` and Slurm's ``gpu01`` are one host)."""
    return name.strip().split(".", 1)[0].lower()


def runs_of_jobs(
    allocations: Sequence[Allocation], runs: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, int], dict[str, tuple[str, str]], dict[str, str]]:
    """Which runs recorded which job, and the hosts and GPU models of the others.

    Args:
        allocations: The jobs.
        runs: The runs: ``id``, ``host``, ``links`` (a mapping, or a runs frame's JSON
            text), ``gpu_model``, and ``started_at`` where known (which of two pods of one
            name a run was).

    Returns:
        Run id → the index of its job in ``allocations`` (its ``slurm`` link names it: by
        cluster and id, or by the id alone where one side names no cluster and the id is one
        job's: of two clusters' jobs of the id, the one on the run's host, else the one
        running when it started, else none and the run is its node's sample); its
        ``kubernetes`` link names a pod: ``NAMESPACE/POD``, the one running when
        the run started where the name was reused); run id → (its workload, its host) for the
        runs that name no job (the workload: its ``kubernetes_workload`` link, else ""; the
        host: :func:`short_host`); run id → its GPU model. A run whose link names a job not
        imported is in neither: it is no node's sample.
    """
    by_key = {
        (a.cluster, a.job_id): i for i, a in enumerate(allocations) if a.source != "kubernetes"
    }
    ids_alone: dict[str, list[int]] = defaultdict(list)
    pods: dict[str, list[int]] = defaultdict(list)
    for i, a in enumerate(allocations):
        if a.source == "kubernetes":
            pods[a.shown_id].append(i)
        else:
            ids_alone[a.job_id].append(i)
    job_of_run: dict[str, int] = {}
    host_of_run: dict[str, tuple[str, str]] = {}
    model_of_run: dict[str, str] = {}
    for r in runs:
        links = parsed_links(r.get("links"))
        link, pod = links.get(SLURM_LINK), links.get(KUBERNETES_LINK)
        if isinstance(r.get("gpu_model"), str) and r["gpu_model"]:
            model_of_run[r["id"]] = r["gpu_model"]
        if isinstance(link, str):
            job = slurm_job_of(link)
            if job is None:
                continue
            cluster, jid = job
            found = by_key.get((cluster, jid))
            cand = [] if found is not None else _jobs_named(allocations, ids_alone[jid], cluster, r)
            if found is None and len(cand) == 1:
                found = cand[0]
            if found is not None:
                job_of_run[r["id"]] = found
                continue
            if not cand:
                continue  # a job not imported: no node's sample
            # the id is a job of two clusters, and its host and start tell neither: the run
            # is a sample of its node, as a run that names no job (never of neither job)
        if isinstance(pod, str) and not isinstance(link, str):
            found = _pod_of(allocations, pods.get(pod, []), r.get("started_at"))
            if found is not None:
                job_of_run[r["id"]] = found
            continue
        host = r.get("host")
        if isinstance(host, str) and host.strip():
            workload = links.get(WORKLOAD_LINK)
            host_of_run[r["id"]] = (
                workload if isinstance(workload, str) else "",
                short_host(host),
            )
    return job_of_run, host_of_run, model_of_run


def _model_seen(
    runs: Sequence[str], model_of_run: Mapping[str, str], gres_model: str | None
) -> str | None:
    """A job's GPU model: the one its runs' samples saw (the price table's name), over its gres
    type's; where its runs saw several, the gres type's if it is one of them, else the one most
    of them saw (ties: by name), never merely the first run's."""
    seen = Counter(canonical_gpu(m) or m for r in runs if (m := model_of_run.get(r)))
    if not seen:
        return gres_model
    if len(seen) > 1 and gres_model in seen:
        return gres_model
    return min(seen, key=lambda m: (-seen[m], m))


def _jobs_named(
    allocations: Sequence[Allocation], ids: Sequence[int], cluster: str, run: Mapping[str, Any]
) -> list[int]:
    """The jobs a run's ``slurm`` link of an id without its cluster (or a job without one) can
    be: those of the id; where two clusters have it, those on the run's host, then those
    running when it started."""
    cand = [i for i in ids if not cluster or not allocations[i].cluster]
    host = run.get("host")
    if len(cand) > 1 and isinstance(host, str) and host.strip():
        mine = short_host(host)
        cand = [i for i in cand if mine in {short_host(h) for h in allocations[i].hosts}] or cand
    started = run.get("started_at")
    if len(cand) > 1 and isinstance(started, datetime):
        cand = [
            i for i in cand if allocations[i].start_at <= started < allocations[i].until
        ] or cand
    return cand


def _pod_of(allocations: Sequence[Allocation], cand: Sequence[int], started: Any) -> int | None:
    """Of the pods of one name, the one a run is: the only one, else the one running when
    the run started (None: none, or no start to tell them apart)."""
    if len(cand) == 1:
        return cand[0]
    if not isinstance(started, datetime):
        return None
    at = [i for i in cand if allocations[i].start_at <= started <= allocations[i].until]
    return at[0] if len(at) == 1 else None


def workload_of(allocation: Any) -> str:
    """A pod's workload as the ``kubernetes_workload`` link names it, ``NAMESPACE/KIND/NAME``
    (its namespace and its ``Kind/Name``); "" for a Slurm job or a pod of no workload."""
    if allocation.source != "kubernetes" or "/" not in allocation.name:
        return ""
    return f"{allocation.account}/{allocation.name}"


def _overlap(start: np.ndarray, end: np.ndarray, minute: np.ndarray) -> np.ndarray:
    """Seconds of ``[start, end)`` in each epoch ``minute``."""
    lo = np.maximum(start, minute * 60.0)
    hi = np.minimum(end, minute * 60.0 + 60.0)
    return np.clip(hi - lo, 0.0, None)


def _capped(
    job: np.ndarray,
    minute: np.ndarray,
    covered: np.ndarray,
    *parts: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    gpus: np.ndarray,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each job's sampled seconds from its (job, minute) parts: per minute at most the seconds
    it held its GPUs then; and each of ``parts`` (idle seconds, seconds with a value, value ×
    seconds) in proportion."""
    n = len(starts)
    if not len(job):
        return np.zeros(n), [np.zeros(n) for _ in parts]
    base = int(minute.min())
    span = int(minute.max()) - base + 1
    keys, inverse = np.unique(job * span + (minute - base), return_inverse=True)
    got = np.bincount(inverse, weights=covered)
    kj, km = keys // span, keys % span + base
    held = gpus[kj] * _overlap(starts[kj], ends[kj], km)
    capped = np.minimum(got, held)
    ratio = np.divide(capped, got, out=np.zeros_like(got), where=got > 0)
    return np.bincount(kj, weights=capped, minlength=n), [
        np.bincount(kj, weights=np.bincount(inverse, weights=p) * ratio, minlength=n) for p in parts
    ]


@dataclass
class _Matched:
    """Per job: sampled and idle seconds, and the runs they came from."""

    sampled: np.ndarray
    idle: np.ndarray
    known: np.ndarray
    """Sampled seconds with a utilization value."""
    used: np.ndarray
    """Σ utilization (percent) × seconds over ``known``."""
    sm_known: np.ndarray
    """Sampled seconds with an SM activity value."""
    sm_used: np.ndarray
    """Σ SM activity (percent) × seconds over ``sm_known``."""
    by_id: np.ndarray
    by_node: np.ndarray
    runs: list[set[str]]

    def add(self, parts: Sequence[np.ndarray], where: np.ndarray | bool = True) -> None:
        """Add each job's seconds (:data:`_PARTS`), for the jobs ``where`` holds."""
        for total, part in zip(
            (self.sampled, self.idle, self.known, self.used, self.sm_known, self.sm_used),
            parts,
            strict=True,
        ):
            np.add(total, np.where(where, part, 0.0), out=total)


@dataclass
class _Hours:
    """The hours the rollups answer (:meth:`AllocationJoin.use_rollups`) and what they hold."""

    whole_id: np.ndarray
    """Sorted keys ``job × span_h + hour index`` of the (job, hour)s whose samples by id come
    from the rollups."""
    whole_node: np.ndarray
    """Sorted keys ``host × span_h + hour index`` of the (host, hour)s likewise."""
    by_id: list[np.ndarray]
    """Per job: the seconds of its whole hours (:data:`_PARTS`), by id."""
    by_node: list[np.ndarray]
    """Likewise, by node."""
    id_seen: np.ndarray
    """Per job: whether a whole hour has a sample of its runs by id."""
    id_runs: list[set[str]]
    node_runs: list[set[str]]


class AllocationJoin:
    """One span's jobs against the runs' samples.

    In two steps where the store keeps hourly rollups (:mod:`tracker.store.rollups`):
    :meth:`use_rollups` takes the hours the rollups answer exactly and says which minutes are
    still to be read; :meth:`week` matches those minutes and adds the hours. An hour inside
    the span, whose rollup rows are sound, is answered by them when nothing in it depends on
    the minute:

    - by id, (job, hour): the job held its GPUs the whole hour, and its runs had no more GPUs
      with samples in the hour than it held (no minute's seconds can exceed what it held);
    - by node, (host, hour): every job on the host held its GPUs there the whole hour or not
      at all, and every GPU sampled there has all 60 minutes. Each minute then has as many
      samples and jobs, a job's share of each minute is the same and never more than it
      held, and its hour is that share of the hour's sums.

    The rollups' idle seconds are by the idle rule they were kept by
    (:data:`tracker.store.rollups.ROLLUP_RULES`): a caller uses them only where the report's
    rule is that one. A fleet's week is mostly such hours: the minutes read are those of the
    hours jobs start and end in.

    Args:
        allocations: The jobs (:class:`reports.rows.Allocation`) that held GPUs in
            the span.
        runs: The runs that may hold their samples: ``id``, ``host``, ``links`` (a mapping,
            or a runs frame's JSON text), ``gpu_model``, ``started_at`` where known.
        since: The span's start (timezone-aware).
        until: The span's end, excluded (timezone-aware).
    """

    def __init__(
        self,
        allocations: Sequence[Allocation],
        runs: Iterable[Mapping[str, Any]],
        *,
        since: datetime,
        until: datetime,
    ) -> None:
        self.allocations = allocations
        self.t0, self.t1 = t0, t1 = since.timestamp(), until.timestamp()
        self.starts = np.array([max(a.start_at.timestamp(), t0) for a in allocations], dtype=float)
        ends = np.array([min(a.until.timestamp(), t1) for a in allocations], dtype=float)
        self.ends = np.maximum(ends, self.starts)
        self.gpus = np.array([max(a.gpus, 0) for a in allocations], dtype=float)
        self.job_of_run, self.host_of_run, self.model_of_run = runs_of_jobs(allocations, runs)
        scopes = {w for w, _ in self.host_of_run.values() if w}
        self.scoped = np.array([workload_of(a) in scopes for a in allocations], dtype=bool)
        self.hosts_of = [
            sorted(
                {
                    (workload_of(a) if self.scoped[j] else "", short_host(h))
                    for h in a.hosts
                    if h.strip()
                }
            )
            for j, a in enumerate(allocations)
        ]
        self.host_code = {
            h: i for i, h in enumerate(sorted({h for hs in self.hosts_of for h in hs}))
        }
        pairs = [
            (j, self.host_code[h], self.gpus[j] / len(hs))
            for j, hs in enumerate(self.hosts_of)
            if self.gpus[j] > 0 and self.ends[j] > self.starts[j]
            for h in hs
        ]
        self.pair_job = np.array([p[0] for p in pairs], dtype=np.int64)
        self.pair_host = np.array([p[1] for p in pairs], dtype=np.int64)
        self.pair_weight = np.array([p[2] for p in pairs], dtype=float)
        self.h0 = math.floor(t0 / _HOUR)
        # a key's hour index runs to one past the span's hours: no key of one job or host
        # reaches the next one's
        self.span_h = max(math.ceil(t1 / _HOUR) - self.h0, 1) + 1
        self._hours: _Hours | None = None
        self._needed: pd.DataFrame | None = None
        """The (run_id, gpu, hour)s whose minutes the rollups do not answer."""

    def _inside(self, hour: np.ndarray) -> np.ndarray:
        """Whether each epoch ``hour`` lies wholly inside the span."""
        return (hour * _HOUR >= self.t0) & ((hour + 1) * _HOUR <= self.t1)

    def use_rollups(self, rollups: Sequence[Any]) -> list[tuple[str, str, datetime, datetime]]:
        """Take the hours the rollups answer; the minutes of the others are still to be read.

        Args:
            rollups: The rollup rows of the span's hours
                (:class:`reports.data.rollups.RollupHour`); the rows of runs not in the join
                are not looked at.

        Returns:
            The stretches of minutes to read, ``(run_id, gpu, first, last)`` with ``last``
            included, for :meth:`reports.data.scans.SampleScans.scan_sample_stretches` with
            the idle window's rows around them.
        """
        n = len(self.allocations)
        self._needed = None
        if not rollups:  # no hour from the rollups: every minute is read
            self._hours = None
            return []
        hourly = pd.DataFrame(list(rollups))
        hourly = hourly[(hourly["hour"] >= self.h0) & (hourly["hour"] < self.h0 + self.span_h - 1)]
        run_codes, run_names = pd.factorize(hourly["run_id"])
        names = [str(r) for r in run_names]
        link = np.array([self.job_of_run.get(r, -1) for r in names], dtype=np.int64)[run_codes]
        host_of = [self.host_code.get(self.host_of_run.get(r, ("", "")), -1) for r in names]
        host = np.array(host_of, dtype=np.int64)[run_codes]
        index = hourly["hour"].to_numpy(dtype=np.int64) - self.h0
        sound = hourly["sound"].to_numpy(dtype=bool)
        sums = [hourly[c].to_numpy(dtype=float) for c in _PARTS]
        need = np.zeros(len(hourly), dtype=bool)

        # by id: the job held its GPUs all hour, its runs had no more GPUs than it held
        rows = np.flatnonzero(link >= 0)
        id_keys, inverse = np.unique(link[rows] * self.span_h + index[rows], return_inverse=True)
        kj, kh = id_keys // self.span_h, id_keys % self.span_h + self.h0
        whole = (
            self._inside(kh)
            & (np.bincount(inverse, weights=~sound[rows], minlength=len(id_keys)) == 0)
            & (np.bincount(inverse, minlength=len(id_keys)) <= self.gpus[kj])
            & (self.starts[kj] <= kh * _HOUR)
            & (self.ends[kj] >= (kh + 1) * _HOUR)
        )
        whole_id = id_keys[whole]
        need[rows[~whole[inverse]]] = True
        taken = rows[whole[inverse]]
        by_id = [np.bincount(link[taken], weights=x[taken], minlength=n) for x in sums]
        id_runs: list[set[str]] = [set() for _ in range(n)]
        for j, r in set(zip(link[taken].tolist(), run_codes[taken].tolist(), strict=True)):
            id_runs[j].add(names[r])

        # by node: every job on the host held its GPUs all hour or not at all, every GPU
        # sampled there has all its minutes
        rows = np.flatnonzero(host >= 0)
        groups, inverse = np.unique(host[rows] * self.span_h + index[rows], return_inverse=True)
        samples = np.bincount(inverse, minlength=len(groups)).astype(float)
        broken = ~sound[rows] | (hourly["minutes"].to_numpy()[rows] != _HOUR_MINUTES)
        s, e = self.starts[self.pair_job], self.ends[self.pair_job]
        base = self.pair_host * self.span_h - self.h0
        partial = np.concatenate(
            (
                (base + np.floor(s / _HOUR).astype(np.int64))[s % _HOUR != 0],
                (base + np.floor(e / _HOUR).astype(np.int64))[e % _HOUR != 0],
            )
        )
        whole = (
            self._inside(groups % self.span_h + self.h0)
            & (np.bincount(inverse, weights=broken, minlength=len(groups)) == 0)
            & ~np.isin(groups, partial)
        )
        need[rows[~whole[inverse]]] = True
        group_sums = [np.bincount(inverse, weights=x[rows], minlength=len(groups)) for x in sums]
        # each pair's whole hours held: a range of the sorted groups, of which the whole ones
        lo = np.searchsorted(groups, base + np.ceil(s / _HOUR).astype(np.int64))
        hi = np.searchsorted(groups, base + np.floor(e / _HOUR).astype(np.int64))
        pair, at = _ranges(lo, np.maximum(hi, lo))
        pair, at = pair[whole[at]], at[whole[at]]
        weight = self.pair_weight[pair]
        on_host = np.bincount(at, weights=weight, minlength=len(groups))
        share = weight / np.maximum(samples[at], on_host[at])
        job = self.pair_job[pair]
        by_node = [np.bincount(job, weights=share * g[at], minlength=n) for g in group_sums]
        runs_of_group: dict[int, set[str]] = defaultdict(set)
        for g, r in set(zip(inverse.tolist(), run_codes[rows].tolist(), strict=True)):
            runs_of_group[g].add(names[r])
        node_runs: list[set[str]] = [set() for _ in range(n)]
        for j, g in set(zip(job.tolist(), at.tolist(), strict=True)):
            node_runs[j] |= runs_of_group[g]
        self._hours = _Hours(
            whole_id=whole_id,
            whole_node=groups[whole],
            by_id=by_id,
            by_node=by_node,
            id_seen=np.bincount(link[taken], minlength=n) > 0,
            id_runs=id_runs,
            node_runs=node_runs,
        )
        self._needed = hourly.loc[need, ["run_id", "gpu", "hour"]]
        return self._stretches(hourly[need])

    @property
    def hours_from_rollups(self) -> tuple[int, int]:
        """The (job, hour)s by id and the (host, hour)s by node that the rollups answered
        (none before :meth:`use_rollups`)."""
        h = self._hours
        return (0, 0) if h is None else (len(h.whole_id), len(h.whole_node))

    def _stretches(self, hourly: pd.DataFrame) -> list[tuple[str, str, datetime, datetime]]:
        """The rows' hours as stretches of each GPU's minutes in the span, consecutive hours
        as one."""
        if not len(hourly):
            return []
        rows = hourly.sort_values(["run_id", "gpu", "hour"], kind="stable")
        run, gpu = (rows[c].astype(str).to_numpy() for c in ("run_id", "gpu"))
        hour = rows["hour"].to_numpy(dtype=np.int64)
        cut = (
            np.flatnonzero(
                (run[1:] != run[:-1]) | (gpu[1:] != gpu[:-1]) | (hour[1:] != hour[:-1] + 1)
            )
            + 1
        )
        first_minute = math.floor(self.t0 / 60) * 60  # the minute the span starts in counts
        last_minute = math.ceil(self.t1 / 60) * 60 - 60
        out = []
        for a, b in zip(
            np.concatenate(([0], cut)).tolist(),
            np.concatenate((cut, [len(run)])).tolist(),
            strict=True,
        ):
            lo = max(int(hour[a]) * _HOUR, first_minute)
            hi = min(int(hour[b - 1]) * _HOUR + _HOUR - 60, last_minute)
            out.append((str(run[a]), str(gpu[a]), _utc(lo), _utc(hi)))
        return out

    def week(
        self,
        samples: pd.DataFrame,
        *,
        value: str,
        thresholds: Thresholds,
        overrides: Mapping[str, float] | None = None,
        owned: Mapping[str, OwnedGpu] | None = None,
        usage: Mapping[tuple[str, str], tuple[float, float | None]] | None = None,
    ) -> AllocationWeek:
        """Each job's week (:class:`JobLine`): its hours from the rollups (:meth:`use_rollups`)
        and the rest from ``samples``. Arguments as :func:`allocation_week`'s."""
        held = self.gpus * (self.ends - self.starts)
        m = self._match(samples, value=value, thresholds=thresholds)
        named: list[list[str]] = [[] for _ in self.allocations]
        for run, j in self.job_of_run.items():
            named[j].append(run)
        lines = []
        for j, a in enumerate(self.allocations):
            runs_j = tuple(sorted(m.runs[j]))
            # the model its samples saw wins over a gres type's name (``a100`` is no size)
            model = _model_seen(runs_j, self.model_of_run, a.gpu_model)
            price = reported_price(model, None, None, overrides, owned)[0] if model else None
            got = min(float(m.sampled[j]), float(held[j]))
            measured, util, idle = float(m.known[j]), float(m.used[j]), float(m.idle[j])
            matched = (
                "id"
                if m.by_id[j]
                else ("workload" if self.scoped[j] else "node")
                if m.by_node[j]
                else ""
            )
            step = (usage or {}).get((a.cluster, a.job_id)) if a.source == "slurm" else None
            if step is not None and got <= 0 and held[j] > 0:
                average = step[0] if step[0] <= 100 else min(100.0, step[0] / max(a.gpus, 1))
                got = measured = float(held[j])
                util = average * got
                idle = got if average < thresholds.idle_pct else 0.0
                matched = "sacct"
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
                    runs=runs_j,
                    named_by=tuple(sorted(named[j])),
                    allocated_gpu_hours=float(held[j]) / S_PER_HOUR,
                    sampled_gpu_hours=got / S_PER_HOUR,
                    idle_gpu_hours=min(idle, got) / S_PER_HOUR,
                    no_samples_gpu_hours=max(0.0, float(held[j]) - got) / S_PER_HOUR,
                    known_gpu_hours=min(measured, got) / S_PER_HOUR,
                    util_pct=weighted_util_pct(util, measured),
                    sm_known_gpu_hours=min(float(m.sm_known[j]), got) / S_PER_HOUR,
                    sm_active_pct=weighted_util_pct(float(m.sm_used[j]), float(m.sm_known[j])),
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
        return AllocationWeek(jobs=tuple(lines))

    def _match(self, samples: pd.DataFrame, *, value: str, thresholds: Thresholds) -> _Matched:
        """The jobs' sampled and idle seconds: by id, then by node and time for the others."""
        n = len(self.allocations)
        out = _Matched(
            sampled=np.zeros(n),
            idle=np.zeros(n),
            known=np.zeros(n),
            used=np.zeros(n),
            sm_known=np.zeros(n),
            sm_used=np.zeros(n),
            by_id=np.zeros(n, dtype=bool),
            by_node=np.zeros(n, dtype=bool),
            runs=[set() for _ in range(n)],
        )
        hours = self._hours
        node_got = [np.zeros(n) for _ in _PARTS]
        if hours is not None:
            out.add(hours.by_id)
            out.by_id |= hours.id_seen
            for j in np.flatnonzero(hours.id_seen).tolist():
                out.runs[j] |= hours.id_runs[j]
            node_got = list(hours.by_node)
        rows = None
        if len(samples) and n:
            minutes, rows = self._match_minutes(out, samples, value=value, thresholds=thresholds)
            node_got = [a + b for a, b in zip(node_got, minutes, strict=True)]
        out.by_node = ~out.by_id & (node_got[0] > 0)
        out.add(node_got, ~out.by_id)
        for j in np.flatnonzero(out.by_node).tolist():
            if hours is not None:
                out.runs[j] |= hours.node_runs[j]
        if rows is not None:
            self._node_runs(out, *rows)
        return out

    def _match_minutes(
        self, out: _Matched, samples: pd.DataFrame, *, value: str, thresholds: Thresholds
    ) -> tuple[list[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, list[str]] | None]:
        """Into ``out``: the samples by id of the minutes the rollups do not answer. Returns
        each job's seconds (:data:`_PARTS`) by node from those minutes, and the
        rows matched by node (host, run, minute, run names) for :meth:`_node_runs`."""
        n = len(self.allocations)
        none = [np.zeros(n) for _ in _PARTS]
        run_codes, run_names = pd.factorize(samples["run_id"])
        names = [str(r) for r in run_names]
        link = np.array([self.job_of_run.get(r, -1) for r in names], dtype=np.int64)
        host_of = [self.host_code.get(self.host_of_run.get(r, ("", "")), -1) for r in names]
        host = np.array(host_of, dtype=np.int64)
        keep = (link[run_codes] >= 0) | (host[run_codes] >= 0)
        if self._needed is not None:
            keep &= self._near_needed(samples, thresholds.idle_window_min)
        s = samples[keep]
        run_codes = run_codes[keep]
        gpu_codes, gpu_names = pd.factorize(s["gpu"])
        minute_ns = s["minute"].dt.as_unit("ns").astype("int64").to_numpy()
        order = np.lexsort((minute_ns, gpu_codes, run_codes))
        run_codes, minute_ns = run_codes[order], minute_ns[order]
        covered = s["covered_s"].to_numpy(dtype=float)[order]
        util = s[value].to_numpy(dtype=float)[order]
        flags = idle_of_series(
            util,
            covered,
            run_codes.astype(np.int64) * max(len(gpu_names), 1) + gpu_codes[order],
            minute_ns,
            threshold_pct=thresholds.idle_pct,
            window=thresholds.idle_window_min,
        )
        minute = minute_ns // 60_000_000_000
        # the minutes that overlap the span, of the hours the rollups do not answer
        inside = (minute * 60 + 60 > self.t0) & (minute * 60 < self.t1)
        index = minute // 60 - self.h0
        job_of_row, host_of_row = link[run_codes], host[run_codes]
        mine = inside & (job_of_row >= 0)
        node = inside & (host_of_row >= 0)
        if self._hours is not None:
            mine &= ~np.isin(job_of_row * self.span_h + index, self._hours.whole_id)
            node &= ~np.isin(host_of_row * self.span_h + index, self._hours.whole_node)
        idle_s = np.where(flags, covered, 0.0)
        known_s = np.where(np.isnan(util), 0.0, covered)
        used = np.where(np.isnan(util), 0.0, util * covered)
        sm = (
            s["sm_active_pct"].to_numpy(dtype=float)[order]
            if "sm_active_pct" in s
            else util * np.nan
        )
        sm_known = np.where(np.isnan(sm), 0.0, covered)
        sm_used = np.where(np.isnan(sm), 0.0, sm * covered)
        parts = (covered, idle_s, known_s, used, sm_known, sm_used)
        limits = {"starts": self.starts, "ends": self.ends, "gpus": self.gpus}

        # by id: the samples of the runs that recorded the job
        job = job_of_row[mine]
        got = _capped(job, minute[mine], *(x[mine] for x in parts), **limits)
        out.add([got[0], *got[1]])
        out.by_id[np.unique(job)] = True
        for j, r in set(zip(job.tolist(), run_codes[mine].tolist(), strict=True)):
            out.runs[j].add(names[r])

        # by node and time: each host-minute of the runs that name no job, shared among the
        # jobs on the host then by their GPUs there
        if not node.any() or not len(self.pair_job):
            return none, None
        m0 = int(self.t0 // 60)
        span = int(self.t1 // 60) - m0 + 2
        hm, hm_of_row = np.unique(
            host_of_row[node] * span + (minute[node] - m0), return_inverse=True
        )
        rows = np.bincount(hm_of_row, minlength=len(hm)).astype(float)
        sums = [np.bincount(hm_of_row, weights=x[node], minlength=len(hm)) for x in parts]
        pj, ph, pw = self.pair_job, self.pair_host, self.pair_weight
        # each (job, host) pair's host-minutes: a range of the sorted keys
        lo = np.searchsorted(hm, ph * span + (np.floor(self.starts[pj] / 60).astype(np.int64) - m0))
        hi = np.searchsorted(hm, ph * span + (np.ceil(self.ends[pj] / 60).astype(np.int64) - m0))
        pair, at = _ranges(lo, hi)
        weight = pw[pair]
        on_host = np.bincount(at, weights=weight, minlength=len(hm))
        share = weight / np.maximum(rows[at], on_host[at])
        got = _capped(pj[pair], hm[at] % span + m0, *(share * x[at] for x in sums), **limits)
        return [got[0], *got[1]], (host_of_row[node], run_codes[node], minute[node], names)

    def _near_needed(self, samples: pd.DataFrame, window: int) -> np.ndarray | bool:
        """Which rows lie in an hour whose minutes are needed, or close enough to one for the
        idle rule's windows (a scan of the window reads the whole hours' minutes too: the idle
        rule is not run on them)."""
        need = self._needed
        run, gpu = samples["run_id"], samples["gpu"]
        if need is None or not (
            isinstance(run.dtype, pd.CategoricalDtype)
            and isinstance(gpu.dtype, pd.CategoricalDtype)
        ):
            return True
        reach = math.ceil((window - 1) / 60)
        gpus = len(gpu.cat.categories) + 1
        span = self.span_h + 2 * reach + 2

        def keys(r: np.ndarray, g: np.ndarray, hour: np.ndarray) -> np.ndarray:
            return (r.astype(np.int64) * gpus + g) * span + (hour - self.h0 + reach + 1)

        nr = pd.Categorical(need["run_id"], categories=run.cat.categories).codes
        ng = pd.Categorical(need["gpu"], categories=gpu.cat.categories).codes
        known = (nr >= 0) & (ng >= 0)
        base = keys(nr[known], ng[known], need["hour"].to_numpy(dtype=np.int64)[known])
        wanted = np.unique(np.concatenate([base + d for d in range(-reach, reach + 1)]))
        hour = samples["minute"].dt.as_unit("s").astype("int64").to_numpy() // _HOUR
        hour = np.clip(hour, self.h0 - reach - 1, self.h0 + self.span_h + reach)
        return np.isin(keys(run.cat.codes.to_numpy(), gpu.cat.codes.to_numpy(), hour), wanted)

    def _node_runs(
        self,
        out: _Matched,
        host: np.ndarray,
        run: np.ndarray,
        minute: np.ndarray,
        names: Sequence[str],
    ) -> None:
        """Into ``out.runs``: for each job matched by node, the runs with a sample read on one
        of its hosts in a minute it held GPUs there."""
        jobs = np.flatnonzero(out.by_node)
        if not len(jobs):
            return
        order = np.lexsort((minute, run, host))
        host, run, minute = host[order], run[order], minute[order]
        cuts = np.flatnonzero((np.diff(host) != 0) | (np.diff(run) != 0)) + 1
        first = np.concatenate(([0], cuts)).tolist()
        last = np.concatenate((cuts, [len(host)])).tolist()
        on_host: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for a, b in zip(first, last, strict=True):
            on_host[int(host[a])].append((int(run[a]), a, b))
        for j in jobs.tolist():
            lo_m, hi_m = math.floor(self.starts[j] / 60), math.ceil(self.ends[j] / 60)
            for h in self.hosts_of[j]:
                for r, a, b in on_host.get(self.host_code[h], ()):
                    i = a + int(np.searchsorted(minute[a:b], lo_m))
                    if i < b and minute[i] < hi_m:
                        out.runs[j].add(names[r])


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``[lo[i], hi[i])``: each element's range ``i`` and its position."""
    count = np.maximum(hi - lo, 0)
    which = np.repeat(np.arange(len(lo)), count)
    at = (
        np.arange(int(count.sum()))
        - np.repeat(np.cumsum(count) - count, count)
        + np.repeat(lo, count)
    )
    return which, at


def _utc(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def allocation_week(
    allocations: Sequence[Allocation],
    runs: Iterable[Mapping[str, Any]],
    samples: pd.DataFrame,
    *,
    value: str,
    since: datetime,
    until: datetime,
    thresholds: Thresholds,
    overrides: Mapping[str, float] | None = None,
    owned: Mapping[str, OwnedGpu] | None = None,
    usage: Mapping[tuple[str, str], tuple[float, float | None]] | None = None,
) -> AllocationWeek:
    """Each job's week (:class:`JobLine`), matched to the runs' minute samples in arrays
    (:class:`AllocationJoin` with every minute read).

    Args:
        allocations: The jobs (:class:`reports.rows.Allocation`) that held GPUs in
            the span.
        runs: The runs that may hold their samples: ``id``, ``host``, ``links`` (a mapping,
            or a runs frame's JSON text), ``gpu_model``.
        samples: Minute samples as the report reads them
            (:class:`reports.kpi.frames.SampleFrameBuilder`: ``run_id``, ``minute``
            timezone-aware, ``gpu``, ``covered_s`` and ``value``), from the idle window before
            ``since`` to the one after ``until`` (the idle rule's windows reach across the
            span's edges); the rows of runs not in ``runs`` are not looked at.
        value: The utilization column (``util_pct`` or ``sm_active_pct``).
        since: The span's start (timezone-aware).
        until: The span's end, excluded (timezone-aware).
        thresholds: The idle rule's threshold and window.
        overrides: The config's ``[prices]``.
        owned: The config's ``[owned.<MODEL>]``.
        usage: Slurm jobs' step averages ((cluster, job id) → utilization %, memory): for a
            job no minute sample covers, its whole allocation is counted as measured at that
            average (``matched`` ``sacct``), idle where the average is under the idle
            threshold. An average over 100 (a step's GPUs summed) is divided by its GPUs.

    Returns:
        The jobs' lines, most unused dollars first.
    """
    join = AllocationJoin(allocations, runs, since=since, until=until)
    return join.week(
        samples, value=value, thresholds=thresholds, overrides=overrides, owned=owned, usage=usage
    )


def capacity_lines(
    capacity: Sequence[Capacity],
    jobs: Sequence[JobLine],
    hosts: Mapping[tuple[str, str, str], tuple[str, ...]],
    *,
    since: datetime,
    until: datetime,
    overrides: Mapping[str, float] | None = None,
    owned: Mapping[str, OwnedGpu] | None = None,
) -> tuple[CapacityLine, ...]:
    """Capacity → allocated → busy → useful per (scheduler, cluster) with nodes' capacity in
    the span.

    Args:
        capacity: The nodes' spans (:class:`reports.rows.Capacity`).
        jobs: The span's job lines (:func:`allocation_week`).
        hosts: (source, cluster, job id) → the job's hosts.
        since: The span's start (timezone-aware).
        until: Its end, excluded.
        overrides: The config's ``[prices]`` (a variant priced there is rented).
        owned: The config's ``[owned.<MODEL>]``.
    """
    from tracker.prices import owned_row

    t0, t1 = since.timestamp(), until.timestamp()
    cap: dict[tuple[str, str, str], float] = defaultdict(float)
    most: dict[tuple[str, str, str], int] = defaultdict(int)
    model_of: dict[tuple[str, str, str], str | None] = {}
    for c in capacity:
        key = (c.source, c.cluster, short_host(c.node))
        seconds = max(0.0, min(c.end_at.timestamp(), t1) - max(c.start_at.timestamp(), t0))
        cap[key] += c.gpus * seconds / S_PER_HOUR
        most[key] = max(most[key], c.gpus)
        model_of[key] = c.gpu_model or model_of.get(key)
    per: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0] * 7)
    for j in jobs:
        hs = {short_host(h) for h in hosts.get((j.source, j.cluster, j.job_id), ()) if h.strip()}
        for h in hs:
            key = (j.source, j.cluster, h)
            if key not in cap:
                continue
            part = [
                j.allocated_gpu_hours,
                j.sampled_gpu_hours,
                j.productive_gpu_hours,
                j.known_gpu_hours,
                (j.util_pct or 0.0) * j.known_gpu_hours,
                j.sm_known_gpu_hours,
                (j.sm_active_pct or 0.0) * j.sm_known_gpu_hours,
            ]
            row = per[key]
            for i, v in enumerate(part):
                row[i] += v / len(hs)
    lines = []
    for source, cluster in sorted({(k[0], k[1]) for k in cap}):
        keys = [k for k in cap if k[:2] == (source, cluster)]
        totals = [0.0] * 7
        unallocated = owned_usd = owned_hours = 0.0
        any_owned = False
        for k in keys:
            row = per.get(k, [0.0] * 7)
            scale = min(1.0, cap[k] / row[0]) if row[0] > 0 else 1.0
            for i in range(7):
                totals[i] += row[i] * scale
            free = max(0.0, cap[k] - row[0] * scale)
            unallocated += free
            model = model_of.get(k)
            price = owned_row(model, owned, overrides) if model and owned else None
            if price is not None:
                any_owned = True
                owned_usd += free * price.usd_per_gpu_hour
                owned_hours += free
        lines.append(
            CapacityLine(
                source=source,
                cluster=cluster,
                nodes=len(keys),
                gpus=sum(most[k] for k in keys),
                capacity_gpu_hours=math.fsum(cap[k] for k in keys),
                allocated_gpu_hours=totals[0],
                sampled_gpu_hours=totals[1],
                busy_gpu_hours=totals[2],
                known_gpu_hours=totals[3],
                util_pct=weighted_util_pct(totals[4], totals[3]),
                sm_known_gpu_hours=totals[5],
                sm_active_pct=weighted_util_pct(totals[6], totals[5]),
                unallocated_gpu_hours=unallocated,
                unallocated_owned_usd=owned_usd if any_owned else None,
                unallocated_owned_gpu_hours=owned_hours,
            )
        )
    return tuple(lines)


@dataclass(frozen=True, kw_only=True)
class GpuRow:
    """One sampled GPU of the job (a run's GPU)."""

    run: str
    gpu: str
    sampled_hours: float
    """GPU-hours its samples cover in the span."""
    known_hours: float
    """Of those, with a utilization value."""
    util_hours: float
    """Σ utilization (percent) × hours over ``known_hours``."""
    idle_hours: float
    """Hours in idle stretches (the idle rule)."""
    idle_util_hours: float
    """Σ utilization (percent) × hours over ``idle_hours``."""
    util_pct: float | None
    mem_peak_gib: float | None
    idle_minutes: int


def gpu_rows(
    s: Any, column: str, since: datetime, until: datetime, *, idle_pct: float, window: int
) -> list[GpuRow]:
    """Per (run, GPU) of ``s``: its samples in ``[since, until)`` (the minute ``since`` is in
    counted), the idle rule over all its minutes in ``s``.

    Args:
        s: Minute samples (:class:`reports.kpi.frames.SampleFrameBuilder`) with ``column``
            and ``mem_used_gib``.
        column: The utilization column.
        since: The span's start.
        until: The span's end, excluded.
        idle_pct: The idle rule's threshold.
        window: The idle rule's window, minutes.
    """
    if not len(s):
        return []
    s = s.sort_values(["run_id", "gpu", "minute"], kind="stable").reset_index(drop=True)
    series, _ = pd.factorize(
        pd.MultiIndex.from_arrays([s["run_id"].astype(str), s["gpu"].astype(str)])
    )
    minute_ns = s["minute"].dt.as_unit("ns").astype("int64").to_numpy()
    covered = s["covered_s"].to_numpy(dtype=float)
    util = s[column].to_numpy(dtype=float)
    idle = idle_of_series(util, covered, series, minute_ns, threshold_pct=idle_pct, window=window)
    lo, hi = pd.Timestamp(since).as_unit("ns").value, pd.Timestamp(until).as_unit("ns").value
    inside = (minute_ns >= lo - lo % 60_000_000_000) & (minute_ns < hi)
    out = []
    df = pd.DataFrame(
        {
            "run": s["run_id"].astype(str),
            "gpu": s["gpu"].astype(str),
            "covered": covered,
            "known": np.where(np.isnan(util), 0.0, covered),
            "used": np.where(np.isnan(util), 0.0, util * covered),
            "mem": s["mem_used_gib"].astype(float),
            "idle": idle.astype(int),
            "idle_s": np.where(idle, covered, 0.0),
            "idle_used": np.where(idle, util * covered, 0.0),  # an idle minute has a value
        }
    )[inside]
    for (run, gpu), g in df.groupby(["run", "gpu"], sort=True):
        known, used = float(g["known"].sum()), float(g["used"].sum())
        mem = g["mem"].max()
        out.append(
            GpuRow(
                run=str(run),
                gpu=str(gpu),
                sampled_hours=float(g["covered"].sum()) / S_PER_HOUR,
                known_hours=known / S_PER_HOUR,
                util_hours=used / S_PER_HOUR,
                idle_hours=float(g["idle_s"].sum()) / S_PER_HOUR,
                idle_util_hours=float(g["idle_used"].sum()) / S_PER_HOUR,
                util_pct=weighted_util_pct(used, known),
                mem_peak_gib=None if pd.isna(mem) else float(mem),
                idle_minutes=int(g["idle"].sum()),
            )
        )
    return out
