"""The Hugging Face ``Trainer`` callback: real training on CPU of a tiny GPT-2 built from a config
(no hub download), W&B in offline mode and TensorBoard read back from disk, the run store on
SQLite. The GPU is simulated (``simulated:PROFILE@MODEL``), so utilization, price and peak FLOP/s
are known; step timing is real, so figures that depend on it are checked through identities
that hold whatever the machine's speed (e.g. FLOPs per token = MFU x peak / tokens per second).

The tests of step time and data wait run the session on an injected clock (:class:`fakes.Clock`)
that only the run's stand-ins move: each forward pass adds STEP_S ("the GPU's compute"), a slow
sample read or a slow reporter adds its seconds instead of sleeping. The Trainer and its hooks run
for real; what a figure counts is then exact arithmetic at any load on the machine."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import readers  # noqa: E402
from fakes import Clock, spend  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from tracker.gpu import GpuInfo, GpuReading  # noqa: E402
from tracker.record import RunRecord  # noqa: E402
from tracker.store import RunStore  # noqa: E402
from tracker.store import writer as writer_module  # noqa: E402
from tracker.store.spool import Spool  # noqa: E402
from tracker.transformers import GpuKpiCallback  # noqa: E402

pytestmark = pytest.mark.trainer

REPO = Path(__file__).resolve().parents[2]

# A GPT-2 small enough for CPU yet with steps (~30 ms) long against the tracker's own logging.
N_LAYER, N_EMBD, VOCAB, SEQ_LEN, BATCH = 2, 128, 128, 64, 8
# Parameters without the token/position embeddings (HF's exclude_embeddings=True), by hand:
# per block ln_1 2d + attn (d x 3d + 3d) + proj (d x d + d) + ln_2 2d + mlp (d x 4d + 4d) +
# (4d x d + d) = 12 d^2 + 13 d; plus the final ln_f 2d.
N_NON_EMBEDDING = N_LAYER * (12 * N_EMBD**2 + 13 * N_EMBD) + 2 * N_EMBD
FLOPS_PER_TOKEN = 6 * N_NON_EMBEDDING  # what Trainer.floating_point_ops counts (fwd + bwd)
H100_FP32_TFLOPS = 66.9  # dense fp32 peak (torch's default "highest" matmul precision)
H100_USD_PER_HOUR = 3.85
HEALTHY_UTIL = 92.0
STEP_S = 0.03  # a training step's "GPU compute" on an injected clock: one forward pass


# -- fixtures and helpers ---------------------------------------------------------------------


def finish_wandb() -> None:
    """Finish the W&B run and wait until its .wandb file is complete: ``wandb.finish()`` can
    return before wandb-core has written the last records (seen with 0.31 offline);
    ``wandb.teardown()`` waits for the service to exit."""
    import wandb

    wandb.finish()
    wandb.teardown()


def _reset_wandb() -> None:
    """Finish a W&B run left open and drop wandb's process-wide settings, which keep the
    WANDB_* variables of the first ``wandb.init`` (its directory) for the process's life."""
    wandb = sys.modules.get("wandb")
    if wandb is None:
        return
    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()


@pytest.fixture(autouse=True)
def _hf_and_wandb_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No hub access, W&B offline under tmp_path, no TensorBoard dir from the environment;
    any W&B run a test leaves open is finished."""
    _reset_wandb()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    wandb_dir = tmp_path / "wandb"
    wandb_dir.mkdir()
    for key, value in (
        ("WANDB_MODE", "offline"),
        ("WANDB_DIR", str(wandb_dir)),
        ("WANDB_PROJECT", "gpu-kpi-tests"),
        ("WANDB_SILENT", "true"),
        ("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config")),
        ("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache")),
        ("WANDB_DATA_DIR", str(tmp_path / "wandb-data")),
    ):
        monkeypatch.setenv(key, value)
    for key in ("TENSORBOARD_LOGGING_DIR", "WANDB_RUN_ID", "WANDB_LOG_MODEL", "WANDB_WATCH"):
        monkeypatch.delenv(key, raising=False)
    yield
    _reset_wandb()


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """One intra-op thread: step times stay steady when other processes share the CPUs
    (OpenMP threads spinning against each other make steps 10x slower and erratic)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Tokens(Dataset[dict[str, Any]]):
    """``n`` fixed random sequences of SEQ_LEN tokens; ``sleep_s`` per item imitates slow I/O
    (on ``clock`` when given)."""

    def __init__(
        self, n: int = 256, *, sleep_s: float = 0.0, seed: int = 0, clock: Clock | None = None
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=g)
        self.sleep_s = sleep_s
        self.clock = clock

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.sleep_s:
            spend(self.sleep_s, self.clock)
        return {"input_ids": self.x[i], "labels": self.x[i]}


