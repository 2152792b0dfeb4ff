"""Money and its rules, written once: spend, recoverable waste, the idle rule, and the thresholds
behind them. The tracker (live and in the run record), the weekly KPIs, the demo and the service
all use this module; nothing else restates a formula or a default.

- **spend** = GPU-hours × price per GPU-hour of that GPU model (USD);
- **recoverable waste**, per GPU (one GPU's busy time never hides another's idle time): its idle
  time in full, and the rest of its spend × max(0, 1 − utilization ÷ target), the utilization of
  its time that was not idle. Idle money is thus a part of waste, never more than it: waste =
  idle $ + what the busy time would have cost less at the target utilization;
- **utilization** of GPUs, runs, weeks or teams is weighted by GPU-time (:func:`weighted_util_pct`);
- **idle**: a GPU-minute is idle when its own utilization is under ``idle_pct`` and it lies in
  some ``idle_window_min``-minute stretch whose mean, weighted by the seconds each minute
  covers, is under it too (allocated but unused; a short blip does not break an idle hour, a
  busy minute is never idle, no data is never idle). :func:`idle_flags` is the rule, the one
  definition: :class:`IdleDetector` (live, streamed), the store's rollups, the nvidia-smi
  import and the weekly report's minute reads all call it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import accumulate, compress, pairwise, repeat
from operator import add, le, lt, mul, ne, sub
from typing import Any, TypeVar, cast

from tracker.units import S_PER_HOUR, s_to_hours

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


def weighted_util_pct(util_pct_time: N, known_time: N) -> N | None:
    """Utilization weighted by GPU-time, percent, never a mean of means: Σ utilization × time
    ÷ Σ time, both over the time with a value (over GPUs, runs, weeks, teams alike).

    Args:
        util_pct_time: Σ utilization (percent) × time: ``GpuStats``' ``tw.total`` (%·s), or
            100 × a frame's ``used_hours``.
        known_time: Σ time with a value, in the same time unit (s, or ``known_hours``).

    Returns:
        The utilization, percent; None where no time has a value (a float), NaN in those rows
        (a pandas Series).
    """
    if isinstance(known_time, int | float):
        return util_pct_time / known_time if known_time > 0 else None
    return util_pct_time / known_time.where(known_time > 0)


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


def gpu_waste_usd(
    spend: N,
    *,
    held: N,
    known: N,
    util_time: N,
    idle: N,
    idle_util_time: N,
    target_util_pct: float,
) -> N:
    """Recoverable waste of one GPU on its own time (the per-GPU rule): its idle time in full,
    the rest of its spend × max(0, 1 − utilization of its time not idle ÷ target); nothing
    for the rest when that utilization is unknown (no data is never waste). The run record
    (:func:`run_cost`) and the weekly report (``reports.kpi.weekly.run_weeks``, per run, GPU
    and week) both call it: a float each, or pandas Series of rows.

    Args:
        spend: The GPU's spend over ``held``, USD.
        held: The time it was held (its own, not the run's mean), any one time unit.
        known: Time with a utilization value, the same unit.
        util_time: Σ utilization (percent) × time over ``known``.
        idle: Time in idle stretches (:func:`idle_flags`), the same unit.
        idle_util_time: Σ utilization (percent) × time over ``idle``.
        target_util_pct: The target utilization (``Thresholds.target_util_pct``).

    Returns:
        The waste, USD (idle $ included).
    """
    busy = known - idle
    if isinstance(held, int | float):
        idle_share = min(idle / held, 1.0) if held > 0 else 0.0
        busy_util = (util_time - idle_util_time) / busy if busy > 0 else None
        return waste_usd(spend, busy_util, target_util_pct, idle_share=idle_share)
    share = (idle / held.where(held > 0)).clip(0.0, 1.0).fillna(0.0)
    busy_util = (util_time - idle_util_time) / busy.where(busy > 0)
    return spend * waste_share(busy_util, target_util_pct, share).fillna(share)


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
    held_s: float | None = None
    """Seconds this GPU was held, when it differs from the run's span (an import whose GPUs
    were logged for different lengths); None: the span."""
    share: float = 1.0
    """The share of a physical GPU it is (a MIG instance's slices: :mod:`tracker.shares`):
    its seconds cost that share of the GPU's price."""


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
    gpu_count: float,
    usd_per_gpu_hour: float,
    target_util_pct: float,
) -> RunCost:
    """A run's spend, waste and idle $: ``gpu_count`` GPUs (physical GPUs' worth: a MIG
    instance counts its share) for ``gpu_hours_each`` hours each, ``gpus`` the use of each GPU
    that was sampled; waste per GPU on its own time (:func:`gpu_waste_usd`: ``held_s``, else
    the span), at its share of the price."""
    each = spend_usd(gpu_hours_each, usd_per_gpu_hour)
    span_s = S_PER_HOUR * gpu_hours_each

    def waste(g: GpuUse) -> float:
        held_s = span_s if g.held_s is None else g.held_s
        return gpu_waste_usd(
            spend_usd(s_to_hours(held_s), usd_per_gpu_hour * g.share),
            held=held_s,
            known=g.known_s,
            util_time=g.util_s,
            idle=g.idle_s,
            idle_util_time=g.idle_util_s,
            target_util_pct=target_util_pct,
        )

    return RunCost(
        spend_usd=gpu_count * each,
        waste_usd=sum(waste(g) for g in gpus),
        idle_usd=idle_usd(sum(g.idle_s * g.share for g in gpus), usd_per_gpu_hour),
    )


