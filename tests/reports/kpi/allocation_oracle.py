"""The Slurm section's matching worked out the plain way, minute by minute in Python, as the
oracle of :func:`reports.kpi.allocations.allocation_week` (which does it in arrays): the same
rules written a second time, without numpy, for small generated weeks."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from fakes import slurm_job

from reports.kpi.allocations import runs_of_jobs, short_host, workload_of
from tracker.cost import Thresholds, idle_flags


def held_minutes(start: float, end: float) -> Iterable[tuple[int, float]]:
    """The epoch minutes of ``[start, end)``, each with its seconds in it."""
    m = math.floor(start / 60)
    while m * 60 < end:
        seconds = min(end, (m + 1) * 60) - max(start, m * 60)
        if seconds > 0:
            yield m, seconds
        m += 1


def oracle(
    allocations: Sequence[Any],
    runs: Sequence[Mapping[str, Any]],
    rows: Sequence[tuple[str, str, datetime, float, float | None]],
    *,
    since: datetime,
    until: datetime,
    thresholds: Thresholds,
) -> dict[str, tuple[str, tuple[str, ...], float, float, float]]:
    """Per job id: (matched, runs, allocated, sampled, idle) seconds.

    Args:
        allocations: The jobs.
        runs: The runs (``id``, ``host``, ``links``, ``gpu_model``).
        rows: Minute samples ``(run_id, gpu, minute, covered_s, util or None)``, clean.
        since: The span's start.
        until: The span's end.
        thresholds: The idle rule.
    """
    t0, t1 = since.timestamp(), until.timestamp()
    job_of_run, host_of_run, _ = runs_of_jobs(allocations, runs)
    series: dict[tuple[str, str], list[tuple[int, float, float | None]]] = defaultdict(list)
    for run_id, gpu, minute, covered, util in rows:
        if run_id in job_of_run or run_id in host_of_run:
            series[(run_id, gpu)].append((int(minute.timestamp()) // 60, covered, util))
    # per job (by id) and per host (the rest): covered, idle and rows per minute, and whose
    job_cov: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    job_idle: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    job_runs: dict[int, set[str]] = defaultdict(set)
    # a host is (the workload of the runs, the host): a pod whose workload has runs takes
    # only theirs, every other job the runs' that name no workload
    Host = tuple[str, str]
    host_cov: dict[Host, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    host_idle: dict[Host, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    host_rows: dict[Host, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    host_runs: dict[Host, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for (run_id, _gpu), got in series.items():
        got.sort()
        flags = idle_flags(
            [u for _, _, u in got],
            [c for _, c, _ in got],
            threshold_pct=thresholds.idle_pct,
            window=thresholds.idle_window_min,
            minutes=[m for m, _, _ in got],
        )
        for (m, covered, _), idle in zip(got, flags, strict=True):
            if not (m * 60 + 60 > t0 and m * 60 < t1):  # the minute overlaps the span
                continue
            if run_id in job_of_run:
                j = job_of_run[run_id]
                job_cov[j][m] += covered
                job_idle[j][m] += covered if idle else 0.0
                job_runs[j].add(run_id)
            else:
                h = host_of_run[run_id]
                host_cov[h][m] += covered
                host_idle[h][m] += covered if idle else 0.0
                host_rows[h][m] += 1
                host_runs[h][m].add(run_id)
    span = [
        (
            max(a.start_at.timestamp(), t0),
            max(min(a.until.timestamp(), t1), a.start_at.timestamp(), t0),
        )
        for a in allocations
    ]
    scopes = {w for w, _ in host_of_run.values() if w}
    hosts = [
        sorted(
            {
                (workload_of(a) if workload_of(a) in scopes else "", short_host(h))
                for h in a.hosts
                if h.strip()
            }
        )
        for a in allocations
    ]
    # every job's GPUs on each host in each minute: a share's denominator
    on_host: dict[Host, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for j, a in enumerate(allocations):
        if a.gpus > 0 and hosts[j]:
            for h in hosts[j]:
                for m, _ in held_minutes(*span[j]):
                    on_host[h][m] += a.gpus / len(hosts[j])
    out = {}
    for j, a in enumerate(allocations):
        gpus = max(a.gpus, 0)
        allocated = sampled = idle = 0.0
        by_id = bool(job_cov.get(j))
        their: set[str] = set(job_runs[j]) if by_id else set()
        for m, seconds in held_minutes(*span[j]):
            held = gpus * seconds
            allocated += held
            got = got_idle = 0.0
            if by_id:
                got, got_idle = job_cov[j].get(m, 0.0), job_idle[j].get(m, 0.0)
            else:
                for h in hosts[j]:
                    if m in host_cov.get(h, {}):
                        share = (gpus / len(hosts[j])) / max(host_rows[h][m], on_host[h][m])
                        got += share * host_cov[h][m]
                        got_idle += share * host_idle[h][m]
                        their |= host_runs[h][m]
            if got > held:
                got_idle *= held / got
                got = held
            sampled += got
            idle += got_idle
        scoped = any(w for w, _ in hosts[j])
        matched = "id" if by_id else ("workload" if scoped else "node") if sampled > 0 else ""
        out[a.job_id] = (matched, tuple(sorted(their)) if matched else (), allocated, sampled, idle)
    return out


job = slurm_job
"""A Slurm job (:func:`fakes.slurm_job`)."""
