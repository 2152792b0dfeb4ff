"""``gpu-kpi import kubernetes URL --since --until``: the GPUs Kubernetes pods held, from
kube-state-metrics in Prometheus, into the store's allocations
(:mod:`reports.data.allocations`), one per pod, for the report's join with the minute samples
(dcgm-exporter's, imported with ``gpu-kpi import prometheus``, and tracked runs').

A pod holds GPUs while it is ``Running`` (``kube_pod_status_phase``) with a GPU request
(``kube_pod_container_resource_requests{resource="nvidia_com_gpu"}``, summed over its
containers; the device plugin's GPUs are whole, requests equal limits) on a node (the
request's ``node`` label). Both are read with one range query a chunk of minutes at a time,
the phase by ``last_over_time`` over the 59 s before each whole minute (no staleness lookback;
59, not 60: Prometheus 2 counts a scrape at the window's start, 3 does not, and a scrape on the
minute must not count in two), so a point says the pod held its GPUs in that minute. As with
the DCGM import, the first point covers nothing: a pod's span is from its first point to its
last, to the minute. Several kube-state-metrics replicas (the same series from each) count
once. The nodes' GPUs (``kube_node_status_capacity``) are read the same way, as spans of one
count per node.

Per pod: ``NAMESPACE/POD`` (its id in the report; the tracker's ``kubernetes`` link), its
``uid`` (the row's key: a StatefulSet's pod of the same name later is another), its workload
(``kube_pod_owner`` followed to the Deployment or JobSet, as the DCGM import does: the run's
``kubernetes_workload`` link), its team (a pod label given with ``--map team=LABEL``, else the
namespace, through ``--account-team NAMESPACE=TEAM``), and its GPU model where the node's
``nvidia.com/gpu.product`` label is exported (``kube_node_labels``; else the model its
samples saw). A pod still running at the end of the range counts up to its last point;
importing the next range extends the same row (its start kept), so weekly imports join.

A pod asking for more GPUs than its node has (the most ``kube_node_status_capacity`` reported
of it in the range, else :data:`reports.imports.slurm_jobs.MAX_GPUS_PER_NODE`) is no real
holding: it is skipped and named (:func:`reports.imports.slurm_jobs.over_capacity`).

Behind a scrape that does not honour kube-state-metrics' labels, the objects' arrive as
``exported_namespace``/``exported_pod``/``exported_container``: these are read. A ``cluster``
label (Thanos, Mimir) names the cluster; else ``--cluster``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from reports.imports.prom import (
    STEP_S,
    Owners,
    _get,
    _series,
    _TooLarge,
    chunks,
    halves,
    learn_owners,
    server,
)
from reports.imports.slurm import Unreadable
from reports.imports.slurm_jobs import MAX_GPUS, over_capacity
from tracker.prices import canonical_gpu
from tracker.shares import mig_slice
from tracker.text import one_line

if TYPE_CHECKING:
    from reports.rows import Allocation, Capacity
    from tracker.store import RunStore

SOURCE = "kubernetes"
RESOURCE = "nvidia_com_gpu"
"""``nvidia.com/gpu`` as kube-state-metrics writes a resource name (``[^a-zA-Z0-9_]`` → ``_``)."""
MIG_RESOURCES = "nvidia_com_mig_.+"
"""The device plugin's MIG resources under its ``mixed`` strategy (``nvidia.com/mig-3g.40gb``
as kube-state-metrics writes it: ``nvidia_com_mig_3g_40gb``), matched as a pattern."""
CORES = "nvidia_com_gpucores"
"""HAMi's ``nvidia.com/gpucores``: the percent of a GPU's compute each of a container's
``nvidia.com/gpu`` units (vGPUs) may use: its share of the GPU."""
_MIG_RESOURCE = re.compile(r"nvidia_com_mig_(?:(\d+)c_)?(\d+)g_(\d+)gb(?:_(\w+))?")
CHUNK_POINTS = 720
"""Minutes per range query (12 hours: one series per pod, a few points each)."""
PRODUCT_LABEL = "label_nvidia_com_gpu_product"
"""GPU feature discovery's ``nvidia.com/gpu.product`` node label, as kube_node_labels has it
where ``--metric-labels-allowlist=nodes=[nvidia.com/gpu.product]`` lets it through."""
_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def _objects(expr: str, *labels: str) -> str:
    """``expr`` with the object's labels that arrived as ``exported_*`` under their names."""
    for k in labels:
        expr = f'label_replace({expr}, "{k}", "$1", "exported_{k}", "(.+)")'
    return expr


