"""The one interval of a change (:mod:`reports.kpi.intervals`): Student's t quantile against
closed forms and the t density integrated here; Welch's interval worked out by hand; its
coverage measured by simulation at 3, 5 and 10 runs a side, drawn from the model it assumes,
through the functions the savings ledger, ``compare`` and the gate call; and that they call
them."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from fakes import run_record

from reports.kpi import runs_frame, savings
from reports.kpi.comparison import Baseline, Side, compare, noise_band, side_of
from reports.kpi.intervals import change_interval_pct, t_quantile, welch

# -- Student's t quantile ------------------------------------------------------------------------


def t_density(x: np.ndarray, df: float) -> np.ndarray:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return np.exp(log_norm - (df + 1) / 2 * np.log1p(x * x / df))


def integrated_cdf(t: float, df: float, intervals: int = 200_000) -> float:
    """P(T ≤ t) for t ≥ 0: ½ + the density integrated from 0 to t (Simpson's rule)."""
    x = np.linspace(0.0, t, intervals + 1)
    y = t_density(x, df)
    h = t / intervals
    return 0.5 + h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())


def test_the_integration_itself_matches_cauchys_arctangent() -> None:
    # one degree of freedom is Cauchy's distribution: P(T ≤ t) = ½ + arctan(t) ÷ π
    for t in (0.5, 3.0, 12.7):
        assert integrated_cdf(t, 1.0) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995, 0.9995])
def test_the_quantile_matches_the_closed_forms_of_one_and_two_degrees(p: float) -> None:
    # ν = 1: tan(π (p − ½)); ν = 2: (2p − 1) ÷ √(2p(1 − p))
    assert t_quantile(p, 1.0) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-12)
    assert t_quantile(p, 2.0) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)


# the quantiles of the density integrated here (Simpson's rule, bisected to 1e-9; ν = 10 and 30
# as the printed tables give them)
@pytest.mark.parametrize(
    ("p", "df", "table"),
    [
        (0.975, 1.0, 12.7062047),
        (0.975, 2.5, 3.5746548),
        (0.975, 3.7, 2.8675207),
        (0.975, 10.0, 2.2281389),
        (0.975, 30.0, 2.0422725),
        (0.9, 1.3, 2.4259474),
        (0.995, 5.5, 3.8499115),
        (0.975, 250.0, 1.9694984),
        (0.975, 2500.0, 1.9609133),  # past the switch to the normal's expansion
    ],
)
def test_the_quantile_matches_the_integrated_density(p: float, df: float, table: float) -> None:
    q = t_quantile(p, df)
    assert q == pytest.approx(table, abs=1e-6)
    # the density integrated up to it gives p: |ΔF| ÷ the density there bounds the error in t
    error_t = abs(integrated_cdf(q, df) - p) / float(t_density(np.array([q]), df)[0])
    assert error_t < 1e-8


def test_the_quantile_is_symmetric_and_refuses_what_is_no_probability() -> None:
    assert t_quantile(0.025, 4.3) == -t_quantile(0.975, 4.3)
    assert t_quantile(0.5, 3.0) == 0.0
    for p, df in [(0.0, 3.0), (1.0, 3.0), (0.975, 0.0), (0.975, math.nan), (0.975, math.inf)]:
        with pytest.raises(ValueError):
            t_quantile(p, df)


def test_the_old_table_rounded_these_quantiles() -> None:
    # the gate's old t table (3 decimals) and its 1.96 + 2.4/ν beyond 30, against the quantile
    for df, old in [(2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045), (30, 2.042)]:
        assert round(t_quantile(0.975, df), 3) == old
    assert abs(t_quantile(0.975, 40) - (1.96 + 2.4 / 40)) < 2e-3


# -- Welch's interval ----------------------------------------------------------------------------


