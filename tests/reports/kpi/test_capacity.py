"""Nodes' capacity: spans merged across imports, and capacity → allocated → busy → useful per
scheduler with the unallocated hours of owned GPUs in dollars, worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from allocation_oracle import job as allocation

from reports.data.allocations import Capacity, merge_spans
from reports.kpi.allocations import JobLine, allocation_week, capacity_lines
from reports.kpi.frames import SampleFrameBuilder
from tracker.cost import Thresholds
from tracker.owned import OwnedGpu

TEN = datetime(2026, 11, 24, 10, tzinfo=UTC)
H = timedelta(hours=1)


def span(start: datetime, end: datetime, gpus: int, node: str = "n1") -> Capacity:
    return Capacity(
        source="slurm",
        cluster="c",
        node=node,
        start_at=start,
        end_at=end,
        gpus=gpus,
        gpu_model="H100",
    )


def shown(spans: list[Capacity]) -> list[tuple[datetime, datetime, int]]:
    return [(c.start_at, c.end_at, c.gpus) for c in spans]


def test_spans_meeting_with_the_same_gpus_are_one() -> None:
    late = TEN + 2 * H + timedelta(minutes=2)  # within the 3-minute gap
    assert shown(merge_spans([span(TEN, TEN + 2 * H, 4)], [span(late, TEN + 4 * H, 4)])) == [
        (TEN, TEN + 4 * H, 4)
    ]
    # the same range imported again: nothing twice
    again = merge_spans([span(TEN, TEN + 2 * H, 4)], [span(TEN, TEN + 2 * H, 4)])
    assert shown(again) == [(TEN, TEN + 2 * H, 4)]


def test_a_new_span_wins_in_its_time() -> None:
    """A node grew from 4 to 8 GPUs at 11:00: the new import's 8 from 11:00 on; 4 before."""
    got = merge_spans([span(TEN, TEN + 2 * H, 4)], [span(TEN + H, TEN + 3 * H, 8)])
    assert shown(got) == [(TEN, TEN + H, 4), (TEN + H, TEN + 3 * H, 8)]
    inside = merge_spans([span(TEN, TEN + 3 * H, 4)], [span(TEN + H, TEN + 2 * H, 0)])
    assert shown(inside) == [
        (TEN, TEN + H, 4),
        (TEN + H, TEN + 2 * H, 0),
        (TEN + 2 * H, TEN + 3 * H, 4),
    ]


def job(job_id: str, gpus: int, hours: float, sampled: float, idle: float, util: float) -> JobLine:
    return JobLine(
        source="slurm",
        cluster="c",
        job_id=job_id,
        shown_id=job_id,
        name="j",
        user="u",
        account="a",
        team="a",
        partition="gpu",
        state="COMPLETED",
        start=TEN,
        end=TEN + hours * H,
        gpus=gpus,
        gpu_model="H100",
        matched="node",
        runs=(),
        allocated_gpu_hours=gpus * hours,
        sampled_gpu_hours=sampled,
        idle_gpu_hours=idle,
        no_samples_gpu_hours=gpus * hours - sampled,
        known_gpu_hours=sampled,
        util_pct=util,
        price_per_gpu_hour=3.85,
    )


