"""``gpu-kpi import prometheus``: a real Prometheus over a TSDB of generated DCGM-exporter
samples (a scrape every 15 s), imported into a real store; busy, idle and unallocated GPUs
checked by hand."""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prom_server import Sample, running_prometheus

from reports.build import compute
from reports.cli import main
from reports.errors import ImportFailed
from reports.imports.prom import UNALLOCATED, LabelMap, chunks, import_prometheus, read_prometheus
from reports.request import Request
from tracker.store import RunStore

pytestmark = pytest.mark.prometheus

H100 = "NVIDIA H100 80GB HBM3"
H100_PRICE = 3.85
TEN = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # Monday of 2026-W48
NOON = TEN + timedelta(hours=2)


def scrapes(
    labels: dict[str, str],
    start: datetime,
    end: datetime,
    *,
    util: float,
    mib: float,
    watts: float,
    sm: float | None = None,
    tensor: float | None = None,
    clock: float | None = None,
) -> list[Sample]:
    """DCGM-exporter's series of one GPU, a scrape every 15 s from ``start`` to ``end``."""
    out: list[Sample] = []
    t = start
    while t <= end:
        ts = t.timestamp()
        out += [
            ("DCGM_FI_DEV_GPU_UTIL", labels, util, ts),
            ("DCGM_FI_DEV_FB_USED", labels, mib, ts),
            ("DCGM_FI_DEV_POWER_USAGE", labels, watts, ts),
        ]
        if sm is not None:
            out.append(("DCGM_FI_PROF_SM_ACTIVE", labels, sm, ts))
        if tensor is not None:  # dcgm-exporter 4.0's defaults both
            out.append(("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", labels, tensor, ts))
        if clock is not None:
            out.append(("DCGM_FI_DEV_SM_CLOCK", labels, clock, ts))
        t += timedelta(seconds=15)
    return out


def gpu(host: str, index: int, uuid: str, **workload: str) -> dict[str, str]:
    return {"Hostname": host, "gpu": str(index), "UUID": uuid, "modelName": H100, **workload}


def fleet() -> list[Sample]:
    """node1: GPU-a runs train-1 (nlp) at 80% for an hour (tensor pipes active 60% of cycles
    at 1,647 MHz, 90% of the 1,830 MHz an H100's peak is quoted at), then sits unallocated at
    0%; GPU-b runs train-1 at 40%, then eval-2 (vision) at 3% (idle). node2: GPU-c unallocated
    for two hours."""
    last = TEN + timedelta(minutes=59, seconds=45)
    eleven = TEN + timedelta(hours=1)
    train = {"pod": "train-1", "namespace": "nlp", "container": "main"}
    return [
        *scrapes(
            gpu("node1", 0, "GPU-a", **train),
            TEN,
            last,
            util=80,
            mib=40960,
            watts=500,
            sm=0.7,
            tensor=0.6,
            clock=1647,
        ),
        *scrapes(gpu("node1", 0, "GPU-a"), eleven, NOON, util=0, mib=0, watts=60),
        *scrapes(gpu("node1", 1, "GPU-b", **train), TEN, last, util=40, mib=20480, watts=300),
        *scrapes(
            gpu("node1", 1, "GPU-b", pod="eval-2", namespace="vision"),
            eleven,
            NOON,
            util=3,
            mib=1024,
            watts=80,
        ),
        *scrapes(gpu("node2", 0, "GPU-c"), TEN, NOON, util=0, mib=0, watts=60),
    ]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("prom"), fleet()) as url:
        yield url


def test_busy_idle_and_unallocated_gpus_by_hand(prometheus: str, store_url: str) -> None:
    done = import_prometheus(store_url, prometheus, since=TEN, until=NOON, progress=False)
    runs = {r.name: r for r in done.records}
    assert sorted(runs) == [
        "eval-2",
        "train-1",
        "unallocated node1 GPU 0",
        "unallocated node2 GPU 0",
    ]
    train = runs["train-1"]
    assert (train.source, train.team, train.host, train.gpu_model, train.gpu_count) == (
        "prometheus",
        "nlp",
        "node1",
        "H100",
        2,
    )
    assert (train.started_at, train.ended_at) == (TEN, TEN + timedelta(hours=1))
    assert train.gpu_hours == pytest.approx(2.0)
    assert train.util_pct == pytest.approx((80 + 40) / 2)
    assert train.cost_usd == pytest.approx(2 * H100_PRICE)
    assert train.energy_kwh == pytest.approx(0.5 + 0.3)
    assert train.mem_peak_gib == pytest.approx(40.0)
    assert train.waste_usd == pytest.approx(H100_PRICE * (1 - 80 / 85) + H100_PRICE * (1 - 40 / 85))
    assert train.sm_active_pct == pytest.approx(70.0)  # GPU-a only: GPU-b has no profiling
    # observed FLOPs utilization, GPU-a's alone: 0.6 x 1647 / 1830 (issue 45); no MFU
    assert train.ofu == pytest.approx(0.6 * 1647 / 1830) and train.mfu is None
    ev = runs["eval-2"]
    assert (ev.team, ev.gpu_hours, ev.idle_usd) == (
        "vision",
        pytest.approx(1.0),
        pytest.approx(H100_PRICE),
    )
    un1, un2 = runs["unallocated node1 GPU 0"], runs["unallocated node2 GPU 0"]
    assert (un1.team, un1.tags, un1.gpu_hours) == (
        UNALLOCATED,
        ("unallocated",),
        pytest.approx(1.0),
    )
    assert (un2.gpu_hours, un2.idle_usd) == (pytest.approx(2.0), pytest.approx(2 * H100_PRICE))
    # the weekly report: unallocated GPU-time is a row of the team breakdown
    k = compute(
        store_url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 7, tzinfo=UTC)
    ).kpis
    by = k.by["team"].set_index("team")
    assert by.loc[UNALLOCATED, "gpu_hours"] == pytest.approx(3.0)
    assert by.loc[UNALLOCATED, "spend_usd"] == pytest.approx(3 * H100_PRICE)
    assert k.headline.gpu_hours == pytest.approx(6.0)
    with RunStore(store_url) as store:
        assert len(store.samples()) == 6 * 60  # a row per GPU-minute