def tiny_gpt2() -> Any:
    torch.manual_seed(0)
    return GPT2LMHeadModel(
        GPT2Config(
            n_layer=N_LAYER,
            n_head=2,
            n_embd=N_EMBD,
            vocab_size=VOCAB,
            n_positions=SEQ_LEN,
            bos_token_id=0,
            eos_token_id=0,
        )
    )


def make_trainer(
    tmp_path: Path,
    callback: TrainerCallback,
    *,
    train: Dataset[Any] | None = None,
    evaluate: Dataset[Any] | None = None,
    clock: Clock | None = None,
    **overrides: Any,
) -> Any:
    """A Trainer on tiny_gpt2; defaults: 20 steps of BATCH, logging every 5, no reporters,
    no checkpoints, token counting on. With ``clock``, each forward pass adds STEP_S to it."""
    args: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"),
        max_steps=20,
        logging_steps=5,
        per_device_train_batch_size=BATCH,
        include_num_input_tokens_seen=True,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    args.update(overrides)
    model = tiny_gpt2()
    if clock is not None:
        model.register_forward_pre_hook(lambda module, inputs: spend(STEP_S, clock))
    return Trainer(
        model=model,
        args=TrainingArguments(**args),
        train_dataset=train if train is not None else Tokens(),
        eval_dataset=evaluate,
        callbacks=[callback],
    )


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def our_tb_dir(tmp_path: Path) -> Path:
    """Our TensorBoard run's directory: one per train(), named as the Trainer names its own."""
    (logdir,) = [p for p in (tmp_path / "out" / "runs").iterdir() if "_gpu-kpi-" in p.name]
    return logdir


def stored(tmp_path: Path) -> list[RunRecord]:
    store = RunStore(sqlite_url(tmp_path))
    try:
        return store.list_runs()
    finally:
        store.close()


def final(callback: GpuKpiCallback) -> RunRecord:
    record = callback.record
    assert record is not None, "the callback has no final record"
    return record


def duration_s(record: RunRecord) -> float:
    assert record.ended_at is not None
    return (record.ended_at - record.started_at).total_seconds()


def flops_per_token(record: RunRecord) -> float:
    """Model FLOPs per token the record implies: MFU x peak x GPUs / tokens per second (the
    measured time cancels out)."""
    assert record.mfu is not None and record.tokens_per_s
    return record.mfu * H100_FP32_TFLOPS * 1e12 * record.gpu_count / record.tokens_per_s


def gpu_kpi_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "gpu_kpi" and r.levelno >= logging.WARNING
    ]


def value_at(series: list[tuple[int, float]], step: int) -> float:
    return dict(series)[step]


# -- 1. W&B, TensorBoard and the store, lined up with the Trainer -------------------------------


