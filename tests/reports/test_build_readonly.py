"""The weekly report from a store the reporting user may only read (a read replica, a role with
SELECT only, a file opened read-only): the same figures as from the writable store, with a
warning for each write it leaves out (marking stale runs crashed, the BI tables)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fakes import run_record

from reports.build import build
from reports.request import Request
from tracker.store import RunStore

pytestmark = pytest.mark.usefixtures("blank_charts")

W48 = datetime(2026, 11, 23, tzinfo=UTC)
NOW = W48 + timedelta(days=8)


def read_only(url: str) -> str:
    """The same store, opened so that every write fails as it would for a reading-only user."""
    if url.startswith("sqlite:///"):
        return f"sqlite:///file:{url.removeprefix('sqlite:///')}?mode=ro&uri=true"
    return f"{url}?options=-c%20default_transaction_read_only%3Don"


def test_a_read_only_store_gives_the_same_report_with_two_warnings(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two finished runs and one that stopped beating 3 days ago (still "running" in the store):
    before, SQLite gave an error and PostgreSQL a traceback. Now the report is whole; the stale
    run counts to its last heartbeat (2 h), as it would once marked crashed."""
    with RunStore(store_url) as s:
        s.upsert_run(run_record("a", W48 + timedelta(days=1), 2, util=90.0))
        s.upsert_run(run_record("b", W48 + timedelta(days=2), 1, gpus=2, util=40.0))
        stale = run_record("c", W48 + timedelta(days=3), 2, util=10.0)
        beat = stale.started_at + timedelta(hours=2)
        s.upsert_run(stale.replace(status="running", ended_at=None, heartbeat_at=beat))
    req = Request(week="2026-W48", tz=UTC, formats=("json", "html"))
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        build(read_only(store_url), req, tmp_path / "ro", now=NOW)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert warnings[0].startswith("gpu-kpi: the store is read as it is (run store ")
    assert warnings[1].startswith("gpu-kpi: the 2026-W48 figures are not in the store's")
    with RunStore(store_url) as s:
        assert s.get_run("c").status == "running"  # type: ignore[union-attr]  # not written
    build(store_url, req, tmp_path / "rw", now=NOW)
    ro = json.loads((tmp_path / "ro" / "2026-W48.json").read_text())
    rw = json.loads((tmp_path / "rw" / "2026-W48.json").read_text())
    assert ro["headline"] == rw["headline"]
    assert ro["headline"]["gpu_hours"] == pytest.approx(2 + 2 + 2)
    assert (tmp_path / "ro" / "2026-W48.html").exists() and (
        tmp_path / "ro" / "index.html"
    ).exists()


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_role_that_may_only_select_gets_the_report_not_a_traceback(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The role's write privileges revoked (as a reporting role with SELECT only has them):
    "permission denied" was a traceback; now the same report and two warnings."""
    import sqlalchemy as sa

    req = Request(week="2026-W48", tz=UTC, formats=("json",))
    with RunStore(store_url) as s:
        s.upsert_run(run_record("a", W48 + timedelta(days=1), 2, util=90.0))
    build(store_url, req, tmp_path / "before", now=NOW)  # the BI tables made, as a writer would
    with RunStore(store_url) as s, s.engine.begin() as conn:
        conn.execute(
            sa.text(
                "REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public FROM CURRENT_USER"
            )
        )
        conn.execute(sa.text("REVOKE CREATE ON SCHEMA public FROM CURRENT_USER"))
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        build(store_url, req, tmp_path / "out", now=NOW)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("permission denied" in w for w in warnings)
    d = json.loads((tmp_path / "out" / "2026-W48.json").read_text())
    assert d["headline"]["gpu_hours"] == pytest.approx(2.0)
