"""Runs of a W&B project through W&B's public API (``gpu-kpi import wandb ENTITY/PROJECT
--since --until``): each run's attributes, its ``wandb-metadata.json`` (the GPUs) and its
system-metrics stream (``system.gpu.N.gpu``…), mapped onto the same :class:`WandbLog` a local
``.wandb`` file gives, so both follow one set of rules (:mod:`reports.imports.wandb_runs`).

The API key is W&B's own (``WANDB_API_KEY`` or ``~/.netrc`` from ``wandb login``), never a
command-line argument. The runs are those *created* in ``[since, until)``. A run still
``running`` is left for a later import (counted and named). The system stream is asked for
whole (:data:`SYSTEM_SAMPLES` points); W&B may still sample a very long run's stream, and the
gap rule (3 × the median interval) then follows the longer interval.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reports.errors import ImportFailed
from reports.imports.wandb_log import WandbLog, number
from tracker.extras import install_hint
from tracker.units import LAST_EPOCH_S

SYSTEM_SAMPLES = 1_000_000
RUNNING = "still running: import it when it has ended"
UNREADABLE = "unreadable through the API"
_STATES = {
    "finished": 0,
    "failed": 1,
    "killed": 1,
    "crashed": None,
    "preempted": None,
    "preempting": None,
}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _gpus(meta: dict[str, Any]) -> dict[int, tuple[str, str, float | None]]:
    """GPU index → (name, UUID, memory GiB) from ``wandb-metadata.json``'s ``gpu_nvidia``
    (wandb-core writes protobuf JSON: camelCase, 64-bit numbers as strings)."""
    out: dict[int, tuple[str, str, float | None]] = {}
    for i, gpu in enumerate(meta.get("gpu_nvidia") or []):
        if not isinstance(gpu, dict):
            continue
        try:
            mem = int(gpu.get("memoryTotal") or gpu.get("memory_total") or 0) / 2**30 or None
        except (TypeError, ValueError):
            mem = None
        out[i] = (_text(gpu.get("name")), _text(gpu.get("uuid")), mem)
    return out


def api_log(run: Any) -> WandbLog:
    """One public-API ``Run`` as a :class:`WandbLog` (its ``url`` set, ``path`` the run's
    ``entity/project/id``)."""
    meta = run.metadata if isinstance(run.metadata, dict) else {}
    user = run.user if isinstance(run.user, str) else getattr(run.user, "username", "")
    log = WandbLog(
        Path(f"{run.entity}/{run.project}/{run.id}"),
        run_id=_text(run.id),
        entity=_text(run.entity),
        project=_text(run.project),
        name=_text(run.name),
        host=_text(meta.get("host")),
        user=_text(user) or _text(meta.get("username")),
        tags=[t for t in (run.tags or []) if isinstance(t, str)],
        gpu_type=_text(meta.get("gpu")),
        url=_text(run.url),
    )
    try:
        log.start = datetime.fromisoformat(_text(run.created_at).replace("Z", "+00:00")).timestamp()
    except ValueError:
        log.start = None
    log.config = {
        k: v.get("value") if isinstance(v, dict) and set(v) <= {"value", "desc"} else v
        for k, v in dict(run.config or {}).items()
    }
    log.summary = dict(getattr(run, "summary_metrics", None) or run.summary or {})
    log.gpus = _gpus(meta)
    for row in run.history(stream="system", pandas=False, samples=SYSTEM_SAMPLES):
        t = number(row.get("_timestamp"))
        if t is not None and not 0 <= t < LAST_EPOCH_S:  # a bad sample: left out, counted
            log.no_time.append(f"{log.url or log.path} (a system sample at {t:g} s since 1970)")
        elif t is not None:
            log.stats.append((t, {k.removeprefix("system."): v for k, v in row.items()}))
    log.stats.sort(key=lambda s: s[0])
    if isinstance(log.config.get("gpu_kpi/run_id"), str) and not any(
        k.startswith("gpu.") for _, items in log.stats for k in items
    ):
        log.history = list(run.scan_history())  # our own gpu/* points, where W&B kept none
    log.exit_code = _STATES.get(_text(run.state))
    return log


def api_runs(
    path: str, *, since: datetime, until: datetime, api: Any = None
) -> Iterator[tuple[str, WandbLog | str]]:
    """(name, log) of each run of ``path`` (``ENTITY/PROJECT``) created in ``[since, until)``;
    instead of a log, why not (:data:`RUNNING`, :data:`UNREADABLE`). An error listing the
    project is an :class:`ImportFailed` naming ``path``."""
    try:
        if api is None:
            import wandb

            api = wandb.Api(timeout=60)
        runs: Sequence[Any] = api.runs(
            path,
            filters={
                "createdAt": {
                    "$gte": since.astimezone(UTC).isoformat(),
                    "$lt": until.astimezone(UTC).isoformat(),
                }
            },
        )
        for run in runs:
            name = _text(run.name) or _text(run.id)
            if run.state == "running":
                yield name, RUNNING
                continue
            try:
                log = api_log(run)
            except Exception as e:  # one run the API gives oddly: that run, named, not all
                yield f"{name} ({type(e).__name__}: {str(e)[:100]})", UNREADABLE
                continue
            yield name, log
    except ImportFailed:
        raise
    except ImportError:
        raise ImportFailed(
            f"the W&B API needs the wandb package: {install_hint('wandb')}"
        ) from None
    except Exception as e:  # wandb's CommError, AuthenticationError, HTTP errors…
        raise ImportFailed(f"{path}: the W&B API failed ({type(e).__name__}: {e})") from None