def test_wandb_tensorboard_and_store_line_up_with_the_trainer(tmp_path: Path) -> None:
    assert tiny_gpt2().num_parameters(exclude_embeddings=True) == N_NON_EMBEDDING
    # on the injected clock: each step's STEP_S exactly, no input wait from a busy machine
    clock = Clock()
    cb = GpuKpiCallback(
        backend="simulated:healthy@H100", store=sqlite_url(tmp_path), project="hf", clock=clock
    )
    trainer = make_trainer(tmp_path, cb, report_to=["wandb", "tensorboard"], clock=clock)
    trainer.train()
    finish_wandb()  # nothing reaches the .wandb file before the run finishes
    r = final(cb)

    # W&B: our rows carry the Trainer's step metric, at the steps where it logged its loss
    run = readers.read_wandb(tmp_path / "wandb")
    loss_steps = [row["train/global_step"] for row in run.history if "train/loss" in row]
    ours = [row for row in run.history if "gpu/util_pct" in row]
    assert loss_steps == [5, 10, 15, 20]
    assert [row["train/global_step"] for row in ours] == loss_steps
    for row in ours:
        assert row["gpu/util_pct"] == pytest.approx(HEALTHY_UTIL)
        for key in (
            "perf/samples_per_s",
            "perf/tokens_per_s",
            "perf/tflops",
            "perf/mfu",
            "cost/usd",
        ):
            assert readers.is_finite(row[key]) and row[key] > 0, key
        # every sample is SEQ_LEN tokens (tokens come from num_input_tokens_seen)
        assert row["perf/tokens_per_s"] / row["perf/samples_per_s"] == pytest.approx(SEQ_LEN)
        # FLOPs from total_flos: 6 x non-embedding parameters per token, and MFU against the
        # H100's fp32 peak
        assert row["perf/tflops"] * 1e12 / row["perf/tokens_per_s"] == pytest.approx(
            FLOPS_PER_TOKEN, rel=1e-6
        )
        assert row["perf/mfu"] == pytest.approx(row["perf/tflops"] / H100_FP32_TFLOPS, rel=1e-9)
    plotted_against = {m["glob_name"]: m["step_metric"] for m in run.metrics if m["glob_name"]}
    for prefix in ("gpu/*", "perf/*", "cost/*"):
        assert plotted_against[prefix] == "train/global_step"
    costs = [row["cost/usd"] for row in ours]
    assert r.cost_usd is not None and costs == sorted(costs) and costs[-1] <= r.cost_usd
    assert run.summary["gpu_kpi/verdict"] == r.verdict
    assert run.summary["gpu_kpi/cost_usd"] == pytest.approx(r.cost_usd)
    assert run.config["gpu_kpi/run_id"] == r.id
    assert run.config["gpu_kpi/gpu_model"] == "H100"

    # TensorBoard: our own run dir next to the Trainer's timestamped one, named like it
    logdir = our_tb_dir(tmp_path)
    assert r.links["tensorboard"] == str(logdir)
    assert logdir.name.endswith(f"_{socket.gethostname()}_gpu-kpi-{r.id[:8]}")
    scalars = readers.read_tensorboard(logdir)
    assert scalars["gpu/util_pct"] == [(s, pytest.approx(HEALTHY_UTIL)) for s in (5, 10, 15, 20)]
    summary = readers.read_tensorboard_text(logdir)["gpu-kpi/summary/text_summary"]
    assert len(summary) == 1 and f"| verdict | {r.verdict} |" in summary[0]
    # HF's own TensorBoard run is untouched by ours
    hf_dirs = [p for p in (tmp_path / "out" / "runs").iterdir() if p != logdir]
    assert len(hf_dirs) == 1 and "gpu/util_pct" not in readers.read_tensorboard(hf_dirs[0])

    # the run store, and the numbers by hand
    (s,) = stored(tmp_path)
    assert (s.id, s.status, s.framework, s.project) == (r.id, "finished", "transformers", "hf")
    assert (s.gpu_model, s.gpu_count, s.gpu_source) == ("H100", 1, "simulated")
    assert s.steps == 20
    assert s.samples == 20 * BATCH * 1  # steps x per-device batch x gradient accumulation
    assert s.tokens == s.samples * SEQ_LEN == trainer.state.num_input_tokens_seen
    assert s.util_pct == pytest.approx(HEALTHY_UTIL)
    assert s.gpu_hours == pytest.approx(duration_s(s) / 3600, rel=1e-3)
    assert s.cost_usd == pytest.approx(s.gpu_hours * H100_USD_PER_HOUR)
    assert s.waste_usd == 0.0  # 92% is above the 85% target
    assert flops_per_token(s) == pytest.approx(FLOPS_PER_TOKEN, rel=1e-6)
    # a fast loop on a busy GPU is not input-bound; tiny-model MFU (~1e-4) is low-efficiency
    assert s.data_wait_pct is not None and s.data_wait_pct < 10.0
    assert s.mfu is not None and s.mfu < 0.01
    assert s.verdict == r.verdict == "low-efficiency"


# -- 2. gradient accumulation --------------------------------------------------------------------


def test_gradient_accumulation_counts_samples_per_optimizer_step(tmp_path: Path) -> None:
    logged: list[int] = []

    class Steps(GpuKpiCallback):
        def on_log(
            self,
            args: Any,
            state: Any,
            control: Any,
            logs: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> None:
            logged.append(state.global_step)
            super().on_log(args, state, control, logs, **kwargs)

    cb = Steps(backend="simulated:healthy@H100", store=sqlite_url(tmp_path))
    trainer = make_trainer(
        tmp_path, cb, max_steps=10, gradient_accumulation_steps=2, report_to=["tensorboard"]
    )
    trainer.train()
    r = final(cb)
    per_step = BATCH * 2
    assert trainer.state.global_step == r.steps == 10
    assert r.samples == 10 * per_step
    assert r.tokens == 10 * per_step * SEQ_LEN == trainer.state.num_input_tokens_seen
    scalars = readers.read_tensorboard(our_tb_dir(tmp_path))
    # one log per logging step (not per micro-batch)
    assert [s for s, _ in scalars["gpu/util_pct"]] == [5, 10]
    for step in (5, 10):
        rate = value_at(scalars["perf/samples_per_s"], step)
        step_ms = value_at(scalars["perf/step_time_ms"], step)
        # samples per second x seconds per optimizer step = samples per optimizer step
        assert rate * step_ms / 1000 == pytest.approx(per_step, rel=1e-5)
        tokens = value_at(scalars["perf/tokens_per_s"], step)
        assert value_at(scalars["perf/tflops"], step) * 1e12 / tokens == pytest.approx(
            FLOPS_PER_TOKEN, rel=1e-5
        )
    # the Trainer called on_log twice at step 10 (its log, then the end-of-training one);
    # we logged once (above)
    assert logged.count(10) == 2


# -- 3. MFU from total_flos --------------------------------------------------------------------


def test_mfu_is_six_times_non_embedding_parameters_per_token(tmp_path: Path) -> None:
    """MFU x peak x time = FLOPs: with tokens per second from the same measured time, MFU =
    6 N x tokens/s / peak, N counted by hand (HF's floating_point_ops)."""
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=False)
    trainer = make_trainer(tmp_path, cb, max_steps=12, logging_steps=4)
    trainer.train()
    r = final(cb)
    assert r.tokens_per_s is not None and r.mfu is not None and r.tokens is not None
    expected = FLOPS_PER_TOKEN * r.tokens_per_s / (H100_FP32_TFLOPS * 1e12)
    assert r.mfu == pytest.approx(expected, rel=1e-6)
    assert (r.mfu_dtype, r.mfu_dtype_from) == ("fp32", "trainer")  # the arguments' precision
    # total_flos is what the Trainer counted: the same 6 N per token
    assert trainer.state.total_flos == pytest.approx(FLOPS_PER_TOKEN * r.tokens)


