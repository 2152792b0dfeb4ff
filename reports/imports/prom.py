"""Runs from DCGM-exporter metrics in Prometheus (``gpu-kpi import prometheus URL --since
--until``): the path for fleets beyond one machine, with Prometheus (or Thanos, Mimir, any
server of the same HTTP API) as the engine and the run store as the store.

Each DCGM field (by its name before DCGM 4.6 and by 4.6's: :data:`FIELDS`, :data:`UTIL_RATIO`)
is read with one range query per chunk of :data:`CHUNK_POINTS` minutes
(Prometheus refuses more than 11,000 points per series, and a chunk keeps each answer small):
``avg_over_time(FIELD[60s])`` (``max_over_time`` for memory and the energy counter) at every
whole minute, so a point is the mean of the scrapes in the minute before it. The points of each
GPU play through the tracker's sampler as they arrive, chunk after chunk, as a live run's would:
a point covers the minute before it; after a gap longer than ``max_gap_s`` (default 3 minutes)
the next covers nothing.

A series' labels say whose the GPU was: :class:`LabelMap` (default: the run is the ``pod``,
else the ``hpc_job``; the team the ``namespace``). The minutes a GPU has samples but no run
label are **unallocated**: a run per GPU named ``unallocated HOST GPU N``, team
:data:`UNALLOCATED`, tagged ``unallocated``, so the report's team breakdown shows the fleet's
unallocated GPU-time and what it cost. A MIG instance (``GPU_I_ID``, ``GPU_I_PROFILE`` such as
``3g.40gb``) is a GPU of its own, counted as its share of the physical GPU (3 of 7 slices:
:mod:`tracker.shares`), its utilization DCGM's graphics-engine activity (NVML gives a MIG
instance none); the GPU's own series beside its instances' (dcgm-exporter sends both) is left
out, its time being the instances'. Where
kube-state-metrics is scraped too, a pod's run is its workload's (:data:`OWNERS`: its Job,
Deployment or JobSet), one run for all its pods. A GPU
several runs hold at the same minute (time-slicing: dcgm-exporter's ``--kubernetes-virtual-gpus``
copies its series per pod) is split, each minute evenly between its holders
(:func:`split_shared`), and their runs are tagged :data:`reports.imports.play.TIME_SLICED`.

A run's id hashes its run label values and the import's time range, so importing the same range
again replaces its runs with the same ones; import ranges that do not overlap (one a week) and a
job crossing their edge is a run per range. Nothing is written until every chunk is read: a
Prometheus that is down, refuses a query or answers something else is an
:class:`reports.errors.ImportFailed` naming the URL, and nothing is imported.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from reports.errors import ImportFailed
from reports.imports.nvsmi_minutes import of_rows
from reports.imports.play import (
    TIME_SLICED,
    Imported,
    Labels,
    Player,
    fixable,
    run_record,
    write_imported,
)
from reports.imports.play import progress as shown  # the parameter is named progress
from tracker.config import Settings
from tracker.gpu.base import GpuInfo, GpuReading
from tracker.record import MinuteSample, RunRecord
from tracker.scheduler import KUBERNETES_LINK, WORKLOAD_LINK
from tracker.shares import EVEN, MEASURED, mig_slice, time_sliced
from tracker.text import one_line
from tracker.units import LAST_EPOCH_S

SOURCE = "prometheus"
UNALLOCATED = "(unallocated)"
STEP_S = 60
CHUNK_POINTS = 360
"""Minutes per range query: 6 hours (Prometheus's limit is 11,000 points per series)."""
TOKEN_ENV = "GPU_KPI_PROMETHEUS_TOKEN"
"""A bearer token for the Prometheus API, if it needs one (never on the command line)."""
TIMEOUT_S = 120.0
"""Seconds one query may take, its whole answer read."""
RECEIVE_S = 30.0
"""Seconds one receive may wait (the connection, a block of the answer): a query's whole time is
:data:`TIMEOUT_S` and at most this more."""
MAX_ANSWER_BYTES = 64 << 20
"""The largest answer read (parsed, JSON takes several times its size in memory): a chunk whose
answer is larger is asked for again in halves."""
NO_MODEL = fixable("no modelName label: say the model with --gpu-model", "--gpu-model MODEL")

_OLD_THROTTLE = "throttle_ns_old"

FIELDS: dict[str, tuple[str, float, str, float, float]] = {
    # DCGM field → (reading field, scale to its unit, aggregation, lowest, highest after scaling)
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1.0, "avg", 0.0, 100.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_pct", 100.0, "avg", 0.0, 100.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_pct", 100.0, "avg", 0.0, 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_pct", 100.0, "avg", 0.0, 100.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_gib", 1 / 1024, "max", 0.0, 1e6),  # MiB
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0, "avg", 0.0, 1e5),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3, "max", 0.0, 1e18),  # mJ
    # with tensor activity, the observed FLOPs utilization (tracker.peaks.observed)
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0, "avg", 0.0, 1e5),  # MHz
    # DCGM 4.6's names of the same fields (dcgm_fields.h: the old names are aliases of the same
    # ids); an exporter exports whichever name its counters file lists, in the same unit
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": ("gr_engine_pct", 100.0, "avg", 0.0, 100.0),  # 1001
    "DCGM_FI_PROF_SM_UTIL_RATIO": ("sm_active_pct", 100.0, "avg", 0.0, 100.0),  # 1002
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": ("tensor_active_pct", 100.0, "avg", 0.0, 100.0),  # 1004
    "DCGM_FI_DEV_BOARD_POWER_WATTS": ("power_w", 1.0, "avg", 0.0, 1e5),  # 155
}
COUNTERS: dict[str, str] = {
    # DCGM's cumulative counters (dcgm_fields.h @ 4.6.0) → the reading field they go to, as a
    # running total (a reset, as after a driver reload, continued from where it was)
    "DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL": "sm_cycles_active",  # 1085, DCGM 4.6
    "DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL": "sm_cycles_elapsed",  # 1084
    # throttle time in ns, DCGM 4.2: power cap, thermal (software, hardware), power brake
    # (not sync boost: a group's clocks matched, not the machine holding them down)
    "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS": "throttle_ns",  # 1420
    "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS": "throttle_ns",  # 1422
    "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS": "throttle_ns",  # 1423
    "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS": "throttle_ns",  # 1424
    # the older violation counters (ns: "usec" in DCGM's header before 4.1 was a doc error),
    # read where none of the above is: 240 is the same NVML counter as 1420, never added to it
    "DCGM_FI_DEV_POWER_VIOLATION": _OLD_THROTTLE,  # 240
    "DCGM_FI_DEV_THERMAL_VIOLATION": _OLD_THROTTLE,  # 241
}
_COUNTER_TOP = 9.2e18
"""DCGM's blank values (``DCGM_INT64_BLANK`` = 2⁶³ − 16 and up, which old exporters let
through) and anything past them: no count."""
_UTIL = "DCGM_FI_DEV_GPU_UTIL"
UTIL_RATIO = "DCGM_FI_DEV_GPU_UTIL_RATIO"
"""DCGM 4.6's name of ``DCGM_FI_DEV_GPU_UTIL`` (id 203), whose unit depends on who exports it:
DCGM 4.6 fills it with NVML's integer percent despite the name, while dcgm-exporter 4.9
renames its default fields and turns utilization into a 0-1 ratio. Each GPU's series is read
in the unit its own values show, chunk by chunk (:func:`_util_ratio_scales`)."""


