"""Weekly KPIs against numbers computed by hand on small frames."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pytest
from fakes import examples
from fakes import run_record as run
from hypothesis import given, settings
from hypothesis import strategies as st

from reports import kpi as kpis
from reports.render.fmt import fmt_pct
from reports.render.html import _trend_totals
from tracker.cost import IdleDetector
from tracker.record import MinuteSample, RunRecord

W48 = datetime(2026, 11, 23, tzinfo=UTC)  # Monday of ISO week 2026-W48
W49 = W48 + timedelta(days=7)
NOW = W49 + timedelta(days=3)


def minutes(
    run_id: str,
    start: datetime,
    utils: list[float | None],
    gpu: str = "GPU-a",
) -> list[MinuteSample]:
    return [
        MinuteSample(
            run_id=run_id, minute=start + timedelta(minutes=i), gpu=gpu, covered_s=60.0, util_pct=u
        )
        for i, u in enumerate(utils)
    ]


def week(
    runs: list[RunRecord],
    samples: list[MinuteSample] | None = None,
    at: datetime = W48,
    tz: str = "UTC",
    **kw: object,
) -> kpis.WeekKpis:
    zone = UTC if tz == "UTC" else ZoneInfo(tz)
    return kpis.week_kpis(
        kpis.runs_frame(runs), kpis.samples_frame(samples or []), at, tz=zone, now=NOW, **kw
    )  # type: ignore[arg-type]


def test_utilization_is_weighted_by_gpu_hours_not_a_mean_of_means() -> None:
    k = week(
        [run("a", W48, 10, util=90.0), run("b", W48 + timedelta(days=1), 1, gpus=4, util=10.0)]
    )
    h = k.headline
    assert h.gpu_hours == pytest.approx(14.0)
    assert h.utilization_pct == pytest.approx(100 * (0.9 * 10 + 0.1 * 4) / 14)  # 67.14, not 50
    assert h.spend_usd == pytest.approx(14 * 3.85)
    # waste: a at 90% is over target; b: 4 GPU-h x 3.85 x (1 - 10/85)
    assert h.waste_usd == pytest.approx(4 * 3.85 * (1 - 10 / 85))
    assert h.runs == 2


def test_a_run_crossing_the_week_boundary_is_split_by_its_minutes() -> None:
    start = W49 - timedelta(hours=2)  # Sunday 22:00 UTC, 4 hours
    samples = minutes("x", start, [50.0] * 120 + [100.0] * 120)
    r = run("x", start, 4, util=75.0)
    before, after = week([r], samples, at=W48), week([r], samples, at=W49)
    assert before.headline.gpu_hours == pytest.approx(2.0)
    assert before.headline.utilization_pct == pytest.approx(50.0)
    assert after.headline.gpu_hours == pytest.approx(2.0)
    assert after.headline.utilization_pct == pytest.approx(100.0)
    # week-over-week against W48: GPU-hours flat, utilization doubled
    assert after.change_pct["gpu_hours"] == pytest.approx(0.0)
    assert after.change_pct["utilization_pct"] == pytest.approx(100.0)


def test_the_week_boundary_is_in_the_report_time_zone() -> None:
    # Monday 00:00 in Berlin (UTC+1 in November) is Sunday 23:00 UTC: 1 h before, 3 h after
    start = W49 - timedelta(hours=2)
    r = run("x", start, 4, util=60.0)
    berlin_w49 = datetime(2026, 11, 30, tzinfo=ZoneInfo("Europe/Berlin"))
    after = week([r], at=berlin_w49, tz="Europe/Berlin")
    assert after.headline.gpu_hours == pytest.approx(3.0)  # pro rata: summary only
    sampled = week([r], minutes("x", start, [60.0] * 240), at=berlin_w49, tz="Europe/Berlin")
    assert sampled.headline.gpu_hours == pytest.approx(3.0)


def test_a_run_without_gpu_metrics_is_unknown_never_idle() -> None:
    k = week([run("known", W48, 2, util=40.0), run("blind", W48, 6, util=None)])
    h = k.headline
    assert (h.gpu_hours, h.known_gpu_hours) == (pytest.approx(8.0), pytest.approx(2.0))
    assert h.utilization_pct == pytest.approx(40.0)  # the blind run does not pull it to 10%
    assert h.idle_usd == 0.0
    assert h.waste_usd == pytest.approx(2 * 3.85 * (1 - 40 / 85))
    blind = k.runs.set_index("run_id").loc["blind"]
    assert np.isnan(blind["utilization_pct"]) and blind["waste_usd"] == 0.0
    assert h.underutilized_runs == 1  # only the known one (40% < 50%, 2 GPU-h)


def test_two_gpu_models_at_their_prices() -> None:
    k = week(
        [
            run("h", W48, 2, util=85.0, model="H100", price=None),
            run("a", W48, 3, util=17.0, model="A100-80GB", price=None),
        ]
    )
    assert k.headline.spend_usd == pytest.approx(2 * 3.85 + 3 * 2.00)
    assert k.headline.waste_usd == pytest.approx(3 * 2.00 * (1 - 17 / 85))
    by = k.by["gpu_model"].set_index("gpu_model")
    assert by.loc["A100-80GB", "spend_usd"] == pytest.approx(6.0)
    assert by.loc["H100", "utilization_pct"] == pytest.approx(85.0)


def test_unpriced_models_are_counted_apart() -> None:
    k = week(
        [run("q", W48, 5, util=30.0, model="Quantum QX-9", price=None), run("h", W48, 1, util=30.0)]
    )
    assert k.headline.unpriced_gpu_hours == pytest.approx(5.0)
    assert k.headline.spend_usd == pytest.approx(3.85)


def test_previous_week_missing() -> None:
    k = week([run("a", W48, 1)])
    assert k.previous is None
    assert set(k.change_pct.values()) == {None}
    assert len(k.trend) == 12 and k.trend["gpu_hours"].tolist() == [0.0] * 11 + [1.0]


def test_waste_is_per_gpu_so_one_busy_gpu_never_hides_an_idle_one() -> None:
    r = run("two", W48, 1, gpus=2, util=50.0)
    samples = minutes("two", W48, [100.0] * 60, gpu="GPU-busy") + minutes(
        "two", W48, [0.0] * 60, gpu="GPU-idle"
    )
    k = week([r], samples)
    # the idle GPU wastes its whole hour; the run-level rule would say 7.70 x (1 - 50/85) = 3.17
    assert k.headline.waste_usd == pytest.approx(3.85)
    # 60 minutes under 5%: idle $ is the idle GPU's hour
    assert k.headline.idle_usd == pytest.approx(3.85)
    assert k.headline.utilization_pct == pytest.approx(50.0)


def test_underutilized_needs_enough_gpu_hours() -> None:
    k = week(
        [
            run("big", W48, 2, util=40.0),
            run("small", W48, 0.5, util=30.0),
            run("fine", W48, 3, util=80.0),
        ]
    )
    assert k.underutilized["run_id"].tolist() == ["big"]
    assert k.headline.underutilized_gpu_hours_pct == pytest.approx(100 * 2 / 5.5)


def test_runs_are_ordered_by_waste_with_verdict_and_team() -> None:
    k = week(
        [
            run("a", W48, 1, util=10.0, team="nlp", verdict="input-bound"),
            run("b", W48, 4, util=10.0, team="vision", verdict="idle"),
        ]
    )
    assert k.runs["run_id"].tolist() == ["b", "a"]
    assert k.runs.iloc[0]["verdict"] == "idle"
    teams = k.by["team"].set_index("team")
    assert teams.loc["vision", "waste_usd"] == pytest.approx(4 * 3.85 * (1 - 10 / 85))


def test_a_run_without_a_team_is_in_none_and_unpriced_teams_are_named() -> None:
    """Teams missing, empty and literally ``(none)`` are one row, ``(none)``, of three runs
    (1 + 2 + 3 GPU-h at $3.85 = $23.10); a team whose runs all lack a price is named unpriced,
    one with a priced run is not. The rows come most waste first, the names as written."""
    from reports.kpi.weekly import unpriced_groups

    k = week(
        [
            run("a", W48, 1, team=None),
            run("b", W48, 2, team=""),
            run("c", W48, 3, team="(none)"),
            run("d", W48, 1, team="Zeta", price=None, model="weird-gpu"),
            run("e", W48, 1, team="alpha"),
            run("f", W48, 1, team="alpha", price=None, model="weird-gpu"),
        ]
    )
    teams = k.by["team"].set_index("team")
    assert sorted(teams.index) == ["(none)", "Zeta", "alpha"]
    assert teams.loc["(none)", "runs"] == 3
    assert teams.loc["(none)", "gpu_hours"] == pytest.approx(6.0)
    assert teams.loc["(none)", "spend_usd"] == pytest.approx(6 * 3.85)
    assert teams.loc["alpha", "runs"] == 2
    assert unpriced_groups(k.runs, "team") == {"Zeta"}
    assert unpriced_groups(k.runs, "user") == set()  # every run's user is (none): some priced


def test_unit_costs() -> None:
    k = week([run("a", W48, 2, samples=1_000_000, tokens=4_000_000_000)])
    assert k.headline.usd_per_1k_samples == pytest.approx(1000 * 7.70 / 1_000_000)
    assert k.headline.usd_per_1m_tokens == pytest.approx(1e6 * 7.70 / 4e9)


def test_rightsizing_names_a_cheaper_gpu_that_fits() -> None:
    """Issue 11: memory AND compute. An H100 job at 20% used 0.20 x 989.4 = 197.9 TFLOP/s
    (16-bit): a T4 (85% of 65 = 55.3) or an L4 (85% of 121 = 102.9) cannot do that work in the
    same hours; an L40S can (85% of 362.05 = 307.7, 12 GiB x 1.2 in 48 GB) at $1.55, and a
    2g.20gb slice of its own H100 can too (85% of 2/7 of 989.4 = 240.3; 14.4 GiB in its 19 GiB
    usable) at 2/7 of $3.85 = $1.10 (issue 44): 10 h x (3.85 - 1.10) = $27.50. A 1g.20gb holds
    the memory but not the work (85% of 1/7 of 989.4 = 120.1)."""
    k = week([run("small-job", W48, 10, util=20.0, mem_peak_gib=12.0, mem_total_gib=80.0)])
    (s,) = k.rightsizing.to_dict("records")
    assert s["suggested_gpu"] == "H100 MIG 2g.20gb"
    assert s["saving_usd"] == pytest.approx(10 * (3.85 - 3.85 * 2 / 7))
    assert s["assumption"] == (
        "12.0 GiB × 1.2 fits 19 GiB; 20.0% of 989.4 = 198 TFLOP/s "
        "(16-bit) fits 85% of its 2/7 of 989.4 = 240: the same hours"
    )


def test_rightsizing_never_downsizes_idle_or_unjudgeable_runs() -> None:
    """At 10% an H100 job needs 98.9 TFLOP/s: an L4 (102.9 at 85%) does it at $0.80, a
    1g.20gb slice of its own H100 (85% of 1/7 of 989.4 = 120.1; 14.4 GiB in 19) at 1/7 of
    $3.85 = $0.55. A GeForce RTX 4090 would too ($0.39, 85% of 165.2 = 140.4, 24 GB) but a
    workstation or GeForce card is never suggested. An idle notebook gets no suggestion
    (release the GPU), nor does a GPU without a published peak."""
    k = week(
        [
            run("light", W48, 4, util=10.0, mem_peak_gib=12.0, mem_total_gib=80.0),
            run("notebook", W48, 8, util=2.0, mem_peak_gib=3.0, mem_total_gib=80.0, verdict="idle"),
            run("l20", W48, 5, util=10.0, model="L20", price=1.01, mem_peak_gib=2.0),
        ]
    )
    assert k.rightsizing[["run_id", "suggested_gpu"]].values.tolist() == [
        ["light", "H100 MIG 1g.20gb"]
    ]
    assert k.rightsizing["saving_usd"].tolist() == pytest.approx([4 * (3.85 - 3.85 / 7)])


def test_a_notebook_on_a_whole_a100_fits_a_1g_slice_and_one_on_a_slice_is_left_alone() -> None:
    """Issue 44: a notebook on a whole A100 80GB ($2.00) the week through (168 h) at 8% with
    6 GiB: 0.08 × 312 = 25.0 TFLOP/s fits 85% of 1/7 of 312 = 37.9, 6 × 1.2 = 7.2 GiB fits a
    1g.10gb's 9.5: 168 × (2.00 − 2.00/7) = $288.00 a week less. The same notebook already on a
    1g.10gb (its GPU-hours 1/7 of its hours) is not judged again."""
    whole = run("nb", W48, 168, util=8.0, model="A100-80GB", price=2.00, mem_peak_gib=6.0)
    on_slice = run(
        "nb-slice",
        W48,
        168,
        util=8.0,
        model="A100-80GB",
        price=2.00,
        mem_peak_gib=6.0,
        gpu_hours=24.0,
        mig_profile="1g.10gb",
    )
    k = week([whole, on_slice])
    (s,) = k.rightsizing.to_dict("records")
    assert (s["run_id"], s["suggested_gpu"]) == ("nb", "A100-80GB MIG 1g.10gb")
    assert s["saving_usd"] == pytest.approx(168 * (2.00 - 2.00 / 7))
    assert s["assumption"] == (
        "6.0 GiB × 1.2 fits 9.5 GiB; 8.0% of 312 = 25 TFLOP/s (16-bit) "
        "fits 85% of its 1/7 of 312 = 38: the same hours"
    )


def _idle_of(
    util: np.ndarray, group: np.ndarray, covered_s: np.ndarray | None = None
) -> np.ndarray:
    """The report's idle flags of rows sorted by group, each group's minutes consecutive."""
    n = len(util)
    return kpis.idle_of_series(
        util,
        np.full(n, 60.0) if covered_s is None else covered_s,
        group,
        np.arange(n, dtype=np.int64) * 60_000_000_000,
        threshold_pct=5.0,
        window=30,
    )


def test_idle_rule_matches_the_trackers_streaming_detector() -> None:
    rng = random.Random(7)
    for _ in range(30):
        n = rng.randint(1, 200)
        utils = [
            rng.choice([0.0, 1.0, 3.0, 4.9, 6.0, 40.0, 90.0, None])
            if rng.random() < 0.3
            else rng.choice([0.0, 2.0])
            for _ in range(n)
        ]
        covered = [rng.choice([60.0, 60.0, 10.0, 0.0]) for _ in range(n)]
        detector = IdleDetector(window=30, threshold_pct=5.0)
        for u, c in zip(utils, covered, strict=True):
            detector.add_minute(u, c)
        flags = _idle_of(
            np.array([np.nan if u is None else u for u in utils]),
            np.zeros(n, dtype=int),
            np.array(covered),
        )
        assert float(np.array(covered)[flags].sum()) == pytest.approx(detector.idle_s)


def test_idle_minutes_of_a_gpu_do_not_depend_on_the_rows_before_it() -> None:
    # windows averaging about the threshold: the report reads the stretches around low minutes
    # only, and must flag the same minutes as over the whole fleet's rows
    rng = random.Random(1)
    for _ in range(200):
        series = np.array([rng.choice([0.0, 2.5, 4.9, 5.0, 5.1, 7.5, 10.0]) for _ in range(40)])
        alone = _idle_of(series, np.ones(40, dtype=int))
        for before in (np.full(1000, 33.3), np.full(100, 0.7)):
            rows = np.concatenate([before, series])
            group = np.concatenate([np.zeros(len(before), dtype=int), np.ones(40, dtype=int)])
            flags = _idle_of(rows, group)
            assert (flags[len(before) :] == alone).all()


def test_sm_active_basis_uses_its_own_column_and_thresholds() -> None:
    r = run("a", W48, 1, util=90.0, sm_active_pct=45.0)
    k = week([r], basis="sm_active")
    assert k.basis_label == "SM activity"
    assert k.headline.utilization_pct == pytest.approx(45.0)
    assert k.headline.waste_usd == pytest.approx(3.85 * (1 - 45 / 60))  # target 60% on SM


def test_idle_is_part_of_waste_in_every_breakdown() -> None:
    """Team research, H100 at $3.85. Run n: one GPU, 60 minutes at 1% (all idle). Run t: one
    GPU, 30 minutes at 2% (an idle half hour) then 90 minutes at 68%.
    n: idle $3.85, waste $3.85 (the old rule said 3.85 x (1 - 1/85) = $3.80, under idle).
    t: idle 0.5 h = $1.925 in full; the busy 1.5 h ($5.775) at 68%: 5.775 x (1 - 68/85) =
    $1.155; waste $3.08. Team: idle $5.775 of waste $6.93."""
    runs = [
        run("n", W48, 1, util=1.0, team="research"),
        run("t", W48 + timedelta(hours=3), 2, util=51.5, team="research"),
    ]
    samples = minutes("n", W48, [1.0] * 60) + minutes(
        "t", W48 + timedelta(hours=3), [2.0] * 30 + [68.0] * 90
    )
    k = week(runs, samples)
    by_run = k.runs.set_index("run_id")
    assert by_run.loc["n", "waste_usd"] == pytest.approx(3.85)
    assert by_run.loc["t", "idle_usd"] == pytest.approx(1.925)
    assert by_run.loc["t", "waste_usd"] == pytest.approx(1.925 + 5.775 * (1 - 68 / 85))
    team = k.by["team"].set_index("team").loc["research"]
    assert team["idle_usd"] == pytest.approx(5.775)
    assert team["waste_usd"] == pytest.approx(6.93)
    assert k.headline.waste_usd == pytest.approx(6.93)
    assert k.headline.idle_usd == pytest.approx(5.775)


GT_ROW = st.tuples(
    st.integers(0, 4),  # run
    st.integers(0, 2),  # GPU
    st.booleans(),  # W48, else W47
    st.floats(0.01, 200.0),  # GPU-hours
    st.one_of(st.just(0.0), st.floats(1e-6, 1.0)),  # share with a value (no subnormal floats)
    st.one_of(st.floats(0.0, 100.0), st.sampled_from([0.0, 4.9, 85.0, 100.0])),  # util %
)


@settings(max_examples=examples(40), deadline=None)
@given(rows=st.lists(GT_ROW, min_size=1, max_size=25, unique_by=lambda r: r[:3]))
def test_every_utilization_is_weighted_by_gpu_hours(
    rows: list[tuple[int, int, bool, float, float, float]],
) -> None:
    """Random GPU-time rows of five runs in two teams over two weeks: the headline, each
    team's, each run's and the trend's utilization are Σ util × known hours ÷ Σ known hours of
    their rows, recomputed here by hand (tracker.cost.weighted_util_pct is the one rule)."""
    runs = kpis.runs_frame(
        [run(f"r{i}", W48 - timedelta(days=3), 1, team=f"t{i % 2}") for i in range(5)]
    )
    gt = pd.DataFrame(
        [
            (
                f"r{r}",
                f"g{g}",
                pd.Timestamp(W48 if w48 else W48 - timedelta(days=7)),
                h,
                h * share,
                h * share * util / 100,
                0.0,
                0.0,
            )
            for r, g, w48, h, share, util in rows
        ],
        columns=kpis.GT_COLUMNS,
    )
    k = kpis.kpis_of_gpu_time(runs, gt, W48, tz=UTC)

    def by_hand(keep: Callable[[tuple[int, int, bool, float, float, float]], bool]) -> float | None:
        mine = [r for r in rows if keep(r)]
        known = sum(h * share for _, _, _, h, share, _ in mine)
        used = sum(h * share * util for _, _, _, h, share, util in mine)
        return used / known if known > 0 else None

    def same(got: object, want: float | None) -> None:
        if want is None:
            assert got is None or pd.isna(got)
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-9)

    same(k.headline.utilization_pct, by_hand(lambda r: r[2]))
    for team, util in zip(k.by["team"]["team"], k.by["team"]["utilization_pct"], strict=True):
        same(util, by_hand(lambda r, t=team: r[2] and f"t{r[0] % 2}" == t))
    for run_id, util in zip(k.runs["run_id"], k.runs["utilization_pct"], strict=True):
        same(util, by_hand(lambda r, i=run_id: r[2] and f"r{r[0]}" == i))
    assert _trend_totals(k)["utilization"] == fmt_pct(by_hand(lambda r: True))
