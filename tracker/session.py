"""The framework-free tracking session: the plain-loop API, and what the callbacks adapt.

```python
from tracker import track

with track(project="llm", name="baseline", team="nlp", flops_per_step=6 * n_params * tokens,
           dtype="bf16") as run:
    for batch in run.iterate(loader):       # times the wait for each batch
        loss = train_step(batch)
        run.step(samples=len(batch), tokens=batch.numel())
print(run.record.verdict, run.record.cost_usd)
```

:meth:`Session.step` only reads a clock and adds a few numbers: it never touches the GPU. GPU
sampling runs on its own thread; store writes on another. Nothing here makes training fail: an
error inside the tracker costs a warning and turns the failing part off.
"""

from __future__ import annotations

import getpass
import logging
import socket
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from tracker import ranks
from tracker.backend import BackendError, GpuBackend, GpuInfo, open_backend
from tracker.config import ConfigError, Settings, load_settings
from tracker.diagnosis import Evidence, Thresholds, diagnose
from tracker.metrics import per_gpu_key
from tracker.peaks import mfu, peak_tflops
from tracker.prices import Price, PriceTable, UnknownGpu, canonical_gpu
from tracker.record import MinuteSample, RunRecord
from tracker.sampler import AlertRule, GpuStats, Sampler
from tracker.sinks import LoggingSink, Sink, SinkSet
from tracker.units import j_to_kwh, s_to_hours

log = logging.getLogger("gpu_kpi")


class _Steps:
    """Step counters over a span (the run, or the current log window). Warm-up excluded."""

    __slots__ = ("flops", "samples", "steps", "time_s", "tokens", "wait_s", "waited")

    def __init__(self) -> None:
        self.steps = 0
        self.time_s = 0.0
        self.wait_s = 0.0
        self.waited = 0
        self.samples = 0
        self.tokens = 0
        self.flops = 0.0

    def add(self, dt: float, wait: float | None, samples: int | None, tokens: int | None,
            flops: float | None) -> None:
        self.steps += 1
        self.time_s += dt
        if wait is not None:
            self.wait_s += wait
            self.waited += 1
        if samples:
            self.samples += samples
        if tokens:
            self.tokens += tokens
        if flops:
            self.flops += flops

    def rate(self, total: float) -> float | None:
        return total / self.time_s if total and self.time_s > 0 else None

    @property
    def data_wait_pct(self) -> float | None:
        if not self.waited or self.time_s <= 0:
            return None
        return min(100.0, 100.0 * self.wait_s / self.time_s)

    @property
    def step_time_ms(self) -> float | None:
        return 1000.0 * self.time_s / self.steps if self.steps else None


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _weighted_util(stats: Iterable[GpuStats], field: str = "util_pct") -> float | None:
    """GPU-time-weighted mean over GPUs (not a mean of means); with no time covered yet, the
    mean of the latest readings."""
    tws = [s.tw[field] for s in stats]
    seconds = sum(tw.seconds for tw in tws)
    if seconds > 0:
        return sum(tw.total for tw in tws) / seconds
    return _mean(tw.last for tw in tws)


