"""Two sets of runs side by side (``gpu-kpi compare``), and a run against a baseline
(``gpu-kpi gate``): throughput, step time, data wait, utilization, SM activity, MFU and cost per
unit of work, each difference marked as beyond the noise or not.

The noise is the runs' own spread: with :data:`MIN_RUNS` runs or more a side, Welch's t
interval (95%, the unrounded Satterthwaite degrees of freedom: :mod:`reports.kpi.intervals`),
and a difference whose interval leaves out zero is beyond the noise; with fewer there is no
band, and the comparison says so. A rate or a ratio (throughput, step time, MFU, cost per unit:
:attr:`Metric.log_scale`) is compared on the log scale, its interval that of the change in the
sides' geometric means of the per-run values; a share of time (data wait, utilization, SM
activity), which may be 0, by the difference of the means, in % of the first side's mean. (A
percentile bootstrap was tried first: on 3 to 5 runs a side it called identical sides different
11-20% of the time instead of 5%.) A run's step-time variance is not used: it says how well one
run's mean is known, not how much two runs of the same code differ, which is what machine, data
order and neighbours move; only repeated runs show that.

The gate compares one run with a baseline's mean: a regression fails it when it is larger than
the threshold and than the noise band, the 95% prediction interval of one more baseline run
(Student's t at n − 1 degrees of freedom × the baseline's standard deviation × √(1 + 1/n)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from reports.kpi.intervals import change_interval_pct, prediction_half_width, welch
from reports.kpi.pricing import run_prices
from reports.kpi.savings import BUSY_UNIT, UNITS, covers, numbers
from tracker.owned import OwnedGpu
from tracker.prices import PriceTable

MIN_RUNS = 3
"""Runs a side needs for a noise band."""


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_is_better: bool
    log_scale: bool = False
    """Whether its runs are compared on the log scale: a rate or a ratio, > 0 where known (its
    interval is that of the change in the sides' geometric means; a value ≤ 0 counts as
    unknown); else a share of time, which may be 0 (the difference of the means)."""


METRICS: tuple[Metric, ...] = (
    Metric("tokens_per_s", "tokens/s", True, log_scale=True),
    Metric("samples_per_s", "samples/s", True, log_scale=True),
    Metric("step_time_ms", "step time (ms)", False, log_scale=True),
    Metric("data_wait_pct", "data wait (%)", False),
    Metric("util_pct", "utilization (%)", True),
    Metric("sm_active_pct", "SM activity (%)", True),
    Metric("mfu", "MFU", True, log_scale=True),
    Metric("usd_per_unit", "$ per unit", False, log_scale=True),
)
BY_KEY = {m.key: m for m in METRICS}


@dataclass(frozen=True, kw_only=True)
class Side:
    """Runs of one side: each run's figures (NaN: unknown), and its cost and work."""

    label: str
    run_ids: tuple[str, ...]
    values: Mapping[str, np.ndarray]
    """Metric key → a value per run (not ``usd_per_unit``: that is ``cost`` ÷ ``work``)."""
    cost: np.ndarray
    verdicts: tuple[str, ...]
    peaks: tuple[str, ...] = ()
    """MFU's denominators among its runs (``989 TF/s bf16 dense, H100 SXM``; why there is
    none), the most common first: the MFU row is only a comparison where the sides share one."""

    @property
    def runs(self) -> int:
        return len(self.run_ids)


@dataclass(frozen=True, kw_only=True)
class Row:
    """One metric of a comparison."""

    metric: str
    label: str
    a: float | None
    b: float | None
    runs_a: int
    runs_b: int
    """The runs of each side that have the metric."""
    change_pct: float | None
    """(b ÷ a − 1) × 100; None where a is 0."""
    low_pct: float | None
    high_pct: float | None
    """The 95% interval of the change, in % (Welch's t; None without a noise band): on the log
    scale (:attr:`Metric.log_scale`), of the change in the sides' geometric means of the
    per-run values, 100 × (e^(d ± h) − 1); else of the difference of the means ÷ a × 100,
    around ``change_pct``."""
    beyond_noise: bool | None
    """None: a side has fewer than :data:`MIN_RUNS` runs with the metric (noise unknown)."""
    better: bool | None
    """Whether b is better than a on this metric (None: the same)."""


