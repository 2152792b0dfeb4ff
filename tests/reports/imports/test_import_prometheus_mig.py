"""MIG instances through the real Prometheus: each instance a GPU counted as its share of the
physical GPU, the GPU's own series beside them left out. Real dcgm-exporter expositions
(``tests/data/real/dcgm-exporter/``, sources in its README) replayed for an hour, and an A100
split among four teams over a week, every figure worked out by hand."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prom_server import Sample, running_prometheus

from reports.build import compute
from reports.cli import main
from reports.imports.play import Labels
from reports.imports.prom import UNALLOCATED, import_prometheus, read_prometheus
from reports.request import Request
from tracker.config import Settings
from tracker.owned import OwnedGpu

pytestmark = pytest.mark.prometheus

REAL = Path(__file__).resolve().parents[2] / "data" / "real" / "dcgm-exporter"
TEN = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # Monday of 2026-W48
_LINE = re.compile(r"^([A-Za-z_:][\w:]*)\{(.*)\}\s+(\S+)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def exposition(path: Path) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a ``/metrics`` text: name, labels, value (lines whose value is no number,
    as dcgm-exporter's ``ERROR - FAILED TO CONVERT TO STRING``, left out)."""
    out = []
    for line in path.read_text().splitlines():
        if (m := _LINE.match(line)) is None:
            continue
        try:
            value = float(m[3])
        except ValueError:
            continue
        out.append((m[1], dict(_LABEL.findall(m[2])), value))
    return out


def replayed(files: list[str], start: datetime, minutes: int) -> list[Sample]:
    """Each file's samples scraped every 60 s for ``minutes`` from ``start``."""
    lines = [s for name in files for s in exposition(REAL / name)]
    return [
        (name, labels, value, (start + timedelta(seconds=60 * i)).timestamp())
        for i in range(minutes + 1)
        for name, labels, value in lines
    ]


@pytest.fixture(scope="module")
def real_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    files = ["issue-dcgm-exporter-512-h100-mig.txt", "blog-a800-mig-excerpt.txt"]
    with running_prometheus(tmp_path_factory.mktemp("real"), replayed(files, TEN, 60)) as url:
        yield url


def test_real_mig_instances_are_each_their_share_of_the_gpu(real_prometheus: str) -> None:
    """dcgm-exporter issue 512 (an H100's three 1g.10gb instances, two held by KServe pods) and
    a blog's A800 (GPU 0 split into three 2g.20gb, GPUs 1-7 whole), an hour each. Worked out
    from the files' labels: each 1g.10gb 1/7 GPU-hour, $3.85/7 = $0.55; each 2g.20gb 2/7; the
    A800's whole GPUs 1 GPU-hour each; utilization the graphics engine's 0%."""
    done = read_prometheus(real_prometheus, since=TEN, until=TEN + timedelta(hours=1))
    runs = {r.name: r for r in done.records}
    pods = sorted(n for n in runs if not n.startswith("unallocated"))
    assert pods == [
        "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl",
        "tts-predictor-00011-deployment-5554f75554-8j8pl",
    ]
    for name in pods:
        r = runs[name]
        assert (r.team, r.gpu_model, r.mig_profile) == ("model-playground-stg", "H100", "1g.10gb")
        assert r.gpu_hours == pytest.approx(1 / 7)
        assert r.cost_usd == pytest.approx(3.85 / 7)
        assert r.util_pct == pytest.approx(0.0)
    free = runs["unallocated gsrh100-074 GPU 0 MIG 1g.10gb (instance 8)"]
    assert (free.team, free.gpu_hours) == (UNALLOCATED, pytest.approx(1 / 7))
    a800 = [r for n, r in runs.items() if "msxf-hpc-64-35-ai" in n]
    split = sorted(r.name for r in a800 if r.mig_profile)
    assert split == [
        f"unallocated msxf-hpc-64-35-ai GPU 0 MIG 2g.20gb (instance {i})" for i in (3, 5, 6)
    ]
    assert all(r.gpu_hours == pytest.approx(2 / 7) for r in a800 if r.mig_profile)
    whole = [r for r in a800 if not r.mig_profile]
    assert len(whole) == 7 and all(r.gpu_hours == pytest.approx(1.0) for r in whole)
    # the H100 and the A800's GPU 0: 3/7 and 6/7 of a GPU, never more than the GPU
    assert sum(r.gpu_hours for r in runs.values()) == pytest.approx(3 / 7 + 6 / 7 + 7)


