"""Issue 11: a GPU the shipped table does not know is priced by the config, in the report."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fakes import run_record

from reports.build import compute
from reports.request import Request
from tracker.store import RunStore

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_b200_priced_in_the_config(tmp_path: object) -> None:
    """2 x B200 for 3 h, no price of its own: 6 GPU-h x $5.50 = $33.00 with [prices] B200 = 5.5;
    without it the 6 GPU-h are unpriced and the spend is 0."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(
            run_record(
                "b",
                datetime(2026, 11, 24, 9, tzinfo=UTC),
                3.0,
                gpus=2,
                model="NVIDIA B200",
                price=None,
                util=85.0,
            )
        )
    priced = compute(url, Request(week="2026-W48", tz=UTC, prices={"B200": 5.5}), now=NOW).kpis
    assert priced.headline.spend_usd == pytest.approx(33.0)
    assert priced.headline.unpriced_gpu_hours == 0.0
    unpriced = compute(url, Request(week="2026-W48", tz=UTC), now=NOW).kpis
    assert unpriced.headline.spend_usd == 0.0
    assert unpriced.headline.unpriced_gpu_hours == pytest.approx(6.0)
