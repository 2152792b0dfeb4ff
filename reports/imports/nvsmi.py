"""Runs from ``nvidia-smi --query-gpu=timestamp,uuid,name,utilization.gpu,... --format=csv -l N``
logs, at the logs' own timestamps (``gpu-kpi import nvidia-smi``).

Each file is one run of all its GPUs, or with ``per_gpu`` one run per GPU UUID. The readings go
through the tracker's own :class:`tracker.sampler.Sampler`, one per GPU, driven by the log's
clock, so minute rows, utilization, idle time, cost and verdict follow a live run's rules: a
reading covers the time since the same GPU's previous reading. After a gap longer than
``max_gap_s`` (default: 3 × that GPU's median interval) the next reading covers nothing: a gap
stays a gap, never GPU-time. ``[N/A]`` cells are missing values.

The timestamps carry no zone: ``tz`` says which (default UTC). In the hour a change to winter
time repeats, a timestamp that would go back is read as the second pass. A log whose script
wrote epoch times (``date +%s``) is read in UTC, whatever ``tz`` says. A reading whose time is
no time (a 20-digit epoch, a year past 9998) is left out and counted in the import's notes. A
run whose readings cover no time (one reading, or readings a gap apart) is skipped and named.

A run's id is ``nvsmi-`` and a hash of its GPUs' UUIDs and its first timestamp, so importing a
log again replaces its run and samples with the same ones. Every file is read and computed
before anything is written, and all of it goes into the store in one transaction: a bad file
imports nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from reports.errors import ImportFailed
from reports.imports.play import (
    NO_GPU_TIME,
    Imported,
    Labels,
    NoGpuTime,
    check_max_gap,
    collector_paused,
    gap_s,
    no_time_note,
    played_run,
    progress,
    run_record,
    write_imported,
)
from tracker.config import Settings
from tracker.gpu import BackendError
from tracker.gpu.base import GpuInfo
from tracker.gpu.replay import Readings, read_log
from tracker.record import MinuteSample, RunRecord

if TYPE_CHECKING:
    from tracker.store.rollups import Rollup

SOURCE = "nvidia-smi"


def _utc_times(path: Path, readings: Readings, tz: tzinfo) -> dict[int, float]:
    """Line number → epoch seconds of every reading's local timestamp, decided in file order:
    the hour repeated when the clocks go back is read forwards; an epoch time (aware) is itself.
    Raises :class:`ImportFailed` for a time the clocks skipped (a wrong ``tz``, most likely).
    The years (1970-9998) are :func:`tracker.gpu.replay.read_log`'s to check."""
    out: dict[int, float] = {}
    last = float("-inf")
    for line, ts in sorted((line, ts) for series in readings.values() for ts, line, _ in series):
        if ts.tzinfo is not None:
            out[line] = ts.timestamp()
            continue
        t = ts.replace(tzinfo=tz).timestamp()
        if datetime.fromtimestamp(t, tz).replace(tzinfo=None) != ts:
            raise ImportFailed(
                f"{path}:{line}: {ts} does not exist in {tz} (the clocks skipped "
                "it): is --tz right?"
            )
        if t < last:  # the second pass of a repeated hour, if this is one
            t = ts.replace(tzinfo=tz, fold=1).timestamp()
        out[line] = t
        last = max(last, t)
    return out


def _run_id(uuids: Sequence[str], first: datetime) -> str:
    key = "|".join([*sorted(uuids), first.isoformat()])
    return "nvsmi-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _run(
    path: Path,
    name: str,
    gpus: list[GpuInfo],
    series: Readings,
    *,
    utc: dict[int, float],
    labels: Labels,
    settings: Settings,
    max_gap_s: float | None,
) -> tuple[RunRecord, list[MinuteSample]]:
    first = min(series[g.uuid][0][0] for g in gpus)
    played = {
        g.uuid: [
            (utc[line], f"{path}:{line}", str(ts), reading) for ts, line, reading in series[g.uuid]
        ]
        for g in gpus
    }
    return played_run(
        str(path),
        gpus,
        played,
        run_id=_run_id([g.uuid for g in gpus], first),
        name=name,
        labels=labels,
        settings=settings,
        max_gap_s=max_gap_s,
        source=SOURCE,
        links={"nvidia-smi log": str(path)},
    )


