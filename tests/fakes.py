"""Test doubles shared by the tests: an injected clock (and letting time pass on it), a sink
that keeps what it gets, run records and minute rows, blank charts."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tracker.record import MinuteSample, RunRecord

T = TypeVar("T")

FAST = os.environ.get("GPU_KPI_TEST_FAST") == "1"
"""Set by ``make test-fast``: property tests try a tenth of their examples, at least 5
(``make test`` all)."""


def isolate_user_dirs(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """While ``monkeypatch`` holds, the user's config and data dirs are under ``home`` and no
    ``GPU_KPI_*``, ``SLURM_*`` or CI branch variable is set: nothing reads the developer's
    config or writes to their data dir (store, spool). Every test has it (``conftest.py``); a
    fixture that fills a store once for a module takes it too, with a
    ``pytest.MonkeyPatch.context()``: it runs before the first test's own."""
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    for key in list(os.environ):
        if (key.startswith("GPU_KPI_") and key != "GPU_KPI_TEST_PG") or key.startswith("SLURM_"):
            monkeypatch.delenv(key)
    for key in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILDKITE_BRANCH"):
        monkeypatch.delenv(key, raising=False)  # a run recorded in CI names its branch
    for key in ("CIRCLE_BRANCH", "BITBUCKET_BRANCH", "GIT_BRANCH", "CI_MERGE_REQUEST_IID"):
        monkeypatch.delenv(key, raising=False)


def examples(n: int) -> int:
    """How many examples a property test tries (or seeds an oracle test draws): ``n``, or a
    tenth of it (at least 5) in the fast suite, where a quick answer matters more than a rare
    counterexample; ``make test`` tries all ``n``."""
    return max(5, n // 10) if FAST else n


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
    """A finished run's summary, as the store holds it: ``gpus`` GPUs for ``hours`` hours
    (``gpu_hours``: their share's, where a MIG instance or a time-sliced GPU)."""
    return RunRecord(
        id=id,
        name=kw.pop("name", id),
        started_at=start,
        ended_at=start + timedelta(hours=hours),
        status="finished",
        gpu_model=model,
        gpu_count=gpus,
        price_per_gpu_hour=price,
        gpu_hours=kw.pop("gpu_hours", gpus * hours),
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
    gpus: float,
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


@functools.cache
def _blank_png() -> bytes:
    import io

    from PIL import Image

    from reports.render.charts import HEIGHT_PX, WIDTH_PX

    buf = io.BytesIO()
    Image.new("P", (WIDTH_PX, HEIGHT_PX), 0).save(buf, format="PNG")
    return buf.getvalue()


def draw_blank_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the report's charts blank PNGs of their size while ``monkeypatch`` holds (the
    ``blank_charts`` fixture; a module's fixture passes a ``pytest.MonkeyPatch.context()``)."""
    from reports.render import charts

    monkeypatch.setattr(charts, "charts", lambda k: dict.fromkeys(charts.CHART_NAMES, _blank_png()))


def copy_store(template_url: str, url: str) -> None:
    """Make the SQLite store at ``url`` a copy of the one at ``template_url`` (its folder too):
    a store a module fills once, handed to each test as a file of its own to change."""
    import sqlite3
    from contextlib import closing

    prefix = "sqlite:///"
    assert template_url.startswith(prefix) and url.startswith(prefix), (template_url, url)
    target = Path(url.removeprefix(prefix))
    target.parent.mkdir(parents=True, exist_ok=True)
    with (
        closing(sqlite3.connect(template_url.removeprefix(prefix))) as source,
        closing(sqlite3.connect(target)) as copy,
    ):
        source.backup(copy)


class StoreTemplates:
    """Stores a test module fills the same way again and again, filled once: ``made(url, key,
    fill)`` leaves the store at ``url`` as ``fill(url)`` would. On SQLite the first call for a
    ``key`` fills a store of the module's and each call after copies it; on PostgreSQL
    ``fill`` runs every time. Each test gets a store of its own to change (the
    ``store_templates`` fixture of ``conftest.py``, one per module)."""

    def __init__(self, folders: pytest.TempPathFactory) -> None:
        self._folders = folders
        self._made: dict[str, str] = {}

    def made(self, url: str, key: str, fill: Callable[[str], object]) -> None:
        if not url.startswith("sqlite:///"):
            fill(url)
            return
        if key not in self._made:
            template = f"sqlite:///{self._folders.mktemp('template') / 'runs.db'}"
            fill(template)
            self._made[key] = template
        copy_store(self._made[key], url)


def traced_peak(
    fn: Callable[..., T], *args: Any, warm: tuple[Any, ...] | None = None
) -> tuple[int, T]:
    """The peak of memory ``fn(*args)`` allocates under ``tracemalloc`` (bytes) and what it
    returns, measured in a fresh interpreter (spawned; ``fn`` a module-level function, its
    arguments and result picklable), after ``fn(*warm)`` there when given (imports and caches
    before measuring).

    Not in the test's own process: CPython 3.11's ``tracemalloc.start()``/``stop()`` swap the
    raw allocator while a thread with no Python frame may be allocating through it
    (python/cpython#128679, fixed in 3.12 and 3.13 only), and a test process holds such
    threads (W&B's service threads, Arrow's pools) once an earlier test started them: the fast
    suite crashed with a segmentation fault there twice in ten runs."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_traced, (fn, args, warm))


def _traced(fn: Callable[..., T], args: tuple[Any, ...], warm: tuple[Any, ...] | None) -> Any:
    import tracemalloc

    if warm is not None:
        fn(*warm)
    tracemalloc.start()
    try:
        out = fn(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, out