def test_importing_the_range_again_adds_nothing_and_chunks_join(
    prometheus: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    first = import_prometheus(url, prometheus, since=TEN, until=NOON, progress=False)
    again = import_prometheus(url, prometheus, since=TEN, until=NOON, progress=False)
    assert sorted(r.id for r in again.records) == sorted(r.id for r in first.records)
    with RunStore(url) as store:
        assert len(store.list_runs()) == 4 and len(store.samples()) == 360
    # 7-minute chunks (18 queries a metric) give the same minutes as one
    import reports.imports.prom as prom

    small = read_prometheus(prometheus, since=TEN, until=NOON, progress=False)
    prom.CHUNK_POINTS, saved = 7, prom.CHUNK_POINTS
    try:
        chunked = read_prometheus(prometheus, since=TEN, until=NOON, progress=False)
    finally:
        prom.CHUNK_POINTS = saved
    assert sorted((s.run_id, s.gpu, s.minute, s.util_pct) for s in chunked.samples) == sorted(
        (s.run_id, s.gpu, s.minute, s.util_pct) for s in small.samples
    )


def test_the_label_map_names_runs_and_owners(prometheus: str) -> None:
    done = read_prometheus(
        prometheus,
        since=TEN,
        until=NOON,
        progress=False,
        mapping=LabelMap(run=("container",), team="", project="namespace"),
    )
    runs = {r.name: r for r in done.records}
    assert runs["main"].project == "nlp" and runs["main"].team == ""
    # eval-2 has no container label: its GPU's hour is unallocated by this map
    assert runs["unallocated node1 GPU 1"].gpu_hours == pytest.approx(1.0)


def test_chunks_are_whole_minutes_and_never_overlap() -> None:
    got = list(chunks(30.0, 60.0 * 725 + 10, points=360))
    assert got == [(60.0, 60.0 * 360), (60.0 * 361, 60.0 * 720), (60.0 * 721, 60.0 * 725)]


def import_from_nowhere(store: str, *args: str) -> int:
    """``gpu-kpi import prometheus`` of a port nothing listens on, with ``args``; its exit."""
    return main(["import", "prometheus", "http://127.0.0.1:9", *args, "--store", store])


def test_a_prometheus_that_is_down_or_foreign_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert import_from_nowhere(url, "--since", "2026-W48", "--until", "2026-W49") == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-kpi: error: http://127.0.0.1:9: cannot reach Prometheus")
    assert err.count("\n") == 1

    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>grafana</html>")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ImportFailed, match="the answer is not JSON"):
            read_prometheus(
                f"http://127.0.0.1:{server.server_port}", since=TEN, until=NOON, progress=False
            )
    finally:
        server.shutdown()
    with RunStore(url) as store:
        assert store.list_runs() == []


def test_a_refused_query_names_the_url(prometheus: str) -> None:
    import reports.imports.prom as prom

    saved = prom.FIELDS.copy()
    prom.FIELDS["DCGM_FI_DEV_GPU_UTIL{"] = ("util_pct", 1.0, "avg", 0.0, 100.0)
    try:
        with pytest.raises(ImportFailed, match=rf"^{prometheus}: Prometheus answered 400: "):
            read_prometheus(prometheus, since=TEN, until=NOON, progress=False)
    finally:
        prom.FIELDS.clear()
        prom.FIELDS.update(saved)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "2026-W48"], "this import needs --until"),
        (["--since", "2026-W49", "--until", "2026-W48"], "is not before --until"),
        (["--since", "2026-W01", "--until", "2027-W10"], "over a year"),
        (
            ["--since", "yesterday", "--until", "2026-W48"],
            "--since: expected YYYY-Www, YYYY-MM-DD or YYYY-MM-DDTHH:MM, got 'yesterday'",
        ),
        (["--since", "2026-W48", "--until", "2026-W49", "--map", "cost=pod"], "KEY=LABEL"),
        (["--since", "2026-W48", "--until", "2026-W49", "--tz", "UTC"], "not for Prometheus"),
    ],
)
def test_bad_options_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert import_from_nowhere(f"sqlite:///{tmp_path / 'runs.db'}", *args) == 2
    assert message in capsys.readouterr().err


