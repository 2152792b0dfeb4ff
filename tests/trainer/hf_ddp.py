"""A 2-process DDP run of the HF ``Trainer`` with ``GpuKpiCallback``, for test_transformers.py.

Run with ``torchrun --nproc_per_node 2 tests/trainer/hf_ddp.py OUT_DIR`` (gloo on
CPU; each rank gets a simulated GPU of its own from ``GPU_KPI_GPU`` and its RANK). The run store is
``sqlite:///OUT_DIR/runs.db``; the Trainer writes to ``OUT_DIR/out``; rank 0 writes the run's
id to ``OUT_DIR/run_id``.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

MAX_STEPS = 20
LOGGING_STEPS = 5
BATCH = 4
SEQ_LEN = 32


def main(out: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from tracker.transformers import GpuKpiCallback

    class Tokens(Dataset[dict[str, torch.Tensor]]):
        def __init__(self, n: int) -> None:
            g = torch.Generator().manual_seed(0)
            self.x = torch.randint(0, 128, (n, SEQ_LEN), generator=g)

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"input_ids": self.x[i], "labels": self.x[i]}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            n_layer=2,
            n_head=2,
            n_embd=64,
            vocab_size=128,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    args = TrainingArguments(
        output_dir=str(out / "out"),
        max_steps=MAX_STEPS,
        logging_steps=LOGGING_STEPS,
        per_device_train_batch_size=BATCH,
        include_num_input_tokens_seen=True,
        report_to=["tensorboard"],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
    )
    callback = GpuKpiCallback(store=f"sqlite:///{out / 'runs.db'}", project="ddp")
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(256), callbacks=[callback])
    trainer.train()
    record = callback.record
    if trainer.is_world_process_zero() and record is not None:
        (out / "run_id").write_text(record.id)
    # The Trainer leaves the gloo group up. Left to interpreter exit, its teardown aborted a rank
    # in CI ("terminate called without an active exception", pytorch/pytorch#190489); destroyed
    # while the trainer (and DDP's wrapper) still lived, a rank hung once in about 30 runs. So:
    # the trainer first, then the group, once every rank is past its last collective.
    del trainer
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