_WORKLOAD = ("pod", "namespace", "container")
"""The labels a Kubernetes scrape target carries that DCGM also sets for a GPU's workload."""

OWNERS: dict[str, tuple[str, tuple[str, ...]]] = {
    # kube-state-metrics' owner series → the kind they describe, the label naming the object
    "kube_pod_owner": ("Pod", ("pod",)),
    "kube_replicaset_owner": ("ReplicaSet", ("replicaset",)),
    "kube_job_owner": ("Job", ("job_name", "job")),  # job_name since kube-state-metrics 2
}
FOLLOWED = {"ReplicaSet": "Deployment", "Job": "JobSet"}
"""A pod's owner of these kinds is one step of a workload: its own owner of the kind given
names the run (a Deployment's pods are one run, not one per rollout; a JobSet's Jobs too)."""


@dataclass(frozen=True)
class LabelMap:
    """Which series labels say what: the first of ``run`` present names the run; ``team``,
    ``project`` and ``user`` name those (empty: not from a label)."""

    run: tuple[str, ...] = ("pod", "hpc_job")
    team: str = "namespace"
    project: str = ""
    user: str = ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is refused, not followed: the token must not travel to another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class _TooLarge(ImportFailed):
    """An answer over :data:`MAX_ANSWER_BYTES`: its chunk is asked for in halves."""


def _read(resp: Any, url: str, deadline: float) -> bytes:
    """The whole body by ``deadline`` and at most :data:`MAX_ANSWER_BYTES`: read as it comes
    (``read1``: one receive each), so a server that drips its answer meets the deadline."""
    body = bytearray()
    while chunk := resp.read1(1 << 20):
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise _TooLarge(f"{url}: an answer of over {MAX_ANSWER_BYTES:,} bytes")
        if time.monotonic() > deadline:
            raise ImportFailed(f"{url}: no whole answer in {TIMEOUT_S:.0f} s")
    return bytes(body)


