"""``gpu-kpi import kubernetes`` of pods that held MIG instances, through a real Prometheus:
the device plugin's ``mixed`` strategy (``nvidia.com/mig-3g.40gb`` resources) and its
``single`` strategy (``nvidia.com/gpu`` units on a node whose product label names the
profile), each pod's share of a GPU and each node's GPUs worked out by hand."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prom_server import Sample, running_prometheus

from reports.data.allocations import allocations_in, capacity_in
from reports.imports.kube import read_kubernetes, write_pods
from reports.render.fmt import fmt_gpus
from tracker.store import RunStore

pytestmark = pytest.mark.prometheus

TEN = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # Monday of 2026-W48
ELEVEN, NOON = TEN + timedelta(hours=1), TEN + timedelta(hours=2)
KSM = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}
PRODUCTS = {
    "mig-mixed": "NVIDIA-A100-SXM4-80GB",
    "mig-single": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
    "hami": "NVIDIA-H100-80GB-HBM3",
}


def every(start: datetime, end: datetime) -> Iterator[float]:
    t = start
    while t <= end:
        yield t.timestamp()
        t += timedelta(seconds=30)


def pod(
    ns: str,
    name: str,
    node: str,
    resource: str,
    count: float,
    until: datetime,
    **also: float,
) -> list[Sample]:
    """kube-state-metrics' series of a pod asking for ``count`` of ``resource`` (as its source
    names a resource: ``nvidia.com/mig-1g.10gb`` → ``nvidia_com_mig_1g_10gb``) and ``also``
    of others in the same container, Running from TEN to ``until``, Succeeded after."""
    base = {**KSM, "namespace": ns, "pod": name, "uid": f"uid-{name}"}
    out: list[Sample] = []
    for t in every(TEN, NOON):
        running = t <= until.timestamp()
        for kind, value in {resource: count, **also}.items():
            request = {**base, "container": "main", "node": node, "resource": kind}
            out.append(
                ("kube_pod_container_resource_requests", {**request, "unit": "integer"}, value, t)
            )
        for phase in ("Running", "Succeeded"):
            on = running if phase == "Running" else not running
            out.append(("kube_pod_status_phase", {**base, "phase": phase}, float(on), t))
    return out


def cluster() -> list[Sample]:
    """10:00-12:00 on two A100 nodes.

    - mig-mixed (an A100 80GB, the ``mixed`` strategy): research/nb holds a ``1g.10gb`` 10-12,
      nlp/train a ``3g.40gb`` 10-11; a pod asks for a resource named like MIG but no profile.
    - mig-single (A100 40GBs split into ``1g.5gb`` each, the ``single`` strategy: the product
      label names the profile, 56 ``nvidia.com/gpu`` units on the node): web/svc holds 2 units.
    - hami (an H100 shared by HAMi's vGPUs): ml/infer holds one vGPU at 30% of the GPU's
      cores (``nvidia.com/gpucores: 30``) 10-12.
    """
    series = [
        *pod("research", "nb", "mig-mixed", "nvidia_com_mig_1g_10gb", 1, NOON),
        *pod("nlp", "train", "mig-mixed", "nvidia_com_mig_3g_40gb", 1, ELEVEN),
        *pod("ml", "odd", "mig-mixed", "nvidia_com_mig_big", 1, NOON),
        *pod("web", "svc", "mig-single", "nvidia_com_gpu", 2, NOON),
        *pod("ml", "infer", "hami", "nvidia_com_gpu", 1, NOON, nvidia_com_gpucores=30),
    ]
    for t in every(TEN, NOON):
        for node, product in PRODUCTS.items():
            units = 56.0 if node == "mig-single" else 0.0  # mixed: no whole GPU to offer
            labels = {**KSM, "node": node, "resource": "nvidia_com_gpu", "unit": "integer"}
            series.append(("kube_node_status_capacity", labels, units, t))
            product_label = {**KSM, "node": node, "label_nvidia_com_gpu_product": product}
            series.append(("kube_node_labels", product_label, 1.0, t))
    return series


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("k8s-mig"), cluster()) as url:
        yield url


def test_pods_on_mig_instances_hold_their_share_of_a_gpu(prometheus: str, tmp_path: Path) -> None:
    """nb's 1g.10gb is 1/7 of an A100 80GB for 2 h: 2/7 GPU-h; train's 3g.40gb 3/7 for 1 h;
    svc's two 1g.5gb units 2/7 of an A100 40GB for 2 h: 4/7 GPU-h; infer's vGPU at 30% of an
    H100's cores 0.3 of it, 0.6 GPU-h. mig-single's 56 units are 8 GPUs (7 1g.5gb to a GPU);
    mig-mixed offers no whole GPU. The odd request is named."""
    done = read_kubernetes(prometheus, since=TEN, until=NOON, now=NOON + timedelta(days=1))
    held = {a.shown_id: a for a in done.jobs}
    assert sorted(held) == ["ml/infer", "nlp/train", "research/nb", "web/svc"]
    assert held["ml/infer"].gpus == pytest.approx(0.3)
    assert held["research/nb"].gpus == pytest.approx(1 / 7)
    assert held["nlp/train"].gpus == pytest.approx(3 / 7)
    assert held["web/svc"].gpus == pytest.approx(2 / 7)
    assert (held["research/nb"].gpu_model, held["web/svc"].gpu_model) == ("A100-80GB", "A100-40GB")
    assert [(u.where, u.reason) for u in done.unreadable] == [
        ("pod ml/odd", "a request of 'nvidia_com_mig_big': no MIG profile")
    ]
    assert [(c.node, c.gpus) for c in done.capacity] == [("mig-single", 8)]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store:
        write_pods(store, done)
        stored, bad = allocations_in(store, TEN, NOON)
        nodes, _ = capacity_in(store, TEN, NOON)
    assert bad == 0
    hours = {a.shown_id: a.gpus * (a.until - a.start_at).total_seconds() / 3600 for a in stored}
    assert hours == {
        "research/nb": pytest.approx(2 / 7, abs=0.01),
        "nlp/train": pytest.approx(3 / 7, abs=0.01),
        "web/svc": pytest.approx(4 / 7, abs=0.01),
        "ml/infer": pytest.approx(0.6, abs=0.01),
    }
    assert [c.gpus for c in nodes] == [8]
    shown = {a.shown_id: fmt_gpus(a.gpus) for a in stored}
    assert shown == {"research/nb": "1/7", "nlp/train": "3/7", "web/svc": "2/7", "ml/infer": "3/10"}


def test_a_share_of_a_gpu_survives_a_store_whose_table_held_whole_gpus(store_url: str) -> None:
    """The allocations table held GPUs as whole numbers before shares: a PostgreSQL table made
    then is widened when opened for writing (SQLite keeps a fraction as it is), and 3/7 of a
    GPU reads back as 3/7, never 0."""
    import sqlalchemy as sa
    from fakes import slurm_job

    from reports.data.allocations import TABLE, write_allocations

    with RunStore(store_url) as store:
        write_allocations(store, [slurm_job("1", 1, TEN, NOON, ("n1",))])

        def as_before(conn: sa.Connection) -> None:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"ALTER TABLE {TABLE} ALTER COLUMN gpus TYPE integer")

        store.transaction(as_before, write=True)
        share = slurm_job("2", 3 / 7, TEN, NOON, ("n1",), source="kubernetes")
        write_allocations(store, [share])
        stored, bad = allocations_in(store, TEN, NOON)
    assert bad == 0
    assert {a.job_id: a.gpus for a in stored} == {"1": 1, "2": pytest.approx(3 / 7)}
