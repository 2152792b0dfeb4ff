"""``gpu-kpi report --format parquet``: every run of the week, one typed row each, read back
with pyarrow and checked against figures computed by hand and against the CSV's run lines."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from clirun import gpu_kpi
from fakes import StoreTemplates, minutes, run_record

from reports.render import parquet
from reports.render.exports import RUN_FIELDS
from tracker.store import RunStore

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

W48 = datetime(2026, 11, 23, tzinfo=UTC)
PRICE = 3.85  # H100's price in the table (run_record's model)


def fill(url: str) -> None:
    """W48's runs: busy, slow (no utilization, a formula and markup in its text), sampled."""
    with RunStore(url) as s:
        s.upsert_run(run_record("busy", W48 + timedelta(days=1), 3, util=90.0, team="nlp"))
        s.upsert_run(
            run_record(
                "slow",
                W48 + timedelta(days=2),
                1,
                util=None,
                team='=HYPERLINK("http://x")',
                name='<script>alert(1)</script>, "quoted"',
            )
        )
        sampled = run_record("sampled", W48 + timedelta(days=3), 1, util=30.0, team="vision")
        s.upsert_run(sampled)
        half = sampled.started_at + timedelta(minutes=30)
        s.upsert_samples(
            minutes("sampled", sampled.started_at, 30, util=20.0, gpu="GPU-a")
            + minutes("sampled", half, 30, util=40.0, gpu="GPU-a")
        )


@pytest.fixture
def store(tmp_path: Path, store_templates: StoreTemplates) -> str:
    """A store of :func:`fill`, the test's own (a copy of the module's)."""
    url = f"sqlite:///{tmp_path}/runs.db"
    store_templates.made(url, "fill", fill)
    return url


def report(store: str, out: Path, formats: str = "csv,parquet") -> Any:
    p = gpu_kpi(
        "report", "--week", "2026-W48", "--store", store, "--out", str(out), "--format", formats
    )
    assert p.returncode == 0, p.stderr
    assert str(out / "2026-W48.parquet") in p.stdout.split()
    return pq.read_table(out / "2026-W48.parquet")


def test_every_run_typed_with_the_figures_by_hand(store: str, tmp_path: Path) -> None:
    t = report(store, tmp_path / "out")
    fields = [f for f in RUN_FIELDS if f != "links"]
    assert t.column_names == ["week", "basis", *fields]
    types = {f.name: str(f.type) for f in t.schema}
    assert types["gpu_count"] == "int64"
    assert {types[f] for f in ("gpu_hours", "spend_usd", "waste_usd", "co2e_kg")} == {"double"}
    assert {types[f] for f in ("run_id", "name", "team", "verdict", "status")} == {"string"}
    rows = {r["run_id"]: r for r in t.to_pylist()}
    assert sorted(rows) == ["busy", "sampled", "slow"]
    busy, slow, sampled = rows["busy"], rows["slow"], rows["sampled"]
    assert (busy["week"], busy["basis"], busy["gpu_count"]) == ("2026-W48", "util", 1)
    assert busy["gpu_hours"] == pytest.approx(3.0) and busy["utilization_pct"] == 90.0
    assert busy["spend_usd"] == pytest.approx(3 * PRICE)
    # 30 minutes at 20% and 30 at 40%: 30%; below the 85% target: cost x (1 - 30/85)
    assert sampled["utilization_pct"] == pytest.approx(30.0)
    assert sampled["waste_usd"] == pytest.approx(PRICE * (1 - 30 / 85))
    assert slow["utilization_pct"] is None  # unknown: null, never 0
    assert slow["energy_kwh"] is None
    # text as it is: Parquet is data, not a spreadsheet (the CSV neutralizes it)
    assert slow["team"] == '=HYPERLINK("http://x")'
    assert slow["name"] == '<script>alert(1)</script>, "quoted"'
    meta = t.schema.metadata
    assert meta[b"gpu_kpi.schema"] == b"gpu-kpi.week-runs/1"
    assert meta[b"gpu_kpi.week"] == b"2026-W48"
    head = json.loads(meta[b"gpu_kpi.headline"])
    assert head["gpu_hours"] == pytest.approx(5.0) and head["runs"] == 3