def capacity_query(resource: str = RESOURCE) -> str:
    """PromQL: each node's allocatable kind of capacity of ``resource`` (its GPUs) at each
    minute it was reported in the 59 s before."""
    return (
        "max by (cluster, node) (last_over_time("
        f'kube_node_status_capacity{{resource="{resource}"}}[{STEP_S - 1}s]))'
    )


_CONTAINER = "cluster, namespace, pod, uid, node, container"
"""A container of a pod on a node: the labels a request is kept by."""


def _requests(matcher: str, by: str = "") -> str:
    """PromQL: each running container's request of the resources ``matcher`` selects, once
    however many kube-state-metrics replicas report it (``by``: more labels kept)."""
    inner = _objects(
        f'max_over_time(kube_pod_container_resource_requests{{{matcher},node!=""}}[5m])',
        "namespace",
        "pod",
        "container",
    )
    return f"max by ({_CONTAINER}{by}) ({inner})"


def _per_running_pod(expr: str, by: str = "") -> str:
    """PromQL: ``expr`` (per container) summed per pod, for the minutes the pod was Running."""
    running = _objects(
        f'last_over_time(kube_pod_status_phase{{phase="Running"}}[{STEP_S - 1}s])',
        "namespace",
        "pod",
    )
    return (
        f"sum by (cluster, namespace, pod, uid, node{by}) ({expr})"
        " * on (namespace, pod, uid) group_left () "
        f"(max by (namespace, pod, uid) ({running}) == 1)"
    )


def pods_query(resource: str = RESOURCE, *, pattern: bool = False) -> str:
    """PromQL: per running pod with a request of ``resource`` on a node, the units it asked for
    (each container's request once, however many kube-state-metrics replicas report it);
    ``pattern``: ``resource`` is a pattern, each resource it matches a series of its own."""
    matcher = f'resource=~"{resource}"' if pattern else f'resource="{resource}"'
    by = ", resource" if pattern else ""
    return _per_running_pod(_requests(matcher, by), by)


def cores_query() -> str:
    """PromQL: per running pod, Σ over its containers of its HAMi vGPUs × the percent of a GPU
    each may use (``nvidia.com/gpu`` × ``nvidia.com/gpucores``)."""
    gpus, cores = _requests(f'resource="{RESOURCE}"'), _requests(f'resource="{CORES}"')
    return _per_running_pod(f"{gpus} * on ({_CONTAINER}) {cores}")


def mig_profile(resource: str) -> str | None:
    """The MIG profile a resource name of kube-state-metrics asks for
    (``nvidia_com_mig_3g_40gb`` → ``3g.40gb``, ``nvidia_com_mig_1c_3g_40gb`` → ``1c.3g.40gb``),
    or None."""
    m = _MIG_RESOURCE.fullmatch(resource)
    if m is None:
        return None
    compute = f"{m[1]}c." if m[1] else ""
    return f"{compute}{m[2]}g.{m[3]}gb" + (f"+{m[4]}" if m[4] else "")


def label_name(key: str) -> str:
    """A pod label's key as kube_pod_labels names it: ``team`` → ``label_team``,
    ``app.kubernetes.io/part-of`` → ``label_app_kubernetes_io_part_of``."""
    return _LABEL.sub("_", key if key.startswith("label_") else "label_" + key)


@dataclass
class _Pod:
    cluster: str
    namespace: str
    pod: str
    uid: str
    node: str
    gpus: float
    first: float
    last: float
    mig: dict[str, float] = field(default_factory=dict)
    """MIG profile → the instances of it the pod asked for (the ``mixed`` strategy)."""
    cores_pct: float = 0.0
    """HAMi: Σ of its vGPUs × the percent of a GPU each may use (0: none asked for)."""


@dataclass
class KubeImported:
    """What ``gpu-kpi import kubernetes`` found and wrote."""

    jobs: list[Allocation] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    """Pods left out, each named with why."""
    short: int = 0
    """Pods seen at one minute only (no span)."""
    extended: int = 0
    """Pods an earlier import had, now with a later end."""
    capacity: list[Capacity] = field(default_factory=list)
    """The nodes' GPUs over time (``kube_node_status_capacity``)."""