IDLE_SUMS_REL = 1e-15
"""Per row of a window, the relative error the float window sums are trusted to (a few times
what ``window`` float additions can err by): a window whose weighted mean is closer than that
to the threshold is decided exactly (:class:`fractions.Fraction`), so that every path decides
it alike whatever order it adds in."""

IDLE_MARGIN_PCT = 1e-6
"""How far under the threshold a minute's utilization, or a window's weighted mean, must be to
count as under it (percentage points). A minute's mean is a float whose last digits depend on
the order its readings were added in (the sampler's running sums, the vectorized import's
arrays, the database's SUM), so a minute or a window at exactly 5 % comes out as
4.999999999999999 on one path and 5.000000000000001 on another; decided at the threshold
itself, the same minute would be idle on one path and not on the other. A millionth of a
percentage point is far above that noise and far below anything a GPU reports."""

_TINY = 1e-280
"""Under this a float product or sum may have lost digits to underflow: decided exactly."""


def _block_sums(values: list[float], window: int) -> list[float]:
    """The sum of each ``window`` consecutive values (one per window start), each from at most
    two runs of at most ``window`` values added in order (blocks of ``window`` rows: a suffix
    of one plus a prefix of the next), so that its error is relative to its own values, never
    to rows long gone as a running sum's would be."""
    n = len(values)
    suffix: list[float] = []
    prefix: list[float] = []
    for i in range(0, n, window):
        block = values[i : i + window]
        suffix += list(accumulate(block[::-1]))[::-1]
        prefix += accumulate(block)
        if len(block) == window:
            prefix[-1] = 0.0  # a window that is a whole block is its suffix alone
    return list(map(add, suffix[: n - window + 1], prefix[window - 1 :]))


def _quiet_exactly(utils: Sequence[float], covered_s: Sequence[float], limit_pct: float) -> bool:
    weighted = sum(Fraction(u) * Fraction(c) for u, c in zip(utils, covered_s, strict=True))
    seconds = sum(map(Fraction, covered_s), Fraction(0))
    return seconds > 0 and weighted < Fraction(limit_pct) * seconds