class Fake(http.server.BaseHTTPRequestHandler):
    """Answers every request with the server's ``status``, ``body`` and ``headers``; records
    the requests' Authorization headers."""

    def do_GET(self) -> None:
        srv: Any = self.server
        srv.seen.append(self.headers.get("Authorization"))
        self.send_response(srv.status)
        for k, v in srv.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(srv.body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def fake(status: int = 200, body: object = b"", **headers: str) -> Iterator[Any]:
    server: Any = http.server.HTTPServer(("127.0.0.1", 0), Fake)
    server.status, server.headers, server.seen = status, headers, []
    server.body = body if isinstance(body, bytes) else json.dumps(body).encode()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_refused_and_the_token_stays_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_KPI_PROMETHEUS_TOKEN", "s3cret")
    with fake(body={"status": "success", "data": {"resultType": "matrix", "result": []}}) as evil:
        target = f"http://127.0.0.1:{evil.server_port}/api/v1/query_range"
        with fake(302, Location=target) as home:
            with pytest.raises(ImportFailed, match=r"answered 302, a redirect to http://127"):
                read_prometheus(
                    f"http://127.0.0.1:{home.server_port}", since=TEN, until=NOON, progress=False
                )
            assert home.seen == ["Bearer s3cret"]
        assert evil.seen == []  # never asked, never given the token


@pytest.mark.parametrize("token", ["s3cret\r\nX-Evil: 1", "s3cret\n", "s3cr\u00e9t"])
def test_a_token_no_header_may_carry_is_named_not_called_json(
    monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    """Before: "the answer is not JSON" (urllib refused the header). Now the variable is named,
    and nothing is sent."""
    monkeypatch.setenv("GPU_KPI_PROMETHEUS_TOKEN", token)
    with fake(body={"status": "success", "data": {"resultType": "matrix", "result": []}}) as s:
        with pytest.raises(ImportFailed, match=r"^GPU_KPI_PROMETHEUS_TOKEN holds a line break"):
            read_prometheus(f"http://127.0.0.1:{s.server_port}", since=TEN, until=NOON)
        assert s.seen == []


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ([{"metric": {}, "values": 5}], "a series of unexpected shape"),
        (["x"], "a series of unexpected shape"),
        ([{"metric": [], "values": []}], "a series of unexpected shape"),
        ([{"metric": {}, "values": [[1, 2, 3]]}], "a series of unexpected shape"),
        ([{"metric": {}, "values": [["abc", "1"]]}], "a series of unexpected shape"),
        ([{"metric": {}, "values": [["NaN", "1"]]}], "a point at nan s since 1970: no time"),
        ([{"metric": {}, "values": [["1e20", "1"]]}], "a point at 1e+20 s since 1970: no time"),
    ],
    ids=["values-int", "series-str", "metric-list", "triple", "time-text", "time-nan", "time-huge"],
)
def test_an_odd_answer_is_one_line_naming_the_url(result: object, message: str) -> None:
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    with fake(body=body) as server:
        url = f"http://127.0.0.1:{server.server_port}"
        with pytest.raises(ImportFailed, match=rf"^{url}: {re.escape(message)}"):
            read_prometheus(url, since=TEN, until=NOON, progress=False)


def test_credentials_in_the_url_are_refused_and_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "import",
                "prometheus",
                "http://admin:hunter2@127.0.0.1:9",
                "--since",
                "2026-W48",
                "--until",
                "2026-W49",
                "--store",
                f"sqlite:///{tmp_path / 'r.db'}",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "hunter2" not in err and "put a bearer token in GPU_KPI_PROMETHEUS_TOKEN" in err


def test_a_tracked_run_on_a_gpu_skips_that_run_not_the_fleet(
    prometheus: str, tmp_path: Path
) -> None:
    """train-1's GPU-a was tracked by our callback: train-1 is skipped and named, the rest of
    the fleet goes in."""
    from fakes import run_record

    from reports.imports.play import OVERLAPS
    from tracker.record import MinuteSample

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store:
        store.put(
            [run_record("tracked", TEN, 1)],
            [
                MinuteSample(
                    run_id="tracked",
                    gpu="GPU-a",
                    minute=TEN + timedelta(minutes=m),
                    covered_s=60.0,
                    util_pct=80.0,
                )
                for m in range(30)
            ],
        )
    done = import_prometheus(url, prometheus, since=TEN, until=NOON, progress=False)
    assert done.skipped == {OVERLAPS: ["train-1"]}
    assert sorted(r.name for r in done.records) == [
        "eval-2",
        "unallocated node1 GPU 0",
        "unallocated node2 GPU 0",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--map", "team=team,namespace"], "LABEL a Prometheus label name"),
        (["--map", "run=pod,bad-label"], "LABEL a Prometheus label name"),
        (["--map", "team=a", "--map", "team=b"], "--map team= given twice"),
    ],
)
def test_bad_label_maps_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    store = f"sqlite:///{tmp_path / 'r.db'}"
    assert import_from_nowhere(store, "--since", "2026-W48", "--until", "2026-W49", *args) == 2
    assert message in capsys.readouterr().err


# -- behind kube-prometheus: the labels a ServiceMonitor scrape of dcgm-exporter gives -----------
EXPORTER = {
    "pod": "nvidia-dcgm-exporter-x7k2p",  # the scrape target: the exporter's own pod
    "namespace": "gpu-operator",
    "container": "nvidia-dcgm-exporter",
    "service": "nvidia-dcgm-exporter",
    "endpoint": "gpu-metrics",
    "job": "nvidia-dcgm-exporter",
    "instance": "10.0.0.5:9400",
}


def kube_gpu(index: int, uuid: str, **workload: str) -> dict[str, str]:
    """A current dcgm-exporter's GPU labels (``hostname``, lowercase) with the target's, and
    the workload's renamed ``exported_*`` as Prometheus does when they clash."""
    return {
        "hostname": "node7",
        "gpu": str(index),
        "UUID": uuid,
        "modelName": H100,
        **EXPORTER,
        **{f"exported_{k}": v for k, v in workload.items()},
    }


