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
from datetime import UTC, datetime, tzinfo
from itertools import pairwise
from pathlib import Path

from reports.errors import ImportFailed
from tracker import figures
from tracker.config import Settings
from tracker.gpu import BackendError
from tracker.gpu.base import GpuInfo, GpuReading
from tracker.gpu.replay import read_log
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


def _utc(path: Path, uuid: str, naive: Sequence[datetime], tz: tzinfo) -> list[float]:
    """Epoch seconds of one GPU's local timestamps; the repeated hour of a DST change read
    forwards. Raises :class:`ImportFailed` when they go back anyway."""
    out: list[float] = []
    last = float("-inf")
    for ts in naive:
        t = ts.replace(tzinfo=tz).timestamp()
        if t < last:
            t = ts.replace(tzinfo=tz, fold=1).timestamp()
            if t < last:
                raise ImportFailed(f"{path}: timestamps of GPU {uuid} go back at {ts}")
        out.append(t)
        last = t
    return out


def _gpu(path: Path, info: GpuInfo, series: list[tuple[datetime, GpuReading]], *, run_id: str,
         tz: tzinfo, settings: Settings, max_gap_s: float | None,
         rows: list[MinuteSample]) -> tuple[Sampler, float, float]:
    """Play one GPU's readings through a sampler; its minute rows go to ``rows``. The sampler
    (its run aggregates and idle detector) and the GPU's first and last time."""
    times = _utc(path, info.uuid, [ts for ts, _ in series], tz)
    readings = dict(zip(times, (r for _, r in series), strict=True))  # a repeated time: the last
    times = sorted(readings)
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


def _run(path: Path, name: str, gpus: list[GpuInfo],
         series: dict[str, list[tuple[datetime, GpuReading]]], *, tz: tzinfo, labels: Labels,
         settings: Settings, max_gap_s: float | None) -> tuple[RunRecord, list[MinuteSample]]:
    first = min(series[g.uuid][0][0] for g in gpus)
    run_id = _run_id([g.uuid for g in gpus], first)
    rows: list[MinuteSample] = []
    played = [_gpu(path, g, series[g.uuid], run_id=run_id, tz=tz, settings=settings,
                   max_gap_s=max_gap_s, rows=rows) for g in gpus]
    stats = [s.run[g.uuid] for (s, _, _), g in zip(played, gpus, strict=True)]
    idle = [s.idle_of_run()[0] for s, _, _ in played]
    start, end = min(a for _, a, _ in played), max(b for _, _, b in played)
    model_name = labels.gpu_model or gpus[0].name
    model = canonical_gpu(model_name) or model_name
    price = price_for(model, labels.price, settings.prices, owned=settings.owned)
    covered_s = sum(s.seconds for s in stats) / len(gpus)
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
    records: list[RunRecord] = []
    samples: list[MinuteSample] = []
    for raw in paths:
        path = Path(raw)
        try:
            gpus, series = read_log(path)
        except BackendError as e:
            raise ImportFailed(str(e)) from None
        groups = [[g] for g in gpus] if per_gpu else [gpus]
        for group in groups:
            name = f"{path.stem}-{group[0].uuid}" if per_gpu else path.stem
            record, rows = _run(path, name, group, series, tz=tz, labels=labels,
                                settings=settings, max_gap_s=max_gap_s)
            records.append(record)
            samples.extend(rows)
    return Imported(records, samples)


def import_nvsmi(store_url: str, paths: Sequence[str | Path], **kwargs: object) -> Imported:
    """:func:`read_nvsmi`, then every run and sample into the store in one transaction."""
    from tracker.store import RunStore

    imported = read_nvsmi(paths, **kwargs)  # type: ignore[arg-type]
    with RunStore(store_url) as store:
        store.put(imported.records, imported.samples)
    return imported
