"""The vectorized nvidia-smi import gives what the sampler path gives, run by run and minute by
minute, on random logs: units or none, ``[N/A]`` cells, gaps, readings that cross minutes at
odd fractions of a second, GPUs that come and go. And a log it does not take goes the exact
way, with the exact path's error."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from reports.errors import ImportFailed
from reports.imports.nvsmi import Labels, import_nvsmi, read_nvsmi
from reports.imports.nvsmi_fast import parse
from reports.imports.nvsmi_minutes import RowValues, hour_rollups, idle_totals
from tracker.cost import IdleDetector
from tracker.store import RunStore
from tracker.store.rollups import COLUMNS as ROLLUP_COLUMNS
from tracker.store.rollups import rollups_of, sample_rollups

T0 = datetime(2026, 11, 29, 23, 40)  # across the W48/W49 edge


def random_log(rng: random.Random, *, units: bool) -> str:
    cols = [
        "timestamp",
        "index",
        "uuid",
        "name",
        "utilization.gpu [%]",
        "memory.used [MiB]",
        "memory.total [MiB]",
        "power.draw [W]",
    ]
    rows = [", ".join(c if units else c.split(" [")[0] for c in cols)]
    gpus = rng.randint(1, 3)
    t = T0 + timedelta(seconds=rng.random() * 60)
    alive = {g: True for g in range(gpus)}
    for _ in range(rng.randint(2, 400)):
        # mostly ~1-30 s apart, sometimes a gap of minutes, at odd fractions of a second
        step = rng.choice([rng.uniform(0.5, 2.0), rng.uniform(5, 40), rng.uniform(120, 900)])
        t += timedelta(milliseconds=int(step * 1000))
        for g in range(gpus):
            if rng.random() < 0.02:
                alive[g] = not alive[g]
            if not alive[g]:
                continue
            util = (
                "[N/A]"
                if rng.random() < 0.05
                else str(rng.choice([0, 1, 3, 50, 97, 100, rng.randint(0, 100)]))
            )
            mem = "[N/A]" if rng.random() < 0.05 else str(rng.randint(0, 81559))
            watts = "[N/A]" if rng.random() < 0.1 else f"{rng.uniform(50, 700):.2f}"

            def u(v: str, unit: str) -> str:
                return v if not units or v.startswith("[") else f"{v} {unit}"

            rows.append(
                f"{t:%Y/%m/%d %H:%M:%S}.{t.microsecond // 1000:03d}, {g}, GPU-{g}f, "
                f"NVIDIA H100 80GB HBM3, {u(util, '%')}, {u(mem, 'MiB')}, "
                f"{u('81559', 'MiB')}, {u(watts, 'W')}"
            )
    return "\n".join(rows) + "\n"


def same(a: object, b: object, where: str) -> None:
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, float) and isinstance(y, float):
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9), (where, f.name, x, y)
        else:
            assert x == y, (where, f.name, x, y)


@pytest.mark.parametrize("seed", range(40))
def test_the_vectorized_import_equals_the_sampler_path(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = tmp_path / f"log{seed}.csv"
    log.write_text(random_log(rng, units=seed % 2 == 0))
    assert parse(log) is not None  # the fast path takes it
    per_gpu = seed % 3 == 0
    exact = read_nvsmi([log], fast=False, per_gpu=per_gpu)
    fast = read_nvsmi([log], per_gpu=per_gpu)
    assert exact.records
    assert len(fast.records) == len(exact.records)
    for a, b in zip(fast.records, exact.records, strict=True):
        same(a, b, f"seed {seed} record")
    key = lambda s: (s.run_id, s.gpu, s.minute)  # noqa: E731
    assert [key(s) for s in sorted(fast.samples, key=key)] == [
        key(s) for s in sorted(exact.samples, key=key)
    ]
    for a, b in zip(sorted(fast.samples, key=key), sorted(exact.samples, key=key), strict=True):
        same(a, b, f"seed {seed} minute {a.minute}")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            "timestamp, uuid, utilization.gpu [%], temperature.gpu\n"
            "2026/11/23 10:00:00.000, GPU-a, 5 %, 40\n",
            "a column it does not read",
        ),
        (
            "timestamp, uuid, utilization.gpu\n2026-11-23 10:00:00, GPU-a, 5\n",
            "another time format",
        ),
        ("timestamp, uuid, utilization.gpu\n2026/11/23 10:00:00.000, GPU-a, 150\n", "out of range"),
        ("timestamp, uuid, utilization.gpu\n2026/11/23 10:00:00.000, GPU-a\n", "a short row"),
        ("timestamp, uuid, utilization.gpu\r\n2026/11/23 10:00:00.000, GPU-a, 5\r\n", "CRLF"),
        (
            "timestamp, uuid, utilization.gpu\n2026/11/23 10:00:01.000, GPU-a, 5\n"
            "timestamp, uuid, utilization.gpu\n2026/11/23 10:00:00.000, GPU-a, 5\n",
            "repeated header",
        ),
        (
            "timestamp, uuid, utilization.gpu\n2026/11/23 10:00:01.000, GPU-a, 5\n"
            "2026/11/23 10:00:00.000, GPU-a, 5\n",
            "going back",
        ),
        (
            "timestamp, uuid, utilization.gpu [%], power.draw [W]\n"
            "2026/11/23 10:00:00.000, GPU-a, 50 W, 300 %\n",
            "units in the wrong columns",
        ),
        (
            "timestamp, uuid, utilization.gpu [%], power.draw [W]\n"
            "2026/11/23 10:00:00.000, GPU-a, 50, 300 W\n",
            "a value without its unit",
        ),
    ],
    ids=[
        "column",
        "time-format",
        "range",
        "short",
        "crlf",
        "header",
        "back",
        "swapped-units",
        "no-unit",
    ],
)
def test_what_it_does_not_take_goes_the_exact_way(tmp_path: Path, text: str, why: str) -> None:
    log = tmp_path / "odd.csv"
    log.write_bytes(text.encode())
    assert parse(log) is None, why


def test_a_name_that_looks_like_a_unit_stays_whole(tmp_path: Path) -> None:
    log = tmp_path / "odd.csv"
    log.write_text(
        "timestamp, uuid, name, utilization.gpu [%], power.draw [W]\n"
        "2026/11/23 10:00:00.000, GPU-a, Odd W, 50 %, 300 W\n"
        "2026/11/23 10:00:01.000, GPU-a, Odd W, 60 %, 300 W\n"
    )
    (s,) = parse(log) or []
    assert s.info.name == "Odd W" and s.fields["util_pct"].tolist() == [50.0, 60.0]
    same(read_nvsmi([log]).records[0], read_nvsmi([log], fast=False).records[0], "unit name")


@pytest.mark.parametrize("fast", [True, False])
def test_a_header_alone_is_one_line_either_way(tmp_path: Path, fast: bool) -> None:
    log = tmp_path / "hdr.csv"
    log.write_text("timestamp, uuid, utilization.gpu [%]\n")
    with pytest.raises(ImportFailed, match=r"hdr\.csv: nvidia-smi log has a header but no rows$"):
        read_nvsmi([log], fast=fast)


def agree(log: Path, **kwargs: object) -> None:
    """The default (fast where it can) and the exact path give the same runs and minutes, or
    the same error."""
    try:
        exact = read_nvsmi([log], fast=False, **kwargs)  # type: ignore[arg-type]
    except ImportFailed as e:
        with pytest.raises(ImportFailed) as got:
            read_nvsmi([log], **kwargs)  # type: ignore[arg-type]
        assert str(got.value) == str(e)
        return
    fast = read_nvsmi([log], **kwargs)  # type: ignore[arg-type]
    assert [r.name for r in fast.records] == [r.name for r in exact.records]
    for a, b in zip(fast.records, exact.records, strict=True):
        same(a, b, "record")
    key = lambda s: (s.run_id, s.gpu, s.minute)  # noqa: E731
    assert len(fast.samples) == len(exact.samples)
    for a, b in zip(sorted(fast.samples, key=key), sorted(exact.samples, key=key), strict=True):
        same(a, b, "minute")


def rows(header: str, cells: list[str], n: int = 12) -> str:
    """``n`` rows 5 s apart from 10:00; ``{T}`` in a cell is the row's time."""
    out = [header]
    for i in range(n):
        t = f"2026/11/23 10:00:{5 * i:02d}.000"
        out.append(", ".join(c.replace("{T}", t) for c in cells))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    "text",
    [
        # both power columns: the later one (power.draw.instant) is the power, as the exact path has
        rows(
            "timestamp, index, uuid, name, utilization.gpu [%], power.draw [W], "
            "power.draw.instant [W]",
            ["{T}", "0", "GPU-a", "NVIDIA H100 80GB HBM3", "50 %", "300.00 W", "650.00 W"],
        ),
        rows("timestamp, uuid, utilization.gpu", ["{T}", "GPU-a\t", "50"]),  # the exact path strips
        rows("timestamp, uuid, utilization.gpu", ["now", "GPU-a", "50"]),
        rows("timestamp, uuid, utilization.gpu", ["2026/11/23 10:00:60.000", "GPU-a", "50"], n=1)
        + "2026/11/23 10:01:10.000, GPU-a, 50\n",
        rows("timestamp, uuid, utilization.gpu", ["{T}1234", "GPU-a", "50"]),
        rows("timestamp, index, uuid, utilization.gpu [%]", ["{T}", "0", "GPU-a", "5,%"]),
        rows("timestamp, index, uuid, utilization.gpu", ["{T}", "3.0", "GPU-a", "50"]),
        rows("timestamp, index, uuid, utilization.gpu", ["{T}", "1e3", "GPU-a", "50"]),
        # dates that are no dates, read from the bytes: the exact path's error
        rows("timestamp, uuid, utilization.gpu", ["2026/02/29 10:00:00.000", "GPU-a", "50"], n=1),
        rows("timestamp, uuid, utilization.gpu", ["2026/11/23 24:00:00.000", "GPU-a", "50"], n=1),
        rows("timestamp, uuid, utilization.gpu", ["2024/02/29 23:59:59.999", "GPU-a", "50"], n=1)
        + "2024/03/01 00:00:04.999, GPU-a, 60\n",  # a leap day, across the month
        # past 2255 an epoch microsecond is no float: the exact path's datetime.timestamp() decides
        rows("timestamp, uuid, utilization.gpu", ["3000/06/01 10:00:00.000", "GPU-a", "50"], n=1)
        + "3000/06/01 10:00:03.411, GPU-a, 50\n",
        # blanks after a cell: numbers read as the exact path strips them, a uuid is the exact path's
        rows(
            "timestamp, uuid, utilization.gpu [%], power.draw [W]",
            ["{T}", "GPU-a", "50 % ", "[N/A] "],
        ),
        rows("timestamp, uuid, utilization.gpu, power.draw", ["{T}", "GPU-a ", "50  ", "300 "]),
        rows("timestamp, uuid, utilization.gpu [%]", ["{T}", "GPU-a", "5 %]"]),
        rows("timestamp, uuid, utilization.gpu [%]", ["{T}", "GPU-a", " %"]),
        rows("timestamp, uuid, utilization.gpu [%]", ["{T}", "GPU-a", "[Unknown Error]"])
        + "2026/11/23 10:01:00.000, GPU-a, 7 %\n",
        rows("timestamp, uuid, name, utilization.gpu", ["{T}", "GPU-a", "x" * 70_000, "50"]),
        "timestamp, index, uuid, utilization.gpu\n2026/11/23 10:00:00.000, 1, GPU-b, 50\n"
        "2026/11/23 10:00:00.000, 0, GPU-a, 10\n2026/11/23 10:00:05.000, 1, GPU-b, 50\n"
        "2026/11/23 10:00:05.000, 0, GPU-a, 10\n",
        "timestamp, index, uuid, utilization.gpu\n2026/11/23 10:00:00.000, 1, GPU-b, 50\n"
        "2026/11/23 10:00:00.000, 0, GPU-a, 10\n",
    ],
    ids=[
        "two-powers",
        "uuid-tab",
        "now",
        "second-60",
        "7-digits",
        "unit-cell",
        "index-float",
        "index-exp",
        "feb-29",
        "hour-24",
        "leap-day",
        "year-3000",
        "blank-units",
        "blank-nounits",
        "unit-bracket",
        "unit-alone",
        "missing-then-value",
        "long-line",
        "index-order",
        "one-reading-each",
    ],
)
@pytest.mark.parametrize("per_gpu", [False, True])
def test_odd_logs_agree_with_the_exact_path(tmp_path: Path, text: str, per_gpu: bool) -> None:
    log = tmp_path / "odd.csv"
    log.write_text(text)
    # a model given: a log without its name column still makes runs, so the readings the
    # comments above describe are compared, not only the error for a missing model
    agree(log, per_gpu=per_gpu, labels=Labels(gpu_model="H100"))


