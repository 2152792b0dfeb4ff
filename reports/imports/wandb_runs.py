"""Runs from W&B run directories (``wandb/run-*``, ``wandb/offline-run-*``), read from their
``.wandb`` transaction logs (``gpu-kpi import wandb DIR...``).

W&B samples every GPU of a run by default (``system/gpu.N.gpu``, ``gpu.N.powerWatts``,
``gpu.N.memoryAllocatedBytes``, …): those readings play through the tracker's sampler at their
own times (see :mod:`reports.imports.play`), so a run nobody instrumented gets GPU-hours,
utilization, idle time, cost and a verdict by the tracker's rules. The GPUs' names and UUIDs
come from the run's environment record.

A run our callback logged (its config holds ``gpu_kpi/run_id``) keeps that id: when the store
already has it, it is skipped (the tracker's own record is better); when not, it is imported,
from W&B's system metrics or, where W&B recorded none, from our own ``gpu/*`` points, and its
summary's throughput and MFU. Other runs get the id ``wandb-`` + a hash of entity, project,
W&B run id and start, so importing a directory again replaces its runs with the same ones.

A run with no GPU metrics at all (a CPU run), or whose readings cover no time (one sample, or
samples further apart than the max gap), is skipped, counted and named; a damaged file is an
:class:`reports.errors.ImportFailed` naming it, and nothing is imported. A sample whose time is
no time (a 20-digit epoch, a year past 9998) is left out and counted in the import's notes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reports.errors import ImportFailed
from reports.imports.play import (
    NO_GPU_TIME,
    OUR_LABELS,
    OUR_POINT_MAX_S,
    OUR_POINTS,
    OUR_SUMMARY,
    Imported,
    Labels,
    NoGpuTime,
    Series,
    check_max_gap,
    files_under,
    fixable,
    no_time_note,
    our_gpu_count,
    our_reading,
    our_run_id,
    our_texts,
    played_run,
    progress,
    tracked_difference,
    write_imported,
)
from reports.imports.wandb_log import WandbLog, number, read_log
from tracker.config import Settings
from tracker.gpu.base import GpuInfo, GpuReading
from tracker.record import MinuteSample, RunRecord
from tracker.units import LAST_EPOCH_S

SOURCE = "wandb"
NO_GPU = "no GPU metrics (a CPU run?)"
NO_MODEL = fixable("no GPU model in the log: say it with --gpu-model", "--gpu-model MODEL")
TWICE = "the same run as another file"

_GPU_KEY = re.compile(r"gpu\.(\d+)\.(gpu|memoryAllocatedBytes|powerWatts|temp|smClock|smActive)$")
_UNITS: dict[str, tuple[str, float, float, float]] = {
    # W&B key → (GpuReading field, scale, lowest, highest) after scaling
    "gpu": ("util_pct", 1.0, 0.0, 100.0),
    "memoryAllocatedBytes": ("mem_used_gib", 2.0**-30, 0.0, 1e6),
    "powerWatts": ("power_w", 1.0, 0.0, 1e5),
    "temp": ("temp_c", 1.0, -100.0, 300.0),
    "smClock": ("sm_clock_mhz", 1.0, 0.0, 1e5),
    "smActive": ("sm_active_pct", 1.0, 0.0, 100.0),
}


def find_logs(paths: Sequence[str | Path]) -> list[Path]:
    """Every ``.wandb`` file given, or under a directory given, each once, in path order."""
    found: dict[Path, None] = {}
    for given in paths:
        path = Path(given)
        if path.is_file():
            found[path.resolve()] = None
            continue
        if not path.is_dir():
            raise ImportFailed(f"{path}: no such file or directory")
        logs = files_under(path, lambda name: name.endswith(".wandb"))
        if not logs:
            raise ImportFailed(
                f"{path}: no .wandb file under it (W&B keeps runs in "
                "wandb/run-*/ and wandb/offline-run-*/)"
            )
        found.update(dict.fromkeys(logs))
    return list(found)


def _system_readings(log: WandbLog) -> dict[int, list[tuple[float, dict[str, Any]]]]:
    """W&B's own GPU metrics: GPU index → [(time, reading fields)]."""
    out: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    for t, items in log.stats:
        per: dict[int, dict[str, float | None]] = {}
        for key, value in items.items():
            if (m := _GPU_KEY.match(key)) is None:
                continue
            name, scale, low, high = _UNITS[m[2]]
            v = number(value)
            per.setdefault(int(m[1]), {})[name] = (
                v * scale if v is not None and low <= v * scale <= high else None
            )
        for i, fields in per.items():
            out.setdefault(i, []).append((t, fields))
    return {i: _in_order(points) for i, points in out.items()}


RATE = "cost/usd_per_hour"
"""What our callback logs at every point: the price of the run's GPUs per hour."""
EDGE_S = 600.0
"""How far before its first GPU sample a run's start (or after its last one its exit) may be
and still count as the run's time: further apart, the clocks disagree and only the samples
count."""


