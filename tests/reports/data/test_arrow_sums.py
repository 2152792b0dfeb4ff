"""The hourly rollups of a SQLite store read by ADBC's driver and summed in Python give the
frame SQLite's ``GROUP BY`` gives, float for float: the same totals per run, GPU and week,
added in the same order, the same damaged rows counted. A figure the driver cannot read (text
in a number column) leaves the sums to SQLite."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from fakes import minutes, run_record

from reports.data import scans as scans_module
from reports.data.scans import SampleScans
from tracker.store import RunStore

pytest.importorskip("adbc_driver_sqlite")

W48 = datetime(2026, 11, 23, tzinfo=UTC)  # Monday of ISO week 2026-W48
HOUR = int(W48.timestamp()) // 3600
SPAN = {
    "value": "util_pct",
    "hour_edges": [HOUR],
    "since_hour": HOUR - 168,
    "until_hour": HOUR + 168,
}
KEY = ["run_id", "gpu", "bucket"]


def uneven(minute: int) -> float:
    """Run c's utilization: values whose six hourly sums SQLite adds one by one to another
    total than a compensated (Kahan) sum."""
    return 20.0 + ((minute * 11 + minute // 60) % 17) * 0.37


def fill(path: Path) -> str:
    """Run a: 2 GPUs, 90 minutes from Sunday 23:00 of W47 into W48 (60 of them in W47's last
    hour), 30% on GPU-0 and 80% on GPU-1; run b: 1 GPU, 30 minutes on Tuesday, 2% (idle);
    run c: 1 GPU, 6 hours on Wednesday, :func:`uneven`."""
    url = f"sqlite:///{path}"
    a0, b0 = W48 - timedelta(hours=1), W48 + timedelta(days=1, hours=3)
    c0 = W48 + timedelta(days=2)
    with RunStore(url) as s:
        s.upsert_run(run_record("a", a0, 1.5, gpus=2))
        s.upsert_run(run_record("b", b0, 0.5))
        s.upsert_run(run_record("c", c0, 6))
        rows = [
            *minutes("a", a0, 90, util=30.0, gpu="GPU-0"),
            *minutes("a", a0, 90, util=80.0, gpu="GPU-1"),
            *minutes("b", b0, 30, util=2.0),
            *(
                dataclasses.replace(m, util_pct=uneven(i))
                for i, m in enumerate(minutes("c", c0, 360))
            ),
        ]
        s.upsert_samples(rows)
    return url


def sql(url: str, statement: str, **params: Any) -> None:
    with sa.create_engine(url).begin() as conn:
        conn.execute(sa.text(statement), params)


def totals(url: str, monkeypatch: pytest.MonkeyPatch, *, child: bool) -> tuple[pd.DataFrame, bool]:
    """The span's totals summed in the driver's process (``child``) or by SQLite, and whether
    SQLite summed them."""
    monkeypatch.setattr(scans_module, "ARROW_FROM_RUNS", 0 if child else 10**9)
    by_sql = scans_module.rollup_totals_frame
    summed_by_sqlite: list[bool] = []

    def spy(*args: Any, **kw: Any) -> Any:
        summed_by_sqlite.append(True)
        return by_sql(*args, **kw)

    monkeypatch.setattr(scans_module, "rollup_totals_frame", spy)
    with RunStore(url) as store:
        frame = SampleScans(store).rollup_totals_frame(**SPAN)
    return frame.sort_values(KEY, ignore_index=True), any(summed_by_sqlite)


def test_the_sums_of_the_driver_s_rows_are_sqlite_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run a's GPU-1 in W47 (bucket 0): 60 minutes, 3,600 s covered, Σ value × s = 80 × 3,600;
    in W48 (bucket 1): 30 minutes. Run b's 30 idle minutes of 2% are idle seconds."""
    url = fill(tmp_path / "runs.db")
    ours, by_sqlite = totals(url, monkeypatch, child=True)
    theirs, _ = totals(url, monkeypatch, child=False)
    assert not by_sqlite
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    a1 = ours.set_index(KEY).loc[("a", "GPU-1")]
    assert a1["minutes"].tolist() == [60, 30]
    assert a1["covered_s"].tolist() == [3600.0, 1800.0]
    assert a1["value_s"].tolist() == [80 * 3600.0, 80 * 1800.0]
    b = ours.set_index(KEY).loc[("b", "GPU-0", 1)]
    assert (b["idle_s"], b["idle_value_s"], b["damaged"]) == (1800.0, 2 * 1800.0, 0)
    # run c's six hours added one after another, as SQLite adds them: not compensated
    with sa.create_engine(url).connect() as conn:
        hours = [
            r[0]
            for r in conn.execute(
                sa.text("SELECT util_s FROM rollups WHERE run_id = 'c' ORDER BY hour")
            )
        ]
    one_by_one = 0.0
    for h in hours:
        one_by_one += h
    kahan = pd.DataFrame({"g": 0, "v": hours}).groupby("g")["v"].sum().iloc[0]
    assert len(hours) == 6 and kahan != one_by_one  # pandas' grouped sum compensates
    assert ours.set_index(KEY).loc[("c", "GPU-0", 1), "value_s"] == one_by_one


@pytest.mark.parametrize(
    ("value", "read_by_driver"),
    [(float("inf"), True), (-5.0, True), ("abc", False)],
    ids=["inf", "negative", "text"],
)
def test_damaged_rollup_rows_are_counted_as_sqlite_counts_them(
    value: object, read_by_driver: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run a's GPU-0 rollup of W47's last hour gets a covered_s that is no number in range:
    that group has no figure and one damaged row, its W48 hour is summed as before. Text in a
    number column is not the driver's to read (it reads the column as text): SQLite sums that
    store."""
    url = fill(tmp_path / "runs.db")
    sql(
        url,
        "UPDATE rollups SET covered_s = :v WHERE run_id = 'a' AND gpu = 'GPU-0' AND hour = :h",
        v=value,
        h=HOUR - 1,
    )
    ours, by_sqlite = totals(url, monkeypatch, child=True)
    theirs, _ = totals(url, monkeypatch, child=False)
    assert by_sqlite != read_by_driver
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True, check_dtype=False)
    a0 = ours.set_index(KEY).loc[("a", "GPU-0")]
    assert a0["damaged"].tolist() == [1, 0]
    assert a0["minutes"].tolist() == [0, 30]
    assert a0["covered_s"].tolist() == [0.0, 1800.0]
