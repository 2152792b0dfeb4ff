"""The reports' fleet-scale reads of the run store (:class:`reports.data.scans.SampleScans`),
on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fakes import minutes, run_record

from reports.data.scans import SampleScans
from tracker.record import MinuteSample
from tracker.store import RunStore

T0 = datetime(2024, 5, 6, 9, 0, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)


def sample(run_id: str, minute: int, gpu: str = "GPU-a", **changes: object) -> MinuteSample:
    row = MinuteSample(
        run_id=run_id, minute=T0 + timedelta(minutes=minute), gpu=gpu, util_pct=50.0 + minute
    )
    return dataclasses.replace(row, **changes)


@pytest.fixture
def store(store_url: str) -> Iterator[RunStore]:
    with RunStore(store_url) as s:
        yield s


@pytest.mark.parametrize("parts", [1, 3])
def test_sample_totals_per_run_gpu_and_time_bucket(
    store: RunStore, parts: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # parts: a big SQLite table is summed in row-id ranges at once; the sums are the same
    monkeypatch.setattr("reports.data.scans._ROWS_PER_READER", 1 if parts > 1 else 10**9)
    monkeypatch.setattr("reports.data.scans._MAX_SAMPLE_READERS", parts)
    monkeypatch.setattr("reports.data.scans.os.cpu_count", lambda: 4)
    utils = [2.0, 50.0, None, 3.0, 80.0, 4.0]
    store.upsert_samples(
        [
            sample("a", m, util_pct=u, covered_s=30.0 if m == 5 else 60.0)
            for m, u in enumerate(utils)
        ]
        + [sample("a", m, gpu="GPU-b", util_pct=100.0) for m in range(3)]
        + [sample("b", 10, util_pct=1.0, sm_active_pct=0.5), sample("b", 11, util_pct=9.0)]
    )
    # the first and the last edge are outside the samples: they still count
    edges = [
        T0 - timedelta(days=1),
        T0 + timedelta(minutes=3),
        T0 + timedelta(minutes=10),
        T0 + timedelta(days=1),
    ]
    totals = SampleScans(store).sample_totals(
        value="util_pct",
        low_under=5.0,
        bucket_edges=edges,
        since=T0 + timedelta(minutes=1),
        until=T0 + timedelta(minutes=11),
    )
    got = {
        (t.run_id, t.gpu, t.bucket): (
            t.minutes,
            t.covered_s,
            t.known_s,
            t.value_s,
            t.first_low,
            t.last_low,
        )
        for t in totals
    }
    minute = [T0 + timedelta(minutes=m) for m in range(12)]
    assert got == {
        # minutes 1 and 2 (0 is before since): 50% for 60 s, then no value
        ("a", "GPU-a", 1): (2, 120.0, 60.0, 50.0 * 60, None, None),
        # minutes 3, 4, 5: 3% for 60 s, 80% for 60 s, 4% for 30 s: two under 5%
        ("a", "GPU-a", 2): (3, 150.0, 150.0, 3.0 * 60 + 80.0 * 60 + 4.0 * 30, minute[3], minute[5]),
        ("a", "GPU-b", 1): (2, 120.0, 120.0, 2 * 100.0 * 60, None, None),
        ("b", "GPU-a", 3): (1, 60.0, 60.0, 60.0, minute[10], minute[10]),  # 11 is at until
    }
    sm = {
        (t.run_id, t.gpu, t.bucket): t
        for t in SampleScans(store).sample_totals(value="sm_active_pct", low_under=1.0)
    }
    assert {key[2] for key in sm} == {0}  # no edges: one bucket
    b = sm["b", "GPU-a", 0]
    assert (b.minutes, b.known_s, b.value_s, b.first_low) == (2, 60.0, 30.0, minute[10])
    assert sm["a", "GPU-a", 0].known_s == 0.0 and sm["a", "GPU-a", 0].value_s == 0.0
    assert (
        SampleScans(store).sample_totals(
            value="util_pct", low_under=5.0, since=T0 + timedelta(days=1)
        )
        == []
    )
    with pytest.raises(ValueError, match="no sample column power"):
        SampleScans(store).sample_totals(value="power", low_under=1.0)


def test_scan_sample_stretches_with_margins(store: RunStore) -> None:
    # GPU-a has a gap of an hour after minute 9; GPU-b and run b are not asked for
    minutes = [*range(10), *range(70, 80)]
    store.upsert_samples(
        [sample("a", m) for m in minutes] + [sample("a", 5, gpu="GPU-b"), sample("b", 5)]
    )
    rows: list[tuple[Any, ...]] = []
    SampleScans(store).scan_sample_stretches(
        rows.extend,
        columns=["run_id", "gpu", "util_pct"],
        margin=3,
        stretches=[("a", "GPU-a", T0 + timedelta(minutes=8), T0 + timedelta(minutes=71))],
        since=T0 + timedelta(minutes=6),
        until=T0 + timedelta(minutes=75),
        chunk_rows=4,
    )
    # 8..71 and 3 samples before (6, 7: since cuts the third) and after (72, 73, 74)
    assert sorted(r[2] - 50.0 for r in rows) == [6, 7, 8, 9, 70, 71, 72, 73, 74]
    assert {r[:2] for r in rows} == {("a", "GPU-a")}
    rows.clear()
    SampleScans(store).scan_sample_stretches(
        rows.extend,
        columns=["util_pct"],
        margin=2,
        stretches=[
            ("a", "GPU-a", T0 + timedelta(minutes=9), T0 + timedelta(minutes=9)),
            ("a", "GPU-b", T0 + timedelta(minutes=5), T0 + timedelta(minutes=5)),
        ],
    )
    assert sorted(r[0] - 50.0 for r in rows) == [5, 7, 8, 9, 70, 71]


def test_which_runs_have_samples(store_url: str) -> None:
    """Runs with usable minute samples, whenever they are; a run whose every sample is
    unusable (covered_s out of range) is measured by its summary, as in the report. From the
    rollups, and from the samples in a version 1 store (no rollups table)."""
    import sqlalchemy as sa

    with RunStore(store_url) as s:
        for i in range(4):
            s.upsert_run(run_record(f"r{i}", DEC, 1))
        bad = [MinuteSample(run_id="r3", minute=DEC, gpu="GPU-0", covered_s=1e9, util_pct=5.0)]
        s.upsert_samples(minutes("r1", DEC, 2) + minutes("r2", DEC + timedelta(days=40), 1) + bad)
        assert SampleScans(s).sampled_runs(["r0", "r1", "r2", "r3", "nope"]) == {"r1", "r2"}
        assert SampleScans(s).sampled_runs([]) == set()

        def downgrade(conn: sa.Connection) -> None:
            conn.exec_driver_sql("DROP TABLE rollups")
            conn.exec_driver_sql("UPDATE meta SET value = '1' WHERE key = 'schema_version'")

        s.transaction(downgrade, write=True)
    with RunStore(store_url, create=False) as v1:
        assert v1.version == 1
        assert SampleScans(v1).sampled_runs(["r0", "r1", "r2", "r3"]) == {"r1", "r2"}


def test_rollup_totals_read_a_gpu_name_that_is_not_utf8(store: RunStore) -> None:
    """The rollups are read with the driver decoding text; a GPU name stored as TEXT that is
    not UTF-8 (SQLite: written behind the store's back) fails that read, and it is read again
    with the bad byte replaced: the same sums, under the name as the report shows it."""
    store.upsert_samples([sample("r", m) for m in range(3)] + [sample("r", 0, gpu="GPU-b")])
    hour = int(T0.timestamp()) // 3600
    scans = SampleScans(store)

    def sums() -> dict[str, tuple[int, float]]:
        totals = scans.rollup_totals(
            value="util_pct", hour_edges=[], since_hour=hour, until_hour=hour + 1
        )
        return {t.gpu: (t.minutes, t.covered_s) for t in totals}

    assert sums() == {"GPU-a": (3, 180.0), "GPU-b": (1, 60.0)}
    if store.engine.dialect.name == "sqlite":
        store.transaction(
            lambda conn: conn.exec_driver_sql(
                "UPDATE rollups SET gpu = CAST(X'ff41' AS TEXT) WHERE gpu = 'GPU-b'"
            ),
            write=True,
        )
        assert sums() == {"GPU-a": (3, 180.0), "\ufffdA": (1, 60.0)}


@pytest.mark.parametrize("part", [1, 2, 1000])
def test_rollup_totals_as_a_frame_in_parts_are_the_rows(
    store: RunStore, part: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's frame of the rollup sums, fetched ``part`` rows at a time, holds the rows
    :meth:`SampleScans.rollup_totals` gives; and where a rollup row is damaged, the same
    rows with it counted."""
    import pandas as pd

    from reports.data import rollups

    monkeypatch.setitem(rollups.rollup_totals_frame.__kwdefaults__, "chunk_rows", part)
    store.upsert_samples(
        [sample(r, m, gpu=g) for r in ("r1", "r2") for g in ("GPU-a", "GPU-b") for m in range(150)]
    )
    hour = int(T0.timestamp()) // 3600
    scans = SampleScans(store)
    span = {
        "value": "util_pct",
        "hour_edges": [hour + 1],
        "since_hour": hour,
        "until_hour": hour + 3,
    }

    def same() -> pd.DataFrame:
        frame = scans.rollup_totals_frame(**span)
        rows = pd.DataFrame(scans.rollup_totals(**span), columns=list(frame.columns))
        key = ["run_id", "gpu", "bucket"]
        got, want = (f.sort_values(key, ignore_index=True) for f in (frame, rows))
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
        return got

    got = same()
    assert len(got) == 8  # 2 runs x 2 GPUs x 2 buckets
    assert got["minutes"].sum() == 4 * 150 and got["damaged"].sum() == 0
    store.transaction(
        lambda conn: conn.exec_driver_sql(
            "UPDATE rollups SET covered_s = 1e9 WHERE run_id = 'r2' AND gpu = 'GPU-b' "
            f"AND hour = {hour + 1}"
        ),
        write=True,
    )
    got = same()
    assert got["damaged"].sum() == 1 and got["minutes"].sum() == 4 * 150 - 60
