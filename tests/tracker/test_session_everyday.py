"""What the engineer sees without reading a dashboard: the summary a run prints when it ends,
the plain loop as docs/tracking.md writes it on the common batch shapes, and a W&B sink with no
run to write to saying so.

torch is imported inside the tests that use it, not at the top: collecting the fast suite
imports no framework (``tests/test_fast_suite.py``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fakes import Clock

from tracker import track
from tracker.session import Session
from tracker.sinks.wandb import WandbSink


def input_bound(run: Session, clock: Clock, seconds: int) -> None:
    """``seconds`` one-second steps of 16 samples on the 60% input-bound profile."""
    for _ in range(seconds):
        clock.t += 1.0
        run.sampler.sample()  # type: ignore[union-attr]
        run.step(samples=16)


def test_the_run_prints_its_summary_when_it_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """10 min on one H100 at $3.85: 0.17 GPU-h, $0.64; 60% against the 85% target wastes
    0.64 x (1 - 60/85) = $0.19."""
    clock = Clock()
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    with track(
        name="baseline",
        backend="simulated:input-bound@H100",
        store=store,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_to_python=False,
        links={"wandb": "https://wandb.ai/me/llm/runs/abc"},
    ) as run:
        input_bound(run, clock, 600)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == [
        'gpu-kpi: run "baseline" finished: 1x H100, 0.17 GPU-h (10 min)',
        "  utilization 60% · cost $0.64 · waste $0.19 (idle $0.00)",
        # a plain loop's: no FLOPs counted; the tensor pipes' own figure
        "  MFU: n/a, no model FLOPs counted (pass flops_per_step=) · OFU 30% (tensor pipes "
        "active x SM clock)",
        "  verdict: below-target",
    ]
    assert lines[4].startswith("  advice: ") and lines[4] == f"  advice: {run.record.advice}"  # type: ignore[union-attr]
    assert lines[5] == f"  stored: run {run.id} in {store}"
    assert lines[6] == "  W&B: https://wandb.ai/me/llm/runs/abc"
    assert len(lines) == 7


def test_the_summary_is_off_with_a_flag_the_config_or_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def quiet_run(**kwargs: object) -> None:
        with track(
            name="q", backend="simulated:healthy@H100", store=False, log_to_python=False, **kwargs
        ):
            pass

    quiet_run(print_summary=False)
    config = tmp_path / "gpu-kpi.toml"
    config.write_text("[tracker]\nprint_summary = false\n")
    quiet_run(config=str(config))
    monkeypatch.setenv("GPU_KPI_PRINT_SUMMARY", "off")
    quiet_run()
    monkeypatch.delenv("GPU_KPI_PRINT_SUMMARY")
    # another rank than global rank 0 never prints
    quiet_run(rank=1, world_size=2, gather=lambda v: [v, v])
    assert capsys.readouterr().out == ""
    quiet_run(print_summary="yes")  # a variable's words too
    out = capsys.readouterr().out
    assert out.startswith('gpu-kpi: run "q" finished') and "stored: nowhere" in out


def test_a_store_it_cannot_reach_is_named_as_the_spool(capsys: pytest.CaptureFixture[str]) -> None:
    with track(
        name="s",
        backend="simulated:healthy@H100",
        log_to_python=False,
        store="postgresql://nobody@127.0.0.1:1/none?connect_timeout=1",
    ) as run:
        pass
    out = capsys.readouterr().out
    assert f"stored: run {run.id} in the local spool " in out
    assert "the store was unreachable (`gpu-kpi sync` sends it)" in out


def test_a_short_runs_figures_are_not_rounded_away(capsys: pytest.CaptureFixture[str]) -> None:
    """2 s on an H100: 0.00056 GPU-h, $0.0021: shown as such, not as 0.00 GPU-h and $0.00."""
    clock = Clock()
    with track(
        name="short",
        backend="simulated:healthy@H100",
        store=False,
        clock=clock,
        threaded=False,
        log_to_python=False,
    ) as run:
        for _ in range(2):
            clock.t += 1.0
            run.sampler.sample()  # type: ignore[union-attr]
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert first == 'gpu-kpi: run "short" finished: 1x H100, 0.00056 GPU-h (2 s)'
    assert second == "  utilization 92% · cost <$0.01 · waste $0.00 (idle $0.00)"


def test_a_run_name_cannot_write_to_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with track(
        name="x\x1b[2Jy", backend="simulated:healthy@H100", store=False, log_to_python=False
    ):
        pass
    assert 'run "x?[2Jy"' in capsys.readouterr().out


@pytest.mark.parametrize("shape", ["tensor", "pair", "dict"])
def test_the_readme_loop_counts_samples_on_the_common_batch_shapes(shape: str) -> None:
    """The plain loop as docs/tracking.md writes it: 100 samples in batches of 16 (the last one 4)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    x, y = torch.randn(100, 3), torch.randint(0, 2, (100,))
    data = TensorDataset(x) if shape == "tensor" else TensorDataset(x, y)
    loader: object = DataLoader(data, batch_size=16)
    if shape == "tensor":
        loader = [b[0] for b in DataLoader(data, batch_size=16)]  # plain tensors
    elif shape == "dict":
        loader = [{"input_ids": a, "labels": b} for a, b in DataLoader(data, batch_size=16)]
    with track(
        name="loop",
        backend="simulated:healthy@H100",
        store=False,
        warmup_steps=0,
        log_to_python=False,
        print_summary=False,
    ) as run:
        for batch in run.iterate(loader):  # type: ignore[arg-type]
            assert batch is not None  # train_step(batch)
            run.step()
    assert run.record is not None and run.record.samples == 100
    assert run.steps == 7


def test_samples_add_up_over_accumulated_batches_and_a_given_count_wins() -> None:
    import torch

    batches = [torch.zeros(8, 2)] * 6
    with track(
        name="acc",
        backend="simulated:healthy@H100",
        store=False,
        warmup_steps=0,
        log_to_python=False,
        print_summary=False,
    ) as run:
        for i, _ in enumerate(run.iterate(batches)):
            if i % 2:  # two batches per optimizer step
                run.step()
        run.step(samples=5)  # given: 5, not what iterate() saw (nothing since the last step)
        for _ in run.iterate([torch.zeros(3, 1)]):
            run.step(samples=1)  # given wins over the 3 seen
        run.step()  # nothing seen since: no samples
    assert run.record is not None and run.record.samples == 3 * 16 + 5 + 1


def test_a_batch_whose_size_cannot_be_read_is_not_counted_and_breaks_nothing() -> None:
    import torch

    class OddShape:
        shape = 7  # an int, not a shape

    loop_: list[object] = []
    loop_.append(loop_)  # a list holding itself
    batches = [
        {"x": OddShape()},
        torch.zeros(4, 2),
        (None,),
        loop_,
        type("NoneFirst", (), {"shape": (None, 3)})(),
    ]
    with track(
        name="odd",
        backend="simulated:healthy@H100",
        store=False,
        warmup_steps=0,
        log_to_python=False,
        print_summary=False,
    ) as run:
        for _ in run.iterate(batches):
            run.step()
    assert run.record is not None and run.record.samples == 4 and run.steps == 5


def test_a_wandb_sink_without_a_run_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    import wandb

    assert wandb.run is None
    sink = WandbSink()
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        sink.log_metrics({"gpu/util_pct": 50.0}, 1)
        sink.log_metrics({"gpu/util_pct": 50.0}, 2)
    warned = [r.getMessage() for r in caplog.records if "WandbSink" in r.getMessage()]
    assert len(warned) == 1 and "wandb.init()" in warned[0]