def test_the_same_values_as_the_csv_run_lines(store: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    t = report(store, out)
    lines = csv.DictReader(io.StringIO((out / "2026-W48.csv").read_text()))
    by_csv: dict[tuple[str, str], str] = {
        (r["key"], r["metric"]): r["value"] for r in lines if r["section"] == "run"
    }
    checked = 0
    for row in t.to_pylist():
        for f, v in row.items():
            if f in ("week", "basis", "run_id", "mfu_dtype_from", "mfu_note", "ofu"):
                continue  # (the last three are the Parquet file's and the JSON's alone)
            cell = by_csv[(row["run_id"], f)]
            if v is None:
                assert cell == "", (row["run_id"], f)
            elif isinstance(v, str):
                assert cell in (v, "'" + v), (row["run_id"], f)  # a formula cell prefixed
            else:
                assert float(cell) == v, (row["run_id"], f)  # the CSV writes repr(float)
            checked += 1
    assert (
        checked == 3 * 31 and len(by_csv) == checked
    )  # 31 fields: kind, unmeasured_usd, failed_usd, re-done, throttled and slow-node figures,
    # the MIG profile and how a time-sliced GPU was split, MFU with its peak and dtype (the
    # CSV leaves out where the dtype came from, the MFU note and OFU: Parquet has them)


def test_row_groups_a_block_of_runs_at_a_time(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = report(store, tmp_path / "one")
    monkeypatch.setattr(parquet, "ROW_GROUP", 2)
    t = report(store, tmp_path / "two")
    f = pq.ParquetFile(tmp_path / "two" / "2026-W48.parquet")
    assert (f.metadata.num_row_groups, f.metadata.num_rows) == (2, 3)
    assert [f.metadata.row_group(i).num_rows for i in range(2)] == [2, 1]
    assert t.to_pylist() == whole.to_pylist()


def test_values_no_figure_should_have_are_null_or_text() -> None:
    """The frame as the KPIs might leave it: NaN and infinities, a missing column, an object
    column with bytes and a lone surrogate, a gpu_count as float."""
    runs = pd.DataFrame(
        {
            "run_id": ["a", "b", "c"],
            "name": pd.Series([b"caf\xc3\xa9", None, "x\udcff"], dtype=object),
            "gpu_count": [8.0, float("nan"), 2.0],
            "gpu_hours": [1.5, float("inf"), -float("inf")],
            "spend_usd": [float("nan"), 0.0, -0.0],
        }
    )
    d = {"week": "2026-W48", "basis": "sm_active", "headline": {"gpu_hours": 1.5}}
    t = pq.read_table(io.BytesIO(bytes(parquet.ParquetExport(d, runs))))
    assert t.num_rows == 3
    assert t.column("name").to_pylist() == ["café", None, "x\ufffd"]
    assert t.column("gpu_count").to_pylist() == [8, None, 2]
    assert t.column("gpu_hours").to_pylist() == [1.5, None, None]
    spend = t.column("spend_usd").to_pylist()
    assert spend[0] is None and spend[1:] == [0.0, 0.0] and math.copysign(1, spend[2]) == -1
    assert t.column("team").to_pylist() == [None] * 3  # no such column: null
    assert t.column("basis").to_pylist() == ["sm_active"] * 3


def test_a_week_without_runs_is_a_file_with_the_schema() -> None:
    d = {"week": "2026-W48", "basis": "util", "headline": {}}
    t = pq.read_table(io.BytesIO(bytes(parquet.ParquetExport(d, pd.DataFrame()))))
    assert t.num_rows == 0 and t.column_names[:3] == ["week", "basis", "run_id"]


def test_without_pyarrow_it_is_one_line_and_nothing_written(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a)
    )
    out = tmp_path / "out"
    p = gpu_kpi(
        "report", "--week", "2026-W48", "--store", store, "--out", str(out), "--format", "parquet"
    )
    assert p.returncode == 2
    (line,) = p.stderr.strip().splitlines()
    assert line == "gpu-kpi: error: --format parquet needs pyarrow: pip install 'pyarrow>=14'"
    assert not out.exists()


@pytest.mark.usefixtures("blank_charts")
def test_the_figures_do_not_depend_on_how_pandas_stores_text(store: str, tmp_path: Path) -> None:
    """With pyarrow installed pandas keeps text in Arrow arrays, without it in Python objects:
    the same report, byte for byte, either way."""
    from reports.build import build
    from reports.request import Request

    req = Request(week="2026-W48", tz=UTC, formats=("html", "json", "csv", "parquet"))
    now = W48 + timedelta(days=8)
    twin = tmp_path / "twin.db"  # the same runs, no week kept by the other report
    shutil.copy(store.removeprefix("sqlite:///"), twin)
    build(store, req, tmp_path / "arrow", now=now)
    with pd.option_context("mode.string_storage", "python"):
        assert pd.Series(["x"]).dtype.storage == "python"
        build(f"sqlite:///{twin}", req, tmp_path / "python", now=now)
    names = sorted(p.name for p in (tmp_path / "arrow").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "python").iterdir())
    assert "2026-W48.html" in names and "2026-W48.parquet" in names
    for name in names:
        a, b = (tmp_path / d / name for d in ("arrow", "python"))
        if name.endswith(".parquet"):
            assert pq.read_table(a).equals(pq.read_table(b), check_metadata=True), name
        else:
            assert a.read_bytes() == b.read_bytes(), name
