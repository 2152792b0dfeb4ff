"""The Lightning hooks' per-step path, driven without Lightning: a stand-in trainer with the
attributes the hooks read. What a real fit does is in test_lightning.py; this is the fast path's
bookkeeping (the batch size read from a kept key path, the log cadence by one compare)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from tracker.integrations import lightning_hooks
from tracker.integrations.common import batch_leaf, infer_batch_size
from tracker.integrations.lightning_hooks import LightningHooks


class Arr:
    """A tensor as far as the hooks look: a shape, nothing else."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape


class Logger:
    def __init__(self) -> None:
        self.steps: list[int] = []

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.steps.append(step)


def fake_trainer(log_every: int = 5) -> SimpleNamespace:
    loop = SimpleNamespace(_batches_that_stepped=0, _should_accumulate=lambda: False)
    return SimpleNamespace(
        world_size=1,
        global_rank=0,
        num_nodes=1,
        precision="32-true",
        loggers=[Logger()],
        log_every_n_steps=log_every,
        should_stop=False,
        accumulate_grad_batches=1,
        global_step=0,
        fit_loop=SimpleNamespace(epoch_loop=loop),
    )


def started(trainer: SimpleNamespace) -> LightningHooks:
    hooks = LightningHooks(
        backend="simulated:healthy@H100",
        store=False,
        log_to_python=False,
        threaded=False,
        warmup_steps=0,
        measure_flops=False,
        log_every_s=3600,
    )
    hooks.setup(trainer, None, "fit")
    hooks.on_fit_start(trainer, None)
    return hooks


def run_steps(
    hooks: LightningHooks, trainer: SimpleNamespace, batches: list[Any], first_step: int = 0
) -> None:
    for i, batch in enumerate(batches):
        trainer.fit_loop.epoch_loop._batches_that_stepped = first_step + i
        hooks.on_train_batch_start(trainer, None, batch, i)
        hooks.on_train_batch_end(trainer, None, None, batch, i)


def test_batch_leaf_names_the_keys_to_the_first_tensor() -> None:
    assert batch_leaf(Arr(8, 3)) == (8, ())
    assert batch_leaf((Arr(8, 3), Arr(8))) == (8, (0,))
    assert batch_leaf({"text": ["a", "b"], "ids": Arr(2, 16)}) == (2, ("ids",))
    assert batch_leaf({"x": [Arr(), (Arr(5, 1),)]}) == (5, ("x", 1, 0))  # a 0-d tensor is passed
    assert batch_leaf(["no", "tensor"]) is None
    assert infer_batch_size({"x": [Arr(), (Arr(5, 1),)]}) == 5


def test_the_batch_is_walked_once_while_its_structure_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walks: list[object] = []

    def counting(batch: Any) -> Any:
        walks.append(batch)
        return batch_leaf(batch)

    monkeypatch.setattr(lightning_hooks, "batch_leaf", counting)
    trainer = fake_trainer(log_every=0)
    hooks = started(trainer)
    run_steps(hooks, trainer, [(Arr(8, 3), Arr(8))] * 10)
    assert len(walks) == 1
    # another structure, a 0-d tensor where the kept keys lead, a leaf with no shape, no tensor
    # at all: each is walked, and counted as infer_batch_size counts it
    changed = [
        {"x": Arr(4, 3)},
        {"x": Arr(4, 3)},  # walked once: the keys carry to the next
        (Arr(8), Arr(8)),
        (Arr(), Arr(2)),  # walked: a tuple again; then a 0-d tensor
        (Arr(8), Arr(8)),  # not walked: the kept keys, (1,), lead to a tensor
        ([Arr(3)], "s"),
        ("no",),
    ]  # walked: "s" has no shape; no tensor at all
    run_steps(hooks, trainer, changed, first_step=10)
    assert len(walks) == 1 + 5
    assert [infer_batch_size(b) for b in changed] == [4, 4, 8, 2, 8, 3, None]
    assert hooks.session is not None
    hooks.session.counts.flush()  # held steps are added up at each log and at the end
    assert hooks.session.counts.samples == 10 * 8 + 4 + 4 + 8 + 2 + 8 + 3
    assert hooks.session.steps == 17


def test_a_batch_size_fn_is_used_instead_of_the_batch() -> None:
    trainer = fake_trainer(log_every=0)
    hooks = started(trainer)
    hooks.batch_size_fn = lambda batch: 7
    run_steps(hooks, trainer, [(Arr(8),)] * 3)
    assert hooks.session is not None
    hooks.session.counts.flush()
    assert hooks.session.counts.samples == 21


@pytest.mark.parametrize(
    ("first_step", "logged"),
    [(0, [4, 9, 14, 19]), (12, [14, 19])],
    ids=["from-the-start", "resumed"],
)
def test_the_log_cadence_is_lightnings(first_step: int, logged: list[int]) -> None:
    """Lightning logs when (step + 1) % log_every_n_steps == 0, at its own step number; a fit
    resumed at step 12 logs next at 14, not at its first step."""
    trainer = fake_trainer(log_every=5)
    hooks = started(trainer)
    run_steps(hooks, trainer, [(Arr(8),)] * (20 - first_step), first_step=first_step)
    assert trainer.loggers[0].steps == logged


def test_a_stopping_trainer_logs_its_last_step() -> None:
    trainer = fake_trainer(log_every=5)
    hooks = started(trainer)
    run_steps(hooks, trainer, [(Arr(8),)] * 7)
    trainer.should_stop = True
    run_steps(hooks, trainer, [(Arr(8),)], first_step=7)
    assert trainer.loggers[0].steps == [4, 7]


def test_no_step_cadence_when_lightning_does_not_log() -> None:
    trainer = fake_trainer(log_every=0)
    hooks = started(trainer)
    run_steps(hooks, trainer, [(Arr(8),)] * 12)
    trainer.should_stop = True  # log_every_n_steps=0: Lightning logs nothing, nor do we
    run_steps(hooks, trainer, [(Arr(8),)], first_step=12)
    assert trainer.loggers[0].steps == []
