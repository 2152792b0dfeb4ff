"""The idle rule (:func:`tracker.cost.idle_flags`: seconds-weighted windows) gives the same idle
GPU-seconds on every path: live (the sampler's minutes through its :class:`IdleDetector`, here
as the exact nvidia-smi import plays a log), the nvidia-smi import (vectorized), the store's
rollups (rows written through :meth:`RunStore.upsert_samples`) and the weekly report's reads of
the store (its rollups, and minute by minute), on SQLite and PostgreSQL: random logs with
partial minutes at the start, the end and around gaps, and utilizations about the threshold."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from fakes import examples, run_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reports.gputime import load
from reports.imports.nvsmi import read_nvsmi
from reports.imports.nvsmi_fast import parse
from reports.imports.play import GAP_INTERVALS
from tracker.cost import IdleDetector, Thresholds, idle_flags
from tracker.record import MinuteSample
from tracker.store import RunStore

W48 = datetime(2026, 11, 23, tzinfo=UTC)  # Monday
T0 = datetime(2026, 11, 24, 10, 0)  # the logs' first minute, UTC (naive, as nvidia-smi writes)
NOW = W48 + timedelta(days=9)
KOLKATA = ZoneInfo("Asia/Kolkata")  # weeks on half hours: the report reads the minutes
HEADER = (
    "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], "
    "memory.total [MiB], power.draw [W]"
)
RUNS = itertools.count()

QUIET = st.integers(35, 65).map(lambda x: x / 10)  # 3.5-6.5 % in tenths: windows about 5 %
ODD = st.sampled_from([None, 0.0, 5.0, 20.0, 40.0, 90.0])  # [N/A], idle, the threshold, blips


@st.composite
def logs(draw: st.DrawFn) -> list[tuple[float, float | None]]:
    """Readings ``(seconds after T0, util)`` every ``interval`` s, each minute of the log at a
    utilization of its own (about the threshold, a few odd ones), from a random second of the
    first minute to a random second of the last, with gaps of odd lengths (the minutes around
    them partial, a long one leaving minutes with no row)."""
    interval = draw(st.sampled_from([5, 10, 20]))
    # about one window (each minute in few windows: one partial minute decides them), or more
    n = draw(st.one_of(st.integers(30, 32), st.integers(33, 60)))
    utils: list[float | None] = list(draw(st.lists(QUIET, min_size=n, max_size=n)))
    at = st.one_of(st.sampled_from([0, n - 1]), st.integers(0, n - 1))  # the edges are partial
    for i, odd in draw(st.lists(st.tuples(at, ODD), max_size=3)):
        utils[i] = odd
    t = draw(st.integers(0, 59))
    end = 60 * len(utils) - draw(st.integers(1, 60))
    gaps = draw(
        st.lists(
            st.tuples(st.integers(0, end), st.integers(GAP_INTERVALS * interval + 1, 400)),
            max_size=2,
        )
    )
    out: list[tuple[float, float | None]] = []
    while t <= end:
        if not any(a <= t < a + n for a, n in gaps) or len(out) < 2:
            out.append((float(t), utils[t // 60]))
        t += interval
    return out


def log_text(readings: list[tuple[float, float | None]], uuid: str) -> str:
    rows = [HEADER]
    for seconds, util in readings:
        at = T0 + timedelta(seconds=seconds)
        cell = "[N/A]" if util is None else f"{util:g} %"
        rows.append(
            f"{at:%Y/%m/%d %H:%M:%S}.000, 0, {uuid}, NVIDIA H100 80GB HBM3, {cell}, "
            "1024 MiB, 81559 MiB, 100.00 W"
        )
    return "\n".join(rows) + "\n"


def idle_s_of(record_idle_usd: float | None, price: float | None) -> float:
    assert price
    return (record_idle_usd or 0.0) / price * 3600.0


def report_idle_s(store_url: str, run_id: str, tz: ZoneInfo | None) -> float:
    """Idle GPU-seconds of the run in the weekly report's GPU time (W48 and the 11 before)."""
    start = W48 if tz is None else datetime(2026, 11, 23, tzinfo=tz)
    gt = load(store_url, start, tz=tz or UTC, now=NOW).sampled
    return float(gt.loc[gt["run_id"] == run_id, "idle_hours"].sum()) * 3600.0