def _get(url: str, params: dict[str, str], token: str | None) -> Any:
    """One API call's ``data``; an :class:`ImportFailed` naming ``url`` for anything else."""
    full = f"{url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    deadline = time.monotonic() + TIMEOUT_S
    try:
        request = urllib.request.Request(full, headers=headers)
        with _OPENER.open(request, timeout=RECEIVE_S) as resp:
            body = json.loads(_read(resp, url, deadline))
    except urllib.error.HTTPError as e:
        if 300 <= e.code < 400:
            where = e.headers.get("Location", "?")
            raise ImportFailed(
                f"{url}: Prometheus answered {e.code}, a redirect to "
                f"{where[:200]}: give that URL (redirects are not "
                "followed, so that the token stays with the server named)"
            ) from None
        try:
            said = json.loads(e.read(1 << 16)).get("error") or e.reason
        except (ValueError, AttributeError, OSError):
            said = e.reason
        raise ImportFailed(f"{url}: Prometheus answered {e.code}: {str(said)[:300]}") from None
    except (urllib.error.URLError, OSError) as e:
        why = e.reason if isinstance(e, urllib.error.URLError) else e
        raise ImportFailed(f"{url}: cannot reach Prometheus ({one_line(why, 200)})") from None
    except http.client.HTTPException as e:  # a bad status line, too many or too long headers…
        raise ImportFailed(
            f"{url}: not an HTTP answer Prometheus would give ({type(e).__name__}: "
            f"{one_line(e, 100)})"
        ) from None
    except RecursionError:
        raise ImportFailed(
            f"{url}: an answer nested too deeply: is this the Prometheus API?"
        ) from None
    except ValueError:
        raise ImportFailed(f"{url}: the answer is not JSON: is this the Prometheus API?") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        said = body.get("error") if isinstance(body, dict) else None
        raise ImportFailed(f"{url}: Prometheus refused the query: {str(said or body)[:200]}")
    data = body.get("data")
    if (
        not isinstance(data, dict)
        or data.get("resultType") != "matrix"
        or not isinstance(data.get("result"), list)
    ):
        raise ImportFailed(f"{url}: not a range query's answer: is this the Prometheus API?")
    return data["result"]


def _series(url: str, series: Any) -> tuple[dict[str, str], list[tuple[float, Any]]]:
    """A range query's series: its labels and its (time, value) points, checked."""
    try:
        labels = {str(k): str(v) for k, v in series["metric"].items() if k != "__name__"}
        points = [(float(t), v) for t, v in series["values"]]
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise ImportFailed(
            f"{url}: a series of unexpected shape in the answer ({type(e).__name__}: "
            f"{str(e)[:100]})"
        ) from None
    for t, _ in points:
        if not (math.isfinite(t) and 0 <= t < LAST_EPOCH_S):
            raise ImportFailed(f"{url}: a point at {t} s since 1970: no time")
    return labels, points


def _number(text: Any, scale: float, low: float, high: float) -> float | None:
    try:
        x = float(text) * scale
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and low <= x <= high else None


def halves(e: ImportFailed, first: float, last: float, what: str) -> list[tuple[float, float]]:
    """A chunk whose answer was too large (``e``) as its two halves of whole minutes, the later
    first (to be popped last).

    Raises:
        ImportFailed: The chunk is one minute: too many ``what`` for any chunk.
    """
    if last - first < STEP_S:
        raise ImportFailed(f"{e}, for one minute: too many {what}") from None
    middle = first + (last - first) // (2 * STEP_S) * STEP_S
    return [(middle + STEP_S, last), (first, middle)]


def chunks(
    since: float, until: float, step: int = STEP_S, points: int = CHUNK_POINTS
) -> Iterator[tuple[float, float]]:
    """(first, last) minute of each query: whole minutes from ``since`` to ``until``."""
    t = math.ceil(since / step) * step
    end = math.floor(until / step) * step
    while t <= end:
        last = min(end, t + (points - 1) * step)
        yield t, last
        t = last + step


@dataclass
class _Run:
    key: tuple[str, ...]
    run_id: str
    name: str
    labels: dict[str, str]
    players: dict[str, Player]
    infos: dict[str, GpuInfo]
    unallocated: bool
    links: dict[str, str]
    """The pod (``kubernetes``: ``NAMESPACE/POD``) or the workload (``kubernetes_workload``)
    it is, for the report's join with the pods' allocations."""


@dataclass
class Split:
    """What :func:`split_shared` did to an import's minute rows."""

    shared: dict[str, set[str]]
    """Run id → the GPUs it shared with other runs at some minute (time-sliced)."""
    measured: set[str]
    """The runs whose shares were measured (per-pod utilization) at some minute."""
    changed: set[str]
    """Every run whose rows were changed or dropped (its figures are its rows')."""