def _fast_run(
    path: Path,
    name: str,
    group: list[Any],
    *,
    labels: Labels,
    settings: Settings,
    max_gap_s: float | None,
) -> tuple[RunRecord, list[MinuteSample], dict[str, list[Rollup]]]:
    """:func:`_run` of the common UTC log, vectorized (:mod:`reports.imports.nvsmi_fast`), and
    the rollups of its minute rows where they were computed beside them (else none)."""
    from reports.imports.nvsmi_minutes import median_step, play

    rows: list[MinuteSample] = []
    run_id = _run_id([s.info.uuid for s in group], min(s.first for s in group))
    t = settings.thresholds
    rollups: list[list[Rollup] | None] = []
    played = [
        play(
            s,
            run_id=run_id,
            rows=rows,
            idle_pct=t.idle_pct,
            idle_window_min=t.idle_window_min,
            gap_s=gap_s(max_gap_s, median_step(s)),
            rollups=rollups,
        )
        for s in group
    ]
    record = run_record(
        str(path),
        [s.info for s in group],
        played,
        run_id=run_id,
        name=name,
        labels=labels,
        settings=settings,
        source=SOURCE,
        links={"nvidia-smi log": str(path)},
    )
    if any(r is None for r in rollups):
        return record, rows, {}
    computed = [r for gpu in rollups if gpu is not None for r in gpu]
    return record, rows, {run_id: computed} if computed else {}


@dataclass
class FileRuns:
    """What one log gave: its runs (each one's record, minute rows and their rollups, where
    computed), the runs with no GPU-time (skipped, named) and where its readings with no time
    were (``file:line``, left out, counted)."""

    runs: list[tuple[RunRecord, list[MinuteSample], dict[str, list[Rollup]]]] = field(
        default_factory=list
    )
    no_gpu_time: list[str] = field(default_factory=list)
    no_time: list[str] = field(default_factory=list)


def _runs(
    path: Path,
    *,
    tz: tzinfo,
    per_gpu: bool,
    labels: Labels,
    settings: Settings,
    max_gap_s: float | None,
    fast: bool,
    columns: Sequence[str] | None = None,
) -> FileRuns:
    """The runs of one log: vectorized where it is the common UTC log, else the exact path.
    ``columns``: the ``--query-gpu`` list of a log without a header."""
    out = FileRuns()
    if fast and columns is None and tz in (UTC, ZoneInfo("UTC")):
        from reports.imports.nvsmi_fast import parse

        if (parsed := parse(path)) is not None:
            if not parsed:  # as the exact path says it
                raise ImportFailed(f"{path}: nvidia-smi log has a header but no rows")
            for group in [[s] for s in parsed] if per_gpu else [parsed]:
                name = f"{path.stem}-{group[0].info.uuid}" if per_gpu else path.stem
                try:
                    record, rows, computed = _fast_run(
                        path, name, group, labels=labels, settings=settings, max_gap_s=max_gap_s
                    )
                except NoGpuTime:
                    out.no_gpu_time.append(name)
                    continue
                out.runs.append((record, rows, computed))
            return out
    no_time: list[int] = []
    try:
        gpus, series = read_log(path, columns, no_time=no_time)
    except BackendError as e:
        raise ImportFailed(str(e)) from None
    out.no_time = [f"{path}:{line}" for line in no_time]
    if not gpus:  # every reading's time was no time
        out.no_gpu_time.append(path.stem)
        return out
    utc = _utc_times(path, series, tz)
    for infos in [[g] for g in gpus] if per_gpu else [gpus]:
        name = f"{path.stem}-{infos[0].uuid}" if per_gpu else path.stem
        try:
            record, rows = _run(
                path,
                name,
                infos,
                series,
                utc=utc,
                labels=labels,
                settings=settings,
                max_gap_s=max_gap_s,
            )
        except NoGpuTime:
            out.no_gpu_time.append(name)
            continue
        out.runs.append((record, rows, {}))
    return out


