"""Issue 10, the tracker's border: text that is not text and a config file with a mistake cost
a warning, never the run and never its store. Real sessions, real SQLite stores."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fakes import Clock

from tracker import track
from tracker.store import RunStore


def _run(**kw: object) -> str:
    clock = Clock()
    with track(
        backend="simulated:healthy@H100", clock=clock, threaded=False, log_to_python=False, **kw
    ) as run:
        for _ in range(3):
            clock.t += 1.0
            run.step(samples=8)
    return run.id


def test_text_that_is_not_text_is_recorded_as_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"

    class Odd:
        def __str__(self) -> str:
            return "odd"

    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        run_id = _run(
            store=url,
            name=b"exp-42\n",
            team=None,
            project=7,
            user=b"\xffana",
            links={"wandb": Odd(), b"tb": "/runs/x"},
            tags=("a", 3),
        )
    with RunStore(url) as store:
        r = store.get_run(run_id)
    assert r is not None and r.status == "finished" and r.steps == 3
    assert (r.name, r.team, r.project, r.user) == ("exp-42\n", "", "7", "\ufffdana")
    assert r.links == {"wandb": "odd", "tb": "/runs/x"} and r.tags == ("a", "3")
    warnings = [m for m in caplog.messages if "not text" in m]
    assert len(warnings) == 1 and "name" in warnings[0] and "team" in warnings[0]


def test_a_misspelt_section_does_not_send_runs_to_another_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    team_store = tmp_path / "team" / "runs.db"
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'store = "sqlite:///{team_store}"\n[smpt]\nhost = "mail"\n'
        '[tracker]\nwarmup_steps = "many"\n'
    )
    monkeypatch.setenv("GPU_KPI_CONFIG", str(cfg))
    monkeypatch.delenv("GPU_KPI_STORE", raising=False)
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        run_id = _run()
    with RunStore(f"sqlite:///{team_store}") as store:
        r = store.get_run(run_id)
    assert r is not None and r.status == "finished"
    (warning,) = [m for m in caplog.messages if "config" in m]
    assert "smpt: unknown setting (did you mean 'smtp'?)" in warning
    assert "tracker.warmup_steps: expected a number" in warning
