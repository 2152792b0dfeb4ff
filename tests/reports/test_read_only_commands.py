"""Every reading command on a store this process may only read (a file opened read-only, a
read replica): the figures, and one warning that stale runs are not marked crashed, where
``runs`` and ``budgets`` once ended in "attempt to write a readonly database"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from clirun import gpu_kpi
from fakes import run_record

from tracker.store import RunStore

W48 = datetime(2026, 11, 23, tzinfo=UTC)


def test_runs_and_budgets_read_a_read_only_store(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with RunStore(f"sqlite:///{db}") as s:
        s.upsert_run(run_record("a", W48 + timedelta(days=1), 2, util=90.0))
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(
        f'store = "sqlite:///file:{db}?mode=ro&uri=true"\n\n'
        '[[budgets]]\nteam = "nlp"\nusd_per_week = 100\n'
    )
    listed = gpu_kpi("runs", "--config", str(config), "--week", "2026-W48", "--tz", "UTC")
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 2  # the header and run a
    assert "not marked crashed in it" in listed.stderr and "Traceback" not in listed.stderr
    budgets = gpu_kpi("budgets", "--config", str(config), "--week", "2026-W48")
    assert budgets.returncode == 0, budgets.stderr
    assert "not marked crashed in it" in budgets.stderr
