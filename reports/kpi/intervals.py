"""The one interval of a change between two sets of runs, which the savings ledger, ``gpu-kpi
compare`` and ``gpu-kpi gate`` all give: Welch's t, with Student's t quantile at the unrounded
Satterthwaite degrees of freedom.

- **Welch's interval** of mean(b) − mean(a): the difference ± t(0.975, ν) × se, where
  se² = s²_a/n_a + s²_b/n_b and ν = se⁴ ÷ ((s²_a/n_a)²/(n_a − 1) + (s²_b/n_b)²/(n_b − 1)),
  a real number between min(n_a, n_b) − 1 and n_a + n_b − 2 (never rounded: rounding down
  widens the interval, at 3 runs a side by up to 35%). It assumes each side's values are
  normal, each with its own variance.
- **A ratio on the log scale** (:func:`change_interval_pct`): a cost per unit of work, a
  throughput or a step time moves by a factor, and its runs' spread grows with its size; the
  interval is Welch's on the runs' logs, d ± h, shown as 100 × (e^(d ± h) − 1) %. It covers the
  change in the sides' *geometric* means of the per-run values (e^(mean of logs)): the typical
  run's change. Its model is lognormal runs, each side with its own spread: drawn from it,
  the interval holds the true change 94-96.5% of the time at 3, 5 and 10 runs a side
  (``tests/reports/kpi/test_intervals.py`` measures it; docs/report.md has the figures).
- **The gate** (:func:`prediction_half_width`) compares one run with a baseline: one run has no
  spread of its own, so Welch's does not apply; the band is the prediction interval of one more
  baseline run, t(0.975, n − 1) × sd × √(1 + 1/n), with the same quantile.

:func:`t_quantile` is Student's t quantile for any real degrees of freedom (the regularized
incomplete beta function by its continued fraction, inverted by Newton's method inside a
bracket): no SciPy. Nothing here draws a random number: the same runs give the same interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

LEVEL = 0.95
"""The intervals' level: two-sided 95%."""

_EPS = 1e-15
_TINY = 1e-300
_MAX_TERMS = 10_000
_MAX_LOG_CHANGE = 700.0
"""The largest log change shown (e^700 is near a float's largest): past it, no interval."""
_MAX_LOG_T = 352.0
"""The log of the largest t whose square a float holds (e^704): a quantile past it is
infinite here."""
_LARGE_DF = 1000.0
"""From here on the t quantile is the normal's with its Cornish–Fisher terms in 1/ν: their
error there is under 1e-12 (to p = 0.9995), and the continued fraction slows as ν grows."""


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: the t with P(T ≤ t) = ``p`` for ``df`` degrees of freedom.

    Args:
        p: The probability, in (0, 1): 0.975 for a two-sided 95% interval.
        df: The degrees of freedom, any real number > 0 (Welch's are seldom whole).

    Returns:
        The quantile (negative for ``p`` < 0.5), to about 1e-12 relative; infinite past
        e^352 (1e152: ν under 0.0085 at 0.975).

    Raises:
        ValueError: ``p`` outside (0, 1), or ``df`` not a number > 0.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"a probability in (0, 1), not {p!r}")
    if not (df > 0 and math.isfinite(df)):
        raise ValueError(f"degrees of freedom > 0, not {df!r}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    tail = 1.0 - p
    if df >= _LARGE_DF:
        return _cornish_fisher(NormalDist().inv_cdf(p), df)
    # Newton's method on log P(T > t) against log t, which the t's power-law tail makes nearly
    # a straight line: a few steps from the normal's expansion at any ν; a step that leaves
    # the bracket found so far bisects it instead
    log_tail = math.log(tail)
    low, high = -math.inf, math.inf
    u = math.log(max(_cornish_fisher(NormalDist().inv_cdf(p), df), 1e-3))
    for _ in range(500):
        u = min(u, _MAX_LOG_T)
        t = math.exp(u)
        upper = _upper_tail(t, df)
        if upper <= 0.0:  # so far out that the tail underflows: back
            high = u
            u = _within(low, high, u, toward=-1.0)
            continue
        gap = math.log(upper) - log_tail
        if gap > 0 and u >= _MAX_LOG_T:
            return math.inf  # ν near 0 and p near 1
        if gap > 0:
            low = u
        else:
            high = u
        slope = _density(t, df) * t / upper
        nxt = math.nan
        if slope > 0:
            nxt = u + gap / slope
        tolerance = 1e-15 * max(1.0, abs(u))
        if abs(nxt - u) <= tolerance or high - low <= tolerance:
            return math.exp(nxt if math.isfinite(nxt) else u)
        if not low < nxt < high:
            nxt = _within(low, high, u, toward=gap)
        u = nxt
    return math.exp(u)


def _within(low: float, high: float, u: float, *, toward: float) -> float:
    """The middle of the bracket (low, high); while one end is open, a step of 1 from ``u``
    toward it (the sign of ``toward``)."""
    if math.isfinite(low) and math.isfinite(high):
        return 0.5 * (low + high)
    return u + math.copysign(1.0, toward)


def _cornish_fisher(z: float, df: float) -> float:
    """The t quantile from the normal's ``z``: its expansion in 1/ν (Abramowitz & Stegun
    26.7.5), the start of the search, and the quantile itself at large ν."""
    z2 = z * z
    g1 = (z2 + 1) * z / 4
    g2 = ((5 * z2 + 16) * z2 + 3) * z / 96
    g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384
    g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _upper_tail(t: float, df: float) -> float:
    """P(T > t) for t ≥ 0: ½ I_x(ν/2, ½) with x = ν/(ν + t²)."""
    t2 = t * t
    return 0.5 * _beta_reg(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))


