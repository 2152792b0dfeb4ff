"""What share of a physical GPU a device or a workload held: a MIG instance's slices, a
time-sliced GPU's measured share.

A MIG instance (a GPU split by Multi-Instance GPU: ``nvidia-smi mig -cgi``) is a device of its
own to CUDA, NVML, nvidia-smi and dcgm-exporter, named by its **profile**: ``3g.40gb`` is 3 of
the GPU's compute slices and 40 GB of its memory. gpu-kpi counts and prices it as that share of
the physical GPU, so that the instances of one GPU add up to one GPU: a ``1g.10gb`` notebook
held for an hour is 1/7 GPU-hour at the whole GPU's price, and the week's capacity counts the
physical GPU once (a slice nobody held is capacity nobody held).

The share is the compute slices out of the GPU's (7 on A100, H100, H200, B200; 4 on A30) by
default, or the memory slices out of 8 (``[gpus] mig_share = "memory"``: for a site that
charges a memory-heavy ``1g.20gb`` as the two memory slices it takes). A compute instance
inside a GPU instance (``1c.3g.40gb``) is its compute slices, and that share of the GPU
instance's memory.

A **time-sliced** GPU (Kubernetes time-slicing, MPS, several processes on one GPU) is shared
in time rather than space: each holder's share is measured (:func:`time_sliced`) where a
per-process utilization exists (NVML's ``nvmlDeviceGetProcessUtilization``, dcgm-exporter's
per-pod series), else the GPU is split evenly between its holders.

A device's share rides in the minute samples: a row's ``covered_s`` is the seconds of the
physical GPU's time it covers (60 × 1/7 for a minute of a ``1g.10gb``), as a time-sliced GPU's
rows carry each holder's part of the minute.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

SHARE_BASES = ("compute", "memory")
"""What a MIG instance's share of its GPU is counted by (``[gpus] mig_share``)."""

IDLE_SPLITS = ("even", "work")
"""How a time-sliced GPU's idle time is split between its holders (``[gpus] idle_split``):
evenly (each held it; the default), or in proportion to each one's work (its cost follows its
work alone)."""

MEMORY_SLICES = 8
"""Memory slices of every MIG-capable GPU (A100, A30, H100, H200, B200, GB200)."""

COMPUTE_SLICES: dict[str, int] = {"A30": 4}
"""Compute slices of a MIG-capable model (a table key of :mod:`tracker.prices`) that has other
than :data:`DEFAULT_COMPUTE_SLICES`."""

DEFAULT_COMPUTE_SLICES = 7
"""A100, H100, H200, B200 and GB200: 7 compute slices."""

MIG_MODELS = ("A100", "A30", "H100", "H200", "H20", "H800", "B200", "GB200")
"""The models (table keys' starts, :mod:`tracker.prices`) that have MIG."""

PROFILES: dict[str, tuple[str, ...]] = {
    # NVIDIA's MIG user guide, "Supported MIG Profiles" (GPU instance profiles, smallest first)
    "A30": ("1g.6gb", "2g.12gb"),
    "A100-40GB": ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb"),
    "A100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb"),
    "H100": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb"),
    "H100-NVL": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb"),
    "H200": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb"),
    "B200": ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb"),
}
"""The GPU instance profiles smaller than the whole GPU a right-sizing may suggest, by table
key (:func:`tracker.prices.canonical_gpu`)."""

USABLE_GIB_PER_GB = 0.95
"""A profile's memory as a process can use it, GiB per GB of its name (a 1g.10gb shows 9.5 GiB
to CUDA)."""

