"""The framework-free tracking session: the plain-loop API (:func:`track`; docs/tracking.md, "A
plain training loop"), and what the callbacks adapt.

:meth:`Session.step` only reads a clock and adds a few numbers: it never touches the GPU. GPU
sampling runs on its own thread; store writes on another. Nothing here makes training fail: an
error inside the tracker costs a warning and turns the failing part off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import logging
import math
import os
import socket
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from tracker import figures, ranks
from tracker.config import SETTING_KEYS, Settings, checked_argument, read_settings
from tracker.diagnosis import idle_alert
from tracker.gpu import BackendError, GpuBackend, GpuInfo, open_backend
from tracker.peaks import Denominator, denominator, peak_clock_mhz
from tracker.prices import Price, canonical_gpu, price_for
from tracker.ranks import Placement
from tracker.record import JOB_KEY_LINK, MinuteSample, RunRecord, RunSpec, checked_record
from tracker.sampler import Sampler, split_of
from tracker.scheduler import GIT_BRANCH_LINK, git_branch_of, job_key_of, scheduler_links
from tracker.shares import model_of_mig, profiles
from tracker.sinks import LoggingSink, Sink, SinkSet
from tracker.sinks.console import print_summary
from tracker.sinks.summary import record_metrics
from tracker.throughput import RunSteps, infer_batch_size

log = logging.getLogger("gpu_kpi")

_CHECKED_SPEC_FIELDS = ("price_per_gpu_hour", "flops_per_step")
"""The run's numbers a caller gives that are parsed as the config file's are (a bad one costs a
warning and falls back to its default): :func:`tracker.config.checked_argument`."""


class Session:
    """One tracked training run: GPU sampling, step timing, live metrics and the run record.

    A context manager: ``with Session(spec) as run:`` starts the run and finishes it, as
    ``"finished"``, or as ``"failed"`` when the block raises. :func:`track` builds one from
    keyword arguments; the Lightning and Hugging Face callbacks drive one from their hooks.

    Settings come from ``settings`` when given, else from the config file (``config``, else the
    default file and the ``GPU_KPI_*`` variables), with ``overrides`` on top; they are read by
    :meth:`start`, not here (nothing happens at construction).

    With several ranks (``placement.world_size > 1``), only global rank 0 talks to the sinks and
    writes the run record; every rank samples and writes the minutes of its own GPUs.

    Args:
        spec: What the run is: its id, name, project, team, tags, FLOPs per step, dtype, price
            (:class:`tracker.record.RunSpec`). A price or FLOP count that is not a finite
            number >= 0 is dropped with a warning (the price table's price, no MFU).
        settings: How the run is measured (:class:`tracker.config.Settings`); None: read from
            the config file at :meth:`start`.
        config: Path of a TOML config file to read instead of the default one; used only when
            ``settings`` is None.
        overrides: :class:`tracker.config.Settings` fields by name, over the settings (e.g.
            ``{"interval_s": 0.5}``); a bad value costs a warning and keeps the setting's.
        backend: The GPU backend: a spec (``"nvml"``, ``"simulated:PROFILE[@MODEL][:N]"``,
            ``"replay:PATH.csv"``) or a :class:`tracker.gpu.GpuBackend` instance; None: the
            settings' ``gpu``, else ``$GPU_KPI_GPU``, else NVML.
        store: The run store's URL (``sqlite:///runs.db``, ``postgresql://…``); None: the
            settings' store (the local SQLite file by default); False: no store at all.
        sinks: Where live metrics, the summary and alerts go besides Python logging
            (:class:`tracker.sinks.Sink`: W&B, TensorBoard, a test's list).
        log_to_python: Also log metrics to the ``gpu_kpi`` Python logger.
        clock: Seconds, for every time the session reads (step times, the sampler's readings,
            the record's timestamps as seconds since the epoch); None: ``time.perf_counter``
            for step times and ``time.time`` for the rest. Tests inject one.
        threaded: Sample the GPUs on a thread every ``interval_s``; False: the caller calls
            ``sampler.sample()`` (tests, imports that play back a log).
        placement: This process's rank, the world size, the node count and the all-gather
            used at log steps (:class:`tracker.ranks.Placement`); None: a single process.

    Attributes:
        id: The run's id (the store's key).
        name: The run's name; filled in at :meth:`start` when the spec has none
            (``<project>-YYYYMMDD-HHMMSS``).
        rank: This process's global rank.
        world_size: The number of ranks.
        settings: The settings in force (read at :meth:`start`).
        gpus: This process's GPUs, once started (empty without GPU data).
        gpu_source: Where the GPU figures come from: the backend's name, or ``"none"``.
        price: The price per GPU-hour in force (USD) and its source, or None without GPUs.
        peak: MFU's denominator: the GPU's dense peak for the run's dtype and where the dtype
            came from, or why there is none (:class:`tracker.peaks.Denominator`); None
            without GPUs.
        counts: Steps, samples, tokens and their times (:class:`tracker.throughput.RunSteps`).
        record: The final :class:`tracker.record.RunRecord`, once :meth:`finish` has run.

    Example:
        What :func:`track` builds, by hand::

            spec = RunSpec(id="r1", project="llm", team="nlp", dtype="bf16")
            with Session(spec, backend="simulated:healthy@H100", store=False) as run:
                for batch in run.iterate(loader):
                    train_step(batch)
                    run.step()
            print(run.record.util_pct, run.record.cost_usd)
    """

    def __init__(
        self,
        spec: RunSpec,
        *,
        settings: Settings | None = None,
        config: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        backend: str | GpuBackend | None = None,
        store: str | bool | None = None,
        sinks: Sequence[Sink] = (),
        log_to_python: bool = True,
        clock: Callable[[], float] | None = None,
        threaded: bool = True,
        placement: Placement | None = None,
    ) -> None:
        checked = {
            name: checked_argument(name, getattr(spec, name)) for name in _CHECKED_SPEC_FIELDS
        }
        spec = dataclasses.replace(spec, **checked)
        self.spec = spec
        self.id = spec.id
        self.name = spec.name
        self.user = spec.user
        # the Slurm job or Kubernetes pod it runs in (the user's own links win)
        self.links = {**_scheduler_links(), **spec.links}
        self.flops_per_step = spec.flops_per_step
        self.resumed_from_step = spec.resumed_from_step
        """The global step the run resumed at (a callback sets it when training starts)."""

        place = placement or Placement()
        self.rank = place.rank
        self.world_size = place.world_size
        self.nodes: int = checked_argument("nodes", place.nodes) or 1
        self._gather = None
        if place.world_size > 1:
            self._gather = place.gather

        self._backend_arg = backend
        self._store_arg = store
        self._config = config
        self._settings = settings
        self._overrides: dict[str, Any] = {}
        for key, value in (overrides or {}).items():
            if key in SETTING_KEYS:  # a bad number costs a warning and the setting's own value
                self._overrides[key] = checked_argument(key, value)
            else:
                self._overrides[key] = value

        if clock is None:
            self._wall: Callable[[], float] = time.time
            self._now: Callable[[], float] = time.perf_counter
            self._mono: Callable[[], float] = time.monotonic  # durations: no wall-clock steps
        else:
            self._wall = self._now = self._mono = clock
        self._threaded = threaded
        self._peer_figures: list[dict[str, float | None]] = []

        # only global rank 0 talks to sinks and writes the run record; every rank writes the
        # minutes of its own GPUs
        own_sinks: list[Sink] = []
        if self.rank == 0:
            own_sinks = list(sinks)
            if log_to_python:
                own_sinks.append(LoggingSink())
        self.sinks = SinkSet(own_sinks)

        self.settings = Settings()
        self.gpus: list[GpuInfo] = []
        self.gpu_source = "none"
        self.sampler: Sampler | None = None
        self.price: Price | None = None
        self.co2e_kg_per_kwh: float | None = None  # per kWh of GPU energy, on this host
        self.peak: Denominator | None = None
        self._peak_mhz: float | None = None  # the clock the peak is quoted at, for OFU
        self.record: RunRecord | None = None
        self._writer: Any = None
        self._started_wall = 0.0
        self._started_mono = 0.0
        self._started_at = datetime.now(UTC)
        self.counts = RunSteps(self.settings.warmup_steps)
        self._next_log = float("inf")
        self._active = False
        self._warned: set[str] = set()
        self._inferred: int | None = None  # samples of the batches iterate() gave since a step

    def _elapsed(self) -> float:
        """Seconds since the start, by the monotonic clock: a wall-clock step is no time."""
        return max(self._mono() - self._started_mono, 0.0)

    def _stamp(self) -> float:
        """The wall-clock time to record (heartbeat, end): never before the start plus the
        time elapsed, so a clock set back cannot end a run before it began."""
        return max(self._wall(), self._started_wall + self._elapsed())

    def now(self) -> float:
        """The session's step clock: monotonic seconds (``time.perf_counter``), or the injected
        ``clock``. Callbacks time their own cadences with it."""
        return self._now()

    @property
    def steps(self) -> int:
        """Steps so far, warm-up included (:attr:`counts` has samples and tokens too)."""
        return self.counts.steps

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> Session:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish("finished")
        else:
            self.finish("failed")

    def _warn_once(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)

    def start(self) -> Session:
        """Start the run: read the settings, open the GPU backend and start sampling, open the
        store writer, write the run's first record (status ``running``) and tell the sinks.

        A second call does nothing. Without GPU metrics (no NVML, a backend that fails) the run
        goes on with ``gpu_source = "none"``; any other failure turns tracking off for the run.

        Returns:
            The session itself, so that ``run = Session(spec).start()`` reads naturally.

        Raises:
            Nothing: a failure costs one warning on the ``gpu_kpi`` logger.
        """
        if self._active:
            return self
        try:
            self._start()
        except Exception as e:
            self._warn_once(
                "start", "gpu-kpi: tracking is off for this run: %s: %s", type(e).__name__, e
            )
        return self

    def _start(self) -> None:
        base = self._settings or read_settings(self._config)
        self.settings = base.replace(**self._overrides)
        key = job_key_of(self.spec.job_key, self.settings.job_key, os.environ)
        if key:  # the user's own links win
            self.links.setdefault(JOB_KEY_LINK, key)
        branch = git_branch_of(os.environ)
        if branch:
            self.links.setdefault(GIT_BRANCH_LINK, branch)
        self.counts.warmup_steps = self.settings.warmup_steps
        self.co2e_kg_per_kwh = self.settings.carbon.co2e_kg(1.0, _ask(socket.gethostname))
        if self.user is None:
            self.user = _ask(getpass.getuser)
        self._started_wall, self._started_mono = self._wall(), self._mono()
        self._started_at = datetime.fromtimestamp(self._started_wall, UTC)
        if not self.name:
            self.name = f"{self.spec.project or 'run'}-{self._started_at:%Y%m%d-%H%M%S}"
        if self.rank == 0 and self.settings.alert_webhook:
            from tracker.sinks.webhook import WebhookError, WebhookSink

            try:
                self.sinks.sinks.append(WebhookSink(self.settings.alert_webhook))
            except WebhookError as e:
                log.warning("gpu-kpi: no alerts to the webhook: %s", e)
        self._open_gpus()
        self._open_store()
        self._active = True
        self.counts.interrupt()
        if self._gather is None:
            self._next_log = self._now() + self.settings.log_every_s
        else:
            # ranks log on the framework's step cadence only: a time cadence would misalign
            # the collectives
            self._next_log = float("inf")
        record = self._build_record("running")
        self._submit_run(record)
        self.sinks.start(record)

    def _open_gpus(self) -> None:
        try:
            if isinstance(self._backend_arg, GpuBackend):
                backend = self._backend_arg
            else:
                backend = open_backend(self._backend_arg or self.settings.gpu)
            self.sampler = Sampler.from_settings(
                backend,
                self.settings,
                run_id=self.id,
                clock=self._wall,
                monotonic=self._mono if self._mono is not self._wall else None,
                threaded=self._threaded,
                on_minute=self._on_minute,
                on_alert=self._on_alert,
                on_idle=self._on_idle,
            )
            self.gpus = self.sampler.start()
            self.gpu_source = backend.name
        except BackendError as e:
            self.sampler = None
            log.warning(
                "gpu-kpi: no GPU metrics for this run (%s); the run is recorded with "
                "GPU data 'none', never as idle",
                e,
            )
            return
        model = self.gpus[0].name if self.gpus else ""
        self.price = price_for(
            model, self.spec.price_per_gpu_hour, self.settings.prices, owned=self.settings.owned
        )
        self.peak = denominator(model, self.spec.dtype, dtype_from=self.spec.dtype_from)
        self._peak_mhz = peak_clock_mhz(model)
        if self.peak.why_none and self.peak.why_none.startswith("no peak for dtype"):
            log.warning("gpu-kpi: no MFU: %s", self.peak.why_none)

    @property
    def peak_tflops(self) -> float | None:
        """One GPU's dense peak for the run's dtype (TF/s), for MFU; None when unknown."""
        return self.peak.tflops if self.peak is not None else None

    def _open_store(self) -> None:
        if self._store_arg is False:
            return
        from tracker.store.writer import StoreWriter

        url = self._store_arg if isinstance(self._store_arg, str) else self.settings.store
        # the writer spools for this store while it is away
        self._writer = StoreWriter(url)

    def finish(self, status: str = "finished", *, collective: bool = True) -> RunRecord | None:
        """End the run: stop sampling, compute the summary and verdict, and write the final
        record to the store and the sinks (and print the summary, on global rank 0).

        With several ranks every rank must call it (one last all-gather of each rank's totals),
        unless ``collective`` is False. A second call returns the same record.

        Args:
            status: The run's final status: ``"finished"``, or ``"failed"`` after an exception
                (``"crashed"`` is for runs that never got here, marked by the reports).
            collective: Gather every rank's totals once more. False after an exception, when
                other ranks may never get here: rank 0 then counts the others as of the last log
                step.

        Returns:
            The final run record; None when the run never started or its record could not be
            built.

        Raises:
            Nothing: a failure costs one warning and the figures it touched.
        """
        if not self._active:
            return self.record
        self._active = False
        self.counts.flush()
        try:  # a failure here costs the latest figures, not the record
            if self.sampler is not None:
                self.sampler.stop()
            if self._gather is not None and collective:
                self._gather_final_figures()
        except Exception as e:
            self._warn_once("stop", "gpu-kpi: stopping failed: %s: %s", type(e).__name__, e)
        try:
            record = self._build_record(status)
            self.record = record
            self._submit_run(record)

            def summary_metrics() -> dict[str, float]:
                """The whole run's metrics and the record's, asked for by sinks that log them."""
                return {**self.metrics(run=True), **record_metrics(record)}

            self.sinks.summary(record, summary_metrics)
        except Exception as e:
            self._warn_once(
                "finish", "gpu-kpi: writing the run's record failed: %s: %s", type(e).__name__, e
            )
        finally:
            if self._writer is not None:
                self._writer.close()
            self.sinks.close()
            if self.rank == 0 and self.settings.print_summary and self.record is not None:
                where = None
                if self._writer is not None:
                    where = self._writer.where(self.id)
                print_summary(self.record, where)
        return self.record

    def _gather_final_figures(self) -> None:
        """Every rank's totals, once more (one all-gather), for rank 0's record."""
        assert self._gather is not None
        vector = ranks.to_vector(self._figures(), ranks.RECORD_KEYS)
        gathered = self._gather(vector)
        self._peer_figures = [ranks.from_vector(v, ranks.RECORD_KEYS) for v in gathered]

    # -- the hot path -----------------------------------------------------------------------
    def interrupt(self) -> None:
        """Leave the time until the next :meth:`step` out of step-time and data-wait figures.

        Call it when that time is not training: validation, a checkpoint save, an epoch
        boundary. The next step still counts its samples, tokens and FLOPs.
        """
        self.counts.interrupt()

    def data_ready(self) -> None:
        """Mark that the next batch is in hand: the time since the last :meth:`step` was spent
        waiting for input (data wait). :meth:`iterate` calls it for you."""
        self.counts.ready_at = self._now()

    def iterate(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield the batches of ``loader``, timing how long each took to arrive.

        Each batch's samples are counted from the leading dimension of its first tensor (a
        shape, never a read from the GPU) for the next :meth:`step` given no count; several
        batches before one step (gradient accumulation) add up. A batch whose size cannot be
        read is not counted and breaks nothing.

        Args:
            loader: Any iterable of batches: a ``DataLoader``, a list, a generator.

        Yields:
            The loader's batches, unchanged.
        """
        for batch in loader:
            self.counts.ready(self._now())
            # a shape that is no number, a nested tensor: not counted, never raised
            with contextlib.suppress(Exception):
                size = infer_batch_size(batch)
                if size is not None:
                    self._inferred = (self._inferred or 0) + int(size)
            yield batch

    def step(
        self, samples: int | None = None, tokens: int | None = None, flops: float | None = None
    ) -> None:
        """Mark the end of a training step. Reads a clock and adds a few numbers: it never
        touches the GPU, and logs (on the plain-loop cadence, ``log_every_s``) only when due.

        A count that is not a finite number >= 0 (NaN, inf, a negative, a string, a tensor) is
        dropped with one warning per run.

        Args:
            samples: Samples processed in the step by this process (all its GPUs); None: the
                samples of the batches :meth:`iterate` gave since the last step (or unknown).
            tokens: Tokens processed in the step by this process; None: not counted.
            flops: Model FLOPs of the step on this process (forward and backward); None: the
                session's ``flops_per_step``.
        """
        t = self._now()
        if samples is None:
            samples = self._inferred
        self._inferred = None
        counts = self.counts
        step_flops = self.flops_per_step if flops is None else flops
        # most steps are held: one append (RunSteps.tick); the others are checked one by one
        if not counts.tick(t, samples, tokens, step_flops):
            bad = counts.step(
                t,
                warmup_steps=counts.warmup_steps,
                samples=samples,
                tokens=tokens,
                flops=flops,
                flops_per_step=self.flops_per_step,
            )
            self._count(bad)
        if t >= self._next_log:
            self._next_log = t + self.settings.log_every_s
            self.log_now()

    def add_flops(self, flops: float, steps: int) -> None:
        """Credit model FLOPs known only afterwards (the HF Trainer's ``total_flos``).

        They are spread pro rata over the measured steps among the last ``steps``, so that
        FLOP/s divides FLOPs and time of the same steps.

        Args:
            flops: Model FLOPs of the last ``steps`` steps on this process.
            steps: How many steps they cover.
        """
        self._count(self.counts.add_flops(flops, steps))

    def _count(self, bad: list[str]) -> None:
        if bad:  # one warning per run, not one per step
            self._warn_once(
                "count", "gpu-kpi: not counting %s (nor later bad counts)", ", ".join(bad)
            )

    def log_now(self, step: int | None = None) -> dict[str, float]:
        """Compute the metrics of the window since the last log and send them to the sinks.

        With ``world_size > 1`` every rank must call this at the same training step: it runs
        one small all-gather, and the metrics are combined over ranks (mean, min, max, the
        slowest rank). The time it takes is left out of the next step's figures.

        Args:
            step: The step number the sinks log at (the framework's, so that the points line up
                with the loss); None: the session's step count.

        Returns:
            The metrics (:data:`tracker.metrics.METRICS` keys) on global rank 0; an empty dict
            on other ranks, and when computing them failed.

        Raises:
            Nothing: a failure costs one warning.
        """
        t0 = self._now()
        try:
            metrics = self.metrics()
            if self._gather is not None:
                metrics = self._gather_metrics(metrics)
            if self.rank == 0:
                if step is None:
                    step = self.steps
                self.sinks.log_metrics(metrics, step)
            return metrics
        except Exception as e:
            self._warn_once("log", "gpu-kpi: computing metrics failed: %s: %s", type(e).__name__, e)
            return {}
        finally:
            # our logging is neither the last step nor waiting for input: the next step starts after
            self.counts.pause(t0, self._now())

    def _gather_metrics(self, local: dict[str, float]) -> dict[str, float]:
        assert self._gather is not None
        counts = {
            "_gpus": float(len(self.gpus)),
            "_samples": float(self.counts.samples),
            "_tokens": float(self.counts.tokens),
        }
        gathered = self._gather(ranks.log_vector(local, counts, self._figures()))
        metrics, self._peer_figures = ranks.split_log_vectors(gathered)
        if self.rank != 0:
            return {}
        return ranks.combine_metrics(metrics)

    # -- figures ----------------------------------------------------------------------------
    def metrics(self, *, reset: bool = True, run: bool = False) -> dict[str, float]:
        """This process's metrics, by :data:`tracker.metrics.METRICS` name (units in the names:
        ``gpu/util_pct`` in %, ``perf/step_time_ms`` in ms, ``cost/usd`` in USD…).

        Args:
            reset: Start a new window after this one (a log step does); False: peek.
            run: Over the whole run, for a summary (no window is taken); else over the window
                since the last call.

        Returns:
            The metrics that could be computed; a figure without its data is left out rather
            than given as zero.
        """
        if run:
            window = self.counts.total
        elif reset:
            window = self.counts.take_window()
        else:
            window = self.counts.window
        out: dict[str, float] = {}
        sampler = self.sampler
        if sampler is not None:
            if run:
                gpu = sampler.run
            elif reset:
                gpu = sampler.take_window()
            else:
                gpu = sampler.window
            per_gpu = self.gpus if self.spec.per_gpu else ()
            out.update(figures.gpu_metrics(gpu, sampler.last, per_gpu, run=run))
        usd_per_gpu_hour = self.price.usd_per_gpu_hour if self.price else None
        out.update(
            figures.window_metrics(
                window,
                self._figures(),
                peak=self.peak,
                gpu_count=sum(self._shares()),
                world_size=self.world_size,
                usd_per_gpu_hour=usd_per_gpu_hour,
                co2e_kg_per_kwh=self.co2e_kg_per_kwh,
            )
        )
        return out

    def _figures(self) -> dict[str, float | None]:
        """This process's cumulative figures since the start (:data:`tracker.ranks.RECORD_KEYS`)."""
        duration_s = self._elapsed()
        sampler = self.sampler
        stats: list[Any] = []
        idle: list[tuple[float, float]] = []
        if sampler is not None:
            stats = list(sampler.run.values())
            idle = sampler.idle_of_run()
        return figures.run_figures(
            duration_s=duration_s,
            gpu_count=len(self.gpus),
            stats=stats,
            idle=idle,
            usd_per_gpu_hour=self.price.usd_per_gpu_hour if self.price else None,
            thresholds=self.settings.thresholds,
            total=self.counts.total,
            steps=self.steps,
            samples=self.counts.samples,
            tokens=self.counts.tokens,
            interval_s=self.settings.interval_s,
            shares=self._shares(),
            peak_mhz=self._peak_mhz,
        )

    def _shares(self) -> list[float]:
        """The share of a physical GPU each GPU held so far (:meth:`Sampler.held_shares`)."""
        if self.sampler is None:
            return [1.0] * len(self.gpus)
        return self.sampler.held_shares()

    def _build_record(self, status: str) -> RunRecord:
        """The run record: this process's figures, or on rank 0 of a multi-rank run, every
        rank's (the others' as of the last gather). Never raises for its figures: those that
        cannot be computed, or are not finite numbers >= 0, are recorded as unknown."""
        now = self._stamp()
        try:
            fields = self._record_fields()
        except Exception as e:
            self._warn_once(
                "figures", "gpu-kpi: no figures for the run: %s: %s", type(e).__name__, e
            )
            fields = {"gpu_count": len(self.gpus)}
        spec, price = self.spec, self.price
        stamp = datetime.fromtimestamp(now, UTC)
        model = self.gpus[0].name if self.gpus else None
        gpu_model = None
        if model:
            gpu_model = canonical_gpu(model) or model_of_mig(model)
        record, bad = checked_record(
            RunRecord(
                id=self.id,
                name=self.name or self.id,
                project=spec.project,
                team=spec.team,
                user=self.user or "",
                host=_ask(socket.gethostname),
                tags=spec.tags,
                framework=spec.framework,
                started_at=self._started_at,
                status=status,
                ended_at=None if status == "running" else stamp,
                heartbeat_at=stamp,
                gpu_source=self.gpu_source,
                gpu_model=gpu_model,
                nodes=self.nodes,
                price_per_gpu_hour=price.usd_per_gpu_hour if price else None,
                price_source=price.source if price else None,
                steps=self.steps,
                links=self.links,
                resumed_from_step=self.resumed_from_step or None,
                mig_profile=profiles(g.mig for g in self.gpus),
                gpu_split=split_of(self.sampler.run.values() if self.sampler is not None else ()),
                **fields,
            )
        )
        if bad:
            self._warn_once(
                "bad",
                "gpu-kpi: recording %s as unknown or as text (not finite, < 0, or not text)",
                ", ".join(bad),
            )
        return record

    def _record_fields(self) -> dict[str, Any]:
        """The record's figures (spend, waste, utilization, throughput, MFU, verdict…) so far,
        combined over ranks on rank 0 of a multi-rank run."""
        fig = self._figures()
        spread = None
        if self.world_size > 1 and self.rank == 0 and self._peer_figures:
            fig = ranks.combine_records([fig, *self._peer_figures[1:]])
            spread = fig["rank_spread_pct"]
        finite = {k: _finite_or_none(v) for k, v in fig.items()}
        return figures.record_fields(
            finite,
            duration_s=self._elapsed(),
            peak=self.peak,
            world_size=self.world_size,
            rank_spread_pct=spread,
            thresholds=self.settings.thresholds,
            device=self.spec.device,
        )

    # -- background callbacks ---------------------------------------------------------------
    def _submit_run(self, record: RunRecord) -> None:
        if self._writer is not None and self.rank == 0:
            self._writer.submit_run(record)

    def _on_minute(self, rows: list[MinuteSample]) -> None:
        """On the sampler thread: the minute's rows and a heartbeat of the summary so far."""
        if self._writer is None:
            return
        self._writer.submit_samples(rows)
        if self._active:
            self._submit_run(self._build_record("running"))

    def _on_alert(self, text: str) -> None:
        self.sinks.alert("Low GPU utilization", f"run {self.name}: {text}")

    def _on_idle(self, gpus: list[str]) -> None:
        price = self.price.usd_per_gpu_hour if self.price else None
        text = idle_alert(
            self.name or self.id, len(gpus), len(self.gpus), self.settings.thresholds, price
        )
        self.sinks.alert("GPUs idle", text)


_SPEC_FIELDS = frozenset(RunSpec.__dataclass_fields__) - {"id"}
_SETTING_ARGS = ("interval_s", "log_every_s", "warmup_steps", "print_summary")


def track(
    *,
    run_id: str | None = None,
    tags: Iterable[str] = (),
    links: Mapping[str, str] | None = None,
    rank: int = 0,
    world_size: int = 1,
    nodes: int = 1,
    gather: Callable[[list[float]], list[list[float]]] | None = None,
    **kwargs: Any,
) -> Session:
    """A tracking session for a plain training loop, to use as ``with track(...) as run:``.

    Nothing starts here: entering the ``with`` block (or :meth:`Session.start`) opens the GPUs
    and the store; leaving it writes the final record (status ``failed`` if the block raised).

    Args:
        run_id: The run's id, the store's key; None: a new random hex id.
        tags: Free-form labels for the run (``["ablation", "bf16"]``).
        links: Where else the run is seen, ``{"wandb": URL, "tensorboard": DIR}``.
        rank: This process's global rank, for multi-GPU runs (0: the one that logs and writes
            the run record).
        world_size: The number of ranks.
        nodes: The number of machines the ranks run on.
        gather: The all-gather of a list of floats across ranks (one list per rank), called at
            log steps and once at the end, never per step; needed when ``world_size > 1``.
        **kwargs: By name, any of:

            - what the run is (:class:`tracker.record.RunSpec`): ``name`` (None:
              ``<project>-YYYYMMDD-HHMMSS``), ``project``, ``team``, ``user`` (None: the login
              name), ``framework`` (default ``"plain"``), ``flops_per_step`` (model FLOPs of
              one step on this process, for MFU), ``dtype`` (``"bf16"``, ``"fp32"``…: the
              GPU peak MFU is measured against), ``price_per_gpu_hour`` (USD per GPU-hour;
              None: the price table's for the GPU model), ``per_gpu`` (also log
              ``gpu/<i>/…`` keys), ``resumed_from_step`` (the global step a loop resumed
              at from a checkpoint: the report counts the steps run twice);
            - settings over the config file's: ``interval_s`` (GPU sampling interval, seconds;
              default 1), ``log_every_s`` (live metrics every so many seconds; default 30),
              ``warmup_steps`` (first steps left out of step-time and throughput figures;
              default 3), ``print_summary`` (print the summary at the end; default True);
            - the wiring of :class:`Session`: ``settings``, ``config``, ``overrides``,
              ``backend``, ``store``, ``sinks``, ``log_to_python``, ``clock``, ``threaded``.

    Returns:
        The session, not started yet.

    Raises:
        TypeError: An argument that is none of the above.

    Example:
        A loop that counts samples from its batches and logs to W&B::

            from tracker import track
            from tracker.wandb import WandbSink

            with track(project="llm", team="nlp", flops_per_step=6 * n_params * tokens,
                       dtype="bf16", sinks=[WandbSink()]) as run:
                for batch in run.iterate(loader):
                    loss = train_step(batch)
                    run.step(tokens=batch["input_ids"].numel())
            print(run.record.verdict, run.record.cost_usd)
    """
    spec_fields = {name: kwargs.pop(name) for name in list(kwargs) if name in _SPEC_FIELDS}
    spec = RunSpec(
        id=run_id or uuidlib.uuid4().hex,
        tags=tuple(tags),
        links=dict(links or {}),
        **spec_fields,
    )
    overrides = {name: kwargs.pop(name) for name in _SETTING_ARGS if name in kwargs}
    placement = Placement(rank=rank, world_size=world_size, nodes=nodes, gather=gather)
    return Session(spec, overrides=overrides, placement=placement, **kwargs)


def _finite_or_none(value: float | None) -> float | None:
    """``value``, or None where it is not a finite number (NaN, inf): recorded as unknown."""
    if value is None or math.isfinite(value):
        return value
    return None


def _scheduler_links() -> dict[str, str]:
    """The run's allocation (:func:`tracker.scheduler.scheduler_links`); none when it cannot
    be read: the tracker never fails a run for it."""
    with contextlib.suppress(Exception):
        return scheduler_links(os.environ)
    return {}


def _ask(who: Callable[[], str]) -> str:
    """The login or host name; "" when the system cannot say."""
    with contextlib.suppress(Exception):
        return who()
    return ""
