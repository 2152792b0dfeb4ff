"""The sink contract (:class:`tracker.sinks.Sink`), run against every sink, each read back from
where it writes: the ``gpu_kpi`` log records, the offline W&B run files, the TensorBoard event
files. A new sink gets the suite by adding one line to ``SINKS`` (its maker and its reader).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
import readers
from fakes import run_record

from tracker.metrics import KEYS
from tracker.record import RunRecord
from tracker.sinks import LoggingSink, Sink, SinkSet

# Values a float32 (TensorBoard) and 4 significant digits (LoggingSink) keep exactly.
STEPS = {1: {"gpu/util_pct": 61.5, "cost/usd": 0.125}, 2: {"gpu/util_pct": 73.25, "cost/usd": 0.25}}
LOGGED = {"gpu/util_pct": [(1, 61.5), (2, 73.25)], "cost/usd": [(1, 0.125), (2, 0.25)]}
START = datetime(2026, 9, 21, 14, 0, tzinfo=UTC)
# 2 GPUs x 1 h x $3.85 = $7.70; mean utilization 67% is under the 70% target
FINAL = run_record(
    "contract-1", START, 1.0, gpus=2, util=67.0, cost_usd=7.7, verdict="below-target"
)
STARTED = FINAL.replace(
    status="running", ended_at=None, gpu_hours=0.0, util_pct=None, cost_usd=None, verdict=None
)
ALERT = ("Low GPU utilization", "util 67% under the 70% target")


@dataclass
class Written:
    """What a sink left where it writes, in one shape for every sink."""

    run_id: str | None = None
    metrics: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    verdict: str | None = None
    cost_usd: float | None = None
    alerts: list[str] = field(default_factory=list)


@dataclass
class Harness:
    sink: Sink
    read_back: Callable[[], Written]
    cleanup: Callable[[], None] = lambda: None


def _logging(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Harness:
    caplog.set_level(logging.INFO, logger="gpu_kpi")

    def read_back() -> Written:
        got = Written()
        for rec in caplog.records:
            text = rec.getMessage()
            if rec.name != "gpu_kpi":
                continue
            if m := re.fullmatch(r"gpu-kpi step (\d+): (.*)", text):
                for key, value in re.findall(r"(\S+)=(\S+)", m[2]):
                    got.metrics.setdefault(key, []).append((int(m[1]), float(value)))
            elif m := re.match(r"gpu-kpi run \S+ \((\S+)\): .*verdict ([^:\s]+)", text):
                got.verdict = m[2]
                got.cost_usd = float(re.findall(r"cost \$([\d.]+)", text)[0])
            elif m := re.match(r"gpu-kpi run \S+ \((\S+)\)", text):
                got.run_id = m[1]
            elif rec.levelno == logging.WARNING:
                got.alerts.append(text.removeprefix("gpu-kpi: "))
        return got

    return Harness(LoggingSink(), read_back)


def _wandb(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Harness:
    import wandb

    from tracker.sinks.wandb import WandbSink

    run = wandb.init(mode="offline", dir=str(tmp_path), project="gpu-kpi-contract")

    def read_back() -> Written:
        run.finish()
        got = readers.read_finished_wandb(tmp_path)
        metrics: dict[str, list[tuple[int, float]]] = {}
        for row in got.history:
            for key in sorted(KEYS & row.keys()):
                metrics.setdefault(key, []).append((row["train/global_step"], row[key]))
        return Written(
            run_id=got.config.get("gpu_kpi/run_id"),
            metrics=metrics,
            verdict=got.summary.get("gpu_kpi/verdict"),
            cost_usd=got.summary.get("gpu_kpi/cost_usd"),
            alerts=[f"{a['title']}: {a['text']}" for a in got.alerts],
        )

    return Harness(WandbSink(run, step_metric="train/global_step"), read_back, run.finish)


def _tensorboard(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Harness:
    from tracker.sinks.tensorboard import TensorBoardSink

    logdir = tmp_path / "tb"

    def read_back() -> Written:
        texts = readers.read_tensorboard_text(logdir)

        def text(prefix: str) -> list[str]:
            return next((v for k, v in texts.items() if k.startswith(prefix)), [])

        table = dict(re.findall(r"^\| (\w+) \| (.*) \|$", "\n".join(text("gpu-kpi/summary")), re.M))
        run_ids = re.findall(r"^- run_id: (\S+)$", "\n".join(text("gpu-kpi/run")), re.M)
        return Written(
            run_id=run_ids[0] if run_ids else None,
            metrics=readers.read_tensorboard(logdir),
            verdict=table.get("verdict"),
            cost_usd=float(table["cost_usd"]) if "cost_usd" in table else None,
            alerts=[re.sub(r"^\*\*(.*?)\*\*", r"\1", t) for t in text("gpu-kpi/alert")],
        )

    return Harness(TensorBoardSink(logdir=logdir), read_back)


SINKS: dict[str, Callable[[Path, pytest.LogCaptureFixture], Harness]] = {
    "logging": _logging,
    "wandb": _wandb,
    "tensorboard": _tensorboard,
}


@pytest.fixture(params=list(SINKS))
def harness(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Harness]:
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    made = SINKS[request.param](tmp_path, caplog)
    try:
        yield made
    finally:
        made.cleanup()


def drive(sink: Sink | SinkSet, *, alert: bool = True) -> None:
    """A whole run: start, two logging steps, an alert, the summary, close."""
    sink.start(STARTED)
    for step, metrics in STEPS.items():
        sink.log_metrics(metrics, step)
    if alert:
        sink.alert(*ALERT)
    sink.summary(FINAL)
    sink.close()


# -- the contract -------------------------------------------------------------------------------


def test_is_a_sink(harness: Harness) -> None:
    assert isinstance(harness.sink, Sink)
    assert harness.sink.name in SINKS


def test_a_whole_run_can_be_read_back(harness: Harness) -> None:
    drive(harness.sink)
    got = harness.read_back()
    assert got.run_id == "contract-1"
    assert got.metrics == LOGGED
    assert (got.verdict, got.cost_usd) == ("below-target", 7.7)
    assert got.alerts == ["Low GPU utilization: util 67% under the 70% target"]


class Broken:
    """Fails at its first log_metrics (and would at every later call)."""

    name = "broken"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _call(self, method: str) -> None:
        self.calls.append(method)
        if method != "start":
            raise RuntimeError(f"{method} failed")

    def start(self, record: RunRecord) -> None:
        self._call("start")

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._call("log_metrics")

    def summary(self, record: RunRecord) -> None:
        self._call("summary")

    def alert(self, title: str, text: str) -> None:
        self._call("alert")

    def close(self) -> None:
        self._call("close")


def test_in_a_sink_set_a_failing_sink_is_turned_off_and_the_others_go_on(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    broken = Broken()
    sinks = SinkSet([broken, harness.sink])  # the failing one first: the next one still gets step 1
    with caplog.at_level(logging.INFO, logger="gpu_kpi"):
        drive(sinks, alert=False)
    assert broken.calls == ["start", "log_metrics"]
    assert sinks.sinks == [harness.sink]
    warned = [r.getMessage() for r in caplog.records if "sink 'broken' failed" in r.getMessage()]
    assert warned == [
        "gpu-kpi: sink 'broken' failed (RuntimeError: log_metrics failed); "
        "it is turned off for this run"
    ]
    got = harness.read_back()
    assert got.metrics == LOGGED
    assert (got.verdict, got.cost_usd) == ("below-target", 7.7)
