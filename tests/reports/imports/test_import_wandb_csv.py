"""``gpu-kpi import wandb CHART.csv``: the CSV a W&B chart exports, the fourth W&B form. The files
under ``tests/data/real/wandb/`` reproduce the UI's export (see SOURCES.md); every figure is
recomputed here from the file with pandas, as W&B's own readings cover the time before them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from clirun import gpu_kpi

from reports.imports.play import Labels
from tracker.store import RunStore

DATA = Path(__file__).resolve().parents[2] / "data" / "real" / "wandb-charts"
UTIL = DATA / "chart-gpu-utilization-relative.csv"
POWER = DATA / "chart-gpu-power-relative.csv"
WALL = DATA / "chart-gpu-utilization-wall.csv"
H100 = 3.85
STARTED = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


def covered(
    frame: pd.DataFrame, value: str, also: tuple[str, ...] = (), *, from_zero: bool
) -> tuple[float, float, float]:
    """(seconds covered, seconds with ``value`` known, Σ value × seconds) of one GPU: a reading
    at every time any of its columns (``value`` and ``also``) has one, covering the time since
    the one before (the first from the run's start when times are relative to it); a step over
    3 × the median is a gap and covers nothing."""
    axis = frame.columns[0]
    s = frame.dropna(subset=[value, *also], how="all").sort_values(axis)
    t = s[axis] / 1000.0 if s[axis].iloc[0] > 1e11 else s[axis]
    dt = t.diff()
    dt.iloc[0] = t.iloc[0] if from_zero else 0.0
    dt[dt > 3 * dt.iloc[1:].median()] = 0.0
    known = s[value].notna()
    return float(dt.sum()), float(dt[known].sum()), float((s[value][known] * dt[known]).sum())


def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_a_run_from_two_chart_exports_by_relative_time(tmp_path: Path) -> None:
    url = store(tmp_path)
    p = gpu_kpi(
        "import",
        "wandb",
        str(UTIL),
        str(POWER),
        "--started",
        "2026-11-24T09:00",
        "--gpu-model",
        "H100",
        "--team",
        "vision",
        "--store",
        url,
    )
    assert p.returncode == 0, p.stderr
    both = pd.merge(
        pd.read_csv(UTIL), pd.read_csv(POWER), on="Relative Time (Process)", how="outer"
    )
    seconds = known = util_s = power_s = 0.0
    for g in (0, 1):
        util, power = (
            f"resnet50-bs64 - system/gpu.{g}.gpu",
            f"resnet50-bs64 - system/gpu.{g}.powerWatts",
        )
        s, k, u = covered(both, util, (power,), from_zero=True)
        seconds, known, util_s = seconds + s, known + k, util_s + u
        power_s += covered(both, power, (util,), from_zero=True)[2]
    with RunStore(url) as s:
        (run,) = s.list_runs()
    assert (run.name, run.gpu_count, run.gpu_model, run.team) == (
        "resnet50-bs64",
        2,
        "H100",
        "vision",
    )
    assert run.source == "wandb" and run.started_at == STARTED
    assert run.gpu_hours == pytest.approx(seconds / 3600, rel=1e-6)
    assert run.util_pct == pytest.approx(util_s / known, rel=1e-6)  # a bucket without one
    assert known < seconds
    assert run.cost_usd == pytest.approx(seconds / 3600 * H100, rel=1e-6)
    assert run.energy_kwh == pytest.approx(power_s / 3.6e6, rel=1e-6)  # from the power chart
    assert p.stdout.splitlines()[-1].startswith(f"imported 1 run(s), {seconds / 3600:,.1f} GPU-h")


def test_a_wall_time_export_of_two_runs(tmp_path: Path) -> None:
    """Wall Time in milliseconds; run lr1e-4 paused for 10 minutes: the gap is no GPU-time."""
    url = store(tmp_path)
    assert (
        gpu_kpi("import", "wandb", str(WALL), "--gpu-model", "H100", "--store", url).returncode == 0
    )
    with RunStore(url) as s:
        runs = {r.name: r for r in s.list_runs()}
    assert sorted(runs) == ["bert-base-lr1e-4", "bert-base-lr3e-5"]
    for name, run in runs.items():
        seconds, known, util_s = covered(
            pd.read_csv(WALL), f"{name} - system/gpu.0.gpu", from_zero=False
        )
        assert run.gpu_hours == pytest.approx(seconds / 3600, rel=1e-6), name
        assert run.util_pct == pytest.approx(util_s / known, rel=1e-6), name
    first = pd.read_csv(WALL).dropna(subset=["bert-base-lr3e-5 - system/gpu.0.gpu"])
    assert runs["bert-base-lr3e-5"].started_at.timestamp() == first["Wall Time"].iloc[0] / 1000
    assert runs["bert-base-lr1e-4"].gpu_hours == pytest.approx((2400 - 600) / 3600, rel=1e-3)


def wall_export(path: Path, points: list[tuple[datetime, float]]) -> Path:
    """A one-run chart export by Wall Time (milliseconds) as the UI writes it, GPU 0's
    utilization at ``points``."""
    rows = ['"Wall Time","bert - system/gpu.0.gpu"']
    rows += [f'"{round(t.timestamp() * 1000)}","{u:g}"' for t, u in points]
    return write(path, "\n".join(rows) + "\n")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "apart", [timedelta(days=30), timedelta(days=50 * 365)], ids=["30-days", "50-years"]
)
def test_chart_points_months_apart_are_gaps_however_few(tmp_path: Path, apart: timedelta) -> None:
    """Two buckets 30 days apart were 720 GPU-h (their one interval, the median, made the gap
    90 days), two 50 years apart an import that never ended. No bucket covers more than a day:
    the run has no GPU-time, skipped and named. After an hour of 15 s buckets at 40%, such a
    bucket adds nothing: 1 GPU-h."""
    from reports.imports.play import NO_GPU_TIME
    from reports.imports.wandb_runs import read_wandb

    labels = Labels(gpu_model="H100")
    two = wall_export(tmp_path / "two.csv", [(STARTED, 40.0), (STARTED + apart, 40.0)])
    done = read_wandb([two], labels=labels)
    assert (done.records, done.skipped) == ([], {NO_GPU_TIME: ["bert"]})
    hour = [(STARTED + timedelta(seconds=15 * k), 40.0) for k in range(241)]
    far = wall_export(tmp_path / "far.csv", [*hour, (hour[-1][0] + apart, 40.0)])
    (run,) = read_wandb([far], labels=labels).records
    assert (run.gpu_hours, run.util_pct) == (pytest.approx(1.0), pytest.approx(40.0))
    assert run.cost_usd == pytest.approx(H100)


def test_a_20_digit_wall_time_is_a_bad_row_left_out_and_counted(tmp_path: Path) -> None:
    """A Wall Time of 20 digits (no time: it stopped the import as "is no time") among the
    rows is left out, counted and named by line; both runs go in as from the clean export."""
    rows = WALL.read_text().splitlines()
    rows[5:5] = ['"99999999999999999999","50","50","50","","",""']
    chart = write(tmp_path / "chart.csv", "\n".join(rows) + "\n")
    url = store(tmp_path)
    p = gpu_kpi("import", "wandb", str(chart), "--gpu-model", "H100", "--store", url)
    assert p.returncode == 0, p.stderr
    assert (
        f"skipped 1 reading(s) whose time is no time (outside the years 1970-9998): {chart}:6\n"
    ) in p.stdout
    with RunStore(url) as s:
        runs = {r.name: r for r in s.list_runs()}
    for name, run in runs.items():
        seconds, _, _ = covered(pd.read_csv(WALL), f"{name} - system/gpu.0.gpu", from_zero=False)
        assert run.gpu_hours == pytest.approx(seconds / 3600, rel=1e-6), name
    assert len(runs) == 2


def test_without_the_model_the_run_is_skipped_and_the_flag_named(tmp_path: Path) -> None:
    p = gpu_kpi("import", "wandb", str(WALL), "--store", store(tmp_path))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == (
        "skipped 2 run(s), no GPU model in the log: say it with --gpu-model: "
        "bert-base-lr3e-5, bert-base-lr1e-4"
    )
    assert lines[1] == "  to import them, run the import again with --gpu-model MODEL"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (
            None,
            (),
            "times relative to the run's start (Relative Time (Process)): say when it "
            "started with --started",
        ),
        (
            '"Relative Time (Process)","a - system/gpu.0.gpu","b - system/gpu.0.gpu"\n"15","50","60"\n',
            ("--started", "2026-11-24T09:00"),
            "2 runs by Relative Time (Process), each from its own start: export one run per file",
        ),
        (
            '"Step","a - system/gpu.0.gpu"\n"1","50"\n',
            (),
            "a chart by 'Step' has no time: export it with the x-axis Wall Time",
        ),
        (
            '"Wall Time","Group: sweep-7 - system/gpu.0.gpu"\n"1764090000000","50"\n',
            (),
            "a grouped chart holds a group's mean, not its runs: export it with grouping off",
        ),
        (
            '"Wall Time","a - loss"\n"1764090000000","0.5"\n',
            (),
            "no column '<run> - system/gpu.N.<metric>'",
        ),
        (
            '"Wall Time","a - system/gpu.0.gpu"\n"yesterday","50"\n',
            (),
            "chart.csv:2: Wall Time 'yesterday' is no number",
        ),
        (
            '"Wall Time","a - system/gpu.0.gpu"\n"1764090000000","50"\n',
            ("--started", "2026-11-24T09:00"),
            "--started is for exports by relative time, not Wall Time",
        ),
    ],
)
def test_an_export_that_cannot_be_placed_is_one_line(
    tmp_path: Path, content: str | None, args: tuple[str, ...], message: str
) -> None:
    path = UTIL if content is None else write(tmp_path / "chart.csv", content)
    url = store(tmp_path)
    p = gpu_kpi("import", "wandb", str(path), "--gpu-model", "H100", *args, "--store", url)
    assert p.returncode == 2
    (line,) = p.stderr.splitlines()
    assert line.startswith("gpu-kpi: error: ") and message in line, line
    assert not (tmp_path / "runs.db").exists() or RunStore(url).list_runs() == []


def test_exports_and_run_directories_are_separate_imports(tmp_path: Path) -> None:
    p = gpu_kpi("import", "wandb", str(UTIL), str(tmp_path), "--store", store(tmp_path))
    assert p.returncode == 2 and "separate imports: give one kind" in p.stderr
    p = gpu_kpi(
        "import", "nvidia-smi", str(UTIL), "--started", "2026-11-24", "--store", store(tmp_path)
    )
    assert p.returncode == 2 and "--started is for W&B chart exports" in p.stderr
