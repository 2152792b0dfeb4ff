"""The week's ledger reconciles, through the real store on SQLite and PostgreSQL: on generated
fleets (tracked runs, runs with no utilization value, Slurm jobs with and without samples, gres
types that name another model than the samples, owned and rented GPUs, unpriced models), every
paid GPU-second is counted once at one price (a run that failed or crashed: failed work; a
run's throttled time: the machine's), and
each surface (the headline, the teams, the
JSON, chargeback, budgets, the job notes) says the same dollars as a recomputation by hand."""

from __future__ import annotations

import dataclasses
import itertools
import math
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from fakes import examples, minutes, run_record
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from reports.build import compute
from reports.data.allocations import Allocation, write_allocations
from reports.kpi.chargeback import chargeback_rows
from reports.kpi.ledger import bucket_hours
from reports.render.exports import to_dict
from reports.request import Request
from reports.weeks import label_of
from tracker.owned import OwnedGpu, amortize
from tracker.store import RunStore

FIRST = datetime(2025, 1, 6, tzinfo=UTC)  # a Monday: 2025-W02
OWNED = OwnedGpu(
    model="H100", purchase_usd=20_000, life_years=4, power_w=600, usd_per_kwh=0.1, gpus=16
)
TABLE = {"H100": 3.85, "A100-80GB": 2.00, "Mystery-GPU": None}

RUN = st.fixed_dictionaries(
    {
        "gpus": st.integers(1, 2),
        "minutes": st.integers(30, 150),
        "util": st.sampled_from([0.0, 30.0, 90.0]),
        "model": st.sampled_from(list(TABLE)),
        "job": st.sampled_from(["none", "id", "id-late"]),  # its Slurm job, started early
        "gres": st.sampled_from(["H100", None]),  # the job's gres type, whatever ran
        "team": st.sampled_from(["nlp", "vision"]),
        "sampled": st.booleans(),  # False: a summary with no utilization value
        "status": st.sampled_from(["finished", "failed", "crashed"]),
        "throttled": st.sampled_from([None, 0.0, 0.25]),  # share of its GPU-time (counter)
    }
)
JOB = st.fixed_dictionaries(
    {
        "gpus": st.integers(1, 4),
        "minutes": st.integers(10, 240),
        "gres": st.sampled_from(["H100", "A100-80GB", None]),
        "team": st.sampled_from(["nlp", "vision", "search"]),
    }
)
_weeks = itertools.count()


def _price(model: str | None, owned: bool) -> float | None:
    """The price by hand: an owned H100 at its amortized rate, else the table's."""
    if model is None:
        return None
    if owned and model == "H100":
        return amortize(OWNED).usd_per_gpu_hour
    return TABLE[model]


