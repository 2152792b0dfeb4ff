"""Multi-rank runs: figures combined by hand, and sessions on threads with a real barrier
standing in for the all-gather."""

from __future__ import annotations

import math
import threading

import pytest
from fakes import T0, ListSink

from tracker import ranks
from tracker.session import Session, track
from tracker.store import RunStore


def test_combine_metrics_by_hand() -> None:
    r0 = {
        "gpu/util_pct": 60.0,
        "gpu/power_w": 500.0,
        "gpu/temp_c": 70.0,
        "perf/step_time_ms": 100.0,
        "perf/samples_per_s": 320.0,
        "perf/mfu": 0.2,
        "cost/usd": 1.0,
        "gpu/co2e_kg": 0.25,
        "_gpus": 1.0,
        "_samples": 1000.0,
        "_tokens": 0.0,
    }
    r1 = {
        "gpu/util_pct": 90.0,
        "gpu/power_w": 600.0,
        "gpu/temp_c": 75.0,
        "perf/step_time_ms": 140.0,
        "perf/samples_per_s": 300.0,
        "perf/mfu": 0.35,
        "cost/usd": 3.0,
        "gpu/co2e_kg": 0.5,
        "_gpus": 3.0,
        "_samples": 3000.0,
        "_tokens": 0.0,
    }
    m = ranks.combine_metrics([r0, r1])
    assert m["gpu/util_pct"] == pytest.approx((60 * 1 + 90 * 3) / 4)  # GPU-weighted
    assert m["gpu/power_w"] == 1100.0 and m["gpu/temp_c"] == 75.0
    assert m["gpu/co2e_kg"] == 0.75  # each rank's at its own host's intensity, summed
    assert m["perf/samples_per_s"] == 620.0
    assert m["perf/mfu"] == pytest.approx((0.2 + 0.35 * 3) / 4)
    assert m["perf/step_time_ms"] == 120.0 and m["perf/step_time_ms_max"] == 140.0
    assert m["perf/slowest_rank"] == 1.0
    assert m["perf/rank_spread_pct"] == pytest.approx(100 * 40 / 120)
    assert (m["gpu/util_pct_min"], m["gpu/util_pct_max"]) == (60.0, 90.0)
    assert m["cost/usd_per_1k_samples"] == pytest.approx(1000 * 4.0 / 4000)
    assert "cost/usd_per_1m_tokens" not in m


def test_vectors_round_trip_with_unknowns() -> None:
    v = ranks.to_vector({"a": 1.5, "b": None}, ("a", "b", "c"))
    assert v[0] == 1.5 and math.isnan(v[1]) and math.isnan(v[2])
    assert ranks.from_vector(v, ("a", "b", "c")) == {"a": 1.5, "b": None, "c": None}


class Barrier:
    """An all-gather between threads, as torch.distributed would do between processes."""

    def __init__(self, n: int) -> None:
        self.slots: list[list[float]] = [[] for _ in range(n)]
        self.barrier = threading.Barrier(n)
        self.calls = 0

    def gather_for(self, rank: int):  # type: ignore[no-untyped-def]
        def gather(vector: list[float]) -> list[list[float]]:
            self.slots[rank] = list(vector)
            if self.barrier.wait() == 0:
                self.calls += 1
            out = [list(v) for v in self.slots]
            self.barrier.wait()
            return out

        return gather


def test_two_ranks_count_every_gpu(tmp_path: object) -> None:
    """Rank 0: 1 GPU input-bound (60%), rank 1: 2 GPUs healthy (92%), 1 hour each on H100 at
    $3.85. The run: 3 GPUs, 3 GPU-h, $11.55, utilization (60 + 2 x 92) / 3 = 81.33%, waste
    3.85 x (1 - 60/85) = $1.1324 (the healthy GPUs waste nothing)."""
    url = f"sqlite:///{tmp_path}/runs.db"
    comm = Barrier(2)
    sinks = [ListSink(), ListSink()]
    sessions: list[Session] = []
    errors: list[BaseException] = []

    def rank(r: int, profile: str) -> None:
        try:
            clock = [T0]
            s = track(
                name="ddp",
                run_id="shared-run-id",
                backend=f"simulated:{profile}",
                store=url,
                clock=lambda: clock[0],
                threaded=False,
                warmup_steps=0,
                sinks=[sinks[r]],
                log_to_python=False,
                rank=r,
                world_size=2,
                nodes=2,
                gather=comm.gather_for(r),
            )
            sessions.append(s)
            s.start()
            for step in range(1, 3601):
                clock[0] += 1.0
                s.step(samples=8)
                s.sampler.sample()  # type: ignore[union-attr]
                if step % 600 == 0:
                    s.log_now(step=step)
            s.finish()
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=rank, args=(0, "input-bound@H100:1")),
        threading.Thread(target=rank, args=(1, "healthy@H100:2")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert comm.calls == 6 + 1  # six log steps and the end
    assert sinks[1].logged == [] and sinks[1].summaries == []  # rank 1 talks to no sink
    metrics, step = sinks[0].logged[-1]
    assert step == 3600
    assert metrics["gpu/util_pct"] == pytest.approx((60 + 2 * 92) / 3)
    assert (metrics["gpu/util_pct_min"], metrics["gpu/util_pct_max"]) == (
        pytest.approx(60.0),
        pytest.approx(92.0),
    )
    assert metrics["perf/samples_per_s"] == pytest.approx(16.0)
    # every rank's energy at the default 480 g/kWh: (70 + 630 × 60%) + 2 × (70 + 630 × 92%) W
    assert metrics["gpu/co2e_kg"] == pytest.approx(metrics["gpu/energy_kwh"] * 0.48)
    assert metrics["gpu/energy_kwh"] == pytest.approx((448 + 2 * 649.6) / 1000)  # 1 hour
    (record,) = sinks[0].summaries
    assert (record.gpu_count, record.nodes) == (3, 2)
    assert record.gpu_hours == pytest.approx(3.0)
    assert record.cost_usd == pytest.approx(3 * 3.85)
    assert record.util_pct == pytest.approx((60 + 2 * 92) / 3)
    assert record.waste_usd == pytest.approx(3.85 * (1 - 60 / 85))
    assert record.samples == 2 * 3600 * 8
    with RunStore(url) as store:
        stored = store.get_run("shared-run-id")
        rows = store.samples(run_ids=["shared-run-id"])
    assert stored == record
    # every GPU of every rank wrote its minutes under the one run id: 3 GPUs x 60 minutes
    assert len({r.gpu for r in rows}) == 3 and len(rows) == 180


def test_throttled_time_adds_up_over_ranks_and_one_sampled_rank_makes_it_sampled() -> None:
    from tracker.ranks import combine_records

    base = {"gpu_count": 1.0, "gpu_hours": 1.0}
    both = combine_records(
        [
            {**base, "throttled_gpu_s": 600.0, "throttle_sampled_s": 0.0},
            {**base, "throttled_gpu_s": 30.0, "throttle_sampled_s": 2.0},
            {**base},  # a rank that measured none: not 0
        ]
    )
    assert both["throttled_gpu_s"] == 630.0 and both["throttle_sampled_s"] == 2.0
    none = combine_records([base, base])
    assert none["throttled_gpu_s"] is None and none["throttle_sampled_s"] is None