def read_kubernetes(
    url: str,
    *,
    since: datetime,
    until: datetime,
    cluster: str = "",
    teams: Mapping[str, str] | None = None,
    team_label: str = "",
    user_label: str = "",
    now: datetime,
    mig_share: str = "compute",
) -> KubeImported:
    """The pods that held GPUs in ``[since, until]``, as allocations (nothing written).

    Args:
        url: The Prometheus base URL (its token from ``GPU_KPI_PROMETHEUS_TOKEN``).
        since: The range's start (timezone-aware).
        until: Its end (timezone-aware).
        cluster: The cluster of pods whose series name none.
        teams: Namespace → team (a namespace not in it is its own team), where no pod label
            names the team.
        team_label: The pod label naming the team (``team``), or "".
        user_label: The pod label naming the user, or "".
        now: The time of the import: a pod at the last minute of a range that reaches it is
            running.
        mig_share: What a MIG instance's share of its GPU is counted by (``[gpus]
            mig_share``: :data:`tracker.shares.SHARE_BASES`).

    Raises:
        ImportFailed: Prometheus unreachable, refusing a query or answering something else
            (nothing is read).
    """
    from reports.rows import Allocation

    url, token = server(url)
    start, end = since.timestamp(), until.timestamp()
    pods: dict[tuple[str, str], _Pod] = {}
    nodes: dict[tuple[str, str], list[list[float]]] = {}
    owners = Owners()
    products: dict[str, str] = {}
    wanted = {label_name(x) for x in (team_label, user_label) if x}
    labels: dict[tuple[str, str, str], dict[str, str]] = {}
    out = KubeImported()
    last_minute = math.floor(end / STEP_S) * STEP_S
    pending = list(reversed(list(chunks(start, end, points=CHUNK_POINTS))))
    while pending:
        first, last = pending.pop()
        try:
            answer = _get(
                url,
                _span(pods_query(), first, last),
                token,
            )
        except _TooLarge as e:
            pending += halves(e, first, last, "pods")
            continue
        for series in answer:
            metric, values = _series(url, series)
            _add(pods, metric, values, cluster=cluster, first=first, last=last, out=out)
        for series in _get(url, _span(pods_query(MIG_RESOURCES, pattern=True), first, last), token):
            metric, values = _series(url, series)
            profile = mig_profile(metric.get("resource", ""))
            if profile is None:
                name = f"{metric.get('namespace', '')}/{metric.get('pod', '')}"
                why = f"a request of {one_line(metric.get('resource', ''), 40)!r}: no MIG profile"
                out.unreadable.append(Unreadable(f"pod {name}", why))
                continue
            _add(
                pods, metric, values, cluster=cluster, first=first, last=last, out=out, mig=profile
            )
        for series in _get(url, _span(cores_query(), first, last), token):
            metric, values = _series(url, series)
            _add_cores(pods, metric, values, cluster=cluster, first=first, last=last)
        for series in _get(
            url,
            _span(capacity_query(), first, last),
            token,
        ):
            metric, values = _series(url, series)
            node = (metric.get("cluster") or cluster, metric.get("node", ""))
            _runs_of(nodes.setdefault(node, []), values, first, last)
        learn_owners(url, token, owners, first, last)
        span = f"[{last - first + STEP_S:.0f}s]"
        labelled = (
            f"max by (node, {PRODUCT_LABEL}) "
            f"(last_over_time(kube_node_labels{{{PRODUCT_LABEL}!=''}}{span}))"
        )
        for series in _get(url, _at(labelled, last), token):
            metric = _series(url, series)[0]
            products[metric.get("node", "")] = metric.get(PRODUCT_LABEL, "")
        for key in sorted(wanted):
            query = _objects(
                f"last_over_time(kube_pod_labels{{{key}!=''}}{span})", "namespace", "pod"
            )
            for series in _get(
                url, _at(f"max by (namespace, pod, uid, {key}) ({query})", last), token
            ):
                metric = _series(url, series)[0]
                ids = (metric.get("namespace", ""), metric.get("pod", ""), metric.get("uid", ""))
                labels.setdefault(ids, {})[key] = metric.get(key, "")
    out.capacity = node_spans(nodes, products, mig_share)
    # a node's most GPUs in the range; one that reported none (its device plugin restarting)
    # is not known
    has = {key: int(max(run[2] for run in runs)) for key, runs in nodes.items() if runs}
    has = {key: gpus for key, gpus in has.items() if gpus > 0}
    seen_at = min(now, until)
    for p in sorted(pods.values(), key=lambda p: (p.first, p.namespace, p.pod)):
        if p.last <= p.first:
            out.short += 1
            continue
        known = {p.node: has[(p.cluster, p.node)]} if (p.cluster, p.node) in has else {}
        too_many = over_capacity(int(p.gpus), (p.node,), known) if p.gpus else None
        if too_many is not None:
            out.unreadable.append(Unreadable(f"pod {p.namespace}/{p.pod}", too_many))
            continue
        running = p.last >= last_minute
        workload = owners.workload(p.namespace, p.pod)
        own = labels.get((p.namespace, p.pod, p.uid), {})
        team = own.get(label_name(team_label), "") if team_label else ""
        model = products.get(p.node, "")
        out.jobs.append(
            Allocation(
                source=SOURCE,
                cluster=p.cluster,
                job_id=p.uid or f"{p.namespace}/{p.pod}",
                shown_id=f"{p.namespace}/{p.pod}",
                name=f"{workload[1]}/{workload[2]}" if workload else p.pod,
                user=own.get(label_name(user_label), "") if user_label else "",
                account=p.namespace,
                team=team or (teams or {}).get(p.namespace, p.namespace),
                partition="",
                state="Running" if running else "Ended",
                start_at=datetime.fromtimestamp(p.first, UTC),
                end_at=None if running else datetime.fromtimestamp(p.last, UTC),
                seen_at=max(datetime.fromtimestamp(p.last, UTC), seen_at)
                if running
                else datetime.fromtimestamp(p.last, UTC),
                gpus=held_gpus(p, model, mig_share),
                gpu_model=canonical_gpu(model) if model else None,
                hosts=(p.node,),
            )
        )
    return out