def test_capacity_allocated_busy_and_owned_gpus_unallocated_by_hand() -> None:
    """n1 (8 H100, owned) and n2 (4, owned) for the 2 h span; job 1 holds 2 GPUs of n1 for 1 h,
    all sampled at 60%, none idle; job 2 holds 4 GPUs on n1 and n2 (2 each) for 2 h, 6 GPU-h
    sampled at 10%, 4 of them idle; job 3 is on a node with no capacity known (left out)."""
    owned = {
        "H100": OwnedGpu(model="H100", purchase_usd=30_000, life_years=4, power_w=0, usd_per_kwh=0)
    }
    rate = 30_000 / (4 * 365.25 * 24)  # amortized, no power or overhead
    spans = [span(TEN, TEN + 2 * H, 8, "n1"), span(TEN, TEN + 2 * H, 4, "n2.lab")]
    jobs = [
        job("1", 2, 1.0, 2.0, 0.0, 60.0),
        job("2", 4, 2.0, 6.0, 4.0, 10.0),
        job("3", 1, 2.0, 0.0, 0.0, 0.0),
    ]
    hosts = {
        ("slurm", "c", "1"): ("n1",),
        ("slurm", "c", "2"): ("n1", "n2"),
        ("slurm", "c", "3"): ("n9",),
    }
    (line,) = capacity_lines(spans, jobs, hosts, since=TEN, until=TEN + 2 * H, owned=owned)
    assert (line.nodes, line.gpus) == (2, 12)
    assert line.capacity_gpu_hours == pytest.approx(24.0)
    assert line.allocated_gpu_hours == pytest.approx(2.0 + 8.0)  # job 3 is on no known node
    assert line.allocation_pct == pytest.approx(1000 / 24)
    assert line.sampled_gpu_hours == pytest.approx(8.0)
    assert line.busy_gpu_hours == pytest.approx(2.0 + 2.0)
    assert line.util_pct == pytest.approx((60 * 2 + 10 * 6) / 8)
    assert line.unallocated_gpu_hours == pytest.approx(14.0)  # n1 16 - 6, n2 8 - 4
    assert line.unallocated_owned_usd == pytest.approx(14.0 * rate)
    # without owned GPUs, the hours only
    (rented,) = capacity_lines(spans, jobs, hosts, since=TEN, until=TEN + 2 * H)
    assert rented.unallocated_owned_usd is None
    assert rented.unallocated_gpu_hours == pytest.approx(14.0)
    assert rented.sm_active_pct is None  # no job had SM samples: no "useful" line


def test_useful_is_sm_activity_of_the_allocated_time_that_has_it() -> None:
    """Job 101 (A) holds 2 GPUs of n1 for 1 h: its run's GPU 0 at 90% utilization and 40% SM active,
    GPU 1 at 80% with no SM value. Job 102 (B) holds 2 GPUs of n1 for 2 h: its run's one GPU at 50%
    and 20% SM active. Useful: SM active over the 3 GPU-h that have it, (40 × 1 + 20 × 2) / 3;
    utilization over the 4 GPU-h measured, (90 + 80 + 50 × 2) / 4, a figure of its own."""
    jobs = [
        allocation("101", 2, TEN, TEN + H, ("n1",)),
        allocation("102", 2, TEN, TEN + 2 * H, ("n1",)),
    ]
    runs = [
        {"id": "ra", "host": "n1", "links": {"slurm": "c/101"}, "gpu_model": "H100"},
        {"id": "rb", "host": "n1", "links": {"slurm": "c/102"}, "gpu_model": "H100"},
    ]
    rows = [
        ("ra", "g0", 60, 90.0, 40.0),
        ("ra", "g1", 60, 80.0, None),
        ("rb", "g0", 120, 50.0, 20.0),
    ]
    frames = SampleFrameBuilder(
        ("run_id", "gpu", "minute", "covered_s", "util_pct", "sm_active_pct")
    )
    frames(
        [
            (r, g, (TEN + timedelta(minutes=i)).strftime("%Y-%m-%d %H:%M:%S"), 60.0, u, sm)
            for r, g, n, u, sm in rows
            for i in range(n)
        ]
    )
    week = allocation_week(
        jobs,
        runs,
        frames.frame(),
        value="util_pct",
        since=TEN,
        until=TEN + 2 * H,
        thresholds=Thresholds(),
    )
    a, b = sorted(week.jobs, key=lambda j: j.job_id)
    assert (a.sm_known_gpu_hours, a.sm_active_pct, a.util_pct) == (1.0, 40.0, 85.0)
    assert (b.sm_known_gpu_hours, b.sm_active_pct, b.sampled_gpu_hours) == (2.0, 20.0, 2.0)
    hosts = {("slurm", "c", j.job_id): ("n1",) for j in jobs}
    (line,) = capacity_lines(
        [span(TEN, TEN + 2 * H, 4)], week.jobs, hosts, since=TEN, until=TEN + 2 * H
    )
    assert line.sm_known_gpu_hours == pytest.approx(3.0)
    assert line.sm_active_pct == pytest.approx((40 * 1 + 20 * 2) / 3)
    assert line.util_pct == pytest.approx((90 + 80 + 50 * 2) / 4)
    assert line.allocated_gpu_hours == pytest.approx(6.0)
