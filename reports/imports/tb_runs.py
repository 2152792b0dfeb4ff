"""Runs from TensorBoard log directories (``gpu-kpi import tensorboard LOGDIR...``).

A run is a directory holding ``events.out.tfevents.*`` files (all of them together); every run
below each LOGDIR is read, every event of it (not TensorBoard's sample of 10,000 per tag).

- A run our callback logged (its ``gpu-kpi/run`` note names the run id) keeps that id; its
  ``gpu/*`` points (means of the time since the point before) play through the tracker's
  sampler at their wall times, and its summary note gives throughput and MFU. The store that
  tracked it skips it (:data:`reports.imports.play.TRACKED`).
- Any other run is GPU-time from the wall times of its summaries (a gap longer than ``max_gap_s``, by
  default 3 × the median interval, stays a gap) on ``gpus`` GPUs of ``--gpu-model``, its steps
  the highest step logged, utilization unknown unless ``tags`` maps ``util_pct`` to a scalar
  tag (0–100); ``samples_per_s`` and ``tokens_per_s`` mapped the same way are the means of
  those tags. Without a model it is skipped, counted and named.

The id of such a run is ``tb-`` and a hash of its event files' names (which hold the writer's
start time, host and process id), so importing a logdir again, or the same run moved, replaces
it with the same run. What a note of ours claims is bounded (:func:`reports.imports.play.
our_gpu_count`, :func:`reports.imports.play.our_run_id`): a GPU count its files do not show
skips the run, named; an id over 200 characters is hashed.

A run with no covered time (its events a gap apart) is skipped and named; an event whose wall
time is no time (a year past 9998) is left out and counted in the import's notes.

Event files are TFRecord files: per record a uint64 length, its masked CRC-32C, the data, and
the data's masked CRC-32C. Every length is checked; the data's CRC is checked for the records an
import uses (scalars and text: a pure-Python CRC-32C over image and histogram records would cost
seconds per MB). A damaged or cut-off file is an :class:`reports.errors.ImportFailed` naming it
and the byte offset, and nothing is imported.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import statistics
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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
from tracker.config import Settings
from tracker.extras import install_hint
from tracker.gpu.base import GpuInfo, GpuReading
from tracker.record import MinuteSample, RunRecord
from tracker.units import LAST_EPOCH_S

SOURCE = "tensorboard"
EVENTS = "events.out.tfevents."
NO_MODEL = fixable(
    "not logged by gpu-kpi and no --gpu-model: its GPUs are unknown",
    "--gpu-model MODEL (and --gpus N when not 1)",
)
NO_TIME = "fewer than two events: no time"
TWICE = "the same run as another directory"
SAME_PROCESS = "written by the process of a run gpu-kpi logged: that run holds its GPU-time"

_LENGTH = struct.Struct("<QI")


class EventsDamaged(ValueError):
    """Not a whole TFRecord file; the message says where."""


def _records(data: bytes) -> Iterator[tuple[int, bytes, int]]:
    """(offset, data, its masked CRC) of each record; every length's CRC is checked."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    pos = 0
    while pos < len(data):
        if pos + _LENGTH.size > len(data):
            raise EventsDamaged(f"cut off at byte {pos} (a run still being written?)")
        length, crc = _LENGTH.unpack_from(data, pos)
        if masked_crc32c(data[pos : pos + 8]) != crc:
            raise EventsDamaged(f"damaged at byte {pos} (length checksum mismatch)")
        start = pos + _LENGTH.size
        end = start + length
        if end + 4 > len(data):
            raise EventsDamaged(f"cut off at byte {pos} (a run still being written?)")
        yield pos, data[start:end], struct.unpack_from("<I", data, end)[0]
        pos = end + 4


@dataclass
class _Run:
    """What a run's event files say, as far as an import needs it."""

    path: Path
    files: list[str]
    wanted: frozenset[str]
    times: set[int] = field(default_factory=set)
    """Every event's wall time, whole seconds."""
    max_step: int = 0
    scalars: dict[str, list[tuple[float, int, float]]] = field(default_factory=dict)
    """Tag → (wall time, step, value) of the tags an import uses."""
    note: dict[str, str] = field(default_factory=dict)
    summary: dict[str, str] = field(default_factory=dict)
    no_time: list[str] = field(default_factory=list)
    """Where its events whose wall time is no time were (left out)."""


def _text(value: Any) -> str | None:
    if value.WhichOneof("value") == "tensor" and value.tensor.string_val:
        return bytes(value.tensor.string_val[0]).decode("utf-8", "replace")
    return None