@pytest.fixture(scope="module")
def kube_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """node7: GPU-k0 runs train-9 (namespace nlp) at 90% for two hours; GPU-k1 is held by no
    workload (only the exporter's labels) at 0%."""
    series = [
        *scrapes(
            kube_gpu(0, "GPU-k0", pod="train-9", namespace="nlp", container="main"),
            TEN,
            NOON,
            util=90,
            mib=60000,
            watts=600,
        ),
        *scrapes(kube_gpu(1, "GPU-k1"), TEN, NOON, util=0, mib=0, watts=60),
    ]
    with running_prometheus(tmp_path_factory.mktemp("kube"), series) as url:
        yield url


def test_a_servicemonitor_scrape_names_the_workload_not_the_exporter(
    kube_prometheus: str, tmp_path: Path
) -> None:
    """Before: both GPUs became one run named nvidia-dcgm-exporter-x7k2p (team gpu-operator),
    busy and idle merged, no host. Now: train-9 (nlp) holds GPU-k0 for 2 h at 90% ($7.70), and
    GPU-k1 is unallocated for 2 h (idle: $7.70), both on node7; the note says why."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    done = import_prometheus(url, kube_prometheus, since=TEN, until=NOON, progress=False)
    runs = {r.name: r for r in done.records}
    assert sorted(runs) == ["train-9", "unallocated node7 GPU 1"]
    train, idle = runs["train-9"], runs["unallocated node7 GPU 1"]
    assert (train.team, train.host, train.gpu_count) == ("nlp", "node7", 1)
    assert train.gpu_hours == pytest.approx(2.0) and train.util_pct == pytest.approx(90.0)
    assert train.cost_usd == pytest.approx(2 * H100_PRICE)
    assert (idle.team, idle.host, idle.tags) == (UNALLOCATED, "node7", ("unallocated",))
    assert idle.gpu_hours == pytest.approx(2.0) and idle.idle_usd == pytest.approx(2 * H100_PRICE)
    (note,) = done.notes
    assert note.startswith("1 GPU(s) carried only the exporter's own pod label")


# -- a GPU time-sliced between pods (dcgm-exporter --kubernetes-virtual-gpus) --------------------
@pytest.fixture(scope="module")
def sliced_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """node7's GPU-s0, time-sliced: infer-a (namespace web) holds it from 10:00 to 12:00,
    infer-b (web) from 11:00 too. The exporter gives each pod a copy of the GPU's series
    (label ``vgpu``), with the whole GPU's figures: 40% while infer-a is alone, 80% from 10:59
    (no scrape at 10:59:00 itself: the minute is 80% whether the server's range selectors
    include their left edge, as Prometheus 2 does, or not)."""
    eleven = TEN + timedelta(hours=1)
    a = kube_gpu(0, "GPU-s0", pod="infer-a", namespace="web", container="main") | {"vgpu": "0"}
    b = kube_gpu(0, "GPU-s0", pod="infer-b", namespace="web", container="main") | {"vgpu": "1"}
    series = [
        *scrapes(a, TEN, eleven - timedelta(seconds=75), util=40, mib=8000, watts=200),
        *scrapes(a, eleven, NOON, util=80, mib=16000, watts=400),
        *scrapes(b, eleven, NOON, util=80, mib=16000, watts=400),
    ]
    with running_prometheus(tmp_path_factory.mktemp("sliced"), series) as url:
        yield url


def test_a_time_sliced_gpu_is_split_between_its_pods(
    sliced_prometheus: str, tmp_path: Path
) -> None:
    """Before: infer-b was dropped ("a GPU of theirs has minutes of another run of this
    import"), its hour billed to infer-a whole. Now the GPU's two hours are split minute by
    minute: 10:00–11:00 infer-a alone (60 min), 11:00–12:00 half each (30 min each).
    infer-a: 1.5 GPU-h, utilization (59 × 60 s × 40% + 60 s × 80% + 60 × 30 s × 80%) /
    5,400 s = 53.78%,
    $3.85 × 1.5 = $5.775; infer-b: 0.5 GPU-h at 80%, $1.925. Together the GPU's 2 h, $7.70."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    done = import_prometheus(url, sliced_prometheus, since=TEN, until=NOON, progress=False)
    assert done.skipped == {}
    runs = {r.name: r for r in done.records}
    assert sorted(runs) == ["infer-a", "infer-b"]
    a, b = runs["infer-a"], runs["infer-b"]
    assert a.gpu_hours == pytest.approx(1.5) and b.gpu_hours == pytest.approx(0.5)
    assert a.util_pct == pytest.approx((59 * 60 * 40 + 60 * 80 + 60 * 30 * 80) / 5400)
    assert b.util_pct == pytest.approx(80.0)
    assert a.cost_usd == pytest.approx(1.5 * H100_PRICE)
    assert b.cost_usd == pytest.approx(0.5 * H100_PRICE)
    assert a.tags == b.tags == ("time-sliced",)
    assert (a.team, a.host, a.gpu_count) == ("web", "node7", 1)
    (note,) = done.notes
    assert note.startswith("1 GPU(s) were time-sliced: 2 runs held one at the same time")

    with RunStore(url) as store:
        minutes = store.engine.connect().exec_driver_sql(
            "SELECT run_id, SUM(covered_s) FROM samples GROUP BY run_id"
        )
        covered = {run_id: total for run_id, total in minutes}
    assert covered == {a.id: pytest.approx(90 * 60), b.id: pytest.approx(30 * 60)}
    k = compute(url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 7, tzinfo=UTC)).kpis
    assert k.headline.gpu_hours == pytest.approx(2.0)
    assert k.headline.spend_usd == pytest.approx(2 * H100_PRICE)
    per_run = {r["name"]: r for r in k.runs.to_dict("records")}
    assert per_run["infer-a"]["gpu_hours"] == pytest.approx(1.5)
    assert per_run["infer-a"]["utilization_pct"] == pytest.approx(a.util_pct)


