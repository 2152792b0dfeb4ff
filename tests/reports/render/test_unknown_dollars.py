"""Unpriced GPU-time is unknown, not free: the JSON, CSV and Parquet exports write the dollars
no price covers as null (an empty CSV cell), where the HTML says "n/a", and never as 0.

The store, by hand (H100 at the table's $3.85/GPU-h; "Mystery-GPU" has no price anywhere):

- 2026-W47: ``old``, Mystery-GPU, 2 GPU-h (team nlp): a week none of whose GPU-time is priced.
- 2026-W48: ``h``, H100, 2 GPU-h at 50% (team nlp): spend 2 x 3.85 = $7.70, waste
  7.70 x (1 - 50/85) = $3.17, idle $0 (no minute samples); ``m``, Mystery-GPU, 3 GPU-h (team
  nlp: the team is partly priced); ``x``, Mystery-GPU, 1 GPU-h, team ``=HYPERLINK(…)`` (a team
  wholly unpriced, whose name a spreadsheet would run).
- 2026-W49: ``late``, Mystery-GPU, 5 GPU-h (team nlp): none priced again, after a priced week.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fakes import run_record

from reports.build import build, compute
from reports.kpi import WeekKpis
from reports.render import html
from reports.render.exports import GROUPS, priced_runs, to_csv, to_dict
from reports.render.fmt import fmt_usd
from reports.request import Request
from tracker.store import RunStore

W47 = datetime(2026, 11, 16, tzinfo=UTC)
W48 = datetime(2026, 11, 23, tzinfo=UTC)
W49 = datetime(2026, 11, 30, tzinfo=UTC)
NOW = W49 + timedelta(days=8)
PRICE = 3.85  # H100's price in the table
SPEND = 2 * PRICE  # $7.70
WASTE = SPEND * (1 - 50 / 85)
TEAM = '=HYPERLINK("http://x")'
MYSTERY = "Mystery-GPU"
USD_FIELDS = ("spend_usd", "waste_usd", "idle_usd")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('unknown')}/runs.db"
    unpriced: dict[str, Any] = {"model": MYSTERY, "price": None, "util": 50.0}
    with RunStore(url) as s:
        s.upsert_run(run_record("old", W47 + timedelta(days=1), 2, team="nlp", **unpriced))
        s.upsert_run(run_record("h", W48 + timedelta(days=1), 2, util=50.0, team="nlp"))
        s.upsert_run(run_record("m", W48 + timedelta(days=2), 3, team="nlp", **unpriced))
        s.upsert_run(run_record("x", W48 + timedelta(days=3), 1, team=TEAM, **unpriced))
        s.upsert_run(run_record("late", W49 + timedelta(days=1), 5, team="nlp", **unpriced))
    return url


def kpis(store: str, week: str) -> WeekKpis:
    return compute(store, Request(week=week, tz=UTC), now=NOW).kpis


@pytest.fixture(scope="module")
def w48(store: str) -> WeekKpis:
    return kpis(store, "2026-W48")


@pytest.fixture(scope="module")
def w49(store: str) -> WeekKpis:
    return kpis(store, "2026-W49")


def json_doc(k: WeekKpis) -> dict[str, Any]:
    """The document as the JSON file holds it (written and read back)."""
    from reports.render.exports import to_json

    return dict(json.loads(to_json(to_dict(k, UTC))))


def csv_cells(k: WeekKpis) -> dict[tuple[str, str, str], str]:
    """(section, key, metric) → the CSV's value cell, as a spreadsheet would read it."""
    text = to_csv(to_dict(k, UTC), k.runs)
    return {
        (r["section"], r["key"], r["metric"]): r["value"] for r in csv.DictReader(io.StringIO(text))
    }


def by(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in rows}


def test_the_kpis_behind_the_exports(w48: WeekKpis) -> None:
    """What the exports start from: the unpriced runs' dollars are 0.0 in the KPI frames,
    with ``priced`` false; so an export that copies them writes $0."""
    runs = w48.runs.set_index("run_id")
    assert runs.loc["m", "spend_usd"] == 0.0 and not runs.loc["m", "priced"]
    assert runs.loc["h", "spend_usd"] == pytest.approx(SPEND) and runs.loc["h", "priced"]
    assert w48.headline.unpriced_gpu_hours == pytest.approx(4.0)


def test_json_run_rows_null_for_unpriced_runs(w48: WeekKpis) -> None:
    runs = by(json_doc(w48)["runs"], "run_id")
    assert sorted(runs) == ["h", "m", "x"]
    for rid in ("m", "x"):
        assert {f: runs[rid][f] for f in USD_FIELDS} == dict.fromkeys(USD_FIELDS, None), rid
        assert runs[rid]["gpu_model"] == MYSTERY
    assert runs["m"]["gpu_hours"] == pytest.approx(3.0)  # what is known stays
    assert runs["m"]["utilization_pct"] == pytest.approx(50.0)
    h = runs["h"]
    assert h["spend_usd"] == pytest.approx(SPEND) and h["waste_usd"] == pytest.approx(WASTE)
    assert h["idle_usd"] == 0.0  # priced and not idle: a known $0, not null