def held_gpus(pod: _Pod, product: str, basis: str) -> float:
    """The GPUs a pod held, as shares of physical GPUs: its ``nvidia.com/gpu`` units, each a
    MIG instance's share where the node's product label names one (the device plugin's
    ``single`` strategy: ``NVIDIA-A100-SXM4-80GB-MIG-1g.10gb``), else whole; and its MIG
    resources' instances (the ``mixed`` strategy), each its share of the node's GPU model.
    A pod of HAMi's vGPUs holds the percent of a GPU each may use (``nvidia.com/gpucores``:
    one vGPU at 30 is 0.3 of a GPU), at most its units.

    Args:
        pod: The pod.
        product: Its node's ``nvidia.com/gpu.product`` label ("" where not exported: MIG
            instances of a GPU with 7 compute slices).
        basis: :data:`tracker.shares.SHARE_BASES`.
    """
    single = mig_slice(product, product) if product else None
    if pod.cores_pct > 0:  # HAMi's vGPUs: each the percent of a GPU it may use
        held = min(pod.cores_pct / 100.0, pod.gpus)
    else:
        held = pod.gpus * (single.share(basis) if single is not None else 1.0)
    for profile, count in pod.mig.items():
        found = mig_slice(profile, product)
        held += count * (found.share(basis) if found is not None else 1.0)
    return held


def _runs_of(
    runs: list[list[float]], values: list[tuple[float, object]], first: float, last: float
) -> None:
    """A node's points of a chunk (in time order) onto its runs of one GPU count,
    ``[first minute, last minute, GPUs]``: a run ends where the count changes or the node was
    not reported for over 3 minutes."""
    counts: dict[object, float | None] = {}
    for t, v in values:
        if not first <= t <= last:
            continue
        if not isinstance(v, str):  # Prometheus writes a value as a string; a list is no count
            continue
        c = counts[v] if v in counts else counts.setdefault(v, _count(v))
        if c is None:
            continue
        run = runs[-1] if runs else None
        if run is not None and run[2] == c and 0 <= t - run[1] <= 3 * STEP_S:
            run[1] = t
        else:
            runs.append([t, t, c])


def node_spans(
    nodes: Mapping[tuple[str, str], list[list[float]]],
    products: Mapping[str, str],
    basis: str = "compute",
) -> list[Capacity]:
    """Each node's runs of one GPU count as spans (a point covers nothing before it, as a
    pod's: a run of one minute is none). A node whose product label names a MIG profile (the
    ``single`` strategy) advertises instances: its GPUs are their count over the instances a
    GPU holds (56 ``1g.10gb`` are 8 GPUs).

    Args:
        nodes: (cluster, node) → its runs, ``[first minute, last minute, GPUs]``.
        products: Node → its ``nvidia.com/gpu.product`` label.
        basis: :data:`tracker.shares.SHARE_BASES` (unused for whole GPUs).
    """
    from reports.rows import Capacity

    out = []
    for (cluster, node), runs in sorted(nodes.items()):
        model = products.get(node, "")
        single = mig_slice(model, model) if model else None
        per_gpu = single.per_gpu if single is not None else 1
        out += [
            Capacity(
                source=SOURCE,
                cluster=cluster,
                node=node,
                start_at=datetime.fromtimestamp(a, UTC),
                end_at=datetime.fromtimestamp(b, UTC),
                gpus=round(c / per_gpu),
                gpu_model=canonical_gpu(model) if model else None,
            )
            for a, b, c in runs
            if b > a and c > 0
        ]
    return out


