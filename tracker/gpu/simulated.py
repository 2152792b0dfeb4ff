"""A simulated GPU backend, driven by a profile, so demos and tests run anywhere.

A profile is a repeating utilization pattern (a list of ``(seconds, util_pct)`` segments) plus
memory use and GPM activity ratios. Readings are exact: a reading's utilization is the pattern's
mean over the time since the previous reading, as NVML's trailing-window utilization is, so a
run's time-weighted utilization equals the pattern's integral whatever the sampling interval.

Spec: ``simulated:PROFILE[@MODEL[/MIG]][:N]``, e.g. ``simulated:input-bound@A100-80GB:4``;
``simulated:healthy@A100-80GB/1g.10gb`` is a MIG instance of that profile (what NVML gives a
MIG device: its memory, no power or energy of its own).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from tracker.gpu.base import BackendError, GpuInfo, GpuReading
from tracker.shares import has_mig, mig_slice
from tracker.units import NS_PER_S, mib_to_gib


@dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    pattern: tuple[tuple[float, float], ...]
    """Repeating ``(duration_s, util_pct)`` segments."""
    mem_frac: float
    """Share of device memory in use."""
    sm_active_ratio: float
    """GPM SM activity as a share of utilization."""
    tensor_active_ratio: float
    dram_active_ratio: float
    help: str
    throttle: tuple[float, float] | None = None
    """``(period_s, throttled_s)``: the first ``throttled_s`` seconds of every ``period_s`` the
    clocks are held down (thermal slowdown): the violation counter runs and the SM clock drops
    to :data:`THROTTLED_CLOCK_SHARE` of its boost."""
    lost_after_s: float | None = None
    """Seconds after which the last GPU stops answering (falls off the bus)."""
    holders: int = 1
    """Processes on each GPU, this one included (over 1: time-sliced with others); the
    pattern is the GPU's utilization, all of theirs."""
    work_share: float | None = None
    """This process's share of their work (NVML's per-process utilization; None: unseen)."""

    def throttled_integral(self, t: float) -> float:
        """Seconds throttled in [0, t]."""
        if self.throttle is None:
            return 0.0
        period, throttled = self.throttle
        cycles, rest = divmod(max(t, 0.0), period)
        return cycles * throttled + min(rest, throttled)

    def throttled_at(self, t: float) -> bool:
        return self.throttle is not None and max(t, 0.0) % self.throttle[0] < self.throttle[1]

    @property
    def period_s(self) -> float:
        return sum(d for d, _ in self.pattern)

    @property
    def mean_util_pct(self) -> float:
        return sum(d * u for d, u in self.pattern) / self.period_s

    def util_integral(self, t: float) -> float:
        """∫₀ᵗ util dt, in %·s (t ≥ 0, s since the run's start)."""
        period = self.period_s
        cycles, rest = divmod(max(t, 0.0), period)
        total = cycles * self.mean_util_pct * period
        for duration, util in self.pattern:
            step = min(rest, duration)
            total += step * util
            rest -= step
            if rest <= 0:
                break
        return total

    def util_at(self, t: float) -> float:
        rest = max(t, 0.0) % self.period_s
        for duration, util in self.pattern:
            if rest < duration:
                return util
            rest -= duration
        return self.pattern[-1][1]


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="healthy",
            pattern=((1.0, 92.0),),
            mem_frac=0.78,
            sm_active_ratio=0.8,
            tensor_active_ratio=0.5,
            dram_active_ratio=0.4,
            help="steady 92%",
        ),
        Profile(
            name="input-bound",
            pattern=((6.0, 100.0), (4.0, 0.0)),
            mem_frac=0.55,
            sm_active_ratio=0.8,
            tensor_active_ratio=0.5,
            dram_active_ratio=0.4,
            help="bursts of 100% with 40% gaps: 6 s busy, 4 s waiting for data (60%)",
        ),
        Profile(
            name="idle",
            pattern=((1.0, 0.0),),
            mem_frac=0.25,
            sm_active_ratio=0.0,
            tensor_active_ratio=0.0,
            dram_active_ratio=0.0,
            help="allocated, memory held, 0%",
        ),
        Profile(
            name="small-batch",
            pattern=((1.0, 35.0),),
            mem_frac=0.08,
            sm_active_ratio=0.5,
            tensor_active_ratio=0.1,
            dram_active_ratio=0.2,
            help="steady 35%, 8% of memory: launch-bound small steps",
        ),
        Profile(
            name="low-efficiency",
            pattern=((1.0, 97.0),),
            mem_frac=0.6,
            sm_active_ratio=0.3,
            tensor_active_ratio=0.05,
            dram_active_ratio=0.3,
            help="97% busy but SM activity 29%: fp32, unfused kernels",
        ),
        Profile(
            name="throttled",
            pattern=((1.0, 92.0),),
            mem_frac=0.78,
            sm_active_ratio=0.8,
            tensor_active_ratio=0.5,
            dram_active_ratio=0.4,
            throttle=(60.0, 10.0),
            help="steady 92%, thermal slowdown the first 10 s of every minute: the machine's",
        ),
        Profile(
            name="gpu-lost",
            pattern=((1.0, 92.0),),
            mem_frac=0.78,
            sm_active_ratio=0.8,
            tensor_active_ratio=0.5,
            dram_active_ratio=0.4,
            lost_after_s=120.0,
            help="steady 92%; after 2 min the last GPU falls off the bus",
        ),
        Profile(
            name="time-sliced",
            pattern=((6.0, 100.0), (4.0, 0.0)),
            mem_frac=0.4,
            sm_active_ratio=0.8,
            tensor_active_ratio=0.5,
            dram_active_ratio=0.4,
            holders=2,
            work_share=0.7,
            help="a GPU shared in time with one other process, busy 60%, 70% of it this one's",
        ),
    )
}


