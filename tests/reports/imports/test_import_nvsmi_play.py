"""The vectorized minute play's shortcuts give the floats its general way gives, to the bit: the
readings that cover time picked by a slice rather than a mask, no split where no reading
crosses a minute, a column without a missing value summed whole, one datetime per minute,
Python's round only on a fraction of a second, the GPUs sorted by a radix sort. Checked on
random GPUs' readings (a reading a second at whole seconds, as nvidia-smi's ``-l 1`` logs, and
at odd fractions of a second, gaps, missing values) against the general formulas written out
here."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import numpy as np
import pytest

from reports.imports.nvsmi_fast import Series, _narrow
from reports.imports.nvsmi_minutes import play
from tracker.gpu.base import GpuInfo
from tracker.record import MinuteSample
from tracker.units import j_to_kwh

T0 = 1_764_460_800.0  # 2025-11-30 00:00 UTC: a whole minute


def series(rng: random.Random, *, whole: bool, missing: float) -> Series:
    """One GPU's readings: at whole seconds a second apart (no reading crosses a minute) or
    at odd fractions of a second with gaps; each value missing with probability ``missing``."""
    n = rng.randint(2, 900)
    steps = np.ones(n)
    if not whole:
        steps = np.array([rng.choice([0.25, 1.5, 7.001, 59.9, 200.0]) for _ in range(n)])
    t = T0 + rng.choice([0.0, 31.5]) + np.cumsum(steps)

    def column(lo: float, hi: float) -> np.ndarray:
        v = np.array([rng.uniform(lo, hi) for _ in range(n)])
        v[np.array([rng.random() < missing for _ in range(n)])] = np.nan
        return v

    fields = {"util_pct": column(0, 100), "mem_used_gib": column(0, 80)}
    fields["power_w"] = column(60, 700)
    info = GpuInfo(index=0, uuid="GPU-0", name="H100", mem_total_gib=80.0)
    return Series(info, None, t, np.arange(n) + 2, fields)  # type: ignore[arg-type]


def general(s: Series, gap_s: float) -> dict[str, np.ndarray]:
    """The minutes' covered seconds and Σ value × seconds, Σ seconds known of each field, the
    general way: every covering reading split at every minute, a NaN's part summed as 0."""
    dt = np.zeros(len(s.t))
    step = np.diff(s.t)
    dt[1:] = np.where(step > gap_s, 0.0, step)
    covering = np.flatnonzero(dt > 0)
    a, b = s.t[covering] - dt[covering], s.t[covering]
    m0 = np.floor_divide(a, 60).astype(np.int64)
    k = (-np.floor_divide(-b, 60)).astype(np.int64) - m0
    reading = np.repeat(covering, k)
    minute = np.repeat(m0, k) + np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
    d = np.minimum(np.repeat(b, k), (minute + 1) * 60.0)
    d -= np.maximum(np.repeat(a, k), minute * 60.0)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(minute)) + 1))
    out = {"minute": minute[starts], "covered": np.add.reduceat(d, starts)}
    for f, v in s.fields.items():
        known = ~np.isnan(v[reading])
        out[f] = np.add.reduceat(np.where(known, v[reading] * d, 0.0), starts)
        out[f + " s"] = np.add.reduceat(np.where(known, d, 0.0), starts)
    return out


def optional(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("missing", [0.0, 0.05])
def test_minute_rows_are_the_general_formulas_floats(whole: bool, missing: float) -> None:
    rng = random.Random(f"{whole}{missing}")
    checked = 0
    for _ in range(40):
        s = series(rng, whole=whole, missing=missing)
        rows: list[MinuteSample] = []
        play(s, run_id="r", gap_s=100.0, idle_pct=5.0, idle_window_min=3, rows=rows)
        want = general(s, 100.0)
        # the start minute's row may hold the first reading's values: the rows after it
        got = {int(r.minute.timestamp()) // 60: r for r in rows[1:]}
        for i, m in enumerate(want["minute"].tolist()):
            if m not in got:
                continue
            r = got[m]
            checked += 1
            assert r.covered_s == round(float(want["covered"][i]), 3)
            util_s, util_known = want["util_pct"][i], want["util_pct s"][i]
            assert r.util_pct == (util_s / util_known if util_known > 0 else None)
            power_s, power_known = want["power_w"][i], want["power_w s"][i]
            assert r.power_w == (power_s / power_known if power_known > 0 else None)
            assert r.energy_kwh == (j_to_kwh(power_s) if power_known > 0 else None)
        peaks = [r.mem_used_gib for r in rows]
        assert all(p is None or p >= 0.0 for p in peaks)
    assert checked > 200


def test_rows_of_one_minute_share_its_datetime_and_equal_a_fresh_one() -> None:
    rows: list[MinuteSample] = []
    t = T0 + np.arange(1.0, 121.0)  # both GPUs read at 1-120 s: readings cover 1-60 s, 60-120 s
    for uuid in ("GPU-0", "GPU-1"):
        info = GpuInfo(index=0, uuid=uuid, name="H100", mem_total_gib=80.0)
        s = Series(info, None, t, np.arange(120) + 2, {"util_pct": np.full(120, 50.0)})  # type: ignore[arg-type]
        play(s, run_id="r", gap_s=3.0, idle_pct=5.0, idle_window_min=3, rows=rows)
    assert [(r.gpu, r.covered_s, r.util_pct) for r in rows] == [
        (gpu, seconds, 50.0) for gpu in ("GPU-0", "GPU-1") for seconds in (59.0, 60.0)
    ]
    starts = [r.minute for r in rows]
    assert starts[0] is starts[2] and starts[1] is starts[3]  # one datetime a minute
    assert starts[:2] == [datetime.fromtimestamp(T0 + 60 * m, UTC) for m in (0, 1)]


@pytest.mark.parametrize("gpus", [1, 3, 256, 257, 65_536, 65_537])
def test_the_narrowed_codes_sort_as_the_wide_ones(gpus: int) -> None:
    rng = np.random.default_rng(gpus)
    codes = rng.integers(0, gpus, 200_000).astype(np.int64)
    codes[:gpus] = np.arange(gpus)[: len(codes)]  # every code there
    narrow = _narrow(codes, gpus)
    assert narrow.itemsize == (1 if gpus <= 256 else 2 if gpus <= 65_536 else 8)
    assert (narrow.astype(np.int64) == codes).all()
    want = np.argsort(codes, kind="stable")
    assert (np.argsort(narrow, kind="stable") == want).all()