def _span(query: str, first: float, last: float) -> dict[str, str]:
    """A range query's parameters: a point a minute from ``first`` to ``last`` (epoch s)."""
    return {"query": query, "start": f"{first:.0f}", "end": f"{last:.0f}", "step": f"{STEP_S}s"}


def _at(query: str, t: float) -> dict[str, str]:
    """A range query of one point: the instant ``t``."""
    return _span(query, t, t)


def _add(
    pods: dict[tuple[str, str], _Pod],
    metric: dict[str, str],
    values: list[tuple[float, object]],
    *,
    cluster: str,
    first: float,
    last: float,
    out: KubeImported,
    mig: str | None = None,
) -> None:
    """One pod's points of a chunk into ``pods`` (a pod with a request that is no GPU count
    into ``out.unreadable``); ``mig``: the points are its request of that MIG profile's
    instances."""
    namespace, pod, uid = (metric.get(k, "") for k in ("namespace", "pod", "uid"))
    name = f"{namespace}/{pod}"
    inside = [(t, v) for t, v in values if first <= t <= last]
    if not namespace or not pod or not inside:
        return
    counts = {str(v): _count(v) for v in {str(v) for _, v in inside}}  # a few distinct values
    bad = next((v for v, c in counts.items() if c is None), None)
    if bad is not None:
        out.unreadable.append(
            Unreadable(f"pod {name}", f"a GPU request of {bad[:40]!r}: not a count of GPUs")
        )
        return
    gpus = max(c for c in counts.values() if c is not None)
    if gpus == 0:
        return
    lo, hi = min(t for t, _ in inside), max(t for t, _ in inside)
    key = (metric.get("cluster") or cluster, uid or name)
    have = pods.get(key)
    if have is None:
        have = pods[key] = _Pod(key[0], namespace, pod, uid, metric.get("node", ""), 0, lo, hi)
    if mig is None:
        have.gpus = max(have.gpus, gpus)
    else:
        have.mig[mig] = max(have.mig.get(mig, 0.0), gpus)
    have.first, have.last = min(have.first, lo), max(have.last, hi)


def _add_cores(
    pods: dict[tuple[str, str], _Pod],
    metric: dict[str, str],
    values: list[tuple[float, object]],
    *,
    cluster: str,
    first: float,
    last: float,
) -> None:
    """A pod's HAMi cores (:func:`cores_query`) onto its entry of ``pods`` (a pod the GPU query
    did not find, or a value that is no percent, is left as it is: whole GPUs)."""
    namespace, pod, uid = (metric.get(k, "") for k in ("namespace", "pod", "uid"))
    have = pods.get((metric.get("cluster") or cluster, uid or f"{namespace}/{pod}"))
    if have is None:
        return
    for t, v in values:
        try:
            pct = float(str(v))
        except ValueError:
            continue
        if first <= t <= last and math.isfinite(pct) and 0 < pct <= 100.0 * MAX_GPUS:
            have.cores_pct = max(have.cores_pct, pct)


def _count(value: object) -> float | None:
    """A request's value as a whole count of GPUs (0 to :data:`MAX_GPUS`), else None."""
    try:
        x = float(str(value))
    except ValueError:
        return None
    return x if math.isfinite(x) and x == int(x) and 0 <= x <= MAX_GPUS else None


def write_pods(store: RunStore, done: KubeImported) -> KubeImported:
    """The pods into the store in one transaction; a pod an earlier import already has keeps
    its start and takes the later end (a pod running across two ranges is one allocation).

    Args:
        store: The run store (the table made when missing).
        done: What :func:`read_kubernetes` found.

    Returns:
        ``done`` with the merged allocations and how many were extended.
    """
    from reports.data.allocations import allocations_keyed, write_allocations

    earlier = allocations_keyed(store, SOURCE, [(a.cluster, a.job_id) for a in done.jobs])
    merged = []
    extended = 0
    for new in done.jobs:
        old = earlier.get((new.cluster, new.job_id))
        if old is None:
            merged.append(new)
            continue
        extended += new.until > old.until
        latest = new if new.until >= old.until else old
        merged.append(
            replace(latest, start_at=min(old.start_at, new.start_at), gpus=max(new.gpus, old.gpus))
        )
    write_allocations(store, merged, done.capacity)
    return replace(done, jobs=merged, extended=extended)