def test_files_read_side_by_side_give_what_one_process_gives(tmp_path: Path) -> None:
    logs = []
    for seed in range(3):
        log = tmp_path / f"node{seed}.csv"
        log.write_text(
            random_log(random.Random(100 + seed), units=True).replace("GPU-", f"GPU-n{seed}-")
        )
        logs.append(log)
    one = read_nvsmi(logs, workers=1)
    two = read_nvsmi(logs, workers=2)
    assert [r.id for r in two.records] == [r.id for r in one.records]
    for a, b in zip(two.records, one.records, strict=True):
        same(a, b, "record")
    assert len(two.samples) == len(one.samples)
    # the first bad file in file order is the error, as in one process
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp, uuid, utilization.gpu\n2026/11/23 10:00:00.000, GPU-x, 150\n")
    with pytest.raises(ImportFailed, match=r"bad\.csv:2: bad utilization\.gpu value '150'"):
        read_nvsmi([logs[0], bad, logs[1]], workers=2)


def test_a_file_that_is_no_regular_file_goes_the_exact_way(tmp_path: Path) -> None:
    # read whole, /dev/zero would never end: the exact path reads lines and stops at 64 KiB
    assert parse(Path("/dev/zero")) is None
    with pytest.raises(ImportFailed, match=r"/dev/zero:1: a line of over 65,536 characters"):
        read_nvsmi(["/dev/zero"])
    # a pipe is read once, by the exact path: never opened (and its log taken) beforehand
    pipe = tmp_path / "log.pipe"
    os.mkfifo(pipe)
    text = rows("timestamp, uuid, utilization.gpu", ["{T}", "GPU-a", "50"])
    writer = threading.Thread(target=pipe.write_text, args=(text,), daemon=True)
    writer.start()
    got: list[object] = []
    labels = Labels(gpu_model="H100")  # the log has no name column
    reader = threading.Thread(
        target=lambda: got.append(read_nvsmi([pipe], labels=labels)), daemon=True
    )
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "reading the pipe hangs"
    (done,) = got
    assert [r.gpu_hours for r in done.records] == pytest.approx([55 / 3600])  # type: ignore[attr-defined]


