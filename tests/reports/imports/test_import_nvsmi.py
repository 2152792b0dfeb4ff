"""``gpu-kpi import nvidia-smi``: hand-written nvidia-smi logs into a real store, then the weekly
report's figures, computed by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from reports.build import compute
from reports.cli import main
from reports.data.scans import SampleScans
from reports.errors import ImportFailed
from reports.imports.nvsmi import Labels, import_nvsmi, read_nvsmi
from reports.imports.play import NO_GPU_TIME, OVERLAPS, SHARED
from reports.request import Request
from tracker.store import RunStore

HEADER = (
    "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], "
    "memory.total [MiB], power.draw [W]"
)
H100 = "NVIDIA H100 80GB HBM3"
SUNDAY_23 = datetime(2026, 11, 29, 23, 0)  # the last hour of 2026-W48 (UTC)
PRICE = 2.0  # USD per GPU-hour, given on the command line


def line(
    t: datetime,
    index: int,
    util: str,
    *,
    units: bool = True,
    mib: int = 40_000,
    watts: float = 400.0,
) -> str:
    uuid = f"GPU-{index}aaa"
    pct, mi, w = (" %", " MiB", " W") if units else ("", "", "")
    u = util if util.startswith("[") else f"{util}{pct}"
    return (
        f"{t:%Y/%m/%d %H:%M:%S}.000, {index}, {uuid}, {H100}, {u}, {mib}{mi}, "
        f"81559{mi}, {watts:.2f}{w}"
    )


def crossing_week(*, units: bool = True) -> str:
    """GPU 0 from Sunday 23:00 to Monday 01:00, a reading a minute: 90% on Sunday, 30% on
    Monday. GPU 1 at 50% on Sunday, ten readings [N/A], and gone from Monday 00:00 on."""
    rows = [HEADER]
    for m in range(121):
        t = SUNDAY_23 + timedelta(minutes=m)
        # a reading covers the minute before it: 23:01..00:00 are Sunday's 60 minutes
        rows.append(line(t, 0, "90" if m <= 60 else "30", units=units))
        if m <= 60:
            rows.append(line(t, 1, "[N/A]" if 11 <= m <= 20 else "50", units=units))
    return "\n".join(rows) + "\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.fixture
def url(store_url: str) -> str:
    """A new store, SQLite and PostgreSQL."""
    return store_url


def week(url: str, label: str) -> object:
    now = datetime(2026, 12, 7, tzinfo=UTC)
    return compute(url, Request(week=label, tz=UTC), now=now).kpis.headline


@pytest.mark.parametrize("units", [True, False], ids=["units", "nounits"])
def test_a_run_across_the_week_edge_is_split_by_hand(tmp_path: Path, url: str, units: bool) -> None:
    log = write(tmp_path, "job-17.csv", crossing_week(units=units))
    done = import_nvsmi(url, [log], labels=Labels(team="nlp", price=PRICE))
    (r,) = done.records
    assert (r.source, r.gpu_source, r.gpu_model, r.gpu_count, r.team) == (
        "nvidia-smi",
        "nvidia-smi",
        "H100",
        2,
        "nlp",
    )
    assert (r.started_at, r.ended_at) == (
        SUNDAY_23.replace(tzinfo=UTC),
        (SUNDAY_23 + timedelta(hours=2)).replace(tzinfo=UTC),
    )
    assert r.gpu_hours == pytest.approx(3.0)  # GPU 0: 2 h, GPU 1: 1 h
    # W48: GPU 0 an hour at 90%, GPU 1 an hour of which 50 minutes known at 50%
    w48 = week(url, "2026-W48")
    assert w48.gpu_hours == pytest.approx(2.0)
    assert w48.utilization_pct == pytest.approx((90 * 60 + 50 * 50) / 110)
    assert w48.spend_usd == pytest.approx(2 * PRICE)
    assert w48.waste_usd == pytest.approx(PRICE * (1 - 50 / 85))  # GPU 0 is above the 85% target
    # W49: GPU 0's hour at 30%
    w49 = week(url, "2026-W49")
    assert (w49.gpu_hours, w49.utilization_pct) == (pytest.approx(1.0), pytest.approx(30.0))
    assert w49.spend_usd == pytest.approx(PRICE)
    assert w49.waste_usd == pytest.approx(PRICE * (1 - 30 / 85))
    with RunStore(url) as store:
        assert len(store.samples(run_ids=[r.id])) == 120 + 60  # a row per GPU-minute


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
def test_each_gpus_waste_is_judged_on_its_own_time(tmp_path: Path, url: str, fast: bool) -> None:
    """Two H100s ($3.85 per GPU-hour, the table's), a reading every 10 s from Tuesday 10:00.
    GPU 0: 6,000 s at 80%. GPU 1: 3,000 s, 35 idle minutes at 0% then 900 s at 60%.
    Waste per GPU on its own time: GPU 0 6000/3600 x 3.85 x (1 - 80/85) = 0.37745; GPU 1 idle
    in full 2100/3600 x 3.85 = 2.24583, and 900/3600 x 3.85 x (1 - 60/85) = 0.28309: $2.9064,
    in the run record and in the weekly report alike. (On the GPUs' mean time, 4,500 s each,
    the record said $3.2838: GPU 1's idle share 2100/4500 of a mean GPU's spend.)"""
    from tracker.prices import price_for

    price = price_for("H100")
    assert price is not None and price.usd_per_gpu_hour == 3.85
    start = datetime(2026, 11, 24, 10, 0)
    rows = [HEADER]
    for k in range(601):
        t = start + timedelta(seconds=10 * k)
        rows.append(line(t, 0, "80"))
        if k <= 300:  # a reading covers the 10 s before it: 0% over the first 2,100 s
            rows.append(line(t, 1, "0" if k <= 210 else "60"))
    log = write(tmp_path, "two.csv", "\n".join(rows) + "\n")
    done = import_nvsmi(url, [log], fast=fast)
    (r,) = done.records
    by_hand = 6000 / 3600 * 3.85 * (1 - 80 / 85) + 2100 / 3600 * 3.85
    by_hand += 900 / 3600 * 3.85 * (1 - 60 / 85)
    assert round(by_hand, 4) == 2.9064
    assert r.gpu_hours == pytest.approx(9000 / 3600)
    assert r.idle_usd == pytest.approx(2100 / 3600 * 3.85)
    assert r.waste_usd == pytest.approx(by_hand)
    with RunStore(url) as store:  # what `gpu-kpi runs` shows
        (stored,) = [x for x in SampleScans(store).read_runs()[0] if x.id == r.id]
    assert stored.waste_usd == pytest.approx(by_hand)
    now = datetime(2026, 12, 7, tzinfo=UTC)
    k = compute(url, Request(week="2026-W48", tz=UTC), now=now).kpis
    assert k.headline.waste_usd == pytest.approx(by_hand)
    assert k.runs.loc[k.runs["run_id"] == r.id, "waste_usd"].tolist() == [pytest.approx(by_hand)]


def test_importing_again_adds_nothing(tmp_path: Path, url: str) -> None:
    log = write(tmp_path, "job.csv", crossing_week())
    first = import_nvsmi(url, [log])
    again = import_nvsmi(url, [log])
    assert [r.id for r in again.records] == [r.id for r in first.records]
    with RunStore(url) as store:
        assert [r.id for r in store.list_runs()] == [first.records[0].id]
        assert len(store.samples()) == 180


def test_one_run_per_gpu(tmp_path: Path, url: str) -> None:
    done = import_nvsmi(url, [write(tmp_path, "node.csv", crossing_week())], per_gpu=True)
    assert sorted((r.name, r.gpu_count, round(r.gpu_hours, 6)) for r in done.records) == [
        ("node-GPU-0aaa", 1, 2.0),
        ("node-GPU-1aaa", 1, 1.0),
    ]
    assert len({r.id for r in done.records}) == 2


def test_a_gap_stays_a_gap(tmp_path: Path) -> None:
    """Readings every 10 s, none for 20 minutes in between: the reading after the gap covers
    nothing, so the run has 2 × 5 minutes of GPU-time, not 30."""
    t0 = datetime(2026, 11, 24, 9, 0)
    times = [t0 + timedelta(seconds=10 * i) for i in range(31)]
    times += [times[-1] + timedelta(minutes=20, seconds=10 * i) for i in range(31)]
    log = write(tmp_path, "gap.csv", "\n".join([HEADER, *(line(t, 0, "70") for t in times)]))
    (r,) = read_nvsmi([log]).records
    assert r.gpu_hours == pytest.approx(600 / 3600)
    assert r.ended_at == (times[-1]).replace(tzinfo=UTC)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
@pytest.mark.parametrize(
    "apart", [None, timedelta(days=30)], ids=["one-reading", "two-30-days-apart"]
)
def test_a_log_whose_readings_cover_no_time_is_skipped_and_named(
    tmp_path: Path, fast: bool, apart: timedelta | None
) -> None:
    """Two readings 30 days apart imported as 720 GPU-h: their one interval was the median,
    which made the default max gap 90 days. No reading covers more than a day now: the second
    covers nothing, as the first, so the run has no GPU-time, and is skipped and named (as a
    log of one reading is: it stopped the whole import before)."""
    rows = [HEADER, line(SUNDAY_23, 0, "50")]
    if apart is not None:
        rows.append(line(SUNDAY_23 + apart, 0, "50"))
    log = write(tmp_path, "two.csv", "\n".join(rows) + "\n")
    done = read_nvsmi([log], fast=fast)
    assert (done.records, done.samples) == ([], [])
    assert done.skipped == {NO_GPU_TIME: ["two"]}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
@pytest.mark.parametrize(
    "apart", [timedelta(days=30), timedelta(days=50 * 365)], ids=["30-days", "50-years"]
)
def test_readings_months_apart_are_gaps_however_few_there_are(
    tmp_path: Path, fast: bool, apart: timedelta
) -> None:
    """Read hourly (cron) for two hours, then once 30 days on and once 30 days after that:
    the intervals' median (15 days) made the default gap 45 days and the run 1,442 GPU-h. A
    reading covers at most a day: 2 GPU-h, the two hours, 120 minute rows. 50 years apart, the
    import split a century into minutes and never ended; its work follows the readings now."""
    times = [SUNDAY_23 + timedelta(hours=h) for h in range(3)]
    times += [times[-1] + apart, times[-1] + 2 * apart]
    log = write(tmp_path, "far.csv", "\n".join([HEADER, *(line(t, 0, "60") for t in times)]))
    done = read_nvsmi([log], fast=fast)
    (r,) = done.records
    assert r.gpu_hours == pytest.approx(2.0)
    assert r.util_pct == pytest.approx(60.0)
    assert r.cost_usd == pytest.approx(2 * 3.85)  # the table's H100
    assert (r.started_at, r.ended_at) == (
        SUNDAY_23.replace(tzinfo=UTC),
        times[-1].replace(tzinfo=UTC),
    )
    assert len(done.samples) == 120


def test_a_max_gap_over_a_day_is_refused(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--max-gap 1e9`` made two readings 30 days apart 720 GPU-h (and two 50 years apart a
    loop over every minute between): no reading covers more than a day."""
    far = line(SUNDAY_23 + timedelta(days=30), 0, "50")
    log = write(tmp_path, "two.csv", f"{HEADER}\n{line(SUNDAY_23, 0, '50')}\n{far}\n")
    assert main(["import", "nvidia-smi", str(log), "--max-gap", "1e9", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err == (
        "gpu-kpi: error: --max-gap 1e+09: seconds, more than 0 and at most 86,400 (a day): "
        "no reading covers more\n"
    )
    assert main(["import", "nvidia-smi", str(log), "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"skipped 1 run(s), {NO_GPU_TIME}: two",
        f"imported 0 run(s), 0.0 GPU-h, 0 minute rows into {out[-1].rsplit(' into ', 1)[1]}",
    ]
    with RunStore(url) as store:
        assert store.list_runs() == []


@pytest.mark.parametrize("stamp", ["9999/12/31 23:00:00.000", "10000/01/01 00:00:00.000"])
def test_a_reading_dated_past_9998_is_left_out_and_counted(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str], stamp: str
) -> None:
    """A reading at 9999-12-31 stopped the import ("outside the years 1970-9998", exit 2) and
    one in the year 10000 was a "bad timestamp": no datetime holds either as a time a GPU was
    read. Such a reading is a bad row now: left out, counted and named by line; the rest of the
    log goes in with the figures it has without that row (3 GPU-h, 180 minute rows)."""
    rows = crossing_week().splitlines()
    bad = line(SUNDAY_23, 0, "99").replace(f"{SUNDAY_23:%Y/%m/%d %H:%M:%S}.000", stamp)
    rows[3:3] = [bad, bad]  # lines 4 and 5, between GPU 1's first reading and GPU 0's second
    log = write(tmp_path, "job.csv", "\n".join(rows) + "\n")
    assert main(["import", "nvidia-smi", str(log), "--store", url]) == 0
    out = capsys.readouterr().out
    assert (
        "skipped 2 reading(s) whose time is no time (outside the years 1970-9998): "
        f"{log}:4, {log}:5\n"
    ) in out
    assert "imported 1 run(s), 3.0 GPU-h, 180 minute rows" in out


def test_local_timestamps_across_the_change_to_winter_time(tmp_path: Path) -> None:
    """Berlin, Sunday 25 October 2026: 02:00-03:00 CEST, then 02:00-03:00 CET again. A
    reading every 5 minutes from 01:30 to 03:30 local is 3 hours of GPU time, not 2."""
    naive = [datetime(2026, 10, 25, 1, 30) + timedelta(minutes=5 * i) for i in range(18)]
    naive += [datetime(2026, 10, 25, 2, 0) + timedelta(minutes=5 * i) for i in range(19)]
    log = write(tmp_path, "dst.csv", "\n".join([HEADER, *(line(t, 0, "60") for t in naive)]))
    (r,) = read_nvsmi([log], tz=ZoneInfo("Europe/Berlin")).records
    assert r.started_at == datetime(2026, 10, 24, 23, 30, tzinfo=UTC)  # 01:30 CEST
    assert r.ended_at == datetime(2026, 10, 25, 2, 30, tzinfo=UTC)  # 03:30 CET
    assert r.gpu_hours == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("timestamp, gpu, load\n2026/11/23 10:00:00, 0, 5\n", ":1:", "not an nvidia-smi"),
        (
            f"{HEADER}\n{line(SUNDAY_23, 0, '50')}\n2026/11/29 23:01:00.000, 0, GPU-0aaa, {H100}, "
            "lots %, 1 MiB, 2 MiB, 3 W\n",
            ":3:",
            "bad utilization.gpu value 'lots %' (a number in %)",
        ),
        (f"{HEADER}\n{line(SUNDAY_23, 0, '150')}\n", ":2:", "'150 %' (% from 0 to 100)"),
        (f"{HEADER}\n{line(SUNDAY_23, 0, '-5')}\n", ":2:", "'-5 %' (% from 0 to 100)"),
        (
            f"{HEADER}\n{line(SUNDAY_23, 0, '50', watts=-50)}\n",
            ":2:",
            "power.draw value '-50.00 W'",
        ),
        (
            f"{HEADER}\n{line(SUNDAY_23, 0, '50').replace('400.00 W', '1e400 W')}\n",
            ":2:",
            "power.draw value '1e400 W'",
        ),
        (  # before: imported, then the whole run left out of every report
            f"{HEADER}\n{line(SUNDAY_23, 0, '50').replace('400.00 W', '1e300 W')}\n",
            ":2:",
            "bad power.draw value '1e300 W' (W from 0 to 100000)",
        ),
        (
            f"{HEADER}\n{line(SUNDAY_23, 0, '50').replace('50 %', '50 W')}\n",
            ":2:",
            "'50 W' (a number in %)",
        ),
        (
            f"{HEADER}\n{line(SUNDAY_23, 0, '50').replace('GPU-0aaa', '[N/A]')}\n",
            ":2:",
            "no GPU uuid ('[N/A]')",
        ),
        (
            f"{HEADER}\n{line(SUNDAY_23, 0, '50')}\n{line(SUNDAY_23, 0, '90')}\n",
            ":3:",
            "GPU GPU-0aaa has a second reading at 2026-11-29 23:00:00",
        ),
        (  # before: named the file's last line, where the quoted cell ran out
            f"{HEADER}\n{line(SUNDAY_23, 0, '50')}\n"
            + line(SUNDAY_23 + timedelta(minutes=1), 0, "50").replace(", NVIDIA", ',"NVIDIA')
            + "\n"
            + "".join(f"{line(SUNDAY_23 + timedelta(minutes=m), 0, '50')}\n" for m in range(2, 40)),
            ":3:",
            "a quote opened on this line is not closed on it",
        ),
        ("\0" * 70_000, ":1:", "a line of over 65,536 characters"),
        (f"{HEADER}\n2026/11/29 23:00:00.000, 0, GPU-0aaa\n", ":2:", "expected 8 cells, got 3"),
        ("", "", "empty nvidia-smi log"),
    ],
)
def test_bad_input_names_file_and_line_and_imports_nothing(
    tmp_path: Path,
    url: str,
    capsys: pytest.CaptureFixture[str],
    text: str,
    where: str,
    message: str,
) -> None:
    good = write(tmp_path, "good.csv", crossing_week())
    bad = write(tmp_path, "bad.csv", text)
    code = main(["import", "nvidia-smi", str(good), str(bad), "--store", url])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"gpu-kpi: error: {bad}{where}") and message in err
    assert err.count("\n") == 1
    with RunStore(url) as store:
        assert store.list_runs() == [] and store.samples() == []  # not even the good file


