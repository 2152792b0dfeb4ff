"""Runs from ``nvidia-smi --query-gpu=timestamp,uuid,name,utilization.gpu,... --format=csv -l N``
logs, at the logs' own timestamps (``gpu-kpi import nvidia-smi``).

Each file is one run of all its GPUs, or with ``per_gpu`` one run per GPU UUID. The readings go
through the tracker's own :class:`tracker.sampler.Sampler`, one per GPU, driven by the log's
clock, so minute rows, utilization, idle time, cost and verdict follow a live run's rules: a
reading covers the time since the same GPU's previous reading. After a gap longer than
``max_gap_s`` (default: 3 × that GPU's median interval) the next reading covers nothing: a gap
stays a gap, never GPU-time. ``[N/A]`` cells are missing values.

The timestamps carry no zone: ``tz`` says which (default UTC). In the hour a change to winter
time repeats, a timestamp that would go back is read as the second pass.

A run's id is ``nvsmi-`` and a hash of its GPUs' UUIDs and its first timestamp, so importing a
log again replaces its run and samples with the same ones. Every file is read and computed
before anything is written, and all of it goes into the store in one transaction: a bad file
imports nothing.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from itertools import pairwise
from pathlib import Path
from typing import Any

from reports.errors import ImportFailed
from tracker import figures
from tracker.config import Settings
from tracker.gpu import BackendError
from tracker.gpu.base import GpuInfo, GpuReading
from tracker.gpu.replay import Readings, read_log
from tracker.prices import canonical_gpu, price_for
from tracker.record import MinuteSample, RunRecord, checked_record
from tracker.sampler import Sampler
from tracker.throughput import StepCounter

SOURCE = "nvidia-smi"
GAP_INTERVALS = 3.0
"""A gap is longer than this many times the GPU's median interval between readings."""


@dataclass(frozen=True, kw_only=True)
class Labels:
    """What a log does not say about its runs: who ran them, where, on what."""

    project: str = ""
    team: str = ""
    user: str = ""
    host: str = ""
    gpu_model: str | None = None
    """The model when the log has no ``name`` column, or to override it."""
    price: float | None = None
    """USD per GPU-hour for these runs, over the price table."""


@dataclass(frozen=True)
class Imported:
    records: list[RunRecord]
    samples: list[MinuteSample]


class _Log:
    """One GPU's readings as a backend the sampler reads at the log's times."""

    name = SOURCE

    def __init__(self, info: GpuInfo, readings: dict[float, GpuReading]) -> None:
        self.info = info
        self.readings = readings
        self.now = 0.0

    def open(self, now: float) -> list[GpuInfo]:
        return [self.info]

    def read(self, now: float) -> list[GpuReading]:
        return [self.readings[now]]

    def close(self) -> None:
        pass


def _utc_times(path: Path, readings: Readings, tz: tzinfo) -> dict[int, float]:
    """Line number → epoch seconds of every reading's local timestamp, decided in file order:
    the hour repeated when the clocks go back is read forwards. Raises :class:`ImportFailed` for
    a time the clocks skipped (a wrong ``tz``, most likely) or outside the years 1970-9998."""
    out: dict[int, float] = {}
    last = float("-inf")
    for line, ts in sorted((line, ts) for series in readings.values() for ts, line, _ in series):
        if not 1970 <= ts.year <= 9998:
            raise ImportFailed(f"{path}:{line}: {ts} is outside the years 1970-9998")
        t = ts.replace(tzinfo=tz).timestamp()
        if datetime.fromtimestamp(t, tz).replace(tzinfo=None) != ts:
            raise ImportFailed(f"{path}:{line}: {ts} does not exist in {tz} (the clocks skipped "
                               "it): is --tz right?")
        if t < last:  # the second pass of a repeated hour, if this is one
            t = ts.replace(tzinfo=tz, fold=1).timestamp()
        out[line] = t
        last = max(last, t)
    return out


