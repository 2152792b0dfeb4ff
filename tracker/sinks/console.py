"""The summary a run prints when it ends, on global rank 0 (``print_summary``, on by default):
what the engineer sees in the terminal or notebook without turning logging on.

```text
gpu-kpi: run "baseline-lr0.1" finished: 1x H100, 0.005 GPU-h (18 s)
  utilization 67% · cost $0.02 · waste <$0.01 (idle $0.00)
  MFU 41% of 989 TF/s bf16 dense, H100 SXM
  verdict: input-bound
  advice: The loop waits for data: use 4-8 DataLoader workers per GPU, pin_memory=True, …
  stored: run 494fdc13… in sqlite:////home/me/.local/share/gpu-kpi/runs.db
  W&B: https://wandb.ai/team/llm/runs/abc · TensorBoard: tb/lightning_logs/version_0
```
"""

from __future__ import annotations

import logging
import sys
from fractions import Fraction
from typing import TextIO

from tracker.machine import machine_sentence
from tracker.peaks import mfu_lines
from tracker.record import RunRecord

log = logging.getLogger("gpu_kpi")

_LINKS = {"wandb": "W&B", "tensorboard": "TensorBoard"}


def _shown(text: object) -> str:
    """A user's text on one line of the terminal: control characters (an escape sequence in
    a run name) shown as ``?``."""
    return "".join(c if c.isprintable() else "?" for c in str(text))


def summary_text(r: RunRecord, where: str | None) -> str:
    """The summary's lines (see the module's example); ``where``: the store or spool the
    record went to (None: not stored)."""

    def money(v: float | None) -> str:
        if v is None:
            return "n/a"
        return f"${v:,.2f}" if v >= 0.01 or v == 0 else "<$0.01"

    minutes = (r.ended_at - r.started_at).total_seconds() / 60 if r.ended_at is not None else None
    took = (
        ""
        if minutes is None
        else (f" ({minutes:,.0f} min)" if minutes >= 1 else f" ({minutes * 60:.0f} s)")
    )
    gpus = (
        f"{r.gpu_count}x {_shown(r.gpu_model or 'GPU')}"
        if r.gpu_source != "none"
        else "no GPU data"
    )
    held = 60 * r.gpu_hours / (minutes * r.gpu_count) if minutes and r.gpu_count else None
    each = " each" if r.gpu_count > 1 else ""
    if r.mig_profile and r.gpu_source != "none":  # the hours are the slices' share of the GPU
        gpus += f" MIG {_shown(r.mig_profile)}"
        if held is not None and not r.gpu_split and "," not in r.mig_profile:
            # sevenths or eighths (compute or memory slices), whatever a clock's milliseconds
            gpus += f" ({Fraction(held).limit_denominator(8)} of a GPU{each})"
    if r.gpu_split and r.gpu_source != "none":  # shared in time: its measured or even share
        how = "measured" if r.gpu_split == "measured" else "split evenly: no per-process figure"
        share = f"{held:.0%} of it{each}, " if held is not None else ""
        gpus += f" time-sliced ({share}{how})"
    util = "n/a" if r.util_pct is None else f"{r.util_pct:.0f}%"
    idle = "" if r.idle_usd is None else f" (idle {money(r.idle_usd)})"
    hours = (
        f"{r.gpu_hours:,.2f}" if r.gpu_hours >= 0.01 or r.gpu_hours == 0 else f"{r.gpu_hours:.2g}"
    )
    lines = [
        f'gpu-kpi: run "{_shown(r.name)}" {r.status}: {gpus}, {hours} GPU-h{took}',
        f"  utilization {util} · cost {money(r.cost_usd)} · waste {money(r.waste_usd)}{idle}",
    ]
    lines.extend(f"  {_shown(line)}" for line in mfu_lines(r))
    lines.append(f"  verdict: {_shown(r.verdict or 'n/a')}")
    machine = machine_sentence(
        gpu_hours=r.gpu_hours,
        gpu_count=r.gpu_count,
        throttled_gpu_hours=r.throttled_gpu_hours,
        throttle_source=r.throttle_source,
        usd_per_gpu_hour=r.price_per_gpu_hour,
    )
    if machine:
        lines.append(f"  {_shown(machine)}")
    if r.advice:
        lines.append(f"  advice: {_shown(r.advice)}")
    if not where:
        lines.append("  stored: nowhere (store=False)")
    elif where.startswith("nowhere"):  # the writer lost some of it: said first
        lines.append(f"  stored: {_shown(where)} (run {_shown(r.id)})")
    else:
        lines.append(f"  stored: run {_shown(r.id)} in {_shown(where)}")
    links = [f"{_LINKS.get(k, _shown(k))}: {_shown(v)}" for k, v in sorted(r.links.items()) if v]
    if links:
        lines.append("  " + " · ".join(links))
    return "\n".join(lines)


def print_summary(r: RunRecord, where: str | None, stream: TextIO | None = None) -> None:
    """Print :func:`summary_text` (to stdout by default). Never raises: a closed or broken
    stream costs a debug line, not the end of training."""
    try:
        out = stream if stream is not None else sys.stdout
        print(summary_text(r, where), file=out, flush=True)
    except Exception:
        log.debug("gpu-kpi: printing the run's summary failed", exc_info=True)
