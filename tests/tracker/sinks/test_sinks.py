"""The W&B and TensorBoard sinks on their own, written for real and read back."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import readers
from fakes import Clock

from tracker import track
from tracker.sinks import SinkSet
from tracker.sinks.tensorboard import TensorBoardSink
from tracker.sinks.wandb import WandbSink


def run_input_bound(sink: object, minutes: int = 12) -> object:
    """An input-bound (60%) plain-loop run in injected time, logging every 60 s."""
    clock = Clock()
    with track(
        name="ib",
        backend="simulated:input-bound@H100",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_every_s=60.0,
        sinks=[sink],
        log_to_python=False,
    ) as run:
        for _ in range(minutes * 60):
            clock.t += 1.0
            run.sampler.sample()  # type: ignore[union-attr]
            run.step(samples=16)
    return run.record


def test_tensorboard_scalars_and_summary(tmp_path: Path) -> None:
    record = run_input_bound(TensorBoardSink(logdir=tmp_path))
    scalars = readers.read_tensorboard(tmp_path)
    util = scalars["gpu/util_pct"]
    assert [step for step, _ in util] == [60 * k for k in range(1, 13)]
    assert all(v == pytest.approx(60.0) for _, v in util)
    assert scalars["perf/samples_per_s"][0][1] == pytest.approx(16.0)
    assert scalars["cost/usd"][-1][1] == pytest.approx(3.85 * 12 / 60)  # at 12 min
    texts = readers.read_tensorboard_text(tmp_path)
    summary = next(v for k, v in texts.items() if k.startswith("gpu-kpi/summary"))
    assert "| verdict | below-target |" in summary[-1]
    assert record.verdict == "below-target"  # type: ignore[attr-defined]
    alert = next(v for k, v in texts.items() if k.startswith("gpu-kpi/alert"))
    assert "60%" in alert[0] and "70%" in alert[0]
    run = next(v for k, v in texts.items() if k.startswith("gpu-kpi/run"))
    assert "gpu_model: H100" in run[0] and "price_per_gpu_hour: 3.85" in run[0]


def test_wandb_offline_run_gets_metrics_summary_config_and_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    wb = wandb.init(mode="offline", dir=str(tmp_path), project="gpu-kpi-test")
    record = run_input_bound(WandbSink(wb, step_metric="train/global_step"))
    wb.finish()
    got = readers.read_finished_wandb(tmp_path)
    rows = [h for h in got.history if "gpu/util_pct" in h]
    assert [r["train/global_step"] for r in rows] == [60 * k for k in range(1, 13)]
    assert rows[0]["gpu/util_pct"] == pytest.approx(60.0)
    assert got.summary["gpu_kpi/verdict"] == "below-target"
    assert got.summary["gpu_kpi/cost_usd"] == pytest.approx(record.cost_usd)  # type: ignore[attr-defined]
    # CO2e is logged as the total so far, so the summary (the last value per key) holds the
    # run's: 12 min of 70 W + 630 W x 60% at the default 480 g/kWh, PUE 1
    last = rows[-1]
    assert last["gpu/co2e_kg"] == pytest.approx(last["gpu/energy_kwh"] * 480 / 1000)
    assert got.summary["gpu/energy_kwh"] == pytest.approx(448 * 720 / 3.6e6)  # 0.0896 kWh
    assert got.summary["gpu/co2e_kg"] == pytest.approx(0.0896 * 0.48)
    assert got.config["gpu_kpi/run_id"] == record.id  # type: ignore[attr-defined]
    assert got.config["gpu_kpi/price_per_gpu_hour"] == 3.85
    (alert,) = got.alerts
    assert alert["title"] == "Low GPU utilization" and "60%" in alert["text"]
    # our keys are charted against the trainer's step, as the HF WandbCallback's are
    assert {(m["glob_name"], m["step_metric"]) for m in got.metrics if m["glob_name"]} == {
        ("gpu/*", "train/global_step"),
        ("perf/*", "train/global_step"),
        ("cost/*", "train/global_step"),
    }


def test_unwritable_tensorboard_dir_turns_the_sink_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    sinks = SinkSet([TensorBoardSink(logdir=blocker / "tb")])
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        record = run_input_bound(sinks.sinks[0], minutes=2)
    assert record is not None
    warned = [m for m in caplog.messages if "sink 'tensorboard' failed" in m]
    assert len(warned) == 1


def test_the_wandb_summary_holds_the_runs_values_not_the_last_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logged every 7 s on a 10 s cycle (6 s at 100%, 4 s idle), the windows swing around the
    run's 60%; W&B keeps a key's last logged value as its summary unless told the run's."""
    import wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    wb = wandb.init(mode="offline", dir=str(tmp_path), project="gpu-kpi-test")
    clock = Clock()
    with track(
        name="ib",
        backend="simulated:input-bound@H100",
        store=False,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_every_s=7.0,
        log_to_python=False,
        sinks=[WandbSink(wb, step_metric="train/global_step")],
        print_summary=False,
    ) as run:
        for _ in range(600):
            clock.t += 1.0
            run.sampler.sample()  # type: ignore[union-attr]
            run.step(samples=16)
    wb.finish()
    got = readers.read_finished_wandb(tmp_path)
    last = [h for h in got.history if "gpu/util_pct" in h][-1]
    assert last["gpu/util_pct"] != pytest.approx(60.0)  # the last window's
    record = run.record
    assert record is not None and record.util_pct == pytest.approx(60.0)
    assert got.summary["gpu/util_pct"] == pytest.approx(60.0)
    assert got.summary["perf/samples_per_s"] == pytest.approx(16.0)
    assert got.summary["cost/usd"] == pytest.approx(record.cost_usd)
    assert got.summary["gpu/power_w"] == pytest.approx(70 + 630 * 0.6)  # the run's mean draw
