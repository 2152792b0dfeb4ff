"""Test doubles shared by the tests: an injected clock (and letting time pass on it), a sink
that keeps what it gets, run records and minute rows."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tracker.record import MinuteSample, RunRecord

T = TypeVar("T")

FAST = os.environ.get("GPU_KPI_TEST_FAST") == "1"
"""Set by ``make test-fast``: property tests try a tenth of their examples (``make test`` all)."""


def examples(n: int) -> int:
    """How many examples a property test tries: ``n``, or a tenth of it (at least 10) in the
    fast suite, where a quick answer matters more than a rare counterexample."""
    return max(10, n // 10) if FAST else n


T0 = 1_790_000_040.0  # a minute boundary: 2026-09-21 14:14:00 UTC


class Clock:
    """Wall-clock seconds that move only when a test moves them."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def spend(seconds: float, clock: Clock | None) -> None:
    """Let ``seconds`` pass: on ``clock`` (the session's, which then reads them exactly), or for
    real when there is none."""
    if clock is not None:
        clock.t += seconds
    elif seconds:
        time.sleep(seconds)


class ListSink:
    """A sink that records every call."""

    name = "list"

    def __init__(self) -> None:
        self.started: list[RunRecord] = []
        self.logged: list[tuple[dict[str, float], int]] = []
        self.summaries: list[RunRecord] = []
        self.alerts: list[tuple[str, str]] = []

    def start(self, record: RunRecord) -> None:
        self.started.append(record)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.logged.append((dict(metrics), step))

    def summary(self, record: RunRecord) -> None:
        self.summaries.append(record)

    def alert(self, title: str, text: str) -> None:
        self.alerts.append((title, text))

    def close(self) -> None:
        pass


def run_record(
    id: str,
    start: datetime,
    hours: float,
    *,
    gpus: int = 1,
    util: float | None = 50.0,
    model: str = "H100",
    price: float | None = 3.85,
    **kw: Any,
) -> RunRecord:
    """A finished run's summary, as the store holds it: ``gpus`` GPUs for ``hours`` hours."""
    return RunRecord(
        id=id,
        name=kw.pop("name", id),
        started_at=start,
        ended_at=start + timedelta(hours=hours),
        status="finished",
        gpu_model=model,
        gpu_count=gpus,
        price_per_gpu_hour=price,
        gpu_hours=gpus * hours,
        util_pct=util,
        **kw,
    )


def run_together(
    n: int, prepare: Callable[[int], Callable[[], T]], timeout_s: float = 120.0
) -> list[T]:
    """Run ``n`` threads that each call ``prepare(i)`` (set-up: open a store, make a service),
    wait for all to be ready, then call what it returned at the same moment; the results in
    thread order. A thread that raises fails the call."""
    start = threading.Barrier(n, timeout=timeout_s)
    results: list[T | None] = [None] * n
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            go = prepare(i)
            start.wait()
            results[i] = go()
        except BaseException as e:
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def minutes(
    run_id: str, start: datetime, n: int, util: float = 50.0, gpu: str = "GPU-0"
) -> list[MinuteSample]:
    """``n`` whole minutes of one GPU from ``start``, each at ``util`` %."""
    return [
        MinuteSample(
            run_id=run_id,
            minute=start + timedelta(minutes=m),
            gpu=gpu,
            covered_s=60.0,
            util_pct=util,
        )
        for m in range(n)
    ]


def slurm_job(
    job_id: str,
    gpus: int,
    start: datetime,
    end: datetime | None,
    hosts: tuple[str, ...],
    model: str | None = "H100",
    **kw: object,
) -> Any:
    """A Slurm job as ``gpu-kpi import slurm`` writes it (:class:`reports.rows.Allocation`;
    ``kw`` overrides any field: a pod's ``source``, a job's ``team``, ``name``...)."""
    from reports.rows import Allocation

    values: dict[str, object] = dict(
        source="slurm",
        cluster="c",
        job_id=job_id,
        shown_id=job_id,
        name=f"job-{job_id}",
        user="ana",
        account="nlp",
        team="nlp",
        partition="gpu",
        state="COMPLETED" if end else "RUNNING",
        start_at=start,
        end_at=end,
        seen_at=end or start,
        gpus=gpus,
        gpu_model=model,
        hosts=hosts,
    )
    values.update(kw)
    return Allocation(**values)  # type: ignore[arg-type]
