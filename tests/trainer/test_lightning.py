"""The Lightning callback in real fits on CPU, its output read back from W&B (offline), TensorBoard
and the run store. The GPU is simulated; a training step sleeps 10 ms to stand for the GPU's
compute, and the loader hands out whole batches at once.

The tests of step time and data wait run the session on an injected clock (:class:`fakes.Clock`)
that only the fit's own stand-ins move: the step's "compute", a slow sample read, a validation,
a checkpoint save, a slow logger each add their seconds to it instead of sleeping. Lightning's
hooks fire for real, in their real order; what a figure counts is then exact arithmetic, the
same on an idle machine and at a load of 40 on 2 cores (where a 10 ms sleep can take 100 ms)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import readers
import torch
from fakes import Clock, spend
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger, TensorBoardLogger, WandbLogger
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler, TensorDataset

from tracker.gpu import GpuBackend, GpuInfo, GpuReading
from tracker.gpu.simulated import SimulatedBackend
from tracker.integrations.lightning_hooks import LightningHooks
from tracker.lightning import GpuKpiCallback
from tracker.record import RunRecord
from tracker.store import RunStore
from tracker.store.spool import Spool

ROOT = Path(__file__).resolve().parents[2]
BATCH = 8
WORK_S = 0.01  # a training step's "GPU compute"
H100_MEM_GIB = 81559 / 1024  # the simulated H100's memory.total
FP32_PEAK, TF32_PEAK, BF16_PEAK = 66.9e12, 494.7e12, 989.4e12  # H100 SXM, dense FLOP/s

pytestmark = [
    pytest.mark.trainer,
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*smaller than the logging interval"),
]


def step_flops(batch: int) -> int:
    """One training step of :class:`Tiny` by hand. Forward: 2·B·(32·16 + 16·1). Backward: both
    weight gradients, 2·B·32·16 and 2·B·16·1, and the input gradient of the second layer,
    2·B·16·1; the first layer's input is the data, which needs no gradient (hence not 6·B·params).
    ReLU, bias and loss are not matmuls: FlopCounterMode does not count them."""
    forward = 2 * batch * (32 * 16 + 16 * 1)
    backward = 2 * batch * 32 * 16 + 2 * (2 * batch * 16 * 1)
    return forward + backward


class _TinyBody:
    """The module's body, shared by a ``lightning`` and a ``pytorch_lightning`` module."""

    def __init__(
        self,
        *,
        work_s: float = WORK_S,
        val_s: float = 0.0,
        ckpt_s: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))
        self.work_s, self.val_s, self.ckpt_s = work_s, val_s, ckpt_s
        self.clock = clock

    def take(self, seconds: float) -> None:
        """Spend ``seconds``: on the injected clock when there is one, else asleep."""
        spend(seconds, self.clock)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        if self.work_s:
            self.take(self.work_s)
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)  # type: ignore[attr-defined]
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.take(self.val_s)
        self.log("val_loss", nn.functional.mse_loss(self.net(batch[0]), batch[1]))  # type: ignore[attr-defined]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.take(self.ckpt_s)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=0.01)


class Tiny(_TinyBody, L.LightningModule):
    pass


def data(n: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 32, generator=g), torch.randn(n, 1, generator=g))


def loader(n: int) -> DataLoader[Any]:
    """A fast loader: each batch is one indexing of the tensors (no per-sample collate)."""
    dataset = data(n)
    return DataLoader(
        dataset,
        batch_size=None,
        sampler=BatchSampler(SequentialSampler(dataset), BATCH, drop_last=False),
    )


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample takes ``item_s`` to read (on ``clock`` when given): with ``num_workers=0``
    the loop waits for it."""

    def __init__(self, n: int, item_s: float, clock: Clock | None = None) -> None:
        self.inner = data(n)
        self.item_s = item_s
        self.clock = clock

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        spend(self.item_s, self.clock)
        x, y = self.inner[i]
        return x, y


def trainer(
    callbacks: list[Any],
    loggers: Any = False,
    *,
    max_steps: int = 20,
    log_every: int = 5,
    **kwargs: Any,
) -> L.Trainer:
    kwargs.setdefault("enable_checkpointing", False)
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        log_every_n_steps=log_every,
        logger=loggers,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )


def callback(tmp_path: Path, **kwargs: Any) -> GpuKpiCallback:
    kwargs.setdefault("backend", "simulated:healthy@H100")
    kwargs.setdefault("store", f"sqlite:///{tmp_path}/runs.db")
    kwargs.setdefault("warmup_steps", 2)
    kwargs.setdefault("log_to_python", False)
    return GpuKpiCallback(**kwargs)


def stored(url: str, run_id: str) -> RunRecord:
    with RunStore(url) as store:
        record = store.get_run(run_id)
    assert record is not None
    return record


def final(cb: LightningHooks) -> RunRecord:
    assert cb.record is not None
    return cb.record


def steps_of(series: list[tuple[int, float]]) -> list[int]:
    return [step for step, _ in series]


def disable_hooks(monkeypatch: pytest.MonkeyPatch, *hooks: str) -> None:
    """Turn the callback's exclusion hooks into no-ops (to show what they are worth)."""
    for hook in hooks:
        monkeypatch.setattr(LightningHooks, hook, lambda *a, **k: None)


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """W&B in offline mode writing under tmp; the run is finished after the test. wandb's
    process-wide settings keep the WANDB_* variables of the first ``wandb.init`` in the
    process (another module's, on the same pytest-xdist worker: then online, and asking for an
    API key): they are dropped first."""
    wandb = sys.modules.get("wandb")
    if wandb is not None:
        if wandb.run is not None:
            wandb.finish()
        wandb.teardown()
    wandb_dir = tmp_path / "wandb-dir"
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")  # WandbLogger(offline=True) rewrites it
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    yield wandb_dir
    import wandb

    if wandb.run is not None:
        wandb.finish()