def split_shared(rows: list[MinuteSample], devices: set[str], idle: str = "even") -> Split:
    """Split each GPU-minute that several runs hold at once (a GPU time-sliced between pods:
    dcgm-exporter's ``--kubernetes-virtual-gpus`` gives each pod its series) between them.
    Rewrites ``rows`` in place.

    dcgm-exporter 4.5.3-4.8.2 and later (``--kubernetes-virtual-gpus``) give each pod's
    ``DCGM_FI_DEV_GPU_UTIL`` its own processes' SM utilization and keep the GPU's own series
    (no pod) beside them. A GPU whose own row (a run of ``devices``) stands beside its pods'
    rows in at least half of the minutes pods hold it is such a GPU (elsewhere the two meet
    only in the minute one ends and the other starts, split as before): its own row is the
    GPU's utilization, not a holder, and is left out; each pod holds its
    measured share (:func:`tracker.shares.time_sliced`: the busy time by its share of the pods'
    utilization, the idle time evenly, or by work with ``idle="work"``), at its own
    utilization over that share. Where no GPU row stands beside them (an older exporter copies
    the GPU's figures to each pod), the minute is split evenly, each row keeping the GPU's
    utilization. Covered seconds and energy are each row's share of them.

    Args:
        rows: Minute rows of every run of the import.
        devices: The runs of GPUs' own series (no pod: the import's unallocated runs).
        idle: How the idle time is split (:data:`tracker.shares.IDLE_SPLITS`).

    Returns:
        What was shared, measured and changed.
    """
    holders: dict[tuple[str, datetime], list[int]] = {}
    for i, row in enumerate(rows):
        if row.covered_s > 0:
            holders.setdefault((row.gpu, row.minute), []).append(i)
    pod_minutes: dict[str, int] = {}
    both_minutes: dict[str, int] = {}
    for (gpu, _), held in holders.items():
        kinds = {rows[i].run_id in devices for i in held}
        if False in kinds:
            pod_minutes[gpu] = pod_minutes.get(gpu, 0) + 1
            both_minutes[gpu] = both_minutes.get(gpu, 0) + (True in kinds)
    beside = {gpu for gpu, n in pod_minutes.items() if 2 * both_minutes[gpu] >= n}
    done = Split({}, set(), set())
    drop: set[int] = set()
    for (gpu, _), held in holders.items():
        if gpu in beside:
            pods = [i for i in held if rows[i].run_id not in devices]
            own = [i for i in held if rows[i].run_id in devices]
        else:
            pods, own = held, []
        if not pods or (not own and len({rows[i].run_id for i in pods}) < 2):
            continue  # held alone, or by nobody
        gpu_util = rows[own[0]].util_pct if own else None
        if own:
            drop.update(own)
            done.changed.update(rows[i].run_id for i in own)
        work = [rows[i].util_pct for i in pods]
        total = sum(w for w in work if w is not None)
        measured = bool(own) and gpu_util is not None and None not in work
        for i, w in zip(pods, work, strict=True):
            row = rows[i]
            if measured:
                share, util = time_sliced(
                    gpu_util, (w or 0.0) / total if total > 0 else 1 / len(pods), len(pods), idle
                )
                done.measured.add(row.run_id)
            else:
                share, util = 1 / len(pods), row.util_pct if gpu_util is None else gpu_util
            rows[i] = replace(
                row,
                covered_s=row.covered_s * share,
                util_pct=util,
                energy_kwh=None if row.energy_kwh is None else row.energy_kwh * share,
            )
            done.changed.add(row.run_id)
            if len(pods) > 1:
                done.shared.setdefault(row.run_id, set()).add(gpu)
    if drop:
        rows[:] = [row for i, row in enumerate(rows) if i not in drop]
    return done


class Owners:
    """Which controller owns which pod, ReplicaSet or Job, from kube-state-metrics' owner
    series (:data:`OWNERS`)."""

    def __init__(self) -> None:
        self.of: dict[tuple[str, str, str], tuple[str, str]] = {}
        """(namespace, kind, name) → its controller's (kind, name)."""

    def learn(self, series: list[dict[str, str]], kind: str, names: tuple[str, ...]) -> None:
        """Owner series (labels only) of objects of ``kind`` named by the first of ``names``
        present. Behind a scrape that did not honour its labels, the object's arrive as
        ``exported_*``.

        Args:
            series: The series' labels.
            kind: The kind they describe (``Pod``).
            names: The labels that may name the object (``job_name``, ``job``).
        """
        for metric in series:

            def label(k: str, m: dict[str, str] = metric) -> str:
                return m.get(f"exported_{k}") or m.get(k) or ""

            name = next((v for k in names if (v := label(k))), "")
            owner_kind, owner_name = metric.get("owner_kind", ""), metric.get("owner_name", "")
            if name and owner_name and owner_kind not in ("", "<none>"):
                self.of[(label("namespace"), kind, name)] = (owner_kind, owner_name)

    def workload(self, namespace: str, pod: str) -> tuple[str, str, str] | None:
        """The workload a pod belongs to, (namespace, kind, name): its controller, followed one
        step up where that is a ReplicaSet (→ its Deployment) or a Job (→ its JobSet). None: no
        owner known."""
        found = self.of.get((namespace, "Pod", pod))
        if found is None:
            return None
        kind, name = found
        above = self.of.get((namespace, kind, name))
        if above is not None and FOLLOWED.get(kind) == above[0]:
            kind, name = above
        return namespace, kind, name


def learn_owners(url: str, token: str | None, owners: Owners, first: float, last: float) -> None:
    """Into ``owners``: the controllers kube-state-metrics named from ``first`` to ``last``
    (nothing where it is not scraped).

    Args:
        url: The Prometheus base URL.
        token: Its bearer token, or None.
        owners: What is known so far.
        first: The span's first minute (epoch seconds).
        last: Its last minute.
    """
    for name, (kind, names) in OWNERS.items():
        query = f'max_over_time({name}{{owner_is_controller="true"}}[{last - first + STEP_S:.0f}s])'
        at = {"query": query, "start": f"{last:.0f}", "end": f"{last:.0f}", "step": "60s"}
        owners.learn([_series(url, series)[0] for series in _get(url, at, token)], kind, names)