def test_user_flops_per_step_wins_over_total_flos(tmp_path: Path) -> None:
    flops = 1.0e11  # per step and GPU: MFU = 1e11 x steps/s / 66.9e12
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=False, flops_per_step=flops)
    make_trainer(tmp_path, cb, max_steps=10).train()
    r = final(cb)
    assert r.samples_per_s is not None and r.mfu is not None
    steps_per_s = r.samples_per_s / BATCH
    assert r.mfu == pytest.approx(flops * steps_per_s / (H100_FP32_TFLOPS * 1e12), rel=1e-6)


def test_record_mfu_is_right_when_evaluation_interrupts_steps(tmp_path: Path) -> None:
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=False)
    make_trainer(
        tmp_path, cb, max_steps=20, eval_strategy="steps", eval_steps=5, evaluate=Tokens(8, seed=1)
    ).train()
    assert flops_per_token(final(cb)) == pytest.approx(FLOPS_PER_TOKEN, rel=1e-6)


# -- 4. evaluation, saving, slow input --------------------------------------------------------


def test_evaluation_and_saving_are_not_data_wait(tmp_path: Path) -> None:
    eval_sleep_s, eval_items = 0.05, 6
    clock = Clock()
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=False, clock=clock)
    trainer = make_trainer(
        tmp_path,
        cb,
        clock=clock,
        eval_strategy="steps",
        eval_steps=5,
        per_device_eval_batch_size=eval_items,
        save_strategy="steps",
        save_steps=10,
        report_to=["tensorboard"],
        evaluate=Tokens(eval_items, sleep_s=eval_sleep_s, seed=1, clock=clock),
    )
    started = clock.t
    trainer.train()
    r = final(cb)
    evaluations = [e for e in trainer.state.log_history if "eval_runtime" in e]
    eval_s = 4 * (eval_items * eval_sleep_s + STEP_S)  # four of 0.33 s: reads and one forward
    assert len(evaluations) == 4
    assert clock.t - started == pytest.approx(20 * STEP_S + eval_s)
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == [
        "checkpoint-10",
        "checkpoint-20",
    ]
    assert r.data_wait_pct == 0
    assert r.verdict != "input-bound"
    # throughput is over training time only: a step's compute, the evaluations left out
    assert r.samples_per_s == pytest.approx(BATCH / STEP_S)
    assert duration_s(r) == pytest.approx(20 * STEP_S + eval_s, abs=1e-3)  # the run's own clock
    scalars = readers.read_tensorboard(our_tb_dir(tmp_path))
    step_ms = dict(scalars["perf/step_time_ms"])
    assert sorted(step_ms) == [5, 10, 15, 20]
    # the windows after an evaluation hold no step that spans it (330 ms): each step is 30 ms
    assert list(step_ms.values()) == [pytest.approx(1000 * STEP_S)] * 4
    # window-level FLOPs stay 6 N per token across the pauses
    for step, tokens in scalars["perf/tokens_per_s"]:
        assert value_at(scalars["perf/tflops"], step) * 1e12 / tokens == pytest.approx(
            FLOPS_PER_TOKEN, rel=1e-5
        )