def _whole_run(
    log: WandbLog, points: list[tuple[float, dict[str, Any]]]
) -> list[tuple[float, dict[str, Any]]]:
    """A GPU's W&B samples stretched over the whole run, from its start record to its exit
    (start + runtime): W&B samples every 15 s or so, and a short run would otherwise count only
    between its first and last sample (36 s of a 111 s run). The first sample covers the time
    from the start, as a sample covers the time before it; the time after the last sample is
    held without data (a reading with nothing known), never idle."""
    if not points:
        return points
    first, last = points[0][0], points[-1][0]
    out = list(points)
    if log.start is not None and 0 < first - log.start <= EDGE_S:
        out.insert(0, (log.start, {}))
    end = log.start + log.runtime_s if log.start is not None and log.runtime_s else None
    if end is not None and 0 < end - last <= EDGE_S:
        out.append((end, {}))
    return out


def _in_order(points: list[tuple[float, dict[str, Any]]]) -> list[tuple[float, dict[str, Any]]]:
    """Points in time order, one per time (the last written): two writers' records, or a
    clock set back, must not stop an import."""
    return sorted(dict(points).items())


def _our_readings(log: WandbLog, count: int) -> dict[int, list[tuple[float, dict[str, Any]]]]:
    """Our callback's own ``gpu/*`` points (window means over the run's GPUs), one reading per
    GPU: for a run of ours where W&B kept no system metrics."""
    out: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    for row in log.history:
        t = number(row.get("_timestamp"))
        if t is None or not 0 <= t < LAST_EPOCH_S or number(row.get("gpu/util_pct")) is None:
            continue
        fields = our_reading({k: number(row.get(k)) for k in OUR_POINTS}, count)
        for i in range(count):
            out.setdefault(i, []).append((t, fields))
    return {i: _in_order(points) for i, points in out.items()}


def _run_of(
    log: WandbLog,
    *,
    labels: Labels,
    settings: Settings,
    max_gap_s: float | None,
    notes: list[str],
) -> tuple[RunRecord, list[MinuteSample]] | str:
    """The run of one log, or why it is skipped; a difference from the tracker's own record
    (one of our runs) goes to ``notes``."""
    ours = log.config.get("gpu_kpi/run_id")
    readings = _system_readings(log)
    if not readings and isinstance(ours, str):
        count = our_gpu_count(
            number(log.config.get("gpu_kpi/gpu_count")),
            price=number(log.config.get("gpu_kpi/price_per_gpu_hour")),
            rates=[r for row in log.history if (r := number(row.get(RATE))) is not None],
            hosts=1,  # a W&B run is one host's record
        )
        if isinstance(count, str):
            return count
        readings = _our_readings(log, count)
        # each point is the mean of the time since the one before, but two points a month
        # apart are not a month of GPU-time, whatever the config says
        max_gap_s = OUR_POINT_MAX_S if max_gap_s is None else max_gap_s
    else:
        readings = {i: _whole_run(log, r) for i, r in readings.items()}
    readings = {i: r for i, r in readings.items() if len(r) > 1}
    if not readings:
        return NO_GPU
    model = log.config.get("gpu_kpi/gpu_model") if isinstance(ours, str) else None
    listed = {n for n, _, _ in log.gpus.values() if n}
    # a GPU index the environment does not list (one stats key is enough) is of the same host:
    # its model is the one every listed GPU has, not a reason to skip the whole run
    host_model = next(iter(listed)) if len(listed) == 1 else ""
    gpus: list[GpuInfo] = []
    series: dict[str, Series] = {}
    for i in sorted(readings):
        name, uuid, mem = log.gpus.get(i, ("", "", None))
        name = name or log.gpu_type or host_model or (model if isinstance(model, str) else "")
        if not (name or labels.gpu_model):
            return NO_MODEL
        uuid = uuid or f"wandb-{log.run_id or log.path.parent.name}-gpu{i}"
        where = log.url or str(log.path)
        gpus.append(
            GpuInfo(index=i, uuid=uuid, name=name or str(labels.gpu_model), mem_total_gib=mem)
        )
        series[uuid] = [
            (
                t,
                where,
                datetime.fromtimestamp(t, UTC).isoformat(),
                GpuReading(uuid=uuid, mem_total_gib=mem, **fields),
            )
            for t, fields in readings[i]
        ]
    if isinstance(ours, str) and ours:
        run_id = our_run_id(ours, prefix="wandb-")
    else:
        key = f"{log.entity}/{log.project}/{log.run_id}/{log.start}"
        run_id = "wandb-" + hashlib.sha256(key.encode()).hexdigest()[:24]
    extra: dict[str, Any] = {}
    if isinstance(ours, str):
        extra = {
            f: v
            for f in OUR_SUMMARY
            if (v := number(log.summary.get(f"gpu_kpi/{f}"))) is not None and v >= 0
        }
        extra.update(our_texts(lambda f: log.summary.get(f"gpu_kpi/{f}")))
    who: dict[str, Any] = {"project": log.project, "user": log.user}
    if isinstance(ours, str):  # who ran it, as the tracker knew it (the config says)
        who.update(our_texts(lambda f: log.config.get(f"gpu_kpi/{f}"), OUR_LABELS))
    status = "crashed" if log.exit_code is None else "finished" if log.exit_code == 0 else "failed"
    name = log.name or log.run_id or log.path.parent.name
    try:
        played = played_run(
            log.url or str(log.path),
            gpus,
            series,
            run_id=run_id,
            name=name,
            labels=labels,
            settings=settings,
            max_gap_s=max_gap_s,
            source=SOURCE,
            status=status,
            host=log.host,
            tags=tuple(log.tags),
            links={"wandb": log.url or str(log.path.parent)},
            **who,
            **extra,
        )
    except NoGpuTime:  # one sample, or samples a gap apart
        return NO_GPU_TIME
    summary = log.summary
    if isinstance(ours, str) and (
        said := tracked_difference(name, played[0], lambda f: number(summary.get(f"gpu_kpi/{f}")))
    ):
        notes.append(said)
    return played