class _Fleet:
    """The runs found so far, their GPUs' players fed in time order."""

    def __init__(
        self,
        url: str,
        since: float,
        until: float,
        *,
        mapping: LabelMap,
        labels: Labels,
        settings: Settings,
        max_gap_s: float | None,
    ) -> None:
        self.url, self.mapping, self.labels, self.settings = url, mapping, labels, settings
        self.range_key = f"{since:.0f}-{until:.0f}"
        self.gap_s = max_gap_s if max_gap_s is not None else 3.0 * STEP_S
        self.runs: dict[tuple[str, ...], _Run] = {}
        self.rows: list[MinuteSample] = []
        self.skipped: dict[str, list[str]] = {}
        self.exporter_series: set[tuple[str, str, str]] = set()
        """GPUs seen with only the exporter's own pod label (no workload's)."""
        self.outside = 0
        """Points the server answered outside the range asked for (left out)."""
        self.mig_unknown: set[str] = set()
        """MIG instances whose ``GPU_I_PROFILE`` names no profile of their GPU (whole GPUs)."""
        self.mig_gpus: set[str] = set()
        """GPUs split into MIG instances whose own series (beside the instances') were left
        out."""
        self.unit_unknown: set[tuple[str, ...]] = set()
        """Series of :data:`UTIL_RATIO` whose unit their values could not tell (left out)."""
        self.owners = Owners()
        self.pods_of: dict[tuple[str, str, str], set[str]] = {}
        """A workload the runs are named after (namespace, kind, name) → its pods seen."""
        self.counted: dict[tuple[tuple[str, ...], str], tuple[float, float, float]] = {}
        """Per series and counter: its last point's time, raw value and the offset its resets
        added (:func:`_counter_points`), as of the last chunk read whole."""

    def _run(self, metric: dict[str, str]) -> tuple[_Run, str] | None:
        metric = self._workload(metric)
        host = metric.get("Hostname", "")
        gpu = metric.get("UUID") or f"{host}/gpu{metric.get('gpu', '?')}"
        instance = metric.get("GPU_I_ID", "")
        if instance:
            gpu += f"/mig{instance}"
        label = next((k for k in self.mapping.run if metric.get(k)), "")
        owner = metric[label] if label else ""
        team = metric.get(self.mapping.team, "") if self.mapping.team else ""
        key = ("run", team, owner) if owner else ("unallocated", host, gpu)
        workload = (
            self.owners.workload(metric.get("namespace", ""), metric.get("pod", ""))
            if label == "pod"
            else None
        )
        links = (
            {WORKLOAD_LINK: "/".join(workload)}
            if workload is not None
            else {KUBERNETES_LINK: f"{metric['namespace']}/{owner}"}
            if label == "pod" and metric.get("namespace")
            else {}
        )
        if workload is not None:  # the pod's Job, Deployment, JobSet…: one run for its pods
            key = ("run", team, "/".join(workload))
            self.pods_of.setdefault(workload, set()).add(owner)
            owner = workload[2]
        run = self.runs.get(key)
        if run is None:
            name = owner or f"unallocated {host} GPU {metric.get('gpu', '?')}"
            if instance and not owner:
                name += f" MIG {metric.get('GPU_I_PROFILE') or '?'} (instance {instance})"
            run_id = (
                "prom-" + hashlib.sha256("|".join([*key, self.range_key]).encode()).hexdigest()[:24]
            )
            run = self.runs[key] = _Run(key, run_id, name, metric, {}, {}, not owner, links)
        if gpu not in run.players:
            model = metric.get("modelName") or self.labels.gpu_model
            if not model:
                if run.name not in self.skipped.setdefault(NO_MODEL, []):
                    self.skipped[NO_MODEL].append(run.name)
                return None
            mig = mig_slice(metric.get("GPU_I_PROFILE", ""), model) if instance else None
            if instance and mig is None:
                self.mig_unknown.add(gpu)
            info = GpuInfo(index=len(run.infos), uuid=gpu, name=model, mem_total_gib=None, mig=mig)
            run.infos[gpu] = info
            run.players[gpu] = Player(
                info, run_id=run.run_id, settings=self.settings, gap_s=self.gap_s, rows=self.rows
            )
        return run, gpu

    def _workload(self, metric: dict[str, str]) -> dict[str, str]:
        """The series' labels as the workload's: behind a kube-prometheus ServiceMonitor the
        scrape target's ``pod``/``namespace``/``container`` (the exporter's own) win and DCGM's
        arrive as ``exported_pod``… (these are used); a series carrying only a pod named
        ``dcgm-exporter…`` is a GPU no workload holds (counted, and said). The host is
        ``Hostname`` (older exporters) or ``hostname``."""
        out = dict(metric)
        if "Hostname" not in out and "hostname" in out:
            out["Hostname"] = out["hostname"]
        if any(f"exported_{k}" in out for k in _WORKLOAD):
            for k in _WORKLOAD:
                if f"exported_{k}" in out:
                    out[k] = out[f"exported_{k}"]
                else:
                    out.pop(k, None)
        elif "dcgm-exporter" in out.get("pod", ""):
            self.exporter_series.add(
                (out.get("Hostname", ""), out.get("UUID", ""), out.get("gpu", ""))
            )
            for k in _WORKLOAD:
                out.pop(k, None)
        return out

    def feed(
        self,
        points: dict[tuple[str, ...], dict[float, dict[str, float | None]]],
        metrics: dict[tuple[str, ...], dict[str, str]],
    ) -> None:
        """One chunk's points: series labels → minute → reading fields. Series of the same GPU
        and run (a label such as ``container`` that changed) are merged minute by minute."""
        merged: dict[tuple[tuple[str, ...], str], dict[float, dict[str, float | None]]] = {}
        split = {m.get("UUID") for m in metrics.values() if m.get("GPU_I_ID") and m.get("UUID")}
        for labels_key in sorted(points):
            metric = metrics[labels_key]
            if metric.get("UUID") in split and not metric.get("GPU_I_ID"):
                self.mig_gpus.add(metric["UUID"])  # the GPU's own series: its instances' time
                continue
            found = self._run(metric)
            if found is None:
                continue
            run, gpu = found
            into = merged.setdefault((run.key, gpu), {})
            for t, fields in points[labels_key].items():
                have = into.setdefault(t, {})
                for k, v in fields.items():
                    if have.get(k) is None:
                        have[k] = v
        for (key, gpu), per in merged.items():
            player = self.runs[key].players[gpu]
            for t in sorted(per):
                fields = per[t]
                old = fields.pop(_OLD_THROTTLE, None)
                if fields.get("throttle_ns") is None and old is not None:
                    fields["throttle_ns"] = old  # DCGM before 4.2: its violation counters
                gr = fields.pop("gr_engine_pct", None)
                if fields.get("util_pct") is None and gr is not None:
                    fields["util_pct"] = gr  # DCGM's profiling activity where no NVML figure
                player.add(
                    t,
                    self.url,
                    datetime.fromtimestamp(t, UTC).isoformat(),
                    GpuReading(uuid=gpu, **fields),
                )

    def records(self) -> Imported:
        records: list[RunRecord] = []
        finished = {
            run.key: [p.finish() for p in run.players.values()]
            for run in self.runs.values()
            if run.players
        }
        devices = {run.run_id for run in self.runs.values() if run.unallocated}
        split = split_shared(self.rows, devices, self.settings.idle_split)
        shared = split.shared
        own: dict[tuple[str, str], list[MinuteSample]] = {}
        for row in sorted(self.rows, key=lambda r: r.minute):
            if row.run_id in split.changed:
                own.setdefault((row.run_id, row.gpu), []).append(row)
        basis = self.settings.mig_share
        for run in self.runs.values():
            if run.key not in finished:
                continue
            played: list[tuple[Any, float, float]] = list(finished[run.key])
            if all(first == last for _, first, last in played):
                continue  # one minute of samples: no time
            gpus = list(run.infos.values())
            if run.run_id in split.changed:
                t = self.settings.thresholds
                kept = [  # what each GPU played, from its split rows (what the report reads)
                    (
                        info,
                        (
                            of_rows(
                                s.run[info.uuid],
                                info.uuid,
                                own[(run.run_id, info.uuid)],
                                idle_window_min=t.idle_window_min,
                                idle_pct=t.idle_pct,
                                share=info.share(basis),
                            ),
                            a,
                            b,
                        ),
                    )
                    for info, (s, a, b) in zip(gpus, played, strict=True)
                    if own.get((run.run_id, info.uuid))  # a GPU's own series left out whole
                ]
                if not kept:
                    continue
                gpus, played = [g for g, _ in kept], [p for _, p in kept]
            m = self.mapping
            fields: dict[str, Any] = {
                "host": run.labels.get("Hostname", ""),
                "team": UNALLOCATED
                if run.unallocated
                else run.labels.get(m.team, "")
                if m.team
                else "",
                "project": run.labels.get(m.project, "") if m.project else "",
                "user": run.labels.get(m.user, "") if m.user else "",
                "links": {"prometheus": self.url, **run.links},
            }
            tags: tuple[str, ...] = ("unallocated",) if run.unallocated else ()
            if run.run_id in shared:
                tags += (TIME_SLICED,)
                fields["gpu_split"] = MEASURED if run.run_id in split.measured else EVEN
            if tags:
                fields["tags"] = tags
            records.append(
                run_record(
                    self.url,
                    gpus,
                    played,
                    run_id=run.run_id,
                    name=run.name,
                    labels=self._labels(run),
                    settings=self.settings,
                    source=SOURCE,
                    interval_s=STEP_S,
                    **fields,
                )
            )
        notes = []
        if self.exporter_series:
            notes.append(
                f"{len(self.exporter_series)} GPU(s) carried only the exporter's own pod label "
                "(dcgm-exporter…), no workload's: counted as unallocated. If workloads did hold "
                "them, DCGM's pod mapping is off: enable it (kubelet pod-resources) and scrape "
                "with the ServiceMonitor as is (its exported_pod labels are read)"
            )
        if self.unit_unknown:
            notes.append(
                f"{len(self.unit_unknown)} series of {UTIL_RATIO} held only 0 and 1 in a "
                "chunk, which is 1% in DCGM 4.6's percent and 100% in dcgm-exporter 4.9's "
                "ratio: their utilization there is not measured (export DCGM_FI_DEV_GPU_UTIL "
                "too, or a profiling field, to have it)"
            )
        if self.outside:
            notes.append(
                f"{self.outside:,} point(s) the server answered outside the range asked for "
                "were left out (a Prometheus that ignores start and end?)"
            )
        if self.pods_of:
            pods = sum(len(p) for p in self.pods_of.values())
            kinds = ", ".join(sorted({kind for _, kind, _ in self.pods_of}))
            notes.append(
                f"{pods} pod(s) are {len(self.pods_of)} workload(s) by kube-state-metrics' "
                f"owners ({kinds}): one run per workload, not per pod"
            )
        if self.mig_gpus:
            notes.append(
                f"{len(self.mig_gpus)} GPU(s) were split into MIG instances: each instance is "
                "counted as its share of the GPU, and the GPU's own series is left out (its "
                "time is its instances'); what no instance holds is capacity nobody held "
                "where [owned] declares the GPUs"
            )
        if self.mig_unknown:
            notes.append(
                f"{len(self.mig_unknown)} MIG instance(s) named no profile of their GPU "
                "(GPU_I_PROFILE such as 3g.40gb): each counted as a whole GPU"
            )
        if shared:
            sliced = set().union(*shared.values())
            even = len(shared.keys() - split.measured)
            how = (
                "each GPU-minute is split evenly between its holders, at the whole GPU's "
                "utilization (no per-pod utilization: dcgm-exporter 4.5.3-4.8.2 or later with "
                "--kubernetes-virtual-gpus measures it)"
                if not split.measured
                else "each pod's share measured by its own utilization (the GPU's busy time by "
                "its share of the work, its idle time evenly)"
                + (f"; {even} run(s) split evenly, unmeasured" if even else "")
            )
            notes.append(
                f"{len(sliced)} GPU(s) were time-sliced: {len(shared)} runs held one at the same "
                f"time (tagged {TIME_SLICED}); {how}"
            )
        return Imported(records, self.rows, self.skipped, notes=notes)

    def _labels(self, run: _Run) -> Labels:
        """The labels for ``run``: none of the command line's owners on unallocated time."""
        if run.unallocated:
            return replace(self.labels, team="", project="", user="")
        return self.labels