# -- kube-state-metrics' owners: one run per Job, Deployment or JobSet, not per pod ---------------
KSM = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}  # honorLabels: the objects'


def owner(metric: str, start: datetime, end: datetime, **labels: str) -> list[Sample]:
    """A kube-state-metrics owner series (value 1), scraped every 30 s from start to end."""
    out: list[Sample] = []
    t = start
    while t <= end:
        out.append((metric, {**KSM, "owner_is_controller": "true", **labels}, 1.0, t.timestamp()))
        t += timedelta(seconds=30)
    return out


@pytest.fixture(scope="module")
def owned_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """node7, 10:00–12:00. Job train-llm (nlp): pods train-llm-0-x1 on GPU-j0 and train-llm-1-x2
    on GPU-j1 at 70%. Deployment serve (web): pod serve-7d9f-aa on GPU-j2 until 11:00, then
    after a rollout serve-5c2b-bb on the same GPU, each pod owned by its ReplicaSet, both
    ReplicaSets by the Deployment. JobSet js (nlp): pod js-workers-0-0-q of Job js-workers-0 on
    GPU-j3. Pod debug (nlp), owned by nothing, on GPU-j4."""
    eleven = TEN + timedelta(hours=1)
    before = eleven - timedelta(seconds=15)

    def on(index: int, pod: str, ns: str, start: datetime, end: datetime) -> list[Sample]:
        labels = kube_gpu(index, f"GPU-j{index}", pod=pod, namespace=ns, container="main")
        return scrapes(labels, start, end, util=70, mib=30000, watts=400)

    series = [
        *on(0, "train-llm-0-x1", "nlp", TEN, NOON),
        *on(1, "train-llm-1-x2", "nlp", TEN, NOON),
        *on(2, "serve-7d9f-aa", "web", TEN, before),
        *on(2, "serve-5c2b-bb", "web", eleven, NOON),
        *on(3, "js-workers-0-0-q", "nlp", TEN, NOON),
        *on(4, "debug", "nlp", TEN, NOON),
    ]
    pods = [
        ("train-llm-0-x1", "nlp", "Job", "train-llm", TEN, NOON),
        ("train-llm-1-x2", "nlp", "Job", "train-llm", TEN, NOON),
        ("serve-7d9f-aa", "web", "ReplicaSet", "serve-7d9f", TEN, before),
        ("serve-5c2b-bb", "web", "ReplicaSet", "serve-5c2b", eleven, NOON),
        ("js-workers-0-0-q", "nlp", "Job", "js-workers-0", TEN, NOON),
    ]
    for pod, ns, kind, name, start, end in pods:
        series += owner(
            "kube_pod_owner", start, end, namespace=ns, pod=pod, owner_kind=kind, owner_name=name
        )
    for rs in ("serve-7d9f", "serve-5c2b"):
        series += owner(
            "kube_replicaset_owner",
            TEN,
            NOON,
            namespace="web",
            replicaset=rs,
            owner_kind="Deployment",
            owner_name="serve",
        )
    series += owner(
        "kube_job_owner",
        TEN,
        NOON,
        namespace="nlp",
        job_name="js-workers-0",
        owner_kind="JobSet",
        owner_name="js",
    )
    with running_prometheus(tmp_path_factory.mktemp("owned"), series) as url:
        yield url