def rollup_idle_s(store: RunStore, run_id: str) -> float:
    sql = sa.text("SELECT COALESCE(SUM(util_idle_s), 0) FROM rollups WHERE run_id = :r")
    return float(
        store.transaction(lambda conn: conn.execute(sql, {"r": run_id}).scalar_one(), write=False)
    )


def streamed_idle_s(rows: list[MinuteSample]) -> float:
    t = Thresholds()
    detector = IdleDetector(window=t.idle_window_min, threshold_pct=t.idle_pct)
    for r in rows:
        detector.add_minute(r.util_pct, r.covered_s, int(r.minute.timestamp()) // 60)
    return detector.idle_s


def paths_idle_s(
    tmp_path: Path, store_url: str, readings: list[tuple[float, float | None]], cuts: list[int]
) -> dict[str, float]:
    """Each path's idle GPU-seconds of one GPU's log."""
    n = next(RUNS)
    log = tmp_path / f"gpu{n}.csv"
    log.write_text(log_text(readings, f"GPU-{n}"))
    assert parse(log) is not None  # the vectorized import takes it
    exact, fast = (read_nvsmi([log], fast=f) for f in (False, True))
    (live,), (imported,) = exact.records, fast.records
    rows = sorted(exact.samples, key=lambda r: r.minute)
    run_id = f"live-{n}"
    rows = [dataclasses.replace(r, run_id=run_id) for r in rows]
    out = {
        "live (sampler, IdleDetector)": idle_s_of(live.idle_usd, live.price_per_gpu_hour),
        "import (vectorized)": idle_s_of(imported.idle_usd, imported.price_per_gpu_hour),
        "streamed over the stored rows": streamed_idle_s(rows),
    }
    with RunStore(store_url) as store:
        hours = (rows[-1].minute - rows[0].minute).total_seconds() / 3600 + 1 / 60
        store.upsert_run(run_record(run_id, rows[0].minute, hours))
        # in parts: each write recomputes the hours its rows reach
        bounds = sorted({0, len(rows), *(c % (len(rows) + 1) for c in cuts)})
        for a, b in itertools.pairwise(bounds):
            store.upsert_samples(rows[a:b])
        out["rollups"] = rollup_idle_s(store, run_id)
    out["report (rollups)"] = report_idle_s(store_url, run_id, None)
    out["report (minutes read)"] = report_idle_s(store_url, run_id, KOLKATA)
    return out


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(readings=logs(), cuts=st.lists(st.integers(0, 10_000), max_size=3))
def test_every_path_counts_the_same_idle_seconds(
    tmp_path: Path, store_url: str, readings: list[tuple[float, float | None]], cuts: list[int]
) -> None:
    got = paths_idle_s(tmp_path, store_url, readings, cuts)
    first = got["live (sampler, IdleDetector)"]
    for path, idle_s in got.items():
        assert idle_s == pytest.approx(first, rel=1e-9, abs=1e-6), (path, got)


def test_a_partial_first_minute_counts_for_its_seconds(tmp_path: Path, store_url: str) -> None:
    """A log from 10:00:40: 20 s at 40 %, 29 minutes at 4 %, then busy. The first window,
    10:00-10:29, averages (40 x 20 + 4 x 1740) / 1760 = 4.41 % < 5 % by seconds (an equal
    mean of its 30 minutes, (40 + 29 x 4) / 30 = 5.2 %, is not): its 29 minutes at 4 % are
    idle, 1,740 GPU-seconds, on every path; the 40 % minute is not (its own util is over)."""
    readings: list[tuple[float, float | None]] = [(40.0, 40.0), (50.0, 40.0), (60.0, 40.0)]
    readings += [(60.0 + 10 * k, 4.0) for k in range(1, 29 * 6 + 1)]  # to 10:30:00
    readings += [(1800.0 + 10 * k, 90.0) for k in range(1, 10 * 6 + 1)]
    assert round((40 * 20 + 4 * 1740) / 1760, 2) == 4.41
    got = paths_idle_s(tmp_path, store_url, readings, [17])
    assert got == {path: pytest.approx(1740.0) for path in got}
    # the rule itself, on the minutes as the sampler closes them
    utils: list[float | None] = [40.0, *[4.0] * 29, *[90.0] * 10]
    covered = [20.0, *[60.0] * 39]
    flags = idle_flags(utils, covered, threshold_pct=5.0, window=30)
    assert flags == [False, *[True] * 29, *[False] * 10]
    assert not any(idle_flags(utils, [60.0] * 40, threshold_pct=5.0, window=30))