def _scalar(value: Any) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        t = value.tensor
        if t.float_val:
            return float(t.float_val[0])
        if t.double_val:
            return float(t.double_val[0])
        if len(t.tensor_content) in (4, 8) and t.dtype in (1, 2):  # DT_FLOAT, DT_DOUBLE
            return float(struct.unpack("<f" if t.dtype == 1 else "<d", t.tensor_content)[0])
    return None


def _read(run: _Run, path: Path) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    for pos, data, crc in _records(path.read_bytes()):
        event = Event()
        try:
            event.ParseFromString(data)
        except Exception as e:
            why = (
                "data checksum mismatch"
                if masked_crc32c(data) != crc
                else f"not an event: {type(e).__name__}"
            )
            raise EventsDamaged(f"damaged at byte {pos} ({why})") from None
        wall = event.wall_time
        if not event.summary.value:  # the file's version, a graph, a log line: no point
            continue
        if not 0 <= wall < LAST_EPOCH_S:  # a bad event, not a bad file: left out, counted
            run.no_time.append(f"{path} (byte {pos}: an event at {wall:g} s since 1970)")
            continue
        run.times.add(int(wall))
        run.max_step = max(run.max_step, event.step)
        used = [
            v
            for v in event.summary.value
            if v.tag in run.wanted
            or v.tag in ("gpu-kpi/run", "gpu-kpi/summary")
            or v.tag.startswith(("gpu-kpi/run/", "gpu-kpi/summary/"))
        ]
        if used and masked_crc32c(data) != crc:
            raise EventsDamaged(f"damaged at byte {pos} (data checksum mismatch)")
        for v in used:
            if (text := _text(v)) is not None:
                into = run.note if v.tag.startswith("gpu-kpi/run") else run.summary
                into.update(_pairs(text))
            elif (x := _scalar(v)) is not None and math.isfinite(x):
                run.scalars.setdefault(v.tag, []).append((wall, event.step, x))


def _pairs(text: str) -> dict[str, str]:
    """``- key: value`` lines (our run note) and ``| key | value |`` rows (our summary)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("- ") and ": " in line:
            key, _, value = line[2:].partition(": ")
            out[key.strip()] = value.strip()
        elif line.startswith("|") and line.count("|") == 3:
            key, value = (c.strip() for c in line.strip("|").split("|"))
            out[key] = value
    return out


SPLITS = frozenset(
    {
        "train",
        "training",
        "validation",
        "validate",
        "val",
        "valid",
        "eval",
        "evaluation",
        "test",
    }
)
"""Folders one fit writes side by side (Keras 3's ``TensorBoard`` callback, ``keras/src/
callbacks/tensorboard.py``: ``train/`` and ``validation/`` under its ``log_dir``, through
``tf.summary.create_file_writer``): one run."""
GENERIC = frozenset({"lightning_logs", "runs", "logs", "tb_logs", "tensorboard"})
"""Folder names every project's logger uses: a run's name keeps the logdir's own name before
them (``nerf/lightning_logs/version_0``, not ``lightning_logs/version_0`` for every project)."""


def writer(file: Path) -> tuple[str, str]:
    """(host, pid) of the process that wrote an event file, from its name: ``events.out.
    tfevents.<time>.<host>.<pid>.<n>`` as TensorBoard's own writer (and torch's) names it, with
    ``.v2`` after it from ``tf.summary.create_file_writer`` (Keras), or another suffix a writer
    was given; a host may hold dots. Empty when the name does not say."""
    parts = file.name[len(EVENTS) :].split(".")
    while parts and not parts[-1].isdigit():  # the suffix: ".v2", ".profile-empty", …
        parts.pop()
    if len(parts) >= 4 and parts[0].isdigit() and parts[-2].isdigit():
        return ".".join(parts[1:-2]), parts[-2]
    return "", ""


def _has_note(file: Path) -> bool:
    """Whether an event file holds our run note (the ``gpu-kpi/run`` tag), by its bytes: no
    parsing (the import reads it properly later)."""
    try:
        with open(file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(b"gpu-kpi/run") >= 0  # mapped, not read: event files can be GBs
    except (OSError, ValueError):  # unreadable, or empty (nothing to map)
        return False


def find_runs(paths: Sequence[str | Path]) -> list[tuple[Path, list[Path]]]:
    """Every run directory (and its event files, in name order) given or below the paths. The
    split folders of one fit (:data:`SPLITS`, written by one process) are one run: their
    parent's."""
    runs: dict[Path, list[Path]] = {}
    for given in paths:
        root = Path(given)
        if not root.is_dir():
            raise ImportFailed(f"{root}: not a directory (give a TensorBoard logdir)")
        files = files_under(root, lambda name: name.startswith(EVENTS))
        if not files:
            raise ImportFailed(f"{root}: no TensorBoard event file ({EVENTS}*) under it")
        for f in files:
            runs.setdefault(f.parent, []).append(f)
    # train/ and validation/ beside each other, written by the same process: their parent
    processes: dict[tuple[Path, tuple[str, str]], list[Path]] = {}
    for folder, files in runs.items():
        if folder.name.lower() in SPLITS:
            for who in {writer(f) for f in files if writer(f)[0]}:
                processes.setdefault((folder.parent, who), []).append(folder)
    for (parent, _), folders in processes.items():
        if len(folders) > 1 or parent in runs:
            for folder in folders:
                if folder in runs:
                    runs.setdefault(parent, []).extend(runs.pop(folder))
    return sorted((path, sorted(files)) for path, files in runs.items())