def test_pods_of_one_workload_are_one_run(owned_prometheus: str, tmp_path: Path) -> None:
    """Before: a run per pod (train-llm-0-x1 and train-llm-1-x2; serve's two rollouts; the
    JobSet's pod). Now: train-llm is one run of 2 GPUs × 2 h = 4 GPU-h ($15.40); serve one run
    of 1 GPU for its two pods' 2 h; js one run (its Job's owner); debug, owned by nothing, the
    pod's run as before."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    done = import_prometheus(url, owned_prometheus, since=TEN, until=NOON, progress=False)
    runs = {r.name: r for r in done.records}
    assert sorted(runs) == ["debug", "js", "serve", "train-llm"]
    llm, serve = runs["train-llm"], runs["serve"]
    assert (llm.gpu_count, llm.team) == (2, "nlp")
    assert llm.gpu_hours == pytest.approx(4.0) and llm.cost_usd == pytest.approx(4 * H100_PRICE)
    assert (serve.gpu_count, serve.team) == (1, "web")
    assert serve.gpu_hours == pytest.approx(2.0)
    assert runs["js"].gpu_hours == runs["debug"].gpu_hours == pytest.approx(2.0)
    assert done.notes == [
        "5 pod(s) are 3 workload(s) by kube-state-metrics' owners (Deployment, Job, JobSet): "
        "one run per workload, not per pod"
    ]
    with RunStore(url) as store:
        assert sum(r.gpu_hours or 0 for r in store.list_runs()) == pytest.approx(10.0)


def test_points_outside_the_range_asked_for_are_left_out_and_said() -> None:
    """A server that ignores start and end (a proxy, a bug) answered points in 2025 and 2037
    beside the hour asked for: before, runs dated 2025 or 2037 landed. Now only 10:00–11:00
    counts (60 minutes after the first point), and the note says how many were left out."""
    labels = {"Hostname": "n1", "gpu": "0", "UUID": "GPU-z", "modelName": H100, "pod": "p"}
    hour = [[(TEN + timedelta(minutes=m)).timestamp(), "50"] for m in range(61)]
    stray = [[datetime(2025, 1, 1, tzinfo=UTC).timestamp(), "50"], [2114380800.0, "50"]]
    body = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": labels, "values": stray + hour}]},
    }
    with fake(body=body) as server:
        url = f"http://127.0.0.1:{server.server_port}"
        done = read_prometheus(url, since=TEN, until=TEN + timedelta(hours=1), progress=False)
    (run,) = done.records
    assert run.started_at == TEN and run.ended_at == TEN + timedelta(hours=1)
    assert run.gpu_hours == pytest.approx(1.0)
    assert {s.minute.year for s in done.samples} == {2026}
    # two stray points in the answer to each of the 21 names asked for (the fake answers
    # alike): 8 fields (the SM clock among them), 4 of them by DCGM 4.6's name too,
    # DCGM_FI_DEV_GPU_UTIL_RATIO (its unit's two queries are no range's points) and the 8
    # counters
    assert (
        "42 point(s) the server answered outside the range asked for were left out "
        "(a Prometheus that ignores start and end?)"
    ) in done.notes


# -- answers no Prometheus gives: one line each, never a traceback or a hang ----------------------
@contextmanager
def raw(answer: bytes, *, drip_s: float = 0.0, sent: list[int] | None = None) -> Iterator[str]:
    """A server that answers every connection with ``answer`` as it is (no HTTP library),
    a byte every ``drip_s`` seconds after the first 100 when given; ``sent`` gets the bytes
    each connection took before the client left."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            count = 0
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(answer[:100])
                    count = 100
                    for i in range(100, len(answer)):
                        if stop.wait(drip_s):
                            break
                        conn.sendall(answer[i : i + 1])
                        count += 1
                except OSError:
                    pass
            if sent is not None:
                sent.append(count)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()


def http_answer(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HTTP/1.1 abc\r\n\r\n", "not an HTTP answer Prometheus would give (BadStatusLine"),
        (
            http_answer(b"{}", *(f"X-{i}: y" for i in range(120))),
            "not an HTTP answer Prometheus would give (HTTPException: got more than 100 headers)",
        ),
        (
            http_answer(b"{}", "X-Long: " + "y" * 70_000),
            "not an HTTP answer Prometheus would give (LineTooLong",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n",
            "not an HTTP answer Prometheus would give (IncompleteRead",
        ),
        (http_answer(b"[" * 200_000), "an answer nested too deeply"),
    ],
    ids=["status-line", "headers", "long-header", "chunked", "nested-json"],
)
def test_a_malformed_answer_is_one_line_naming_the_url(answer: bytes, message: str) -> None:
    with raw(answer) as url, pytest.raises(ImportFailed) as e:
        read_prometheus(url, since=TEN, until=NOON, progress=False)
    assert str(e.value).startswith(f"{url}: {message}"), str(e.value)


def test_a_server_that_drips_its_answer_meets_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, each read waited at most the timeout, so a byte every few seconds kept the
    import going far past the documented limit. The deadline is on the whole answer now."""
    monkeypatch.setattr("reports.imports.prom.TIMEOUT_S", 1.0)
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}})
    answer = http_answer(body.encode() + b" " * 2000)  # 400 s at a byte every 0.2 s
    sent: list[int] = []
    with (
        raw(answer, drip_s=0.2, sent=sent) as url,
        pytest.raises(ImportFailed, match=r": no whole answer in 1 s$"),
    ):
        read_prometheus(url, since=TEN, until=NOON, progress=False)
    (taken,) = sent
    assert taken < len(answer)  # it left mid-answer, not after the whole of it


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://[::1", "http://[::1: not a URL (Invalid IPv6 URL)"),
        ("http://prom:99999", "http://prom:99999: not a URL (Port out of range 0-65535)"),
        ("http://prom\x00x:9090", "a Prometheus URL is http:// or https://HOST[:PORT]"),
        ("http://prom 9090", "a Prometheus URL is http:// or https://HOST[:PORT]"),
    ],
)
def test_a_malformed_url_is_one_line(url: str, message: str) -> None:
    with pytest.raises(ImportFailed) as e:
        read_prometheus(url, since=TEN, until=NOON, progress=False)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_chunk_whose_answer_is_too_large_is_asked_for_in_halves(
    prometheus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers are capped (the parse takes several times an answer's size); a chunk over the
    cap is asked for again in halves, down to a minute: the same runs and minutes as with no cap
    that bites. With 4,000 bytes, the two-hour chunk of 5 series is read in ~25-minute pieces."""
    import reports.imports.prom as prom

    whole = read_prometheus(prometheus, since=TEN, until=NOON, progress=False)
    asked: list[str] = []
    real_get = prom._get

    def counted(url: str, params: dict[str, str], token: str | None) -> Any:
        asked.append(params["start"])
        return real_get(url, params, token)

    monkeypatch.setattr(prom, "_get", counted)
    monkeypatch.setattr(prom, "MAX_ANSWER_BYTES", 4000)
    halved = read_prometheus(prometheus, since=TEN, until=NOON, progress=False)
    assert len(set(asked)) > 4  # the chunk was asked for from several starts: it was split
    assert sorted(halved.records, key=lambda r: r.id) == sorted(whole.records, key=lambda r: r.id)
    assert sorted(halved.samples, key=lambda s: (s.run_id, s.gpu, s.minute)) == sorted(
        whole.samples, key=lambda s: (s.run_id, s.gpu, s.minute)
    )
    monkeypatch.setattr("reports.imports.prom.MAX_ANSWER_BYTES", 100)
    with pytest.raises(ImportFailed, match=r"an answer of over 100 bytes, for one minute"):
        read_prometheus(prometheus, since=TEN, until=NOON, progress=False)