@dataclass(frozen=True, kw_only=True)
class SimGpu:
    name: str
    mem_total_mib: float
    idle_w: float
    max_w: float
    sm_clock_mhz: float
    gpm: bool
    """GPM metrics (SM/tensor/DRAM activity) exist on Hopper and newer."""


GPU_MODELS: dict[str, SimGpu] = {
    "H200": SimGpu(
        name="NVIDIA H200", mem_total_mib=143771, idle_w=75, max_w=700, sm_clock_mhz=1980, gpm=True
    ),
    "H100": SimGpu(
        name="NVIDIA H100 80GB HBM3",
        mem_total_mib=81559,
        idle_w=70,
        max_w=700,
        sm_clock_mhz=1980,
        gpm=True,
    ),
    "A100-80GB": SimGpu(
        name="NVIDIA A100-SXM4-80GB",
        mem_total_mib=81920,
        idle_w=60,
        max_w=400,
        sm_clock_mhz=1410,
        gpm=False,
    ),
    "A100-40GB": SimGpu(
        name="NVIDIA A100-SXM4-40GB",
        mem_total_mib=40960,
        idle_w=55,
        max_w=400,
        sm_clock_mhz=1410,
        gpm=False,
    ),
    "L40S": SimGpu(
        name="NVIDIA L40S", mem_total_mib=46068, idle_w=35, max_w=350, sm_clock_mhz=2520, gpm=False
    ),
    "L4": SimGpu(
        name="NVIDIA L4", mem_total_mib=23034, idle_w=16, max_w=72, sm_clock_mhz=2040, gpm=False
    ),
    "A10G": SimGpu(
        name="NVIDIA A10G", mem_total_mib=23028, idle_w=25, max_w=300, sm_clock_mhz=1710, gpm=False
    ),
    "T4": SimGpu(
        name="Tesla T4", mem_total_mib=15360, idle_w=10, max_w=70, sm_clock_mhz=1590, gpm=False
    ),
    "V100": SimGpu(
        name="Tesla V100-SXM2-16GB",
        mem_total_mib=16384,
        idle_w=40,
        max_w=300,
        sm_clock_mhz=1530,
        gpm=False,
    ),
}

_ENERGY_AT_START_J = 1.0e7  # NVML's counter runs since driver load, never from 0
_THROTTLE_AT_START_NS = 3.0e12  # so does the violation counter
THROTTLED_CLOCK_SHARE = 0.7
"""The SM clock while a simulated GPU is throttled, as a share of its boost clock."""


