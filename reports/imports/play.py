"""What every import shares: a GPU's readings played through the tracker's own
:class:`tracker.sampler.Sampler` at the readings' own times, a run record made from what was
played (the tracker's figures and rules), and the all-or-nothing write that lets a GPU's time
count once.

A reading covers the time since the same GPU's previous reading. After a gap longer than
``max_gap_s`` (default: 3 × that GPU's median interval) the next reading covers nothing: a gap
stays a gap, never GPU-time. No reading covers more than :data:`GAP_CEILING_S` (a day), however
few readings there are: two readings 30 days apart are a gap, not 720 GPU-hours, and a reading
makes at most 1,441 minute rows, so an import's work follows its readings, never the span their
times claim.

A run with no covered time is skipped and named (:data:`NO_GPU_TIME`); a reading whose time is
no time (a 20-digit epoch, a year past 9998) is left out and counted (:func:`no_time_note`).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import operator
import os
import statistics
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import groupby, pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from reports.errors import ImportFailed
from tracker import figures
from tracker.config import Settings
from tracker.gpu.base import GpuInfo, GpuReading
from tracker.peaks import peak_clock_mhz
from tracker.prices import canonical_gpu, price_for
from tracker.record import MinuteSample, RunRecord, checked_record
from tracker.sampler import Sampler, split_of
from tracker.shares import profiles
from tracker.throughput import StepCounter
from tracker.units import S_PER_DAY, S_PER_HOUR

if TYPE_CHECKING:
    from tracker.store import RunStore
    from tracker.store.rollups import Rollup

GAP_INTERVALS = 3.0
"""A gap is longer than this many times the GPU's median interval between readings."""
GAP_CEILING_S = S_PER_DAY
"""The longest time one reading may cover, whatever the intervals or ``--max-gap`` say: a day
(a log read hourly by cron still counts; a median taken from two readings 30 days apart does
not make 30 days of GPU-time)."""
OUR_POINT_MAX_S = S_PER_HOUR
"""The longest window one of our callback's points may cover (it logs far more often)."""

Series = Sequence[tuple[float, str, str, GpuReading]]
"""One GPU's readings in the order read: (epoch seconds, where it was read — ``file:line`` —,
the time as the source wrote it, the reading)."""


OUR_POINTS = {
    "gpu/util_pct": "util_pct",
    "gpu/sm_active_pct": "sm_active_pct",
    "gpu/mem_used_gib": "mem_used_gib",
    "gpu/temp_c": "temp_c",
    "gpu/power_w": "power_w",
}
"""The keys our callback logs to W&B and TensorBoard → the reading fields they stand for."""
OUR_SUMMARY = ("samples_per_s", "tokens_per_s", "mfu", "data_wait_pct", "mfu_peak_tflops", "ofu")
"""Run figures our callback's summary holds that a reading cannot give."""
OUR_SUMMARY_TEXT = ("verdict", "advice", "mfu_dtype", "mfu_dtype_from", "mfu_note")
"""And the words: the tracker's verdict and advice (it judged steps, data wait and MFU, which
the logged points do not carry), MFU's denominator, what stands instead of MFU or beside it."""
OUR_TEXT_MAX = 2000
"""The longest text an import takes from one of our summaries (none of ours is longer)."""
OUR_LABELS = ("project", "team", "user")
"""Who ran it, from the run's start values (the W&B config, the TensorBoard run note); a label
given to the import wins."""


def our_texts(
    get: Callable[[str], object], fields: Sequence[str] = OUR_SUMMARY_TEXT
) -> dict[str, str]:
    """The ``fields`` (:data:`OUR_SUMMARY_TEXT`, :data:`OUR_LABELS`) a summary or a run's start
    values hold (``get(field)``), as text, each at most :data:`OUR_TEXT_MAX` characters (a
    summary is a file anyone can write: none of ours is longer)."""
    return {f: v[:OUR_TEXT_MAX] for f in fields if isinstance(v := get(f), str) and v}