def _chunk(
    url: str, token: str | None, fleet: _Fleet, first: float, last: float
) -> tuple[
    dict[tuple[str, ...], dict[float, dict[str, float | None]]],
    dict[tuple[str, ...], dict[str, str]],
    dict[tuple[tuple[str, ...], str], tuple[float, float, float]],
]:
    """One chunk's points (series labels → minute → reading fields), the series' labels and
    the counters' running state after it (:attr:`_Fleet.counted`, to be kept once the chunk
    is fed: a chunk asked again in halves starts from the state before it); the owners
    kube-state-metrics names learned on the way."""
    points: dict[tuple[str, ...], dict[float, dict[str, float | None]]] = {}
    metrics: dict[tuple[str, ...], dict[str, str]] = {}
    learn_owners(url, token, fleet.owners, first, last)
    outside = 0
    for name, (field, scale, agg, low, high) in [*FIELDS.items(), (UTIL_RATIO, FIELDS[_UTIL])]:
        query = f"{agg}_over_time({name}[{STEP_S}s])"
        params = {
            "query": query,
            "start": f"{first:.0f}",
            "end": f"{last:.0f}",
            "step": f"{STEP_S}s",
        }
        answer = _get(url, params, token)
        scales = (
            _util_ratio_scales(url, token, first, last) if name == UTIL_RATIO and answer else {}
        )
        for series in answer:
            metric, values = _series(url, series)
            key = tuple(sorted(f"{k}={v}" for k, v in metric.items()))
            metrics[key] = metric
            per = points.setdefault(key, {})
            factor = scales.get(key) if name == UTIL_RATIO else scale
            if factor is None and not any(field in v for v in per.values()):
                fleet.unit_unknown.add(key)  # 0 and 1 alone, no DCGM_FI_DEV_GPU_UTIL beside
            for t, value in values:
                if not first <= t <= last:  # not asked for: never a run's time
                    outside += 1
                    continue
                at = per.setdefault(t, {})
                if factor is not None:
                    at[field] = _number(value, factor, low, high)
                else:  # the minute held, its utilization unknown (the old name's, if any)
                    at.setdefault(field, None)
    counted = dict(fleet.counted)
    for name, field in COUNTERS.items():
        params = {
            "query": f"last_over_time({name}[{STEP_S}s])",
            "start": f"{first:.0f}",
            "end": f"{last:.0f}",
            "step": f"{STEP_S}s",
        }
        for series in _get(url, params, token):
            metric, values = _series(url, series)
            key = tuple(sorted(f"{k}={v}" for k, v in metric.items()))
            metrics[key] = metric
            per = points.setdefault(key, {})
            inside = [(t, v) for t, v in values if first <= t <= last]
            outside += len(values) - len(inside)
            for t, total in _counter_points(counted, (key, name), inside):
                at = per.setdefault(t, {})
                at[field] = (at.get(field) or 0.0) + total  # a family's counters added
    fleet.outside += outside
    return points, metrics, counted