def side_of(
    label: str,
    runs: pd.DataFrame,
    *,
    prices: Mapping[str, float],
    owned: Mapping[str, OwnedGpu] | None = None,
) -> Side:
    """A side from runs (:func:`reports.kpi.runs_frame` columns), priced as the report prices
    them. The step time is a step's samples over the run's samples per second.

    Args:
        label: What the side is (a run id, a job key, a key and dates).
        runs: Its runs.
        prices: The report's price overrides.
        owned: The owned models.
    """

    def column(name: str) -> np.ndarray:
        return numbers(runs[name])

    price, _ = run_prices(runs, PriceTable(prices), owned) if len(runs) else (pd.Series(), None)
    hours = column("gpu_hours")
    samples, steps = column("samples"), column("steps")
    per_step = np.where(steps > 0, samples / np.where(steps > 0, steps, 1), np.nan)
    sps = column("samples_per_s")
    values = {
        "tokens_per_s": column("tokens_per_s"),
        "samples_per_s": sps,
        "step_time_ms": np.where(sps > 0, 1000 * per_step / np.where(sps > 0, sps, 1), np.nan),
        "data_wait_pct": column("data_wait_pct"),
        "util_pct": column("util_pct"),
        "sm_active_pct": column("sm_active_pct"),
        "mfu": column("mfu"),
        "tokens": column("tokens"),
        "samples": samples,
        "busy": hours * column("util_pct") / 100.0,
    }
    cost = hours * (price.to_numpy(dtype=float) if len(runs) else np.zeros(0))
    return Side(
        label=label,
        run_ids=tuple(str(i) for i in runs["id"]),
        values=values,
        cost=np.where(np.isfinite(cost) & (cost > 0), cost, np.nan),
        verdicts=tuple(str(v) for v in runs["verdict"].fillna("")),
        peaks=_peaks(runs),
    )


def _peaks(runs: pd.DataFrame) -> tuple[str, ...]:
    """Each distinct MFU denominator of ``runs`` (:func:`tracker.peaks.mfu_denominator`), the
    most runs' first."""
    from collections import Counter

    from tracker.peaks import mfu_denominator

    if not len(runs) or "mfu_peak_tflops" not in runs.columns:
        return ()
    counted = Counter(d for r in runs.to_dict("records") if (d := mfu_denominator(r)) is not None)
    return tuple(d for d, _ in counted.most_common())


def common_unit(a: Side, b: Side) -> tuple[str, str, float]:
    """The first unit of work (tokens, samples, busy GPU-hours) that each side takes by the
    report's rule (:func:`reports.kpi.savings.covers`: the runs that count it hold 90% of the
    side's priced cost): (name, the value key, the scale); ``("", "", 1)`` where none.

    Args:
        a: One side.
        b: The other.
    """
    codes = np.repeat([0, 1], [a.runs, b.runs])
    cost = np.concatenate([a.cost, b.cost])
    for column, scale, name in [*((c, s, n) for c, s, n in UNITS), ("busy", 1.0, BUSY_UNIT)]:
        work = np.concatenate([a.values[column], b.values[column]])
        if covers(codes, 2, cost, work).all():
            return name, column, scale
    return "", "", 1.0


def _stat(
    side: Side, metric: Metric, unit: tuple[str, str, float]
) -> tuple[np.ndarray, np.ndarray] | None:
    """(numerators, denominators) per run of a side's statistic (a mean: values and ones; the
    cost per unit: costs and work), over the runs that have it (a log-scale metric's value
    > 0); None where none has."""
    if metric.key == "usd_per_unit":
        if not unit[0]:
            return None
        work = side.values[unit[1]] / unit[2]
        ok = ~np.isnan(side.cost) & (work > 0)
        return (side.cost[ok], work[ok]) if ok.any() else None
    v = side.values[metric.key]
    ok = ~np.isnan(v)
    if metric.log_scale:
        ok &= v > 0
    return (v[ok], np.ones(int(ok.sum()))) if ok.any() else None


def compare(a: Side, b: Side) -> tuple[list[Row], str]:
    """Each metric both sides have: their figures (means over runs; the cost per unit a ratio
    of sums), the change, and whether it is beyond the noise: Welch's t interval over the runs
    (per-run costs per unit for the cost; :func:`noise_band`), with :data:`MIN_RUNS` runs or
    more a side that have the metric.

    Args:
        a: The first side (the reference).
        b: The second.

    Returns:
        The rows, and the unit of ``usd_per_unit`` ("" where the sides share none).
    """
    unit = common_unit(a, b)
    rows = []
    for m in METRICS:
        sa, sb = _stat(a, m, unit), _stat(b, m, unit)
        if sa is None or sb is None:
            continue
        va, vb = float(sa[0].sum() / sa[1].sum()), float(sb[0].sum() / sb[1].sum())
        change = 100.0 * (vb / va - 1.0) if va else None
        low = high = None
        beyond = None
        ra, rb = sa[0] / sa[1], sb[0] / sb[1]  # per run
        if len(ra) >= MIN_RUNS and len(rb) >= MIN_RUNS and change is not None:
            band = noise_band(ra, rb, log_scale=m.log_scale)
            if band is not None:
                low, high = band
                beyond = low > 0 or high < 0
        better = None
        if vb != va:
            better = (vb > va) == m.higher_is_better
        label = f"$ per {unit[0]}" if m.key == "usd_per_unit" else m.label
        rows.append(
            Row(
                metric=m.key,
                label=label,
                a=va,
                b=vb,
                runs_a=len(ra),
                runs_b=len(rb),
                change_pct=change,
                low_pct=low,
                high_pct=high,
                beyond_noise=beyond,
                better=better,
            )
        )
    return rows, unit[0]