def test_the_gpu_s_own_series_beside_its_instances_is_left_out(tmp_path: Path) -> None:
    """NVIDIA's documented A100 exposition: the GPU's own series (power, memory, its engine
    at 99.6%) and its 1g.5gb instance's. Counting both would bill the GPU 1 + 1/7 GPU-hours;
    the instance alone is 1/7 (the model from --gpu-model: these lines carry no modelName)."""
    samples = replayed(["nvidia-docs-a100-mig.txt"], TEN, 60)
    with running_prometheus(tmp_path, samples) as url:
        done = read_prometheus(
            url,
            since=TEN,
            until=TEN + timedelta(hours=1),
            labels=Labels(gpu_model="A100-40GB"),
        )
    (run,) = done.records
    assert run.name == "unallocated ub20-a100-k8s GPU 0 MIG 1g.5gb (instance 13)"
    assert run.gpu_hours == pytest.approx(1 / 7)
    assert run.util_pct == pytest.approx(99.5687)
    assert any(n.startswith("1 GPU(s) were split into MIG instances") for n in done.notes)


# -- an A100 80GB split 3g + 2g + 1g + 1g among four teams over a week --------------------------
A100 = "NVIDIA A100-SXM4-80GB"
WEEK = datetime(2026, 11, 23, tzinfo=UTC)
SLICES = [  # GPU instance id, profile, team, pod, graphics-engine activity
    ("1", "3g.40gb", "nlp", "train-3g", 0.80),
    ("5", "2g.20gb", "vision", "infer-2g", 0.50),
    ("9", "1g.10gb", "research", "notebook-1g", 0.02),
    ("13", "1g.10gb", "web", "api-1g", 0.30),
]


def a100_week() -> list[Sample]:
    """A scrape a minute for the week: each instance's engine activity, and the GPU's own
    series beside them (as dcgm-exporter sends it: busy 90%, 300 W)."""
    gpu = {"Hostname": "node9", "gpu": "0", "UUID": "GPU-a100", "modelName": A100}
    out: list[Sample] = []
    for i in range(7 * 24 * 60 + 1):
        ts = (WEEK + timedelta(minutes=i)).timestamp()
        out += [
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu, 0.9, ts),
            ("DCGM_FI_DEV_POWER_USAGE", gpu, 300.0, ts),
        ]
        for gi, profile, team, pod, active in SLICES:
            labels = {**gpu, "GPU_I_ID": gi, "GPU_I_PROFILE": profile}
            labels |= {"pod": pod, "namespace": team, "container": "main"}
            out.append(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, active, ts))
    return out


@pytest.fixture(scope="module")
def week_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("a100"), a100_week()) as url:
        yield url