def tracked_difference(
    name: str, record: RunRecord, tracked: Callable[[str], float | None]
) -> str | None:
    """The note an import of one of our runs gets where its GPU-hours or dollars from the
    logged points differ from the tracker's record (``tracked("gpu_hours")``,
    ``tracked("cost_usd")``: its summary's) by over 1%: the points cover the run from its first
    log to its last, the tracker from its start to its end. None where they agree or the
    tracker's are not in the summary."""
    hours, cost = tracked("gpu_hours"), tracked("cost_usd")
    pairs = [(record.gpu_hours, hours), (record.cost_usd, cost)]
    if all(t is None or a is None or abs(a - t) <= 0.01 * abs(t) for a, t in pairs):
        return None
    return (
        f"{name}: {_hours_usd(record.gpu_hours, record.cost_usd)} from its logged points, "
        f"{_hours_usd(hours, cost)} in the tracker's record: the points cover the run from its "
        "first log to its last, the tracker from its start to its end (the store keeps the "
        "points')"
    )


def _hours_usd(hours: float | None, usd: float | None) -> str:
    shown = "? GPU-h" if hours is None else f"{hours:.4g} GPU-h"
    return shown + ("" if usd is None else f" (${usd:.4g})")


def our_reading(values: Mapping[str, float | None], gpu_count: int) -> dict[str, float | None]:
    """One of our logged points (``values`` by :data:`OUR_POINTS` key) as each GPU's reading
    fields: the means over the run's GPUs as they are, the power (logged summed over them)
    split evenly."""
    fields = {f: values.get(k) for k, f in OUR_POINTS.items()}
    if (power := fields["power_w"]) is not None:
        fields["power_w"] = power / gpu_count
    return fields


@dataclass(frozen=True, kw_only=True)
class Labels:
    """What a source does not say about its runs, or what overrides it: who ran them, where, on
    what (empty: the source's own, where it has one)."""

    project: str = ""
    team: str = ""
    user: str = ""
    host: str = ""
    gpu_model: str | None = None
    """The model when the source does not name it, or to override it."""
    price: float | None = None
    """USD per GPU-hour for these runs, over the price table."""


@dataclass(frozen=True)
class Imported:
    records: list[RunRecord]
    samples: list[MinuteSample]
    skipped: dict[str, list[str]] = field(default_factory=dict)
    """Why → the names of the runs found but not imported (not an error: counted and named)."""
    replaced: list[str] = field(default_factory=list)
    """Earlier imports dropped whole by ``--replace``: name and GPU-hours."""
    rollups: dict[str, list[Rollup]] = field(default_factory=dict)
    """Run id → the rollups of its samples where computed beside the reading
    (:func:`tracker.store.rollups.sample_rollups`); the store computes the others'."""
    notes: list[str] = field(default_factory=list)
    """What the import assumed, one line each (``gpu-kpi import`` prints them)."""


T = TypeVar("T")


