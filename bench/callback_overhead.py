"""What the Lightning callback costs a training step, beside Lightning's own monitors.

One ``Trainer.fit`` per configuration and round, on CPU, of a small MLP whose step takes a few ms
(one training thread); the step time is read from the start of batch ``--warmup`` to the start
of the last batch, so set-up and tear-down are left out. Configurations:

- ``none``: no monitoring callback;
- ``gpu-kpi``: :class:`tracker.lightning.GpuKpiCallback` (simulated H100, sampler at 1 s, FLOPs
  measured on the first step, run store in a temporary SQLite file);
- ``lightning``: Lightning's ``DeviceStatsMonitor(cpu_stats=True)`` (psutil) and
  ``ThroughputMonitor`` together, the closest built-in equivalent;
- ``empty``: a callback whose two batch hooks do nothing: what timing a hook call costs by
  itself, the floor under the other two.

Every configuration logs to the same in-memory logger every 50 steps (Lightning's default), so
the loggers' own cost is the same for all. Rounds run in rotated order; the overhead is the
median over rounds of (step time / step time of ``none`` in the same round) - 1. That ratio
carries the machine's noise (printed); the time spent inside the callbacks' batch hooks, timed
around each call in the same fits, does not (it leaves out the sampler thread and the store
writer, which the ratio includes). It is printed per step as the median over the steps (a
step that logs costs more: the mean, which spreads those over all steps, is printed too).
Targets: gpu-kpi under 1%, and at most 10 µs a step inside its hooks.

    .venv/bin/python bench/callback_overhead.py [--rounds 7] [--steps 400]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, DeviceStatsMonitor, ThroughputMonitor
from lightning.pytorch.loggers import Logger
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from tracker.lightning import GpuKpiCallback

BATCH = 64


class NullLogger(Logger):
    """Takes every metric and keeps only a count: the same cheap sink for every configuration."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    @property
    def name(self) -> str:
        return "null"

    @property
    def version(self) -> str:
        return "0"

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.calls += 1


class StepClock(Callback):
    """Wall time from the start of batch ``first`` to the start of batch ``last``; listed first,
    so that window holds ``last - first`` whole steps, every callback's hooks included."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last = first, last
        self.t0 = self.t1 = 0.0
        self.in_hooks_s: list[float] = []
        """Per step of the window: time spent inside the timed callbacks' batch hooks."""

    def time_hooks(self, callback: Callback) -> Callback:
        """Time ``callback``'s batch hooks (Lightning looks hooks up on the instance); only the
        hook call itself is inside the two clock readings."""
        for name in ("on_train_batch_start", "on_train_batch_end"):
            hook = getattr(callback, name)

            def timed(*args: Any, _hook: Any = hook, **kwargs: Any) -> None:
                t = time.perf_counter()
                _hook(*args, **kwargs)
                dt = time.perf_counter() - t
                if self.t0 > 0 and self.t1 == 0:
                    self.in_hooks_s[-1] += dt

            setattr(callback, name, timed)
        return callback

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == self.first:
            self.t0 = time.perf_counter()
        elif batch_idx == self.last:
            self.t1 = time.perf_counter()
        if self.t0 > 0 and self.t1 == 0:
            self.in_hooks_s.append(0.0)

    @property
    def step_ms(self) -> float:
        return (self.t1 - self.t0) / (self.last - self.first) * 1e3

    @property
    def hooks_us(self) -> tuple[float, float]:
        """(median, mean) µs per step inside the timed hooks; the mean carries the log steps."""
        if not self.in_hooks_s:
            return 0.0, 0.0
        return (statistics.median(self.in_hooks_s) * 1e6, statistics.fmean(self.in_hooks_s) * 1e6)


class Mlp(L.LightningModule):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, 1),
        )

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def loader(width: int, steps: int) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(steps * BATCH, width, generator=g), torch.randn(steps * BATCH, 1, generator=g)
    )
    # whole batches by one indexing: the loader costs next to nothing
    return DataLoader(
        data, batch_size=None, sampler=BatchSampler(SequentialSampler(data), BATCH, drop_last=False)
    )


class Empty(Callback):
    def on_train_batch_start(self, *args: Any) -> None:
        pass

    def on_train_batch_end(self, *args: Any) -> None:
        pass