def test_json_breakdowns_null_only_where_every_run_is_unpriced(w48: WeekKpis) -> None:
    d = json_doc(w48)
    models = by(d["by_gpu_model"], "gpu_model")
    assert models["H100"]["spend_usd"] == pytest.approx(SPEND)
    assert models["H100"]["waste_usd"] == pytest.approx(WASTE)
    assert models["H100"]["idle_usd"] == 0.0
    assert {f: models[MYSTERY][f] for f in USD_FIELDS} == dict.fromkeys(USD_FIELDS, None)
    assert models[MYSTERY]["gpu_hours"] == pytest.approx(4.0) and models[MYSTERY]["runs"] == 2
    teams = by(d["by_team"], "team")
    # nlp has a priced run and an unpriced one: the priced sum, as the HTML shows it
    assert teams["nlp"]["spend_usd"] == pytest.approx(SPEND)
    assert teams["nlp"]["gpu_hours"] == pytest.approx(5.0)
    assert {f: teams[TEAM][f] for f in USD_FIELDS} == dict.fromkeys(USD_FIELDS, None)
    # every run shares a user and a source: a partly priced group, the priced sum
    for g in ("user", "source"):
        (row,) = d[f"by_{g}"]
        assert row["spend_usd"] == pytest.approx(SPEND), g


def test_json_breakdowns_agree_with_the_html(w48: WeekKpis, w49: WeekKpis) -> None:
    """Each group's dollars: null exactly where the HTML says "n/a", else the HTML's figure."""
    checked = 0
    for k in (w48, w49):
        d = json_doc(k)
        for g in GROUPS:
            shown = {r["name"]: r for r in html._breakdown_rows(k.by[g], g, k.runs)}
            for row in d[f"by_{g}"]:
                page = shown[html.text_or_dash(row[g], "(none)")]
                for f, cell in (
                    ("spend_usd", "spend"),
                    ("waste_usd", "waste"),
                    ("idle_usd", "idle"),
                ):
                    if row[f] is None:
                        assert page[cell] == "n/a", (g, row[g], f)
                    else:
                        assert page[cell] == fmt_usd(row[f]) != "n/a", (g, row[g], f)
                    checked += 1
    assert checked >= 3 * 8


def test_headline_none_priced_is_null_with_no_change(w48: WeekKpis, w49: WeekKpis) -> None:
    d49 = json_doc(w49)
    head = d49["headline"]
    assert w49.headline.none_priced
    assert {f: head[f] for f in USD_FIELDS} == dict.fromkeys(USD_FIELDS, None)
    assert head["gpu_hours"] == pytest.approx(5.0)
    assert head["unpriced_gpu_hours"] == pytest.approx(5.0)
    assert head["unmeasured_usd"] is None  # the dollars of GPU-time no sample measured
    # from $7.70 to unknown is no -100%: the HTML shows no change either
    assert w49.change_pct["spend_usd"] == pytest.approx(-100.0)  # what the KPIs say
    assert {f: d49["change_pct"][f] for f in USD_FIELDS} == dict.fromkeys(USD_FIELDS, None)
    assert d49["change_pct"]["gpu_hours"] == pytest.approx(100 * (5 - 6) / 6)
    assert d49["previous"]["spend_usd"] == pytest.approx(SPEND)  # W48, partly priced
    trend = by(d49["trend"], "week")
    assert trend["2026-W48"]["spend_usd"] == pytest.approx(SPEND)
    assert trend["2026-W49"]["spend_usd"] is None and trend["2026-W47"]["waste_usd"] is None
    cards = {c["field"]: c for c in html._cards(w49)}
    assert [cards[f]["value"] for f in ("spend_usd", "waste_usd")] == ["n/a", "n/a"]
    # W48: some priced, the headline has the priced sum; its previous week (W47) none
    d48 = json_doc(w48)
    assert d48["headline"]["spend_usd"] == pytest.approx(SPEND)
    assert d48["headline"]["idle_usd"] == 0.0
    assert {f: d48["previous"][f] for f in USD_FIELDS} == dict.fromkeys(USD_FIELDS, None)
    assert d48["previous"]["gpu_hours"] == pytest.approx(2.0)
    assert d48["change_pct"]["spend_usd"] is None