def _counter_points(
    state: dict[tuple[tuple[str, ...], str], tuple[float, float, float]],
    key: tuple[tuple[str, ...], str],
    values: list[tuple[float, Any]],
) -> list[tuple[float, float]]:
    """A counter's points as a running total: each raw value plus what its resets added (a
    value below the one before is a reset, counted on from 0, as Prometheus's ``increase``
    counts it); a value that is no count (text, negative, DCGM's blank) left out. ``state``
    (its last time, raw value and offset) is read and updated."""
    out = []
    t0, before, offset = state.get(key, (-math.inf, 0.0, 0.0))
    for t, text in values:
        raw = _number(text, 1.0, 0.0, _COUNTER_TOP)
        if raw is None or t <= t0:
            continue
        if raw < before:
            offset += before
        t0, before = t, raw
        out.append((t, raw + offset))
    state[key] = (t0, before, offset)
    return out


def _util_ratio_scales(
    url: str, token: str | None, first: float, last: float
) -> dict[tuple[str, ...], float]:
    """Per series of :data:`UTIL_RATIO` in the chunk ``first``..``last``, the scale of its
    values to percent: 1 where a value is over 1 (percent), 100 where one is a fraction (a
    ratio; checked once a minute), 1 where every value is 0 (nothing either way); none where
    they are 0 and 1 alone (1% or 100%: the series is left out, and the import says so)."""
    span = f"{last - first + STEP_S:.0f}s"
    highest = _instant(url, token, f"max_over_time({UTIL_RATIO}[{span}])", last)
    fraction = _instant(url, token, f"max_over_time(({UTIL_RATIO} % 1)[{span}:{STEP_S}s])", last)
    scales: dict[tuple[str, ...], float] = {}
    for key, top in highest.items():
        if top > 1.0 or top == 0.0:
            scales[key] = 1.0
        elif fraction.get(key, 0.0) > 0.0:
            scales[key] = 100.0
    return scales


