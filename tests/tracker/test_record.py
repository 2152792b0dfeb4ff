"""tracker.record: what a run record may carry (issue 10: never a non-finite or negative price
or cost, which would poison every weekly report that sums it)."""

from __future__ import annotations

from datetime import UTC, datetime

from tracker.record import RunRecord, checked_record

START = datetime(2026, 9, 21, 14, 14, tzinfo=UTC)


def test_a_good_record_passes_unchanged() -> None:
    r = RunRecord(
        id="r",
        name="r",
        started_at=START,
        gpu_count=8,
        nodes=2,
        gpu_hours=16.0,
        price_per_gpu_hour=3.85,
        cost_usd=61.6,
        waste_usd=0.0,
        samples=2**63 - 1,
        util_pct=92.0,
    )
    assert checked_record(r) == (r, [])
    assert checked_record(r)[0] is r


def test_numbers_that_are_not_finite_or_are_negative_become_unknown() -> None:
    r = RunRecord(
        id="r",
        name="r",
        started_at=START,
        price_per_gpu_hour=float("inf"),
        cost_usd=-1.0,
        waste_usd=float("nan"),
        idle_usd=float("-inf"),
        samples=2**63,
        tokens=-3,
        gpu_count=2**31,
        nodes="2",  # type: ignore[arg-type]
        gpu_hours=float("nan"),
        steps=True,
        mfu=0.4,
    )
    checked, bad = checked_record(r)
    assert bad == [
        "cost_usd",
        "gpu_count",
        "gpu_hours",
        "idle_usd",
        "nodes",
        "price_per_gpu_hour",
        "samples",
        "steps",
        "tokens",
        "waste_usd",
    ]
    # the optional ones are unknown (None); the others take their defaults
    assert (
        checked.price_per_gpu_hour,
        checked.cost_usd,
        checked.waste_usd,
        checked.idle_usd,
        checked.samples,
        checked.tokens,
    ) == (None,) * 6
    assert (checked.gpu_count, checked.nodes, checked.gpu_hours, checked.steps) == (0, 1, 0.0, 0)
    assert checked.mfu == 0.4 and checked.id == "r"