_PROFILE = re.compile(
    r"(?<![\w.])(?:(\d{1,2})c\.)?(\d{1,2})g\.(\d{1,4})gb(?:\+[a-z]{1,8})?", re.IGNORECASE
)
_MODEL_GB = re.compile(r"(\d+)\s*GB", re.IGNORECASE)
_MIG_IN_NAME = re.compile(r"\s+MIG\s+(\S+)\s*$", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class MigSlice:
    """A MIG instance: its profile and what it holds of its GPU."""

    profile: str
    """As NVML, nvidia-smi and dcgm-exporter name it: ``3g.40gb``, ``1g.10gb+me``,
    ``1c.3g.40gb``."""
    compute: int
    """Compute slices it holds."""
    compute_of: int
    """Compute slices of its GPU."""
    mem_gb: float
    """Memory of its GPU instance, GB as the profile says (shared by a GPU instance's compute
    instances)."""
    gpu_mem_gb: float | None
    """Memory of the whole GPU, GB; None where unknown (then the memory share is unknown and
    the compute share is used)."""
    gpu_slices: int
    """Compute slices of its GPU instance (``3`` of ``1c.3g.40gb``)."""

    @property
    def per_gpu(self) -> int:
        """How many instances of this profile one GPU holds (7 of ``1g.10gb``, 3 of
        ``2g.20gb``, 4 of the memory-heavy ``1g.20gb``): the GPUs behind a count of them."""
        by_memory = MEMORY_SLICES
        if self.gpu_mem_gb:
            by_memory = MEMORY_SLICES // max(
                1, round(MEMORY_SLICES * self.mem_gb / self.gpu_mem_gb)
            )
        return max(1, min(self.compute_of // self.gpu_slices, by_memory))

    def share(self, basis: str = "compute") -> float:
        """The share of the physical GPU, 0–1, by ``basis`` (:data:`SHARE_BASES`)."""
        compute = self.compute / self.compute_of
        if basis != "memory" or not self.gpu_mem_gb:
            return compute
        # NVML's and the profiles' sizes round differently (a 3g.20gb has 19.6 of 39.6 GiB):
        # counted in the memory slices the instance takes
        slices = round(MEMORY_SLICES * self.mem_gb / self.gpu_mem_gb)
        held = max(1, min(MEMORY_SLICES, slices)) / MEMORY_SLICES
        return held * self.compute / self.gpu_slices


def mig_slice(profile: str, model: str, gpu_mem_gb: float | None = None) -> MigSlice | None:
    """The :class:`MigSlice` of ``profile`` on a GPU of ``model``, or None when ``profile``
    names no MIG instance.

    Args:
        profile: The instance's profile (``3g.40gb``), or a MIG device's NVML name that ends
            in one (``NVIDIA A100-SXM4-80GB MIG 3g.40gb``).
        model: The physical GPU's model name (NVML's, a table key): its compute slices.
        gpu_mem_gb: The physical GPU's memory, GB; None: what ``model``'s name says (``80GB``)
            or unknown.

    >>> mig_slice("3g.40gb", "NVIDIA A100-SXM4-80GB").share()
    0.42857142857142855
    >>> mig_slice("1g.20gb", "NVIDIA H100 80GB HBM3").share("memory")
    0.25
    """
    if (named := _MIG_IN_NAME.search(profile)) is not None:
        profile = named[1]
    if (m := _PROFILE.search(profile)) is None:
        return None
    from tracker.prices import canonical_gpu

    key = canonical_gpu(model) or ""
    of = next((n for k, n in COMPUTE_SLICES.items() if key.startswith(k)), DEFAULT_COMPUTE_SLICES)
    gpu_slices = int(m[2])
    compute = int(m[1]) if m[1] else gpu_slices
    if not 0 < compute <= gpu_slices <= of:
        return None  # no profile of this GPU (a 9g, a 0c)
    if gpu_mem_gb is None and (gb := _MODEL_GB.search(model)) is not None:
        gpu_mem_gb = float(gb[1])
    return MigSlice(
        profile=m[0],  # what matched, never the rest of a label's text
        compute=compute,
        compute_of=of,
        mem_gb=float(m[3]),
        gpu_mem_gb=gpu_mem_gb,
        gpu_slices=gpu_slices,
    )


def has_mig(model: str) -> bool:
    """Whether a GPU of ``model`` (NVML's name or a table key) can be split by MIG."""
    from tracker.prices import canonical_gpu

    key = canonical_gpu(model) or model.upper()
    return key.startswith(MIG_MODELS)


MEASURED, EVEN = "measured", "even"
"""How a time-sliced GPU was split between its holders (:attr:`RunRecord.gpu_split`): by each
one's measured share of the GPU's work, or evenly (no per-process figure)."""


def time_sliced(
    util_pct: float | None, work_share: float | None, holders: int, idle: str = "even"
) -> tuple[float, float | None]:
    """A holder's share of a time-sliced GPU and its own utilization over that share.

    The GPU's busy time is split by each holder's measured share of the work done on it, its
    idle time evenly (each held the GPU, none used it): a holder that did 70% of the work of a
    GPU busy 60% of the time holds 0.7 × 0.6 + 0.4 ÷ 2 = 0.62 of it with two holders, busy
    0.42 ÷ 0.62 = 68% of its share; the other 0.38, busy 0.18 ÷ 0.38 = 47%. The holders' shares
    add up to the GPU and their busy time to its busy time; a holder that does nothing still
    pays for, and is judged idle on, its part of the idle time. ``idle="work"`` splits the idle
    time by work too: 0.7 and 0.3, each at the GPU's utilization. Without a work share (no
    per-process figure) each holds an even share at the GPU's utilization.

    Args:
        util_pct: The GPU's utilization (all its holders' work), 0–100; None: unknown.
        work_share: This holder's share of the holders' work, 0–1 (its per-process SM
            utilization over theirs); None: not measured (then the split is even).
        holders: How many workloads held the GPU (1: alone).
        idle: How the idle time is split (:data:`IDLE_SPLITS`).

    Returns:
        (share of the GPU 0–1, own utilization % over that share, or None where unknown).

    >>> time_sliced(60.0, 0.7, 2)
    (0.62, 67.74193548387098)
    >>> time_sliced(60.0, 0.7, 2, idle="work")
    (0.7, 60.0)
    >>> time_sliced(60.0, None, 2)
    (0.5, 60.0)
    """
    n = max(1, holders)
    if work_share is None or util_pct is None:
        return 1.0 / n, util_pct
    worked = min(max(work_share, 0.0), 1.0)
    if idle == "work":
        return worked, util_pct
    util = min(max(util_pct / 100.0, 0.0), 1.0)
    busy = util * worked
    share = busy + (1.0 - util) / n
    return share, (100.0 * busy / share if share > 0 else 0.0)


def profiles(slices: Iterable[MigSlice | None]) -> str | None:
    """The MIG profiles of a run's GPUs as its record keeps them (``1g.10gb``, several joined
    by ``,`` in order), or None when none is a MIG instance."""
    found = sorted({s.profile for s in slices if s is not None})
    return ",".join(found) or None


def model_of_mig(name: str) -> str:
    """A MIG device's NVML name without its profile: the physical GPU's model name
    (``NVIDIA A100-SXM4-80GB MIG 3g.40gb`` → ``NVIDIA A100-SXM4-80GB``)."""
    return _MIG_IN_NAME.sub("", name)
