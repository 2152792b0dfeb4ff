"""``gpu-kpi demo``: real tracking sessions on simulated GPUs, in simulated time, into a store.

Each demo run drives :class:`tracker.session.Session` exactly as a training loop would — steps,
data waits, the sampler, the store writer — but with an injected clock, so three hours of
training take a fraction of a second and the figures are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tracker.record import RunRecord
from tracker.session import Session


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


DEMO_RUNS: tuple[DemoRun, ...] = (
    DemoRun(name="llama-8b-sft", project="llm-finetune", team="nlp", user="ana",
            gpu="healthy@H100:8", hours=3.0, step_s=1.15, wait_s=0.02, batch=32,
            tokens_per_sample=2048, flops_per_step=6 * 8e9 * 32 * 2048, dtype="bf16",
            start_hours_ago=9.0),
    DemoRun(name="resnet50-heavy-aug", project="vision-cls", team="vision", user="ben",
            gpu="input-bound@A100-80GB:4", hours=2.0, step_s=0.24, wait_s=0.16, batch=256,
            start_hours_ago=7.0),
    DemoRun(name="notebook-jlee", project="scratch", team="research", user="jlee",
            gpu="idle@L4:1", hours=1.5, start_hours_ago=5.0),
    DemoRun(name="bert-sweep-17", project="ranking", team="search", user="chen",
            gpu="small-batch@A10G:1", hours=1.0, step_s=0.02, wait_s=0.001, batch=8,
            tokens_per_sample=128, start_hours_ago=4.0),
    DemoRun(name="vit-l-fp32", project="vision-cls", team="vision", user="dana",
            gpu="low-efficiency@H200:2", hours=1.0, step_s=0.9, wait_s=0.01, batch=128,
            flops_per_step=3 * 61.6e9 * 128, dtype="fp32", start_hours_ago=3.0),
)


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def simulate(run: DemoRun, *, store: str | bool, now: datetime,
             sample_every_s: float = 10.0) -> RunRecord:
    """Run one demo session in simulated time and return its final record."""
    clock = _Clock((now - timedelta(hours=run.start_hours_ago)).timestamp())
    end = clock.t + run.hours * 3600.0
    session = Session(
        name=run.name, project=run.project, team=run.team, user=run.user, tags=("demo",),
        backend=f"simulated:{run.gpu}", store=store, clock=clock, threaded=False,
        interval_s=sample_every_s, log_every_s=1e12, flops_per_step=run.flops_per_step,
        dtype=run.dtype, log_to_python=False)
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


def run_demo(store: str, *, now: datetime | None = None) -> list[RunRecord]:
    now = now or datetime.now(UTC)
    return [simulate(r, store=store, now=now) for r in DEMO_RUNS]
