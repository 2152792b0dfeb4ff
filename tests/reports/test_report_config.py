"""``gpu-kpi report --config``: the file's ``[report]`` (time zone, out_dir, report_url, basis)
applies where no flag says otherwise, as it does for the service."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fakes import run_record

from reports.cli import main
from tracker.store import RunStore

pytestmark = pytest.mark.usefixtures("blank_charts")  # the pages' text, not their charts


@pytest.fixture
def config(tmp_path: Path) -> Path:
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        # Sunday 23:30 UTC = Monday 00:30 in Berlin: W48 in UTC, W49 in Berlin
        s.upsert_run(run_record("r", datetime(2025, 11, 30, 23, 30, tzinfo=UTC), 0.25))
    cfg = tmp_path / "gpu-kpi.toml"
    cfg.write_text(f'''store = "{url}"
[report]
timezone = "Europe/Berlin"
out_dir = "{tmp_path / "archive"}"
report_url = "https://gpu-kpi.example.com/r"
''')
    return cfg


def test_the_config_says_where_and_when(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--week", "2025-W49", "--config", str(config)]) == 0
    written = capsys.readouterr().out.split()
    assert str(tmp_path / "archive" / "2025-W49.json") in written
    week = json.loads((tmp_path / "archive" / "2025-W49.json").read_text())
    assert week["headline"]["gpu_hours"] == pytest.approx(0.25)  # the Berlin week has the run
    eml = (tmp_path / "archive" / "2025-W49.eml").read_text()
    assert "https://gpu-kpi.example.com/r/2025-W49.html" in eml
    assert not (Path.cwd() / "reports-out" / "2025-W49.json").exists()


def test_a_flag_wins_over_the_config(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "elsewhere"
    assert (
        main(
            [
                "report",
                "--week",
                "2025-W48",
                "--tz",
                "UTC",
                "--out",
                str(out),
                "--config",
                str(config),
            ]
        )
        == 0
    )
    week = json.loads((out / "2025-W48.json").read_text())
    assert week["headline"]["gpu_hours"] == pytest.approx(0.25)  # in UTC, the run is W48's


def test_a_bad_report_section_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[report]\ntimezone = "Mars/Olympus"\n')
    assert main(["report", "--week", "2025-W48", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-kpi: error: report.timezone: ") and err.count("\n") == 1