class Session:
    """One tracked training run. Use as a context manager (see :func:`track`)."""

    def __init__(
        self,
        *,
        name: str | None = None,
        project: str = "",
        team: str = "",
        user: str | None = None,
        tags: Sequence[str] = (),
        framework: str = "plain",
        backend: str | GpuBackend | None = None,
        store: str | bool | None = None,
        config: str | None = None,
        interval_s: float | None = None,
        log_every_s: float | None = None,
        warmup_steps: int | None = None,
        flops_per_step: float | None = None,
        dtype: str | None = None,
        price_per_gpu_hour: float | None = None,
        sinks: Sequence[Sink] = (),
        log_to_python: bool = True,
        per_gpu: bool = False,
        clock: Callable[[], float] | None = None,
        threaded: bool = True,
        run_id: str | None = None,
        links: Mapping[str, str] | None = None,
        settings: Settings | None = None,
        rank: int = 0,
        world_size: int = 1,
        nodes: int = 1,
        gather: Callable[[list[float]], list[list[float]]] | None = None,
    ) -> None:
        self.id = run_id or uuidlib.uuid4().hex
        self.name = name
        self.project = project
        self.team = team
        self.user = user
        self.tags = tuple(tags)
        self.framework = framework
        self.links = dict(links or {})
        self.flops_per_step = flops_per_step
        self.dtype = dtype
        self.per_gpu = per_gpu
        self._backend_arg = backend
        self._store_arg = store
        self._config = config
        self._overrides = {"interval_s": interval_s, "log_every_s": log_every_s,
                           "warmup_steps": warmup_steps}
        self._settings = settings
        self._price_override = price_per_gpu_hour
        self._wall = clock or time.time
        self._now = clock or time.perf_counter
        self._threaded = threaded
        self.rank = rank
        self.world_size = world_size
        self.nodes = nodes
        self._gather = gather if world_size > 1 else None
        self._peer_figures: list[dict[str, float | None]] = []
        # only global rank 0 talks to sinks and writes the run record; every rank writes the
        # minutes of its own GPUs
        self.sinks = SinkSet([*sinks, *([LoggingSink()] if log_to_python else [])]
                             if rank == 0 else [])
        self.settings = Settings()
        self.gpus: list[GpuInfo] = []
        self.gpu_source = "none"
        self.sampler: Sampler | None = None
        self.price: Price | None = None
        self.peak_tflops: float | None = None
        self.record: RunRecord | None = None
        self._writer: Any = None
        self._started_wall = 0.0
        self._started_at = datetime.now(UTC)
        self._total = _Steps()
        self._window = _Steps()
        self.steps = 0
        self.samples = 0
        self.tokens = 0
        self._last_end: float | None = None
        self._ready: float | None = None
        self._measured_since_flops = 0
        self._next_log = float("inf")
        self._active = False
        self._warned: set[str] = set()

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
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
            self._warn_once("start", "gpu-kpi: tracking is off for this run: %s: %s",
                            type(e).__name__, e)
        return self

    def _start(self) -> None:
        try:
            self.settings = self._settings or load_settings(self._config)
        except ConfigError as e:
            log.warning("gpu-kpi: ignoring the config (%s); using defaults", e)
            self.settings = Settings()
        self.settings = self.settings.replace(**self._overrides)
        s = self.settings
        self.user = self.user if self.user is not None else _user()
        self._started_wall = self._wall()
        self._started_at = datetime.fromtimestamp(self._started_wall, UTC)
        self.name = self.name or f"{self.project or 'run'}-{self._started_at:%Y%m%d-%H%M%S}"
        self._open_gpus()
        self._open_store()
        self._active = True
        self._last_end = None
        # a time cadence would put ranks into a collective at different steps: ranks log on the
        # framework's step cadence only
        self._next_log = self._now() + s.log_every_s if self._gather is None else float("inf")
        record = self._build_record("running")
        self._submit_run(record)
        self.sinks.start(record)

    def _open_gpus(self) -> None:
        s = self.settings
        try:
            backend = (self._backend_arg if isinstance(self._backend_arg, GpuBackend)
                       else open_backend(self._backend_arg or s.gpu))
            self.sampler = Sampler(
                backend, run_id=self.id, interval_s=s.interval_s, clock=self._wall,
                threaded=self._threaded, on_minute=self._on_minute,
                alert=AlertRule(under_pct=s.alert_util_pct, window_s=s.alert_window_s),
                on_alert=self._on_alert, idle_pct=s.idle_pct, idle_window_min=s.idle_window_min)
            self.gpus = self.sampler.start()
            self.gpu_source = backend.name
        except BackendError as e:
            self.sampler = None
            log.warning("gpu-kpi: no GPU metrics for this run (%s); the run is recorded with "
                        "GPU data 'none', never as idle", e)
            return
        model = self.gpus[0].name if self.gpus else ""
        if self._price_override is not None:
            self.price = Price(gpu=canonical_gpu(model) or model, as_of="run",
                               usd_per_gpu_hour=float(self._price_override), source="override")
        else:
            try:
                self.price = PriceTable(s.prices).lookup(model)
            except (UnknownGpu, ValueError) as e:
                log.warning("gpu-kpi: ignoring price overrides: %s", e)
                self.price = PriceTable().lookup(model)
            if self.price is None:
                log.warning("gpu-kpi: no price for GPU model %r: cost is not computed; set "
                            "price_per_gpu_hour= or [prices] in the config", model)
        if self.dtype:
            try:
                self.peak_tflops = peak_tflops(model, self.dtype)
            except ValueError as e:
                log.warning("gpu-kpi: no MFU: %s", e)

    def _open_store(self) -> None:
        if self._store_arg is False:
            return
        from tracker.writer import StoreWriter

        url = self._store_arg if isinstance(self._store_arg, str) else self.settings.store
        self._writer = StoreWriter(url)

    def finish(self, status: str = "finished", *, collective: bool = True) -> RunRecord | None:
        """Stop sampling, compute the summary and verdict, write it everywhere. Never raises.

        With several ranks every rank must call it (one last all-gather), unless
        ``collective=False`` (after an exception, when other ranks may never get here: rank 0
        then counts the others as of the last log step)."""
        if not self._active:
            return self.record
        self._active = False
        try:
            if self.sampler is not None:
                self.sampler.stop()
            if self._gather is not None and collective:  # every rank's totals, once more
                self._peer_figures = [ranks.from_vector(v, ranks.RECORD_KEYS)
                                      for v in self._gather(ranks.to_vector(
                                          self._figures(), ranks.RECORD_KEYS))]
            self.record = self._build_record(status)
            self._submit_run(self.record)
            self.sinks.summary(self.record)
        except Exception as e:
            self._warn_once("finish", "gpu-kpi: finishing the run's record failed: %s: %s",
                            type(e).__name__, e)
        finally:
            if self._writer is not None:
                self._writer.close()
            self.sinks.close()
        return self.record

    # -- the hot path -----------------------------------------------------------------------
    def interrupt(self) -> None:
        """The time until the next :meth:`step` is not training (validation, a checkpoint
        save, an epoch boundary): leave that step out of step-time and data-wait figures."""
        self._last_end = None

    def data_ready(self) -> None:
        """Call when the next batch is in hand: the time since the last :meth:`step` was spent
        waiting for input."""
        self._ready = self._now()

    def iterate(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield from ``loader``, timing how long each batch took to arrive."""
        for batch in loader:
            self._ready = self._now()
            yield batch

    def step(self, samples: int | None = None, tokens: int | None = None,
             flops: float | None = None) -> None:
        """Mark the end of a training step. ``samples``/``tokens`` processed in it (all ranks of
        this process), ``flops`` its model FLOPs (default: ``flops_per_step``)."""
        t = self._now()
        last, self._last_end = self._last_end, t
        ready, self._ready = self._ready, None
        try:
            self.steps += 1
            if samples:
                self.samples += samples
            if tokens:
                self.tokens += tokens
            if last is not None and self.steps > self.settings.warmup_steps:
                wait = (ready - last if ready > last else 0.0) if ready is not None else None
                f = flops if flops is not None else self.flops_per_step
                self._total.add(t - last, wait, samples, tokens, f)
                self._window.add(t - last, wait, samples, tokens, f)
                self._measured_since_flops += 1
        except Exception as e:  # e.g. a tensor or None-like count from user code
            self._warn_once("step", "gpu-kpi: step(samples=%r, tokens=%r) not counted: %s",
                            samples, tokens, e)
        if t >= self._next_log:
            self._next_log = t + self.settings.log_every_s
            self.log_now()

    def add_flops(self, flops: float, steps: int) -> None:
        """Model FLOPs of the last ``steps`` steps, known only afterwards (the HF Trainer's
        ``total_flos``): credited pro rata to the measured steps among them, so that FLOP/s
        divides FLOPs and time of the same steps."""
        measured, self._measured_since_flops = self._measured_since_flops, 0
        if steps <= 0 or flops <= 0:
            return
        credited = flops / steps * min(measured, steps)
        self._window.flops += credited
        self._total.flops += credited

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
            self._warn_once("log", "gpu-kpi: computing metrics failed: %s: %s",
                            type(e).__name__, e)
            return {}
        finally:
            # our own logging is neither the last step nor waiting for input: the next step's
            # clock starts after it
            if self._last_end is not None and self._last_end <= t0:
                self._last_end += self._now() - t0

    def _gather_metrics(self, local: dict[str, float]) -> dict[str, float]:
        assert self._gather is not None
        counts = {"_gpus": float(len(self.gpus)), "_samples": float(self.samples),
                  "_tokens": float(self.tokens)}
        vector = (ranks.to_vector({**local, **counts}, ranks.METRIC_KEYS + ranks.COUNT_KEYS)
                  + ranks.to_vector(self._figures(), ranks.RECORD_KEYS))
        split = len(ranks.METRIC_KEYS) + len(ranks.COUNT_KEYS)
        gathered = self._gather(vector)
        self._peer_figures = [ranks.from_vector(v[split:], ranks.RECORD_KEYS) for v in gathered]
        if self.rank != 0:
            return {}
        return ranks.combine_metrics([ranks.from_vector(v[:split], ranks.METRIC_KEYS
                                                        + ranks.COUNT_KEYS) for v in gathered])

    # -- figures ----------------------------------------------------------------------------
    def metrics(self, *, reset: bool = True) -> dict[str, float]:
        """This process's metrics (design names) for the window since the last call."""
        out: dict[str, float] = {}
        window, self._window = self._window, (_Steps() if reset else self._window)

        def put(key: str, value: float | None) -> None:
            if value is not None:
                out[key] = value

        if self.sampler is not None:
            gpu = self.sampler.take_window() if reset else self.sampler.window
            stats = list(gpu.values())
            put("gpu/util_pct", _weighted_util(stats))
            for f in ("sm_active_pct", "tensor_active_pct", "dram_active_pct", "sm_clock_mhz"):
                put(f"gpu/{f}", _mean(s.mean(f) for s in stats))
            mem = _mean(s.mean("mem_used_gib") for s in stats)
            total = _mean(s.mem_total_gib for s in stats)
            put("gpu/mem_used_gib", mem)
            put("gpu/mem_used_pct", 100.0 * mem / total if mem is not None and total else None)
            last = self.sampler.last
            powers = [r.power_w for r in last.values() if r.power_w is not None]
            put("gpu/power_w", sum(powers) if powers else None)
            put("gpu/temp_c", max((r.temp_c for r in last.values() if r.temp_c is not None),
                                  default=None))
            if self.per_gpu:
                for g in self.gpus:
                    if g.uuid in gpu:
                        put(per_gpu_key(g.index, "gpu/util_pct"), gpu[g.uuid].mean("util_pct"))
                        put(per_gpu_key(g.index, "gpu/mem_used_gib"),
                            gpu[g.uuid].mean("mem_used_gib"))
        put("perf/step_time_ms", window.step_time_ms)
        put("perf/data_wait_pct", window.data_wait_pct)
        put("perf/samples_per_s", window.rate(window.samples))
        put("perf/tokens_per_s", window.rate(window.tokens))
        flops_per_s = window.rate(window.flops)
        if flops_per_s is not None:
            put("perf/tflops", flops_per_s / 1e12)
            put("perf/mfu", mfu(flops_per_s, self.peak_tflops, len(self.gpus)))
        fig = self._figures()
        put("gpu/energy_kwh", fig["energy_kwh"])
        put("cost/usd", fig["cost_usd"])
        put("cost/usd_per_hour", self.price.usd_per_gpu_hour * len(self.gpus)
            if self.price and self.gpus else None)
        put("cost/waste_usd", fig["waste_usd"])
        cost = fig["cost_usd"]
        if cost is not None:
            put("cost/usd_per_1k_samples", 1000 * cost / self.samples if self.samples else None)
            put("cost/usd_per_1m_tokens", 1e6 * cost / self.tokens if self.tokens else None)
        return out

    def _figures(self) -> dict[str, float | None]:
        """This process's cumulative figures since the start (:data:`tracker.ranks.RECORD_KEYS`)."""
        hours = s_to_hours(max(self._wall() - self._started_wall, 0.0))
        n = len(self.gpus)
        stats = list(self.sampler.run.values()) if self.sampler is not None else []
        idle_gpu_s = sum(self.sampler.idle_seconds().values()) if self.sampler else 0.0
        price = self.price.usd_per_gpu_hour if self.price else None
        cost = waste = idle = None
        if price is not None and n:
            cost = n * hours * price
            target = self.settings.target_util_pct
            waste = sum(hours * price * max(0.0, 1.0 - u / target)
                        for s in stats if (u := s.mean("util_pct")) is not None)
            idle = s_to_hours(idle_gpu_s) * price
        total = self._total
        energies = [e for s in stats if (e := s.energy_j) is not None]
        return {
            "gpu_count": float(n), "gpu_hours": n * hours, "util_pct": _weighted_util(stats),
            "sm_active_pct": _weighted_util(stats, "sm_active_pct"),
            "mem_peak_gib": max((s.mem_peak_gib for s in stats if s.mem_peak_gib is not None),
                                default=None),
            "mem_total_gib": _mean(s.mem_total_gib for s in stats),
            "energy_kwh": j_to_kwh(sum(energies)) if energies else None,
            "steps": float(self.steps), "samples": float(self.samples),
            "tokens": float(self.tokens), "samples_per_s": total.rate(total.samples),
            "tokens_per_s": total.rate(total.tokens), "flops_per_s": total.rate(total.flops),
            "data_wait_pct": total.data_wait_pct, "step_time_ms": total.step_time_ms,
            "cost_usd": cost, "waste_usd": waste, "idle_usd": idle, "idle_gpu_s": idle_gpu_s,
        }

    def _build_record(self, status: str) -> RunRecord:
        """The run record: this process's figures, or on rank 0 of a multi-rank run, every
        rank's (the others' as of the last gather)."""
        now = self._wall()
        fig = self._figures()
        spread = None
        if self.world_size > 1 and self.rank == 0 and self._peer_figures:
            peers = list(self._peer_figures)
            peers[0] = fig
            fig = ranks.combine_records(peers)
            spread = fig["rank_spread_pct"]
        n = int(fig["gpu_count"] or 0)
        flops_per_s = fig["flops_per_s"]
        run_mfu = mfu(flops_per_s, self.peak_tflops, n) if flops_per_s else None
        mem_peak, mem_total = fig["mem_peak_gib"], fig["mem_total_gib"]
        duration_s = max(now - self._started_wall, 0.0)
        evidence = Evidence(
            util_pct=fig["util_pct"], duration_s=duration_s, gpu_count=n,
            idle_gpu_s=fig["idle_gpu_s"] or 0.0, sm_active_pct=fig["sm_active_pct"],
            mem_used_pct=100 * mem_peak / mem_total if mem_peak is not None and mem_total else None,
            data_wait_pct=fig["data_wait_pct"], step_time_ms=fig["step_time_ms"], mfu=run_mfu,
            rank_spread_pct=spread)
        s = self.settings
        verdict = diagnose(evidence, Thresholds(target_util_pct=s.target_util_pct,
                                                alert_util_pct=s.alert_util_pct,
                                                idle_util_pct=s.idle_pct,
                                                idle_window_s=60.0 * s.idle_window_min))
        model = self.gpus[0].name if self.gpus else None

        def count(key: str) -> int | None:
            return int(v) if (v := fig[key]) else None

        return RunRecord(
            id=self.id, name=self.name or self.id, project=self.project, team=self.team,
            user=self.user or "", host=_host(), tags=self.tags, framework=self.framework,
            started_at=self._started_at,
            ended_at=datetime.fromtimestamp(now, UTC) if status != "running" else None,
            heartbeat_at=datetime.fromtimestamp(now, UTC), status=status,
            gpu_source=self.gpu_source,
            gpu_model=(canonical_gpu(model) or model) if model else None, gpu_count=n,
            nodes=self.nodes,
            price_per_gpu_hour=self.price.usd_per_gpu_hour if self.price else None,
            price_source=self.price.source if self.price else None,
            gpu_hours=fig["gpu_hours"] or 0.0, util_pct=fig["util_pct"],
            sm_active_pct=fig["sm_active_pct"], mem_peak_gib=mem_peak, mem_total_gib=mem_total,
            energy_kwh=fig["energy_kwh"], steps=self.steps, samples=count("samples"),
            tokens=count("tokens"), samples_per_s=fig["samples_per_s"],
            tokens_per_s=fig["tokens_per_s"], mfu=run_mfu, data_wait_pct=fig["data_wait_pct"],
            cost_usd=fig["cost_usd"], waste_usd=fig["waste_usd"], idle_usd=fig["idle_usd"],
            verdict=verdict.verdict, advice=verdict.advice or None, links=self.links)

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


def track(**kwargs: Any) -> Session:
    """A tracking session for a plain training loop; ``with track(...) as run:``.

    Keyword arguments are :class:`Session`'s.
    """
    return Session(**kwargs)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return ""


def _host() -> str:
    try:
        return socket.gethostname()
    except Exception:
        return ""