@pytest.mark.parametrize("window", [1, 3, 30, 241])
def test_idle_totals_are_the_streamed_detectors(window: int) -> None:
    rng = random.Random(window)
    for _ in range(60):
        minutes, utils, covered = [], [], []
        m = rng.randint(0, 10_000)
        for _ in range(rng.randint(0, 400)):
            m += rng.choice([1, 1, 1, 1, 2, 30])  # mostly the next minute, sometimes a gap
            minutes.append(m)
            utils.append(
                None
                if rng.random() < 0.03
                else rng.choice([0.0, 0.5, 4.9, 5.0, 80.0, rng.uniform(0, 10), rng.uniform(0, 100)])
            )
            covered.append(rng.choice([60.0, 0.0, round(rng.uniform(0, 60), 3)]))
        streamed = IdleDetector(window, 5.0)
        for minute, u, c in zip(minutes, utils, covered, strict=True):
            streamed.add_minute(u, c, minute)
        got = idle_totals(minutes, utils, covered, window=window, threshold_pct=5.0)
        assert got == (streamed.idle_s, streamed.idle_util_s)  # the same floats, not close


def test_rollups_computed_beside_the_reading_are_the_stores(tmp_path: Path, store_url: str) -> None:
    logs = []
    for seed in range(3):
        log = tmp_path / f"node{seed}.csv"
        log.write_text(
            random_log(random.Random(200 + seed), units=seed != 1).replace("GPU-", f"GPU-n{seed}-")
        )
        logs.append(log)
    done = import_nvsmi(store_url, logs, workers=2)
    assert done.records and set(done.rollups) == {r.id for r in done.records}

    def rows(store: RunStore) -> list[tuple[object, ...]]:
        return store.transaction(
            lambda conn: [
                tuple(r)
                for r in conn.exec_driver_sql(
                    f"SELECT {', '.join(ROLLUP_COLUMNS)} FROM rollups ORDER BY run_id, gpu, hour"
                ).all()
            ],
            write=False,
        )

    with RunStore(store_url) as store:
        written = rows(store)
        assert len(written) >= len(done.records)
        store.rebuild_rollups()  # from the minute rows the store holds, as it computes them
        assert rows(store) == written  # exactly: every sum in the same order