def test_welchs_interval_by_hand_with_its_unrounded_degrees_of_freedom() -> None:
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0, 8.0])
    # s²/n: 1/3 and (20/3)/4 = 5/3; se² = 2; ν = 4 ÷ ((1/3)²/2 + (5/3)²/3) = 4.0755
    df = 4 / ((1 / 3) ** 2 / 2 + (5 / 3) ** 2 / 3)
    assert df == pytest.approx(4.0755, abs=1e-4)
    w = welch(a, b)
    assert w is not None
    assert w.difference == pytest.approx(5.0 - 2.0)
    assert w.df == pytest.approx(df)
    assert w.half_width == pytest.approx(t_quantile(0.975, df) * math.sqrt(2.0))
    # rounding ν down to 4 would widen it
    assert w.half_width < t_quantile(0.975, 4) * math.sqrt(2.0)
    assert (w.low, w.high) == (pytest.approx(3 - w.half_width), pytest.approx(3 + w.half_width))


def test_welchs_degrees_of_freedom_lie_between_the_sides_and_their_sum() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        na, nb = rng.integers(2, 12, size=2)
        w = welch(rng.normal(0, rng.uniform(0.1, 5), na), rng.normal(0, 1, nb))
        assert w is not None and w.df is not None
        assert min(na, nb) - 1 - 1e-9 <= w.df <= na + nb - 2 + 1e-9


def test_welch_without_spread_or_runs() -> None:
    w = welch(np.array([2.0, 2.0, 2.0]), np.array([3.0, 3.0, 3.0]))
    assert w is not None and (w.difference, w.half_width, w.df) == (1.0, 0.0, None)
    assert welch(np.array([1.0]), np.array([1.0, 2.0])) is None
    assert welch(np.array([1.0, math.nan]), np.array([1.0, 2.0])) is None
    assert change_interval_pct(np.array([1.0, 0.0, 2.0]), np.array([1.0, 2.0, 3.0])) is None


def test_a_change_point_that_passes_min_t_has_an_interval_clear_of_zero() -> None:
    # Welch's ν ≥ min(n) − 1 = 2 at MIN_RUNS a side, and t(0.975, ν) ≤ t(0.975, 2) = 4.30 < 5
    assert t_quantile(0.975, savings.MIN_RUNS - 1) < savings.MIN_T


# -- coverage, by simulation ---------------------------------------------------------------------

REPLICATIONS = 4000
"""Per case: a coverage near 95% is then known to ± 0.35 points (one standard error)."""


@pytest.mark.parametrize(("sd_before", "sd_after"), [(0.10, 0.25), (0.25, 0.05)])
@pytest.mark.parametrize("runs", [3, 5, 10])
def test_the_cost_per_unit_interval_covers_the_change_95_percent_of_the_time(
    runs: int, sd_before: float, sd_after: float
) -> None:
    """Lognormal runs (the model of Welch's interval on logs): each run's $ per unit is
    e^(normal), its side's spread its own, the runs of different sizes; the cost is 30% lower
    after (geometric means). The interval the ledger and ``compare`` compute holds −30% within
    2 points of 95% of the time."""
    rng = np.random.default_rng(41 + runs)
    truth = -30.0
    shift = math.log1p(truth / 100)
    held = 0
    for _ in range(REPLICATIONS):
        work_b, work_a = rng.uniform(50, 150, runs), rng.uniform(50, 150, runs)
        cost_b = work_b * 0.2 * np.exp(rng.normal(0.0, sd_before, runs))
        cost_a = work_a * 0.2 * np.exp(rng.normal(shift, sd_after, runs))
        band = change_interval_pct(cost_b / work_b, cost_a / work_a)
        assert band is not None
        held += band[0] <= truth <= band[1]
    coverage = 100.0 * held / REPLICATIONS
    assert abs(coverage - 95.0) <= 2.0, coverage


@pytest.mark.parametrize("runs", [3, 5, 10])
def test_the_gates_band_holds_one_more_baseline_run_95_percent_of_the_time(runs: int) -> None:
    """Normal runs of one benchmark: a new run of the same code lands within the baseline's
    noise band (the gate's :meth:`Baseline.noise_pct`) within 2 points of 95% of the time."""
    rng = np.random.default_rng(7 + runs)
    held = 0
    for _ in range(REPLICATIONS):
        v = rng.normal(1000.0, 30.0, runs + 1)
        base = Baseline(mean=float(v[:-1].mean()), sd=float(v[:-1].std(ddof=1)), runs=runs)
        noise = base.noise_pct()
        assert noise is not None
        held += abs(100.0 * (v[-1] / base.mean - 1.0)) <= noise
    coverage = 100.0 * held / REPLICATIONS
    assert abs(coverage - 95.0) <= 2.0, coverage


