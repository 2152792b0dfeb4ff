"""Money and its rules, written once: spend, recoverable waste, the idle rule, and the thresholds
behind them. The tracker (live and in the run record), the weekly KPIs, the demo and the service
all use this module; nothing else restates a formula or a default.

- **spend** = GPU-hours × price per GPU-hour of that GPU model (USD);
- **recoverable waste**, per GPU (one GPU's busy time never hides another's idle time): its idle
  time in full, and the rest of its spend × max(0, 1 − utilization ÷ target), the utilization of
  its time that was not idle. Idle money is thus a part of waste, never more than it: waste =
  idle $ + what the busy time would have cost less at the target utilization;
- **idle**: a GPU-minute is idle when its own utilization is under ``idle_pct`` and it lies in
  some ``idle_window_min``-minute stretch whose mean is under it too (allocated but unused; a
  short blip does not break an idle hour, a busy minute is never idle, no data is never idle).
  :class:`IdleDetector` is the rule, streamed; :func:`idle_flags` the same over a list (the
  store's rollups); :func:`reports.kpi.gputime.idle_minutes` over arrays; tested equal.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tracker.units import s_to_hours

N = TypeVar("N", float, Any)  # a float, or a numpy array / pandas Series of them


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """The thresholds every figure is judged by, one object for the tracker and the reports.

    Percentages of NVML utilization (0–100); the config file's ``[thresholds]`` keys are these
    names. :data:`SM_ACTIVE_THRESHOLDS` are the defaults on the SM-activity basis, which runs
    lower than NVML utilization for the same work."""

    target_util_pct: float = 85.0
    """Utilization a healthy run reaches; recoverable waste is measured against it."""
    alert_util_pct: float = 70.0
    """Under this for ``alert_window_s`` (a tracker setting), a live run raises one alert."""
    underutilized_pct: float = 50.0
    """A run under this in a week is listed as underutilized ..."""
    underutilized_min_gpu_hours: float = 1.0
    """... when it used at least this many GPU-hours that week."""
    idle_pct: float = 5.0
    """A minute under this, in a window averaging under it, is idle."""
    idle_window_min: int = 30
    """The idle window, minutes."""

    @property
    def idle_window_s(self) -> float:
        return 60.0 * self.idle_window_min


SM_ACTIVE_THRESHOLDS = Thresholds(target_util_pct=60.0, underutilized_pct=30.0)
"""The defaults on the SM-activity basis (GPM ``sm_active_pct``)."""


def thresholds_for(basis: str, configured: Thresholds | None = None) -> Thresholds:
    """The thresholds a figure on ``basis`` is judged by: ``configured`` (the config's
    ``[thresholds]``, else the defaults) on NVML utilization (``"util"``); the SM-activity
    defaults on ``"sm_active"``, since the configured values are NVML-utilization ones."""
    if basis == "util":
        return configured or Thresholds()
    return SM_ACTIVE_THRESHOLDS


def spend_usd(gpu_hours: N, usd_per_gpu_hour: N) -> N:
    """GPU-hours × price per GPU-hour."""
    return gpu_hours * usd_per_gpu_hour


def waste_share(util_pct: N, target_util_pct: float, idle_share: N | float = 0.0) -> N:
    """The share of a GPU's spend that is recoverable waste: ``idle_share`` (of its time, idle)
    in full, and max(0, 1 − util ÷ target) of the rest, ``util_pct`` being the utilization of
    the time that was not idle. Works on a float and on numpy arrays or pandas Series alike
    (NaN stays NaN)."""
    shortfall = 1.0 - util_pct / target_util_pct
    return idle_share + (1.0 - idle_share) * (shortfall + abs(shortfall)) / 2.0


def waste_usd(
    spend: float, util_pct: float | None, target_util_pct: float, *, idle_share: float = 0.0
) -> float:
    """Recoverable waste of one GPU's spend: ``idle_share`` of it in full, the rest at
    ``util_pct`` (of the time not idle) by the target rule. The rest counts 0 when its
    utilization is unknown (no data is never waste)."""
    if util_pct is None:
        return spend * idle_share
    return spend * waste_share(util_pct, target_util_pct, idle_share)


def idle_usd(idle_gpu_s: float, usd_per_gpu_hour: float) -> float:
    """What GPU-seconds inside idle stretches cost."""
    return s_to_hours(idle_gpu_s) * usd_per_gpu_hour


@dataclass(frozen=True, kw_only=True)
class GpuUse:
    """One GPU over a span: seconds with a utilization value and Σ util × seconds over them,
    and the same two over its idle minutes (:class:`IdleDetector`)."""

    known_s: float
    util_s: float
    idle_s: float = 0.0
    idle_util_s: float = 0.0

    def idle_share(self, span_s: float) -> float:
        """Idle seconds ÷ the span (capped at 1)."""
        return min(self.idle_s / span_s, 1.0) if span_s > 0 else 0.0

    def busy_util_pct(self) -> float | None:
        """Utilization of the time with data that was not idle; None when there is none."""
        rest = self.known_s - self.idle_s
        return (self.util_s - self.idle_util_s) / rest if rest > 0 else None


@dataclass(frozen=True, kw_only=True)
class RunCost:
    spend_usd: float
    waste_usd: float
    """Idle $ included."""
    idle_usd: float


def run_cost(
    *,
    gpu_hours_each: float,
    gpus: list[GpuUse],
    gpu_count: int,
    usd_per_gpu_hour: float,
    target_util_pct: float,
) -> RunCost:
    """A run's spend, waste and idle $: ``gpu_count`` GPUs for ``gpu_hours_each`` hours each,
    ``gpus`` the use of each GPU that was sampled."""
    each = spend_usd(gpu_hours_each, usd_per_gpu_hour)
    span_s = 3600.0 * gpu_hours_each
    return RunCost(
        spend_usd=gpu_count * each,
        waste_usd=sum(
            waste_usd(each, g.busy_util_pct(), target_util_pct, idle_share=g.idle_share(span_s))
            for g in gpus
        ),
        idle_usd=idle_usd(sum(g.idle_s for g in gpus), usd_per_gpu_hour),
    )


NEAR = 1e-6
"""A window sum this close to the limit is decided exactly (math.fsum), by both rules."""


def idle_flags(
    values: Sequence[float | None],
    threshold_pct: float,
    window: int,
    minutes: Sequence[int] | None = None,
) -> list[bool]:
    """Which rows are idle: the row's own value is under ``threshold_pct`` and it lies in some
    ``window``-row stretch of known values averaging under it. None (no value) is never idle
    and breaks a stretch, and so does a missing minute when ``minutes`` (each row's epoch
    minute, increasing) are given. A window sum within :data:`NEAR` of the limit is compared
    exactly."""
    n = len(values)
    flags = [False] * n
    if n < window:
        return flags
    u = [0.0 if v is None else v for v in values]
    sums = [0.0] * (n + 1)
    nones = [0] * (n + 1)
    for i, v in enumerate(values):
        sums[i + 1] = sums[i] + u[i]
        nones[i + 1] = nones[i] + (v is None)
    limit = threshold_pct * window
    qualifies = [False] * n
    for end in range(window - 1, n):
        start = end - window + 1
        if nones[end + 1] != nones[start] or (
            minutes is not None and minutes[end] - minutes[start] != window - 1
        ):
            continue
        approx = sums[end + 1] - sums[start]
        if abs(approx - limit) <= NEAR + 1e-15 * abs(sums[end + 1]):
            qualifies[end] = math.fsum(u[start : end + 1]) / window < threshold_pct
        else:
            qualifies[end] = approx < limit
    # row j is covered when a qualifying window ends in [j, j + window - 1]
    nearest = n + window  # the nearest qualifying end at or after j (none: out of reach)
    for j in range(n - 1, -1, -1):
        if qualifies[j]:
            nearest = j
        v = values[j]
        flags[j] = nearest <= j + window - 1 and v is not None and v < threshold_pct
    return flags


@dataclass
class IdleDetector:
    """The idle rule, streamed over one GPU's minutes, counting idle seconds in bounded memory.

    A minute is idle when its own utilization is under ``threshold_pct`` and it lies in some
    ``window``-minute stretch whose (time-weighted) mean is under it too. A minute without data
    (no value, or no row: ``minute`` skips one) is never idle and breaks the stretch."""

    window: int
    threshold_pct: float
    idle_s: float = 0.0
    idle_util_s: float = 0.0
    """Σ utilization × seconds over the idle minutes."""
    # [util_pct, covered_s, counted] of the last `window` minutes
    _recent: deque[list[Any]] = field(init=False, repr=False)
    _last_minute: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._recent = deque(maxlen=self.window)

    def add_minute(
        self, util_pct: float | None, covered_s: float, minute: int | None = None
    ) -> None:
        """The next minute of the GPU; ``minute`` (epoch minutes), when given, tells a minute
        with no row before it."""
        if minute is not None:
            if self._last_minute is not None and minute != self._last_minute + 1:
                self._recent.clear()
            self._last_minute = minute
        if util_pct is None:
            self._recent.clear()
            return
        self._recent.append([util_pct, covered_s, False])
        if len(self._recent) < self.window:
            return
        seconds = sum(m[1] for m in self._recent)
        if seconds <= 0 or sum(m[0] * m[1] for m in self._recent) / seconds >= self.threshold_pct:
            return
        for m in self._recent:
            if not m[2] and m[0] < self.threshold_pct:
                m[2] = True
                self.idle_s += float(m[1])
                self.idle_util_s += float(m[0]) * float(m[1])
