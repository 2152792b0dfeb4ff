"""The runs read as columns (a week of a million runs makes no record per run) are exactly the
runs read one record at a time: the same frame, the same runs left out with the same reasons,
on SQLite and PostgreSQL, over good runs of every shape and the bad rows the report must name.
Only the rows that are not surely as the store writes them take the record path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from fakes import run_record

from reports import kpi as kpis
from reports.data.columns import run_columns
from reports.data.scans import SampleScans
from reports.gputime import usable_runs
from tracker.store import RunStore

W48 = datetime(2026, 11, 23, tzinfo=UTC)
SINCE, UNTIL = W48, W48 + timedelta(days=7)

GOOD = {
    "plain": {},
    "tagged": {"tags": ("nightly", "=formula"), "links": {"wandb": "https://wandb.ai/x/y"}},
    "unknowns": {"util": None, "price": None, "model": None},  # run_record's own keywords
    "counted": {"samples": 1_000_000, "tokens": 10**15, "mfu": 0.41, "verdict": "healthy"},
    "running": {"status": "running", "ended_at": None, "heartbeat_at": W48 + timedelta(days=2)},
}
"""Good runs of each shape (keyword arguments of ``run_record``)."""

BOTH = {
    "neg-hours": ("UPDATE runs SET gpu_hours = -3 WHERE id = :id", {}),
    "util-250": ("UPDATE runs SET util_pct = 250 WHERE id = :id", {}),
    "inf-price": ("UPDATE runs SET price_per_gpu_hour = :v WHERE id = :id", {"v": float("inf")}),
    "huge-hours": ("UPDATE runs SET gpu_hours = 1e300 WHERE id = :id", {}),
    "bad-tags": ("UPDATE runs SET tags = '{' WHERE id = :id", {}),
    "int-tags": ("UPDATE runs SET tags = '[1]' WHERE id = :id", {}),
    "list-links": ("UPDATE runs SET links = '[\"a\"]' WHERE id = :id", {}),
    "nested-tags": (
        "UPDATE runs SET tags = :v WHERE id = :id",
        {"v": "[" * 100_000 + "]" * 100_000},
    ),
}
"""Bad rows either database keeps, and how to make them."""

SQLITE_ONLY = {
    "text-util": ("UPDATE runs SET util_pct = 'abc' WHERE id = :id", {}),
    "bad-start": ("UPDATE runs SET started_at = '2026-11-26 garbage' WHERE id = :id", {}),
    "bytes-id": ("UPDATE runs SET id = X'6279746573' WHERE id = :id", {}),
    "bytes-name": ("UPDATE runs SET name = X'6e616d65' WHERE id = :id", {}),  # kept, decoded
    "not-utf8": ("UPDATE runs SET team = CAST(X'ff41' AS TEXT) WHERE id = :id", {}),  # kept
    "int-gpu-hours": ("UPDATE runs SET gpu_hours = 2 WHERE id = :id", {}),  # an integer: good
}
POSTGRES_ONLY = {"nan-util": ("UPDATE runs SET util_pct = 'NaN' WHERE id = :id", {})}

KEPT = {"bytes-name", "not-utf8", "int-gpu-hours"}
"""Changed rows the report still uses (through the record path, but for the integer)."""


def fill(url: str) -> dict[str, tuple[str, dict[str, Any]]]:
    sqlite = url.startswith("sqlite")
    bad = {**BOTH, **(SQLITE_ONLY if sqlite else POSTGRES_ONLY)}
    with RunStore(url) as store:
        shapes: dict[str, dict[str, Any]] = {**GOOD, **{rid: {} for rid in bad}}
        for i, (rid, shape) in enumerate(shapes.items()):
            kw = dict(shape)
            args = {k: kw.pop(k) for k in ("util", "price", "model") if k in kw}
            store.upsert_run(
                run_record(rid, W48 + timedelta(hours=i), 2, gpus=1 + i % 3, **args).replace(**kw)
            )
        with store.engine.begin() as conn:
            for rid, (statement, params) in bad.items():
                conn.execute(sa.text(statement), {"id": rid, **params})
    return bad


def by_records(scans: SampleScans) -> tuple[pd.DataFrame, list[kpis.ExcludedRun]]:
    """What the report read before: a record per run, then the checks, then a frame."""
    records, unreadable = scans.read_runs(since=SINCE, until=UNTIL)
    good, excluded = kpis.usable_runs(records)
    unread = [kpis.ExcludedRun(run_id=u.run_id, name=u.name, reason=u.reason) for u in unreadable]
    return kpis.runs_frame(good), unread + excluded


def test_the_columns_are_the_records(store_url: str) -> None:
    bad = fill(store_url)
    with RunStore(store_url) as store:
        scans = SampleScans(store)
        frame, excluded = usable_runs(scans, since=SINCE, until=UNTIL)
        expected, expected_excluded = by_records(scans)
        rows = scans.run_rows(since=SINCE, until=UNTIL)
        columns, read = run_columns(rows, nan=not store_url.startswith("sqlite"))
    pd.testing.assert_frame_equal(frame, expected)
    assert excluded == expected_excluded

    kept = KEPT & set(bad)
    # bytes-name's name is the bytes of "name", decoded
    assert sorted(frame["name"]) == sorted(
        [*GOOD, *(("name" if r == "bytes-name" else r) for r in kept)]
    )
    assert sorted(e.run_id for e in excluded) == sorted(
        ("bytes" if r == "bytes-id" else r) for r in set(bad) - kept
    )
    team = frame.loc[frame["id"] == "not-utf8", "team"]
    assert list(team) == (["\ufffdA"] if "not-utf8" in bad else [])
    tagged = frame.loc[frame["id"] == "tagged"].iloc[0]
    assert tagged["tags"] == ("nightly", "=formula")
    assert tagged["links"] == '{"wandb": "https://wandb.ai/x/y"}'  # the store's text
    assert frame["started_at"].dtype == "datetime64[us, UTC]"

    # which rows took the record path: only those not surely as the store writes them and
    # usable (bytes and bad values); the good runs and the integer hours went by columns
    sure = read & kpis.surely_usable(columns)
    by_columns = {text for text, s in zip(columns["id"], sure, strict=True) if s}
    assert by_columns == set(GOOD) | (kept & {"int-gpu-hours", "not-utf8"})


def test_what_is_surely_usable_column_by_column() -> None:
    """Each bad value of a number, and text that is no text, sends its row to the record
    path; unknowns (None, NaN in a float column: NULL) do not."""
    frame = kpis.runs_frame(
        [run_record(f"r{i}", W48, 1.0) for i in range(7)]
        + [run_record("unknown", W48, 1.0, util=None, price=None, model=None)]
    ).astype({"util_pct": object, "name": object, "gpu_hours": object})
    frame.loc[1, "util_pct"] = 100.5
    frame.loc[2, "util_pct"] = "50"
    frame.loc[3, "name"] = b"bytes"
    frame.loc[4, "gpu_hours"] = 10**400  # no float holds it
    frame.loc[5, "gpu_hours"] = -0.5
    frame.loc[6, "util_pct"] = np.nan  # unknown
    assert kpis.surely_usable(frame).tolist() == [
        True,
        False,
        False,
        False,
        False,
        False,
        True,
        True,
    ]
    assert [kpis.checks.run_problem(r) for r in [run_record("x", W48, 1.0, util=100.5)]] == [
        "util_pct out of 0–100"
    ]


@pytest.mark.parametrize("part", [1, 2, 3, 7])
def test_a_read_in_parts_is_the_read_whole(store_url: str, part: int, monkeypatch) -> None:
    """The runs come from the store ``part`` rows at a time (a million runs are never a
    million tuples at once): the same frame, in the same order, and the same runs left out,
    the rows of the record path among them wherever a part ends."""
    fill(store_url)
    with RunStore(store_url) as store:
        whole = usable_runs(SampleScans(store), since=SINCE, until=UNTIL)
        monkeypatch.setitem(SampleScans.run_row_parts.__kwdefaults__, "chunk_rows", part)
        parts = usable_runs(SampleScans(store), since=SINCE, until=UNTIL)
    pd.testing.assert_frame_equal(parts[0], whole[0])
    assert parts[1] == whole[1]
    assert len(whole[0]) >= len(GOOD) and whole[0]["started_at"].is_monotonic_increasing