def _density(t: float, df: float) -> float:
    """Student's t density at ``t``."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))


def _beta_reg(a: float, b: float, x: float, y: float) -> float:
    """The regularized incomplete beta function I_x(a, b), with y = 1 − x given apart (so that
    an x near 1 keeps its digits): its continued fraction, on the side where it converges fast
    (Numerical Recipes §6.4)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, y) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    c = 1.0
    d = 1.0 / _off_zero(1.0 - (a + b) * x / (a + 1.0))
    h = d
    for m in range(1, _MAX_TERMS + 1):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 / _off_zero(1.0 + num * d)
            c = _off_zero(1.0 + num / c)
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    return h


def _off_zero(v: float) -> float:
    """``v``, or a tiny number where it is (nearly) 0: Lentz's guard against dividing by 0."""
    if abs(v) < _TINY:
        return _TINY
    return v


@dataclass(frozen=True, kw_only=True)
class Welch:
    """Welch's interval of mean(b) − mean(a)."""

    difference: float
    """mean(b) − mean(a), in the values' unit."""
    half_width: float
    """t(0.975, ν) × se; 0 where neither side varies."""
    df: float | None
    """ν, Satterthwaite's degrees of freedom, unrounded; None where neither side varies."""

    @property
    def low(self) -> float:
        return self.difference - self.half_width

    @property
    def high(self) -> float:
        return self.difference + self.half_width


def welch(a: np.ndarray, b: np.ndarray, *, level: float = LEVEL) -> Welch | None:
    """Welch's t interval of mean(b) − mean(a) at ``level``.

    Args:
        a: One side's values (a value per run), 2 or more, finite.
        b: The other side's.
        level: The two-sided level (0.95).

    Returns:
        The interval; None where a side has fewer than 2 values or a value that is no finite
        number.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    qa, qb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    difference = float(b.mean() - a.mean())
    se2 = qa + qb
    if not (math.isfinite(se2) and math.isfinite(difference)):
        return None
    if se2 == 0:
        return Welch(difference=difference, half_width=0.0, df=None)
    # the shares of se² rather than its terms squared: no underflow for tiny variances
    sa, sb = qa / se2, qb / se2
    df = 1.0 / (sa * sa / (len(a) - 1) + sb * sb / (len(b) - 1))
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(se2)
    return Welch(difference=difference, half_width=half, df=df)


def change_interval_pct(
    a: np.ndarray, b: np.ndarray, *, level: float = LEVEL
) -> tuple[float, float] | None:
    """The interval of the change from side ``a`` to side ``b`` of a positive per-run figure
    (a cost per unit, a throughput), in %: Welch's on the runs' natural logs, d ± h, as
    100 × (e^(d ± h) − 1). It covers the change in the sides' geometric means
    (e^(mean of logs)).

    Args:
        a: Side a's value per run, each > 0.
        b: Side b's.
        level: The two-sided level (0.95).

    Returns:
        (low, high) in %; None where a side has fewer than 2 values or a value that is not a
        finite number > 0 (or the interval reaches past a factor of e^700).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not ((a > 0).all() and (b > 0).all()):
        return None
    w = welch(np.log(a), np.log(b), level=level)
    if w is None or w.high > _MAX_LOG_CHANGE:
        return None
    return 100.0 * math.expm1(w.low), 100.0 * math.expm1(w.high)


def prediction_half_width(sd: float, runs: int, *, level: float = LEVEL) -> float:
    """The half-width of the prediction interval of one more run, from ``runs`` runs of
    standard deviation ``sd``: t(0.975, runs − 1) × sd × √(1 + 1/runs), in ``sd``'s unit.

    Args:
        sd: The runs' standard deviation (n − 1 in its denominator).
        runs: How many runs, 2 or more.
        level: The two-sided level (0.95).

    Raises:
        ValueError: Fewer than 2 runs.
    """
    if runs < 2:
        raise ValueError("a prediction interval needs 2 runs or more")
    return t_quantile(0.5 + level / 2, runs - 1) * sd * math.sqrt(1.0 + 1.0 / runs)