def noise_band(a: np.ndarray, b: np.ndarray, *, log_scale: bool) -> tuple[float, float] | None:
    """The 95% interval of the change from the runs ``a`` to the runs ``b``, in %: Welch's t on
    the runs' logs, 100 × (e^(d ± h) − 1) (:func:`reports.kpi.intervals.change_interval_pct`),
    or on their values, (d ± h) ÷ mean(a) × 100; None where it is not finite.

    Args:
        a: Side a's value per run.
        b: Side b's.
        log_scale: Whether the values are a rate or a ratio (each > 0).
    """
    if log_scale:
        return change_interval_pct(a, b)
    w = welch(a, b)
    mean = float(np.mean(a))
    if w is None or not mean:
        return None
    return 100.0 * w.low / mean, 100.0 * w.high / mean


# -- the gate ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """A metric's baseline: the mean of ``runs`` runs and their standard deviation."""

    mean: float
    sd: float | None
    runs: int

    def noise_pct(self) -> float | None:
        """The 95% prediction interval's half-width for one more run, in % of the mean; None
        with fewer than 2 runs."""
        if self.runs < 2 or self.sd is None or not self.mean:
            return None
        return 100.0 * prediction_half_width(self.sd, self.runs) / abs(self.mean)


@dataclass(frozen=True, kw_only=True)
class GateLine:
    metric: str
    label: str
    baseline: Baseline
    value: float
    change_pct: float
    regression_pct: float
    """How much worse, in % (≤ 0: not worse)."""
    noise_pct: float | None
    fails: bool

    def sentence(self, threshold_pct: float, unit: str = "") -> str:
        """``−7.9% tokens/s (noise ±1.2%): fails the 5% gate`` (the cost per ``unit``)."""
        label = f"$ per {unit}" if self.metric == "usd_per_unit" and unit else self.label
        noise = "noise unknown" if self.noise_pct is None else f"noise ±{self.noise_pct:.1f}%"
        sign = "−" if self.change_pct < 0 else "+"
        verdict = "fails" if self.fails else "passes"
        return (
            f"{sign}{abs(self.change_pct):.1f}% {label} ({noise}): {verdict} the "
            f"{threshold_pct:g}% gate"
        )


def baseline_of(values: np.ndarray) -> Baseline | None:
    """A metric's baseline from its runs' values (NaN: unknown); None where none has one."""
    v = values[np.isfinite(values)]
    if not len(v):
        return None
    return Baseline(
        mean=float(v.mean()), sd=float(v.std(ddof=1)) if len(v) > 1 else None, runs=len(v)
    )


def gate(
    candidate: Mapping[str, float | None],
    baselines: Mapping[str, Baseline],
    *,
    threshold_pct: float,
) -> list[GateLine]:
    """Each metric of the candidate that has a baseline: its change, how much of it is a
    regression, the noise band, and whether it fails (a regression over the threshold and over
    the noise band).

    Args:
        candidate: Metric key → the run's value.
        baselines: Metric key → its baseline.
        threshold_pct: The largest regression that passes, in %.
    """
    out = []
    for key, base in baselines.items():
        v = candidate.get(key)
        if v is None or not math.isfinite(v) or not base.mean:
            continue
        m = BY_KEY.get(key) or Metric(key, key, not key.startswith("usd_per"))
        change = 100.0 * (v / base.mean - 1.0)
        regression = -change if m.higher_is_better else change
        noise = base.noise_pct()
        fails = regression > threshold_pct and (noise is None or regression > noise)
        out.append(
            GateLine(
                metric=key,
                label=m.label,
                baseline=base,
                value=float(v),
                change_pct=change,
                regression_pct=regression,
                noise_pct=noise,
                fails=fails,
            )
        )
    return out


def as_plain(obj: Any) -> Any:
    """Rows and lines as JSON-ready dicts."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: as_plain(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {k: as_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [as_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def run_values(
    side: Side, unit: tuple[str, str, float], metrics: Sequence[str]
) -> dict[str, float | None]:
    """A one-run side's ``metrics`` (``usd_per_unit`` in ``unit``; None: unknown).

    Args:
        side: The run.
        unit: The unit of work (:func:`common_unit`).
        metrics: The metric keys.
    """
    out: dict[str, float | None] = {}
    for key in metrics:
        if key == "usd_per_unit":
            if not unit[0]:
                continue
            work = float(side.values[unit[1]][0]) / unit[2]
            cost = float(side.cost[0])
            out[key] = cost / work if work > 0 and math.isfinite(cost) else None
        else:
            v = float(side.values[key][0])
            out[key] = v if math.isfinite(v) else None
    return out


def baselines_of(
    side: Side, unit: tuple[str, str, float], metrics: Sequence[str]
) -> dict[str, Baseline]:
    """The baseline of each of ``metrics`` over a side's runs (those that have it).

    Args:
        side: The baseline's runs.
        unit: The unit of work of ``usd_per_unit``.
        metrics: The metric keys.
    """
    out = {}
    for key in metrics:
        if key == "usd_per_unit":
            if not unit[0]:
                continue
            work = side.values[unit[1]] / unit[2]
            values = np.where(work > 0, side.cost / np.where(work > 0, work, 1), np.nan)
        else:
            values = side.values[key]
        b = baseline_of(values)
        if b is not None:
            out[key] = b
    return out
