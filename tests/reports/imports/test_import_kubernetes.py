"""``gpu-kpi import kubernetes``: the pods that held GPUs, from kube-state-metrics series in a
real Prometheus (the label sets of kube-state-metrics' own source: ``internal/store/pod.go``
and ``node.go``), joined in the weekly report with dcgm-exporter's minutes (``gpu-kpi import
prometheus``) and a tracked run's; each pod's GPU-hours and dollars worked out by hand."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fakes import minutes, run_record
from prom_server import Sample, running_prometheus

from reports.build import compute
from reports.cli import main
from reports.data.allocations import allocations_in, capacity_in, capacity_table
from reports.imports.kube import label_name, pods_query
from reports.request import Request
from reports.service.prom import kpi_samples
from tracker.store import RunStore

pytestmark = pytest.mark.prometheus

H100 = "NVIDIA H100 80GB HBM3"
PRICE = 3.85
TEN = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # Monday of 2026-W48
ELEVEN = TEN + timedelta(hours=1)
NOON = TEN + timedelta(hours=2)
KSM = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}  # honorLabels: the objects'
KSM2 = {"job": "kube-state-metrics", "instance": "10.0.0.10:8080"}  # a second replica
# a scrape that did not honour the labels: the target's own win, the objects' are exported_*
PLAIN = {
    "job": "kube-state-metrics-plain",
    "instance": "10.0.0.11:8080",
    "namespace": "monitoring",
    "pod": "kube-state-metrics-6d4f-x",
    "container": "kube-state-metrics",
}


def every(start: datetime, end: datetime, s: int) -> Iterator[float]:
    t = start
    while t <= end:
        yield t.timestamp()
        t += timedelta(seconds=s)


def pod(
    target: dict[str, str],
    ns: str,
    name: str,
    uid: str,
    *,
    node: str,
    gpus: float,
    running: tuple[datetime, datetime],
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
    until: datetime = NOON,
) -> list[Sample]:
    """kube-state-metrics' series of one pod, scraped every 30 s from TEN to ``until``: its
    GPU request (container main; container log-shipper asks for CPU only), its phase
    (Running in ``running``, Succeeded after), its info, owner and labels."""
    exported = "namespace" in target
    obj = {"exported_namespace": ns, "exported_pod": name} if exported else {}
    obj = obj or {"namespace": ns, "pod": name}
    obj["uid"] = uid

    def c(container: str) -> dict[str, str]:
        return {("exported_container" if exported else "container"): container}

    out: list[Sample] = []
    for t in every(TEN, until, 30):
        at = datetime.fromtimestamp(t, UTC)
        is_running = running[0] <= at <= running[1]
        phase = "Running" if is_running else "Succeeded" if at > running[1] else "Pending"
        base = {**target, **obj}
        out += [
            (
                "kube_pod_container_resource_requests",
                {
                    **base,
                    **c("main"),
                    "node": node,
                    "resource": "nvidia_com_gpu",
                    "unit": "integer",
                },
                float(gpus),
                t,
            ),
            (
                "kube_pod_container_resource_requests",
                {**base, **c("log-shipper"), "node": node, "resource": "cpu", "unit": "core"},
                0.5,
                t,
            ),
            (
                "kube_pod_info",
                {
                    **base,
                    "host_ip": "10.1.0.1",
                    "pod_ip": "10.2.0.7",
                    "node": node,
                    "created_by_kind": owner[0] if owner else "",
                    "created_by_name": owner[1] if owner else "",
                    "priority_class": "",
                    "host_network": "false",
                },
                1.0,
                t,
            ),
        ]
        for p in ("Pending", "Succeeded", "Failed", "Unknown", "Running"):
            out.append(("kube_pod_status_phase", {**base, "phase": p}, float(p == phase), t))
        if owner:
            kind, owned_by = owner
            out.append(
                (
                    "kube_pod_owner",
                    {
                        **base,
                        "owner_kind": kind,
                        "owner_name": owned_by,
                        "owner_is_controller": "true",
                    },
                    1.0,
                    t,
                )
            )
        if labels:
            out.append(("kube_pod_labels", {**base, **labels}, 1.0, t))
    return out


def dcgm(
    host: str, index: int, *, util: float, start: datetime, end: datetime, **w: str
) -> list[Sample]:
    labels = {
        "Hostname": host,
        "gpu": str(index),
        "UUID": f"GPU-{host}-{index}",
        "modelName": H100,
        **w,
    }
    out: list[Sample] = []
    for t in every(start, end, 15):
        out += [
            ("DCGM_FI_DEV_GPU_UTIL", labels, util, t),
            ("DCGM_FI_DEV_FB_USED", labels, 1000.0, t),
        ]
    return out


def cluster() -> list[Sample]:
    """2026-11-23, 10:00–12:00.

    - A nlp/train-llm-0-x1 (Job train-llm, pod label team=llm): 2 GPUs on gpu-node-1, 10–12,
      reported by two kube-state-metrics replicas; DCGM: its GPU 0 at 80%, GPU 1 at 0%.
    - B ds/notebook-0 (no owner): 1 GPU on gpu-node-2 10–11, then Succeeded; no DCGM there.
    - C ml/ft-bert-abc (Job ft-bert): 1 GPU on gpu-node-2, 10–11; a tracked run names it.
    - D web/serve-7d9f-aa (ReplicaSet serve-7d9f of Deployment serve), scraped without
      honorLabels: 1 GPU on gpu-node-1 10–11; DCGM: its GPU 2 at 50%.
    - E ml/queued: asks for a GPU, Pending on no node. GPU 3 of gpu-node-1: no pod, 0%.
    - F ml/odd: a request of 0.5 GPU (no device plugin's: bad data, skipped and named).
    - G ml/greedy: a request of 1,000,000 GPUs on gpu-node-2, which has 2 (anyone who can
      write a pod spec or the series: skipped and named, not $3.85M an hour).
    - Capacity (kube_node_status_capacity): gpu-node-1 4 GPUs, gpu-node-2 2 GPUs.
    """
    ten_to_noon, ten_to_eleven = (TEN, NOON), (TEN, ELEVEN)
    series = [
        *(  # A, from each of two kube-state-metrics replicas
            sample
            for replica in (KSM, KSM2)
            for sample in pod(
                replica,
                "nlp",
                "train-llm-0-x1",
                "uid-a",
                node="gpu-node-1",
                gpus=2,
                running=ten_to_noon,
                owner=("Job", "train-llm"),
                labels={"label_team": "llm"},
            )
        ),
        *pod(KSM, "ds", "notebook-0", "uid-b", node="gpu-node-2", gpus=1, running=ten_to_eleven),
        *pod(
            KSM,
            "ml",
            "ft-bert-abc",
            "uid-c",
            node="gpu-node-2",
            gpus=1,
            running=ten_to_eleven,
            owner=("Job", "ft-bert"),
        ),
        *pod(
            PLAIN,
            "web",
            "serve-7d9f-aa",
            "uid-d",
            node="gpu-node-1",
            gpus=1,
            running=ten_to_eleven,
            owner=("ReplicaSet", "serve-7d9f"),
            until=ELEVEN,
        ),
        *pod(KSM, "ml", "queued", "uid-e", node="", gpus=1, running=(NOON, NOON)),
        *pod(KSM, "ml", "odd", "uid-f", node="gpu-node-2", gpus=0.5, running=ten_to_eleven),
        *pod(
            KSM, "ml", "greedy", "uid-g", node="gpu-node-2", gpus=1_000_000, running=ten_to_eleven
        ),
        *dcgm("gpu-node-1", 0, util=80, start=TEN, end=NOON, pod="train-llm-0-x1", namespace="nlp"),
        *dcgm("gpu-node-1", 1, util=0, start=TEN, end=NOON, pod="train-llm-0-x1", namespace="nlp"),
        *dcgm(
            "gpu-node-1", 2, util=50, start=TEN, end=ELEVEN, pod="serve-7d9f-aa", namespace="web"
        ),
        *dcgm("gpu-node-1", 3, util=0, start=TEN, end=NOON),
    ]
    for t in every(TEN, NOON, 30):
        series.append(
            (
                "kube_replicaset_owner",
                {
                    **PLAIN,
                    "exported_namespace": "web",
                    "replicaset": "serve-7d9f",
                    "owner_kind": "Deployment",
                    "owner_name": "serve",
                    "owner_is_controller": "true",
                },
                1.0,
                t,
            )
        )
        for node, gpus in (("gpu-node-1", 4.0), ("gpu-node-2", 2.0)):
            for resource, value, unit in (
                ("nvidia_com_gpu", gpus, "integer"),
                ("cpu", 64.0, "core"),
                ("memory", 5e11, "byte"),
            ):
                labels = {**KSM, "node": node, "resource": resource, "unit": unit}
                series.append(("kube_node_status_capacity", labels, value, t))
            series.append(
                (
                    "kube_node_labels",
                    {**KSM, "node": node, "label_nvidia_com_gpu_product": "NVIDIA-H100-80GB-HBM3"},
                    1.0,
                    t,
                )
            )
    return series


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("k8s"), cluster()) as url:
        yield url


def _tracked(store_url: str) -> None:
    """C's tracked run: its host is the pod's name, not the node: it joins by its link."""
    rc = run_record(
        "rc",
        TEN,
        1.0,
        gpus=1,
        util=90.0,
        host="ft-bert-abc",
        links={"kubernetes": "ml/ft-bert-abc"},
    )
    with RunStore(store_url) as store:
        store.upsert_run(rc.replace(gpu_source="nvml"))
        store.upsert_samples(minutes("rc", TEN, 60, 90.0, "GPU-c0"))


def _import(
    store_url: str, url: str, since: str, until: str, capsys: pytest.CaptureFixture[str]
) -> str:
    code = main(
        [
            "import",
            "kubernetes",
            url,
            "--since",
            since,
            "--until",
            until,
            "--map",
            "team=team",
            "--account-team",
            "ds=data-science",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_pods_in_the_weekly_report_by_hand(
    prometheus: str,
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GPU_KPI_STORE", store_url)
    _tracked(store_url)
    assert (
        main(
            [
                "import",
                "prometheus",
                prometheus,
                "--since",
                "2026-11-23T10:00",
                "--until",
                "2026-11-23T12:00",
            ]
        )
        == 0
    )
    out = _import(store_url, prometheus, "2026-11-23T09:00", "2026-11-23T13:00", capsys)
    # A 2 × 2 h, B, C, D 1 × 1 h: E never ran, the CPU requests are no GPUs
    assert "imported 4 Kubernetes pod(s) holding 7.0 GPU-h" in out
    assert "skipped pod ml/odd: a GPU request of '0.5': not a count of GPUs" in out
    assert (
        "skipped pod ml/greedy: 1,000,000 GPUs on 1 node(s) that hold at most 2 (2 GPUs known)"
    ) in out
    assert (
        main(["report", "--week", "2026-W48", "--format", "json,html", "--out", str(tmp_path)]) == 0
    )
    html = (tmp_path / "2026-W48.html").read_text()
    assert '<h2 id="h-allocations">Kubernetes allocations</h2>' in html
    assert "Allocated (4 pods)" in html and "by workload and node" in html
    d = json.loads((tmp_path / "2026-W48.json").read_text())["allocations"]
    jobs = {j["shown_id"]: j for j in d["jobs"]}
    assert sorted(jobs) == [
        "ds/notebook-0",
        "ml/ft-bert-abc",
        "nlp/train-llm-0-x1",
        "web/serve-7d9f-aa",
    ]
    a, b, c, dd = (
        jobs[k]
        for k in ("nlp/train-llm-0-x1", "ds/notebook-0", "ml/ft-bert-abc", "web/serve-7d9f-aa")
    )
    # A: its Job's DCGM minutes on its node: GPU 0 busy, GPU 1 at 0% the whole 2 h (idle);
    # GPU 3, no pod's, is nobody's
    assert (a["name"], a["team"], a["gpus"], a["matched"]) == (
        "Job/train-llm",
        "llm",
        2,
        "workload",
    )
    assert (
        a["allocated_gpu_hours"],
        a["sampled_gpu_hours"],
        a["idle_gpu_hours"],
        a["no_samples_gpu_hours"],
    ) == pytest.approx((4.0, 4.0, 2.0, 0.0))
    assert (a["allocated_usd"], a["idle_usd"]) == pytest.approx((4 * PRICE, 2 * PRICE))
    # B: nothing measured it; priced by its node's nvidia.com/gpu.product label
    assert (b["name"], b["team"], b["matched"], b["gpu_model"]) == (
        "notebook-0",
        "data-science",
        "",
        "H100",
    )
    assert (
        b["allocated_gpu_hours"],
        b["no_samples_gpu_hours"],
        b["no_samples_usd"],
    ) == pytest.approx((1.0, 1.0, PRICE))
    # C: by its tracked run's link, though the run's host is the pod's name
    assert (c["name"], c["team"], c["matched"], c["runs"]) == ("Job/ft-bert", "ml", "id", ["rc"])
    assert (
        c["sampled_gpu_hours"],
        c["idle_gpu_hours"],
        c["no_samples_gpu_hours"],
    ) == pytest.approx((1.0, 0.0, 0.0))
    # D: scraped without honorLabels; its Deployment's DCGM run
    assert (dd["name"], dd["team"], dd["matched"]) == ("Deployment/serve", "web", "workload")
    assert (dd["sampled_gpu_hours"], dd["idle_gpu_hours"]) == pytest.approx((1.0, 0.0))
    assert d["totals"]["allocated_gpu_hours"] == pytest.approx(7.0)
    assert d["totals"]["sampled_gpu_hours"] == pytest.approx(6.0)
    assert d["totals"]["idle_usd"] == pytest.approx(2 * PRICE)
    assert d["totals"]["no_samples_usd"] == pytest.approx(PRICE)
    # capacity 4 × 2 h + 2 × 2 h = 12 GPU-h; allocated 7 (58%); busy: A's busy GPU (2 h), C, D
    # (1 h each) = 4; utilization of the 6 GPU-h measured: (80×2 + 0×2 + 90 + 50) / 6 = 50%
    (cap,) = d["capacity"]
    assert (cap["source"], cap["nodes"], cap["gpus"]) == ("kubernetes", 2, 6)
    assert (
        cap["capacity_gpu_hours"],
        cap["allocated_gpu_hours"],
        cap["sampled_gpu_hours"],
        cap["busy_gpu_hours"],
        cap["util_pct"],
        cap["unallocated_gpu_hours"],
    ) == pytest.approx((12.0, 7.0, 6.0, 4.0, 50.0, 5.0))
    assert cap["allocation_pct"] == pytest.approx(700 / 12)
    assert cap["unallocated_owned_usd"] is None  # nothing owned
    assert "Kubernetes: capacity → allocated → busy" in html and "6 GPUs on 2 nodes" in html
    # one pod's note: 4 GPU-h ($15.40), 40% over its sampled time (80% and 0%), half idle
    assert main(["job", "nlp/train-llm-0-x1", "--no-sacct"]) == 0
    note = capsys.readouterr().out
    assert "Job ID: nlp/train-llm-0-x1" in note and "Allocated: 4.0 GPU-h, $15.40" in note
    assert "GPU efficiency: 40.0%" in note and "Verdict: idle" in note
    c = compute(store_url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 2, tzinfo=UTC))
    gauges = kpi_samples(c.kpis, None, c.kpis)
    at = ("2026-W48", "util", "kubernetes")
    assert dict(gauges["gpu_kpi_week_scheduler_allocated_gpu_seconds"]) == {at: 7 * 3600}
    assert dict(gauges["gpu_kpi_week_scheduler_idle_usd"])[at] == pytest.approx(2 * PRICE)
    assert dict(gauges["gpu_kpi_week_scheduler_capacity_gpu_seconds"])[at] == 12 * 3600


def test_ranges_imported_apart_are_one_pod(
    prometheus: str,
    store_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two imports meeting at 11:00 (a weekly job's edge): A, running across it, is one
    allocation 10:00–12:00, not two."""
    monkeypatch.setenv("GPU_KPI_STORE", store_url)
    _import(store_url, prometheus, "2026-11-23T09:00", "2026-11-23T11:00", capsys)
    second = _import(store_url, prometheus, "2026-11-23T11:00", "2026-11-23T13:00", capsys)
    assert "1 pod(s) an earlier import had, now longer" in second
    with RunStore(store_url) as store:
        pods, bad = allocations_in(store, TEN - timedelta(hours=1), NOON + timedelta(hours=1))
    assert bad == 0
    spans = {p.shown_id: (p.start_at, p.until, p.gpus) for p in pods}
    assert spans["nlp/train-llm-0-x1"] == (TEN, NOON, 2)
    assert spans["ds/notebook-0"] == (TEN, ELEVEN, 1)
    with RunStore(store_url) as store:
        nodes, bad = capacity_in(store, TEN - timedelta(hours=1), NOON + timedelta(hours=1))
    assert bad == 0
    # each node one span 10:00–12:00, not one per import
    assert [(n.node, n.start_at, n.end_at, n.gpus) for n in nodes] == [
        ("gpu-node-1", TEN, NOON, 4),
        ("gpu-node-2", TEN, NOON, 2),
    ]
    # a row that is no node's span (anyone with access can write the table): left out, counted
    with RunStore(store_url) as store, store.engine.begin() as conn:
        conn.execute(
            capacity_table.insert(),
            {
                "source": "kubernetes",
                "cluster": "",
                "node": "rogue",
                "start_at": TEN,
                "end_at": NOON,
                "gpus": -3,
                "gpu_model": None,
            },
        )
    with RunStore(store_url) as store:
        nodes, bad = capacity_in(store, TEN, NOON)
    assert (len(nodes), bad) == (2, 1)


def test_a_pod_over_its_nodes_gpus_is_no_holding() -> None:
    """The bound a pod's request is held to: its node's GPUs where Prometheus reported them,
    else 64 a node."""
    from reports.imports.slurm_jobs import over_capacity

    assert over_capacity(2, ("gpu-node-2",), {"gpu-node-2": 2}) is None
    assert over_capacity(3, ("gpu-node-2",), {"gpu-node-2": 2}) == (
        "3 GPUs on 1 node(s) that hold at most 2 (2 GPUs known)"
    )
    assert over_capacity(64, ("gpu-node-9",), {}) is None
    assert over_capacity(65, ("gpu-node-9",), {}) == (
        "65 GPUs on 1 node(s) that hold at most 64 (64 a node whose GPUs are not known)"
    )


def test_the_query_and_label_names() -> None:
    assert label_name("team") == "label_team"
    assert label_name("app.kubernetes.io/part-of") == "label_app_kubernetes_io_part_of"
    assert label_name('label_x"}) or vector(1') == "label_x____or_vector_1"
    assert 'resource="nvidia_com_gpu"' in pods_query()


def _from_nowhere(store: str, *args: str) -> int:
    return main(["import", "kubernetes", "http://127.0.0.1:9", *args, "--store", store])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "2026-W48"], "this import needs --until"),
        (["--since", "2026-W49", "--until", "2026-W48"], "is not before --until"),
        (["--since", "2026-W48", "--until", "2026-W49", "--map", "run=pod"], "team=LABEL"),
        (["--since", "2026-W48", "--until", "2026-W49", "--map", 'team=x"}'], "team=LABEL"),
        (["--since", "2026-W48", "--until", "2026-W49", "--tz", "UTC"], "kubernetes takes"),
        (["--since", "2026-W48", "--until", "2026-W49", "--cluster", "a/b"], "without /"),
        (["--since", "2026-W48", "--until", "2026-W49", "--account-team", "x"], "ACCOUNT=TEAM"),
        (["--since", "2026-W48", "--until", "2026-W49"], "cannot reach Prometheus"),
    ],
)
def test_bad_options_and_a_server_down_are_one_line_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert _from_nowhere(store, *args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs.db").exists() or not _has_table(store)


def _has_table(store: str) -> bool:
    from reports.data.allocations import has_allocations

    with RunStore(store) as s:
        return has_allocations(s)


def test_a_range_with_no_gpu_pod_says_where_to_look(
    prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["--since", "2026-11-20", "--until", "2026-11-21", "--store", store]
    code = main(["import", "kubernetes", prometheus, *args])
    out = capsys.readouterr().out
    assert code == 0
    assert "does this Prometheus scrape kube-state-metrics" in out
    assert "imported 0 Kubernetes pod(s) holding 0.0 GPU-h" in out


def test_a_capacity_value_of_another_shape_is_no_count() -> None:
    """A capacity point whose value is a list (an answer not from Prometheus) was a TypeError
    traceback ("unhashable type"); now it counts for nothing, and the node's other points
    still make its run: 4 GPUs from minute 60 to 180."""
    from reports.imports.kube import _runs_of

    runs: list[list[float]] = []
    _runs_of(runs, [(60.0, "4"), (120.0, ["4"]), (180.0, "4"), (240.0, {"x": 1})], 0.0, 300.0)
    assert runs == [[60.0, 180.0, 4.0]]
