"""``gpu-kpi demo``: real tracking sessions on simulated GPUs, in simulated time, into a store.

Each demo run drives :class:`tracker.session.Session` exactly as a training loop would — steps,
data waits, the sampler, the store writer — but with an injected clock, so three hours of
training take a fraction of a second and the figures are exact.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from reports.kpi.budgets import Budget
from tracker.cost import Thresholds, waste_usd
from tracker.owned import OwnedGpu
from tracker.record import RunRecord
from tracker.session import track
from tracker.units import S_PER_HOUR, WHOLE_S_PER_HOUR

DEMO_OWNED = {
    "A100-80GB": OwnedGpu(
        model="A100-80GB",
        purchase_usd=15_000,
        life_years=4,
        power_w=500,
        usd_per_kwh=0.10,
        pue=1.3,
        gpus=4,
    )
}
"""The demo fleet owns 4 A100s (the rest is rented): the report prices them at the amortized
rate and says whether owning paid off this week."""

DEMO_BUDGETS = (Budget(team="nlp", usd_per_month=6000), Budget(team="vision", usd_per_week=150))
"""Two teams' budgets: the report shows their spend against them (and ``serve`` would alert)."""


def demo_config(store_url: str) -> str:
    """The demo's config file (TOML): its store, owned GPUs (:data:`DEMO_OWNED`) and budgets
    (:data:`DEMO_BUDGETS`). The demo's sessions and report read it, and ``gpu-kpi … --config``
    with it reproduces the demo's figures."""
    import dataclasses
    import json

    def value(v: object) -> str:
        return json.dumps(v)  # TOML's strings and numbers read as JSON's

    from urllib.parse import urlsplit

    lines = [
        "# written by gpu-kpi demo: `gpu-kpi report --config <this file>` reproduces its figures"
    ]
    if urlsplit(store_url).password:  # never a secret in a file the demo writes
        lines.append("# store: its URL has a password; give it with GPU_KPI_STORE")
    else:
        lines.append(f"store = {value(store_url)}")
    for model, gpu in DEMO_OWNED.items():
        lines += ["", f"[owned.{model}]"]
        fields = dataclasses.asdict(gpu)
        lines += [f"{k} = {value(v)}" for k, v in fields.items() if k != "model" and v is not None]
    for b in DEMO_BUDGETS:
        lines += ["", "[[budgets]]", f"team = {value(b.team)}"]
        lines += [
            f"{k} = {value(getattr(b, k))}"
            for k in ("usd_per_week", "usd_per_month")
            if getattr(b, k) is not None
        ]
    return "\n".join(lines) + "\n"


BOARD_W = {"H100": 700, "H200": 700, "A100-80GB": 400, "L4": 72, "A10G": 300}
"""Board power at full load of the history's GPUs (datasheet TDP), W: a run at ``u``% draws
about (0.2 + 0.8 u/100) of it, for the history's energy figures."""


@dataclass(frozen=True, kw_only=True)
class DemoRun:
    name: str
    project: str
    team: str
    user: str
    gpu: str
    """Simulated backend spec after ``simulated:``."""
    hours: float
    step_s: float = 0.0
    """Compute time of one step, s (0: no training steps, e.g. an idle notebook)."""
    wait_s: float = 0.0
    """Time each step waits for its batch, s."""
    batch: int = 32
    tokens_per_sample: int = 0
    flops_per_step: float | None = None
    dtype: str | None = None
    start_hours_ago: float = 6.0
    slurm_job: int | None = None
    """The Slurm job it ran in (the run's ``slurm`` link ``demo/ID``), on node ``host``."""
    host: str = ""