def test_an_a100_split_among_four_teams_is_each_team_s_share(
    week_prometheus: str, tmp_path: Path
) -> None:
    """168 hours of an A100 80GB owned at $2.00 a GPU-hour ($17,532 over one year, no power):
    nlp's 3g.40gb 3/7 × 168 = 72 GPU-h, $144, at 80%; vision's 2g.20gb 48 GPU-h, $96, at 50%;
    research's 1g.10gb notebook 24 GPU-h, $48 (1/7 of the GPU, not a whole A100's $336), idle
    at 2%; web's 1g.10gb 24 GPU-h, $48, at 30%. The four add up to the GPU's 168 hours: of the
    two A100s owned, the split one is held whole, and the other's 168 GPU-h ($336) are capacity
    nobody held (counted per instance, the four would fill both and leave none)."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    end = WEEK + timedelta(days=7)
    done = import_prometheus(url, week_prometheus, since=WEEK, until=end, progress=False)
    assert sorted(r.name for r in done.records) == sorted(s[3] for s in SLICES)
    owned = OwnedGpu(
        model="A100-80GB", purchase_usd=17_532, life_years=1, power_w=0, usd_per_kwh=0, gpus=2
    )
    req = Request(week="2026-W48", tz=UTC, owned={"A100-80GB": owned})
    k = compute(url, req, now=datetime(2026, 12, 7, tzinfo=UTC)).kpis
    teams = k.by["team"].set_index("team")
    expected = {"nlp": (72, 80.0), "vision": (48, 50.0), "research": (24, 2.0), "web": (24, 30.0)}
    for team, (hours, util) in expected.items():
        row = teams.loc[team]
        assert row["gpu_hours"] == pytest.approx(hours, rel=1e-6), team
        assert row["spend_usd"] == pytest.approx(2.00 * hours, rel=1e-6), team
        assert row["utilization_pct"] == pytest.approx(util, rel=1e-6), team
    head = k.headline
    assert head.gpu_hours == pytest.approx(168.0, rel=1e-6)
    assert head.spend_usd == pytest.approx(336.0, rel=1e-6)
    assert head.unallocated_gpu_hours == pytest.approx(168.0, rel=1e-6)
    assert head.unallocated_usd == pytest.approx(336.0, rel=1e-6)
    # the notebook: a week idle at 2% on 1/7 of the GPU, its $48 idle
    notebook = k.runs.set_index("name").loc["notebook-1g"]
    assert notebook["spend_usd"] == pytest.approx(48.0, rel=1e-6)
    assert notebook["idle_usd"] == pytest.approx(48.0, rel=1e-6)
    # finance's CSV, typed as the docs say: each team its slice's hours and dollars
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(
        "[owned.A100-80GB]\npurchase_usd = 17532\nlife_years = 1\npower_w = 0\n"
        "usd_per_kwh = 0\ngpus = 2\n"
    )
    csv_out = tmp_path / "chargeback.csv"
    args = ["chargeback", "--config", str(config), "--store", url, "--since", "2026-W48"]
    assert main([*args, "--until", "2026-W48", "--out", str(csv_out)]) == 0
    rows = {r["team"]: r for r in csv.DictReader(csv_out.read_text().splitlines())}
    for team, (hours, _) in expected.items():
        assert float(rows[team]["gpu_hours"]) == pytest.approx(hours, rel=1e-6), team
        assert float(rows[team]["spend_usd"]) == pytest.approx(2.00 * hours, rel=1e-6), team
    assert float(rows["research"]["idle_usd"]) == pytest.approx(48.0, rel=1e-6)


# -- a GPU time-sliced between two pods, each one's utilization measured -----------------------
H100 = "NVIDIA H100 80GB HBM3"


def shared_hour() -> list[Sample]:
    """What dcgm-exporter 4.5.3-4.8.2 with ``--kubernetes-virtual-gpus`` sends for an H100
    time-sliced between two pods for an hour (its source at fb5e3dc: each pod's
    ``DCGM_FI_DEV_GPU_UTIL`` its processes' SM utilization, the GPU's own beside them without
    a pod, the other fields copied to each pod): the GPU busy 60%, infer-a's processes 42,
    infer-b's 18 (70% and 30% of the work)."""
    gpu = {
        "gpu": "0",
        "UUID": "GPU-shared",
        "pci_bus_id": "00000000:1A:00.0",
        "device": "nvidia0",
        "modelName": H100,
        "Hostname": "node5",
    }
    out: list[Sample] = []
    for i in range(61):
        ts = (TEN + timedelta(minutes=i)).timestamp()
        out += [("DCGM_FI_DEV_GPU_UTIL", gpu, 60.0, ts), ("DCGM_FI_DEV_FB_USED", gpu, 30e3, ts)]
        for k, (pod, util) in enumerate((("infer-a", 42.0), ("infer-b", 18.0))):
            labels = {
                **gpu,
                "pod": pod,
                "namespace": "serving",
                "container": "main",
                "pod_uid": f"uid-{pod}",
                "vgpu": str(k),
            }
            out += [
                ("DCGM_FI_DEV_GPU_UTIL", labels, util, ts),
                ("DCGM_FI_DEV_POWER_USAGE", labels, 400.0, ts),
                ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.6, ts),
            ]
    return out