class ListSink:
    """A sink that keeps what it is given (session kwarg ``sinks=[...]``)."""

    name = "list"

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []

    def start(self, record: RunRecord) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.logged.append((step, dict(metrics)))

    def summary(self, record: RunRecord) -> None:
        pass

    def alert(self, title: str, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def test_trainer_logging_is_step_time_not_data_wait(tmp_path: Path) -> None:
    """A log step's work (the loss read-back, a GPU sync; the reporters' writes) runs between
    on_step_end and the next batch: it must not read as waiting for input."""
    log_s = 0.06
    clock = Clock()

    class SlowReporter(TrainerCallback):  # like a W&B/TensorBoard reporter, before ours
        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            spend(log_s, clock)

    sink = ListSink()
    cb = GpuKpiCallback(
        backend="simulated:healthy@H100", store=False, sinks=[sink], warmup_steps=0, clock=clock
    )
    trainer = make_trainer(tmp_path, cb, max_steps=12, logging_steps=2, clock=clock)
    trainer.add_callback(SlowReporter())
    trainer.callback_handler.callbacks.sort(key=lambda c: c is cb)  # ours runs last
    trainer.train()
    r = final(cb)
    assert r.data_wait_pct == 0
    assert r.verdict != "input-bound"
    # the logging counts in the step time of the windows it falls in: a window holds a plain
    # step (30 ms) and a log step (30 + 60 ms), a mean of 60 ms; the first window holds only
    # its log step (the step after start is not measured)
    assert [step for step, _ in sink.logged] == [2, 4, 6, 8, 10, 12]
    assert sink.logged[0][1]["perf/step_time_ms"] == pytest.approx(1000 * (STEP_S + log_s))
    for step, metrics in sink.logged[1:]:
        assert metrics["perf/step_time_ms"] == pytest.approx(1000 * (STEP_S + log_s / 2)), step


def test_slow_dataset_is_input_bound(tmp_path: Path) -> None:
    # 8 items x 8 ms = 64 ms of loading per step against 30 ms of compute: 64 / 94 waiting
    clock = Clock()
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=False, clock=clock)
    train = Tokens(sleep_s=0.008, clock=clock)
    make_trainer(tmp_path, cb, max_steps=10, train=train, clock=clock).train()
    r = final(cb)
    assert r.data_wait_pct == pytest.approx(100 * 64 / 94, abs=0.01)  # 68.1%
    assert r.verdict == "input-bound"
    assert r.advice is not None and "DataLoader workers" in r.advice


# -- 5. resuming, and one callback for several train() calls ------------------------------------


def test_resumed_run_counts_only_its_own_steps(tmp_path: Path) -> None:
    n = 6
    common: dict[str, Any] = dict(logging_steps=2, save_strategy="steps", save_steps=n)
    first = GpuKpiCallback(backend="simulated:healthy@H100", store=sqlite_url(tmp_path))
    make_trainer(tmp_path, first, max_steps=n, **common).train()
    assert (tmp_path / "out" / f"checkpoint-{n}").is_dir()

    second = GpuKpiCallback(backend="simulated:healthy@H100", store=sqlite_url(tmp_path))
    trainer = make_trainer(tmp_path, second, max_steps=2 * n, **common)
    trainer.train(resume_from_checkpoint=True)
    # the Trainer's own counters are cumulative over both runs...
    assert trainer.state.global_step == 2 * n
    assert trainer.state.num_input_tokens_seen == 2 * n * BATCH * SEQ_LEN
    # ...each run's record counts its own steps only
    r1, r2 = final(first), final(second)
    assert r1.id != r2.id
    for r in (r1, r2):
        assert (r.steps, r.samples, r.tokens) == (n, n * BATCH, n * BATCH * SEQ_LEN)
    # the step it resumed at, from the checkpoint: the report's re-done work reads it
    assert (r1.resumed_from_step, r2.resumed_from_step) == (None, n)
    # FLOPs start from the restored total_flos, not from 0
    assert flops_per_token(r2) == pytest.approx(FLOPS_PER_TOKEN, rel=1e-6)
    assert {(s.id, s.status, s.samples) for s in stored(tmp_path)} == {
        (r1.id, "finished", n * BATCH),
        (r2.id, "finished", n * BATCH),
    }


def test_one_callback_tracks_each_train_call(tmp_path: Path) -> None:
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=sqlite_url(tmp_path))
    trainer = make_trainer(tmp_path, cb, max_steps=4, logging_steps=2)
    trainer.train()
    r1 = final(cb)
    trainer.train()  # e.g. a second trial with the same Trainer and callbacks
    r2 = final(cb)
    assert r2.id != r1.id and r2.started_at >= r1.ended_at  # type: ignore[operator]
    assert (r2.steps, r2.samples, r2.status) == (4, 4 * BATCH, "finished")
    assert sorted((s.id, s.samples) for s in stored(tmp_path)) == sorted(
        [(r1.id, 4 * BATCH), (r2.id, 4 * BATCH)]
    )