PARALLEL_BYTES = 32 << 20
"""Files together over this size are read by several processes (starting them costs ~1 s)."""
MAX_WORKERS = 8
"""Each process holds its file about 5 times over while it reads: no more than this many."""


def _file_runs(job: tuple[Path, dict[str, Any]]) -> FileRuns:
    """:func:`_runs` of a file, with the rollups the store would compute from its minute rows,
    computed here: in a process of its own when files are read side by side."""
    from tracker.store.rollups import sample_rollups

    path, kwargs = job
    read = _runs(path, **kwargs)
    read.runs = [  # those of the vectorized path are computed already (from its arrays)
        (record, rows, computed or sample_rollups(rows) or {})
        for record, rows, computed in read.runs
    ]
    return read


def _reading_process() -> None:
    """A reading process's set-up (short-lived, ours, one of several side by side): Arrow
    parses a block in this process's thread alone (:data:`reports.imports.nvsmi_fast.THREADS`),
    and glibc's malloc keeps the memory of a file's arrays when they are freed, for the next
    file's, rather than handing it back and having each page faulted in again (a fifth of a
    file's reading time on this machine; no-op with another C library)."""
    from reports.imports import nvsmi_fast

    nvsmi_fast.THREADS = False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
        mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: arrays under 1 GiB from the heap
        mallopt(-1, 1 << 31)  # M_TRIM_THRESHOLD: freed heap kept up to 2 GiB
    except (OSError, AttributeError):
        pass


def _each_file(
    files: list[Path],
    kwargs: dict[str, Any],
    *,
    workers: int | None,
) -> Iterator[tuple[Path, FileRuns]]:
    """Each file's runs, in file order: a file's minute rows are ~60 times fewer than its
    readings, so reading files in other processes costs little to send back. The first
    error in file order is raised, as one process would."""
    if workers is None:
        size = sum(p.stat().st_size for p in files if p.is_file())
        workers = min(len(files), os.cpu_count() or 1, MAX_WORKERS) if size > PARALLEL_BYTES else 1
    if workers <= 1 or len(files) < 2:
        for path in progress(files, "nvidia-smi logs"):
            yield path, _file_runs((path, kwargs))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import reports.imports.nvsmi_minutes  # noqa: F401
    import tracker.store.rollups  # noqa: F401
    from reports.imports import arrow_csv

    # what each reading process needs, imported once here before the fork rather than again
    # in each (SQLAlchemy under the rollups, pyarrow: ~0.5 s a process on 2 vCPUs); the store
    # that writes the runs after needs the first anyway
    arrow_csv.available()
    # fork: no re-import of the caller's __main__ (a script without a guard, stdin); the CLI,
    # which asks for workers, holds no thread that a fork could catch holding a lock
    with ProcessPoolExecutor(
        max_workers=workers,
        initializer=_reading_process,
        mp_context=multiprocessing.get_context("fork"),
    ) as pool:
        done = pool.map(_file_runs, [(path, kwargs) for path in files])
        yield from zip(progress(files, "nvidia-smi logs"), done, strict=True)