def test_timestamps_that_go_back(tmp_path: Path) -> None:
    rows = [HEADER, line(SUNDAY_23, 0, "50"), line(SUNDAY_23 - timedelta(hours=3), 0, "50")]
    with pytest.raises(
        ImportFailed,
        match=r"back\.csv:3: GPU GPU-0aaa has a reading back at "
        r"2026-11-29 20:00:00",
    ):
        read_nvsmi([write(tmp_path, "back.csv", "\n".join(rows))])


def test_a_time_the_clocks_skipped_is_a_wrong_zone(tmp_path: Path) -> None:
    rows = [
        HEADER,
        line(datetime(2026, 3, 29, 1, 50), 0, "50"),
        line(datetime(2026, 3, 29, 2, 30), 0, "50"),
    ]
    with pytest.raises(
        ImportFailed,
        match=r"spring\.csv:3: 2026-03-29 02:30:00 does not exist in "
        r"Europe/Berlin \(the clocks skipped it\): is --tz right",
    ):
        read_nvsmi([write(tmp_path, "spring.csv", "\n".join(rows))], tz=ZoneInfo("Europe/Berlin"))


def test_the_repeated_hour_is_decided_for_the_whole_file(tmp_path: Path) -> None:
    """GPU 1 logs only from the second pass of 02:10 on: file order, not its own, says which."""
    first = [datetime(2026, 10, 25, 1, 50) + timedelta(minutes=10 * i) for i in range(7)]  # ..02:50
    second = [datetime(2026, 10, 25, 2, 0) + timedelta(minutes=10 * i) for i in range(8)]  # ..03:10
    rows = [HEADER, *(line(t, 0, "60") for t in first)]
    for t in second:
        rows.append(line(t, 0, "60"))
        if t.minute >= 10 or t.hour == 3:
            rows.append(line(t, 1, "60"))
    (r,) = read_nvsmi(
        [write(tmp_path, "fall.csv", "\n".join(rows))], tz=ZoneInfo("Europe/Berlin"), per_gpu=False
    ).records
    assert r.started_at == datetime(2026, 10, 24, 23, 50, tzinfo=UTC)
    # GPU 0: 01:50 CEST to 03:10 CET = 2 h 20 min; GPU 1: 02:10 CET to 03:10 CET = 1 h
    assert r.gpu_hours == pytest.approx(140 / 60 + 1.0)