def test_each_train_call_is_a_tensorboard_run_named_by_run_name(tmp_path: Path) -> None:
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=sqlite_url(tmp_path))
    trainer = make_trainer(
        tmp_path, cb, max_steps=4, logging_steps=2, run_name="exp-42", report_to=["tensorboard"]
    )
    trainer.train()
    r1 = final(cb)
    trainer.train()
    r2 = final(cb)
    assert (r1.name, r2.name) == ("exp-42", "exp-42")  # the Trainer's run_name
    dirs = {r.links["tensorboard"] for r in (r1, r2)}
    assert len(dirs) == 2  # a TensorBoard run each, not two piled into one
    for d in dirs:
        assert [s for s, _ in readers.read_tensorboard(d)["gpu/util_pct"]] == [2, 4]


def test_without_run_name_the_wandb_run_name_names_the_run(tmp_path: Path) -> None:
    import wandb

    wandb.init(project="gpu-kpi-tests", name="brave-sun-7")
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=False)
    make_trainer(tmp_path, cb, max_steps=2, report_to=["wandb"]).train()
    finish_wandb()
    assert final(cb).name == "brave-sun-7"


def test_run_that_raised_is_recorded_failed_when_the_next_starts(tmp_path: Path) -> None:
    class Breaks(Tokens):
        def __getitem__(self, i: int) -> dict[str, Any]:
            raise OSError("the dataset's disk went away")

    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=sqlite_url(tmp_path))
    with pytest.raises(OSError, match="went away"):
        make_trainer(tmp_path, cb, max_steps=4, train=Breaks()).train()
    crashed = cb.session
    assert crashed is not None and crashed.record is None  # the Trainer has no exception hook
    make_trainer(tmp_path, cb, max_steps=4).train()
    r = final(cb)
    assert r.id != crashed.id and r.status == "finished" and r.samples == 4 * BATCH
    assert {(s.id, s.status) for s in stored(tmp_path)} == {
        (crashed.id, "failed"),
        (r.id, "finished"),
    }


# -- 6. training goes on when a part fails ------------------------------------------------------


def test_runs_without_wandb_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    caplog.set_level(logging.WARNING, logger="gpu_kpi")
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=False)
    trainer = make_trainer(tmp_path, cb, max_steps=10, report_to=["tensorboard"])
    trainer.train()
    r = final(cb)
    assert r.status == "finished" and trainer.state.global_step == 10
    assert "wandb" not in r.links
    scalars = readers.read_tensorboard(our_tb_dir(tmp_path))
    assert [s for s, _ in scalars["gpu/util_pct"]] == [5, 10]
    assert gpu_kpi_warnings(caplog) == []


def test_broken_wandb_run_turns_our_sink_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import wandb

    run = wandb.init(project="gpu-kpi-tests")  # the WandbCallback uses the active run

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("W&B is down")

    monkeypatch.setattr(run, "log", broken)  # wandb.run.log; the Trainer logs via wandb.log
    caplog.set_level(logging.WARNING, logger="gpu_kpi")
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=False)
    trainer = make_trainer(tmp_path, cb, report_to=["wandb", "tensorboard"])
    trainer.train()
    monkeypatch.undo()
    finish_wandb()
    r = final(cb)
    assert r.status == "finished" and trainer.state.global_step == 20
    warnings = gpu_kpi_warnings(caplog)
    assert len(warnings) == 1 and "'wandb'" in warnings[0] and "W&B is down" in warnings[0]
    # the Trainer's own W&B logging went on; ours stopped at the first failure
    history = readers.read_wandb(tmp_path / "wandb").history
    assert [row["train/global_step"] for row in history if "train/loss" in row] == [5, 10, 15, 20]
    assert not any(k.startswith(("gpu/", "perf/", "cost/")) for row in history for k in row)
    # the other sink did not notice
    scalars = readers.read_tensorboard(our_tb_dir(tmp_path))
    assert [s for s, _ in scalars["gpu/util_pct"]] == [5, 10, 15, 20]


def test_unwritable_tensorboard_dir_turns_our_writer_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # our writer's directory is taken by a regular file (as root, permissions would not stop it)
    taken = tmp_path / "out" / "runs" / "taken"
    taken.parent.mkdir(parents=True)
    taken.write_text("not a directory")
    monkeypatch.setattr("tracker.transformers.tensorboard_dir", lambda args, run_id: taken)
    caplog.set_level(logging.WARNING, logger="gpu_kpi")
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=sqlite_url(tmp_path))
    trainer = make_trainer(tmp_path, cb, max_steps=10, report_to=["tensorboard"])
    trainer.train()
    r = final(cb)
    assert r.status == "finished" and trainer.state.global_step == 10
    assert r.samples == 10 * BATCH
    warnings = gpu_kpi_warnings(caplog)
    assert len(warnings) == 1 and "'tensorboard'" in warnings[0]
    assert taken.read_text() == "not a directory"
    # the Trainer's own TensorBoard run is fine, and the store has the run
    (hf_dir,) = [p for p in taken.parent.iterdir() if p != taken]
    assert [s for s, _ in readers.read_tensorboard(hf_dir)["train/loss"]] == [5, 10]
    assert [(s.id, s.status) for s in stored(tmp_path)] == [(r.id, "finished")]


