"""The run record and the per-minute sample row: the data model the tracker writes and the
reports read. Plain frozen dataclasses, no I/O."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

STATUSES = ("running", "finished", "failed", "crashed")
SOURCES = ("tracker", "tensorboard", "wandb", "nvidia-smi", "prometheus")


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """One training run as stored in the ``runs`` table.

    Times are timezone-aware UTC datetimes. A figure that is not known is ``None`` — never 0:
    a run without GPU data has ``util_pct=None`` and must not read as idle.
    """

    id: str
    name: str
    project: str = ""
    team: str = ""
    user: str = ""
    host: str = ""
    tags: tuple[str, ...] = ()
    framework: str = "plain"
    started_at: datetime
    ended_at: datetime | None = None
    heartbeat_at: datetime | None = None
    """Last time the run's process wrote to the store; a stale one means the process died."""
    status: str = "running"
    gpu_source: str = "none"
    """Where the GPU figures came from: ``nvml``, ``simulated``, ``replay``, ``none``."""
    gpu_model: str | None = None
    """Canonical model key of the price table (``H100``, ``A100-80GB``…), or NVML's name when
    the price table does not know it."""
    gpu_count: int = 0
    nodes: int = 1
    price_per_gpu_hour: float | None = None
    price_source: str | None = None
    gpu_hours: float = 0.0
    util_pct: float | None = None
    sm_active_pct: float | None = None
    mem_peak_gib: float | None = None
    mem_total_gib: float | None = None
    energy_kwh: float | None = None
    steps: int = 0
    samples: int | None = None
    tokens: int | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    """Model FLOPs utilization, 0-1, against :attr:`mfu_peak_tflops` × GPUs; never over 1 (a
    rate over the peak is an error, named in :attr:`mfu_note`)."""
    mfu_peak_tflops: float | None = None
    """One GPU's dense peak for :attr:`mfu_dtype`, TF/s: MFU's denominator
    (:mod:`tracker.peaks`)."""
    mfu_dtype: str | None = None
    """The dtype of that peak (``bf16``; ``tf32`` for an fp32 run whose matmuls ran as tf32)."""
    mfu_dtype_from: str | None = None
    """Where the dtype came from: ``trainer``, ``flag`` or ``assumed``
    (:data:`tracker.peaks.DTYPE_FROM`)."""
    mfu_note: str | None = None
    """What stands instead of MFU or beside it: why there is none (``no peak for A10G``), a
    FLOP rate over the peak named as an error with its likely cause, or MFU and OFU apart by
    more than 10% and why."""
    ofu: float | None = None
    """Observed FLOPs utilization, 0-1: the tensor pipes' active fraction × the SM clock over
    the peak's clock, where both were measured (the hardware's cross-check of MFU)."""
    data_wait_pct: float | None = None
    cost_usd: float | None = None
    waste_usd: float | None = None
    idle_usd: float | None = None
    throttled_gpu_hours: float | None = None
    """GPU-hours the run's GPUs ran below their clocks for power or thermal reasons (None: not
    measured, never 0 for that)."""
    throttle_source: str | None = None
    """How that was measured: ``counter`` (violation counters: exact) or ``sampled every N s``
    (:func:`tracker.figures.measured_by`)."""
    resumed_from_step: int | None = None
    """The global step it resumed at from a checkpoint (None: it started from the beginning):
    its ``steps`` count from there. The steps of the run before it past this one are run twice
    (the report's re-done work: :func:`reports.kpi.ledger.redone_work`)."""
    sm_active_source: str | None = None
    """How ``sm_active_pct`` was measured: ``counter`` (cycle counters: exact) or ``sampled
    every N s`` (a gauge read at each reading; its bound: docs/metrics.md)."""
    mig_profile: str | None = None
    """The MIG profile of its GPUs where they were MIG instances (``1g.10gb``; several
    profiles joined by ``,``): its GPU-hours and dollars are their share of the physical GPUs
    (:mod:`tracker.shares`). None: whole GPUs."""
    gpu_split: str | None = None
    """How a GPU it shared with other workloads at the same time (time-slicing, MPS) was split
    between them: ``measured`` (each one's measured share of the GPU's work) or ``even``
    (no per-process figure); None: it held its GPUs alone."""
    verdict: str | None = None
    advice: str | None = None
    source: str = "tracker"
    links: dict[str, str] = field(default_factory=dict)

    def replace(self, **changes: Any) -> RunRecord:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class MinuteSample:
    """One GPU's figures over one wall-clock minute of one run (the ``samples`` table).

    ``minute`` is the UTC start of the minute. Means are time-weighted over the part of the
    minute the run covered; ``covered_s`` says how much of it (60 for a full minute).
    """

    run_id: str
    minute: datetime
    gpu: str
    """The GPU's UUID."""
    covered_s: float = 60.0
    util_pct: float | None = None
    sm_active_pct: float | None = None
    mem_used_gib: float | None = None
    """Peak memory in use during the minute, GiB."""
    power_w: float | None = None
    energy_kwh: float | None = None
    """Energy used during the minute, kWh."""