def test_a_bom_and_a_repeated_header_are_read(tmp_path: Path) -> None:
    body = crossing_week().split("\n", 1)[1]
    text = (
        "\ufeff"
        + HEADER
        + "\n"
        + body.replace(
            line(SUNDAY_23 + timedelta(minutes=30), 0, "90"),
            HEADER + "\n" + line(SUNDAY_23 + timedelta(minutes=30), 0, "90"),
        )
    )
    (r,) = read_nvsmi([write(tmp_path, "bom.csv", text)]).records
    assert r.gpu_hours == pytest.approx(3.0)


def test_gpus_of_different_models_need_per_gpu_or_a_model(tmp_path: Path) -> None:
    rows = [
        HEADER,
        line(SUNDAY_23, 0, "50"),
        line(SUNDAY_23 + timedelta(minutes=1), 0, "50"),
        line(SUNDAY_23, 1, "50").replace(H100, "NVIDIA A100-SXM4-80GB"),
        line(SUNDAY_23 + timedelta(minutes=1), 1, "50").replace(H100, "NVIDIA A100-SXM4-80GB"),
    ]
    log = write(tmp_path, "mixed.csv", "\n".join(rows))
    with pytest.raises(
        ImportFailed,
        match=r"mixed\.csv: GPUs of different models \(A100-80GB, "
        r"H100\) in one run: import with --per-gpu",
    ):
        read_nvsmi([log])
    assert sorted(r.gpu_model for r in read_nvsmi([log], per_gpu=True).records) == [
        "A100-80GB",
        "H100",
    ]
    (r,) = read_nvsmi([log], labels=Labels(gpu_model="H100")).records
    assert (r.gpu_model, r.gpu_count) == ("H100", 2)