def read_wandb(
    paths: Sequence[str | Path],
    *,
    labels: Labels | None = None,
    settings: Settings | None = None,
    max_gap_s: float | None = None,
    started: datetime | None = None,
) -> Imported:
    """The runs and minute samples of the W&B runs in ``paths`` (nothing written): run
    directories and ``.wandb`` files, or CSV exports of W&B charts
    (:mod:`reports.imports.wandb_csv`; ``started``: when the run began, for an export by
    relative time)."""
    from reports.imports.wandb_csv import is_export, read_exports

    exports = [Path(p) for p in paths if is_export(Path(p))]
    if exports and len(exports) < len(paths):
        raise ImportFailed(
            "W&B chart exports (.csv) and run directories are separate imports: give one kind"
        )
    if exports:
        found: Iterable[tuple[str, WandbLog | str]] = (
            (log.name, log) for log in read_exports(exports, started=started)
        )
    elif started is not None:
        raise ImportFailed("--started is for W&B chart exports (.csv) by relative time")
    else:
        found = ((str(p), read_log(p)) for p in progress(find_logs(paths), "W&B runs"))
    return _read(found, labels=labels, settings=settings, max_gap_s=max_gap_s)


def read_wandb_api(
    path: str,
    *,
    since: datetime,
    until: datetime,
    labels: Labels | None = None,
    settings: Settings | None = None,
    max_gap_s: float | None = None,
    api: Any = None,
) -> Imported:
    """The runs of the W&B project ``path`` (``ENTITY/PROJECT``) created in ``[since, until)``,
    through W&B's public API (:mod:`reports.imports.wandb_api`; nothing written)."""
    from reports.imports.wandb_api import api_runs

    return _read(
        api_runs(path, since=since, until=until, api=api),
        labels=labels,
        settings=settings,
        max_gap_s=max_gap_s,
    )


def _read(
    logs: Iterable[tuple[str, WandbLog | str]],
    *,
    labels: Labels | None,
    settings: Settings | None,
    max_gap_s: float | None,
) -> Imported:
    labels = labels or Labels()
    settings = settings or Settings()
    check_max_gap(max_gap_s)
    records: dict[str, RunRecord] = {}
    samples: list[MinuteSample] = []
    skipped: dict[str, list[str]] = {}
    no_time: dict[str, None] = {}  # a chart export's row is each of its runs': once
    notes: list[str] = []  # our runs' GPU-hours the points and the tracker count differently
    for name, log in logs:
        if isinstance(log, str):  # why the run could not be read
            skipped.setdefault(log, []).append(name)
            continue
        no_time.update(dict.fromkeys(log.no_time))
        path = log.path
        got = _run_of(log, labels=labels, settings=settings, max_gap_s=max_gap_s, notes=notes)
        if isinstance(got, str) or got[0].id in records:
            why = got if isinstance(got, str) else TWICE
            skipped.setdefault(why, []).append(log.name or str(path))
            continue
        record, rows = got
        records[record.id] = record
        samples.extend(rows)
    return Imported(
        list(records.values()), samples, skipped, notes=[*no_time_note(list(no_time)), *notes]
    )


def import_wandb(
    store_url: str, paths: Sequence[str | Path], *, replace: bool = False, **kwargs: Any
) -> Imported:
    """:func:`read_wandb`, then into the store in one transaction, less the runs of ours the
    store already has (:func:`reports.imports.play.write_imported`)."""
    return write_imported(store_url, read_wandb(paths, **kwargs), source=SOURCE, replace=replace)


def import_wandb_api(
    store_url: str, path: str, *, replace: bool = False, **kwargs: Any
) -> Imported:
    """:func:`read_wandb_api`, then into the store as :func:`import_wandb` does."""
    return write_imported(store_url, read_wandb_api(path, **kwargs), source=SOURCE, replace=replace)
