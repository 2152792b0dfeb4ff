"""A 2-process DDP fit on CPU (gloo) with the Lightning callback, for test_lightning.py.

    GPU_KPI_GPU=simulated:healthy@H100 python tests/trainer/lightning_ddp.py OUT_DIR

Lightning's launcher re-executes this file for rank 1, so everything runs under ``__main__``.
Each rank samples its own simulated GPU (the UUID differs by ``LOCAL_RANK``). Rank 0 writes
``OUT_DIR/record.json`` (the run record, as the callback holds it) and TensorBoard events under
``OUT_DIR/tb``; the run store is ``OUT_DIR/runs.db``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

STEPS = 20
BATCH = 8
LOG_EVERY = 5
WORK_S = 0.005


def main(out: Path) -> None:
    import lightning as L
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch.utils.data import DataLoader, TensorDataset

    from tracker.lightning import GpuKpiCallback

    torch.set_num_threads(1)

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(32, 1)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            time.sleep(WORK_S)  # stands for the GPU's compute
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2 * STEPS * BATCH, 32), torch.randn(2 * STEPS * BATCH, 1))
    callback = GpuKpiCallback(
        store=f"sqlite:///{out / 'runs.db'}", warmup_steps=2, log_to_python=False
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=STEPS,
        log_every_n_steps=LOG_EVERY,
        logger=TensorBoardLogger(str(out / "tb")),
        callbacks=[callback],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Tiny(), DataLoader(data, batch_size=BATCH))
    record = callback.record
    if trainer.global_rank == 0 and record is not None:
        (out / "record.json").write_text(json.dumps(record.as_dict(), default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
