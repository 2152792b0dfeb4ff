"""Money and its rules, written once: spend, recoverable waste, the idle rule, and the thresholds
behind them. The tracker (live and in the run record), the weekly KPIs, the demo and the service
all use this module; nothing else restates a formula or a default.

- **spend** = GPU-hours × price per GPU-hour of that GPU model (USD);
- **recoverable waste** = spend × max(0, 1 − utilization ÷ target): what the same work would
  have cost less at the target utilization, per GPU (one GPU's busy time never hides another's
  idle time);
- **idle**: a GPU-minute is idle when its own utilization is under ``idle_pct`` and it lies in
  some ``idle_window_min``-minute stretch whose mean is under it too (allocated but unused; a
  short blip does not break an idle hour, a busy minute is never idle, no data is never idle).
  :class:`IdleDetector` is the rule, streamed; :func:`reports.kpi.gputime.idle_minutes` is the
  same rule over arrays, tested against it.
"""

from __future__ import annotations

from collections import deque
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


def waste_share(util_pct: N, target_util_pct: float) -> N:
    """max(0, 1 − util ÷ target): the share of the spend that is recoverable waste. Works on a
    float and on numpy arrays or pandas Series alike (NaN stays NaN)."""
    shortfall = 1.0 - util_pct / target_util_pct
    return (shortfall + abs(shortfall)) / 2.0


def waste_usd(spend: float, util_pct: float | None, target_util_pct: float) -> float:
    """Recoverable waste of one GPU's spend at ``util_pct``; 0 when utilization is unknown (no
    data is never waste)."""
    if util_pct is None:
        return 0.0
    return spend * waste_share(util_pct, target_util_pct)


def idle_usd(idle_gpu_s: float, usd_per_gpu_hour: float) -> float:
    """What GPU-seconds inside idle stretches cost."""
    return s_to_hours(idle_gpu_s) * usd_per_gpu_hour


@dataclass(frozen=True, kw_only=True)
class RunCost:
    spend_usd: float
    waste_usd: float
    idle_usd: float


def run_cost(*, gpu_hours_each: float, utils_pct: list[float | None], gpu_count: int,
             usd_per_gpu_hour: float, idle_gpu_s: float, target_util_pct: float) -> RunCost:
    """A run's spend, waste and idle $: ``gpu_count`` GPUs for ``gpu_hours_each`` hours each,
    ``utils_pct`` the time-weighted utilization of each GPU that has one."""
    each = spend_usd(gpu_hours_each, usd_per_gpu_hour)
    return RunCost(spend_usd=gpu_count * each,
                   waste_usd=sum(waste_usd(each, u, target_util_pct) for u in utils_pct),
                   idle_usd=idle_usd(idle_gpu_s, usd_per_gpu_hour))


@dataclass
class IdleDetector:
    """The idle rule, streamed over one GPU's minutes, counting idle seconds in bounded memory.

    A minute is idle when its own utilization is under ``threshold_pct`` and it lies in some
    ``window``-minute stretch whose (time-weighted) mean is under it too. A minute without data
    is never idle and breaks the stretch."""

    window: int
    threshold_pct: float
    idle_s: float = 0.0
    # [util_pct, covered_s, counted] of the last `window` minutes
    _recent: deque[list[Any]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._recent = deque(maxlen=self.window)

    def add_minute(self, util_pct: float | None, covered_s: float) -> None:
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