def finish_wandb() -> None:
    import wandb

    wandb.finish()


# -- 1. a fit with W&B and TensorBoard, read back ------------------------------------------------


def test_fit_reaches_wandb_tensorboard_and_the_store(tmp_path: Path, wandb_offline: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    wb = WandbLogger(
        offline=True, save_dir=str(wandb_offline), project="gpu-kpi-test", name="brave-sun-7"
    )
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    # no FLOP count: the verdict then rests on utilization (a CPU step's MFU on an H100 is ~0)
    clock = Clock()
    cb = callback(tmp_path, store=url, measure_flops=False, clock=clock)
    t = trainer([cb], [wb, tb], max_steps=20, log_every=5)
    t.fit(Tiny(clock=clock), loader(20 * BATCH))
    finish_wandb()
    assert t.state.finished
    record = final(cb)

    # W&B history: our points sit on the same trainer/global_step as the user's loss
    run = readers.read_finished_wandb(wandb_offline)
    ours = [row for row in run.history if "gpu/util_pct" in row]
    loss_steps = [row["trainer/global_step"] for row in run.history if "loss" in row]
    assert [row["trainer/global_step"] for row in ours] == loss_steps == [4, 9, 14, 19]
    for row in ours:
        assert {
            "gpu/mem_used_gib",
            "gpu/mem_used_pct",
            "gpu/power_w",
            "gpu/sm_active_pct",
            "perf/step_time_ms",
            "perf/data_wait_pct",
            "perf/samples_per_s",
            "cost/usd",
            "cost/usd_per_hour",
            "cost/waste_usd",
            "cost/usd_per_1k_samples",
        } <= row.keys()
        assert "perf/tflops" not in row and "perf/mfu" not in row  # no FLOPs: no MFU at all
        assert row["gpu/util_pct"] == pytest.approx(92.0)  # the healthy profile
        assert row["gpu/sm_active_pct"] == pytest.approx(92.0 * 0.8)
        assert row["gpu/mem_used_gib"] == pytest.approx(0.78 * H100_MEM_GIB)
        assert row["gpu/mem_used_pct"] == pytest.approx(78.0)
        assert row["cost/usd_per_hour"] == pytest.approx(3.85)
        assert row["cost/waste_usd"] == 0  # 92% is above the 85% target
        # every measured step carried BATCH samples: throughput = BATCH / step time
        assert row["perf/samples_per_s"] == pytest.approx(1000 * BATCH / row["perf/step_time_ms"])
        # a step is its compute: the batch hooks frame training_step, nothing else
        assert row["perf/step_time_ms"] == pytest.approx(1000 * WORK_S)
    costs = [row["cost/usd"] for row in ours]
    assert record.cost_usd is not None
    assert costs == sorted(costs) and 0 < costs[-1] <= record.cost_usd

    assert run.summary["gpu_kpi/verdict"] == record.verdict == "healthy"
    assert run.summary["gpu_kpi/cost_usd"] == pytest.approx(record.cost_usd)
    assert run.summary["gpu_kpi/util_pct"] == pytest.approx(92.0)
    # the summary's logged keys hold the run's values (W&B would keep the last window's)
    assert run.summary["gpu/util_pct"] == pytest.approx(record.util_pct)
    assert run.summary["cost/usd"] == pytest.approx(record.cost_usd)
    assert run.summary["perf/samples_per_s"] == pytest.approx(record.samples_per_s)
    assert run.config["gpu_kpi/run_id"] == record.id
    assert run.config["gpu_kpi/gpu_model"] == "H100"
    assert run.config["gpu_kpi/price_per_gpu_hour"] == pytest.approx(3.85)

    # TensorBoard: the same keys, at the same steps as the loss
    scalars = readers.read_tensorboard(tb.log_dir)
    assert steps_of(scalars["gpu/util_pct"]) == steps_of(scalars["loss"]) == [4, 9, 14, 19]
    assert all(v == pytest.approx(92.0) for _, v in scalars["gpu/util_pct"])
    assert steps_of(scalars["cost/usd"]) == [4, 9, 14, 19]
    text = readers.read_tensorboard_text(tb.log_dir)
    summary = text["gpu-kpi/summary/text_summary"][-1]
    assert "| verdict | healthy |" in summary and "| util_pct | 92 |" in summary
    assert f"- run_id: {record.id}" in text["gpu-kpi/run/text_summary"][0]

    # the run store
    r = stored(url, record.id)
    assert r == record
    assert (r.status, r.framework, r.gpu_source, r.gpu_model, r.gpu_count) == (
        "finished",
        "lightning",
        "simulated",
        "H100",
        1,
    )
    assert r.steps == 20 and r.samples == 20 * BATCH and r.tokens is None
    assert r.util_pct == pytest.approx(92.0)
    assert r.links["tensorboard"] == tb.log_dir
    assert r.name == "brave-sun-7"  # the W&B run's name, as the loggers call the run
    assert r.ended_at is not None
    duration_s = (r.ended_at - r.started_at).total_seconds()
    assert r.gpu_hours * 3600 == pytest.approx(duration_s, rel=0.01)
    assert r.cost_usd == pytest.approx(r.gpu_hours * 3.85)
    # the loader hands out batches at once (no time on the clock): no wait for input
    assert r.data_wait_pct == 0
    assert r.samples_per_s == pytest.approx(BATCH / WORK_S)


# -- 2. counting: batch_size_fn, tokens_fn, gradient accumulation ------------------------------


def test_batch_size_fn_and_tokens_fn_are_used(tmp_path: Path) -> None:
    # e.g. each row packs two sequences of 128 tokens: the leading dimension is not the count
    cb = callback(
        tmp_path,
        batch_size_fn=lambda b: 2 * len(b[0]),
        tokens_fn=lambda b: 256 * len(b[0]),
        measure_flops=False,
    )
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    trainer([cb], tb, max_steps=12, log_every=4).fit(Tiny(), loader(12 * BATCH))
    r = final(cb)
    assert r.steps == 12 and r.samples == 12 * 2 * BATCH and r.tokens == 12 * 256 * BATCH
    assert r.tokens_per_s == pytest.approx(128 * r.samples_per_s)  # type: ignore[operator]
    scalars = readers.read_tensorboard(tb.log_dir)
    for (_, samples_per_s), (_, tokens_per_s), (_, ms) in zip(
        scalars["perf/samples_per_s"],
        scalars["perf/tokens_per_s"],
        scalars["perf/step_time_ms"],
        strict=True,
    ):
        assert samples_per_s == pytest.approx(1000 * 2 * BATCH / ms, rel=1e-5)
        assert tokens_per_s == pytest.approx(128 * samples_per_s, rel=1e-5)
    assert "cost/usd_per_1m_tokens" in scalars


def test_a_failing_batch_size_fn_costs_the_count_not_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(batch: Any) -> int:
        raise KeyError("input_ids")

    cb = callback(tmp_path, batch_size_fn=broken, measure_flops=False)
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        t = trainer([cb], max_steps=6)
        t.fit(Tiny(work_s=0), loader(6 * BATCH))
    assert t.state.finished
    r = final(cb)
    assert r.status == "finished" and r.steps == 6 and r.samples is None
    assert len([m for m in caplog.messages if "batch_size_fn" in m]) == 1


def test_gradient_accumulation_logs_once_per_optimizer_step(tmp_path: Path) -> None:
    cb = callback(tmp_path, measure_flops=False)
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    t = trainer([cb], tb, max_steps=10, log_every=2, accumulate_grad_batches=2)
    t.fit(Tiny(), loader(20 * BATCH))
    assert t.global_step == 10
    scalars = readers.read_tensorboard(tb.log_dir)
    # Lightning logs the loss after optimizer steps 2, 4, ... at its step numbers 1, 3, ...;
    # ours land on exactly those, once each (not once per micro-batch, not at step 0)
    assert steps_of(scalars["gpu/util_pct"]) == steps_of(scalars["loss"]) == [1, 3, 5, 7, 9]
    r = final(cb)
    assert r.samples == 20 * BATCH  # every micro-batch's samples
    assert r.steps == 20  # the session counts micro-batches (training_step calls)


# -- 3. FLOPs and MFU ----------------------------------------------------------------------------


def test_flops_are_measured_once_and_give_mfu(tmp_path: Path) -> None:
    # on the injected clock: the step's 10 ms and no wait for input, at any load (on the wall
    # clock a busy machine stretches the loader's fetch into an input-bound verdict)
    clock = Clock()
    cb = callback(tmp_path, clock=clock)
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    trainer([cb], tb, max_steps=15, log_every=5).fit(Tiny(clock=clock), loader(15 * BATCH))
    assert cb.session is not None
    assert cb.session.flops_per_step == step_flops(BATCH) == 17152
    r = final(cb)
    # precision "32-true", matmul precision "highest" (torch's default): the fp32 peak
    assert r.mfu is not None and r.mfu > 0
    assert r.mfu == pytest.approx(r.samples_per_s / BATCH * step_flops(BATCH) / FP32_PEAK)  # type: ignore[operator]
    # its denominator, the dtype from the trainer's precision
    assert (r.mfu_peak_tflops, r.mfu_dtype, r.mfu_dtype_from) == (
        FP32_PEAK / 1e12,
        "fp32",
        "trainer",
    )
    # a CPU step's FLOP rate on an H100's clock: low MFU says low efficiency, with advice
    assert r.data_wait_pct == 0
    assert r.verdict == "low-efficiency" and r.advice and "bf16" in r.advice
    scalars = readers.read_tensorboard(tb.log_dir)
    for (_, tflops), (_, mfu), (_, ms) in zip(
        scalars["perf/tflops"], scalars["perf/mfu"], scalars["perf/step_time_ms"], strict=True
    ):
        assert tflops == pytest.approx(step_flops(BATCH) / (ms / 1000) / 1e12, rel=1e-5)
        assert mfu == pytest.approx(tflops * 1e12 / FP32_PEAK, rel=1e-5)


@pytest.mark.parametrize(
    ("precision", "matmul", "peak"),
    [
        ("32-true", "highest", FP32_PEAK),
        ("32-true", "high", TF32_PEAK),  # fp32 matmuls run as tf32 on Ampere and newer
        ("bf16-mixed", "highest", BF16_PEAK),
    ],
)
def test_given_flops_per_step_sets_mfu_against_the_dtype_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, precision: str, matmul: str, peak: float
) -> None:
    began: list[bool] = []
    monkeypatch.setattr(
        "tracker.integrations.common.FlopMeter.begin", lambda self: began.append(True)
    )
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(matmul)
    try:
        flops = 3.0e11  # at most 100 steps a second (a step sleeps 10 ms): under every peak
        cb = callback(tmp_path, flops_per_step=flops)
        trainer([cb], max_steps=8, precision=precision).fit(Tiny(), loader(8 * BATCH))
    finally:
        torch.set_float32_matmul_precision(previous)
    assert began == []  # nothing measured
    assert cb.session is not None and cb.session.flops_per_step == flops
    r = final(cb)
    assert r.mfu == pytest.approx(r.samples_per_s / BATCH * flops / peak)  # type: ignore[operator]
    assert r.mfu_peak_tflops == peak / 1e12 and r.mfu_dtype_from == "trainer"