def read_nvsmi(
    paths: Sequence[str | Path],
    *,
    tz: tzinfo = UTC,
    labels: Labels | None = None,
    per_gpu: bool = False,
    settings: Settings | None = None,
    max_gap_s: float | None = None,
    fast: bool = True,
    workers: int | None = 1,
    columns: Sequence[str] | None = None,
) -> Imported:
    """The runs and minute samples of these logs (nothing written). Raises
    :class:`ImportFailed` naming the file (and line) of the first bad input. ``fast``: the
    common UTC log is read vectorized (equal results; False: every file the exact way).
    ``workers``: processes reading files side by side (None: one per CPU when the files hold
    over :data:`PARALLEL_BYTES`, as ``gpu-kpi import`` asks; the default 1: this process
    alone, for callers that may hold threads). ``columns``: the ``--query-gpu`` list of logs
    written without a header (``--format=csv,noheader``). Runs whose readings cover no time
    are in ``skipped`` (:data:`reports.imports.play.NO_GPU_TIME`), readings whose time is no
    time counted in ``notes``."""
    labels = labels or Labels()
    settings = settings or Settings()
    check_max_gap(max_gap_s)
    records: dict[str, tuple[Path, RunRecord]] = {}
    samples: list[MinuteSample] = []
    no_gpu_time: list[str] = []
    no_time: list[str] = []
    files = list(dict.fromkeys(Path(p).resolve() for p in paths))  # a file given twice: once
    kwargs = {
        "tz": tz,
        "per_gpu": per_gpu,
        "labels": labels,
        "settings": settings,
        "max_gap_s": max_gap_s,
        "fast": fast,
        "columns": columns,
    }
    rollups: dict[str, list[Rollup]] = {}
    with collector_paused():
        for path, read in _each_file(files, kwargs, workers=workers):
            no_gpu_time += read.no_gpu_time
            no_time += read.no_time
            for record, rows, computed in read.runs:
                if record.id in records:
                    raise ImportFailed(
                        f"{path}: the same GPUs and first reading as "
                        f"{records[record.id][0]}: the same log twice?"
                    )
                records[record.id] = (path, record)
                samples.extend(rows)
                rollups.update(computed)
    single = {s.run_id for s in samples if s.gpu.startswith("GPU-log-")}
    notes = (
        [
            "one GPU per log (no uuid, pci.bus_id, serial or index column): "
            + ", ".join(r.name for _, r in records.values() if r.id in single)
        ]
        if single
        else []
    )
    mig = [p.name for p in files if mig_enabled(p)]
    if mig:
        notes.append(
            f"MIG enabled ({', '.join(mig)}): nvidia-smi gives a GPU split into MIG instances "
            "no utilization ([N/A]) and no --query-* gives its instances, so its time here is "
            "not measured; dcgm-exporter's per-instance series (gpu-kpi import prometheus) or "
            "the tracker on each instance measure them, each as its share of the GPU"
        )
    return Imported(
        [r for _, r in records.values()],
        samples,
        skipped={NO_GPU_TIME: no_gpu_time} if no_gpu_time else {},
        rollups=rollups,
        notes=notes + no_time_note(no_time),
    )


MIG_MODE = "mig.mode.current"
"""The ``--query-gpu`` field that says a GPU is split into MIG instances (``Enabled``)."""


def mig_enabled(path: Path) -> bool:
    """Whether a log's last line says its GPU had MIG enabled (a ``mig.mode.current`` column
    in its header, ``Enabled`` in it): nvidia-smi gives such a GPU no utilization (``[N/A]``),
    and no ``--query-*`` gives its instances. Reads the first and the last line of a regular
    file only (a pipe was read once already: opening it again would wait for a writer)."""
    import csv

    try:
        if not path.is_file():
            return False
        with path.open("rb") as f:
            head = f.readline().decode("utf-8", "replace")
            if MIG_MODE not in head:
                return False
            f.seek(0, 2)
            f.seek(max(f.tell() - 65536, 0))
            tail = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return False
    names = [n.strip() for n in next(csv.reader([head]))]
    rows = [r for r in csv.reader(tail[-2:]) if len(r) == len(names)]
    at = names.index(MIG_MODE)
    return bool(rows) and rows[-1][at].strip() == "Enabled"


def import_nvsmi(
    store_url: str, paths: Sequence[str | Path], *, replace: bool = False, **kwargs: Any
) -> Imported:
    """:func:`read_nvsmi`, then every run and sample into the store in one transaction. A run
    imported before from the same log (same id) is replaced whole. Another run with minutes of
    the same GPUs in the same time is an :class:`ImportFailed` (a GPU's time counts once),
    unless it is an earlier nvidia-smi import and ``replace``: then it is dropped."""
    with collector_paused():
        return write_imported(
            store_url, read_nvsmi(paths, **kwargs), source=SOURCE, replace=replace
        )