DEMO_RUNS: tuple[DemoRun, ...] = (
    DemoRun(
        name="llama-8b-sft",
        project="llm-finetune",
        team="nlp",
        user="ana",
        gpu="throttled@H100:8",
        hours=3.0,
        step_s=1.15,
        wait_s=0.02,
        batch=32,
        tokens_per_sample=2048,
        flops_per_step=6 * 8e9 * 32 * 2048,
        dtype="bf16",
        start_hours_ago=9.0,
        slurm_job=7001,
        host="gpu-01",
    ),
    DemoRun(
        name="resnet50-heavy-aug",
        project="vision-cls",
        team="vision",
        user="ben",
        gpu="input-bound@A100-80GB:4",
        hours=2.0,
        step_s=0.24,
        wait_s=0.16,
        batch=256,
        start_hours_ago=7.0,
        slurm_job=7002,
        host="gpu-02",
    ),
    DemoRun(
        name="notebook-jlee",
        project="scratch",
        team="research",
        user="jlee",
        gpu="idle@L4:1",
        hours=1.5,
        start_hours_ago=5.0,
        slurm_job=7003,
        host="gpu-05",
    ),
    DemoRun(
        name="bert-sweep-17",
        project="ranking",
        team="search",
        user="chen",
        gpu="small-batch@A10G:1",
        hours=1.0,
        step_s=0.02,
        wait_s=0.001,
        batch=8,
        tokens_per_sample=128,
        start_hours_ago=4.0,
        slurm_job=7004,
        host="gpu-06",
    ),
    DemoRun(
        name="vit-l-fp32",
        project="vision-cls",
        team="vision",
        user="dana",
        gpu="low-efficiency@H200:2",
        hours=1.0,
        step_s=0.9,
        wait_s=0.01,
        batch=128,
        flops_per_step=3 * 61.6e9 * 128,
        dtype="fp32",
        start_hours_ago=3.0,
        slurm_job=7005,
        host="gpu-03",
    ),
)


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def simulate(
    run: DemoRun,
    *,
    store: str | bool,
    now: datetime,
    sample_every_s: float = 10.0,
    config: str | None = None,
) -> RunRecord:
    """Run one demo session in simulated time, starting ``run.start_hours_ago`` before
    ``now``, and return its final record."""
    clock = _Clock((now - timedelta(hours=run.start_hours_ago)).timestamp())
    end = clock.t + run.hours * S_PER_HOUR
    session = track(
        name=run.name,
        project=run.project,
        team=run.team,
        user=run.user,
        tags=("demo",),
        backend=f"simulated:{run.gpu}",
        store=store,
        clock=clock,
        threaded=False,
        run_id=f"demo-{run.name}-{now:%Y%m%d}",  # a second `gpu-kpi demo` replaces, not adds
        interval_s=sample_every_s,
        log_every_s=1e12,
        flops_per_step=run.flops_per_step,
        dtype=run.dtype,
        log_to_python=False,
        print_summary=False,
        config=config,
        links={"slurm": f"{DEMO_CLUSTER}/{run.slurm_job}"} if run.slurm_job else None,
    )
    session.start()
    sampler = session.sampler
    next_sample = clock.t + sample_every_s

    def advance(dt: float, then: Callable[[], None] | None = None) -> None:
        nonlocal next_sample
        target = clock.t + dt
        while sampler is not None and next_sample <= target:
            clock.t = next_sample
            sampler.sample()
            next_sample += sample_every_s
        clock.t = target
        if then:
            then()

    if run.step_s > 0:
        tokens = run.batch * run.tokens_per_sample or None
        while clock.t + run.wait_s + run.step_s <= end:
            advance(run.wait_s, session.data_ready)
            advance(run.step_s)
            session.step(samples=run.batch, tokens=tokens)
    advance(max(end - clock.t, 0.0))
    record = session.finish("finished")
    assert record is not None
    return record


DEMO_CLUSTER = "demo"
SETUP = timedelta(minutes=12)
"""Each demo job holds its GPUs this long before its run starts tracking (the environment
setting up: allocated, no samples)."""
DEMO_NODES = {
    "gpu-01": (8, "H100"),
    "gpu-02": (4, "A100-80GB"),
    "gpu-03": (2, "H200"),
    "gpu-04": (4, "H100"),
    "gpu-05": (1, "L4"),
    "gpu-06": (1, "A10G"),
}
"""The demo cluster's nodes: each demo run's job on one, and an untracked debugging job holding
gpu-04 with nothing measuring it."""