def _instant(url: str, token: str | None, query: str, at: float) -> dict[tuple[str, ...], float]:
    """Each series' value of ``query`` at ``at`` (a range query of one point), by its labels
    as :func:`_chunk` keys them; a value that is no finite number left out."""
    params = {"query": query, "start": f"{at:.0f}", "end": f"{at:.0f}", "step": f"{STEP_S}s"}
    out: dict[tuple[str, ...], float] = {}
    for series in _get(url, params, token):
        metric, values = _series(url, series)
        numbers = [x for _, v in values if (x := _number(v, 1.0, -math.inf, math.inf)) is not None]
        if numbers:
            out[tuple(sorted(f"{k}={v}" for k, v in metric.items()))] = numbers[-1]
    return out


def server(url: str) -> tuple[str, str | None]:
    """The Prometheus base URL checked, and the bearer token from :data:`TOKEN_ENV`.

    Raises:
        ImportFailed: A URL that is not http(s)://HOST[:PORT], one with credentials in it, or
            a token no HTTP header may carry.
    """
    url = url.rstrip("/")
    where = one_line(url, 200)
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises for a port out of range
    except ValueError as e:  # http://[::1, http://host:99999
        raise ImportFailed(f"{where}: not a URL ({e})") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or not url.isprintable()
        or " " in url
    ):
        raise ImportFailed(f"{where}: a Prometheus URL is http:// or https://HOST[:PORT]")
    if parts.username or parts.password:
        raise ImportFailed(
            f"{parts.scheme}://***@{parts.hostname}: no credentials in the URL "
            f"(they would show in ps and in logs): put a bearer token in "
            f"{TOKEN_ENV}"
        )
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and not (token.isprintable() and token.isascii()):
        raise ImportFailed(
            f"{TOKEN_ENV} holds a line break or another character no HTTP header may: set it "
            "to the token alone"
        )
    return url, token


def read_prometheus(
    url: str,
    *,
    since: datetime,
    until: datetime,
    mapping: LabelMap | None = None,
    labels: Labels | None = None,
    settings: Settings | None = None,
    max_gap_s: float | None = None,
    progress: bool | None = None,
) -> Imported:
    """The runs and minute samples of the DCGM series in ``[since, until]`` (nothing written)."""
    url, token = server(url)
    start, end = since.timestamp(), until.timestamp()
    fleet = _Fleet(
        url,
        start,
        end,
        mapping=mapping or LabelMap(),
        labels=labels or Labels(),
        settings=settings or Settings(),
        max_gap_s=max_gap_s,
    )
    spans = list(chunks(start, end))
    for span in shown(spans, f"Prometheus, {CHUNK_POINTS}-minute chunks", show=progress):
        pending = [span]
        while pending:  # in time order: a chunk whose answer is too large, in halves
            first, last = pending.pop()
            try:
                points, metrics, counted = _chunk(url, token, fleet, first, last)
            except _TooLarge as e:
                pending += halves(e, first, last, "series")
                continue
            fleet.feed(points, metrics)
            fleet.counted = counted
    return fleet.records()


def import_prometheus(
    store_url: str, url: str, *, replace: bool = False, **kwargs: Any
) -> Imported:
    """:func:`read_prometheus`, then every run into the store in one transaction
    (:func:`reports.imports.play.write_imported`)."""
    return write_imported(store_url, read_prometheus(url, **kwargs), source=SOURCE, replace=replace)
