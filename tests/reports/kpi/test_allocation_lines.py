"""The scheduler's jobs against the minute samples (:mod:`reports.kpi.allocations`): each
job's allocated, sampled, idle and unsampled GPU-hours and dollars worked out by hand, by id
and by node, with two jobs sharing a node and a run of another job on it, nothing counted
twice."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from allocation_oracle import job, oracle

from reports.data.allocations import Allocation
from reports.kpi.allocations import AllocationWeek, allocation_week, short_host
from reports.kpi.frames import SampleFrameBuilder
from tracker.cost import Thresholds

COLUMNS = ("run_id", "gpu", "minute", "covered_s", "util_pct")


def week_of(
    jobs: list[Allocation],
    runs: list[dict[str, object]],
    rows: list[tuple[object, ...]],
    **kw: object,
) -> AllocationWeek:
    """``allocation_week`` over the rows as the report reads them (SQLite's naive UTC text)."""
    frames = SampleFrameBuilder(COLUMNS)
    frames(
        [(r, g, m.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f"), c, u) for r, g, m, c, u in rows]
    )  # type: ignore[attr-defined]
    args: dict[str, object] = {"since": MON, "until": END, "thresholds": Thresholds(), **kw}
    return allocation_week(jobs, runs, frames.frame(), value="util_pct", **args)  # type: ignore[arg-type]


MON = datetime(2026, 11, 23, tzinfo=UTC)  # the week 2026-W48
END = MON + timedelta(days=7)
TEN = MON + timedelta(hours=10)


def minutes(
    run_id: str, gpu: str, start: datetime, count: int, util: float
) -> list[tuple[object, ...]]:
    return [(run_id, gpu, start + timedelta(minutes=i), 60.0, util) for i in range(count)]


def test_each_jobs_hours_and_dollars_by_hand() -> None:
    jobs = [
        # A: 2 GPUs 10:00-12:00; its tracked run sampled both 10:00-11:00 at 80%
        job("101", 2, TEN, TEN + timedelta(hours=2), ("n1",)),
        # B: 2 GPUs from 10:00:30 to 11:00 on n2; nothing sampled n2
        job("102", 2, TEN + timedelta(seconds=30), TEN + timedelta(hours=1), ("n2",)),
        # C: 2 GPUs 10:00-11:30 on n3 (no GPU type: the nvidia-smi run's A100-80GB prices it)
        job("103", 2, TEN, TEN + timedelta(minutes=90), ("n3",), model=None),
        # D: 2 GPUs 11:00-11:30 on n3, beside C
        job("104", 2, TEN + timedelta(hours=1), TEN + timedelta(minutes=90), ("n3",)),
        # E: from Sunday 23:30 into the week to 00:30 on n4: 30 minutes of it in the week
        job("105", 2, MON - timedelta(minutes=30), MON + timedelta(minutes=30), ("n4",)),
        # F: running when imported two hours after it started, 1 GPU of no type: unpriced
        job("106", 1, TEN, None, ("n5",), model=None, seen_at=TEN + timedelta(hours=2)),
    ]
    runs = [
        {"id": "ra", "host": "n1", "links": {"slurm": "c/101"}, "gpu_model": "H100"},
        # nvidia-smi of all four GPUs of n3, 09:00-12:00: two idle, two at 90%
        {"id": "smi3", "host": "N3.cluster.local", "links": {}, "gpu_model": "A100-80GB"},
        # a run of a job not imported, on n3: never a sample of C or D
        {"id": "rz", "host": "n3", "links": {"slurm": "c/999"}, "gpu_model": "H100"},
    ]
    rows = minutes("ra", "a0", TEN, 60, 80.0) + minutes("ra", "a1", TEN, 60, 80.0)
    nine = TEN - timedelta(hours=1)
    for gpu, util in (("g0", 0.0), ("g1", 0.0), ("g2", 90.0), ("g3", 90.0)):
        rows += minutes("smi3", gpu, nine, 180, util)
    rows += minutes("rz", "z0", TEN, 90, 50.0)
    week = week_of(jobs, runs, rows)
    got = {
        j.job_id: (
            j.matched,
            round(j.allocated_gpu_hours, 9),
            round(j.sampled_gpu_hours, 9),
            round(j.idle_gpu_hours, 9),
            round(j.no_samples_gpu_hours, 9),
            j.price_per_gpu_hour,
        )
        for j in week.jobs
    }
    assert got == {
        "101": ("id", 4.0, 2.0, 0.0, 2.0, 3.85),
        "102": ("", round(2 * 3570 / 3600, 9), 0.0, 0.0, round(2 * 3570 / 3600, 9), 3.85),
        # alone on n3 for 60 min, then beside D: 2 of the host's 4 sampled GPUs either way,
        # half of each sampled second, of which half idle (g0 and g1)
        "103": ("node", 3.0, 3.0, 1.5, 0.0, 2.0),
        # D's gres type says H100; the samples of its GPUs say A100-80GB: they win ($2.00)
        "104": ("node", 1.0, 1.0, 0.5, 0.0, 2.0),
        "105": ("", 1.0, 0.0, 0.0, 1.0, 3.85),
        "106": ("", 2.0, 0.0, 0.0, 2.0, None),
    }
    by = {j.job_id: j for j in week.jobs}
    assert by["101"].runs == ("ra",) and by["103"].runs == ("smi3",) and by["102"].runs == ()
    # nothing counted twice: C and D took 4 of the 6 GPU-hours n3's samples held in 10:00-11:30
    assert by["103"].sampled_gpu_hours + by["104"].sampled_gpu_hours == pytest.approx(4.0)
    # dollars: A's unsampled hour x 2 GPUs at $3.85, C's idle 1.5 GPU-h at $2.00
    assert by["101"].no_samples_usd == pytest.approx(7.70) and by[
        "101"
    ].allocated_usd == pytest.approx(15.40)
    assert by["103"].idle_usd == pytest.approx(3.00) and by["106"].allocated_usd is None
    assert [j.job_id for j in week.jobs] == ["101", "102", "105", "103", "104", "106"]
    assert week.total("allocated_gpu_hours") == pytest.approx(4 + 2 * 3570 / 3600 + 3 + 1 + 1 + 2)
    assert week.total_usd("no_samples_usd") == pytest.approx(3.85 * (2 + 2 * 3570 / 3600 + 1))
    assert week.unpriced_gpu_hours == 2.0 and week.skipped == ()


def test_a_job_id_alone_matches_where_one_side_names_no_cluster() -> None:
    jobs = [job("7", 1, TEN, TEN + timedelta(hours=1), ("n1",), cluster="")]
    runs = [{"id": "r", "host": "n1", "links": {"slurm": "gpukpi/7"}, "gpu_model": "H100"}]
    week = week_of(jobs, runs, minutes("r", "g", TEN, 30, 3.0))
    (line,) = week.jobs
    # matched by id; the 30 minutes at 3% are one 30-minute stretch under 5%: idle
    assert (
        line.matched,
        line.sampled_gpu_hours,
        line.idle_gpu_hours,
        line.no_samples_gpu_hours,
    ) == ("id", 0.5, 0.5, 0.5)


@pytest.mark.parametrize(
    ("hosts", "starts", "matched"),
    [
        (("n1", "n2"), (0, 0), "b"),  # the run's host tells them apart
        (("n2", "n2"), (-3, 0), "b"),  # one host: the job running when the run started
        (("n2", "n2"), (0, 0), ""),  # neither: the run is its node's sample
    ],
)
def test_a_job_id_two_clusters_have_is_the_one_the_run_was_in(
    hosts: tuple[str, str], starts: tuple[int, int], matched: str
) -> None:
    # job 7 of cluster a and of cluster b (ids are per cluster); a run on n2 whose link names
    # "7" alone. Before, it matched neither: its GPU-time was the run's and, unmeasured, each
    # job's as well
    a, b = (
        job("7", 1, TEN + timedelta(hours=h), TEN + timedelta(hours=h + 2), (host,), cluster=c)
        for c, host, h in zip("ab", hosts, starts, strict=True)
    )
    runs = [
        {
            "id": "r",
            "host": "n2.cluster.local",
            "links": {"slurm": "7"},
            "gpu_model": "H100",
            "started_at": TEN,
        }
    ]
    week = week_of([a, b], runs, minutes("r", "g", TEN, 60, 90.0))
    by = {line.cluster: line for line in week.jobs}
    if matched:
        other = "a" if matched == "b" else "b"
        assert (by[matched].matched, by[matched].runs) == ("id", ("r",))
        assert by[matched].sampled_gpu_hours == pytest.approx(1.0)
        assert by[other].sampled_gpu_hours == 0.0 and by[other].runs == ()
    else:
        # by node: its samples shared between the two jobs on n2 in that hour, never counted
        # for both
        assert {line.matched for line in week.jobs} == {"node"}
        assert sum(line.sampled_gpu_hours for line in week.jobs) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("gres", "models", "priced"),
    [
        # its runs saw two models: the gres type's where it is one of them ...
        ("A100-40GB", ("NVIDIA A100-SXM4-80GB", "A100-PCIE-40GB", "A100-PCIE-40GB"), "A100-40GB"),
        # ... else the one most of them saw, whatever their ids' order
        ("H100", ("NVIDIA A100-SXM4-80GB", "A100-PCIE-40GB", "A100-PCIE-40GB"), "A100-40GB"),
        ("H100", ("A100-PCIE-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"), "A100-80GB"),
        ("H100", ("NVIDIA A100-SXM4-80GB",), "A100-80GB"),  # one model: the samples' alone
    ],
)
def test_a_jobs_model_is_what_its_runs_saw(gres: str, models: tuple[str, ...], priced: str) -> None:
    from tracker.prices import PriceTable

    (j,) = [job("9", 3, TEN, TEN + timedelta(hours=1), ("n1",), model=gres)]
    runs = [
        {"id": f"r{i}", "host": "n1", "links": {"slurm": "c/9"}, "gpu_model": m}
        for i, m in enumerate(models)
    ]
    rows = [row for i in range(len(models)) for row in minutes(f"r{i}", "g", TEN, 60, 90.0)]
    (line,) = week_of([j], runs, rows).jobs
    assert line.gpu_model == priced
    assert line.price_per_gpu_hour == PriceTable().lookup(priced).usd_per_gpu_hour  # type: ignore[union-attr]


def test_bad_sample_rows_are_read_as_the_report_reads_them() -> None:
    jobs = [job("8", 1, TEN, TEN + timedelta(minutes=3), ("n1",))]
    runs = [{"id": "s", "host": "n1", "links": {}, "gpu_model": None}]
    rows = [
        ("s", "g", TEN, float("nan"), 2.0),  # seconds that are no number: the row left out
        ("s", "g", TEN + timedelta(minutes=1), 60.0, 250.0),  # out of range: unknown, not idle
        ("s", "g", TEN + timedelta(minutes=2), 60.0, 1.0),
    ]
    (line,) = week_of(jobs, runs, rows, thresholds=Thresholds(idle_window_min=1)).jobs
    # 2 of the 3 minutes sampled; of those only the last idle
    assert (
        line.sampled_gpu_hours,
        line.idle_gpu_hours,
        line.no_samples_gpu_hours,
    ) == pytest.approx((2 / 60, 1 / 60, 1 / 60))


def test_matching_in_arrays_agrees_with_the_plain_oracle() -> None:
    """Generated weeks: hosts shared by jobs of 1-4 GPUs, some on two hosts, runs that record
    their job (some not imported), per-host logs with gaps, idle stretches and partial minutes;
    every job's figures as the minute-by-minute oracle works them out."""
    for seed in range(12):
        rng = random.Random(seed)
        jobs, runs, rows = [], [], []
        base = MON - timedelta(hours=1)
        for k in range(rng.randint(1, 14)):
            start = base + timedelta(seconds=rng.randint(0, 5 * 3600))
            end = (
                start + timedelta(seconds=rng.randint(30, 3 * 3600)) if rng.random() < 0.9 else None
            )
            hosts = tuple(rng.sample(["n1", "n2", "N3.x"], rng.choice((1, 1, 2))))
            jobs.append(
                job(
                    str(100 + k),
                    rng.randint(0, 4),
                    start,
                    end,
                    hosts,
                    model=rng.choice(("H100", None)),
                    cluster=rng.choice(("c", "")),
                    seen_at=start + timedelta(hours=2),
                )
            )
        for r in range(rng.randint(0, 4)):  # tracked runs in a job (or in one not imported)
            target = rng.choice(jobs)
            link = f"c/{target.job_id}" if rng.random() < 0.8 else "c/999"
            run_id = f"t{r}"
            runs.append({"id": run_id, "host": "n1", "links": {"slurm": link}, "gpu_model": "H100"})
            t = target.start_at.replace(second=0)
            for g in range(rng.randint(1, 3)):
                for i in range(rng.randint(1, 90)):
                    rows.append(
                        (
                            run_id,
                            f"{run_id}g{g}",
                            t + timedelta(minutes=i),
                            rng.uniform(1, 60),
                            rng.choice((0.0, 2.0, 70.0, None)),
                        )
                    )
        for h in (
            "n1",
            "n2",
            "n3.x.y",
        ):  # logs of every GPU of a host, with gaps and idle stretches
            if rng.random() < 0.8:
                run_id = f"smi-{h}"
                runs.append({"id": run_id, "host": h, "links": {}, "gpu_model": "A100-80GB"})
                for g in range(rng.randint(1, 4)):
                    util = 0.0
                    for i in range(0, 8 * 60):
                        if rng.random() < 0.05:
                            util = rng.choice((0.0, 1.0, 50.0, 95.0))
                        if rng.random() < 0.9:
                            rows.append(
                                (
                                    run_id,
                                    f"{h}g{g}",
                                    base + timedelta(minutes=i),
                                    rng.choice((60.0, 60.0, 30.0)),
                                    util,
                                )
                            )
        _pods(random.Random(1000 + seed), jobs, runs, rows, base)
        window = rng.choice((1, 5, 30))
        t = Thresholds(idle_window_min=window)
        # a week, or a span of odd seconds (one job's: gpu-kpi job)
        since, until = (
            (MON, END)
            if seed % 2
            else (base + timedelta(seconds=1627), base + timedelta(seconds=13_333))
        )
        got = week_of(jobs, runs, rows, thresholds=t, since=since, until=until)
        want = oracle(jobs, runs, rows, since=since, until=until, thresholds=t)
        assert {j.job_id for j in got.jobs} == set(want)
        for line in got.jobs:
            matched, their, allocated, sampled, idle = want[line.job_id]
            assert (line.matched, line.runs) == (matched, their), (seed, line.job_id)
            assert line.allocated_gpu_hours * 3600 == pytest.approx(allocated, abs=1e-6), (
                seed,
                line.job_id,
            )
            assert line.sampled_gpu_hours * 3600 == pytest.approx(sampled, abs=1e-6), (
                seed,
                line.job_id,
            )
            assert line.idle_gpu_hours * 3600 == pytest.approx(idle, abs=1e-6), (seed, line.job_id)


def _pods(
    rng: random.Random,
    jobs: list[Allocation],
    runs: list[dict[str, object]],
    rows: list[tuple[object, ...]],
    base: datetime,
) -> None:
    """Kubernetes pods beside the jobs: some of workloads w0/w1 (whose DCGM runs on a node
    are theirs alone), some tracked (their ``kubernetes`` link), some of no workload."""
    for k in range(rng.randint(0, 6)):
        start = base + timedelta(seconds=rng.randint(0, 5 * 3600))
        jobs.append(
            job(
                f"uid-{k}",
                rng.randint(1, 2),
                start,
                start + timedelta(seconds=rng.randint(60, 3 * 3600)),
                (rng.choice(["n1", "n2"]),),
                source="kubernetes",
                cluster="",
                shown_id=f"ns/pod-{k}",
                name=rng.choice(("Job/w0", "Job/w1", f"pod-{k}")),
                account="ns",
            )
        )
    pods = [j for j in jobs if j.source == "kubernetes"]
    for w in ("w0", "w1"):
        for h in ("n1", "n2"):
            if rng.random() < 0.5:
                run_id = f"dcgm-{w}-{h}"
                links = {"kubernetes_workload": f"ns/Job/{w}"}
                runs.append({"id": run_id, "host": h, "links": links, "gpu_model": "H100"})
                for g in range(rng.randint(1, 2)):
                    rows += [
                        (run_id, f"{run_id}g{g}", base + timedelta(minutes=i), 60.0, util)
                        for i in range(rng.randint(30, 6 * 60))
                        if (util := rng.choice((0.0, 0.0, 80.0))) is not None
                    ]
    for r, p in enumerate(pods):
        if rng.random() < 0.3:
            run_id = f"pod-run-{r}"
            runs.append(
                {
                    "id": run_id,
                    "host": f"pod-{r}",
                    "links": {"kubernetes": p.shown_id},
                    "gpu_model": None,
                }
            )
            t = p.start_at.replace(second=0)
            rows += [(run_id, "g0", t + timedelta(minutes=i), 60.0, 40.0) for i in range(30)]


def test_hosts_match_on_their_first_label() -> None:
    assert short_host(" GPU01.cluster.local ") == "gpu01" == short_host("gpu01")
