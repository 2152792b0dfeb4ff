"""The week's ledger (reports.kpi.ledger): every paid GPU-second in one bucket, with its owner
and price; the scheduler's GPU-time no run holds summed with the runs' on every figure."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from fakes import examples
from fakes import run_record as run
from hypothesis import given, settings
from hypothesis import strategies as st

from reports import kpi as kpis
from reports.kpi.allocations import JobLine
from reports.kpi.ledger import bucket_hours, job_rows, unallocated
from reports.render.html import beside_waste, report_context
from reports.rows import failed_state
from tracker.owned import OwnedGpu, amortize

W48 = datetime(2026, 11, 23, tzinfo=UTC)
TARGET = 85.0


def job(
    job_id: str,
    *,
    hours: float,
    sampled: float = 0.0,
    price: float | None = 3.85,
    team: str = "nlp",
    user: str = "ana",
    matched: str = "",
    util: float | None = None,
    idle: float = 0.0,
    model: str | None = "H100",
) -> JobLine:
    """A job of 4 GPUs that held ``hours`` GPU-hours, ``sampled`` of them covered by runs."""
    return JobLine(
        source="slurm",
        cluster="c1",
        job_id=job_id,
        shown_id=job_id,
        name=f"job-{job_id}",
        user=user,
        account=team,
        team=team,
        partition="gpu",
        state="COMPLETED",
        start=W48 + timedelta(hours=1),
        end=W48 + timedelta(hours=6),
        gpus=4,
        gpu_model=model,
        matched=matched,
        runs=(),
        allocated_gpu_hours=hours,
        sampled_gpu_hours=sampled,
        idle_gpu_hours=idle,
        no_samples_gpu_hours=hours - sampled,
        known_gpu_hours=sampled if util is not None else 0.0,
        util_pct=util,
        price_per_gpu_hour=price,
    )


def rows_of(*jobs: JobLine) -> pd.DataFrame:
    return job_rows(jobs, pd.Timestamp(W48), target_util_pct=TARGET)


def test_a_job_nothing_measured_is_paid_and_not_measured() -> None:
    r = rows_of(job("7006", hours=20.0)).iloc[0]
    assert r["run_id"] == "slurm:c1/7006"
    assert r["gpu_hours"] == 20.0 and r["unmeasured_hours"] == 20.0
    assert r["spend_usd"] == pytest.approx(20 * 3.85)  # $77.00
    assert r["unmeasured_usd"] == pytest.approx(77.0)
    assert r["waste_usd"] == 0.0  # unknown is never waste, nor useful
    assert r["verdict"] == "not measured"
    assert (r["team"], r["user"]) == ("nlp", "ana")


def test_only_the_part_of_a_job_its_runs_did_not_sample_is_its_own() -> None:
    # 25.6 GPU-h held, 24.0 in its run's samples (the run's already): 1.6 GPU-h not measured
    r = rows_of(job("7001", hours=25.6, sampled=24.0, matched="id")).iloc[0]
    assert r["gpu_hours"] == pytest.approx(1.6)
    assert r["spend_usd"] == pytest.approx(1.6 * 3.85)  # $6.16


def test_a_job_judged_by_sacct_is_judged_whole_at_its_average() -> None:
    # 10 GPU-h, no minute sample, steps' average 40%: waste 10 x 2.00 x (1 - 40/85)
    j = job("9", hours=10.0, sampled=10.0, matched="sacct", util=40.0, price=2.0)
    r = rows_of(j).iloc[0]
    assert r["gpu_hours"] == 10.0 and r["unmeasured_hours"] == 0.0
    assert r["utilization_pct"] == pytest.approx(40.0)
    assert r["waste_usd"] == pytest.approx(10 * 2.0 * (1 - 40 / 85))
    b = bucket_hours(pd.DataFrame([r]))
    assert b.iloc[0].to_dict() == pytest.approx(
        {
            "unmeasured": 0.0,
            "failed": 0.0,
            "idle": 0.0,
            "below_target": 10 * (1 - 40 / 85),
            "redone": 0.0,
            "throttled": 0.0,
            "slow_node": 0.0,
            "useful": 10 * 40 / 85,
        }
    )


@pytest.mark.parametrize(
    ("state", "failed"),
    [
        ("FAILED", True),
        ("CANCELLED by 1000", True),
        ("NODE_FAIL", True),
        ("OUT_OF_MEMORY", True),
        ("TIMEOUT", False),  # stopped at its limit: it may have checkpointed its work
        ("PREEMPTED", False),
        ("COMPLETED", False),
    ],
)
def test_a_job_that_failed_is_failed_work_not_waste(state: str, failed: bool) -> None:
    # 10 GPU-h at its steps' 40%, $2.00 an hour: failed work $20.00, or waste as before
    j = dataclasses.replace(
        job("9", hours=10.0, sampled=10.0, matched="sacct", util=40.0, price=2.0, idle=2.0),
        state=state,
    )
    r = rows_of(j).iloc[0]
    b = bucket_hours(pd.DataFrame([r])).iloc[0]
    assert failed_state(state) is failed  # the rule one at a time, as the job note asks it
    if failed:
        assert (r["failed_hours"], r["failed_usd"]) == (10.0, 20.0)
        assert (r["waste_usd"], r["idle_usd"], r["waste_hours"]) == (0.0, 0.0, 0.0)
        assert b.to_dict() == {
            "unmeasured": 0.0,
            "failed": 10.0,
            "idle": 0.0,
            "below_target": 0.0,
            "redone": 0.0,
            "throttled": 0.0,
            "slow_node": 0.0,
            "useful": 0.0,
        }
    else:
        assert (r["failed_hours"], r["failed_usd"]) == (0.0, 0.0)
        assert r["idle_usd"] == pytest.approx(2 * 2.0) and b["failed"] == 0.0
    assert b.sum() == pytest.approx(10.0)


def test_a_failed_job_no_sample_measured_is_not_measured_not_failed() -> None:
    # the ledger's order: what no sample measured is not measured, whatever became of the job
    j = dataclasses.replace(job("7006", hours=20.0), state="FAILED")
    r = rows_of(j).iloc[0]
    assert (r["unmeasured_hours"], r["failed_hours"], r["failed_usd"]) == (20.0, 0.0, 0.0)


def test_a_failed_4_gpu_run_is_failed_work_in_its_team_s_week() -> None:
    """A 4-GPU run that failed after 3 hours at 30% (team vision) and one that crashed after an
    hour on 1 GPU (team nlp) beside a healthy one: their 12 and 1 GPU-hours are failed work,
    in no cause of waste; the week's and each team's dollars add up bucket by bucket."""
    ok = run("ok", W48 + timedelta(days=1), 10, util=90.0, team="nlp", user="ben")
    failed = dataclasses.replace(
        run("f", W48 + timedelta(days=2), 3, gpus=4, util=30.0, team="vision", user="cy"),
        status="failed",
    )
    crashed = dataclasses.replace(
        run("c", W48 + timedelta(days=3), 1, util=5.0, team="nlp", user="ben"), status="crashed"
    )
    frame = kpis.runs_frame([ok, failed, crashed])
    gt = kpis.gpu_time(frame, kpis.samples_frame([]), tz=UTC, now=W48 + timedelta(days=8))
    k = kpis.kpis_of_gpu_time(frame, gt, W48, tz=UTC)
    h = k.headline
    assert h.failed_gpu_hours == pytest.approx(12.0 + 1.0)
    assert h.failed_usd == pytest.approx(13 * 3.85)  # $50.05
    # the waste is the healthy run's alone: 10 GPU-h at 90% is over the 85% target, so none
    assert h.waste_usd == pytest.approx(0.0) and h.idle_usd == pytest.approx(0.0)
    assert h.spend_usd == pytest.approx(23 * 3.85)
    teams = k.by["team"].set_index("team")
    assert teams.loc["vision", "failed_usd"] == pytest.approx(12 * 3.85)  # $46.20
    assert teams.loc["nlp", "failed_usd"] == pytest.approx(3.85)
    row = k.runs.set_index("run_id").loc["f"]
    assert (row["failed_hours"], row["waste_usd"], row["idle_usd"]) == (12.0, 0.0, 0.0)
    b = bucket_hours(k.runs).sum()
    assert b["failed"] == pytest.approx(13.0) and b["useful"] == pytest.approx(10.0)
    assert b.sum() == pytest.approx(h.gpu_hours)
    # the team's own week: its rows alone
    mine = frame[frame["team"] == "vision"]
    tk = kpis.kpis_of_gpu_time(mine, gt[gt["run_id"].isin(mine["id"])], W48, tz=UTC)
    assert (tk.headline.failed_usd, tk.headline.spend_usd) == (
        pytest.approx(12 * 3.85),
        pytest.approx(12 * 3.85),
    )
    # the page's lede and the runs to fix name it
    assert "$46.20" in beside_waste(tk) and "failed work" in beside_waste(tk)
    assert kpis.runs_to_fix(k)["run_id"].tolist()[:2] == ["f", "c"]


def test_a_throttled_run_is_the_machine_s_in_its_team_s_week() -> None:
    """An hour on one H100 at 92% with 10 min throttled (counter): $0.64 throttled, in the
    team's week and on the runs to fix; a 4-GPU run over two weeks (3 h before Monday, 1 h
    after) throttled 2 GPU-h has 1.5 and 0.5 in them; a run at 40% below target has its
    throttled time only out of what below target leaves (1 h at 40%: 0.47 h useful)."""
    hot = run(
        "hot",
        W48 + timedelta(days=1),
        1,
        util=92.0,
        team="vision",
        throttled_gpu_hours=10 / 60,
        throttle_source="counter",
        verdict="throttled",
    )
    across = run(
        "x",
        W48 - timedelta(hours=3),
        4,
        gpus=4,
        util=92.0,
        team="nlp",
        throttled_gpu_hours=2.0,
        throttle_source="counter",
    )
    slow = run("s", W48 + timedelta(days=2), 1, util=40.0, team="nlp", throttled_gpu_hours=0.9)
    cool = run("c", W48 + timedelta(days=3), 2, util=92.0, team="nlp")  # not measured: none
    frame = kpis.runs_frame([hot, across, slow, cool])
    gt = kpis.gpu_time(frame, kpis.samples_frame([]), tz=UTC, now=W48 + timedelta(days=8))
    k = kpis.kpis_of_gpu_time(frame, gt, W48, tz=UTC)
    rows = k.runs.set_index("run_id")
    assert rows.loc["hot", "throttled_hours"] == pytest.approx(10 / 60)
    assert rows.loc["hot", "throttled_usd"] == pytest.approx(10 / 60 * 3.85)  # $0.6417
    assert rows.loc["x", "throttled_hours"] == pytest.approx(2.0 * 4 / 16)  # its week's 4 of 16
    assert rows.loc["s", "throttled_hours"] == pytest.approx(40 / 85)  # below target first
    assert rows.loc["c", "throttled_hours"] == 0.0
    h = k.headline
    assert h.throttled_gpu_hours == pytest.approx(10 / 60 + 0.5 + 40 / 85)
    assert h.throttled_usd == pytest.approx(h.throttled_gpu_hours * 3.85)
    teams = k.by["team"].set_index("team")
    assert teams.loc["vision", "throttled_usd"] == pytest.approx(10 / 60 * 3.85)
    b = bucket_hours(k.runs)
    assert (b.sum(axis=1) - k.runs["gpu_hours"]).abs().max() == pytest.approx(0.0, abs=1e-12)
    assert b["throttled"].sum() == pytest.approx(h.throttled_gpu_hours)
    assert b.loc[rows.index.get_loc("s"), "useful"] == pytest.approx(0.0, abs=1e-12)
    # the throttled run is to fix (its verdict names the machine), by its dollars
    assert "hot" in kpis.runs_to_fix(k)["run_id"].tolist()
    # the page says it beside the waste: (1/6 + 0.5 + 40/85) GPU-h x $3.85 = $4.38
    assert "throttled $4.38" in beside_waste(k)


def test_a_job_by_sacct_less_its_runs_time_keeps_its_shares() -> None:
    """2 GPUs x 5 h at 2% (idle by its steps' average), of which a summary-only run naming it
    holds 2 x 4 h: its own 2 GPU-h are idle, and no more than them."""
    j = dataclasses.replace(
        job("9", hours=10.0, sampled=10.0, matched="sacct", util=2.0, idle=10.0),
        named_by=("run-a",),
    )
    r = job_rows([j], pd.Timestamp(W48), target_util_pct=TARGET, runs_held={"run-a": 8.0})
    (row,) = r.to_dict("records")
    assert row["gpu_hours"] == pytest.approx(2.0)
    assert row["idle_hours"] == pytest.approx(2.0) and row["idle_usd"] == pytest.approx(2 * 3.85)
    assert row["waste_usd"] == pytest.approx(2 * 3.85)  # idle is a part of waste
    b = bucket_hours(r)
    assert b.sum(axis=1).iloc[0] == pytest.approx(2.0)


def test_a_job_is_no_underutilized_run() -> None:
    j = job("9", hours=10.0, sampled=10.0, matched="sacct", util=20.0)
    k = week_with([j])
    assert "slurm:c1/9" not in set(k.underutilized["run_id"])
    assert k.headline.underutilized_runs == 1  # r2: 4 GPU-h at 20%
    assert k.headline.underutilized_gpu_hours_pct == pytest.approx(100 * 4 / (14 + 10))


def test_an_unpriced_job_has_unknown_dollars_never_zero() -> None:
    r = rows_of(job("5", hours=3.0, price=None, model=None)).iloc[0]
    assert not r["priced"]
    assert pd.isna(r["spend_usd"]) and pd.isna(r["unmeasured_usd"])


def week_with(jobs: list[JobLine], **kw: object) -> kpis.WeekKpis:
    runs = [run("r1", W48 + timedelta(days=1), 10, util=90.0, team="nlp", user="ben")]
    runs.append(run("r2", W48 + timedelta(days=2), 2, gpus=2, util=20.0, team="vision"))
    frame = kpis.runs_frame(runs)
    gt = kpis.gpu_time(frame, kpis.samples_frame([]), tz=UTC, now=W48 + timedelta(days=8))
    owned = kw.get("owned")
    rows = job_rows(jobs, pd.Timestamp(W48), target_util_pct=TARGET, owned=owned)  # type: ignore[arg-type]
    return kpis.kpis_of_gpu_time(frame, gt, W48, tz=UTC, jobs=rows, **kw)  # type: ignore[arg-type]


def test_the_headline_counts_every_paid_gpu_second_once() -> None:
    k = week_with([job("7006", hours=20.0), job("7001", hours=25.6, sampled=24.0, matched="id")])
    h = k.headline
    runs_usd = 10 * 3.85 + 4 * 3.85  # r1: 10 GPU-h; r2: 2 GPUs x 2 h, both H100 at 3.85
    jobs_usd = (20.0 + 1.6) * 3.85
    assert h.spend_usd == pytest.approx(runs_usd + jobs_usd)
    assert h.gpu_hours == pytest.approx(14 + 21.6)
    assert h.unmeasured_gpu_hours == pytest.approx(21.6)
    assert h.unmeasured_usd == pytest.approx(jobs_usd)
    assert h.runs == 2 and h.jobs == 2  # a job's row is no run
    # waste is the runs' alone: r2's 4 GPU-h at 20%
    assert h.waste_usd == pytest.approx(4 * 3.85 * (1 - 20 / 85))
    teams = k.by["team"].set_index("team")
    assert teams.loc["nlp", "spend_usd"] == pytest.approx(10 * 3.85 + jobs_usd)
    assert teams.loc["nlp", "runs"] == 1  # ben's run; ana's jobs are not runs
    assert teams["spend_usd"].sum() == pytest.approx(h.spend_usd)
    # the job nothing measured is a line to fix, first by its dollars
    fix = kpis.runs_to_fix(k)
    assert fix.iloc[0]["run_id"] == "slurm:c1/7006"
    ctx = report_context(k, {}, title="t", report_url=None, generated_at=None)
    assert "$83.16 paid for GPU-time no sample measured" in ctx["lede"]  # 21.6 x 3.85
    assert "the most: job-7006, ana · nlp, $77.00" in ctx["lede"]
    assert beside_waste(k) == "not measured $83.16"


def test_a_week_without_jobs_keeps_its_figures() -> None:
    k, before = week_with([]), week_with([job("x", hours=0.0)])
    assert k.headline == before.headline
    assert k.headline.unmeasured_gpu_hours == 0.0 and k.headline.jobs == 0
    assert beside_waste(k) == ""


OWNED = OwnedGpu(
    model="H100", purchase_usd=25_000, life_years=4, power_w=700, usd_per_kwh=0.1, gpus=8
)


def test_owned_capacity_nobody_held_is_counted_once() -> None:
    rate = amortize(OWNED).usd_per_gpu_hour
    k = week_with([job("7006", hours=20.0, price=rate)], owned={"H100": OWNED})
    held = 14 + 20.0  # runs and the job, all on the owned H100s
    h = k.headline
    assert h.unallocated_gpu_hours == pytest.approx(8 * 168 - held)
    assert h.unallocated_usd == pytest.approx((8 * 168 - held) * rate)
    assert h.spend_usd == pytest.approx(held * rate)  # not in the spend: nobody held it
    # a purchase is never deferred while GPUs sit free
    assert k.what_if is not None and k.what_if.months is None
    assert k.what_if.free_gpus == pytest.approx((8 * 168 - held) / 168)
    assert "no purchase to defer" in k.what_if.sentence()
    lede = report_context(k, {}, title="t", report_url=None, generated_at=None)["lede"]
    free = (8 * 168 - held) * rate
    assert f"Capacity nobody held: 1,310.0 GPU-h of owned GPUs, ${free:,.2f} (not in" in lede


def test_a_teams_part_holds_no_capacity_of_the_fleets() -> None:
    k = week_with([job("7006", hours=20.0)], owned={"H100": OWNED}, fleet=False)
    assert k.headline.unallocated_gpu_hours is None and k.headline.unallocated_usd is None


def test_no_capacity_known_is_none_not_zero() -> None:
    assert (
        unallocated(pd.DataFrame(columns=["owned_gpu", "gpu_hours"]), hours_in_week=168.0, owned={})
        is None
    )
    assert week_with([]).headline.unallocated_gpu_hours is None


JOB = st.tuples(
    st.floats(0.0, 50.0),  # allocated GPU-hours
    st.floats(0.0, 1.0),  # share sampled by runs
    st.sampled_from(["a", "b", "c"]),  # team
    st.sampled_from([None, 1.0, 3.85]),  # price
    st.booleans(),  # judged by sacct
    st.floats(0.0, 100.0),  # its average
)


@settings(max_examples=examples(60), deadline=None)
@given(jobs=st.lists(JOB, max_size=12))
def test_buckets_add_up_and_every_surface_sums_the_same(
    jobs: list[tuple[float, float, str, float | None, bool, float]],
) -> None:
    """Random jobs beside two runs: each row's buckets add up to its GPU-hours; the headline's
    spend is the runs' and the priced jobs' own dollars, recomputed here by hand; the teams'
    spend adds up to it; not measured is the unsampled hours of jobs not judged by sacct."""
    lines = []
    for i, (hours, share, team, price, sacct, util) in enumerate(jobs):
        sampled = hours if sacct else hours * share
        lines.append(
            job(
                str(i),
                hours=hours,
                sampled=sampled,
                team=team,
                price=price,
                model="H100" if price else None,
                matched="sacct" if sacct else "id",
                util=util if sacct else None,
            )
        )
    k = week_with(lines)
    own = [(h if sacct else h * (1 - share), p, sacct) for h, share, _, p, sacct, _ in jobs]
    by_hand = 14 * 3.85 + sum(h * p for h, p, _ in own if p is not None and h > 0)
    assert k.headline.spend_usd == pytest.approx(by_hand, rel=1e-9, abs=1e-9)
    assert k.by["team"]["spend_usd"].sum() == pytest.approx(by_hand, rel=1e-9, abs=1e-9)
    unmeasured = sum(h for h, _, sacct in own if not sacct and h > 0)
    assert k.headline.unmeasured_gpu_hours == pytest.approx(unmeasured, abs=1e-9)
    rows = k.runs
    b = bucket_hours(rows)
    assert (b.sum(axis=1) - rows["gpu_hours"]).abs().max() == pytest.approx(0.0, abs=1e-9)


def test_a_run_resumed_from_an_earlier_checkpoint_makes_re_done_work() -> None:
    """pretrain ran 1,000 steps on 4 H100 for 5 h at 90% and crashed; its last checkpoint was
    step 800, where the next run resumed (2,000 steps after it, 10 h at 90%). The crashed run's
    last 200 of 1,000 steps were run twice: 4 GPU x 5 h x 0.2 = 4 GPU-h ($15.40) re-done
    work, and no failed work (its first 800 steps are in the checkpoint); the resumed run's
    time is its own. A crashed run nobody resumed is failed work, whole."""
    first = dataclasses.replace(
        run("p1", W48 + timedelta(days=1), 5, gpus=4, util=90.0, name="pretrain", steps=1000),
        status="crashed",
    )
    resumed = run(
        "p2",
        W48 + timedelta(days=1, hours=6),
        10,
        gpus=4,
        util=90.0,
        name="pretrain",
        steps=2000,
        resumed_from_step=800,
    )
    lost = dataclasses.replace(
        run("o", W48 + timedelta(days=2), 1, util=90.0, name="other", steps=50),
        status="crashed",
    )
    # a sweep's sibling of the same job, started later than the crashed run and still running
    # when the resume began: not the run it resumed from
    sibling = run("s", W48 + timedelta(days=1, hours=1), 8, util=90.0, name="pretrain", steps=9)
    frame = kpis.runs_frame([first, resumed, lost, sibling])
    gt = kpis.gpu_time(frame, kpis.samples_frame([]), tz=UTC, now=W48 + timedelta(days=8))
    k = kpis.kpis_of_gpu_time(frame, gt, W48, tz=UTC)
    rows = k.runs.set_index("run_id")
    assert (rows.loc["p1", "redone_hours"], rows.loc["p1", "failed_hours"]) == (
        pytest.approx(4.0),
        0.0,
    )
    assert rows.loc["p1", "redone_usd"] == pytest.approx(4.0 * 3.85)  # $15.40
    assert rows.loc["p2", "redone_hours"] == 0.0  # the run that kept the result
    assert rows.loc["s", "redone_hours"] == 0.0
    assert rows.loc["o", "failed_hours"] == pytest.approx(1.0)
    h = k.headline
    assert (h.redone_gpu_hours, h.failed_gpu_hours) == (pytest.approx(4.0), pytest.approx(1.0))
    b = bucket_hours(k.runs)
    assert (b.sum(axis=1) - k.runs["gpu_hours"]).abs().max() == pytest.approx(0.0, abs=1e-12)
    assert b["redone"].sum() == pytest.approx(4.0)
    assert "re-done work $15.40" in beside_waste(k)
    first_items = kpis.runs_to_fix(k)["run_id"].tolist()
    assert first_items.index("p1") < first_items.index("o")  # $15.40 before $3.85


LINK = st.tuples(
    st.integers(1, 3),  # GPUs
    st.integers(1, 6),  # hours
    st.sampled_from([20.0, 60.0, 95.0]),  # utilization
    st.integers(1, 500),  # steps run
    st.sampled_from(["finished", "crashed", "failed"]),
    st.integers(0, 600),  # the step the next run resumes at (its checkpoint)
    st.sampled_from([None, 0.0, 0.3]),  # throttled share of its GPU-time
)


@settings(max_examples=examples(60), deadline=None)
@given(chain=st.lists(LINK, min_size=1, max_size=5))
def test_a_chain_of_resumed_runs_adds_up_and_re_does_by_hand(
    chain: list[tuple[int, int, float, int, str, int, float | None]],
) -> None:
    """One job's runs one after the other, each resuming at a drawn step: every row's buckets
    add up to its GPU-hours; a run's re-done work is, by hand, its GPU-time × (its last global
    step − the next run's resume step) ÷ its steps, at most what the waste rule leaves; a run
    that failed is failed work only when no run resumed from it."""
    records = []
    at = W48 + timedelta(days=1)
    base = 0  # each run's first global step
    for i, (gpus, hours, util, steps, status, _, share) in enumerate(chain):
        resume = None if i == 0 else min(chain[i - 1][5], base)  # no checkpoint past its end
        first = base if resume is None else resume
        records.append(
            dataclasses.replace(
                run(
                    f"r{i}",
                    at,
                    hours,
                    gpus=gpus,
                    util=util,
                    name="pretrain",
                    steps=steps,
                    resumed_from_step=resume or None,
                    throttled_gpu_hours=None if share is None else share * gpus * hours,
                    throttle_source=None if share is None else "counter",
                ),
                status=status,
            )
        )
        base = first + steps
        at += timedelta(hours=hours, minutes=5)
    frame = kpis.runs_frame(records)
    gt = kpis.gpu_time(frame, kpis.samples_frame([]), tz=UTC, now=W48 + timedelta(days=8))
    k = kpis.kpis_of_gpu_time(frame, gt, W48, tz=UTC)
    rows = k.runs.set_index("run_id")
    b = bucket_hours(k.runs)
    assert (b.sum(axis=1) - k.runs["gpu_hours"]).abs().max() == pytest.approx(0.0, abs=1e-9)
    for i, r in enumerate(records):
        row = rows.loc[r.id]
        held = r.gpu_hours
        resumed_by = records[i + 1].resumed_from_step if i + 1 < len(records) else None
        failed = r.status != "finished" and resumed_by is None
        assert row["failed_hours"] == pytest.approx(held if failed else 0.0), r.id
        if failed or not resumed_by:
            assert row["redone_hours"] == 0.0, r.id
            continue
        last = (r.resumed_from_step or 0) + r.steps
        share = min(max(last - resumed_by, 0) / r.steps, 1.0)
        below = held * max(0.0, 1 - r.util_pct / 85)  # the waste rule, no idle stretch here
        assert row["redone_hours"] == pytest.approx(min(held * share, held - below)), r.id