@pytest.mark.slow
@pytest.mark.parametrize("owned", [False, True])
def test_every_surface_is_the_ledger_to_the_cent(store_url: str, owned: bool) -> None:
    with RunStore(store_url):
        pass  # the tables, once

    @settings(
        max_examples=examples(12),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(runs=st.lists(RUN, max_size=4), jobs=st.lists(JOB, max_size=3))
    def check(runs: list[dict], jobs: list[dict]) -> None:
        assume(runs or jobs)  # an empty store has nothing to report (its own test's)
        n = next(_weeks)
        week = FIRST + timedelta(weeks=2 * n)  # each example a week of its own, apart
        start = week + timedelta(days=1, hours=9)
        now = week + timedelta(days=9)
        records, rows, allocations = [], [], []
        spend = unmeasured = failed = throttled = 0.0
        team_usd: dict[str, float] = {}
        team_failed: dict[str, float] = {}
        team_throttled: dict[str, float] = {}
        job_usd: dict[str, float | None] = {}

        def pay(team: str, usd: float) -> None:
            team_usd[team] = team_usd.get(team, 0.0) + usd

        for i, r in enumerate(runs):
            rid, host, hours = f"w{n}r{i}", f"w{n}n{i}", r["minutes"] / 60
            price = _price(r["model"], owned)
            job_id = f"{n}0{i}"
            links = {"slurm": f"c/{job_id}"} if r["job"] != "none" else {}
            util = r["util"] if r["sampled"] else None
            records.append(
                dataclasses.replace(
                    run_record(
                        rid,
                        start,
                        hours,
                        gpus=r["gpus"],
                        util=util,
                        model=r["model"],
                        price=TABLE[r["model"]],
                        host=host,
                        links=links,
                        team=r["team"],
                        user="ana",
                        gpu_source="nvml" if r["sampled"] else "none",
                    ),
                    status=r["status"],
                    throttled_gpu_hours=(
                        None if r["throttled"] is None else r["throttled"] * r["gpus"] * hours
                    ),
                    throttle_source=None if r["throttled"] is None else "counter",
                )
            )
            if r["sampled"]:
                for g in range(r["gpus"]):
                    rows += minutes(rid, start, r["minutes"], r["util"], f"{rid}g{g}")
            if price is not None:
                spend += r["gpus"] * hours * price
                pay(r["team"], r["gpus"] * hours * price)
                if not r["sampled"]:
                    unmeasured += r["gpus"] * hours * price
                elif r["status"] != "finished":  # measured, and it did not finish
                    failed += r["gpus"] * hours * price
                    team_failed[r["team"]] = (
                        team_failed.get(r["team"], 0.0) + r["gpus"] * hours * price
                    )
                elif r["throttled"] and r["util"] > 0:
                    # at 90% all of it is left to the machine's; at 30% below target leaves
                    # 1 - (1 - 30/85) = 35% of the time, more than the 25% throttled; at 0%
                    # (idle) nothing is left
                    usd = r["throttled"] * r["gpus"] * hours * price
                    throttled += usd
                    team_throttled[r["team"]] = team_throttled.get(r["team"], 0.0) + usd
            if r["job"] == "none":
                continue
            early = 20 if r["job"] == "id-late" else 0  # the run started 20 min into its job
            allocations.append(
                _alloc(
                    job_id,
                    "c",
                    start - timedelta(minutes=early),
                    r["minutes"] / 60 + early / 60,
                    r["gpus"],
                    r["team"],
                    model=r["gres"],
                    host=host,
                )
            )
            # its price: the model its samples saw, else its gres type's
            job_price = _price(r["model"] if r["sampled"] else r["gres"], owned)
            # the job's line: all it held that no minute sample covers
            line = r["gpus"] * (early + (0 if r["sampled"] else r["minutes"])) / 60
            job_usd[job_id] = None if job_price is None else line * job_price
            # of which the ledger's own (a row of the job): its minutes before the run; the
            # run's time is the run's, sampled or not, never counted twice
            own = r["gpus"] * early / 60
            if job_price is not None:
                spend += own * job_price
                unmeasured += own * job_price
                pay(r["team"], own * job_price)
        for i, j in enumerate(jobs):
            job_id = f"{n}9{i}"
            price = _price(j["gres"], owned)
            hours = j["gpus"] * j["minutes"] / 60
            allocations.append(
                _alloc(
                    job_id,
                    "c",
                    start,
                    j["minutes"] / 60,
                    j["gpus"],
                    j["team"],
                    model=j["gres"],
                    host=f"w{n}x{i}",
                    user="ben",
                )
            )
            job_usd[job_id] = None if price is None else hours * price
            if price is not None:
                spend += hours * price
                unmeasured += hours * price
                pay(j["team"], hours * price)
        with RunStore(store_url) as store:
            for rec in records:
                store.upsert_run(rec)
            if rows:
                store.upsert_samples(rows)
            if allocations:
                write_allocations(store, allocations)
        req = Request(
            week=label_of(week), tz=UTC, owned={"H100": OWNED} if owned else {}, formats=("json",)
        )
        c = compute(store_url, req, now=now)
        k = c.kpis
        h = k.headline
        cents = pytest.approx
        assert h.spend_usd == cents(spend, abs=1e-6)
        assert h.unmeasured_usd == cents(unmeasured, abs=1e-6)
        assert h.failed_usd == cents(failed, abs=1e-6)
        assert h.throttled_usd == cents(throttled, abs=1e-6)
        by_team = dict(zip(k.by["team"]["team"], k.by["team"]["spend_usd"], strict=True))
        assert {t: v for t, v in by_team.items() if v > 1e-9} == cents(
            {t: v for t, v in team_usd.items() if v > 1e-9}, abs=1e-6
        )
        # each team's page: its runs and jobs alone, no capacity of the fleet's
        for team, usd in team_usd.items():
            mine = c.team(req, team)
            assert mine is not None, team
            assert mine.headline.spend_usd == cents(usd, abs=1e-6), team
            assert mine.headline.failed_usd == cents(team_failed.get(team, 0.0), abs=1e-6), team
            assert mine.headline.throttled_usd == cents(team_throttled.get(team, 0.0), abs=1e-6), (
                team
            )
            assert mine.headline.unallocated_gpu_hours is None
            assert set(mine.runs["team"]) == {team}
        # the JSON, the chargeback and the budgets' period say the same
        d = to_dict(k, UTC)
        assert (d["headline"]["spend_usd"] or 0.0) == cents(spend, abs=1e-6)
        held = {b: v for b, v in d["ledger"].items() if b != "unallocated"}
        assert math.fsum(v["usd"] or 0.0 for v in held.values()) == cents(spend, abs=1e-6)
        assert math.fsum(v["gpu_hours"] for v in held.values()) == cents(h.gpu_hours, abs=1e-6)

        def usd(bucket: str, expected: float) -> None:
            """A bucket's dollars: its priced GPU-seconds' (summed by hand); a bucket none of
            whose time is priced, or that is empty, has none (or 0), never a figure."""
            got = held[bucket]["usd"] if bucket in held else None
            if expected:
                assert got == cents(expected, abs=1e-6), bucket
            else:
                assert got in (None, 0.0), bucket

        usd("unmeasured", unmeasured)
        usd("failed", failed)
        assert (d["headline"]["failed_usd"] or 0.0) == cents(failed, abs=1e-6)
        usd("throttled", throttled)
        assert (d["headline"]["throttled_usd"] or 0.0) == cents(throttled, abs=1e-6)
        charged = chargeback_rows(k, label_of(week))
        assert math.fsum(r["spend_usd"] for r in charged) == cents(spend, abs=0.005 * len(charged))
        from reports.budgets import spend as period_spend

        with RunStore(store_url) as store:
            period = period_spend(store, req, week, week + timedelta(days=7), now=now)
        assert {t: v for t, v in period.by_team.items() if v > 1e-9} == cents(
            {t: v for t, v in team_usd.items() if v > 1e-9}, abs=1e-6
        )
        # each job's dollars not measured, as its line has them
        lines = {j.job_id: j for j in (k.allocations.jobs if k.allocations else ())}
        for job_id, usd in job_usd.items():
            got = lines[job_id].no_samples_usd
            assert (got is None) == (usd is None), job_id
            if usd is not None:
                assert got == cents(usd, abs=1e-6), job_id
        # every row's buckets add up to its GPU-hours; owned capacity is counted once
        if len(k.runs):
            b = bucket_hours(k.runs)
            assert (b.sum(axis=1) - k.runs["gpu_hours"]).abs().max() < 1e-9
        if owned:
            on_h100 = k.runs.loc[k.runs["owned_gpu"] == "H100", "gpu_hours"].sum()
            assert h.unallocated_gpu_hours == cents(16 * 168 - on_h100, abs=1e-6)
        else:
            assert h.unallocated_gpu_hours is None

    check()


def _alloc(
    job_id: str,
    cluster: str,
    start: datetime,
    hours: float,
    gpus: int,
    team: str,
    *,
    model: str | None = "H100",
    host: str = "n1",
    user: str = "ana",
) -> Allocation:
    """A finished Slurm job of ``gpus`` GPUs on ``host`` for ``hours`` from ``start``."""
    return Allocation(
        source="slurm",
        cluster=cluster,
        job_id=job_id,
        shown_id=job_id,
        name=f"job{job_id}",
        user=user,
        account=team,
        team=team,
        partition="gpu",
        state="COMPLETED",
        start_at=start,
        end_at=start + timedelta(hours=hours),
        seen_at=start + timedelta(days=8),
        gpus=gpus,
        gpu_model=model,
        hosts=(host,),
    )


@pytest.mark.parametrize(("link", "cluster"), [("101", ""), ("c1/101", "c1"), ("101", "c1")])
def test_a_summary_runs_time_is_its_own_never_its_jobs_too(
    store_url: str, link: str, cluster: str
) -> None:
    """A run with a summary only (no minute sample, no utilization) that names its job: the
    job's 2 GPUs x 4 h less the run's 2 x 3 h are the job's own, matched as the join matches
    (a link with no cluster names the id alone, a job imported without one too)."""
    start = FIRST + timedelta(days=1)
    run = run_record("r", start, 3.0, gpus=2, util=None, links={"slurm": link}, team="nlp")
    with RunStore(store_url) as store:
        store.upsert_run(run)
        write_allocations(store, [_alloc("101", cluster, start, 4.0, 2, "nlp")])
    now = FIRST + timedelta(days=9)
    k = compute(store_url, Request(week=label_of(FIRST), tz=UTC), now=now).kpis
    assert k.headline.gpu_hours == pytest.approx(8.0)  # 6 the run's, 2 the job's
    assert k.headline.spend_usd == pytest.approx(8 * 3.85)
    assert k.headline.unmeasured_usd == pytest.approx(8 * 3.85)  # nothing measured any of it


def test_a_team_with_only_scheduler_jobs_has_its_page(store_url: str) -> None:
    start = FIRST + timedelta(days=1)
    run = run_record("v", start, 1.0, gpus=1, util=90.0, team="vision")
    with RunStore(store_url) as store:
        store.upsert_run(run)
        write_allocations(store, [_alloc("7", "c1", start, 2.0, 4, "nlp")])
    req = Request(week=label_of(FIRST), tz=UTC)
    c = compute(store_url, req, now=FIRST + timedelta(days=9))
    nlp = c.team(req, "nlp")
    assert nlp is not None
    assert (nlp.headline.runs, nlp.headline.jobs) == (0, 1)
    assert nlp.headline.spend_usd == pytest.approx(8 * 3.85)  # 4 GPUs x 2 h, nothing sampled
    vision = c.team(req, "vision")
    assert vision is not None and vision.headline.spend_usd == pytest.approx(3.85)


def test_a_kept_week_is_computed_again_when_its_jobs_are_imported(store_url: str) -> None:
    """The trend's earlier weeks are kept (reports.data.week_cache); a job imported into one of
    them later is in its figures at the next report, priced: 2 GPUs x 3 h at $3.85."""
    w2 = FIRST + timedelta(weeks=1)
    with RunStore(store_url) as store:
        for i, week in enumerate((FIRST, w2)):
            store.upsert_run(run_record(f"k{i}", week + timedelta(days=1), 2.0, util=90.0))
    req = Request(week=label_of(w2), tz=UTC)
    now = w2 + timedelta(days=8)

    def first_week_spend() -> float:
        k = compute(store_url, req, now=now).kpis
        trend = k.trend.set_index("week")["spend_usd"]
        return float(trend[pd.Timestamp(FIRST)])

    assert first_week_spend() == pytest.approx(2 * 3.85)  # computed, then kept
    assert first_week_spend() == pytest.approx(2 * 3.85)  # kept
    with RunStore(store_url) as store:
        write_allocations(store, [_alloc("55", "c1", FIRST + timedelta(days=2), 3.0, 2, "nlp")])
    assert first_week_spend() == pytest.approx(2 * 3.85 + 6 * 3.85)