def test_a_second_import_replaces_the_first_and_never_counts_a_gpu_twice(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write(tmp_path, "job.csv", crossing_week())
    import_nvsmi(url, [log], tz=ZoneInfo("Europe/Berlin"))  # the wrong zone first
    (r,) = import_nvsmi(url, [log]).records  # then UTC: the same run, its minutes moved
    with RunStore(url) as store:
        assert [x.id for x in store.list_runs()] == [r.id]
        assert len(store.samples()) == 180 and store.samples()[0].minute == r.started_at
    assert week(url, "2026-W48").gpu_hours == pytest.approx(2.0)
    # --per-gpu makes other runs of the same GPU-time: refused, then --replace drops the first
    assert main(["import", "nvidia-smi", str(log), "--per-gpu", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "job-GPU-0aaa: its GPUs already have minutes in that time from run 'job' " in err
    assert err.rstrip().endswith("a GPU's time counts once; --replace imports over it")
    assert main(["import", "nvidia-smi", str(log), "--per-gpu", "--replace", "--store", url]) == 0
    assert (
        "replaced 1 earlier import(s) whole (--replace): job (3.00 GPU-h)"
        in capsys.readouterr().out
    )
    with RunStore(url) as store:
        assert sorted(x.name for x in store.list_runs()) == ["job-GPU-0aaa", "job-GPU-1aaa"]
        assert len(store.samples()) == 180
    assert week(url, "2026-W48").gpu_hours == pytest.approx(2.0)


def test_one_gpu_in_two_logs_of_one_import_counts_once(tmp_path: Path, url: str) -> None:
    """The same GPU logged twice at once (two ops scripts), from 10 s apart: the second log's
    run is skipped and named, the GPU's hour counted once."""
    a = write(tmp_path, "a.csv", crossing_week())
    text = crossing_week().replace(":00.000, ", ":10.000, ")
    b = write(tmp_path, "b.csv", text)
    done = import_nvsmi(url, [a, b])
    assert [r.name for r in done.records] == ["a"] and done.skipped == {SHARED: ["b"]}
    assert week(url, "2026-W48").gpu_hours == pytest.approx(2.0)


def test_a_tracked_run_on_the_same_gpu_is_never_replaced(tmp_path: Path, url: str) -> None:
    from fakes import run_record

    from tracker.record import MinuteSample

    with RunStore(url) as store:
        store.upsert_run(run_record("tracked", SUNDAY_23.replace(tzinfo=UTC), 1))
        store.upsert_samples(
            [
                MinuteSample(
                    run_id="tracked",
                    gpu="GPU-1aaa",
                    util_pct=10.0,
                    minute=(SUNDAY_23 + timedelta(minutes=5)).replace(tzinfo=UTC),
                )
            ]
        )
    log = write(tmp_path, "ops.csv", crossing_week())
    later = MinuteSample(
        run_id="later",
        gpu="GPU-1aaa",
        util_pct=10.0,  # after GPU 1 left
        minute=(SUNDAY_23 + timedelta(minutes=90)).replace(tzinfo=UTC),
    )
    with RunStore(url) as store:
        store.put([run_record("later", later.minute, 1)], [later])
    # the tracked run's minute counts: the log's run is skipped and named, even with --replace
    done = import_nvsmi(url, [log], replace=True)
    assert (done.records, done.skipped) == ([], {OVERLAPS: ["ops"]})
    with RunStore(url) as store:
        assert sorted(x.id for x in store.list_runs()) == ["later", "tracked"]
    with RunStore(url) as store:  # without the overlapping run, the import goes in beside both
        store.put([], [], drop=["tracked"])
    (r,) = import_nvsmi(url, [log]).records
    with RunStore(url) as store:
        assert sorted(x.id for x in store.list_runs()) == sorted(["later", r.id])


def test_the_same_log_twice_in_one_command(tmp_path: Path) -> None:
    log = write(tmp_path, "job.csv", crossing_week())
    assert len(read_nvsmi([log, tmp_path / "." / "job.csv"]).records) == 1
    copy = write(tmp_path, "copy.csv", crossing_week())
    with pytest.raises(
        ImportFailed,
        match=r"copy\.csv: the same GPUs and first reading as "
        r".*job\.csv: the same log twice\?",
    ):
        read_nvsmi([log, copy])


def test_the_command_prints_the_runs(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write(tmp_path, "job-17.csv", crossing_week())
    code = main(
        [
            "import",
            "nvidia-smi",
            str(log),
            "--store",
            url,
            "--team",
            "nlp",
            "--project",
            "llm",
            "--price",
            "2",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "job-17" in out and "2xH100" in out and "nlp" in out
    assert "imported 1 run(s), 3.0 GPU-h, 180 minute rows into " in out
    assert "gpu_kpi:gpu_kpi@" not in out  # the test server's password is masked
    assert main(["import", "nvidia-smi", str(log), "--store", url, "--price", "-1"]) == 2
    assert "--price -1: USD per GPU-hour" in capsys.readouterr().err


def test_idle_minutes_on_either_side_of_a_gap_are_no_idle_stretch(tmp_path: Path, url: str) -> None:
    """16 minutes at 0%, five hours without a reading, 16 more at 0%: no 30-minute stretch of
    minutes with data, so nothing idle, in the run record and in the report alike."""
    t0 = datetime(2026, 11, 24, 10, 0)
    times = [t0 + timedelta(minutes=m) for m in range(17)]
    times += [t0 + timedelta(hours=5, minutes=m) for m in range(17)]
    log = write(tmp_path, "gap.csv", "\n".join([HEADER, *(line(t, 0, "0") for t in times)]))
    (r,) = import_nvsmi(url, [log], labels=Labels(price=60.0)).records
    assert r.gpu_hours == pytest.approx(32 / 60)
    assert r.idle_usd == 0.0
    w48 = week(url, "2026-W48")
    assert (w48.gpu_hours, w48.idle_usd) == (pytest.approx(32 / 60), 0.0)
    # the same with the minutes together: one 32-minute stretch, all of it idle
    together = [t0 + timedelta(minutes=m) for m in range(33)]
    log = write(tmp_path, "nogap.csv", "\n".join([HEADER, *(line(t, 1, "0") for t in together)]))
    (r,) = read_nvsmi([log], labels=Labels(price=60.0)).records
    assert r.idle_usd == pytest.approx(32.0)


@pytest.mark.usefixtures("blank_charts")
def test_the_report_says_where_its_runs_came_from(tmp_path: Path, url: str) -> None:
    from fakes import run_record

    from reports.build import render

    with RunStore(url) as store:  # a tracked summary run: 4 GPU-hours on Tuesday of W48
        store.upsert_run(run_record("tracked", datetime(2026, 11, 24, 9, tzinfo=UTC), 4))
    import_nvsmi(url, [write(tmp_path, "ops.csv", crossing_week())], labels=Labels(price=PRICE))
    req = Request(week="2026-W48", tz=UTC, formats=("html", "json"))
    k = compute(url, req, now=datetime(2026, 12, 7, tzinfo=UTC)).kpis
    by = k.by["source"].set_index("source")
    assert by.loc["nvidia-smi", ["gpu_hours", "runs"]].tolist() == [pytest.approx(2.0), 1]
    assert by.loc["tracker", ["gpu_hours", "runs"]].tolist() == [pytest.approx(4.0), 1]
    files = render(k, req)
    assert {r["source"]: r["gpu_hours"] for r in json.loads(files["json"])["by_source"]} == {
        "nvidia-smi": pytest.approx(2.0),
        "tracker": pytest.approx(4.0),
    }
    assert b">Source<" in files["html"] and b">nvidia-smi<" in files["html"]


def test_one_gpu_at_work_and_one_idle_all_run_is_imbalanced(tmp_path: Path) -> None:
    """Two H100s for an hour at $2: GPU 0 at 91%, GPU 1 at 0% (with memory known, 5% in use).
    The run is "imbalanced", not "46%, below-target": 1 of 2 GPUs idle, $2.00 of its $4.00."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 24, 10, 0)
    rows = [HEADER]
    for m in range(61):
        t = start + timedelta(minutes=m)
        rows += [line(t, 0, "91"), line(t, 1, "0", mib=4_000, watts=70.0)]
    log = write(tmp_path, "ddp-wrong-launcher.csv", "\n".join(rows) + "\n")
    assert main(["import", "nvidia-smi", str(log), "--store", url, "--price", "2"]) == 0
    with RunStore(url) as store:
        (run,) = store.list_runs()
    assert run.cost_usd == pytest.approx(4.0)
    assert run.util_pct == pytest.approx(45.5)
    assert run.verdict == "imbalanced"
    assert run.advice is not None and "Request only the GPUs it uses" in run.advice


def test_a_gpu_idle_most_of_the_run_is_imbalanced_not_a_small_batch(tmp_path: Path) -> None:
    """Two GPUs for two hours at $2: GPU 0 at 83% all along, GPU 1 idle (0%) for its first 70
    minutes, then at 83%. Not "small-batch: raise the batch size": most of the waste is GPU 1's
    idle time, and the verdict names it with its dollars."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 24, 10, 0)
    rows = [HEADER]
    for m in range(121):
        t = start + timedelta(minutes=m)
        rows += [line(t, 0, "83"), line(t, 1, "0" if m < 70 else "83")]
    log = write(tmp_path, "late-rank.csv", "\n".join(rows) + "\n")
    assert main(["import", "nvidia-smi", str(log), "--store", url, "--price", "2"]) == 0
    with RunStore(url) as store:
        (run,) = store.list_runs()
    assert run.verdict == "imbalanced", run.verdict
    assert run.idle_usd == pytest.approx(2 * 70 / 60, abs=0.05)  # GPU 1's 70 idle minutes
    assert run.advice is not None and "Request only the GPUs it uses" in run.advice


@pytest.mark.usefixtures("blank_charts")
def test_unpriced_gpu_time_is_never_shown_as_free(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Two hours on a GPU no table prices ("NVIDIA Graphics Device": a board the driver does
    not name), imported without --price. The import says to set --price (the option of the
    command run); the report shows spend "n/a" with the unpriced GPU-hours and their model,
    never "$0.00", in the HTML, the email's text and its subject."""
    import email
    import email.policy

    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 24, 10, 0)
    rows = [HEADER]
    for m in range(121):
        rows.append(
            line(start + timedelta(minutes=m), 0, "50").replace(H100, "NVIDIA Graphics Device")
        )
    log = write(tmp_path, "lab-box.csv", "\n".join(rows) + "\n")
    with caplog.at_level("WARNING", logger="gpu_kpi"):
        assert main(["import", "nvidia-smi", str(log), "--store", url]) == 0
    assert any("set --price or [prices] in the config" in m for m in caplog.messages)
    out = tmp_path / "out"
    args = ["report", "--store", url, "--week", "2026-W48", "--out", str(out)]
    assert main([*args, "--format", "html,email,json"]) == 0
    capsys.readouterr()
    page = (out / "2026-W48.html").read_text()
    assert "$0.00" not in page
    assert "2.0 GPU-h of NVIDIA Graphics Device unpriced" in page
    assert "Cost and waste: n/a" in page
    msg = email.message_from_bytes((out / "2026-W48.eml").read_bytes(), policy=email.policy.default)
    assert msg["Subject"] == "GPU efficiency 2026-W48: spend n/a (unpriced), 50.0% utilization"
    text = msg.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert "$0.00" not in text
    spend = next(line for line in text.splitlines() if line.startswith("Spend"))
    assert spend.split()[1] == "n/a"
    data = json.loads((out / "2026-W48.json").read_text())
    assert data["headline"]["unpriced_gpu_hours"] == pytest.approx(2.0)


def test_an_83_percent_gpu_without_memory_is_below_target_not_small_batch(tmp_path: Path) -> None:
    """A log without memory columns: an RTX 4090 busy 83% for an hour. Unknown memory is not
    small memory: "below-target" (target 85%) saying what was not measured, never "raise the
    batch size". Priced by the table's RTX 4090 row: $0.39."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = datetime(2026, 11, 24, 10, 0)
    rows = ["timestamp, index, uuid, name, utilization.gpu [%]"]
    for m in range(61):
        t = start + timedelta(minutes=m)
        rows.append(f"{t:%Y/%m/%d %H:%M:%S}.000, 0, GPU-4090, NVIDIA GeForce RTX 4090, 83 %")
    log = write(tmp_path, "workstation.csv", "\n".join(rows) + "\n")
    assert main(["import", "nvidia-smi", str(log), "--store", url]) == 0
    with RunStore(url) as store:
        (run,) = store.list_runs()
    assert run.verdict == "below-target"
    assert run.advice is not None and "batch size" not in run.advice
    assert run.cost_usd == pytest.approx(0.39)


def test_a_huge_file_that_is_no_log_is_refused_at_its_first_line_without_reading_it(
    tmp_path: Path,
) -> None:
    """A 2 GB junk file took 4.3 GB of memory before it was refused (read whole for the fast
    path). Now its first bytes send it to the streaming path, which stops at line 1: a 1.5 GiB
    (sparse) file of NULs costs this process far less than its size."""
    from clirun import python_c

    junk = tmp_path / "junk.csv"
    with junk.open("wb") as f:
        f.truncate(3 << 29)  # 1.5 GiB of NULs, no disk
    code = (
        "import resource, sys\n"
        "from reports.cli import main\n"
        f"code = main(['import', 'nvidia-smi', {str(junk)!r}, '--store', "
        f"{'sqlite:///' + str(tmp_path / 'r.db')!r}])\n"
        "print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    p = python_c(code)  # the program prints main()'s status and exits 0
    status, maxrss_kib = (int(x) for x in p.stdout.split())
    assert status == 2, p.stderr
    assert f"{junk}:1: a line of over 65,536 characters" in p.stderr
    assert maxrss_kib < 1 << 20  # under 1 GiB: the file was never read whole


REAL_MIG = Path(__file__).resolve().parents[2] / "data" / "real" / "nvidia-smi"


def test_a_real_log_of_a_gpu_split_by_mig_is_not_measured_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """nvidia-smi's own CSV of an H100 split into MIG instances (driver 590.48.01: two rows 17 s
    apart, idle then under load, utilization ``[N/A]``, ``mig.mode.current`` ``Enabled``): its
    time is held and not measured (never 0%), and the import says why and what measures MIG."""
    import csv

    log = REAL_MIG / "h100-mig-query-gpu-590.csv"
    rows = list(csv.reader(log.read_text().splitlines(), skipinitialspace=True))
    head, times = rows[0], [r[0] for r in rows[1:]]
    assert rows[1][head.index("utilization.gpu [%]")] == "[N/A]"
    first, last = (datetime.strptime(t, "%Y/%m/%d %H:%M:%S.%f") for t in times)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["import", "nvidia-smi", str(log), "--store", url]) == 0
    out = capsys.readouterr().out
    assert "MIG enabled (h100-mig-query-gpu-590.csv): nvidia-smi gives a GPU split" in out
    with RunStore(url) as store:
        (run,) = store.list_runs()
    assert (run.gpu_model, run.util_pct, run.mig_profile) == ("H100", None, None)
    assert run.gpu_hours == pytest.approx((last - first).total_seconds() / 3600)
