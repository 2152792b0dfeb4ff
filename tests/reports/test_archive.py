"""The archive index is built only from the week JSON files gpu-kpi wrote: foreign files that
look like week archives are left out, counted and named on the page and in one log line, and
the report goes on; archives of earlier versions (no ``generator`` mark) still count."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fakes import run_record

from reports.archive import read_archive
from reports.build import build
from reports.render.index import LeftOut
from reports.request import Request
from tracker.store import RunStore

pytestmark = pytest.mark.usefixtures("blank_charts")  # the pages' text, not their charts

W48 = datetime(2026, 11, 23, tzinfo=UTC)
HEADLINE = {
    "gpu_hours": 10.0,
    "known_gpu_hours": 10.0,
    "spend_usd": 38.5,
    "utilization_pct": 60.0,
    "waste_usd": 1.0,
    "idle_usd": 0.0,
    "runs": 2,
}


def week_json(week: str, **changes: Any) -> str:
    """A week archive as gpu-kpi wrote it before the ``generator`` mark (schema only)."""
    d = {
        "schema": "gpu-kpi.week/1",
        "week": week,
        "basis_label": "NVML utilization",
        "headline": dict(HEADLINE),
        **changes,
    }
    return json.dumps(d)


FOREIGN = {
    "notes-W01.json": (week_json("2026-W01"), "name is not YYYY-Www.json"),
    "<i>x-W02.json": (week_json("2026-W02"), "name is not YYYY-Www.json"),
    "2026-W40.json": ("this is not json", "not JSON"),
    "2026-W41.json": ("[1, 2, 3]", "not a gpu-kpi week report"),
    "2026-W42.json": (week_json("2026-W42", generator="other-tool"), "not a gpu-kpi week report"),
    "2026-W44.json": (week_json("2026-W45"), "its week is not its name"),
    "2026-W45.json": (
        week_json("2026-W45", headline={**HEADLINE, "spend_usd": "abc"}),
        "headline spend_usd is not a number",
    ),
    "2026-W46.json": (week_json("2026-W46", headline=[]), "no headline"),
    "2026-W47.json": (
        json.dumps({"week": "2026-W47", "headline": HEADLINE}),
        "not a gpu-kpi week report",
    ),  # no mark at all: not ours
    "2025-W53.json": (week_json("2025-W53"), "no such week"),  # 2025 has 52 weeks
    "2026-W39.json": (
        '{"generator": "gpu-kpi", "week": "2026-W39", "headline": {"runs": NaN}}',
        "not JSON",
    ),
}


def fill_folder(out: Path) -> None:
    out.mkdir(parents=True)
    for name, (text, _) in FOREIGN.items():
        (out / name).write_text(text)
    (out / "2026-W38.json").write_bytes(b"\xff\xfe\x00binary")
    (out / "2026-W43.json").write_text(week_json("2026-W43"))  # an earlier version's archive
    (out / "config.json").write_text("{}")  # not named like a week: not looked at


def test_read_archive_takes_ours_and_names_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fill_folder(out)
    (out / "2026-W43.html").write_text("<p>")
    weeks, left_out = read_archive(out)
    assert weeks == [
        {
            "label": "2026-W43",
            "basis_label": "NVML utilization",
            "gpu_hours": 10.0,
            "spend_usd": 38.5,
            "utilization_pct": 60.0,
            "waste_usd": 1.0,
            "idle_usd": 0.0,
            "runs": 2,
            "href": "2026-W43.html",
        }
    ]
    assert sorted(left_out, key=lambda f: f.name) == sorted(
        [LeftOut(name=n, reason=r) for n, (_, r) in FOREIGN.items()]
        + [LeftOut(name="2026-W38.json", reason="not JSON")],
        key=lambda f: f.name,
    )


def test_foreign_files_do_not_stop_the_report(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("a", W48 + timedelta(days=1), 2, util=50.0))
    out = tmp_path / "out"
    fill_folder(out)
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        written = build(
            url,
            Request(week="2026-W48", tz=UTC, formats=("html", "json")),
            out,
            now=W48 + timedelta(days=8),
        )
    assert [p.name for p in written] == ["2026-W48.json", "2026-W48.html", "index.html"]
    ours = json.loads((out / "2026-W48.json").read_text())
    assert ours["generator"] == "gpu-kpi" and ours["schema"] == "gpu-kpi.week/1"
    index = (out / "index.html").read_text()
    # the two weeks that are ours: this one and the earlier version's W43
    assert 'href="2026-W48.html"' in index and 'href="2026-W43.html"' in index
    assert "2 weekly reports, 2026-W43 to 2026-W48" in index
    assert "12 files in this folder are not gpu-kpi week reports and left out" in index
    assert "notes-W01.json</span> (name is not YYYY-Www.json)" in index
    assert "&lt;i&gt;x-W02.json" in index and "<i>x" not in index  # escaped
    (line,) = [r.getMessage() for r in caplog.records if r.name == "gpu_kpi"]
    assert "leaves out 12 file(s)" in line and "notes-W01.json (name is not YYYY-Www.json)" in line
    assert "2026-W42.json (not a gpu-kpi week report)" in line and "config.json" not in line
    # the foreign files are left where they were
    assert (out / "notes-W01.json").read_text() == FOREIGN["notes-W01.json"][0]


def with_gpu_hours(week: str, value: str) -> str:
    """A gpu-kpi week JSON whose headline ``gpu_hours`` is the JSON number ``value``."""
    return week_json(week, generator="gpu-kpi").replace(
        '"gpu_hours": 10.0', f'"gpu_hours": {value}'
    )


# Files that made the parser or the number check raise past the reasons above (issue 10).
BREAKING = {
    "2026-W01.json": ("[" * 100_000, "not JSON (nested too deep)"),  # RecursionError
    "2026-W02.json": ('{"a":' * 100_000 + "1" + "}" * 100_000, "not JSON (nested too deep)"),
    "2026-W03.json": (
        with_gpu_hours("2026-W03", "1" + "0" * 400),
        "headline gpu_hours is not a number",
    ),
    "2026-W04.json": (
        with_gpu_hours("2026-W04", "-1e400"),
        "headline gpu_hours is not a number",
    ),  # -inf
}


def test_files_that_break_the_parser_or_the_float_range_are_left_out(tmp_path: Path) -> None:
    """JSON nested past the parser's depth raised RecursionError, an integer no float holds
    (10**400) OverflowError: each is a foreign file, left out with its reason."""
    out = tmp_path / "out"
    out.mkdir()
    for name, (text, _) in BREAKING.items():
        (out / name).write_text(text)
    (out / "2026-W05.json").write_text(week_json("2026-W05"))
    weeks, left_out = read_archive(out)
    assert [w["label"] for w in weeks] == ["2026-W05"]
    assert left_out == [LeftOut(name=n, reason=r) for n, (_, r) in BREAKING.items()]


def test_whatever_reading_a_foreign_file_raises_leaves_it_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only the errors foreseen: any exception while interpreting a file that is not ours
    (here MemoryError, as a file too big for memory gives) names it, with the reason."""
    from reports import archive as index

    out = tmp_path / "out"
    out.mkdir()
    (out / "2026-W05.json").write_text(week_json("2026-W05"))
    (out / "2026-W06.json").write_text(week_json("2026-W06"))
    real = index._week_row

    def week_row(name: str, text: str) -> dict[str, Any]:
        if name == "2026-W06.json":
            raise MemoryError
        return real(name, text)

    monkeypatch.setattr(index, "_week_row", week_row)
    weeks, left_out = read_archive(out)
    assert [w["label"] for w in weeks] == ["2026-W05"]
    assert left_out == [LeftOut(name="2026-W06.json", reason="unreadable (MemoryError)")]


def test_a_deeply_nested_foreign_file_does_not_stop_the_report(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The review's repro: ``'[' * 100000`` in the archive folder made ``gpu-kpi report``
    end in a RecursionError; now the report and the index are written and the file named."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("a", W48 + timedelta(days=1), 2, util=50.0))
    out = tmp_path / "out"
    out.mkdir()
    for name, (text, _) in BREAKING.items():
        (out / name).write_text(text)
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        written = build(
            url,
            Request(week="2026-W48", tz=UTC, formats=("html", "json")),
            out,
            now=W48 + timedelta(days=8),
        )
    assert [p.name for p in written] == ["2026-W48.json", "2026-W48.html", "index.html"]
    index = (out / "index.html").read_text()
    assert "4 files in this folder are not gpu-kpi week reports and left out" in index
    assert "2026-W01.json</span> (not JSON (nested too deep))" in index
    assert "2026-W03.json</span> (headline gpu_hours is not a number)" in index
    (line,) = [r.getMessage() for r in caplog.records if r.name == "gpu_kpi"]
    assert "leaves out 4 file(s)" in line