# -- 4. what is left out of step timing; input-bound ---------------------------------------------


@pytest.mark.parametrize("excluded", [True, False], ids=["hooks", "without-hooks"])
def test_validation_and_checkpoints_are_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, excluded: bool
) -> None:
    if not excluded:  # the control: what the figures would be without the exclusion
        disable_hooks(monkeypatch, "on_validation_end", "on_save_checkpoint")
    clock = Clock()
    cb = callback(tmp_path, measure_flops=False, clock=clock)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1)
    # log_every=50: no log step in the run, so only validation and checkpoints interrupt
    t = trainer(
        [cb, ckpt],
        max_steps=20,
        log_every=50,
        val_check_interval=4,
        limit_val_batches=1,
        enable_checkpointing=True,
    )
    t.fit(Tiny(val_s=0.2, ckpt_s=0.1, clock=clock), loader(20 * BATCH), loader(BATCH))
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 6  # steps 3, 6, ..., 18
    r = final(cb)
    assert r.data_wait_pct is not None and r.samples_per_s is not None
    # validations of 0.2 s after steps 4, 8, 12, 16 and saves of 0.1 s after 3, 6, ..., 18,
    # beside steps of 10 ms: ~80 ms more per measured step if they were counted
    mean_step_s = BATCH / r.samples_per_s
    if excluded:
        assert r.data_wait_pct == 0
        assert mean_step_s == pytest.approx(WORK_S)
    else:
        assert r.data_wait_pct > 50
        assert mean_step_s > 0.05