def demo_jobs(now: datetime, monday: datetime) -> tuple[list[Any], list[Any]]:
    """The demo week's Slurm jobs (one per demo run, its GPUs from the run's spec, held from
    :data:`SETUP` before the run; and ``interactive-debug``, 4 H100 for 5 hours, untracked) and
    the demo cluster's nodes over the week (:data:`DEMO_NODES`).

    Args:
        now: The demo sessions' ``now`` (their starts count back from it).
        monday: The demo week's Monday (UTC).
    """
    from reports.rows import Allocation, Capacity
    from tracker.gpu.simulated import SimulatedBackend

    def job(
        job_id: int,
        name: str,
        *,
        team: str,
        user: str,
        host: str,
        gpus: int,
        start: datetime,
        end: datetime,
        **kw: str,
    ) -> Allocation:
        values = {"partition": "gpu", "state": "COMPLETED", **kw}
        return Allocation(
            source="slurm",
            cluster=DEMO_CLUSTER,
            job_id=str(job_id),
            shown_id=str(job_id),
            name=name,
            user=user,
            account=team,
            team=team,
            start_at=start,
            end_at=end,
            seen_at=end,
            gpus=gpus,
            gpu_model=DEMO_NODES[host][1],
            hosts=(host,),
            **values,
        )

    jobs = []
    for r in DEMO_RUNS:
        if r.slurm_job is not None:
            start = now - timedelta(hours=r.start_hours_ago)
            gpus = SimulatedBackend.from_spec(r.gpu).count
            end = start + timedelta(hours=r.hours)
            jobs.append(
                job(
                    r.slurm_job,
                    r.name,
                    team=r.team,
                    user=r.user,
                    host=r.host,
                    gpus=gpus,
                    start=start - SETUP,
                    end=end,
                )
            )
    debug = now - timedelta(hours=8)
    jobs.append(
        job(
            7006,
            "interactive-debug",
            team="nlp",
            user="ana",
            host="gpu-04",
            gpus=4,
            start=debug,
            end=debug + timedelta(hours=5),
            partition="interactive",
            state="TIMEOUT",
        )
    )
    nodes = [
        Capacity(
            source="slurm",
            cluster=DEMO_CLUSTER,
            node=node,
            start_at=monday,
            end_at=monday + timedelta(days=7),
            gpus=gpus,
            gpu_model=model,
        )
        for node, (gpus, model) in DEMO_NODES.items()
    ]
    return jobs, nodes


@dataclass(frozen=True, kw_only=True)
class FleetJob:
    """A recurring job of the simulated fleet's history: one run a week."""

    name: str
    project: str
    team: str
    user: str
    gpu: str
    gpus: int
    hours: float
    util_pct: float
    verdict: str
    mem_peak_gib: float
    fixed_weeks_ago: int | None = None
    """From this many weeks ago on, the bottleneck was fixed: utilization 88%, healthy."""
    fix: str = ""
    """What the fix was: the demo marks it (``gpu-kpi mark``) on the Monday it took effect."""
    samples_per_busy_gpu_hour: float | None = None
    """Samples a GPU-hour at full utilization: its runs count samples (their throughput follows
    their utilization), so the report prices its work per 1k samples."""


FLEET: tuple[FleetJob, ...] = (
    FleetJob(
        name="llm-pretrain",
        project="llm-pretrain",
        team="nlp",
        user="ana",
        gpu="H100",
        gpus=8,
        hours=40,
        util_pct=90,
        verdict="healthy",
        mem_peak_gib=71,
    ),
    FleetJob(
        name="resnet-sweep",
        project="vision-cls",
        team="vision",
        user="ben",
        gpu="A100-80GB",
        gpus=4,
        hours=20,
        util_pct=58,
        verdict="input-bound",
        mem_peak_gib=38,
        fixed_weeks_ago=3,
        fix="loader: 8 workers, pin_memory",
        samples_per_busy_gpu_hour=4_500_000,  # ~1,250 images/s on an A100
    ),
    FleetJob(
        name="jlee-notebook",
        project="scratch",
        team="research",
        user="jlee",
        gpu="L4",
        gpus=1,
        hours=30,
        util_pct=2,
        verdict="idle",
        mem_peak_gib=6,
    ),
    FleetJob(
        name="ranker-finetune",
        project="ranking",
        team="search",
        user="chen",
        gpu="A10G",
        gpus=1,
        hours=15,
        util_pct=33,
        verdict="small-batch",
        mem_peak_gib=3,
    ),
    FleetJob(
        name="vit-l-train",
        project="vision-cls",
        team="vision",
        user="dana",
        gpu="H200",
        gpus=2,
        hours=10,
        util_pct=95,
        verdict="low-efficiency",
        mem_peak_gib=90,
    ),
    FleetJob(
        name="detector-eval",
        project="detection",
        team="vision",
        user="ben",
        gpu="H100",
        gpus=1,
        hours=6,
        util_pct=24,
        verdict="small-batch",
        mem_peak_gib=11,
    ),
)