def _gpu(path: Path, info: GpuInfo, series: list[tuple[datetime, int, GpuReading]], *,
         utc: dict[int, float], run_id: str, settings: Settings, max_gap_s: float | None,
         rows: list[MinuteSample]) -> tuple[Sampler, float, float]:
    """Play one GPU's readings through a sampler; its minute rows go to ``rows``. The sampler
    (its run aggregates and idle detector) and the GPU's first and last time."""
    readings: dict[float, GpuReading] = {}
    times: list[float] = []
    for ts, line, reading in series:
        t = utc[line]
        if times and t <= times[-1]:
            what = "a second reading at" if t == times[-1] else "a reading back at"
            raise ImportFailed(f"{path}:{line}: GPU {info.uuid} has {what} {ts}")
        readings[t] = reading
        times.append(t)
    steps = [b - a for a, b in pairwise(times)]
    gap = max_gap_s if max_gap_s is not None else (
        GAP_INTERVALS * statistics.median(steps) if steps else 0.0)
    log = _Log(info, readings)
    sampler = Sampler.from_settings(log, settings, run_id=run_id, clock=lambda: log.now,
                                    threaded=False, on_minute=rows.extend)
    sampler.alert = None
    log.now = times[0]
    sampler.start()
    for prev, t in pairwise(times):
        if t - prev > gap:
            sampler.gap()
        log.now = t
        sampler.sample(t)
    sampler.stop()
    return sampler, times[0], times[-1]


def _run_id(uuids: Sequence[str], first: datetime) -> str:
    key = "|".join([*sorted(uuids), first.isoformat()])
    return "nvsmi-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _run(path: Path, name: str, gpus: list[GpuInfo], series: Readings, *, utc: dict[int, float],
         labels: Labels, settings: Settings,
         max_gap_s: float | None) -> tuple[RunRecord, list[MinuteSample]]:
    models = sorted({canonical_gpu(g.name) or g.name for g in gpus})
    if len(models) > 1 and labels.gpu_model is None:
        raise ImportFailed(f"{path}: GPUs of different models ({', '.join(models)}) in one run: "
                           "import with --per-gpu, or say the model with --gpu-model")
    first = min(series[g.uuid][0][0] for g in gpus)
    run_id = _run_id([g.uuid for g in gpus], first)
    rows: list[MinuteSample] = []
    played = [_gpu(path, g, series[g.uuid], utc=utc, run_id=run_id, settings=settings,
                   max_gap_s=max_gap_s, rows=rows) for g in gpus]
    stats = [s.run[g.uuid] for (s, _, _), g in zip(played, gpus, strict=True)]
    idle = [s.idle_of_run()[0] for s, _, _ in played]
    start, end = min(a for _, a, _ in played), max(b for _, _, b in played)
    model_name = labels.gpu_model or gpus[0].name
    model = canonical_gpu(model_name) or model_name
    price = price_for(model, labels.price, settings.prices, owned=settings.owned)
    covered_s = sum(s.seconds for s in stats) / len(gpus)
    if not covered_s:
        raise ImportFailed(f"{path}: no GPU of {name} has two readings in a row: no time to "
                           "import")
    fig = figures.run_figures(
        duration_s=covered_s, gpu_count=len(gpus), stats=stats, idle=idle,
        usd_per_gpu_hour=price.usd_per_gpu_hour if price else None,
        thresholds=settings.thresholds, total=StepCounter(), steps=0, samples=0, tokens=0)
    fields = figures.record_fields(fig, duration_s=covered_s, peak_tflops=None,
                                   rank_spread_pct=None, thresholds=settings.thresholds)
    record, _ = checked_record(RunRecord(
        id=run_id, name=name, project=labels.project, team=labels.team, user=labels.user,
        host=labels.host, framework="unknown", started_at=datetime.fromtimestamp(start, UTC),
        ended_at=datetime.fromtimestamp(end, UTC), heartbeat_at=datetime.fromtimestamp(end, UTC),
        status="finished", gpu_source=SOURCE, gpu_model=model,
        price_per_gpu_hour=price.usd_per_gpu_hour if price else None,
        price_source=price.source if price else None, source=SOURCE,
        links={"nvidia-smi log": str(path)}, **fields))
    return record, rows