class SimulatedBackend:
    """``count`` identical GPUs of ``model`` following ``profile`` from the time :meth:`open`
    is called."""

    name = "simulated"

    def __init__(
        self,
        profile: str | Profile = "healthy",
        *,
        model: str = "H100",
        count: int = 1,
        mig: str | None = None,
    ) -> None:
        if isinstance(profile, str):
            if profile not in PROFILES:
                raise BackendError(
                    f"unknown simulated profile {profile!r}; known: {', '.join(PROFILES)}"
                )
            profile = PROFILES[profile]
        from tracker.prices import canonical_gpu

        key = canonical_gpu(model) or model
        if key not in GPU_MODELS:
            raise BackendError(
                f"unknown simulated GPU model {model!r}; known: {', '.join(GPU_MODELS)}"
            )
        if count < 1:
            raise BackendError(f"simulated GPU count must be >= 1, got {count}")
        self.profile = profile
        self.gpu = GPU_MODELS[key]
        self.count = count
        self.mig = None
        if mig is not None:
            self.mig = mig_slice(mig, self.gpu.name, self.gpu.mem_total_mib / 1024)
            if self.mig is None or not has_mig(key):
                raise BackendError(
                    f"no MIG instance {mig!r} on a simulated {model}: a profile such as 1g.10gb "
                    "or 3g.40gb, on a GPU with MIG (A100, A30, H100, H200, B200)"
                )
        self._t0: float | None = None
        self._prev_t: float | None = None

    @classmethod
    def from_spec(cls, arg: str) -> SimulatedBackend:
        """``PROFILE[@MODEL[/MIG]][:N]`` → a backend."""
        rest, _, count = arg.partition(":")
        profile, _, model = rest.partition("@")
        model, _, mig = model.partition("/")
        try:
            n = int(count) if count else 1
        except ValueError:
            raise BackendError(f"bad GPU count {count!r} in 'simulated:{arg}'") from None
        return cls(profile or "healthy", model=model or "H100", count=n, mig=mig or None)

    def _uuid(self, i: int) -> str:
        # each rank of a multi-process run has GPUs of its own
        rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK") or "0"
        mig = "" if self.mig is None else f"/{self.mig.profile}"
        digest = hashlib.sha1(
            f"{self.profile.name}/{self.gpu.name}{mig}/{rank}/{i}".encode()
        ).hexdigest()
        kind = "GPU" if self.mig is None else "MIG"
        return f"{kind}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def _mem_total_gib(self) -> float:
        """The device's memory: a MIG instance's memory slices of the GPU's."""
        total = mib_to_gib(self.gpu.mem_total_mib)
        if self.mig is None:
            return total
        return total * self.mig.share("memory") * self.mig.gpu_slices / self.mig.compute

    def open(self, now: float) -> list[GpuInfo]:
        self._t0 = now
        self._prev_t = None
        name = self.gpu.name if self.mig is None else f"{self.gpu.name} MIG {self.mig.profile}"
        return [
            GpuInfo(
                index=i,
                uuid=self._uuid(i),
                name=name,
                mem_total_gib=self._mem_total_gib(),
                mig=self.mig,
            )
            for i in range(self.count)
        ]

    def read(self, now: float) -> list[GpuReading]:
        if self._t0 is None:
            raise BackendError("simulated backend read before open")
        t = now - self._t0
        prev = self._prev_t
        self._prev_t = t
        p = self.profile
        if prev is None or t <= prev:
            util = p.util_at(t)
        else:
            util = (p.util_integral(t) - p.util_integral(prev)) / (t - prev)
        g = self.gpu
        span_w = g.max_w - g.idle_w
        power = g.idle_w + span_w * util / 100.0
        energy = _ENERGY_AT_START_J + g.idle_w * t + span_w * p.util_integral(t) / 100.0
        total = self._mem_total_gib()
        whole = self.mig is None  # a MIG instance has no power or energy reading of its own
        clock = g.sm_clock_mhz if util > 0 else 345.0
        if p.throttled_at(t) and util > 0:
            clock = g.sm_clock_mhz * THROTTLED_CLOCK_SHARE
        throttle_ns = _THROTTLE_AT_START_NS + p.throttled_integral(t) * NS_PER_S
        count = self.count
        if p.lost_after_s is not None and t >= p.lost_after_s:
            count -= 1  # the last GPU answers no more: left out, as NVML's backend leaves it
        return [
            GpuReading(
                uuid=self._uuid(i),
                util_pct=util,
                mem_used_gib=total * p.mem_frac,
                mem_total_gib=total,
                power_w=power if whole else None,
                energy_j=energy if whole else None,
                sm_clock_mhz=clock,
                temp_c=35.0 + 0.4 * util,
                sm_active_pct=util * p.sm_active_ratio if g.gpm else None,
                sm_occupancy_pct=util * p.sm_active_ratio * 0.5 if g.gpm else None,
                tensor_active_pct=util * p.tensor_active_ratio if g.gpm else None,
                dram_active_pct=util * p.dram_active_ratio if g.gpm else None,
                throttle_ns=throttle_ns,
                holders=float(p.holders) if p.holders > 1 else None,
                work_share=p.work_share if p.holders > 1 else None,
            )
            for i in range(count)
        ]

    def close(self) -> None:
        self._t0 = None