def _float(text: str | None) -> float | None:
    try:
        x = float(text) if text is not None else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) and x >= 0 else None


def _points(
    run: _Run, count: int, uuids: list[str], util_tag: str | None, ours: bool
) -> dict[str, Series]:
    """Each GPU's readings: our ``gpu/*`` points, the mapped utilization tag's, or the
    events' times with utilization unknown."""
    where = str(run.path)
    if ours:
        by_step = {tag: {step: x for _, step, x in run.scalars.get(tag, [])} for tag in OUR_POINTS}
        points = [
            (wall, our_reading({tag: by_step[tag].get(step) for tag in OUR_POINTS}, count))
            for wall, step, _ in run.scalars.get("gpu/util_pct", [])
        ]
    elif util_tag:
        points = [
            (wall, {"util_pct": x if 0 <= x <= 100 else None})
            for wall, _, x in run.scalars.get(util_tag, [])
        ]
    else:
        points = [(float(t), {}) for t in sorted(run.times)]
    points = sorted(dict(points).items())  # one point per wall time, the last logged
    return {
        uuid: [
            (t, where, datetime.fromtimestamp(t, UTC).isoformat(), GpuReading(uuid=uuid, **fields))
            for t, fields in points
        ]
        for uuid in uuids
    }


RATE = "cost/usd_per_hour"
"""What our callback logs at every point: the price of the run's GPUs per hour."""


def _note_count(run: _Run, files: list[Path]) -> int | str:
    """The GPU count of a run of ours, or why it is skipped: the note's, where its logged price
    per hour shows it (a note that claimed 4,096 GPUs over points of one GPU's price became
    $13,010 that was never spent), or where it logged none, at most 64 per host that wrote its
    files (``gpu_count: 1e308`` in an unpriced note made a 4,096-GPU run)."""
    return our_gpu_count(
        _float(run.note.get("gpu_count")),
        price=_float(run.note.get("price_per_gpu_hour")),
        rates=[x for _, _, x in run.scalars.get(RATE, [])],
        hosts=len({host for host, _ in map(writer, files) if host}),
    )


