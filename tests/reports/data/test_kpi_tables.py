"""The store's ``gpu_kpi_weekly`` and ``gpu_kpi_weekly_team`` tables, on SQLite and PostgreSQL:
read with plain SQL as a BI tool would, they hold what the report's JSON shows, and a week
reported again replaces its rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fakes import run_record

from reports.cli import main
from reports.data.kpi_tables import HEADLINE, TEAM
from tracker.store import RunStore

W48 = datetime(2026, 11, 23, tzinfo=UTC)


def add(url: str, run_id: str, **kw: Any) -> None:
    with RunStore(url) as s:
        s.upsert_run(run_record(run_id, W48 + timedelta(days=1), kw.pop("hours", 4), **kw))


def sql(url: str, query: str) -> list[dict[str, Any]]:
    with RunStore(url) as s:
        return s.transaction(
            lambda c: [dict(r._mapping) for r in c.execute(sa.text(query))], write=False
        )


def report(url: str, out: Path) -> dict[str, Any]:
    assert (
        main(
            ["report", "--store", url, "--week", "2026-W48", "--out", str(out), "--format", "json"]
        )
        == 0
    )
    return json.loads((out / "2026-W48.json").read_text())


def test_the_tables_hold_the_reports_figures(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add(store_url, "a", gpus=2, util=30.0, team="nlp", user="alice")
    add(store_url, "b", util=90.0, team="vision", user="bob", hours=2)
    add(store_url, "c", util=None, team="", model="TPUv9", price=None)  # no team, no price
    week = report(store_url, tmp_path / "out")
    (row,) = sql(store_url, "SELECT * FROM gpu_kpi_weekly")
    assert (row["week"], row["time_zone"], row["basis"]) == ("2026-W48", "UTC", "util")
    assert {f: row[f] for f in HEADLINE} == {f: week["headline"][f] for f in HEADLINE}
    assert row["spend_usd"] == pytest.approx((8 + 2) * 3.85)  # by hand; the TPU is unpriced
    teams = sql(store_url, "SELECT * FROM gpu_kpi_weekly_team ORDER BY team")
    assert [t["team"] for t in teams] == sorted(t["team"] or "" for t in week["by_team"])
    by_team = {t["team"] or "": t for t in week["by_team"]}
    for t in teams:
        assert {f: t[f] for f in TEAM} == {f: by_team[t["team"]][f] for f in TEAM}


def test_a_week_reported_again_replaces_its_rows(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add(store_url, "a", team="nlp")
    report(store_url, tmp_path / "one")
    add(store_url, "late", team="nlp", hours=6)  # imported after the week's first report
    week = report(store_url, tmp_path / "two")
    rows = sql(store_url, "SELECT gpu_hours, runs FROM gpu_kpi_weekly")
    assert rows == [{"gpu_hours": pytest.approx(10.0), "runs": 2}]
    assert week["headline"]["gpu_hours"] == pytest.approx(10.0)
    assert sql(store_url, "SELECT team, runs FROM gpu_kpi_weekly_team") == [
        {"team": "nlp", "runs": 2}
    ]


def test_a_store_that_will_not_take_the_figures_costs_a_warning_not_the_report(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    add(url, "a", team="nlp")

    def refused(*args: object, **kwargs: object) -> None:
        raise sa.exc.ProgrammingError("CREATE TABLE", {}, Exception("permission denied"))

    monkeypatch.setattr("reports.data.kpi_tables.write_week", refused)
    week = report(url, tmp_path / "out")  # written all the same
    assert week["headline"]["gpu_hours"] == pytest.approx(4.0)
    assert any(
        "not in the store's gpu_kpi_weekly tables: ProgrammingError" in r.getMessage()
        for r in caplog.records
    )