@pytest.fixture(scope="module")
def shared_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("shared"), shared_hour()) as url:
        yield url


def test_a_time_sliced_gpu_is_split_by_each_pod_s_measured_share(
    shared_prometheus: str, tmp_path: Path
) -> None:
    """The hour's GPU, busy 60%, infer-a 70% of the work: it holds 0.7 × 0.6 + 0.4 ÷ 2 = 0.62
    GPU-h ($2.387 at $3.85), busy 0.42 ÷ 0.62 = 67.7% of them; infer-b 0.38 GPU-h ($1.463),
    busy 0.18 ÷ 0.38 = 47.4%. Together the GPU's hour, $3.85; the GPU's own series is no
    holder and no unallocated run."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    done = import_prometheus(
        url, shared_prometheus, since=TEN, until=TEN + timedelta(hours=1), progress=False
    )
    runs = {r.name: r for r in done.records}
    assert sorted(runs) == ["infer-a", "infer-b"]
    a, b = runs["infer-a"], runs["infer-b"]
    assert a.gpu_hours == pytest.approx(0.62) and b.gpu_hours == pytest.approx(0.38)
    assert a.cost_usd == pytest.approx(0.62 * 3.85) and b.cost_usd == pytest.approx(0.38 * 3.85)
    assert a.util_pct == pytest.approx(100 * 0.42 / 0.62)
    assert b.util_pct == pytest.approx(100 * 0.18 / 0.38)
    assert a.gpu_split == b.gpu_split == "measured"
    assert a.tags == b.tags == ("time-sliced",)
    (note,) = [n for n in done.notes if "time-sliced" in n]
    assert "each pod's share measured by its own utilization" in note
    k = compute(url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 7, tzinfo=UTC)).kpis
    assert k.headline.gpu_hours == pytest.approx(1.0)
    assert k.headline.spend_usd == pytest.approx(3.85)
    assert k.headline.utilization_pct == pytest.approx(60.0)


def test_idle_split_by_work_splits_the_gpu_70_30(shared_prometheus: str) -> None:
    """``[gpus] idle_split = "work"``: the same hour split 70/30 (0.7 and 0.3 GPU-h), each at
    the GPU's 60%."""
    done = read_prometheus(
        shared_prometheus,
        since=TEN,
        until=TEN + timedelta(hours=1),
        settings=Settings(idle_split="work"),
    )
    runs = {r.name: r for r in done.records}
    assert runs["infer-a"].gpu_hours == pytest.approx(0.7)
    assert runs["infer-b"].gpu_hours == pytest.approx(0.3)
    assert runs["infer-a"].util_pct == runs["infer-b"].util_pct == pytest.approx(60.0)


def test_an_instance_whose_profile_is_no_profile_is_a_whole_gpu_and_said(tmp_path: Path) -> None:
    """A label is anyone's text: an instance named ``<b>9g.99gb`` (no profile of an H100) is
    counted as the whole GPU, an hour, never as a share nobody can check, and the import says
    so; its name keeps the label's text (escaped where shown)."""
    labels = {
        "Hostname": "node6",
        "gpu": "0",
        "UUID": "GPU-odd",
        "modelName": H100,
        "GPU_I_ID": "2",
        "GPU_I_PROFILE": "<b>9g.99gb",
    }
    samples: list[Sample] = [
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.5, (TEN + timedelta(minutes=i)).timestamp())
        for i in range(61)
    ]
    with running_prometheus(tmp_path, samples) as url:
        done = read_prometheus(url, since=TEN, until=TEN + timedelta(hours=1))
    (run,) = done.records
    assert run.gpu_hours == pytest.approx(1.0) and run.mig_profile is None
    assert "1 MIG instance(s) named no profile of their GPU" in " ".join(done.notes)