def test_csv_cells_empty_for_unknown_dollars(w48: WeekKpis, w49: WeekKpis) -> None:
    cells = csv_cells(w48)
    for f in USD_FIELDS:
        assert cells[("run", "m", f)] == "" and cells[("run", "x", f)] == "", f
        assert cells[("gpu_model", MYSTERY, f)] == "", f
        # the team's name neutralized as before; its dollars unknown
        assert cells[("team", "'" + TEAM, f)] == "", f
        assert cells[("trend", "2026-W47", f)] == "", f
    assert ("team", TEAM, "spend_usd") not in cells
    assert cells[("run", "m", "gpu_hours")] == "3.0"
    assert float(cells[("run", "h", "spend_usd")]) == pytest.approx(SPEND)
    assert cells[("run", "h", "idle_usd")] == "0.0"
    assert float(cells[("gpu_model", "H100", "spend_usd")]) == pytest.approx(SPEND)
    assert float(cells[("team", "nlp", "spend_usd")]) == pytest.approx(SPEND)
    assert float(cells[("headline", "", "spend_usd")]) == pytest.approx(SPEND)
    cells49 = csv_cells(w49)
    for f in USD_FIELDS:
        assert cells49[("headline", "", f)] == "", f
        assert cells49[("run", "late", f)] == "", f
    assert float(cells49[("headline", "", "gpu_hours")]) == pytest.approx(5.0)


def test_csv_run_lines_block_by_block(w48: WeekKpis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block of runs at a time (a million runs): each block's unpriced runs empty."""
    from reports.render import exports

    whole = to_csv(to_dict(w48, UTC), w48.runs)
    real = exports._run_rows
    monkeypatch.setattr(
        exports, "_run_rows", lambda out, head, runs, raw=None: real(out, head, runs, 1, raw=raw)
    )
    assert to_csv(to_dict(w48, UTC), w48.runs) == whole


@pytest.mark.usefixtures("blank_charts")
def test_the_files_written(store: str, tmp_path: Path) -> None:
    """``gpu-kpi report``'s JSON, CSV and Parquet of W48 and W49 as written to disk."""
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "out"
    for week in ("2026-W48", "2026-W49"):
        req = Request(week=week, tz=UTC, formats=("html", "json", "csv", "parquet"))
        build(store, req, out, now=NOW)
    d48 = json.loads((out / "2026-W48.json").read_text())
    assert by(d48["runs"], "run_id")["m"]["spend_usd"] is None
    assert by(d48["by_gpu_model"], "gpu_model")[MYSTERY]["spend_usd"] is None
    assert by(d48["by_gpu_model"], "gpu_model")["H100"]["spend_usd"] == pytest.approx(SPEND)
    lines = csv.DictReader(io.StringIO((out / "2026-W48.csv").read_text()))
    cells = {(r["section"], r["key"], r["metric"]): r["value"] for r in lines}
    assert (
        cells[("run", "m", "spend_usd")] == "" and cells[("gpu_model", MYSTERY, "waste_usd")] == ""
    )
    t = pq.read_table(out / "2026-W48.parquet")
    rows = {r["run_id"]: r for r in t.to_pylist()}
    for rid in ("m", "x"):
        assert {f: rows[rid][f] for f in USD_FIELDS} == dict.fromkeys(USD_FIELDS, None), rid
    assert rows["m"]["gpu_hours"] == pytest.approx(3.0)
    assert rows["h"]["spend_usd"] == pytest.approx(SPEND) and rows["h"]["idle_usd"] == 0.0
    assert json.loads(t.schema.metadata[b"gpu_kpi.headline"])["spend_usd"] == pytest.approx(SPEND)
    t49 = pq.read_table(out / "2026-W49.parquet")
    assert t49.column("spend_usd").to_pylist() == [None]
    head49 = json.loads(t49.schema.metadata[b"gpu_kpi.headline"])
    assert head49["spend_usd"] is None and head49["gpu_hours"] == pytest.approx(5.0)
    assert json.loads((out / "2026-W49.json").read_text())["headline"]["waste_usd"] is None
    page = (out / "2026-W49.html").read_text()
    assert "n/a" in page


def test_priced_runs_leaves_priced_or_unmarked_frames_alone() -> None:
    runs = pd.DataFrame({"run_id": ["a"], "spend_usd": [1.0]})
    assert priced_runs(runs) is runs  # no ``priced``: priced, as the HTML takes it
    marked = runs.assign(priced=[True])
    assert priced_runs(marked) is marked
    mixed = pd.DataFrame(
        {
            "run_id": ["a", "b", "c"],
            "spend_usd": [1.0, 0.0, 2.0],
            "waste_usd": [0.5, 0.0, 0.0],
            "priced": pd.array([True, False, pd.NA], dtype="boolean"),
        }
    )
    out = priced_runs(mixed)
    assert out["spend_usd"].tolist()[::2] == [1.0, 2.0] and pd.isna(out["spend_usd"][1])
    assert pd.isna(out["waste_usd"][1]) and out["waste_usd"][0] == 0.5
    assert mixed["spend_usd"].tolist() == [1.0, 0.0, 2.0]  # the KPIs' frame is not changed
