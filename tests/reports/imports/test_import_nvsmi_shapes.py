"""nvidia-smi logs in the shapes real logging scripts write (tests/data/real/SOURCES.md names the
script each mirrors), imported through ``gpu-kpi import``; each run's GPU-hours and utilization
recomputed from the file with pandas: a reading covers the time since the GPU's previous one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from reports.cli import main
from tracker.store import RunStore

REAL = Path(__file__).resolve().parents[2] / "data" / "real" / "nvidia-smi"


def by_pandas(
    path: Path, gpu: str | None, *, names: list[str] | None = None
) -> tuple[float, float]:
    """(GPU-hours, time-weighted utilization %) of a log, recomputed independently."""
    frame = pd.read_csv(path, skipinitialspace=True, names=names, header=0)
    frame.columns = [c.split(" [")[0] for c in frame.columns]
    frame["t"] = pd.to_datetime(frame["timestamp"], format="%Y/%m/%d %H:%M:%S.%f")
    frame["u"] = frame["utilization.gpu"].str.rstrip(" %").astype(float)
    seconds = used = 0.0
    for _, g in frame.groupby(gpu) if gpu else [(None, frame)]:
        dt = g["t"].diff().dt.total_seconds().iloc[1:]
        seconds += float(dt.sum())
        used += float((dt * g["u"].iloc[1:]).sum())
    return seconds / 3600, used / seconds


def imported(url: str) -> object:
    with RunStore(url) as store:
        (run,) = store.list_runs()
    return run


def test_gpus_told_apart_by_their_pci_bus_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = REAL / "gpulog-pci-bus-id.csv"
    url = f"sqlite:///{tmp_path}/runs.db"
    assert main(["import", "nvidia-smi", str(log), "--store", url]) == 2
    err = capsys.readouterr().err
    assert "no GPU model in the log (no 'name' column): say it with --gpu-model" in err
    assert err.count("\n") == 1
    assert main(["import", "nvidia-smi", str(log), "--store", url, "--gpu-model", "A100-80GB"]) == 0
    assert "imported 1 run(s)" in capsys.readouterr().out
    run = imported(url)
    hours, util = by_pandas(log, "pci.bus_id")
    assert run.gpu_count == 2 and run.gpu_model == "A100-80GB"  # type: ignore[attr-defined]
    assert run.gpu_hours == pytest.approx(hours, rel=1e-9)  # type: ignore[attr-defined]
    assert run.util_pct == pytest.approx(util, rel=1e-9) == pytest.approx(60.0)  # type: ignore[attr-defined]


def test_a_log_without_uuid_or_index_is_one_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = REAL / "nvidia-query-no-uuid.csv"
    url = f"sqlite:///{tmp_path}/runs.db"
    assert main(["import", "nvidia-smi", str(log), "--store", url]) == 0
    out = capsys.readouterr().out
    assert (
        "one GPU per log (no uuid, pci.bus_id, serial or index column): nvidia-query-no-uuid" in out
    )
    run = imported(url)
    hours, util = by_pandas(log, None)
    assert run.gpu_count == 1 and run.gpu_model == "V100"  # type: ignore[attr-defined]
    assert run.gpu_hours == pytest.approx(hours, rel=1e-9)  # type: ignore[attr-defined]
    assert run.util_pct == pytest.approx(util, rel=1e-9)  # type: ignore[attr-defined]
    assert run.cost_usd == pytest.approx(hours * 3.06)  # the table's V100 row  # type: ignore[attr-defined]


def test_two_gpus_in_one_log_with_nothing_to_tell_them_apart(tmp_path: Path) -> None:
    text = (
        "timestamp, name, utilization.gpu [%]\n"
        "2026/11/24 09:00:00.000, NVIDIA H100 80GB HBM3, 50 %\n"
        "2026/11/24 09:00:00.000, NVIDIA H100 80GB HBM3, 10 %\n"
    )
    log = tmp_path / "two.csv"
    log.write_text(text)
    from reports.errors import ImportFailed
    from reports.imports.nvsmi import read_nvsmi

    with pytest.raises(
        ImportFailed, match=r"two.csv:3: two readings at .* add index \(or uuid\) to --query-gpu"
    ):
        read_nvsmi([log])


def test_a_noheader_log_read_with_its_query_gpu_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = REAL / "noheader-with-script-header.csv"
    url = f"sqlite:///{tmp_path}/runs.db"
    query = "timestamp,index,power.draw,utilization.gpu,utilization.memory,memory.used"
    assert main(["import", "nvidia-smi", str(log), "--store", url, "--gpu-model", "H100"]) == 2
    assert "a log without a header: give --query-gpu LIST" in capsys.readouterr().err
    args = ["import", "nvidia-smi", str(log), "--store", url, "--gpu-model", "H100"]
    assert main([*args, "--query-gpu", query]) == 0
    run = imported(url)
    names = query.split(",")
    hours, util = by_pandas(log, "index", names=names)
    assert run.gpu_hours == pytest.approx(hours, rel=1e-9)  # type: ignore[attr-defined]
    assert run.util_pct == pytest.approx(util) == pytest.approx(60.0)  # type: ignore[attr-defined]
    # 250.12 W over the covered seconds
    assert run.energy_kwh == pytest.approx(250.12 * hours / 1000, rel=1e-6)  # type: ignore[attr-defined]
    assert main([*args, "--query-gpu", "index,power.draw"]) == 2
    assert "--query-gpu 'index,power.draw': the list given to nvidia-smi" in capsys.readouterr().err


def test_dmon_output_with_dates_and_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = REAL / "dmon-DT-pucm.txt"
    url = f"sqlite:///{tmp_path}/runs.db"
    assert main(["import", "nvidia-smi", str(log), "--store", url, "--gpu-model", "H100"]) == 0
    run = imported(url)
    frame = pd.read_csv(log, sep=r"\s+", comment="#", header=None).iloc[:, [0, 1, 2, 3, 6]]
    frame.columns = ["date", "time", "gpu", "pwr", "sm"]
    frame["t"] = pd.to_datetime(frame["date"].astype(str) + " " + frame["time"])
    seconds = used = joules = 0.0
    for _, g in frame.groupby("gpu"):
        dt = g["t"].diff().dt.total_seconds().iloc[1:]
        seconds += float(dt.sum())
        used += float((dt * g["sm"].iloc[1:]).sum())
        joules += float((dt * g["pwr"].iloc[1:]).sum())
    assert run.gpu_count == 2  # type: ignore[attr-defined]
    assert run.gpu_hours == pytest.approx(seconds / 3600, rel=1e-9)  # type: ignore[attr-defined]
    assert run.util_pct == pytest.approx(used / seconds, rel=1e-9)  # type: ignore[attr-defined]
    assert run.energy_kwh == pytest.approx(joules / 3.6e6, rel=1e-6)  # type: ignore[attr-defined]
    assert run.verdict == "imbalanced"  # GPU 1 at 0% all run  # type: ignore[attr-defined]


def test_dmon_output_without_times_says_how_to_record_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "dmon.txt"
    log.write_text(
        "# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk\n"
        "# Idx      W      C      C      %      %      %      %    MHz    MHz\n"
        "    0     65     38      -      0      0      0      0   1593    210\n"
    )
    assert main(["import", "nvidia-smi", str(log), "--store", f"sqlite:///{tmp_path}/r.db"]) == 2
    err = capsys.readouterr().err
    assert "nvidia-smi dmon output without times: record it with -o DT" in err
    assert err.count("\n") == 1


def test_an_impossible_dmon_reading_is_refused_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 1e300 W reading (a broken log) is refused naming its line, not imported to be left
    out of every report later."""
    lines = (REAL / "dmon-DT-pucm.txt").read_text().splitlines(keepends=True)
    lines[4] = lines[4].replace("   312 ", " 1e300 ", 1)
    log = tmp_path / "dmon.txt"
    log.write_text("".join(lines))
    assert main(["import", "nvidia-smi", str(log), "--store", f"sqlite:///{tmp_path}/r.db"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-kpi: error: {log}:5: ") and "bad dmon pwr value '1e300'" in err
    assert "(from 0 to 100000)" in err and err.count("\n") == 1


EPOCH_LOG = REAL / "date-s-noheader-nounits.csv"
EPOCH_QUERY = "timestamp,memory.used,utilization.gpu,temperature.gpu"


def by_pandas_epoch(path: Path, per_s: float = 1.0) -> tuple[float, float, float]:
    """(first reading's epoch seconds, GPU-hours, time-weighted utilization %) of a one-GPU
    log of epoch times in units of 1 / ``per_s`` s, recomputed independently: a reading covers
    the time since the one before (5-6 s here, never a gap)."""
    frame = pd.read_csv(path, names=EPOCH_QUERY.split(","), skipinitialspace=True)
    t = frame["timestamp"] / per_s
    dt = t.diff().iloc[1:]
    used = float((dt * frame["utilization.gpu"].iloc[1:]).sum())
    return float(t.iloc[0]), float(dt.sum()) / 3600, used / float(dt.sum())


def import_epochs(path: Path, url: str) -> int:
    return main(
        [
            "import",
            "nvidia-smi",
            str(path),
            "--query-gpu",
            EPOCH_QUERY,
            "--gpu-model",
            "H100",
            "--tz",
            "Europe/Berlin",  # a zone for dates: epoch times are UTC whatever it says
            "--store",
            url,
        ]
    )


def test_epoch_seconds_from_a_script_that_writes_date_plus_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``echo "$(date +%s),$(nvidia-smi --query-gpu=… --format=csv,noheader,nounits)"``: the
    time column is epoch seconds, which was a "bad timestamp". Read as UTC, the run's GPU-hours
    and utilization are the file's by pandas."""
    url = f"sqlite:///{tmp_path}/runs.db"
    assert import_epochs(EPOCH_LOG, url) == 0, capsys.readouterr().err
    run = imported(url)
    first, hours, util = by_pandas_epoch(EPOCH_LOG)
    assert run.started_at == datetime.fromtimestamp(first, UTC)  # type: ignore[attr-defined]
    assert run.gpu_hours == pytest.approx(hours, rel=1e-9)  # type: ignore[attr-defined]
    assert run.util_pct == pytest.approx(util, rel=1e-9)  # type: ignore[attr-defined]
    assert hours == pytest.approx(15 * 60 / 3600, abs=0.01)  # 179 intervals of 5-6 s


def test_epoch_milliseconds_are_told_by_their_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``date +%s%3N`` writes 13 digits: milliseconds, the same run as the seconds'."""
    rows = EPOCH_LOG.read_text().splitlines()
    log = tmp_path / "ms.csv"
    log.write_text("".join(f"{r.split(',', 1)[0]}250,{r.split(',', 1)[1]}\n" for r in rows))
    url = f"sqlite:///{tmp_path}/runs.db"
    assert import_epochs(log, url) == 0, capsys.readouterr().err
    run = imported(url)
    first, hours, util = by_pandas_epoch(log, per_s=1000.0)
    assert first == by_pandas_epoch(EPOCH_LOG)[0] + 0.25
    assert run.started_at == datetime.fromtimestamp(first, UTC)  # type: ignore[attr-defined]
    assert run.gpu_hours == pytest.approx(hours, rel=1e-9)  # type: ignore[attr-defined]
    assert run.util_pct == pytest.approx(util, rel=1e-9)  # type: ignore[attr-defined]


def test_an_epoch_of_20_digits_is_a_bad_row_left_out_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 20-digit epoch (no time: a datetime cannot hold it) and ``253402300800`` in a log of
    seconds (the year 10000) among the readings: each left out, counted and named by its line,
    never a traceback nor a stopped import; the run is the clean file's."""
    rows = EPOCH_LOG.read_text().splitlines()
    rows[10:10] = ["99999999999999999999,30512, 97, 71"]
    rows[50:50] = ["253402300800,30512, 97, 71"]
    log = tmp_path / "absurd.csv"
    log.write_text("\n".join(rows) + "\n")
    url = f"sqlite:///{tmp_path}/runs.db"
    assert import_epochs(log, url) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert (
        "skipped 2 reading(s) whose time is no time (outside the years 1970-9998): "
        f"{log.resolve()}:11, {log.resolve()}:51\n"
    ) in out
    run = imported(url)
    _, hours, util = by_pandas_epoch(EPOCH_LOG)
    assert run.gpu_hours == pytest.approx(hours, rel=1e-9)  # type: ignore[attr-defined]
    assert run.util_pct == pytest.approx(util, rel=1e-9)  # type: ignore[attr-defined]