def _run_of(
    path: Path,
    files: list[Path],
    root_names: dict[Path, str],
    *,
    labels: Labels,
    settings: Settings,
    max_gap_s: float | None,
    gpus: int,
    tags: Mapping[str, str],
    no_time: list[str],
    notes: list[str],
) -> tuple[RunRecord, list[MinuteSample]] | str:
    """The run of one directory's event files, or why it is skipped; where its events whose
    time is no time were goes to ``no_time``."""
    run = _Run(path, [f.name for f in files], frozenset([*OUR_POINTS, RATE, *tags.values()]))
    for f in files:
        try:
            _read(run, f)
        except (EventsDamaged, OSError) as e:
            raise ImportFailed(f"{f}: {e}") from None
    no_time += run.no_time
    run_id = run.note.get("run_id")
    ours = bool(run_id) and "gpu/util_pct" in run.scalars
    if ours:
        count = _note_count(run, files)
        if isinstance(count, str):
            return count
        model: str | None = run.note.get("gpu_model") or labels.gpu_model
        run_id = our_run_id(str(run_id), prefix="tb-")
        # a point is the window since the one before it; a longer silence is a gap (two
        # points a year apart are not a year of GPU-time, whatever a note says)
        max_gap_s = OUR_POINT_MAX_S if max_gap_s is None else max_gap_s
    else:
        count, model = gpus, labels.gpu_model
        key = "|".join(run.files)
        run_id = "tb-" + hashlib.sha256(key.encode()).hexdigest()[:24]
    if not model:
        return NO_MODEL
    uuids = [f"{run_id}-gpu{i}" for i in range(count)]
    series = _points(run, count, uuids, tags.get("util_pct"), ours)
    if len(series[uuids[0]]) < 2:
        return NO_TIME
    infos = [GpuInfo(index=i, uuid=u, name=model, mem_total_gib=None) for i, u in enumerate(uuids)]
    extra: dict[str, Any] = {}
    if ours:
        extra = {f: v for f in OUR_SUMMARY if (v := _float(run.summary.get(f))) is not None}
        extra.update(our_texts(run.summary.get))
        extra.update(our_texts(run.note.get, OUR_LABELS))  # who ran it: the run note says
    else:
        for figure in ("samples_per_s", "tokens_per_s"):
            values = [x for _, _, x in run.scalars.get(tags.get(figure, ""), []) if x >= 0]
            if values:
                extra[figure] = statistics.fmean(values)
        extra["steps"] = run.max_step
    host = writer(Path(run.files[0]))[0]
    name = root_names.get(path, path.name)
    try:
        played = played_run(
            str(path),
            infos,
            series,
            run_id=str(run_id),
            name=name,
            labels=labels,
            settings=settings,
            max_gap_s=max_gap_s,
            source=SOURCE,
            host=host,
            links={"tensorboard": str(path)},
            **extra,
        )
    except NoGpuTime:  # its events a gap apart
        return NO_GPU_TIME
    if ours and (said := tracked_difference(name, played[0], lambda f: _float(run.summary.get(f)))):
        notes.append(said)
    return played


def read_tensorboard(
    paths: Sequence[str | Path],
    *,
    labels: Labels | None = None,
    settings: Settings | None = None,
    max_gap_s: float | None = None,
    gpus: int = 1,
    tags: Mapping[str, str] | None = None,
) -> Imported:
    """The runs and minute samples of the TensorBoard runs below ``paths`` (nothing written)."""
    labels = labels or Labels()
    settings = settings or Settings()
    check_max_gap(max_gap_s)
    runs = find_runs(paths)
    try:
        import tensorboard.compat.proto.event_pb2  # noqa: F401  (the event format)
    except ImportError:
        raise ImportFailed(
            "reading TensorBoard event files needs the tensorboard package: "
            f"{install_hint('tensorboard')}"
        ) from None
    names: dict[Path, str] = {}
    for given in paths:
        root = Path(given).resolve()
        for path, _ in runs:
            if path == root or root in path.parents:
                rel = path.relative_to(root)
                generic = path != root and rel.parts[0].lower() in GENERIC
                name = f"{root.name}/{rel}" if generic else str(rel) if path != root else root.name
                names.setdefault(path, name)
    records: dict[str, RunRecord] = {}
    samples: list[MinuteSample] = []
    skipped: dict[str, list[str]] = {}
    no_time: list[str] = []
    notes: list[str] = []  # our runs' GPU-hours the points and the tracker count differently
    # a process our callback logged (its run note) is that run: another folder it wrote (the
    # HF Trainer's own, beside ours) holds the same GPU-time
    noted = {f for _, files in runs for f in files if _has_note(f)}
    ours = {writer(f) for f in noted} - {("", "")}
    for path, files in progress(runs, "TensorBoard runs"):
        if noted.isdisjoint(files) and any(writer(f) in ours for f in files):
            skipped.setdefault(SAME_PROCESS, []).append(names.get(path, path.name))
            continue
        got = _run_of(
            path,
            files,
            names,
            labels=labels,
            settings=settings,
            max_gap_s=max_gap_s,
            gpus=gpus,
            tags=tags or {},
            no_time=no_time,
            notes=notes,
        )
        if isinstance(got, str) or got[0].id in records:
            skipped.setdefault(got if isinstance(got, str) else TWICE, []).append(
                names.get(path, path.name)
            )
            continue
        records[got[0].id] = got[0]
        samples.extend(got[1])
    return Imported(
        list(records.values()), samples, skipped, notes=[*no_time_note(no_time), *notes]
    )


def import_tensorboard(
    store_url: str, paths: Sequence[str | Path], *, replace: bool = False, **kwargs: Any
) -> Imported:
    """:func:`read_tensorboard`, then into the store in one transaction, less the runs of ours
    the store already has (:func:`reports.imports.play.write_imported`)."""
    return write_imported(
        store_url, read_tensorboard(paths, **kwargs), source=SOURCE, replace=replace
    )
