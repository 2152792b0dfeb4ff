"""``gpu-kpi report --since WEEK`` / ``--all``: every week the archive lacks, the index once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fakes import StoreTemplates, run_record

from reports.build import backfill, build
from reports.cli import main
from reports.errors import ReportError
from reports.request import Request
from tracker.store import RunStore

pytestmark = pytest.mark.usefixtures("blank_charts")  # the pages' text, not their charts

W45 = datetime(2026, 11, 2, tzinfo=UTC)  # Monday of 2026-W45
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)  # in W49: the last complete week is W48
REQ = Request(week=None, tz=UTC, formats=("html", "json"))


def fill(u: str) -> None:
    """W45: 4 GPU-h; W47: 6 GPU-h."""
    with RunStore(u) as store:
        store.upsert_run(run_record("a", W45 + timedelta(days=1), 4))  # W45: 4 GPU-h
        store.upsert_run(run_record("b", W45 + timedelta(days=15), 2, gpus=3))  # W47: 6 GPU-h


@pytest.fixture
def url(tmp_path: Path, store_templates: StoreTemplates) -> str:
    """A store of :func:`fill`, the test's own (a copy of the module's)."""
    u = f"sqlite:///{tmp_path / 'runs.db'}"
    store_templates.made(u, "fill", fill)
    return u


def gpu_hours(out: Path, week: str) -> float:
    return float(json.loads((out / f"{week}.json").read_text())["headline"]["gpu_hours"])


def test_since_archives_the_missing_weeks_then_the_index_once(tmp_path: Path, url: str) -> None:
    out = tmp_path / "archive"
    build(url, Request(week="2026-W46", tz=UTC, formats=("html", "json")), out, now=NOW)
    kept = (out / "2026-W46.json").read_bytes()
    (out / "2026-W46.json").write_bytes(kept.replace(b'"runs"', b'"runs" '))  # marked
    said: list[str] = []
    written = backfill(url, REQ, out, since="2026-W45", now=NOW, say=said.append)
    assert sorted(p.name for p in written) == [
        "2026-W45.html",
        "2026-W45.json",
        "2026-W47.html",
        "2026-W47.json",
        "index.html",
    ]  # W48 has no run: no page of zeros
    assert said == [
        "2026-W45: 1/4 weeks",
        "2026-W47: 3/4 weeks",
        "archived 2 week(s); skipped 1 without GPU time and 1 already archived",
    ]
    assert (out / "2026-W46.json").read_bytes() != kept  # the archived week was left alone
    assert (gpu_hours(out, "2026-W45"), gpu_hours(out, "2026-W47")) == (4.0, 6.0)
    index = (out / "index.html").read_text()
    assert all(f'href="2026-W4{n}.html"' in index for n in (5, 6, 7))
    # nothing left to archive: only the index again
    assert [p.name for p in backfill(url, REQ, out, since="2026-W45", now=NOW)] == ["index.html"]


def test_all_starts_at_the_oldest_run(tmp_path: Path, url: str) -> None:
    with RunStore(url) as store:
        store.upsert_run(run_record("old", datetime(2026, 10, 1, tzinfo=UTC), 1))  # 2026-W40
    out = tmp_path / "archive"
    backfill(url, Request(week=None, tz=UTC, formats=("json",)), out, since=None, now=NOW)
    # the weeks a run overlaps, from the oldest run's: W40, W45, W47 (W41-W44, W46, W48 empty)
    assert sorted(p.name for p in out.iterdir()) == [f"2026-W{w}.json" for w in (40, 45, 47)]
    assert gpu_hours(out, "2026-W40") == 1.0


def test_since_reaches_back_no_further_than_the_oldest_run(tmp_path: Path, url: str) -> None:
    out = tmp_path / "archive"
    backfill(url, Request(week=None, tz=UTC, formats=("json",)), out, since="1970-W02", now=NOW)
    assert sorted(p.name for p in out.iterdir()) == [f"2026-W{w}.json" for w in (45, 47)]


def test_a_run_across_weeks_archives_each_week_it_overlaps(tmp_path: Path) -> None:
    """A run from Sunday 2026-11-15 20:00 for 30 h reaches into W47: W46 and W47 are archived
    with 4 and 26 GPU-hours; W45 and W48, which it does not touch, are not."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store:
        store.upsert_run(run_record("long", datetime(2026, 11, 15, 20, tzinfo=UTC), 30))
        store.upsert_run(run_record("early", W45 + timedelta(hours=1), 1))
    out = tmp_path / "archive"
    backfill(url, Request(week=None, tz=UTC, formats=("json",)), out, since="2026-W46", now=NOW)
    assert sorted(p.name for p in out.iterdir()) == ["2026-W46.json", "2026-W47.json"]
    assert (gpu_hours(out, "2026-W46"), gpu_hours(out, "2026-W47")) == (4.0, 26.0)


def test_a_week_not_complete_yet(tmp_path: Path, url: str) -> None:
    with pytest.raises(
        ReportError, match="--since 2026-W49: after the last complete week, 2026-W48"
    ):
        backfill(url, REQ, tmp_path / "a", since="2026-W49", now=NOW)
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--week", "2026-W45", "--since", "2026-W44"], "--week is one week; --since/--all"),
        (["--since", "2026-W99"], "2026-W99"),
    ],
)
def test_the_command_refuses_what_it_cannot_do(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code = main(["report", "--store", url, "--out", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