class _Pause:
    """The imports inside :func:`collector_paused` now, and whether the collector was on when
    the first came in."""

    lock = threading.Lock()
    inside = 0
    was_on = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while an import makes and writes its rows, on
    again when the last import inside leaves (if it was on when the first came in; two
    imports on two threads share the pause): an import makes some 100,000 objects for a
    64-GPU day (minute rows, their keys and dicts), none of them in a cycle, and each
    collection of the oldest generation that their number sets off walks every object of the
    process, for nothing (a tenth of a 64-GPU import's CPU time). Reference counting frees
    them as ever; what cycles the import leaves wait for the next collection after it. The
    reading processes forked meanwhile keep the collector off for their short lives."""
    with _Pause.lock:
        if not _Pause.inside:
            _Pause.was_on = gc.isenabled()
            gc.disable()
        _Pause.inside += 1
    try:
        yield
    finally:
        with _Pause.lock:
            _Pause.inside -= 1
            if not _Pause.inside and _Pause.was_on:
                gc.enable()


NO_GPU_TIME = (
    "no GPU-time: no two readings of a GPU within the max gap (--max-gap; default 3 x the "
    "median interval, at most a day)"
)
"""Why a run whose readings cover no time (one reading, or readings a gap apart) is skipped."""


class NoGpuTime(ImportFailed):
    """A run whose readings cover no time (:data:`NO_GPU_TIME`): skipped and named by the
    importers, not an error that stops the import."""


def gap_s(max_gap_s: float | None, median_step_s: float) -> float:
    """The gap of one GPU's series, seconds: ``max_gap_s`` where given, else
    :data:`GAP_INTERVALS` × its median interval; never over :data:`GAP_CEILING_S`."""
    if max_gap_s is None:
        max_gap_s = GAP_INTERVALS * median_step_s
    return min(max_gap_s, GAP_CEILING_S)


def check_max_gap(max_gap_s: float | None) -> None:
    """Raises :class:`ImportFailed` for a ``--max-gap`` a reading may not cover (over
    :data:`GAP_CEILING_S`, or not over 0)."""
    if max_gap_s is not None and not 0 < max_gap_s <= GAP_CEILING_S:
        raise ImportFailed(
            f"--max-gap {max_gap_s:g}: seconds, more than 0 and at most "
            f"{GAP_CEILING_S:,.0f} (a day): no reading covers more"
        )


NAMED = 20
"""How many of the readings left out a note names (the rest it counts)."""


def no_time_note(wheres: Sequence[str]) -> list[str]:
    """The import's note of the readings left out because their time is no time (a 20-digit
    epoch, a date past 9998: no ``datetime`` holds it), one line: how many, and where (the
    first :data:`NAMED`); none when there were none."""
    if not wheres:
        return []
    shown = ", ".join(wheres[:NAMED])
    more = f" and {len(wheres) - NAMED:,} more" if len(wheres) > NAMED else ""
    return [
        f"skipped {len(wheres):,} reading(s) whose time is no time (outside the years "
        f"1970-9998): {shown}{more}"
    ]


MAX_ID_CHARS = 200
"""The longest run id a run of ours (its TensorBoard note, its W&B config) keeps as written."""


def our_run_id(text: str, *, prefix: str) -> str:
    """The id of a run of ours as its note gives it; one over :data:`MAX_ID_CHARS` (the
    tracker's own ids are 32 hex digits) becomes ``prefix`` and a hash of it: the id is in every
    minute row, and a 5,000-character one made a 20 KB logdir a 321 MB store."""
    if len(text) <= MAX_ID_CHARS:
        return text
    return prefix + hashlib.sha256(text.encode()).hexdigest()[:24]


GPUS_PER_HOST = 64
"""The most GPUs a run of ours may claim per host that wrote its files, where nothing it logged
shows the count (the largest servers hold 16)."""
MAX_GPUS = 4096
"""The most GPUs of any run (``--gpus`` takes 1 to this)."""
FORGED = (
    "its run note's GPU count disagrees with its own cost/usd_per_hour: a damaged or forged note"
)
UNBACKED = (
    f"its run note claims more GPUs than its files show (over {GPUS_PER_HOST} per host that "
    f"wrote them with no logged cost/usd_per_hour showing them, or over {MAX_GPUS:,}): a "
    "damaged or forged note"
)


def our_gpu_count(
    claimed: float | None, *, price: float | None, rates: Sequence[float], hosts: int
) -> int | str:
    """The GPU count a run of ours claims (its note's ``gpu_count``), or why the run is not
    imported: the count must agree with its logged price per hour (``cost/usd_per_hour`` = GPUs
    × the note's ``price``: :data:`FORGED`), or where it logged none, be at most
    :data:`GPUS_PER_HOST` per host that wrote it (:data:`UNBACKED`). A count nothing shows is
    refused rather than cut down: any figure put in its place would be made up.

    Args:
        claimed: The note's GPU count (None: not given, 1).
        price: The note's USD per GPU-hour (None: unpriced).
        rates: Its logged ``cost/usd_per_hour`` values, USD per hour.
        hosts: How many hosts wrote the run's files (at least 1 is assumed).

    Returns:
        The count, 1 to :data:`MAX_GPUS`; or the reason to skip the run.
    """
    count = max(1, int(min(claimed or 1.0, MAX_GPUS + 1.0)))
    if count > MAX_GPUS:
        return UNBACKED
    if price and rates:
        implied = sorted(rates)[len(rates) // 2] / price
        return FORGED if abs(implied - count) > 0.5 else count
    return UNBACKED if count > GPUS_PER_HOST * max(1, hosts) else count


def files_under(root: Path, match: Callable[[str], bool]) -> list[Path]:
    """Every file below ``root`` whose name ``match`` es, resolved, in path order: walked with a
    stack, not recursion (a logdir 1,200 folders deep raised RecursionError in ``rglob``); a
    symlinked folder is not entered (no loops), a folder that cannot be read is passed over."""
    found: list[Path] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif match(entry.name) and entry.is_file():
                        found.append(Path(entry.path).resolve())
        except OSError:
            continue
    return sorted(found)


def progress(items: Sequence[T], what: str, *, show: bool | None = None) -> Iterator[T]:
    """``items``, with ``what: n/N`` rewritten on stderr as they go when it is a terminal and
    there are several (never into a log or a pipe)."""
    show = (sys.stderr.isatty() and len(items) > 1) if show is None else show
    for n, item in enumerate(items, 1):
        if show:
            print(f"\r{what}: {n}/{len(items)}", end="", file=sys.stderr, flush=True)
        yield item
    if show:
        print(file=sys.stderr)


class _Log:
    """One GPU's readings as a backend the sampler reads at the source's times."""

    name = "import"

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


class Player:
    """One GPU's readings played through a sampler as they come, in time order: its minute
    rows go to ``rows``; after a gap longer than ``gap_s`` the next reading covers nothing.
    A second reading at the same time, or one back, is an :class:`ImportFailed`."""

    def __init__(
        self,
        info: GpuInfo,
        *,
        run_id: str,
        settings: Settings,
        gap_s: float,
        rows: list[MinuteSample],
    ) -> None:
        self.info = info
        self.gap_s = gap_s
        self._log = _Log(info, {})
        self.sampler = Sampler.from_settings(
            self._log,
            settings,
            run_id=run_id,
            clock=lambda: self._log.now,
            threaded=False,
            on_minute=rows.extend,
        )
        self.sampler.alert = None
        self.first: float | None = None
        self.last = float("-inf")

    def add(self, t: float, where: str, shown: str, reading: GpuReading) -> None:
        if t <= self.last:
            what = "a second reading at" if t == self.last else "a reading back at"
            raise ImportFailed(f"{where}: GPU {self.info.uuid} has {what} {shown}")
        log = self._log
        log.readings = {t: reading}
        log.now = t
        if self.first is None:
            self.first = t
            self.sampler.start()
        else:
            if t - self.last > self.gap_s:
                self.sampler.gap()
            self.sampler.sample(t)
        self.last = t

    def finish(self) -> tuple[Sampler, float, float]:
        """The sampler (its run aggregates and idle detector), the first and last time."""
        self.sampler.stop()
        assert self.first is not None, "a player with no reading"
        return self.sampler, self.first, self.last


def play_gpu(
    info: GpuInfo,
    series: Series,
    *,
    run_id: str,
    settings: Settings,
    max_gap_s: float | None,
    rows: list[MinuteSample],
) -> tuple[Sampler, float, float]:
    """Play one GPU's whole series (:class:`Player`); the gap is ``max_gap_s``, by default
    :data:`GAP_INTERVALS` × the series' median interval, at most :data:`GAP_CEILING_S`."""
    times = [t for t, _, _, _ in series]
    steps = [b - a for a, b in pairwise(times)]
    gap = gap_s(max_gap_s, statistics.median(steps) if steps else 0.0)
    player = Player(info, run_id=run_id, settings=settings, gap_s=gap, rows=rows)
    for item in series:
        player.add(*item)
    return player.finish()


def played_run(
    where: str,
    gpus: Sequence[GpuInfo],
    series: Mapping[str, Series],
    *,
    run_id: str,
    name: str,
    labels: Labels,
    settings: Settings,
    max_gap_s: float | None,
    source: str,
    **fields: Any,
) -> tuple[RunRecord, list[MinuteSample]]:
    """A finished run of ``gpus`` from their readings (``series`` by UUID) and its minute rows.
    ``fields`` fill the record where the source knows more (``steps``, ``framework``, ``links``,
    ``status``, throughput…); ``labels`` fill project, team, user and host where set."""
    rows: list[MinuteSample] = []
    played = [
        play_gpu(
            g, series[g.uuid], run_id=run_id, settings=settings, max_gap_s=max_gap_s, rows=rows
        )
        for g in gpus
    ]
    return run_record(
        where,
        gpus,
        played,
        run_id=run_id,
        name=name,
        labels=labels,
        settings=settings,
        source=source,
        **fields,
    ), rows


def run_record(
    where: str,
    gpus: Sequence[GpuInfo],
    played: Sequence[tuple[Any, float, float]],
    *,
    run_id: str,
    name: str,
    labels: Labels,
    settings: Settings,
    source: str,
    interval_s: float = 1.0,
    **fields: Any,
) -> RunRecord:
    """The finished run of ``gpus`` from what their samplers played (:meth:`Player.finish`,
    in the order of ``gpus``; or anything with the sampler's ``run[uuid]`` and
    ``idle_of_run()``, as :class:`reports.imports.nvsmi_minutes.Played`), their readings
    ``interval_s`` apart (what a sampled figure says it was sampled every). Raises
    :class:`NoGpuTime` when their readings cover no time."""
    models = sorted({canonical_gpu(g.name) or g.name for g in gpus})
    if len(models) > 1 and labels.gpu_model is None:
        raise ImportFailed(
            f"{where}: GPUs of different models ({', '.join(models)}) in one "
            "run: import with --per-gpu, or say the model with --gpu-model"
        )
    stats = [s.run[g.uuid] for (s, _, _), g in zip(played, gpus, strict=True)]
    idle = [s.idle_of_run()[0] for s, _, _ in played]
    start, end = min(a for _, a, _ in played), max(b for _, _, b in played)
    model_name = labels.gpu_model or gpus[0].name
    if model_name == "unknown":
        raise ImportFailed(
            f"{where}: no GPU model in the log (no 'name' column): say it with --gpu-model "
            "(e.g. --gpu-model A100-80GB)"
        )
    model = canonical_gpu(model_name) or model_name
    price = price_for(
        model, labels.price, settings.prices, owned=settings.owned, set_with="--price"
    )
    covered_s = sum(s.seconds for s in stats) / len(gpus)
    if not covered_s:
        raise NoGpuTime(f"{where}: {name}: {NO_GPU_TIME}")
    fig = figures.run_figures(
        duration_s=covered_s,
        gpu_count=len(gpus),
        stats=stats,
        idle=idle,
        own_time=True,  # GPUs logged for different lengths: each one's waste on its own time
        usd_per_gpu_hour=price.usd_per_gpu_hour if price else None,
        thresholds=settings.thresholds,
        total=StepCounter(),
        steps=0,
        samples=0,
        tokens=0,
        interval_s=interval_s,
        shares=[
            g.share(settings.mig_share) * s.held_share for g, s in zip(gpus, stats, strict=True)
        ],
        peak_mhz=peak_clock_mhz(model),  # OFU where tensor activity and the clock were read
    )
    values = figures.record_fields(
        fig,
        duration_s=covered_s,
        peak=None,
        rank_spread_pct=None,
        thresholds=settings.thresholds,
    )
    values["mig_profile"] = profiles(g.mig for g in gpus)
    values["gpu_split"] = split_of(stats)
    values.update(fields)
    for label in ("project", "team", "user", "host"):
        values[label] = getattr(labels, label) or values.get(label) or ""
    values.setdefault("framework", "unknown")
    values.setdefault("status", "finished")
    record, _ = checked_record(
        RunRecord(
            id=run_id,
            name=name,
            started_at=datetime.fromtimestamp(start, UTC),
            ended_at=datetime.fromtimestamp(end, UTC),
            heartbeat_at=datetime.fromtimestamp(end, UTC),
            gpu_source=source,
            gpu_model=model,
            price_per_gpu_hour=price.usd_per_gpu_hour if price else None,
            price_source=price.source if price else None,
            source=source,
            **values,
        )
    )
    return record


REMEDIES: dict[str, str] = {}
"""Why runs were skipped → the flag that would import them (where one would): filled by
:func:`fixable` as the importers define their reasons; ``gpu-kpi import`` prints it."""


def fixable(why: str, flag: str) -> str:
    """``why``, a reason to skip runs, registered in :data:`REMEDIES` with the ``flag`` that
    would import them."""
    REMEDIES[why] = flag
    return why


TRACKED = "already in the store, tracked by gpu-kpi"


def already_in(source: str) -> str:
    """Why a run of ours the store holds is skipped: :data:`TRACKED` when the tracker wrote it,
    else the import it came from (a W&B import after the TensorBoard one)."""
    return TRACKED if source == "tracker" else f"already in the store, from a {source} import"


SHARED = "a GPU of theirs has minutes of another run of this import at the same time"
TIME_SLICED = "time-sliced"
"""The tag of a run that shared a GPU with others at the same time (Kubernetes time-slicing):
the import split each shared GPU-minute between them, so none is dropped as :data:`SHARED`."""
OVERLAPS = (
    "a GPU of theirs has minutes of a run from another source in the store at the "
    "same time (a tracked run's minutes count)"
)


def _minutes(rows: Sequence[MinuteSample]) -> dict[str, set[tuple[str, datetime]]]:
    """Run id → its (GPU, minute) keys (a run's rows one after another: added a run at a
    time, each key made by ``attrgetter`` in C)."""
    out: dict[str, set[tuple[str, datetime]]] = {}
    for run_id, group in groupby(rows, key=_RUN_ID):
        out.setdefault(run_id, set()).update(map(_GPU_MINUTE, group))
    return out


_RUN_ID = operator.attrgetter("run_id")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_GPU_MINUTE = operator.attrgetter("gpu", "minute")


def _without(imported: Imported, drop: dict[str, str]) -> Imported:
    """``imported`` less the runs in ``drop`` (run id → why), which are counted and named."""
    if not drop:
        return imported
    skipped = {k: list(v) for k, v in imported.skipped.items()}
    for r in imported.records:
        if r.id in drop:
            skipped.setdefault(drop[r.id], []).append(r.name)
    return dataclasses.replace(
        imported,
        records=[r for r in imported.records if r.id not in drop],
        samples=[s for s in imported.samples if s.run_id not in drop],
        skipped=skipped,
        rollups={k: v for k, v in imported.rollups.items() if k not in drop},
    )


def _shared(imported: Imported, minutes: dict[str, set[tuple[str, datetime]]]) -> dict[str, str]:
    """The runs whose GPU-minutes an earlier run of the same import already holds (two logs of
    the same GPU): each GPU-minute counts once, the first run's. Runs tagged
    :data:`TIME_SLICED` held their GPU together and were given each its share: all are kept."""
    claimed: set[tuple[str, datetime]] = set()
    drop: dict[str, str] = {}
    for r in imported.records:
        if TIME_SLICED in r.tags:
            continue  # its shared minutes were split between the runs that held them
        mine = minutes.get(r.id, set())
        if mine & claimed:
            drop[r.id] = SHARED
        else:
            claimed |= mine
    return drop


def write_imported(
    store_url: str, imported: Imported, *, source: str, replace: bool = False
) -> Imported:
    """Every run and sample of ``imported`` into the store in one transaction; what was
    written is returned, with what was not counted and named in ``skipped``:

    - a run the store has from another source (a run our callback logged, brought back by a
      W&B or TensorBoard import: the tracker's own record is better; :data:`TRACKED`);
    - a run with a GPU-minute that an earlier run of this import holds (:data:`SHARED`), or that
      a run from another source in the store holds (:data:`OVERLAPS`): a GPU's time counts once.

    A run imported before (same id) is replaced whole. A GPU-minute held by another earlier
    import of the same ``source`` is an :class:`ImportFailed`, unless ``replace``: then that
    earlier run is dropped whole and named in ``replaced``."""
    from tracker.store import RunStore

    minutes = _minutes(imported.samples)
    imported = _without(imported, _shared(imported, minutes))
    with RunStore(store_url) as store:
        imported = _without(
            imported,
            {
                r.id: already_in(old.source)
                for r in imported.records
                if (old := store.get_run(r.id)) is not None and old.source != source
            },
        )
        if imported.records:
            imported = _write(store, imported, minutes, source=source, replace=replace)
    return imported


def _write(
    store: RunStore,
    imported: Imported,
    minutes: dict[str, set[tuple[str, datetime]]],
    *,
    source: str,
    replace: bool,
) -> Imported:
    """:func:`write_imported`'s checks against the store and its write, in the open ``store``."""
    from reports.data.scans import SampleScans

    ours = {r.id for r in imported.records}
    names = {r.id: r.name for r in imported.records}
    by_gpu: dict[str, set[str]] = {}  # GPU → our runs with minutes of it
    for rid in ours:
        for gpu in set(map(_FIRST, minutes.get(rid, ()))):
            by_gpu.setdefault(gpu, set()).add(rid)
    if not by_gpu:
        store.put(imported.records, imported.samples, drop=sorted(ours), rollups=imported.rollups)
        return imported
    every = [
        (min(map(_SECOND, keys)), max(map(_SECOND, keys)))
        for rid in ours
        if (keys := minutes.get(rid))
    ]
    held = SampleScans(store).gpu_spans(
        sorted(by_gpu),
        since=min(lo for lo, _ in every),
        until=max(hi for _, hi in every) + timedelta(minutes=1),
    )
    candidates = sorted({span.run_id for span in held if span.run_id not in ours})
    drop: dict[str, str] = {}
    replaced: dict[str, str] = {}  # earlier run id → "name (GPU-hours)"
    for other in candidates:
        theirs = {(row.gpu, row.minute) for row in store.samples(run_ids=[other])}
        hit = [r.id for r in imported.records if minutes.get(r.id, set()) & theirs]
        if not hit:  # spans that cross, minutes that do not (a run with a gap)
            continue
        run = store.get_run(other)
        if run is not None and run.source != source:
            drop.update(dict.fromkeys(hit, OVERLAPS))
            continue
        if not replace or run is None:
            what = f"run {run.name!r} ({run.source})" if run else f"samples of run {other}"
            hint = "; --replace imports over it" if run else ""
            raise ImportFailed(
                f"{names[hit[0]]}: its GPUs already have minutes in that time "
                f"from {what}: a GPU's time counts once{hint}"
            )
        replaced[other] = f"{run.name} ({run.gpu_hours:,.2f} GPU-h)"
    kept = _without(imported, drop)
    if not kept.records:
        return kept
    store.put(
        kept.records,
        kept.samples,
        drop=[*(r.id for r in kept.records), *replaced],
        rollups=kept.rollups,
    )
    return dataclasses.replace(kept, replaced=list(replaced.values()))