def idle_flags(
    utils: Sequence[float | None],
    covered_s: Sequence[float],
    *,
    threshold_pct: float,
    window: int,
    minutes: Sequence[int] | None = None,
) -> list[bool]:
    """The idle rule: which of one GPU's minute rows (in minute order) are idle.

    A minute is idle when its own utilization is under ``threshold_pct`` and it lies in some
    window of ``window`` consecutive minutes whose mean utilization, weighted by the seconds
    each minute covers (Σ util × covered_s ÷ Σ covered_s), is under it too: a minute the run
    held the GPU 10 s of counts for 10 s. A window covering no second is not quiet. A minute
    without a value (None) is never idle and breaks a stretch, and so does a minute with no row
    when ``minutes`` (each row's epoch minute, increasing) are given. "Under" means under
    ``threshold_pct - IDLE_MARGIN_PCT`` (:data:`IDLE_MARGIN_PCT`: a value at the threshold
    give or take float rounding is at it), and a window's mean is compared with that limit as
    exact rationals of the float inputs (float sums where they are clearly on one side,
    :data:`IDLE_SUMS_REL`), so every caller flags the same minutes.

    Args:
        utils: Each minute's utilization, percent (0-100), or None.
        covered_s: Each minute's seconds held (``MinuteSample.covered_s``), 0-60.
        threshold_pct: The idle threshold, percent (``Thresholds.idle_pct``).
        window: The window, minutes (``Thresholds.idle_window_min``).
        minutes: Each row's epoch minute; None: the rows follow one another.

    Returns:
        One flag per row: idle or not.
    """
    n = len(utils)
    flags = [False] * n
    if window < 1 or n < window:
        return flags
    # stretches: runs of rows with a value, each row the minute after the one before
    breaks = {i for i, u in enumerate(utils) if u is None}  # a row that is no part of one
    starts = {0}  # rows that start one
    starts.update(i + 1 for i in breaks)
    if minutes is not None:
        steps = map(sub, minutes[1:], minutes[: n - 1])
        starts.update(compress(range(1, n), map(ne, steps, repeat(1))))
    edges = sorted(starts | breaks | {n})
    for a, b in pairwise(edges):
        if a in breaks or b - a < window:
            continue
        part = cast("list[float]", list(utils[a:b]))
        for j in _idle_rows(part, list(covered_s[a:b]), threshold_pct - IDLE_MARGIN_PCT, window):
            flags[a + j] = True
    return flags


def _idle_rows(
    utils: list[float], covered_s: list[float], threshold_pct: float, window: int
) -> list[int]:
    """The idle rows of one stretch (at least ``window`` rows with a value, minute after
    minute), ``threshold_pct`` being the limit a value must be under (the margin taken off)."""
    n = len(utils)
    low = [j for j, u in enumerate(utils) if u < threshold_pct]
    if not low:
        return []
    weighted = list(map(mul, utils, covered_s))
    # underflow may have taken digits: then every window the exact way
    exact = min(filter(None, weighted), default=1.0) < _TINY
    exact = exact or min(filter(None, covered_s), default=1.0) < _TINY
    if n == window:  # one window (a live write's): its sums at once, decided as below
        w_sum, s_sum = sum(weighted), sum(covered_s)
        limit = s_sum * threshold_pct
        if exact or abs(w_sum - limit) <= (w_sum + limit) * IDLE_SUMS_REL * (window + 4):
            return low if _quiet_exactly(utils, covered_s, threshold_pct) else []
        return low if w_sum < limit else []
    w_sums = _block_sums(weighted, window)
    s_sums = _block_sums(covered_s, window)
    limits = list(map(mul, s_sums, repeat(threshold_pct)))
    quiet = list(map(lt, w_sums, limits))  # s == 0: w == limit == 0, decided exactly below
    # a window sum this close to its limit is decided exactly
    tolerance = map(mul, map(add, w_sums, limits), repeat(IDLE_SUMS_REL * (window + 4)))
    near = map(le, map(abs, map(sub, w_sums, limits)), tolerance)
    for k in range(len(quiet)) if exact else compress(range(len(quiet)), near):
        quiet[k] = _quiet_exactly(utils[k : k + window], covered_s[k : k + window], threshold_pct)
    if not any(quiet):
        return []
    # row j is idle when low and a quiet window starts in [j - window + 1, j]
    found = list(accumulate(quiet, initial=0))
    last_start = n - window
    return [j for j in low if found[min(j, last_start) + 1] > found[max(j - window + 1, 0)]]


@dataclass
class IdleDetector:
    """The idle rule (:func:`idle_flags`), streamed over one GPU's minutes, counting idle
    seconds in bounded memory: each full window of the last ``window`` minutes is handed to
    :func:`idle_flags`, and a minute it flags is counted once. A minute without data (no
    value, or no row: ``minute`` skips one) is never idle and breaks the stretch."""

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
        flags = idle_flags(
            [m[0] for m in self._recent],
            [m[1] for m in self._recent],
            threshold_pct=self.threshold_pct,
            window=self.window,
        )
        for m, idle in zip(self._recent, flags, strict=True):
            if idle and not m[2]:
                m[2] = True
                self.idle_s += float(m[1])
                self.idle_util_s += float(m[0]) * float(m[1])