@pytest.mark.parametrize("seed", range(30))
def test_rollups_of_the_arrays_are_the_stores_to_the_bit(tmp_path: Path, seed: int) -> None:
    """The rollups the vectorized read computes from its arrays are those the store computes
    from the minute rows (:func:`tracker.store.rollups.sample_rollups`), every float equal, not
    close: readings at odd fractions of a second, ``[N/A]`` cells, gaps, several GPUs."""
    rng = random.Random(300 + seed)
    log = tmp_path / "log.csv"
    log.write_text(random_log(rng, units=seed % 2 == 0))
    done = read_nvsmi([log], per_gpu=seed % 3 == 0)
    assert done.records
    for record in done.records:
        rows = [s for s in done.samples if s.run_id == record.id]
        expected = sample_rollups(rows) or {}
        assert expected.get(record.id)  # a run's rollups, not two absent ones
        assert done.rollups.get(record.id) == expected[record.id]


def _arrays(rows: list[tuple[float, float, float, float, float]]) -> RowValues:
    return tuple(np.array(c, dtype=np.float64) for c in zip(*rows, strict=True))  # type: ignore[return-value]


def test_hour_rollups_leave_odd_values_to_the_store() -> None:
    """A value the store's rules read their own way (covered seconds over 60, a utilization
    over 100 by a rounding, an infinite energy) is not summed from the arrays: None, and the
    store's own code computes them."""
    nan = math.nan
    good = [(60.0, 50.0, nan, 0.001, 3.5), (59.5, nan, 20.0, nan, nan), (0.0, 0.0, nan, 0.0, 0.0)]
    assert hour_rollups("r", "g", [100, 101, 160], _arrays(good)) is not None
    for odd in (
        (60.5, 50.0, nan, 0.001, 3.5),
        (60.0, 100.00000000000001, nan, 0.001, 3.5),
        (60.0, 50.0, -1.0, 0.001, 3.5),
        (60.0, 50.0, nan, math.inf, 3.5),
        (nan, 50.0, nan, 0.001, 3.5),
    ):
        assert hour_rollups("r", "g", [100, 101, 160], _arrays([odd, *good[1:]])) is None


