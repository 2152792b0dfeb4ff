"""The framework-free tracking session: the plain-loop API (:func:`track`; README, "A plain
training loop"), and what the callbacks adapt.

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
from tracker.peaks import peak_tflops
from tracker.prices import Price, canonical_gpu, price_for
from tracker.ranks import Placement
from tracker.record import MinuteSample, RunRecord, RunSpec, checked_record
from tracker.sampler import Sampler
from tracker.sinks import LoggingSink, Sink, SinkSet
from tracker.sinks.console import print_summary
from tracker.sinks.summary import record_metrics
from tracker.throughput import RunSteps, infer_batch_size

log = logging.getLogger("gpu_kpi")


class Session:
    """One tracked training run; a context manager (see :func:`track`). ``spec``: what the run
    is; ``settings`` (else the config file, then ``overrides``, :class:`Settings` fields): how
    it is measured; the rest is wiring: the GPU ``backend`` (a spec or an instance), the
    ``store`` (a URL; False: none), ``sinks``, the ``clock`` (tests), ``threaded`` (False: the
    tests drive the sampler), this process's ``placement`` among the ranks."""

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
        self.spec = spec = dataclasses.replace(
            spec,
            **{  # bad numbers: config.checked_argument
                k: checked_argument(k, getattr(spec, k))
                for k in ("price_per_gpu_hour", "flops_per_step")
            },
        )
        place = placement or Placement()
        self.id = spec.id
        self.name = spec.name
        self.user = spec.user
        self.links = dict(spec.links)
        self.flops_per_step = spec.flops_per_step
        self.rank, self.world_size = place.rank, place.world_size
        self.nodes: int = checked_argument("nodes", place.nodes) or 1
        self._gather = place.gather if place.world_size > 1 else None
        self._backend_arg = backend
        self._store_arg = store
        self._config = config
        self._overrides = {
            k: checked_argument(k, v) if k in SETTING_KEYS else v
            for k, v in (overrides or {}).items()
        }
        self._settings = settings
        self._wall, self._now = clock or time.time, clock or time.perf_counter
        self._threaded = threaded
        self._peer_figures: list[dict[str, float | None]] = []
        # only global rank 0 talks to sinks and writes the run record; every rank writes the
        # minutes of its own GPUs
        self.sinks = SinkSet(
            [*sinks, *([LoggingSink()] if log_to_python else [])] if self.rank == 0 else []
        )
        self.settings = Settings()
        self.gpus: list[GpuInfo] = []
        self.gpu_source = "none"
        self.sampler: Sampler | None = None
        self.price: Price | None = None
        self.co2e_kg_per_kwh: float | None = None  # per kWh of GPU energy, on this host
        self.peak_tflops: float | None = None
        self.record: RunRecord | None = None
        self._writer: Any = None
        self._started_wall = 0.0
        self._started_at = datetime.now(UTC)
        self.counts = RunSteps(self.settings.warmup_steps)
        self._next_log = float("inf")
        self._active = False
        self._warned: set[str] = set()
        self._inferred: int | None = None  # samples of the batches iterate() gave since a step

    def now(self) -> float:
        """The session's step clock, in seconds: monotonic, the injected ``clock`` in tests."""
        return self._now()

    @property
    def steps(self) -> int:
        """Steps so far, warm-up included (:attr:`counts` has samples and tokens too)."""
        return self.counts.steps

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> Session:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish("finished" if et is None else "failed")

    def _warn_once(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)

    def start(self) -> Session:
        """Open the GPU backend, start sampling, write the run to the store. Never raises."""
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
        self.settings = (self._settings or read_settings(self._config)).replace(**self._overrides)
        self.counts.warmup_steps = self.settings.warmup_steps
        self.co2e_kg_per_kwh = self.settings.carbon.co2e_kg(1.0, _ask(socket.gethostname))
        self.user = self.user if self.user is not None else _ask(getpass.getuser)
        self._started_wall = self._wall()
        self._started_at = datetime.fromtimestamp(self._started_wall, UTC)
        self.name = self.name or f"{self.spec.project or 'run'}-{self._started_at:%Y%m%d-%H%M%S}"
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
        # ranks log on the framework's step cadence only: a time cadence would misalign collectives
        self._next_log = (
            self._now() + self.settings.log_every_s if self._gather is None else float("inf")
        )
        record = self._build_record("running")
        self._submit_run(record)
        self.sinks.start(record)

    def _open_gpus(self) -> None:
        try:
            backend = (
                self._backend_arg
                if isinstance(self._backend_arg, GpuBackend)
                else open_backend(self._backend_arg or self.settings.gpu)
            )
            self.sampler = Sampler.from_settings(
                backend,
                self.settings,
                run_id=self.id,
                clock=self._wall,
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
        if self.spec.dtype:
            try:  # str(): a torch.dtype or Lightning's precision 32 names a dtype too
                self.peak_tflops = peak_tflops(model, str(self.spec.dtype))
            except ValueError as e:
                log.warning("gpu-kpi: no MFU: %s", e)

    def _open_store(self) -> None:
        if self._store_arg is not False:  # the writer spools for this store while it is away
            from tracker.store.writer import StoreWriter

            self._writer = StoreWriter(
                self._store_arg if isinstance(self._store_arg, str) else self.settings.store
            )

    def finish(self, status: str = "finished", *, collective: bool = True) -> RunRecord | None:
        """Stop sampling, compute the summary and verdict, write it everywhere. Never raises.

        With several ranks every rank must call it (one last all-gather), unless
        ``collective=False`` (after an exception, when other ranks may never get here: rank 0
        then counts the others as of the last log step)."""
        if not self._active:
            return self.record
        self._active = False
        self.counts.flush()
        try:  # a failure here costs the latest figures, not the record
            if self.sampler is not None:
                self.sampler.stop()
            if self._gather is not None and collective:  # every rank's totals, once more
                self._peer_figures = [
                    ranks.from_vector(v, ranks.RECORD_KEYS)
                    for v in self._gather(ranks.to_vector(self._figures(), ranks.RECORD_KEYS))
                ]
        except Exception as e:
            self._warn_once("stop", "gpu-kpi: stopping failed: %s: %s", type(e).__name__, e)
        try:
            self.record = self._build_record(status)
            self._submit_run(self.record)
            record = self.record
            self.sinks.summary(record, lambda: {**self.metrics(run=True), **record_metrics(record)})
        except Exception as e:
            self._warn_once(
                "finish", "gpu-kpi: writing the run's record failed: %s: %s", type(e).__name__, e
            )
        finally:
            if self._writer is not None:
                self._writer.close()
            self.sinks.close()
            if self.rank == 0 and self.settings.print_summary and self.record is not None:
                print_summary(self.record, self._writer.where(self.id) if self._writer else None)
        return self.record

    # -- the hot path -----------------------------------------------------------------------
    def interrupt(self) -> None:
        """The time until the next :meth:`step` is not training (validation, a checkpoint
        save, an epoch boundary): leave that step out of step-time and data-wait figures."""
        self.counts.interrupt()

    def data_ready(self) -> None:
        """The next batch is in hand: the time since the last :meth:`step` was spent waiting for it."""
        self.counts.ready_at = self._now()

    def iterate(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield from ``loader``, timing how long each batch took to arrive and counting its
        samples (the first tensor's leading dimension: a shape, never a GPU read) for the next
        :meth:`step` that is given none; several batches before a step (accumulation) add up."""
        for batch in loader:
            self.counts.ready(self._now())
            # a shape that is no number, a nested tensor: not counted, never raised
            with contextlib.suppress(Exception):
                if (n := infer_batch_size(batch)) is not None:
                    self._inferred = (self._inferred or 0) + int(n)
            yield batch

    def step(
        self, samples: int | None = None, tokens: int | None = None, flops: float | None = None
    ) -> None:
        """Mark the end of a training step: ``samples``/``tokens`` processed in it (all ranks of
        this process; default: the batches :meth:`iterate` gave since the last step), ``flops``
        its FLOPs (default ``flops_per_step``); a bad count is dropped."""
        t = self._now()
        samples, self._inferred = self._inferred if samples is None else samples, None
        c = self.counts  # most steps are held: one append (RunSteps.tick)
        if not c.tick(t, samples, tokens, self.flops_per_step if flops is None else flops) and (
            bad := c.step(
                t,
                warmup_steps=c.warmup_steps,
                samples=samples,
                tokens=tokens,
                flops=flops,
                flops_per_step=self.flops_per_step,
            )
        ):
            self._count(bad)
        if t >= self._next_log:
            self._next_log = t + self.settings.log_every_s
            self.log_now()

    def add_flops(self, flops: float, steps: int) -> None:
        """Model FLOPs of the last ``steps`` steps, known only afterwards (the HF Trainer's
        ``total_flos``): credited pro rata to the measured steps among them, so that FLOP/s
        divides FLOPs and time of the same steps."""
        self._count(self.counts.add_flops(flops, steps))

    def _count(self, bad: list[str]) -> None:
        if bad:  # one warning per run, not one per step
            self._warn_once(
                "count", "gpu-kpi: not counting %s (nor later bad counts)", ", ".join(bad)
            )

    def log_now(self, step: int | None = None) -> dict[str, float]:
        """Compute the metrics of the window since the last log (combined over ranks when there
        are several) and send them to the sinks; ``step`` defaults to the session's step count.

        With ``world_size > 1`` every rank must call this at the same training step: it runs one
        small all-gather. Only global rank 0 returns metrics and logs them."""
        t0 = self._now()
        try:
            metrics = self.metrics()
            if self._gather is not None:
                metrics = self._gather_metrics(metrics)
            if self.rank == 0:
                self.sinks.log_metrics(metrics, self.steps if step is None else step)
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
        return ranks.combine_metrics(metrics) if self.rank == 0 else {}

    # -- figures ----------------------------------------------------------------------------
    def metrics(self, *, reset: bool = True, run: bool = False) -> dict[str, float]:
        """This process's metrics (:mod:`tracker.metrics` names) for the window since the last
        call; ``run``: over the whole run, for a summary (no window taken)."""
        window = (
            self.counts.total
            if run
            else (self.counts.take_window() if reset else self.counts.window)
        )
        out: dict[str, float] = {}
        if self.sampler is not None:
            gpu = (
                self.sampler.run
                if run
                else (self.sampler.take_window() if reset else self.sampler.window)
            )
            out.update(
                figures.gpu_metrics(
                    gpu, self.sampler.last, self.gpus if self.spec.per_gpu else (), run=run
                )
            )
        out.update(
            figures.window_metrics(
                window,
                self._figures(),
                peak_tflops=self.peak_tflops,
                gpu_count=len(self.gpus),
                usd_per_gpu_hour=self.price.usd_per_gpu_hour if self.price else None,
                co2e_kg_per_kwh=self.co2e_kg_per_kwh,
            )
        )
        return out

    def _figures(self) -> dict[str, float | None]:
        """This process's cumulative figures since the start (:data:`tracker.ranks.RECORD_KEYS`)."""
        sampler = self.sampler
        return figures.run_figures(
            duration_s=self._wall() - self._started_wall,
            gpu_count=len(self.gpus),
            stats=list(sampler.run.values()) if sampler is not None else [],
            idle=sampler.idle_of_run() if sampler is not None else [],
            usd_per_gpu_hour=self.price.usd_per_gpu_hour if self.price else None,
            thresholds=self.settings.thresholds,
            total=self.counts.total,
            steps=self.steps,
            samples=self.counts.samples,
            tokens=self.counts.tokens,
        )

    def _build_record(self, status: str) -> RunRecord:
        """The run record: this process's figures, or on rank 0 of a multi-rank run, every
        rank's (the others' as of the last gather). Never raises for its figures: those that
        cannot be computed, or are not finite numbers >= 0, are recorded as unknown."""
        now = self._wall()
        try:
            fig, spread = self._figures(), None
            if self.world_size > 1 and self.rank == 0 and self._peer_figures:
                fig = ranks.combine_records([fig, *self._peer_figures[1:]])
                spread = fig["rank_spread_pct"]
            fields = figures.record_fields(
                {k: v if v is None or math.isfinite(v) else None for k, v in fig.items()},
                duration_s=max(now - self._started_wall, 0.0),
                peak_tflops=self.peak_tflops,
                rank_spread_pct=spread,
                thresholds=self.settings.thresholds,
            )
        except Exception as e:
            self._warn_once(
                "figures", "gpu-kpi: no figures for the run: %s: %s", type(e).__name__, e
            )
            fields = {"gpu_count": len(self.gpus)}
        model = self.gpus[0].name if self.gpus else None
        spec, price = self.spec, self.price
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
                ended_at=datetime.fromtimestamp(now, UTC) if status != "running" else None,
                heartbeat_at=datetime.fromtimestamp(now, UTC),
                gpu_source=self.gpu_source,
                gpu_model=(canonical_gpu(model) or model) if model else None,
                nodes=self.nodes,
                price_per_gpu_hour=price.usd_per_gpu_hour if price else None,
                price_source=price.source if price else None,
                steps=self.steps,
                links=self.links,
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
        self.sinks.alert(
            "GPUs idle",
            idle_alert(
                self.name or self.id, len(gpus), len(self.gpus), self.settings.thresholds, price
            ),
        )


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
    """A tracking session for a plain training loop; ``with track(...) as run:``. Keyword
    arguments: what the run is (:class:`tracker.record.RunSpec`'s fields, ``run_id`` its
    ``id``); :data:`_SETTING_ARGS` over the config file's; the wiring of :class:`Session`
    (``backend``, ``store``, ``sinks``…); for several ranks, :class:`tracker.ranks.Placement`'s."""
    spec = RunSpec(
        id=run_id or uuidlib.uuid4().hex,
        tags=tuple(tags),
        links=dict(links or {}),
        **{k: kwargs.pop(k) for k in list(kwargs) if k in _SPEC_FIELDS},
    )
    overrides = {k: kwargs.pop(k) for k in _SETTING_ARGS if k in kwargs}
    return Session(
        spec,
        overrides=overrides,
        placement=Placement(rank=rank, world_size=world_size, nodes=nodes, gather=gather),
        **kwargs,
    )


def _ask(who: Callable[[], str]) -> str:
    """The login or host name; "" when the system cannot say."""
    with contextlib.suppress(Exception):
        return who()
    return ""