@pytest.mark.parametrize("slow", [False, True], ids=["fast-loader", "slow-loader"])
def test_input_bound_verdict_follows_the_loader(tmp_path: Path, slow: bool) -> None:
    clock = Clock()
    cb = callback(tmp_path, measure_flops=False, clock=clock)
    # slow: 2 ms to read each sample, 16 ms a batch, beside 10 ms of compute: 16 / 26 waiting.
    # Twice the samples the fit takes, so that every step's batch is a full one.
    train = (
        DataLoader(SlowDataset(32 * BATCH, 0.002, clock), batch_size=BATCH, num_workers=0)
        if slow
        else loader(16 * BATCH)
    )
    trainer([cb], max_steps=16, log_every=4).fit(Tiny(clock=clock), train)
    r = final(cb)
    assert r.data_wait_pct is not None
    if slow:
        assert r.data_wait_pct == pytest.approx(100 * 16 / 26, abs=0.01)  # 61.5%
        assert r.verdict == "input-bound" and r.advice and "DataLoader workers" in r.advice
    else:
        assert r.data_wait_pct == 0
        assert r.verdict == "healthy"


# -- 5. resume -----------------------------------------------------------------------------------


@pytest.mark.parametrize("same_callback", [False, True], ids=["new-callback", "same-callback"])
def test_a_resumed_fit_is_a_run_of_its_own(
    tmp_path: Path, store_url: str, same_callback: bool
) -> None:
    url = store_url  # SQLite and PostgreSQL
    module = Tiny()
    first = callback(tmp_path, store=url)
    t1 = trainer([first], TensorBoardLogger(str(tmp_path / "tb"), version="a"), max_steps=10)
    t1.fit(module, loader(32 * BATCH))  # 32 batches an epoch: both fits end mid-epoch
    r1 = final(first)
    t1.save_checkpoint(tmp_path / "mid.ckpt")

    second = first if same_callback else callback(tmp_path, store=url)
    tb = TensorBoardLogger(str(tmp_path / "tb"), version="b")
    t2 = trainer([second], tb, max_steps=20)
    t2.fit(Tiny(), loader(32 * BATCH), ckpt_path=tmp_path / "mid.ckpt")
    assert t2.global_step == 20
    r2 = final(second)

    assert r2.id != r1.id
    # named as the TensorBoard logger names each: <name>/<version>
    assert (r1.name, r2.name) == ("lightning_logs/a", "lightning_logs/b")
    assert (r1.steps, r1.samples) == (10, 10 * BATCH)
    assert (r2.steps, r2.samples) == (10, 10 * BATCH)  # its own, not 20 cumulative
    # the step it resumed at, from the checkpoint: the report's re-done work reads it
    assert (r1.resumed_from_step, r2.resumed_from_step) == (None, 10)
    assert stored(url, r1.id) == r1 and stored(url, r2.id) == r2
    # FLOPs measured on the resumed fit's first batch, though its batch_idx is 10, not 0
    assert second.session is not None and second.session.flops_per_step == step_flops(BATCH)
    assert r2.mfu is not None
    # after the resume our points still line up with the loss
    scalars = readers.read_tensorboard(tb.log_dir)
    assert steps_of(scalars["gpu/util_pct"]) == steps_of(scalars["loss"]) == [14, 19]


