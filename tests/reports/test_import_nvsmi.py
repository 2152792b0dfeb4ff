"""``gpu-kpi import nvidia-smi``: hand-written nvidia-smi logs into a real store, then the weekly
report's figures, computed by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from reports.build import Request, compute
from reports.cli import main
from reports.errors import ImportFailed
from reports.imports.nvsmi import Labels, import_nvsmi, read_nvsmi
from tracker.store import RunStore

HEADER = ("timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], "
          "memory.total [MiB], power.draw [W]")
H100 = "NVIDIA H100 80GB HBM3"
SUNDAY_23 = datetime(2026, 11, 29, 23, 0)  # the last hour of 2026-W48 (UTC)
PRICE = 2.0  # USD per GPU-hour, given on the command line


def line(t: datetime, index: int, util: str, *, units: bool = True, mib: int = 40_000,
         watts: float = 400.0) -> str:
    uuid = f"GPU-{index}aaa"
    pct, mi, w = (" %", " MiB", " W") if units else ("", "", "")
    u = util if util.startswith("[") else f"{util}{pct}"
    return (f"{t:%Y/%m/%d %H:%M:%S}.000, {index}, {uuid}, {H100}, {u}, {mib}{mi}, "
            f"81559{mi}, {watts:.2f}{w}")


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
def test_a_run_across_the_week_edge_is_split_by_hand(tmp_path: Path, url: str,
                                                     units: bool) -> None:
    log = write(tmp_path, "job-17.csv", crossing_week(units=units))
    done = import_nvsmi(url, [log], labels=Labels(team="nlp", price=PRICE))
    (r,) = done.records
    assert (r.source, r.gpu_source, r.gpu_model, r.gpu_count, r.team) == (
        "nvidia-smi", "nvidia-smi", "H100", 2, "nlp")
    assert (r.started_at, r.ended_at) == (SUNDAY_23.replace(tzinfo=UTC),
                                          (SUNDAY_23 + timedelta(hours=2)).replace(tzinfo=UTC))
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
        ("node-GPU-0aaa", 1, 2.0), ("node-GPU-1aaa", 1, 1.0)]
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


@pytest.mark.parametrize(("text", "where", "message"), [
    ("timestamp, gpu, load\n2026/11/23 10:00:00, 0, 5\n", ":1:", "not an nvidia-smi"),
    (f"{HEADER}\n{line(SUNDAY_23, 0, '50')}\n2026/11/29 23:01:00.000, 0, GPU-0aaa, {H100}, "
     "lots %, 1 MiB, 2 MiB, 3 W\n", ":3:", "bad util_pct value 'lots %'"),
    (f"{HEADER}\n2026/11/29 23:00:00.000, 0, GPU-0aaa\n", ":2:", "expected 8 cells, got 3"),
    ("", "", "empty nvidia-smi log"),
])
def test_bad_input_names_file_and_line_and_imports_nothing(
        tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str], text: str, where: str,
        message: str) -> None:
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
    with pytest.raises(ImportFailed, match=r"back\.csv: timestamps of GPU GPU-0aaa go back"):
        read_nvsmi([write(tmp_path, "back.csv", "\n".join(rows))])


def test_the_command_prints_the_runs(tmp_path: Path, url: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    log = write(tmp_path, "job-17.csv", crossing_week())
    code = main(["import", "nvidia-smi", str(log), "--store", url, "--team", "nlp",
                 "--project", "llm", "--price", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "job-17" in out and "2xH100" in out and "nlp" in out
    assert "imported 1 run(s), 180 minute rows into " in out
    assert "gpu_kpi:gpu_kpi@" not in out  # the test server's password is masked
    assert main(["import", "nvidia-smi", str(log), "--store", url, "--price", "-1"]) == 2
    assert "--price -1: USD per GPU-hour" in capsys.readouterr().err