def test_nvml_missing_records_the_run_without_gpu_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # NVML missing even on a GPU machine
    caplog.set_level(logging.WARNING, logger="gpu_kpi")
    clock = Clock()  # no input wait from a busy machine: the verdict rests on the GPU data
    cb = GpuKpiCallback(backend="nvml", store=sqlite_url(tmp_path), clock=clock)
    trainer = make_trainer(tmp_path, cb, max_steps=10, clock=clock)
    trainer.train()
    r = final(cb)
    assert trainer.state.global_step == 10
    (s,) = stored(tmp_path)
    assert (s.id, s.status, s.gpu_source, s.gpu_count) == (r.id, "finished", "none", 0)
    assert s.util_pct is None and s.cost_usd is None and s.mfu is None  # never "idle" or $0
    assert s.verdict == "unknown"
    # the Trainer was told use_cpu=True: the run is told it chose the CPU, not to install NVML
    assert s.advice is not None and s.advice.startswith("The trainer ran the model on the CPU")
    assert (s.samples, s.tokens) == (10 * BATCH, 10 * BATCH * SEQ_LEN)
    assert s.samples_per_s is not None and s.samples_per_s > 0
    assert any("no GPU metrics" in w for w in gpu_kpi_warnings(caplog))


class LosingBackend:
    """One simulated GPU at a steady ``util_pct`` that stops answering after ``reads`` reads
    (an XID error, a fallen-off-the-bus GPU): later reads leave it out."""

    name = "lossy"

    def __init__(self, *, reads: int, util_pct: float = 40.0) -> None:
        self.reads_left = reads
        self.util_pct = util_pct
        self.lost_at: float | None = None
        self.opened_at: float | None = None

    def open(self, now: float) -> list[GpuInfo]:
        self.opened_at = now
        return [
            GpuInfo(index=0, uuid="GPU-lossy-0", name="NVIDIA H100 80GB HBM3", mem_total_gib=79.6)
        ]

    def read(self, now: float) -> list[GpuReading]:
        if self.reads_left <= 0:
            if self.lost_at is None:
                self.lost_at = now
            return []
        self.reads_left -= 1
        return [
            GpuReading(
                uuid="GPU-lossy-0",
                util_pct=self.util_pct,
                mem_used_gib=10.0,
                mem_total_gib=79.6,
                power_w=300.0,
            )
        ]

    def close(self) -> None:
        pass


def test_gpu_lost_mid_run(tmp_path: Path) -> None:
    backend = LosingBackend(reads=4)
    cb = GpuKpiCallback(backend=backend, store=sqlite_url(tmp_path), interval_s=0.02)
    trainer = make_trainer(tmp_path, cb, max_steps=40, logging_steps=10, report_to=["tensorboard"])
    trainer.train()
    r = final(cb)
    assert r.status == "finished" and trainer.state.global_step == 40
    assert backend.lost_at is not None and backend.opened_at is not None
    assert r.ended_at is not None and r.ended_at.timestamp() > backend.lost_at
    # the GPU's figures cover only the time it answered; it stays allocated (and paid for)
    assert r.util_pct == pytest.approx(40.0)
    assert r.gpu_count == 1 and r.gpu_hours == pytest.approx(duration_s(r) / 3600, rel=1e-3)
    store = RunStore(sqlite_url(tmp_path))
    try:
        rows = store.samples(run_ids=[r.id])
    finally:
        store.close()
    # 4 readings: 3 sampling intervals of 0.02 s, and none after the loss
    covered = sum(row.covered_s for row in rows)
    assert 3 * 0.02 * 0.9 <= covered <= backend.lost_at - backend.opened_at
    assert covered < 0.5 * duration_s(r)
    assert r.samples == 40 * BATCH


