"""The Lightning callback's hooks, written against the trainer's attributes only, so that one
body serves ``lightning`` (:mod:`tracker.lightning`) and ``pytorch_lightning``
(:mod:`tracker.pytorch_lightning`). A thin adapter: the measuring lives in the session."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from tracker.config import ConfigError, Settings, load_settings
from tracker.integrations.common import BatchFn, FlopMeter, batch_leaf, count, new_run_id
from tracker.record import RunRecord
from tracker.session import Session, track
from tracker.sinks import Sink

log = logging.getLogger("gpu_kpi")


class LoggersSink:
    """Metrics through the trainer's own loggers (``WandbLogger``, ``TensorBoardLogger``, CSV…),
    at ``trainer.global_step``, so they line up with the user's loss curves."""

    name = "lightning-loggers"

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self._failed: set[int] = set()

    def start(self, record: RunRecord) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        # one logger that rejects our metrics must not cost the others theirs
        for logger in self.trainer.loggers:
            if id(logger) in self._failed:
                continue
            try:
                logger.log_metrics(dict(metrics), step=step)
            except Exception as e:
                self._failed.add(id(logger))
                log.warning(
                    "gpu-kpi: logger %s failed (%s: %s); gpu-kpi metrics no longer go to it",
                    type(logger).__name__,
                    type(e).__name__,
                    e,
                )

    def summary(self, record: RunRecord) -> None:
        pass

    def alert(self, title: str, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def logger_sinks(trainer: Any) -> tuple[list[Sink], dict[str, str], str | None]:
    """Sinks for the summary, config and alert of each W&B / TensorBoard logger, the links, and
    the run's name there: the W&B run's, else ``<name>/version_<n>`` of a TensorBoard or CSV
    logger."""
    sinks: list[Sink] = []
    links: dict[str, str] = {}
    names: dict[str, str] = {}
    for logger in trainer.loggers:
        kind = type(logger).__name__
        try:  # a logger we cannot use costs its own sink, not the run's tracking
            if kind == "WandbLogger":
                from tracker.sinks.wandb import WandbSink

                experiment = logger.experiment
                sinks.append(WandbSink(experiment, step_metric=None, log_metrics=False))
                url = getattr(experiment, "url", None)
                if url:
                    links["wandb"] = str(url)
                if getattr(experiment, "name", None):
                    names.setdefault("wandb", str(experiment.name))
            elif kind in ("TensorBoardLogger", "CSVLogger"):
                if kind == "TensorBoardLogger":
                    from tracker.sinks.tensorboard import TensorBoardSink

                    sinks.append(TensorBoardSink(logger.experiment, log_metrics=False))
                    links["tensorboard"] = str(logger.log_dir)
                version = logger.version
                names.setdefault(
                    "version",
                    f"{logger.name}/"
                    + (version if isinstance(version, str) else f"version_{version}"),
                )
        except Exception as e:
            log.warning("gpu-kpi: no run summary in %s (%s: %s)", kind, type(e).__name__, e)
    return sinks, links, names.get("wandb") or names.get("version")


class LightningHooks:
    """Tracks a Lightning ``fit``: GPU utilization, throughput, MFU, cost and waste, logged
    through the trainer's own loggers and written to the run store.

    The body of ``tracker.lightning.GpuKpiCallback`` (and of ``tracker.pytorch_lightning``'s);
    a thin adapter: the hooks only read the clock and count, and the measuring lives in
    :class:`tracker.session.Session`.

    - Samples per step: ``batch_size_fn(batch)``, else the batch's leading dimension (the shape
      of its first tensor, never a read from the GPU); tokens: ``tokens_fn(batch)``, else not
      counted.
    - FLOPs per step: ``flops_per_step``, else measured once with ``torch.utils.flop_counter``
      on the first training batch (``measure_flops=False`` turns that off: no MFU then).
    - Logs when Lightning logs (every ``trainer.log_every_n_steps`` optimizer steps, at the same
      step number as the user's loss) and, in a single process, at least every
      ``log_every_s`` seconds for very slow steps.
    - Validation, checkpoint saves, epoch boundaries, the step after a log (it carries the
      loggers' writes) and the first ``warmup_steps`` are left out of step-time, throughput
      and data-wait figures.
    - Each ``fit`` is a run of its own: a resumed fit counts only its own steps and samples.
    - With W&B and TensorBoard loggers, the run's summary, config and alerts go there too; the
      run is named as the loggers name it.

    The batch hooks run on every step, so they stay cheap (see ``bench/callback_overhead.py``):
    few Python calls, the batch's leading dimension the only part of it read (the keys to that
    tensor are found in the first batch and kept while later batches have the same type), the
    trainer's figures looked up once a fit, the log cadence one integer compare.

    Args:
        batch_size_fn: ``batch -> samples`` in it, for batches whose leading dimension is not
            the sample count (packed sequences, several inputs); one that raises is reported
            once and its samples are not counted.
        tokens_fn: ``batch -> tokens`` in it; None: tokens are not counted.
        measure_flops: Measure one training step's FLOPs (forward and backward) on the first
            batch, when ``flops_per_step`` is not given.
        **session_kwargs: Passed to :func:`tracker.session.track`: ``project``, ``team``,
            ``name``, ``tags``, ``run_id``, ``flops_per_step`` (model FLOPs of one step on this
            process), ``price_per_gpu_hour`` (USD per GPU-hour), ``backend``, ``store``,
            ``sinks``, ``warmup_steps``, ``interval_s`` (seconds between GPU samples),
            ``log_every_s`` (seconds; the slow-step cadence), ``print_summary``… ``framework``
            defaults to ``"lightning"`` and ``dtype`` to the trainer's precision.

    Logged keys, at Lightning's log steps through every logger of the trainer (units in the
    names; a figure without data is left out, never logged as 0; the same keys for every sink,
    declared in :mod:`tracker.metrics`):

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
        One line in the trainer's callbacks::

            import lightning as L
            from lightning.pytorch.loggers import WandbLogger
            from tracker.lightning import GpuKpiCallback

            trainer = L.Trainer(
                callbacks=[GpuKpiCallback(project="llm", team="nlp")],
                logger=WandbLogger(project="llm"),
            )
            trainer.fit(model, datamodule)
    """

    def __init__(
        self,
        *,
        batch_size_fn: BatchFn | None = None,
        tokens_fn: BatchFn | None = None,
        measure_flops: bool = True,
        **session_kwargs: Any,
    ) -> None:
        super().__init__()
        self.batch_size_fn = batch_size_fn
        self.tokens_fn = tokens_fn
        self.measure_flops = measure_flops and session_kwargs.get("flops_per_step") is None
        self.session_kwargs = session_kwargs
        self.session: Session | None = None
        self._log_every_s = float(session_kwargs.get("log_every_s") or 0.0)
        self._reset()

    def _reset(self) -> None:
        self._flops = FlopMeter()
        self._flops_due = self.measure_flops  # on the first batch this fit sees
        self._flops_open = False
        # the batch type, and keys into it, that the last batch's size was read from
        self._batch_type: type | None = None
        self._batch_path: tuple[Any, ...] = ()
        self._warned: set[str] = set()
        self._last_logged = -1
        self._next_log_t = 0.0
        # the trainer's figures, looked up once a fit (on_fit_start)
        self._loop: Any = None
        self._every = 0
        self._accumulates = True
        self._due_step = sys.maxsize  # no step before this one logs on the step cadence

    # -- setup ------------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        # a callback used for a second fit starts a new run, not the first one's counters
        # under the first one's id
        self.session = None
        self._reset()
        try:
            self.session = self._make_session(trainer, pl_module)
        except Exception as e:
            log.warning("gpu-kpi: tracking is off for this run: %s: %s", type(e).__name__, e)

    def _make_session(self, trainer: Any, pl_module: Any) -> Session:
        world = int(trainer.world_size)
        rank = int(trainer.global_rank)
        run_id = self.session_kwargs.get("run_id") or new_run_id()
        if world > 1:  # one collective at set-up: every rank writes under rank 0's id
            run_id = trainer.strategy.broadcast(run_id, src=0)
        sinks: list[Sink] = []
        links: dict[str, str] = {}
        name = None
        if rank == 0:
            sinks, links, name = logger_sinks(trainer)
            sinks.insert(0, LoggersSink(trainer))
        kwargs = dict(self.session_kwargs)
        if name and not kwargs.get("name"):  # the loggers' name for the run
            kwargs["name"] = name
        kwargs.setdefault("framework", "lightning")
        if kwargs.get("dtype") is None:  # the trainer's precision, said to be the trainer's
            kwargs["dtype"], kwargs["dtype_from"] = str(trainer.precision), "trainer"
        if _device_type(trainer) == "cpu":  # told so at the end, never asked for NVML
            kwargs.setdefault("device", "cpu")
        kwargs["links"] = {**links, **kwargs.get("links", {})}
        kwargs["sinks"] = [*sinks, *kwargs.get("sinks", ())]
        if not self._log_every_s:  # the configured cadence for very slow steps
            try:
                self._log_every_s = load_settings(kwargs.get("config")).log_every_s
            except ConfigError:
                self._log_every_s = Settings().log_every_s  # the session warns about the file
        kwargs["log_every_s"] = float("inf")  # logging follows the trainer's steps, below
        return track(
            run_id=run_id,
            rank=rank,
            world_size=world,
            nodes=int(getattr(trainer, "num_nodes", 1)),
            gather=_gatherer(trainer, pl_module) if world > 1 else None,
            **kwargs,
        )

    # -- training ---------------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        # from here on the GPUs are held (the sanity check included): cost counts from here
        if self.session is not None:
            self.session.start()
            self._next_log_t = self.session.now() + self._log_every_s
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        # a Lightning without these internals: _log_step's fallback on every step
        self._loop = loop if hasattr(loop, "_batches_that_stepped") else None
        self._every = int(getattr(trainer, "log_every_n_steps", 50) or 0)
        # one batch per optimizer step never accumulates: no need to ask on every step
        self._accumulates = getattr(trainer, "accumulate_grad_batches", 2) != 1
        self._due_step = 0 if self._every > 0 else sys.maxsize

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # fit(ckpt_path=…) has restored the loops by now: a global step past 0 is a resume
        step = int(getattr(trainer, "global_step", 0) or 0)
        if self.session is not None and step > 0:
            self.session.resumed_from_step = step

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.session is not None:
            self.session.interrupt()  # loader workers restart at an epoch boundary

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        s = self.session
        if s is None:
            return
        s.data_ready()
        # the first batch this fit sees (a fit resumed mid-epoch starts at batch_idx > 0)
        if self._flops_due:
            self._flops_due = False
            self._flops.begin()
            self._flops_open = self._flops.active

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        s = self.session
        if s is None:
            return
        if self._flops_open:
            self._flops_open = False
            if (flops := self._flops.end()) is not None:
                s.flops_per_step = flops
        samples = None
        if self.batch_size_fn is not None:
            samples = count(self.batch_size_fn, batch, "batch_size_fn", self._warned)
        else:
            if type(batch) is self._batch_type:
                try:  # inline, not a call: this runs on every step
                    leaf: Any = batch
                    for key in self._batch_path:
                        leaf = leaf[key]
                    samples = leaf.shape[0]
                except Exception:  # not the structure the keys came from
                    pass
            if type(samples) is not int:
                samples = self._batch_size(batch)
        s.step(
            samples,
            None
            if self.tokens_fn is None
            else count(self.tokens_fn, batch, "tokens_fn", self._warned),
        )
        loop = self._loop
        if loop is None:
            step, accumulating = _log_step(trainer)
        else:
            step = loop._batches_that_stepped
            accumulating = self._accumulates and _accumulating(loop)
        if accumulating or step == self._last_logged:
            return
        due = False
        if step >= self._due_step:  # the one compare of most steps
            every = self._every
            due = (step + 1) % every == 0
            self._due_step = ((step + 1) // every + 1) * every - 1  # the next such step
        if not due:
            if self._every > 0 and trainer.should_stop:
                due = True
            elif s.world_size == 1 and s.now() >= self._next_log_t:
                due = True  # very slow steps: still a point every log_every_s
            else:
                return
        self._last_logged = step
        self._next_log_t = s.now() + self._log_every_s
        s.log_now(step=step)
        if self._every != 1:
            # our writes and Lightning's (same batch) are neither training nor waiting for
            # input: leave the gap before the next batch out (unless every step logs)
            s.interrupt()

    def _batch_size(self, batch: Any) -> int | None:
        """The batch's leading dimension, found by walking it; the keys to it are kept."""
        self._batch_type = None
        try:
            found = batch_leaf(batch)
        except Exception as e:  # an odd batch type: no sample count, training goes on
            if "batch_size" not in self._warned:
                self._warned.add("batch_size")
                log.warning(
                    "gpu-kpi: cannot tell the batch size (%s: %s); pass batch_size_fn=",
                    type(e).__name__,
                    e,
                )
            return None
        if found is None:
            return None
        self._batch_type, self._batch_path = type(batch), found[1]
        return found[0]

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.session is not None and not trainer.sanity_checking:
            self.session.interrupt()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self.session is not None:
            self.session.interrupt()

    # -- the end ----------------------------------------------------------------------------
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.session is not None:
            self.session.finish("finished")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self._flops.active:  # the failing batch was the one being measured
            self._flops_open = False
            self._flops.end()
        if self.session is not None:
            # no collective: the other ranks may not reach this point
            self.session.finish("failed", collective=False)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.session is not None and stage == "fit":
            self.session.finish("finished")

    @property
    def record(self) -> RunRecord | None:
        """The run's final record (global rank 0: every rank's GPUs), once fit has ended."""
        return self.session.record if self.session is not None else None


def _log_step(trainer: Any) -> tuple[int, bool]:
    """The step Lightning logs this batch's metrics at, and whether the batch only accumulates
    gradients. Lightning logs at ``_batches_that_stepped`` (optimizer steps so far, counted
    after logging: 0 for the first), not ``global_step``; using the same number lines our points
    up with the user's loss curve in every logger."""
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    try:
        return int(loop._batches_that_stepped), bool(loop._should_accumulate())  # type: ignore[union-attr]
    except Exception:  # a Lightning without these internals: the closest public figure
        return max(int(trainer.global_step) - 1, 0), False


def _accumulating(loop: Any) -> bool:
    try:
        return bool(loop._should_accumulate())
    except Exception:
        return False


def _gatherer(trainer: Any, pl_module: Any) -> Any:
    """All-gather a few floats through the strategy (gloo or NCCL): at log steps only."""

    def gather(vector: list[float]) -> list[list[float]]:
        import torch

        tensor = torch.tensor(vector, dtype=torch.float64, device=pl_module.device)
        out = trainer.strategy.all_gather(tensor)
        return [list(map(float, row)) for row in out.reshape(-1, len(vector)).cpu().tolist()]

    return gather


def _device_type(trainer: Any) -> str | None:
    """The type of the device the trainer put the model on (``cpu``, ``cuda``…); None: not
    known (a Lightning without ``strategy.root_device``)."""
    try:
        return str(trainer.strategy.root_device.type)
    except Exception:  # internals of another Lightning: nothing said
        return None