JOB_KEY_LINK = "job_key"
"""The link that names a run's recurring job (:attr:`RunSpec.job_key`)."""


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What a run is, as its user describes it (the arguments of :func:`tracker.track`)."""

    id: str
    name: str | None = None
    """None: ``<project>-YYYYMMDD-HHMMSS`` at start."""
    project: str = ""
    team: str = ""
    user: str | None = None
    """None: the login name."""
    tags: tuple[str, ...] = ()
    framework: str = "plain"
    links: dict[str, str] = field(default_factory=dict)
    """Where else the run is seen: ``{"wandb": URL, "tensorboard": DIR}``."""
    job_key: str | None = None
    """The recurring job this run is one of (``resnet-nightly``): its runs are compared over
    time. None: ``[tracker] job_key`` / ``GPU_KPI_JOB_KEY``, else Slurm's job name, else the
    reports derive one (:func:`reports.kpi.jobkeys.job_key`). Kept as the run's ``job_key``
    link."""
    flops_per_step: float | None = None
    """Model FLOPs of one step on this process, for MFU."""
    dtype: str | None = None
    """Training dtype (``bf16``, ``fp32``…): which GPU peak MFU is measured against. None:
    fp32 assumed (torch's default), and the run says so."""
    dtype_from: str | None = None
    """Where ``dtype`` came from: ``trainer`` (the callbacks set it from the trainer's own
    precision), else ``flag`` (the user's)."""
    price_per_gpu_hour: float | None = None
    """USD; None: the price table's for the GPU model."""
    per_gpu: bool = False
    """Log ``gpu/<i>/…`` too."""
    device: str | None = None
    """Where the trainer put the model: ``cpu`` when it chose the CPU (Lightning's
    ``accelerator="cpu"``, the Trainer's ``use_cpu``), so the verdict says so instead of asking
    for NVML; None: a GPU, or not known (a plain loop)."""
    resumed_from_step: int | None = None
    """The global step the run resumed at, from a checkpoint (None: from the start). The
    callbacks find it themselves (the trainer's global step when training starts)."""


_NUMBER_TYPES = ("int", "float", "int | None", "float | None")
_RECORD_NUMBERS = tuple(f for f in dataclasses.fields(RunRecord) if f.type in _NUMBER_TYPES)
# the store's columns: INTEGER for these two, BIGINT for the other whole numbers
_INT_MAX = {"gpu_count": 2**31 - 1, "nodes": 2**31 - 1}


_TEXT_TYPES = ("str", "str | None")
_RECORD_TEXTS = tuple(f for f in dataclasses.fields(RunRecord) if f.type in _TEXT_TYPES)


def _text(value: object) -> str:
    """Any value as text: bytes decoded as UTF-8 (bad bytes replaced), others by ``str``."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _texts(record: RunRecord) -> dict[str, Any]:
    """The text fields that are not text (``team=None`` from an unset variable, bytes from a
    subprocess, a number), as text or their default: the store takes only text there."""
    fixed: dict[str, Any] = {}
    for f in _RECORD_TEXTS:
        v = getattr(record, f.name)
        if v is None and f.type != "str":
            continue
        if not isinstance(v, str):
            fixed[f.name] = (
                f.default if v is None and f.default is not dataclasses.MISSING else _text(v)
            )
    if not (isinstance(record.tags, tuple) and all(isinstance(t, str) for t in record.tags)):
        tags = record.tags if isinstance(record.tags, list | tuple | set | frozenset) else ()
        fixed["tags"] = tuple(_text(t) for t in tags)
    if not (
        isinstance(record.links, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in record.links.items())
    ):
        links = record.links if isinstance(record.links, dict) else {}
        fixed["links"] = {_text(k): _text(v) for k, v in links.items()}
    return fixed


def checked_record(record: RunRecord) -> tuple[RunRecord, list[str]]:
    """``record`` with every number that is not a finite number >= 0 (nan, inf, a negative
    price or cost, a string where a number belongs, a whole number too large for the store)
    replaced by its field's default (None: not known), every text field that is not text made
    text (bytes decoded, None where text is required: its default), and the names of the fields
    replaced.

    No number of a run record can be negative: prices, costs, hours, shares, counts, rates."""
    bad: dict[str, Any] = _texts(record)
    for f in _RECORD_NUMBERS:
        v = getattr(record, f.name)
        if v is None and "None" in str(f.type):
            continue
        whole = str(f.type).startswith("int")
        ok = (
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and 0 <= v < math.inf
            and (not whole or (isinstance(v, int) and v <= _INT_MAX.get(f.name, 2**63 - 1)))
        )
        if not ok:
            bad[f.name] = f.default
    return (record.replace(**bad) if bad else record), sorted(bad)