def monitors(label: str, store: str) -> list[Callback]:
    if label == "gpu-kpi":
        return [
            GpuKpiCallback(
                backend="simulated:healthy@H100",
                store=store,
                log_to_python=False,
                print_summary=False,
            )
        ]
    if label == "lightning":
        return [
            DeviceStatsMonitor(cpu_stats=True),
            ThroughputMonitor(batch_size_fn=lambda batch: int(batch[0].shape[0])),
        ]
    if label == "empty":
        return [Empty()]
    return []


def fit(
    label: str, width: int, warmup: int, steps: int, store: str
) -> tuple[float, tuple[float, float]]:
    """(mean step time in ms, (median, mean) µs per step inside the monitors' batch hooks) of
    one fit with the configuration ``label``."""
    clock = StepClock(warmup, warmup + steps)
    callbacks = [clock.time_hooks(c) for c in monitors(label, store)]
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=warmup + steps + 1,
        log_every_n_steps=50,
        logger=NullLogger(),
        callbacks=[clock, *callbacks],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Mlp(width), loader(width, warmup + steps + 1))
    return clock.step_ms, clock.hooks_us


def calibrate(target_ms: float) -> int:
    """The MLP width whose training step takes about ``target_ms`` with no callback."""
    width = 128
    while True:
        ms, _ = fit("none", width, 10, 40, "")
        if ms >= target_ms or width >= 4096:
            return width
        width = int(width * min(1.6, max(1.05, (target_ms / ms) ** 0.5)))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=400, help="timed steps per fit")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--step-ms", type=float, default=5.0, help="target step time")
    args = ap.parse_args()

    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning", "gpu_kpi"):
        logging.getLogger(name).setLevel(logging.ERROR)
    torch.set_num_threads(1)  # one core trains, as the training thread does on a GPU host
    torch.manual_seed(0)

    width = calibrate(args.step_ms)
    print(
        f"workload: MLP {width}-{width}-{width}-1, batch {BATCH}, fp32 on CPU, 1 thread; "
        f"{args.steps} timed steps per fit, {args.rounds} rounds; logging every 50 steps"
    )
    labels = ["none", "gpu-kpi", "lightning", "empty"]
    results: dict[str, list[float]] = {label: [] for label in labels}
    in_hooks: dict[str, list[tuple[float, float]]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/bench.db"
        for r in range(args.rounds):
            # rotate the order each round so that drift (clock, cache, neighbours) is shared
            for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                ms, us = fit(label, width, args.warmup, args.steps, store)
                results[label].append(ms)
                in_hooks[label].append(us)
    base = results["none"]
    step_ms = statistics.median(base)
    print(
        f"{'configuration':<38} {'median step ms':>14} {'overhead':>9} "
        f"{'in hooks us/step':>17} {'(mean)':>7} {'= % of step':>12}"
    )
    names = {
        "none": "none",
        "gpu-kpi": "gpu-kpi GpuKpiCallback",
        "lightning": "DeviceStatsMonitor + ThroughputMonitor",
        "empty": "a callback with empty batch hooks",
    }
    hooks: dict[str, tuple[float, float]] = {}
    for label, values in results.items():
        paired = statistics.median(v / b - 1 for v, b in zip(values, base, strict=True))
        # median over rounds of each fit's median (mean) per step
        us, mean_us = hooks[label] = (
            statistics.median(m for m, _ in in_hooks[label]),
            statistics.median(m for _, m in in_hooks[label]),
        )
        print(
            f"{names[label]:<38} {statistics.median(values):14.3f} {100 * paired:8.2f}% "
            f"{us:17.1f} {mean_us:7.1f} {mean_us / 10 / step_ms:11.2f}%"
        )
    spread = statistics.pstdev(base) / statistics.mean(base)
    print(
        f"overhead: median over rounds of the paired ratio to 'none' - 1; round-to-round noise "
        f"of the baseline: {100 * spread:.1f}% (stdev / mean)"
    )
    print(
        "in hooks: on_train_batch_start + on_train_batch_end per step, median over the steps "
        "(mean: log steps included), median over rounds"
    )
    print(
        f"gpu-kpi hooks: {hooks['gpu-kpi'][0]:.1f} µs/step (target <= 10; "
        f"mean {hooks['gpu-kpi'][1]:.1f}); Lightning's monitors: {hooks['lightning'][0]:.1f} "
        f"µs/step (mean {hooks['lightning'][1]:.1f}); empty hooks: {hooks['empty'][0]:.1f} µs/step"
    )


if __name__ == "__main__":
    main()