# -- 6. training goes on whatever fails ----------------------------------------------------------


def test_without_wandb_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user without wandb has no WandbLogger: nothing of ours may import wandb then."""
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    cb = callback(tmp_path, measure_flops=False)
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    t = trainer([cb], tb, max_steps=10)
    t.fit(Tiny(), loader(10 * BATCH))
    assert t.state.finished
    r = stored(f"sqlite:///{tmp_path}/runs.db", final(cb).id)
    assert r.status == "finished" and r.util_pct == pytest.approx(92.0)
    assert steps_of(readers.read_tensorboard(tb.log_dir)["gpu/util_pct"]) == [4, 9]


class FinishWandbEarly(Callback):
    """A user callback, listed before ours, that ends the W&B run at the end of training."""

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        finish_wandb()


def test_a_wandb_run_that_fails_turns_off_only_its_sink(
    tmp_path: Path, wandb_offline: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    wb = WandbLogger(offline=True, save_dir=str(wandb_offline))
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    clock = Clock()  # the step's 10 ms exactly: no input wait from a busy machine
    cb = callback(tmp_path, store=url, measure_flops=False, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        t = trainer([FinishWandbEarly(), cb], [wb, tb], max_steps=10)
        t.fit(Tiny(clock=clock), loader(10 * BATCH))
    assert t.state.finished
    warnings = [m for m in caplog.messages if "'wandb'" in m]
    assert len(warnings) == 1 and "turned off" in warnings[0]
    r = stored(url, final(cb).id)
    assert r.status == "finished" and r.verdict == "healthy"
    # the run had our metrics until then; the summary reached TensorBoard, not W&B
    run = readers.read_finished_wandb(wandb_offline)
    assert [row["trainer/global_step"] for row in run.history if "gpu/util_pct" in row] == [4, 9]
    assert "gpu_kpi/verdict" not in run.summary
    text = readers.read_tensorboard_text(tb.log_dir)
    assert "| verdict | healthy |" in text["gpu-kpi/summary/text_summary"][-1]


def test_wandb_disabled_mode(tmp_path: Path, wandb_offline: Path) -> None:
    cb = callback(tmp_path, measure_flops=False)
    t = trainer([cb], WandbLogger(mode="disabled", save_dir=str(wandb_offline)), max_steps=6)
    t.fit(Tiny(), loader(6 * BATCH))
    assert t.state.finished
    r = stored(f"sqlite:///{tmp_path}/runs.db", final(cb).id)
    assert r.status == "finished" and r.steps == 6 and "wandb" not in r.links


class StrictLogger(Logger):
    """A user's logger that accepts only plain names (like some tracking servers): it raises on
    ``gpu/util_pct`` but takes the user's own ``loss``."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[int, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "strict"

    @property
    def version(self) -> str:
        return "0"

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if any("/" in key for key in metrics):
            raise ValueError(f"invalid metric name in {sorted(metrics)[:1]}")
        self.logged.append((step or 0, dict(metrics)))