# -- what the ledger and compare call ------------------------------------------------------------


def test_compare_gives_the_cost_per_unit_the_ledgers_interval_and_shares_a_difference() -> None:
    """Three runs a side: compare's $ per unit band is the log-scale interval of the runs' own
    cost per unit (a ratio of sums for its figure); its utilization band Welch's difference of
    the means ÷ the first side's mean, around the change."""
    t = datetime(2026, 11, 2, tzinfo=UTC)
    hours_a, hours_b = [10.0, 12.0, 9.0], [6.0, 7.5, 5.0]
    samples_a, samples_b = [1e6, 1.1e6, 0.8e6], [1e6, 1.2e6, 0.9e6]
    util_a, util_b = [55.0, 60.0, 58.0], [88.0, 91.0, 90.0]

    def side(label: str, hours: list[float], samples: list[float], util: list[float]) -> Side:
        runs = [
            run_record(f"{label}{i}", t + timedelta(days=i), h, samples=int(s), util=u, price=2.0)
            for i, (h, s, u) in enumerate(zip(hours, samples, util, strict=True))
        ]
        return side_of(label, runs_frame(runs), prices={})

    a, b = side("a", hours_a, samples_a, util_a), side("b", hours_b, samples_b, util_b)
    rows, unit = compare(a, b)
    by = {r.metric: r for r in rows}
    assert unit == "1k samples"
    per_a = 2.0 * np.array(hours_a) / (np.array(samples_a) / 1000)
    per_b = 2.0 * np.array(hours_b) / (np.array(samples_b) / 1000)
    cost = by["usd_per_unit"]
    assert cost.change_pct == pytest.approx(
        100 * ((2 * sum(hours_b) / sum(samples_b)) / (2 * sum(hours_a) / sum(samples_a)) - 1)
    )
    assert (cost.low_pct, cost.high_pct) == tuple(
        pytest.approx(v) for v in change_interval_pct(per_a, per_b) or ()
    )
    assert cost.beyond_noise is True and cost.high_pct is not None and cost.high_pct < 0
    util = by["util_pct"]
    w = welch(np.array(util_a), np.array(util_b))
    assert w is not None
    mean_a = float(np.mean(util_a))
    assert util.change_pct == pytest.approx(100 * w.difference / mean_a)
    assert (util.low_pct, util.high_pct) == (
        pytest.approx(100 * w.low / mean_a),
        pytest.approx(100 * w.high / mean_a),
    )
    assert noise_band(np.array(util_a), np.array(util_b), log_scale=False) == (
        pytest.approx(100 * w.low / mean_a),
        pytest.approx(100 * w.high / mean_a),
    )


def test_a_rate_of_zero_counts_as_unknown_and_a_share_of_zero_as_zero() -> None:
    """On the log scale a run's 0 samples/s has no log: it measured no rate, and is left out of
    the side's mean and band; a data wait of 0% is a figure like any other."""
    t = datetime(2026, 11, 2, tzinfo=UTC)
    runs = [
        run_record(f"r{i}", t + timedelta(days=i), 1.0, samples_per_s=sps, data_wait_pct=wait)
        for i, (sps, wait) in enumerate([(100.0, 0.0), (110.0, 0.0), (0.0, 0.0), (90.0, 0.0)])
    ]
    a = side_of("a", runs_frame(runs), prices={})
    rows, _ = compare(a, a)
    by = {r.metric: r for r in rows}
    assert (by["samples_per_s"].runs_a, by["samples_per_s"].a) == (3, pytest.approx(100.0))
    assert (by["samples_per_s"].low_pct or 0) < 0 < (by["samples_per_s"].high_pct or 0)
    assert (by["data_wait_pct"].runs_a, by["data_wait_pct"].a) == (4, 0.0)
    assert by["data_wait_pct"].change_pct is None  # no change in % from 0
