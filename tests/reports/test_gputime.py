"""The report's GPU time from the store's sums (and the minutes of the runs that may idle) is
the GPU time of every minute sample, on SQLite and PostgreSQL: a small random fleet across a
week boundary and a daylight-saving change, with gaps, unknown minutes and idle stretches."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pandas as pd
import pytest
from fakes import StoreTemplates, run_record

from reports import kpi as kpis
from reports.build import compute, compute_live
from reports.data.scans import SampleScans
from reports.gputime import load, span_gpu_time
from reports.request import Request
from tracker.cost import Thresholds
from tracker.record import MinuteSample
from tracker.store import SCHEMA_VERSION, RunStore

BERLIN = ZoneInfo("Europe/Berlin")
W44 = datetime(2026, 10, 26, tzinfo=BERLIN)  # Monday; Berlin left summer time the day before
NOW = W44 + timedelta(days=9)


def utils(rng: random.Random, n: int) -> list[float | None]:
    """Busy and idle stretches, some shorter than the idle window, with unknown minutes."""
    out: list[float | None] = []
    while len(out) < n:
        idle = rng.random() < 0.4
        for _ in range(rng.randint(5, 70)):
            if rng.random() < 0.03:
                out.append(None)
            elif idle:
                out.append(rng.choice([0.0, 1.0, 2.5, 4.9, 5.0, 12.0]))
            else:
                out.append(rng.uniform(20.0, 100.0))
    return out[:n]


def fill(store: RunStore, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(8):
        start = W44 - timedelta(hours=rng.randint(1, 30), minutes=rng.randint(0, 59))
        hours = rng.randint(2, 40)
        gpus = rng.randint(1, 3)
        store.upsert_run(run_record(f"r{i}", start, hours, gpus=gpus, util=50.0))
        rows = []
        for g in range(gpus):
            minute = start
            for u in utils(rng, hours * 60):
                minute += timedelta(minutes=rng.choice([1] * 30 + [2, 45]))  # a few gaps
                rows.append(
                    MinuteSample(
                        run_id=f"r{i}",
                        minute=minute,
                        gpu=f"GPU-{i}-{g}",
                        covered_s=rng.choice([60.0] * 5 + [17.0]),
                        util_pct=u,
                        sm_active_pct=None if u is None else u * 0.6,
                    )
                )
        store.upsert_samples(rows)
    # a summary-only run, and samples of a run the store has no record of
    store.upsert_run(run_record("summary", W44 + timedelta(days=2), 5, util=30.0))
    store.upsert_samples(
        [
            MinuteSample(
                run_id="ghost", minute=W44 + timedelta(minutes=m), gpu="GPU-x", util_pct=0.0
            )
            for m in range(40)
        ]
    )


def filled(templates: StoreTemplates, store_url: str, seed: int) -> None:
    """The store at ``store_url`` as :func:`fill` leaves it (on SQLite a copy of the module's
    store of that seed)."""

    def fill_seed(url: str) -> None:
        with RunStore(url) as store:
            fill(store, seed)

    templates.made(store_url, f"seed {seed}", fill_seed)


def every_minute(store_url: str, start: datetime, basis: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs and all their minute samples in the report's 12 weeks, read row by row."""
    since, until = start - timedelta(days=77), start + timedelta(days=7)
    with RunStore(store_url) as store:
        runs = kpis.runs_frame(store.list_runs(since=since, until=until))
        samples = kpis.SampleFrameBuilder(kpis.sample_columns(basis))
        SampleScans(store).scan_samples(samples, columns=samples.columns, since=since, until=until)
    return runs, samples.frame()


def ordered(gt: pd.DataFrame) -> pd.DataFrame:
    gt = gt.astype({"run_id": str, "gpu": str})
    return gt.sort_values(["run_id", "gpu", "week"], ignore_index=True)[kpis.GT_COLUMNS]


