"""The Hugging Face ``Trainer`` callback: the only module that imports ``transformers``.

```python
from tracker.transformers import GpuKpiCallback

trainer = Trainer(model=model, args=args, train_dataset=ds,
                  callbacks=[GpuKpiCallback(project="llm", team="nlp")])
```

The Trainer's built-in reporters run before user callbacks, so adding keys to ``logs`` in
``on_log`` would be too late: the callback logs its metrics itself, to the active W&B run and to
TensorBoard when ``report_to`` names them, at ``train/global_step`` like the Trainer's own.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

from tracker.extras import install_hint

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"the Trainer callback needs the transformers package: {install_hint('transformers')}"
    ) from e

from tracker.integrations import distributed
from tracker.integrations.common import new_run_id
from tracker.record import RunRecord
from tracker.session import Session, track
from tracker.sinks import Sink

__all__ = ["GpuKpiCallback"]

log = logging.getLogger("gpu_kpi")


def _report_to(args: Any) -> set[str]:
    value = getattr(args, "report_to", None) or []
    return {value} if isinstance(value, str) else set(value)


def tensorboard_dir(args: Any, run_id: str, now: datetime | None = None) -> Path:
    """Where our scalars go: ``$TENSORBOARD_LOGGING_DIR`` (then beside the Trainer's own), else
    a directory per ``train()`` named as the Trainer names its own,
    ``<output_dir>/runs/<Mon DD_HH-MM-SS>_<host>_gpu-kpi-<run id>``: each run a run of its
    own in TensorBoard, listed next to the Trainer's."""
    if os.environ.get("TENSORBOARD_LOGGING_DIR"):
        return Path(os.environ["TENSORBOARD_LOGGING_DIR"])
    stamp = (now or datetime.now()).strftime("%b%d_%H-%M-%S")
    return Path(args.output_dir) / "runs" / f"{stamp}_{socket.gethostname()}_gpu-kpi-{run_id[:8]}"


def _dtype(args: Any) -> str:
    """The training arguments' precision: ``bf16``/``fp16`` mixed precision, else fp32 matmuls
    as ``tf32`` where ``tf32=True``, else ``fp32``."""
    if getattr(args, "bf16", False):
        return "bf16"
    if getattr(args, "fp16", False):
        return "fp16"
    if getattr(args, "tf32", None) is True:
        return "tf32"
    return "fp32"


class GpuKpiCallback(TrainerCallback):
    """Tracks a Hugging Face ``Trainer.train()``: GPU utilization, throughput, MFU, cost and
    waste, logged to W&B and TensorBoard (when ``report_to`` names them) and written to the run
    store.

    A thin adapter: the hooks only read the clock and count, and the measuring lives in
    :class:`tracker.session.Session`.

    - Samples per optimizer step and rank: ``samples_per_step``, else
      ``per_device_train_batch_size × gradient_accumulation_steps``; tokens: the Trainer's
      ``num_input_tokens_seen`` (``include_num_input_tokens_seen=True``), else
      ``tokens_per_step``.
    - FLOPs: ``flops_per_step``, else the Trainer's ``total_flos`` (6 × parameters × tokens).
    - Logs at the Trainer's ``logging_steps``, at ``train/global_step`` like the Trainer's own
      points; evaluation, checkpoint saves, epoch boundaries and the first ``warmup_steps``
      are left out of step-time, throughput and data-wait figures; the Trainer's own logging
      (its loss read-back, its reporters) counts as step time, not as data wait.
    - Each ``train()`` call is a run of its own (a resumed run, a hyperparameter-search trial).
    - TensorBoard: a run directory of its own beside the Trainer's,
      ``<output_dir>/runs/<Mon DD_HH-MM-SS>_<host>_gpu-kpi-<run id>``.

    Args:
        samples_per_step: Samples one optimizer step processes on this rank; None:
            ``per_device_train_batch_size × gradient_accumulation_steps``.
        tokens_per_step: Tokens one optimizer step processes on this rank, when the Trainer
            does not count them (``include_num_input_tokens_seen``); None: not counted.
        **session_kwargs: Passed to :func:`tracker.session.track`: ``project``, ``team``,
            ``name``, ``tags``, ``run_id``, ``flops_per_step`` (model FLOPs of one optimizer
            step on this rank), ``price_per_gpu_hour`` (USD per GPU-hour), ``backend``,
            ``store``, ``sinks``, ``warmup_steps``, ``interval_s`` (seconds between GPU
            samples), ``print_summary``… ``framework`` defaults to ``"transformers"``, ``dtype``
            to the training arguments' (``bf16``, ``fp16``, else ``fp32``), ``name`` to the
            Trainer's ``run_name``, else the W&B run's.

    Logged keys, at the Trainer's logging steps (units in the names; a figure without data is
    left out, never logged as 0; the same keys for every sink, declared in
    :mod:`tracker.metrics`):

    ================================  ==========  ================================================
    key                               unit        what
    ================================  ==========  ================================================
    ``gpu/util_pct``                  %           NVML utilization (nvidia-smi's ``GPU-Util``), mean
                                                  over the run's GPUs since the last log
    ``gpu/sm_active_pct``             %           GPM SM activity (Hopper+)
    ``gpu/tensor_active_pct``         %           GPM tensor-core activity (Hopper+)
    ``gpu/dram_active_pct``           %           GPM memory-bandwidth activity (Hopper+)
    ``gpu/mem_used_gib``              GiB         device memory in use, mean over the GPUs
    ``gpu/mem_used_pct``              %           device memory in use, share of the total
    ``gpu/power_w``                   W           board power now, summed over the GPUs
    ``gpu/energy_kwh``                kWh         GPU energy since the run started
    ``gpu/co2e_kg``                   kg          CO2e of that energy (``[carbon]``)
    ``gpu/temp_c``                    °C          temperature of the hottest GPU
    ``gpu/sm_clock_mhz``              MHz         SM clock, mean over the GPUs
    ``perf/step_time_ms``             ms          mean step time since the last log
    ``perf/data_wait_pct``            %           share of step time spent waiting for input
    ``perf/samples_per_s``            1/s         training samples per second
    ``perf/tokens_per_s``             1/s         training tokens per second (when counted)
    ``perf/tflops``                   TFLOP/s     achieved model FLOP/s, all GPUs
    ``perf/mfu``                      0-1         model FLOPs utilization against the dtype's
                                                  dense peak (the config's gpu_kpi/mfu_peak);
                                                  left out over 1: an error the run names
    ``perf/ofu``                      0-1         observed FLOPs utilization: tensor pipes
                                                  active x SM clock (GPM, Hopper+)
    ``cost/usd``                      USD         cost so far: GPU-hours x price
    ``cost/usd_per_hour``             USD/h       price of the run's GPUs per hour
    ``cost/waste_usd``                USD         recoverable waste so far (under the target)
    ``cost/usd_per_1k_samples``       USD         cost per 1,000 training samples
    ``cost/usd_per_1m_tokens``        USD         cost per 1,000,000 training tokens
    ``gpu/util_pct_min``              %           lowest rank's utilization (several ranks)
    ``gpu/util_pct_max``              %           highest rank's utilization (several ranks)
    ``perf/step_time_ms_max``         ms          slowest rank's step time (several ranks)
    ``perf/slowest_rank``             rank        global rank with the longest step time
    ``perf/rank_spread_pct``          %           (slowest - fastest) / mean step time of ranks
    ================================  ==========  ================================================

    The run's summary (the W&B summary, TensorBoard text, the run store) carries the final
    values, the verdict (``healthy``, ``input-bound``, ``low-efficiency``…) and its advice.

    Example:
        One line in the Trainer's callbacks::

            from transformers import Trainer, TrainingArguments
            from tracker.transformers import GpuKpiCallback

            args = TrainingArguments("out", report_to=["wandb"], include_num_input_tokens_seen=True)
            trainer = Trainer(
                model=model,
                args=args,
                train_dataset=dataset,
                callbacks=[GpuKpiCallback(project="llm", team="nlp")],
            )
            trainer.train()
    """

    def __init__(
        self,
        *,
        samples_per_step: int | None = None,
        tokens_per_step: int | None = None,
        **session_kwargs: Any,
    ) -> None:
        self.samples_per_step = samples_per_step
        self.tokens_per_step = tokens_per_step
        self.session_kwargs = session_kwargs
        self.session: Session | None = None
        self._samples_arg = samples_per_step
        self._running = False
        # a step whose end waits for on_log: its samples and tokens
        self._pending = False
        self._pending_counts: tuple[int | None, int | None] = (None, None)
        self._tokens_seen = 0
        self._flos = 0.0
        self._flos_step = 0
        self._last_logged = -1

    # -- start ------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # each train() call is a run of its own (a resumed run, a hyperparameter-search trial)
        if self._running:  # the previous train() raised before on_train_end
            self._at_exit()
            atexit.unregister(self._at_exit)
        self.session, self._pending, self._last_logged = None, False, -1
        try:
            self.session = self._make_session(args, state)
            self.session.start()
            self._running = True
            atexit.register(self._at_exit)
        except Exception as e:
            log.warning("gpu-kpi: tracking is off for this run: %s: %s", type(e).__name__, e)
            self.session = None

    def _make_session(self, args: Any, state: Any) -> Session:
        rank, world, nodes = distributed.world()
        run_id = self.session_kwargs.get("run_id") or new_run_id()
        if world > 1:  # one collective at the start: every rank writes under rank 0's id
            run_id = distributed.broadcast_str(run_id)
        sinks: list[Sink] = []
        links: dict[str, str] = {}
        report = _report_to(args)
        name = getattr(args, "run_name", None)
        if name == getattr(args, "output_dir", None):  # transformers 4 filled it in so
            name = None
        if rank == 0 and "wandb" in report:
            from tracker.sinks.wandb import WandbSink, active_run

            sinks.append(WandbSink(None, step_metric="train/global_step"))
            run = active_run()
            if run is not None and getattr(run, "url", None):
                links["wandb"] = str(run.url)
            name = name or (getattr(run, "name", None) if run is not None else None)
        if rank == 0 and "tensorboard" in report:
            from tracker.sinks.tensorboard import TensorBoardSink

            logdir = tensorboard_dir(args, run_id)
            sinks.append(TensorBoardSink(logdir=logdir))
            links["tensorboard"] = str(logdir)
        kwargs = dict(self.session_kwargs)
        if name and not kwargs.get("name"):  # the Trainer's run_name, else W&B's run name
            kwargs["name"] = str(name)
        kwargs.setdefault("framework", "transformers")
        if kwargs.get("dtype") is None:  # the arguments' precision, said to be the trainer's
            kwargs["dtype"], kwargs["dtype_from"] = _dtype(args), "trainer"
        # a train(resume_from_checkpoint=…) has its state loaded before on_train_begin
        kwargs.setdefault("resumed_from_step", int(state.global_step) or None)
        if _device_type(args) == "cpu":  # told so at the end, never asked for NVML
            kwargs.setdefault("device", "cpu")
        kwargs["links"] = {**links, **kwargs.get("links", {})}
        kwargs["sinks"] = [*sinks, *kwargs.get("sinks", ())]
        kwargs["log_every_s"] = float("inf")  # logging follows the Trainer's logging_steps
        self._tokens_seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        self._flos = float(getattr(state, "total_flos", 0.0) or 0.0)
        self._flos_step = int(state.global_step)
        self.samples_per_step = self._samples_arg
        if self.samples_per_step is None:
            self.samples_per_step = int(args.per_device_train_batch_size) * int(
                args.gradient_accumulation_steps
            )
        return track(
            run_id=run_id,
            rank=rank,
            world_size=world,
            nodes=nodes,
            gather=distributed.gatherer(),
            **kwargs,
        )

    # -- steps ------------------------------------------------------------------------------
    # on_step_begin and on_step_end run on every optimizer step: no call, dict or tuple there
    # that a plain step does not need
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self.session
        if s is not None:
            if self._pending:
                self._end_step()
            s.data_ready()  # the Trainer fetched this step's batches just before

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self.session
        if s is None:
            return
        tokens = self.tokens_per_step
        seen = getattr(state, "num_input_tokens_seen", 0)
        if seen and seen > self._tokens_seen:  # summed over ranks by the Trainer: this rank's share
            seen = int(seen)
            tokens = (seen - self._tokens_seen) // max(s.world_size, 1)
            self._tokens_seen = seen
        # On a log step the Trainer now reads the loss (a GPU sync) and its reporters write:
        # that is neither input wait nor the next step, so the step ends in on_log instead.
        if getattr(control, "should_log", False):
            self._pending, self._pending_counts = True, (self.samples_per_step, tokens)
        else:
            s.step(self.samples_per_step, tokens)

    def _end_step(self) -> None:
        """Count the step whose end was deferred to on_log."""
        if self.session is not None and self._pending:
            self._pending = False
            self.session.step(*self._pending_counts)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        s = self.session
        if s is None:
            return
        self._end_step()
        step = int(state.global_step)
        if step == self._last_logged or any(k.startswith("eval_") for k in logs or {}):
            return
        self._last_logged = step
        flos = float(getattr(state, "total_flos", 0.0) or 0.0)
        if "flops_per_step" not in self.session_kwargs and flos > self._flos:
            # total_flos is summed over ranks and brought up to date just before on_log
            s.add_flops((flos - self._flos) / max(s.world_size, 1), step - self._flos_step)
        self._flos, self._flos_step = flos, step
        s.log_now(step=step)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:
            self._end_step()
            self.session.interrupt()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:
            self._end_step()
            self.session.interrupt()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:
            self._end_step()
            self.session.interrupt()

    # -- the end ----------------------------------------------------------------------------
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:
            self._end_step()
            self.session.finish("finished")
        self._running = False
        atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        """The Trainer has no exception hook: a run that never reached on_train_end failed."""
        if self.session is not None:
            self.session.finish("failed", collective=False)
        self._running = False

    @property
    def record(self) -> RunRecord | None:
        """The run's final record (global rank 0: every rank's GPUs), after training."""
        return self.session.record if self.session is not None else None


def _device_type(args: Any) -> str | None:
    """The type of the device the Trainer trains on (``cpu``, ``cuda``…; ``args.device``);
    None: not known."""
    try:
        return str(args.device.type)
    except Exception:  # an arguments object of another transformers: nothing said
        return None