def fleet_history(first_week: datetime, weeks: int, *, seed: int = 48) -> list[RunRecord]:
    """Summary-only runs of :data:`FLEET`, one per job and week, for ``weeks`` weeks starting
    Monday ``first_week``; figures vary a little from week to week (seeded)."""
    from tracker.diagnosis import ADVICE
    from tracker.prices import PriceTable

    rng = random.Random(seed)
    prices = PriceTable()
    out = []
    for w in range(weeks):
        monday = first_week + timedelta(days=7 * w)
        weeks_ago = weeks - w
        for job in FLEET:
            fixed = job.fixed_weeks_ago is not None and weeks_ago <= job.fixed_weeks_ago
            util = 88.0 if fixed else job.util_pct
            util = min(100.0, max(0.0, util + rng.uniform(-3, 3)))
            verdict = "healthy" if fixed else job.verdict
            hours = job.hours * rng.uniform(0.8, 1.2)
            start = monday + timedelta(days=rng.randrange(0, 5), hours=rng.randrange(0, 12))
            price = prices.get(job.gpu).usd_per_gpu_hour
            gpu_hours = job.gpus * hours
            cost = gpu_hours * price
            samples = (
                round(gpu_hours * util / 100 * job.samples_per_busy_gpu_hour)
                if job.samples_per_busy_gpu_hour
                else None
            )
            out.append(
                RunRecord(
                    id=f"fleet-{job.name}-{monday:%Y%m%d}",
                    name=f"{job.name}-{monday:%m%d}",
                    project=job.project,
                    team=job.team,
                    user=job.user,
                    host="gpu-node",
                    tags=("demo-history",),
                    framework="lightning",
                    started_at=start,
                    ended_at=start + timedelta(hours=hours),
                    status="finished",
                    gpu_source="simulated",
                    gpu_model=job.gpu,
                    gpu_count=job.gpus,
                    price_per_gpu_hour=price,
                    price_source="demo",
                    gpu_hours=gpu_hours,
                    util_pct=util,
                    samples=samples,
                    samples_per_s=samples / (hours * WHOLE_S_PER_HOUR) if samples else None,
                    mem_peak_gib=job.mem_peak_gib,
                    energy_kwh=gpu_hours * BOARD_W[job.gpu] * (0.2 + 0.8 * util / 100) / 1000,
                    mem_total_gib=float(prices.get(job.gpu).mem_gib or 0) or None,
                    cost_usd=cost,
                    idle_usd=cost if verdict == "idle" else 0.0,
                    waste_usd=waste_usd(
                        cost,
                        util,
                        Thresholds().target_util_pct,
                        idle_share=1.0 if verdict == "idle" else 0.0,
                    ),
                    verdict=verdict,
                    advice=ADVICE[verdict] or None,
                )
            )
    return out


def run_demo(
    store: str,
    *,
    now: datetime | None = None,
    history_weeks: int = 11,
    config: str | None = None,
) -> tuple[list[RunRecord], datetime]:
    """The demo (``gpu-kpi demo``): real sessions on simulated GPUs in the last complete ISO
    week (UTC), and a fleet's runs in that week and the weeks before it, into ``store``.

    Args:
        store: The run store's URL.
        now: The current time (timezone-aware); None for the clock's.
        history_weeks: How many weeks of fleet history before the demo's week.
        config: The demo's config file (:func:`demo_config`) its sessions read.

    Returns:
        The sessions' run records, and the demo week's Monday (UTC).
    """
    from reports.weeks import last_complete_week, week_bounds
    from tracker.store import RunStore

    now = now or datetime.now(UTC)
    monday, _ = week_bounds(*last_complete_week(now))
    from reports.data.marks import add_mark

    with RunStore(store) as s:
        for r in fleet_history(monday - timedelta(days=7 * history_weeks), history_weeks + 1):
            s.upsert_run(r)
        for job in FLEET:  # a fix its team marked: the report's before and after
            if job.fix and job.fixed_weeks_ago is not None:
                at = monday - timedelta(days=7 * (job.fixed_weeks_ago - 1))
                add_mark(s, job.name, job.fix, at=at, now=at + timedelta(hours=9))
    friday_evening = monday + timedelta(days=4, hours=20)
    runs = [simulate(r, store=store, now=friday_evening, config=config) for r in DEMO_RUNS]
    from reports.data.allocations import write_allocations

    jobs, nodes = demo_jobs(friday_evening, monday)
    with RunStore(store) as s:
        write_allocations(s, jobs, nodes)
    return runs, monday