def test_a_logger_that_rejects_our_metrics_costs_only_itself(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    strict = StrictLogger()
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    cb = callback(tmp_path, measure_flops=False, log_to_python=True)
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        t = trainer([cb], [strict, tb], max_steps=15)
        t.fit(Tiny(), loader(15 * BATCH))
    assert t.state.finished
    assert [step for step, m in strict.logged if "loss" in m] == [4, 9, 14]  # the user's own
    # TensorBoard still gets every point, and the Python log too
    assert steps_of(readers.read_tensorboard(tb.log_dir)["gpu/util_pct"]) == [4, 9, 14]
    warnings = [m for m in caplog.messages if "StrictLogger" in m]
    assert len(warnings) == 1
    assert final(cb).status == "finished"


class SlowLogger(StrictLogger):
    """A user's logger that makes a 30 ms round trip per call (an HTTP tracking server), on
    ``clock``."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        spend(0.03, self.clock)
        self.logged.append((step or 0, dict(metrics)))


def test_logging_time_is_not_taken_for_data_wait(tmp_path: Path) -> None:
    """The loggers write (ours, then Lightning's) between one batch and the next: that is
    neither training nor waiting for input, or a slow logger would read as input-bound."""
    clock = Clock()
    slow = SlowLogger(clock)
    cb = callback(tmp_path, measure_flops=False, clock=clock)
    trainer([cb], slow, max_steps=20, log_every=2).fit(Tiny(clock=clock), loader(20 * BATCH))
    # ours and the user's loss, on the same steps
    assert [s for s, m in slow.logged if "gpu/util_pct" in m] == list(range(1, 20, 2))
    assert [s for s, m in slow.logged if "loss" in m] == list(range(1, 20, 2))
    r = final(cb)
    # 60 ms of logging every 2 steps of 10 ms: none of it waiting, none of it a step
    assert r.data_wait_pct == 0
    assert r.samples_per_s == pytest.approx(BATCH / WORK_S)
    assert r.verdict == "healthy"


def _unwritable_dir(tmp_path: Path) -> Path:
    """A directory nothing can be created in: mode 0o500, or, where that does not stop us (root),
    a path under a regular file."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        (ro / "probe").mkdir()
    except PermissionError:
        return ro / "tb"
    (ro / "probe").rmdir()
    ro.chmod(0o700)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    return blocker / "tb"


def test_an_unwritable_tensorboard_dir_fails_lightning_itself_not_us(tmp_path: Path) -> None:
    """Lightning creates every logger's writer before any callback's ``setup``: an unwritable
    TensorBoard dir ends the fit there, with or without the tracker. Ours must change nothing:
    the user sees TensorBoard's own error, and no half-made run is left in the store."""
    url = f"sqlite:///{tmp_path}/runs.db"
    logdir = _unwritable_dir(tmp_path)
    errors: list[type[BaseException]] = []
    for callbacks in ([], [callback(tmp_path, store=url)]):
        t = trainer(callbacks, TensorBoardLogger(str(logdir)), max_steps=4)
        with pytest.raises(OSError) as info:
            t.fit(Tiny(), loader(4 * BATCH))
        errors.append(type(info.value))
    assert errors[0] is errors[1]
    with RunStore(url) as store:
        assert store.list_runs() == []


def test_no_nvml_is_recorded_as_no_gpu_data_not_idle(tmp_path: Path) -> None:
    from tracker.gpu import BackendUnavailable
    from tracker.gpu.nvml import NvmlBackend

    probe = NvmlBackend()
    try:
        probe.open(time.time())
    except BackendUnavailable:
        pass
    else:
        probe.close()
        pytest.skip("this machine has a GPU: NVML is not missing")
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    clock = Clock()  # no input wait from a busy machine: the verdict rests on the GPU data
    cb = callback(tmp_path, backend="nvml", clock=clock)
    t = trainer([cb], tb, max_steps=10)
    t.fit(Tiny(clock=clock), loader(10 * BATCH))
    assert t.state.finished
    r = stored(f"sqlite:///{tmp_path}/runs.db", final(cb).id)
    assert (r.status, r.gpu_source, r.gpu_count, r.util_pct, r.cost_usd) == (
        "finished",
        "none",
        0,
        None,
        None,
    )
    assert r.verdict == "unknown" and r.steps == 10 and r.samples == 10 * BATCH
    # the trainer chose the CPU (accelerator="cpu"): it is told so, not to install NVML
    assert r.advice is not None and r.advice.startswith("The trainer ran the model on the CPU")
    assert "nvidia-ml-py" not in r.advice
    assert r.mfu is None  # no GPU, no peak
    scalars = readers.read_tensorboard(tb.log_dir)
    assert "gpu/util_pct" not in scalars and steps_of(scalars["perf/step_time_ms"]) == [4, 9]


class LosesItsGpu:
    """A simulated GPU that stops answering once ``lost`` is set (it fell off the bus)."""

    name = "simulated"

    def __init__(self) -> None:
        self.inner = SimulatedBackend("healthy", model="H100")
        self.lost = threading.Event()
        self.reads_after_loss = 0

    def open(self, now: float) -> list[GpuInfo]:
        return self.inner.open(now)

    def read(self, now: float) -> list[GpuReading]:
        if self.lost.is_set():
            self.reads_after_loss += 1
            return []
        return self.inner.read(now)

    def close(self) -> None:
        self.inner.close()


class LoseTheGpuAt(Callback):
    def __init__(self, backend: LosesItsGpu, step: int) -> None:
        self.backend, self.step = backend, step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            self.backend.lost.set()


def fit_losing_the_gpu(tmp_path: Path) -> tuple[GpuKpiCallback, LosesItsGpu, Path]:
    """30 steps of 10 ms, logging every 5, sampling every 20 ms; the GPU is lost at step 10."""
    backend = LosesItsGpu()
    assert isinstance(backend, GpuBackend)
    cb = callback(tmp_path, backend=backend, interval_s=0.02, measure_flops=False)
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    t = trainer([cb, LoseTheGpuAt(backend, 10)], tb, max_steps=30, log_every=5)
    t.fit(Tiny(), loader(30 * BATCH))
    assert t.state.finished
    return cb, backend, Path(tb.log_dir)


def test_a_gpu_lost_mid_run(tmp_path: Path) -> None:
    cb, backend, _ = fit_losing_the_gpu(tmp_path)
    assert backend.reads_after_loss > 0
    assert cb.session is not None and cb.session.sampler is not None
    assert cb.session.sampler.lost == {cb.session.gpus[0].uuid}
    r = stored(f"sqlite:///{tmp_path}/runs.db", final(cb).id)
    # what it said before it was lost; it stays billed while allocated
    assert r.status == "finished" and r.steps == 30 and r.util_pct == pytest.approx(92.0)
    assert r.gpu_count == 1 and r.cost_usd == pytest.approx(r.gpu_hours * 3.85)


def test_a_lost_gpu_is_not_reported_live_afterwards(tmp_path: Path) -> None:
    _, _, logdir = fit_losing_the_gpu(tmp_path)
    scalars = readers.read_tensorboard(logdir)
    # lost after step 10 (Lightning's 9); windows ending at 19, 24, 29 hold no reading of it
    assert [s for s, _ in scalars["gpu/util_pct"] if s >= 19] == []
    assert [s for s, _ in scalars["gpu/power_w"] if s >= 19] == []


def test_an_unreachable_store_spools_the_run(tmp_path: Path) -> None:
    down = "postgresql://x:y@127.0.0.1:1/db"
    cb = callback(tmp_path, store=down, measure_flops=False)
    t = trainer([cb], max_steps=6)
    t.fit(Tiny(), loader(6 * BATCH))
    assert t.state.finished
    record = final(cb)
    assert record.status == "finished"
    spool = Spool.for_store(down)  # the run is the down store's; sent elsewhere on purpose
    assert spool.has_pending(record.id)
    url = f"sqlite:///{tmp_path}/later.db"
    with RunStore(url) as store:
        assert spool.flush(store) >= 2  # the start and the end, at least
    assert stored(url, record.id) == record


def test_the_low_utilization_alert_reaches_wandb_and_tensorboard(
    tmp_path: Path, wandb_offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_KPI_ALERT_WINDOW_S", "0.2")
    wb = WandbLogger(offline=True, save_dir=str(wandb_offline))
    tb = TensorBoardLogger(str(tmp_path / "tb"))
    cb = callback(tmp_path, backend="simulated:idle@H100", interval_s=0.02, measure_flops=False)
    trainer([cb], [wb, tb], max_steps=20).fit(Tiny(work_s=0.02), loader(20 * BATCH))
    finish_wandb()
    alerts = readers.read_finished_wandb(wandb_offline).alerts
    assert len(alerts) == 1 and alerts[0]["title"] == "Low GPU utilization"
    assert "averaged 0%" in alerts[0]["text"]
    text = readers.read_tensorboard_text(tb.log_dir)
    assert len(text["gpu-kpi/alert/text_summary"]) == 1


# -- 7. the pytorch_lightning package ------------------------------------------------------------


def test_pytorch_lightning_trainer(tmp_path: Path) -> None:
    import pytorch_lightning as pl
    from pytorch_lightning.loggers import TensorBoardLogger as PlTensorBoardLogger

    from tracker.pytorch_lightning import GpuKpiCallback as PlCallback

    class PlTiny(_TinyBody, pl.LightningModule):
        pass

    url = f"sqlite:///{tmp_path}/runs.db"
    cb = PlCallback(
        backend="simulated:healthy@A100-80GB",
        store=url,
        warmup_steps=2,
        log_to_python=False,
        measure_flops=False,
    )
    tb = PlTensorBoardLogger(str(tmp_path / "tb"))
    t = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=10,
        log_every_n_steps=5,
        logger=tb,
        callbacks=[cb],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    t.fit(PlTiny(), loader(10 * BATCH))
    assert t.state.finished
    r = stored(url, final(cb).id)
    assert (r.status, r.framework, r.gpu_model, r.steps, r.samples) == (
        "finished",
        "lightning",
        "A100-80GB",
        10,
        10 * BATCH,
    )
    assert r.price_per_gpu_hour == pytest.approx(2.00)
    assert r.links["tensorboard"] == tb.log_dir
    scalars = readers.read_tensorboard(tb.log_dir)
    assert steps_of(scalars["gpu/util_pct"]) == steps_of(scalars["loss"]) == [4, 9]


# -- 8. two ranks --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.ddp
def test_ddp_two_ranks_on_cpu(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "GPU_KPI_GPU": "simulated:healthy@H100",
        "PYTHONWARNINGS": "ignore",
    }
    script = Path(__file__).with_name("lightning_ddp.py")
    p = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    record = json.loads((tmp_path / "record.json").read_text())
    with RunStore(f"sqlite:///{tmp_path}/runs.db") as store:
        runs = store.list_runs()
        minutes = store.samples(run_ids=[record["id"]])
    assert len(runs) == 1  # one run for both ranks, under rank 0's id
    r = runs[0]
    assert r.id == record["id"] and r.status == "finished" and r.gpu_count == 2
    assert r.ended_at is not None
    duration_s = (r.ended_at - r.started_at).total_seconds()
    # both ranks' GPUs: rank 0's for the run's duration, rank 1's for its own span, which starts
    # after the same collective but as late as the machine schedules it (a few ms when idle,
    # much more under load): more than one GPU's time, not a fixed multiple of the duration
    assert r.gpu_hours * 3600 > duration_s
    assert {m.gpu for m in minutes if m.covered_s > 0} == {m.gpu for m in minutes}
    assert r.cost_usd == pytest.approx(r.gpu_hours * 3.85)
    assert r.steps == 20 and r.samples == 2 * 20 * 8  # each rank's own shard
    assert r.util_pct == pytest.approx(92.0)
    # every rank wrote its own GPU's (partial) minute
    assert len({m.gpu for m in minutes}) == 2
    scalars = readers.read_tensorboard(tmp_path / "tb")
    prefix = "lightning_logs/version_0/"
    loss_steps = steps_of(scalars[prefix + "loss"])
    assert loss_steps == [4, 9, 14, 19]
    for key in (
        "gpu/util_pct",
        "gpu/util_pct_min",
        "gpu/util_pct_max",
        "perf/slowest_rank",
        "perf/rank_spread_pct",
    ):
        assert steps_of(scalars[prefix + key]) == loss_steps, key
    assert all(v == pytest.approx(92.0) for _, v in scalars[prefix + "gpu/util_pct_min"])
    assert all(v == pytest.approx(92.0) for _, v in scalars[prefix + "gpu/util_pct_max"])
    assert {v for _, v in scalars[prefix + "perf/slowest_rank"]} <= {0.0, 1.0}
    # power adds up over the ranks' GPUs: 2 x (70 + 630 x 0.92) W
    assert all(
        v == pytest.approx(2 * (70 + 630 * 0.92), rel=1e-4)
        for _, v in scalars[prefix + "gpu/power_w"]
    )