def dcgm_46(labels: dict[str, str], utils: list[float], **more: float) -> list[Sample]:
    """One GPU's hour (from 10:00, a scrape every 15 s) as an exporter on DCGM 4.6's names
    exports it: ``DCGM_FI_DEV_GPU_UTIL_RATIO`` cycling through ``utils`` (none: not
    exported), and ``more`` fields at a fixed value."""
    out: list[Sample] = []
    for i in range(240):
        ts = (TEN + timedelta(seconds=15 * i)).timestamp()
        if utils:
            out.append(("DCGM_FI_DEV_GPU_UTIL_RATIO", labels, utils[i % len(utils)], ts))
        out += [(name, labels, value, ts) for name, value in more.items()]
    return out


@pytest.fixture(scope="module")
def dcgm_46_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Six GPUs on exporters of DCGM 4.6's field names (the ``hostname`` label of 4.8.3 on):
    a percent, a ratio, a GPU of 0 and 1 alone (1% or 100%?), one at 0, one that also exports
    the old name, and one (a MIG instance's way) with the graphics engine's activity alone."""

    def labels(uuid: str, pod: str) -> dict[str, str]:
        return {
            "hostname": "node9",
            "gpu": uuid[-1],
            "UUID": uuid,
            "modelName": H100,
            "pod": pod,
            "namespace": "nlp",
        }

    samples = [
        *dcgm_46(labels("GPU-1", "pct"), [80.0], DCGM_FI_DEV_BOARD_POWER_WATTS=500.0),
        *dcgm_46(
            labels("GPU-2", "ratio"),
            [0.4],
            DCGM_FI_PROF_SM_UTIL_RATIO=0.3,
            DCGM_FI_PROF_TENSOR_UTIL_RATIO=0.2,
            DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO=0.5,
        ),
        *dcgm_46(labels("GPU-3", "ones"), [0.0, 1.0]),
        *dcgm_46(labels("GPU-4", "zero"), [0.0]),
        *dcgm_46(labels("GPU-5", "both"), [1.0], DCGM_FI_DEV_GPU_UTIL=1.0),
        *dcgm_46(labels("GPU-6", "engine"), [], DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO=0.25),
    ]
    with running_prometheus(tmp_path_factory.mktemp("prom46"), samples) as url:
        yield url


def test_dcgm_4_6_names_are_read_each_util_in_the_unit_its_values_show(
    dcgm_46_prometheus: str,
) -> None:
    done = read_prometheus(dcgm_46_prometheus, since=TEN, until=NOON, progress=False)
    runs = {r.name: r for r in done.records}
    assert sorted(runs) == ["both", "engine", "ones", "pct", "ratio", "zero"]
    # integer percent (a value over 1): as it is; a fraction: a ratio, times 100
    assert runs["pct"].util_pct == pytest.approx(80.0)
    assert runs["pct"].energy_kwh == pytest.approx(0.5)  # 500 W for an hour, by its new name
    assert runs["ratio"].util_pct == pytest.approx(40.0)
    assert runs["ratio"].sm_active_pct == pytest.approx(30.0)
    # all 0: 0 either way; 0 and 1 with the old name beside it: the old name's 1%
    assert runs["zero"].util_pct == pytest.approx(0.0)
    assert runs["both"].util_pct == pytest.approx(1.0)
    # 0 and 1 alone: 1% or 100%, not guessed; its hour held, measured by nothing
    assert runs["ones"].util_pct is None and runs["ones"].gpu_hours == pytest.approx(1.0)
    (note,) = [n for n in done.notes if "DCGM_FI_DEV_GPU_UTIL_RATIO" in n]
    assert note.startswith("1 series of DCGM_FI_DEV_GPU_UTIL_RATIO held only 0 and 1")
    sm = [s.sm_active_pct for s in done.samples if s.run_id == runs["ratio"].id]
    assert len(sm) == 60 and sm == [pytest.approx(30.0)] * 60
    # the graphics engine's activity, by its new name, where no utilization is exported
    assert runs["engine"].util_pct == pytest.approx(25.0)


# DCGM 4.6's cycle counters and DCGM 4.2's throttle counters (dcgm_fields.h @ 4.6.0: ids
# 1084/1085 and 1420-1424): SM clock 1.98 GHz for the first half hour, then 1.4 GHz; an SM
# active 60% of the cycles, then 30%; the power cap holding the clocks half of each second
# from 10:20 to 10:30 (300 s) and thermal slowdown from 10:40 to 10:50 (600 s)
HALF_S = 1800.0


def _elapsed(s: float) -> float:
    return 1.98e9 * min(s, HALF_S) + 1.4e9 * max(s - HALF_S, 0.0)


def _active(s: float) -> float:
    return 0.6 * 1.98e9 * min(s, HALF_S) + 0.3 * 1.4e9 * max(s - HALF_S, 0.0)


def _held(s: float, start_min: float, end_min: float, share: float) -> float:
    """Nanoseconds held in [start, end) minutes of the hour up to ``s`` seconds, at ``share``."""
    return 1e9 * share * max(0.0, min(s, 60 * end_min) - 60 * start_min)


def counters_46(labels: dict[str, str], *, old: bool = False) -> list[Sample]:
    """One GPU's hour of scrapes (every 15 s from 10:00) of the counters above, by DCGM 4.x's
    names, or (``old``) by the violation counters of DCGM before 4.2 (ids 240, 241), with
    ``DCGM_FI_DEV_GPU_UTIL_RATIO`` at 92 (percent, as DCGM 4.6 fills it) and, beside the
    counters, the SM activity gauge a time-weighted mean would read (45%)."""
    out: list[Sample] = []
    base = 1e12  # counters run since the driver loaded, never from 0
    for i in range(240):
        s = 15.0 * i
        ts = (TEN + timedelta(seconds=s)).timestamp()
        power, thermal = _held(s, 20, 30, 0.5), _held(s, 40, 50, 1.0)
        out += [
            ("DCGM_FI_DEV_GPU_UTIL_RATIO", labels, 92.0, ts),
            ("DCGM_FI_PROF_SM_UTIL_RATIO", labels, 0.6 if s < HALF_S else 0.3, ts),
        ]
        if old:
            out += [
                ("DCGM_FI_DEV_POWER_VIOLATION", labels, base + power, ts),
                ("DCGM_FI_DEV_THERMAL_VIOLATION", labels, base + thermal, ts),
            ]
            continue
        out += [
            ("DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL", labels, base + _elapsed(s), ts),
            ("DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL", labels, base + _active(s), ts),
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS", labels, base + power, ts),
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS", labels, base + thermal, ts),
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS", labels, base, ts),
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS", labels, base, ts),
            # sync boost is the group matching its clocks, not the machine: never added
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST_NS", labels, base + 1e9 * s, ts),
        ]
    return out


@pytest.fixture(scope="module")
def counters_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two H100s on dcgm-exporter 4.8.3's labels (``pci_bus_id``, ``device``, ``hostname``):
    one exporting DCGM 4.x's counters, one DCGM 3's violation counters."""

    def labels(uuid: str, pod: str) -> dict[str, str]:
        return {
            "gpu": uuid[-1],
            "UUID": uuid,
            "pci_bus_id": f"00000000:0{uuid[-1]}:00.0",
            "device": f"nvidia{uuid[-1]}",
            "modelName": H100,
            "hostname": "node7",
            "container": "train",
            "namespace": "nlp",
            "pod": pod,
        }

    samples = [
        *counters_46(labels("GPU-7", "counted")),
        *counters_46(labels("GPU-8", "violations"), old=True),
    ]
    with running_prometheus(tmp_path_factory.mktemp("prom-counters"), samples) as url:
        yield url


def test_dcgm_counters_give_counter_exact_sm_activity_and_throttled_time(
    counters_prometheus: str,
) -> None:
    """SM activity is Δactive ÷ Δelapsed between the first scrape (10:00:00) and the last
    (10:59:45), not the gauge's time-weighted 45%: the slower second half weighs less; the
    power cap's 300 s and the thermal slowdown's 600 s are 0.25 GPU-h throttled, counter-exact,
    $0.96, by the 4.2 counters or the older violation counters alike."""
    done = read_prometheus(counters_prometheus, since=TEN, until=NOON, progress=False)
    runs = {r.name: r for r in done.records}
    last = 239 * 15.0
    by_hand = 100.0 * _active(last) / _elapsed(last)  # 47.6%
    counted = runs["counted"]
    assert counted.sm_active_pct == pytest.approx(by_hand, rel=1e-9)
    assert by_hand == pytest.approx(47.6, abs=0.05) and counted.sm_active_source == "counter"
    assert counted.util_pct == pytest.approx(92.0)
    for run in (counted, runs["violations"]):
        assert run.throttled_gpu_hours == pytest.approx(900 / 3600, rel=1e-9), run.name
        assert run.throttle_source == "counter"
        assert run.throttled_gpu_hours * H100_PRICE == pytest.approx(0.9625)
    # no cycle counters: the gauge's time-weighted mean, marked sampled at the import's step
    gauged = runs["violations"]
    assert gauged.sm_active_pct == pytest.approx(45.0, abs=0.5)
    assert gauged.sm_active_source == "sampled every 60 s"
    # each minute's SM activity from its counters too: 60% in the first half hour, 30% after
    minutes = sorted((s.minute, s.sm_active_pct) for s in done.samples if s.run_id == counted.id)
    assert minutes[5][1] == pytest.approx(60.0) and minutes[45][1] == pytest.approx(30.0)


def test_a_counter_that_resets_is_counted_on_from_zero() -> None:
    from reports.imports.prom import _counter_points

    state: dict[Any, Any] = {}
    key = (("gpu=0",), "DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL")
    got = _counter_points(state, key, [(60.0, "100"), (120.0, "160"), (180.0, "30")])
    assert got == [(60.0, 100.0), (120.0, 160.0), (180.0, 190.0)]  # reset: +30, not -130
    # the next chunk goes on from the state; a point asked again (t not after) is left out;
    # DCGM's blank (2^63 - 16, as old exporters let it through) is no count
    more = [(180.0, "30"), (240.0, "9223372036854775792"), (300.0, "50")]
    assert _counter_points(state, key, more) == [(300.0, 210.0)]