@pytest.mark.parametrize(("basis", "parts"), [("util", 1), ("util", 3), ("sm_active", 1)])
def test_gpu_time_from_sums_is_the_gpu_time_of_every_minute(
    store_url: str,
    store_templates: StoreTemplates,
    basis: str,
    parts: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("reports.data.scans._ROWS_PER_READER", 1000 if parts > 1 else 10**9)
    monkeypatch.setattr("reports.data.scans._MAX_SAMPLE_READERS", parts)
    monkeypatch.setattr("reports.data.scans.os.cpu_count", lambda: 4)
    filled(store_templates, store_url, parts)
    runs, samples = every_minute(store_url, W44, basis)
    expected = kpis.gpu_time(runs, samples, tz=BERLIN, basis=basis, now=NOW)
    assert expected["idle_hours"].sum() > 1.0 and expected["week"].nunique() == 2

    read = load(store_url, W44, tz=BERLIN, basis=basis, now=NOW)
    assert not read.skipped  # a clean store: nothing left out
    got = kpis.combine_gpu_time(read.runs, read.sampled, tz=BERLIN, basis=basis, now=NOW)
    pd.testing.assert_frame_equal(
        ordered(got), ordered(expected), check_exact=False, rtol=1e-9, atol=1e-9
    )

    c = compute(store_url, Request(week="2026-W44", tz=BERLIN, basis=basis), now=NOW)
    k = kpis.week_kpis(runs, samples, W44, tz=BERLIN, basis=basis, now=NOW)
    for name, value in k.headline.__dict__.items():
        assert getattr(c.kpis.headline, name) == pytest.approx(value), name
    assert c.kpis.headline.idle_usd > 0


def test_only_stretches_with_low_minutes_are_read_minute_by_minute() -> None:
    t = Thresholds(idle_pct=5.0, idle_window_min=3)
    at = [pd.Timestamp("2026-10-26T00:00Z") + pd.Timedelta(minutes=m) for m in range(20)]
    none = pd.NaT
    totals = pd.DataFrame(
        {
            "run_id": ["busy", "low", "low", "short", "weeks", "weeks"],
            "gpu": ["a", "a", "b", "a", "a", "a"],
            "bucket": [0, 0, 0, 0, 0, 1],
            "minutes": [10, 10, 10, 2, 4, 4],
            "covered_s": 0.0,
            "known_s": 0.0,
            "value_s": 0.0,
            "first_low": [none, none, at[3], at[0], at[1], at[12]],
            "last_low": [none, none, at[5], at[1], at[2], at[19]],
        }
    )
    # "short": fewer minutes than a window here, but it may go on past the weeks read (the store
    # reads the rest of its window there); "weeks": one stretch over both weeks; "busy" and
    # "low"/"a" have no low minute
    assert kpis.idle_candidates(totals, t) == [
        ("low", "b", at[3], at[5]),
        ("short", "a", at[0], at[1]),
        ("weeks", "a", at[1], at[19]),
    ]


def test_gpu_time_of_totals_takes_idle_hours_where_read() -> None:
    weeks = [pd.Timestamp("2026-10-18T22:00Z"), pd.Timestamp("2026-10-25T23:00Z")]
    totals = pd.DataFrame(
        {
            "run_id": ["a", "a", "b"],
            "gpu": ["g", "g", "g"],
            "bucket": [0, 1, 1],
            "minutes": [60, 60, 60],
            "covered_s": [3600.0, 1800.0, 7200.0],
            "known_s": [3600.0, 900.0, 0.0],
            "value_s": [3600.0 * 40, 0.0, 0.0],
            "first_low": pd.NaT,
            "last_low": pd.NaT,
        }
    )
    idle = pd.DataFrame(
        {
            "run_id": ["a"],
            "gpu": ["g"],
            "week": [weeks[1]],
            "gpu_hours": [0.5],
            "known_hours": [0.25],
            "used_hours": [0.0],
            "idle_hours": [0.25],
            "idle_used_hours": [0.0025],
        }
    )
    gt = kpis.totals_gpu_time(totals, weeks, idle)
    assert gt["week"].tolist() == [weeks[0], weeks[1], weeks[1]]
    assert gt["gpu_hours"].tolist() == [1.0, 0.5, 2.0]
    assert gt["known_hours"].tolist() == [1.0, 0.25, 0.0]
    assert gt["used_hours"].tolist() == [0.4, 0.0, 0.0]  # 40% of an hour
    assert gt["idle_hours"].tolist() == [0.0, 0.25, 0.0]
    assert gt["idle_used_hours"].tolist() == [0.0, 0.0025, 0.0]


def test_an_empty_fleet_week(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as store:
        store.upsert_run(run_record("old", datetime(2025, 1, 6, tzinfo=UTC), 1))
    read = load(url, W44, tz=BERLIN, now=NOW)
    assert read.runs.empty and read.sampled.empty and not read.skipped and not read.measured.any()
    c = compute(url, Request(week="2026-W44", tz=BERLIN), now=NOW)
    assert c.kpis.headline.gpu_hours == 0.0 and c.gpu_time.empty


def test_a_migrated_store_reports_what_its_minutes_say(
    store_url: str, store_templates: StoreTemplates
) -> None:
    """The random store above (gaps, partial minutes, unknown minutes, idle stretches across
    Berlin's DST week edge) as version 1 left it: its week computed from every minute, then
    the report (which migrates it) from the rollups it built: the same week, to 1e-9."""
    import sqlalchemy as sa

    filled(store_templates, store_url, 3)  # the store of the live figures below: filled once
    with RunStore(store_url) as store:

        def downgrade(conn: sa.Connection) -> None:
            conn.exec_driver_sql("DROP TABLE rollups")
            conn.exec_driver_sql("UPDATE meta SET value = '1' WHERE key = 'schema_version'")

        store.transaction(downgrade, write=True)
    with RunStore(store_url, create=False) as reader:
        assert reader.version == 1  # a reader leaves it as it is
    runs, samples = every_minute(store_url, W44, "util")
    before = kpis.week_kpis(runs, samples, W44, tz=BERLIN, now=NOW)
    after = compute(store_url, Request(week="2026-W44", tz=BERLIN), now=NOW).kpis
    with RunStore(store_url, create=False) as migrated:
        assert migrated.version == SCHEMA_VERSION
    assert before.headline.idle_usd > 0 and before.headline.gpu_hours > 10
    for name, value in before.headline.__dict__.items():
        got = getattr(after.headline, name)
        assert got == value if value is None else got == pytest.approx(value, rel=1e-9), name
    pd.testing.assert_frame_equal(
        after.by["team"], before.by["team"], check_exact=False, rtol=1e-9, atol=1e-9
    )
    pd.testing.assert_frame_equal(
        after.trend, before.trend, check_exact=False, rtol=1e-9, atol=1e-9
    )


def test_the_live_figures_are_the_reports_of_both_weeks(
    store_url: str, store_templates: StoreTemplates
) -> None:
    """/metrics reads the last complete week and the week so far in one go (two weeks of
    rollups, no trend): headline and team figures equal the report of each week."""
    filled(store_templates, store_url, 3)
    now = W44 + timedelta(days=3, hours=5)
    req = Request(week=None, tz=BERLIN)
    live = compute_live(store_url, req, now=now)
    for got, week in zip(live, ("2026-W43", "2026-W44"), strict=True):
        want = compute(store_url, dataclasses.replace(req, week=week), now=now).kpis
        assert got.week == want.week and want.headline.gpu_hours > 1
        for name, value in want.headline.__dict__.items():
            had = getattr(got.headline, name)
            assert had == value if value is None else had == pytest.approx(value, rel=1e-9), name
        pd.testing.assert_frame_equal(
            got.by["team"], want.by["team"], check_exact=False, rtol=1e-9, atol=1e-9
        )
    assert live[1].headline.idle_usd > 0


def test_a_run_whose_sampler_stopped_reads_the_same_in_every_span(store_url: str) -> None:
    """ "stopped" ran 2026-11-02 to 11-27 (600 GPU-h in its summary) but its sampler sent one
    hour of minutes, on 11-02, and nothing after; "other" ran 10 h on 11-17, never sampled.
    A sampled run is measured by its samples alone, whichever span is read: W47 holds 10 GPU-h
    (other's) in the weekly report (12 weeks read, the samples among them), in ``/metrics`` (2
    weeks read, none of stopped's samples among them: its summary counted 168 h there) and in
    a budget's span."""
    nov = datetime(2026, 11, 2, tzinfo=UTC)  # Monday of 2026-W45
    with RunStore(store_url) as store:
        store.upsert_run(run_record("stopped", nov, 600, util=50.0))
        store.upsert_samples(
            [
                MinuteSample(
                    run_id="stopped", minute=nov + timedelta(minutes=m), gpu="GPU-0", util_pct=50.0
                )
                for m in range(60)
            ]
        )
        store.upsert_run(run_record("other", datetime(2026, 11, 17, tzinfo=UTC), 10, util=80.0))
    now = datetime(2026, 11, 26, 12, tzinfo=UTC)
    req = Request(week="2026-W47", tz=UTC)
    report = compute(store_url, req, now=now).kpis.headline
    live, _so_far = compute_live(store_url, req, now=now)
    assert report.gpu_hours == pytest.approx(10.0)
    assert live.headline.gpu_hours == pytest.approx(10.0)
    assert live.headline.spend_usd == pytest.approx(report.spend_usd) == pytest.approx(38.5)
    w47 = datetime(2026, 11, 16, tzinfo=UTC)
    with RunStore(store_url) as store:
        budget = span_gpu_time(store, w47, w47 + timedelta(days=7), tz=UTC, now=now)
    assert budget.gpu_time.groupby("run_id")["gpu_hours"].sum().to_dict() == {"other": 10.0}