@pytest.mark.parametrize("seed", range(20))
def test_hour_rollups_equal_rollups_of(seed: int) -> None:
    """Random rows with an hour missing, hours part-filled, idle stretches and values at the
    idle threshold: :func:`hour_rollups` equals :func:`tracker.store.rollups.rollups_of`."""
    rng = random.Random(seed)
    minutes: list[int] = []
    m = 29_500_000 + rng.randrange(60)
    while len(minutes) < rng.randint(1, 400):
        m += rng.choice([1, 1, 1, 1, 2, 61])
        minutes.append(m)

    def value(low: float, high: float) -> float:
        return rng.choice([math.nan, 0.0, high, rng.uniform(low, high), 4.99, 5.0, 1.0 / 3])

    rows = [
        (
            rng.choice([60.0, 0.0, round(rng.uniform(0, 60), 3)]),
            value(0.0, 100.0),
            value(0.0, 100.0) if seed % 2 else math.nan,
            value(0.0, 1e-3),
            value(0.0, 80.0),
        )
        for _ in minutes
    ]
    got = hour_rollups("run", "gpu", minutes, _arrays(rows))

    def opt(v: float) -> float | None:
        return None if math.isnan(v) else v

    stored = [
        (datetime.fromtimestamp(m * 60, UTC), c, opt(u), opt(sm), opt(e), opt(mem))
        for m, (c, u, sm, e, mem) in zip(minutes, rows, strict=True)
    ]
    assert got == rollups_of("run", "gpu", stored)


def test_the_collector_stays_off_until_the_last_import_inside_leaves() -> None:
    """Two imports on two threads share the pause: the first to leave does not turn the
    collector on under the other; one that was off before stays off."""
    import gc

    from reports.imports.play import collector_paused

    before = gc.isenabled()
    try:
        gc.enable()
        first, second = collector_paused(), collector_paused()
        first.__enter__()
        second.__enter__()
        assert not gc.isenabled()
        first.__exit__(None, None, None)
        assert not gc.isenabled()  # the second import is still making its rows
        second.__exit__(None, None, None)
        assert gc.isenabled()
        gc.disable()
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        (gc.enable if before else gc.disable)()
