"""``gpu-kpi chargeback``: the CSV for finance, one row per (week, team, project, GPU model),
summing to the weekly report's figures; user text neutralized for spreadsheets; a bad range
one line."""

from __future__ import annotations

import csv
import io
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from fakes import StoreTemplates, run_record

from reports.cli import main
from tracker.store import RunStore

sys.path.insert(0, str(Path(__file__).parent / "service"))  # the service tests' week of runs
from test_job import W46, W47, W48, add_week


def three_weeks(url: str) -> None:
    """The service tests' weeks W46 to W48, and in W48 a team named to run a formula and an
    unpriced GPU."""
    for monday in (W46, W47, W48):
        add_week(url, monday)
    with RunStore(url) as s:
        s.upsert_run(run_record("x", W48 + timedelta(days=2), 1, team="=HYPERLINK(1)", project="p"))
        s.upsert_run(
            run_record("u", W48 + timedelta(days=3), 2, team="vision", model="TPUv9", price=None)
        )


@pytest.fixture
def url(tmp_path: Path, store_templates: StoreTemplates) -> str:
    """A store of :func:`three_weeks`, the test's own (a copy of the module's)."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store_templates.made(url, "three weeks", three_weeks)
    return url


def rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, str]]:
    assert main(["chargeback", *args]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_one_row_per_week_team_project_and_model(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    got = rows(capsys, "--store", url, "--since", "2026-W47", "--until", "2026-W48")
    assert [(r["week"], r["team"], r["project"], r["gpu_model"]) for r in got] == [
        ("2026-W47", "nlp", "", "H100"),
        ("2026-W47", "vision", "", "H100"),
        ("2026-W48", "'=HYPERLINK(1)", "p", "H100"),
        ("2026-W48", "nlp", "", "H100"),
        ("2026-W48", "vision", "", "H100"),
        ("2026-W48", "vision", "", "TPUv9"),
    ]
    w48 = {(r["team"], r["gpu_model"]): r for r in got if r["week"] == "2026-W48"}
    # nlp: alice's 2 GPUs x 4 h at 30% and bob's 2 x 2 h at 90%: 12 GPU-h, $46.20, waste
    # 8 x 3.85 x (1 - 30/85) = $19.93 (bob is above the 85% target)
    nlp = w48[("nlp", "H100")]
    assert (nlp["runs"], nlp["gpu_hours"], nlp["spend_usd"], nlp["waste_usd"]) == (
        "2",
        "12.0",
        "46.2",
        "19.93",
    )
    # an unpriced model: its GPU-hours apart, no dollars
    tpu = w48[("vision", "TPUv9")]
    assert (tpu["gpu_hours"], tpu["unpriced_gpu_hours"], tpu["spend_usd"]) == ("2.0", "2.0", "0.0")
    # the week's rows add up to the report's headline spend: 22 + 1 priced GPU-hours x $3.85
    assert sum(float(r["spend_usd"]) for r in w48.values()) == pytest.approx(23 * 3.85, abs=0.01)


def test_written_to_a_file_whole(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    out = tmp_path / "chargeback.csv"
    assert (
        main(
            [
                "chargeback",
                "--store",
                url,
                "--since",
                "2026-W46",
                "--until",
                "2026-W48",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == f"8 row(s), 3 week(s): {out}\n"
    assert out.read_text().splitlines()[0] == (
        "week,team,project,gpu_model,runs,gpu_hours,spend_usd,waste_usd,idle_usd,unpriced_gpu_hours"
    )


def test_a_range_that_ends_before_it_starts(capsys: pytest.CaptureFixture[str], url: str) -> None:
    assert main(["chargeback", "--store", url, "--since", "2026-W48", "--until", "2026-W46"]) == 2
    assert capsys.readouterr().err == (
        "gpu-kpi: error: --since 2026-W48 is after --until 2026-W46\n"
    )


def test_out_writes_into_a_fifo_a_symlink_and_dev_null_and_replaces_none(
    capsys: pytest.CaptureFixture[str],
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--out`` names a FIFO with a reader, a symlink, ``/dev/null`` (as root, a rename over
    it would make it a regular file): each gets the CSV where it is, none is renamed over."""
    import os
    import stat

    from fifos import FifoReader

    args = ["chargeback", "--store", url, "--since", "2026-W48", "--until", "2026-W48", "--out"]
    header = b"week,team,project,gpu_model,runs,gpu_hours,spend_usd,waste_usd,idle_usd,"
    kept = tmp_path / "2026-W48.csv"
    kept.write_bytes(b"old\n")
    latest = tmp_path / "latest.csv"
    latest.symlink_to(kept.name)
    assert main([*args, str(latest)]) == 0
    assert latest.is_symlink() and kept.read_bytes().startswith(header)
    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)

    def refuse(src: object, dst: object) -> None:
        raise AssertionError(f"renamed {src} over {dst}")

    monkeypatch.setattr(os, "replace", refuse)
    assert main([*args, str(fifo)]) == 0
    got = reader.result()
    assert got is not None and got.startswith(header) and got == kept.read_bytes()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert main([*args, "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    capsys.readouterr()
    assert main([*args, str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err == f"gpu-kpi: error: --out {tmp_path}: is a folder (name a file)\n"
    )