def read_nvsmi(paths: Sequence[str | Path], *, tz: tzinfo = UTC, labels: Labels | None = None,
               per_gpu: bool = False, settings: Settings | None = None,
               max_gap_s: float | None = None) -> Imported:
    """The runs and minute samples of these logs (nothing written). Raises
    :class:`ImportFailed` naming the file (and line) of the first bad input."""
    labels = labels or Labels()
    settings = settings or Settings()
    records: dict[str, tuple[Path, RunRecord]] = {}
    samples: list[MinuteSample] = []
    for path in dict.fromkeys(Path(p).resolve() for p in paths):  # a file given twice: once
        try:
            gpus, series = read_log(path)
        except BackendError as e:
            raise ImportFailed(str(e)) from None
        utc = _utc_times(path, series, tz)
        for group in [[g] for g in gpus] if per_gpu else [gpus]:
            name = f"{path.stem}-{group[0].uuid}" if per_gpu else path.stem
            record, rows = _run(path, name, group, series, utc=utc, labels=labels,
                                settings=settings, max_gap_s=max_gap_s)
            if record.id in records:
                raise ImportFailed(f"{path}: the same GPUs and first reading as "
                                   f"{records[record.id][0]}: the same log twice?")
            records[record.id] = (path, record)
            samples.extend(rows)
    return Imported([r for _, r in records.values()], samples)


def import_nvsmi(store_url: str, paths: Sequence[str | Path], *, replace: bool = False,
                 **kwargs: Any) -> Imported:
    """:func:`read_nvsmi`, then every run and sample into the store in one transaction. A run
    imported before from the same log (same id) is replaced whole. Another run with minutes of
    the same GPUs in the same time is an :class:`ImportFailed` (a GPU's time counts once),
    unless it is an earlier nvidia-smi import and ``replace``: then it is dropped."""
    from tracker.store import RunStore

    imported = read_nvsmi(paths, **kwargs)
    ours = {r.id for r in imported.records}
    others: set[str] = set()
    with RunStore(store_url) as store:
        spans: dict[tuple[str, str], list[datetime]] = {}  # (run id, GPU) → first, last minute
        for row in imported.samples:
            span = spans.setdefault((row.run_id, row.gpu), [row.minute, row.minute])
            span[0], span[1] = min(span[0], row.minute), max(span[1], row.minute)
        names = {r.id: r.name for r in imported.records}
        by_gpu: dict[str, list[tuple[str, datetime, datetime]]] = {}
        for (rid, gpu), (x, y) in spans.items():
            by_gpu.setdefault(gpu, []).append((rid, x, y))
        held = store.gpu_spans(sorted(by_gpu),
                               since=min(a for a, _ in spans.values()),
                               until=max(b for _, b in spans.values()) + timedelta(minutes=1))
        for other, gpu, a, b in held:
            if other in ours or other in others:
                continue
            mine = next((rid for rid, x, y in by_gpu[gpu] if a <= y and x <= b), None)
            if mine is None:  # that run's minutes of this GPU fall in no imported run's span
                continue
            run = store.get_run(other)
            if not replace or run is None or run.source != SOURCE:
                what = f"run {run.name!r} ({run.source})" if run else f"samples of run {other}"
                hint = "; --replace imports over it" if run and run.source == SOURCE else ""
                raise ImportFailed(f"{names[mine]}: its GPUs already have minutes in that time "
                                   f"from {what}: a GPU's time counts once{hint}")
            others.add(other)
        store.put(imported.records, imported.samples, drop=[*ours, *others])
    return imported