def test_lost_gpu_is_not_logged_after_it_is_gone(tmp_path: Path) -> None:
    """A GPU that stopped answering has no live figures: no utilization, power or memory in the
    log windows that begin after it was lost (not its last reading, repeated)."""
    backend = LosingBackend(reads=2)
    logged_at: dict[int, float] = {}

    class WhenLogged(GpuKpiCallback):
        def on_log(
            self,
            args: Any,
            state: Any,
            control: Any,
            logs: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> None:
            logged_at.setdefault(state.global_step, time.time())  # the sampler's clock
            super().on_log(args, state, control, logs, **kwargs)

    cb = WhenLogged(backend=backend, store=False, interval_s=0.02)
    make_trainer(tmp_path, cb, max_steps=20, logging_steps=10, report_to=["tensorboard"]).train()
    assert backend.lost_at is not None
    # windows that began after the GPU was gone (a window runs from one log to the next)
    steps = sorted(logged_at)
    after = {b for a, b in itertools.pairwise(steps) if logged_at[a] > backend.lost_at}
    assert after, "the GPU was not lost before a log window began"
    scalars = readers.read_tensorboard(our_tb_dir(tmp_path))
    for key in ("gpu/util_pct", "gpu/power_w", "gpu/mem_used_gib"):
        assert not after & {step for step, _ in scalars.get(key, [])}, key


def test_unreachable_store_spools_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_kpi")
    down = "postgresql://x:y@127.0.0.1:1/db"
    tries: list[str] = []  # the thread of each attempt to open the store
    open_store = writer_module._open_store

    def recorded(url: str | None) -> Any:
        tries.append(threading.current_thread().name)
        return open_store(url)

    monkeypatch.setattr(writer_module, "_open_store", recorded)
    cb = GpuKpiCallback(backend="simulated:healthy@H100", store=down)
    trainer = make_trainer(tmp_path, cb, max_steps=10)
    trainer.train()
    # training never waited for the store: it was tried only on the writer's own thread (once,
    # then again only after retry_after_s), and every record went to the spool meanwhile
    assert tries and set(tries) == {"gpu-kpi-store"}
    r = final(cb)
    assert trainer.state.global_step == 10 and r.status == "finished"
    spool = Spool.for_store(down)  # the run is the down store's; sent elsewhere on purpose
    assert spool.has_pending(r.id)
    assert sum("run store unavailable" in w for w in gpu_kpi_warnings(caplog)) == 1
    # nothing was dropped: replayed into a store that is up, the final record arrives
    store = RunStore(sqlite_url(tmp_path))
    try:
        assert spool.flush(store) >= 2  # the start record and the final one, at least
        s = store.get_run(r.id)
        assert s is not None
        assert (s.status, s.samples, s.framework) == ("finished", 10 * BATCH, "transformers")
        assert store.samples(run_ids=[r.id])  # the minute rows of its GPU too
    finally:
        store.close()
    assert not spool.has_pending()


# -- 7. two processes (DDP over gloo) ---------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.ddp
def test_ddp_two_ranks_make_one_run(tmp_path: Path) -> None:
    import hf_ddp

    env = {
        **os.environ,
        "GPU_KPI_GPU": "simulated:healthy@H100",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        str(REPO / "tests" / "trainer" / "hf_ddp.py"),
        str(tmp_path),
    ]
    proc = subprocess.run(
        cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_id = (tmp_path / "run_id").read_text()

    (s,) = stored(tmp_path)  # ONE run for both ranks, under rank 0's id
    assert (s.id, s.status, s.framework) == (run_id, "finished", "transformers")
    assert (s.gpu_count, s.nodes, s.gpu_model) == (2, 1, "H100")
    # rank 0's GPU for the run's duration and rank 1's for its own span, which starts after the
    # same collective but as late as the machine schedules it: more than one GPU's time
    assert s.gpu_hours * 3600 > duration_s(s)
    assert s.cost_usd == pytest.approx(s.gpu_hours * H100_USD_PER_HOUR)
    assert s.util_pct == pytest.approx(HEALTHY_UTIL)
    samples = 2 * hf_ddp.MAX_STEPS * hf_ddp.BATCH  # ranks x steps x per-device batch
    assert (s.steps, s.samples, s.tokens) == (hf_ddp.MAX_STEPS, samples, samples * hf_ddp.SEQ_LEN)
    store = RunStore(sqlite_url(tmp_path))
    try:
        gpus = {row.gpu for row in store.samples(run_ids=[run_id])}
    finally:
        store.close()
    assert len(gpus) == 2  # each rank wrote its own GPU's minutes

    # rank 0 alone writes TensorBoard, with the spread across ranks
    logdir = our_tb_dir(tmp_path)
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1
    scalars = readers.read_tensorboard(logdir)
    log_steps = list(range(hf_ddp.LOGGING_STEPS, hf_ddp.MAX_STEPS + 1, hf_ddp.LOGGING_STEPS))
    for key in ("gpu/util_pct_min", "gpu/util_pct_max", "gpu/util_pct"):
        assert scalars[key] == [(st, pytest.approx(HEALTHY_UTIL)) for st in log_steps], key
    assert [st for st, _ in scalars["perf/slowest_rank"]] == log_steps
    assert {v for _, v in scalars["perf/slowest_rank"]} <= {0.0, 1.0}
    assert value_at(scalars["cost/usd_per_hour"], log_steps[-1]) == pytest.approx(
        2 * H100_USD_PER_HOUR
    )
