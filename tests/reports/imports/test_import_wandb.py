"""``gpu-kpi import wandb``: run directories written by the real ``wandb`` package (offline),
imported into a real store, the numbers checked by hand.

This machine has no GPU, so W&B's own system monitor writes no ``gpu.N.*`` metrics: the
un-instrumented run is a real offline run to which W&B's GPU records (an environment record
naming two H100s, a stats record every 15 s) are added in W&B's own protobuf and framing, as
wandb-core writes them on a GPU host.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import time
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import readers

from reports.build import compute
from reports.cli import main
from reports.errors import ImportFailed
from reports.imports.play import TRACKED, Labels
from reports.imports.tb_runs import import_tensorboard
from reports.imports.wandb_runs import NO_GPU, import_wandb, read_wandb
from reports.request import Request
from tracker.session import track
from tracker.sinks.tensorboard import TensorBoardSink
from tracker.sinks.wandb import WandbSink
from tracker.store import RunStore

MONDAY_10 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # 2026-W48
H100_PRICE = 3.85  # the price table's H100, USD per GPU-hour


_WRITTEN: dict[str, Path] = {}
"""Run name → a folder where ``wandb`` wrote that run once (each write starts wandb-core)."""


def real_run(root: Path, monkeypatch: pytest.MonkeyPatch, *, name: str) -> Path:
    """A finished offline W&B run (a few history rows, a config) under ``root``; its
    ``.wandb`` file. Written by the real ``wandb`` once per name and copied after that."""
    if name not in _WRITTEN:
        import tempfile

        import wandb

        monkeypatch.setenv("WANDB_SILENT", "true")
        first = Path(tempfile.mkdtemp(prefix=f"gpu-kpi-wandb-{name}-"))
        atexit.register(shutil.rmtree, first, ignore_errors=True)
        run = wandb.init(
            mode="offline", dir=str(first), project="vision", name=name, config={"lr": 0.1}
        )
        for step in range(3):
            run.log({"loss": 1.0 / (step + 1)})
        run.finish()
        readers.read_finished_wandb(first)
        _WRITTEN[name] = first
    shutil.copytree(_WRITTEN[name] / "wandb", root / "wandb", symlinks=True, dirs_exist_ok=True)
    return readers.read_finished_wandb(root).path


def add_gpu_records(
    path: Path,
    *,
    minutes: int = 60,
    environment: bool = True,
    extra: tuple[tuple[str, float], ...] = (),
) -> None:
    """Add to a W&B log what wandb-core writes on a host with two H100s: their environment,
    and a stats record every 15 s from MONDAY_10 on: GPU 0 at 80%, 40 GiB, 500 W; GPU 1 at 2%
    (idle), 1 GiB, 100 W. Written before the run's exit record, as a live run would."""
    from wandb.proto import wandb_internal_pb2 as pb

    records = list(readers.iter_wandb_records(path))
    end = next(i for i, r in enumerate(records) if r.WhichOneof("record_type") == "exit")
    env = pb.Record()
    for i in range(2):
        gpu = env.environment.gpu_nvidia.add()
        gpu.name, gpu.uuid, gpu.memory_total = "NVIDIA H100 80GB HBM3", f"GPU-w{i}", 80 * 2**30
    added = [env] if environment else []
    for k in range(minutes * 4 + 1):
        rec = pb.Record()
        rec.stats.timestamp.seconds = int((MONDAY_10 + timedelta(seconds=15 * k)).timestamp())
        for key, value in (
            ("gpu.0.gpu", 80),
            ("gpu.0.memoryAllocatedBytes", 40 * 2**30),
            ("gpu.0.powerWatts", 500.0),
            ("gpu.process.0.gpu", 80),
            ("gpu.1.gpu", 2),
            ("gpu.1.memoryAllocatedBytes", 2**30),
            ("gpu.1.powerWatts", 100.0),
            ("cpu", 12.5),
            *extra,
        ):
            item = rec.stats.item.add()
            item.key, item.value_json = key, str(value)
        added.append(rec)
    readers.write_wandb_log(path, [*records[:end], *added, *records[end:]])


def test_a_gpu_the_environment_does_not_list_has_its_hosts_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stats key of GPU 2, which the environment record (two H100s) does not list, skipped
    the whole run as "no GPU model". Now GPU 2 is an H100 like the host's others: 3 GPU-hours."""
    log = real_run(tmp_path, monkeypatch, name="three")
    add_gpu_records(log, extra=(("gpu.2.gpu", 50),))
    (r,) = import_wandb(f"sqlite:///{tmp_path / 'runs.db'}", [tmp_path / "wandb"]).records
    assert (r.gpu_model, r.gpu_count) == ("H100", 3)
    assert r.gpu_hours == pytest.approx(3.0)
    assert r.util_pct == pytest.approx((80 + 2 + 50) / 3)


@pytest.fixture
def gpu_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ``wandb`` directory of one un-instrumented run on two H100s."""
    add_gpu_records(real_run(tmp_path, monkeypatch, name="resnet-a"))
    return tmp_path / "wandb"


def test_an_uninstrumented_run_gets_its_gpu_time_and_cost_by_hand(
    gpu_run: Path, store_url: str
) -> None:
    done = import_wandb(store_url, [gpu_run], labels=Labels(team="vision-team"))
    (r,) = done.records
    assert (r.source, r.name, r.project, r.team, r.gpu_model, r.gpu_count, r.status) == (
        "wandb",
        "resnet-a",
        "vision",
        "vision-team",
        "H100",
        2,
        "finished",
    )
    assert (r.started_at, r.ended_at) == (MONDAY_10, MONDAY_10 + timedelta(hours=1))
    assert r.gpu_hours == pytest.approx(2.0)
    assert r.util_pct == pytest.approx((80 + 2) / 2)
    assert r.cost_usd == pytest.approx(2 * H100_PRICE)
    assert r.idle_usd == pytest.approx(H100_PRICE)  # GPU 1: an hour under 5%
    # idle in full, GPU 0 against the 85% target
    assert r.waste_usd == pytest.approx(H100_PRICE + H100_PRICE * (1 - 80 / 85))
    assert r.energy_kwh == pytest.approx(0.5 + 0.1)  # 500 W and 100 W for an hour
    assert r.mem_peak_gib == pytest.approx(40.0)
    assert r.id.startswith("wandb-")
    assert r.links == {"wandb": str(next(gpu_run.rglob("*.wandb")).resolve().parent)}
    w48 = compute(
        store_url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 7, tzinfo=UTC)
    )
    assert w48.kpis.headline.gpu_hours == pytest.approx(2.0)
    assert w48.kpis.headline.spend_usd == pytest.approx(2 * H100_PRICE)
    with RunStore(store_url) as store:
        assert len(store.samples(run_ids=[r.id])) == 2 * 60  # a row per GPU-minute


@pytest.mark.parametrize(
    "metadata",
    [
        # what older wandb versions wrote (no environment record in the log)
        {
            "gpu": "NVIDIA H100 80GB HBM3",
            "gpu_count": 2,
            "gpu_devices": [
                {"name": "NVIDIA H100 80GB HBM3", "memory_total": 85520809984},
                {"name": "NVIDIA H100 80GB HBM3", "memory_total": 85520809984},
            ],
            "host": "gpu-node-3",
            "username": "jlee",
        },
        # the environment message as JSON, as newer versions write it (memory as text)
        {
            "gpu": "NVIDIA H100 80GB HBM3",
            "gpu_count": 2,
            "gpu_nvidia": [
                {"name": "NVIDIA H100 80GB HBM3", "memoryTotal": "85520809984", "uuid": "GPU-m0"},
                {"name": "NVIDIA H100 80GB HBM3", "memoryTotal": "85520809984", "uuid": "GPU-m1"},
            ],
            "host": "gpu-node-3",
            "username": "jlee",
        },
    ],
)
def test_the_gpus_from_the_metadata_file_when_the_log_names_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_url: str, metadata: dict[str, Any]
) -> None:
    """A log with W&B's GPU metrics but no environment record ("no GPU model in the log"
    before): the GPUs come from ``files/wandb-metadata.json`` beside it. Two H100s for an hour:
    2 GPU-h, $7.70, memory 85,520,809,984 B = 79.6 GiB each."""
    import json

    log = real_run(tmp_path, monkeypatch, name="old-wandb")
    add_gpu_records(log, environment=False)
    files = log.parent / "files"
    files.mkdir(exist_ok=True)
    (files / "wandb-metadata.json").write_text(json.dumps(metadata))
    (r,) = import_wandb(store_url, [tmp_path / "wandb"]).records
    assert (r.gpu_model, r.gpu_count) == ("H100", 2)  # host and user: the log's own records
    assert r.gpu_hours == pytest.approx(2.0) and r.cost_usd == pytest.approx(2 * H100_PRICE)
    assert r.mem_total_gib == pytest.approx(85520809984 / 2**30)
    (files / "wandb-metadata.json").unlink()  # no metadata either: the model is asked for
    done = read_wandb([tmp_path / "wandb"])
    assert not done.records and list(done.skipped) == [
        "no GPU model in the log: say it with --gpu-model"
    ]


def test_importing_again_adds_nothing(gpu_run: Path, store_url: str) -> None:
    first = import_wandb(store_url, [gpu_run])
    again = import_wandb(store_url, [gpu_run, next(gpu_run.rglob("*.wandb"))])
    assert [r.id for r in again.records] == [r.id for r in first.records]
    with RunStore(store_url) as store:
        assert [r.id for r in store.list_runs()] == [first.records[0].id]
        assert len(store.samples()) == 120


def test_a_cpu_run_is_skipped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    add_gpu_records(real_run(tmp_path / "a", monkeypatch, name="on-gpu"))
    real_run(tmp_path / "b", monkeypatch, name="on-cpu")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["import", "wandb", str(tmp_path / "a"), str(tmp_path / "b"), "--store", url]) == 0
    out = capsys.readouterr().out
    assert f"skipped 1 run(s), {NO_GPU}: on-cpu" in out
    assert "imported 1 run(s), 2.0 GPU-h, 120 minute rows" in out
    with RunStore(url) as store:
        assert [r.name for r in store.list_runs()] == ["on-gpu"]


def test_a_run_of_ours_keeps_its_id_and_is_not_counted_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain-loop run tracked live with W&B (simulated H100, input-bound at 60%): the store
    that tracked it skips it; a new store gets it from our own ``gpu/*`` points (W&B kept no GPU
    metrics here), under the tracker's run id."""
    import wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    tracked = f"sqlite:///{tmp_path / 'tracked.db'}"
    wb = wandb.init(mode="offline", dir=str(tmp_path), project="nlp")
    with track(
        name="ours",
        project="llm",
        team="nlp",
        backend="simulated:input-bound@H100",
        store=tracked,
        interval_s=0.1,
        log_every_s=0.5,
        warmup_steps=0,
        flops_per_step=1e11,  # at most 100 steps a second: under 16% of the fp32 peak assumed
        dtype="fp32",
        sinks=[WandbSink(wb), TensorBoardSink(logdir=tmp_path / "tb")],
        log_to_python=False,
    ) as run:
        deadline = time.monotonic() + 3.2
        while time.monotonic() < deadline:
            time.sleep(0.01)
            run.step(samples=8)
    wb.finish()
    logged = readers.read_finished_wandb(tmp_path)
    points = [(h["_timestamp"], h["gpu/util_pct"]) for h in logged.history if "gpu/util_pct" in h]
    assert len(points) >= 4

    again = import_wandb(tracked, [tmp_path / "wandb"])
    assert again.records == [] and list(again.skipped) == [TRACKED]
    assert len(again.skipped[TRACKED]) == 1

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    (r,) = import_wandb(fresh, [tmp_path / "wandb"]).records
    assert (r.id, r.source, r.gpu_model, r.gpu_count) == (run.record.id, "wandb", "H100", 1)  # type: ignore[union-attr]
    # each point is the window since the one before: GPU-time from the first to the last
    span = points[-1][0] - points[0][0]
    assert r.gpu_hours == pytest.approx(span / 3600, rel=1e-6)
    weighted = sum((b[0] - a[0]) * b[1] for a, b in pairwise(points))
    assert r.util_pct == pytest.approx(weighted / span, rel=1e-6)
    assert r.samples_per_s == pytest.approx(logged.summary["gpu_kpi/samples_per_s"])
    # MFU and its denominator (issue 45): the config says it from the start, the summary keeps it
    assert logged.config["gpu_kpi/mfu_peak"] == "66.9 TF/s fp32 dense, H100 SXM"
    ours = run.record
    assert ours is not None and ours.mfu is not None
    assert r.mfu == pytest.approx(ours.mfu) and r.ofu == pytest.approx(ours.ofu)
    assert (r.mfu_peak_tflops, r.mfu_dtype, r.mfu_dtype_from) == (66.9, "fp32", "flag")
    # the round trip keeps who ran it and the tracker's verdict (issue 46): the points alone
    # do not carry the MFU and data wait it was judged on
    assert (r.team, r.project, r.verdict, r.advice) == ("nlp", "llm", ours.verdict, ours.advice)
    assert ours.verdict == "low-efficiency"  # busy 60%, MFU under 0.2
    # its GPU-hours and dollars: the tracker's, or the import names the difference
    done = import_wandb(f"sqlite:///{tmp_path / 'again.db'}", [tmp_path / "wandb"])
    if abs(r.gpu_hours - ours.gpu_hours) > 0.01 * ours.gpu_hours:
        (said,) = done.notes
        assert f": {r.gpu_hours:.4g} GPU-h (${r.cost_usd:.4g}) from its logged points" in said
        assert f"{ours.gpu_hours:.4g} GPU-h (${ours.cost_usd:.4g}) in the tracker's record" in said
    else:
        assert done.notes == []
    # the same run from its TensorBoard logdir first: the W&B import says where it came from
    both = f"sqlite:///{tmp_path / 'both.db'}"
    assert [t.id for t in import_tensorboard(both, [tmp_path / "tb"]).records] == [ours.id]
    later = import_wandb(both, [tmp_path / "wandb"])
    assert later.records == [] and list(later.skipped) == [
        "already in the store, from a tensorboard import"
    ]


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-5])


def bad_crc(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF
    path.write_bytes(bytes(data))


def bad_length(path: Path) -> None:
    """The length of a chunk in the log's middle (the first of its second block) set to 65,535:
    past its block and past the file. It read as a torn tail: the run halved, ``crashed``."""
    data = bytearray(path.read_bytes())
    assert len(data) > 32 * 1024 + 7  # a second block, with a chunk
    at = 32 * 1024  # a block starts with a chunk header: crc (4), length (2), type (1)
    data[at + 4 : at + 6] = (65535).to_bytes(2, "little")
    path.write_bytes(bytes(data))


def not_wandb(path: Path) -> None:
    path.write_bytes(b"timestamp,uuid\n")


def year_30000(path: Path) -> None:
    from wandb.proto import wandb_internal_pb2 as pb

    rec = pb.Record()
    rec.stats.timestamp.seconds = 10**12
    readers.write_wandb_log(path, [*readers.iter_wandb_records(path), rec])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (bad_crc, "checksum mismatch"),
        (bad_length, "damaged at byte 32768 (a chunk of 65535 bytes where its block has 32761)"),
        (not_wandb, "not a W&B transaction log"),
    ],
    ids=["crc", "length", "foreign"],
)
def test_a_damaged_log_is_one_line_naming_it_and_imports_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    damage: Any,
    message: str,
) -> None:
    add_gpu_records(real_run(tmp_path / "good", monkeypatch, name="good"))
    bad = real_run(tmp_path / "bad", monkeypatch, name="bad")
    add_gpu_records(bad)
    damage(bad)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    code = main(["import", "wandb", str(tmp_path / "good"), str(tmp_path / "bad"), "--store", url])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"gpu-kpi: error: {bad}: ") and message in err
    assert err.count("\n") == 1
    with RunStore(url) as store:
        assert store.list_runs() == []  # not even the good run


def test_a_sample_in_the_year_30000_is_left_out_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A system-metrics record at 10**12 s since 1970 (the year 33658), its checksum whole,
    stopped the import of every run given. It is a bad sample, not a damaged file: left out,
    counted and named; the run goes in, two H100s for an hour."""
    bad = real_run(tmp_path / "bad", monkeypatch, name="bad")
    add_gpu_records(bad)
    year_30000(bad)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    code = main(["import", "wandb", str(tmp_path / "bad"), "--store", url])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (
        "skipped 1 reading(s) whose time is no time (outside the years 1970-9998): "
        f"{bad} (a system-metrics record at 1000000000000 s since 1970)\n"
    ) in out
    assert "imported 1 run(s), 2.0 GPU-h, 120 minute rows" in out


def test_a_killed_runs_torn_tail_is_left_out_and_the_run_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed mid-write leaves its last record cut off: read up to there."""
    log = real_run(tmp_path, monkeypatch, name="killed")
    add_gpu_records(log)
    records = list(readers.iter_wandb_records(log))
    end = next(i for i, r in enumerate(records) if r.WhichOneof("record_type") == "exit")
    readers.write_wandb_log(log, records[:end])  # no exit record: the process died
    truncated(log)  # and the last record torn
    (r,) = read_wandb([tmp_path]).records
    assert (r.name, r.status) == ("killed", "crashed")
    assert r.gpu_hours == pytest.approx(2.0, abs=2 * 15 / 3600)  # the torn record: one point


def test_no_wandb_runs_and_nvidia_smi_options_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["import", "wandb", str(tmp_path), "--store", url]) == 2
    assert "no .wandb file under it" in capsys.readouterr().err
    assert main(["import", "wandb", str(tmp_path), "--tz", "Europe/Berlin", "--store", url]) == 2
    assert "--tz and --per-gpu are for nvidia-smi logs" in capsys.readouterr().err


def test_read_wandb_takes_a_file_and_its_directory_once(gpu_run: Path) -> None:
    log = next(gpu_run.rglob("*.wandb"))
    assert len(read_wandb([log, log.parent, gpu_run]).records) == 1


# -- (b) a project through W&B's public API --------------------------------------------------
# No W&B server can be reached here: the API objects below follow the shapes the public API
# documents (wandb.apis.public.Run: id, name, entity, project, url, state, config, summary,
# created_at, tags, user; metadata from wandb-metadata.json, written by wandb-core as protobuf
# JSON; history(stream="system") rows keyed "system.gpu.N.gpu" with "_timestamp").


class ApiRun:
    def __init__(
        self,
        run_id: str,
        name: str,
        *,
        state: str = "finished",
        minutes: int = 60,
        config: dict[str, Any] | None = None,
        gpus: int = 2,
    ) -> None:
        self.id, self.name, self.state = run_id, name, state
        self.entity, self.project = "acme", "vision"
        self.url = f"https://wandb.ai/acme/vision/runs/{run_id}"
        self.config = config or {"lr": {"value": 0.1, "desc": None}}
        self.summary: dict[str, Any] = {}
        self.created_at = "2026-11-23T10:00:00Z"
        self.tags = ["baseline"]
        self.user = "alice"
        self.metadata = {
            "host": "gpu-node-7",
            "gpu": "NVIDIA H100 80GB HBM3",
            "gpu_count": gpus,
            "gpu_nvidia": [
                {
                    "name": "NVIDIA H100 80GB HBM3",
                    "memoryTotal": str(80 * 2**30),
                    "uuid": f"GPU-api{i}",
                }
                for i in range(gpus)
            ],
        }
        self._minutes = minutes
        self.asked: list[dict[str, Any]] = []

    def history(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.asked.append(kwargs)
        return [
            {
                "_timestamp": (MONDAY_10 + timedelta(seconds=15 * k)).timestamp(),
                "_runtime": 15 * k,
                "system.gpu.0.gpu": 90,
                "system.gpu.1.gpu": 30,
                "system.gpu.0.powerWatts": 600.0,
                "system.cpu": 5.0,
            }
            for k in range(self._minutes * 4 + 1)
        ]

    def scan_history(self) -> list[dict[str, Any]]:
        return []


class Api:
    def __init__(self, runs: list[ApiRun]) -> None:
        self._runs = runs
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def runs(self, path: str, filters: dict[str, Any]) -> list[ApiRun]:
        self.asked.append((path, filters))
        return self._runs


def test_a_project_through_the_api_maps_as_a_local_log(tmp_path: Path) -> None:
    from reports.imports.wandb_api import RUNNING
    from reports.imports.wandb_runs import import_wandb_api

    done_run, live = ApiRun("a1b2c3d4", "resnet-b"), ApiRun("zz", "still-going", state="running")
    api = Api([done_run, live])
    since, until = MONDAY_10 - timedelta(days=1), MONDAY_10 + timedelta(days=6)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    done = import_wandb_api(url, "acme/vision", since=since, until=until, api=api)
    assert api.asked == [
        ("acme/vision", {"createdAt": {"$gte": since.isoformat(), "$lt": until.isoformat()}})
    ]
    assert done_run.asked == [{"stream": "system", "pandas": False, "samples": 1_000_000}]
    assert done.skipped == {RUNNING: ["still-going"]}
    (r,) = done.records
    assert (r.name, r.project, r.user, r.host, r.tags, r.status, r.gpu_model, r.gpu_count) == (
        "resnet-b",
        "vision",
        "alice",
        "gpu-node-7",
        ("baseline",),
        "finished",
        "H100",
        2,
    )
    assert r.links == {"wandb": "https://wandb.ai/acme/vision/runs/a1b2c3d4"}
    assert (r.started_at, r.gpu_hours) == (MONDAY_10, pytest.approx(2.0))
    assert r.util_pct == pytest.approx((90 + 30) / 2)
    assert r.energy_kwh == pytest.approx(0.6)  # GPU 0's 600 W for an hour; GPU 1 reports none
    # the same project again: the same run, not a second
    again = import_wandb_api(
        url, "acme/vision", since=since, until=until, api=Api([ApiRun("a1b2c3d4", "resnet-b")])
    )
    assert [x.id for x in again.records] == [r.id]
    with RunStore(url) as store:
        assert len(store.list_runs()) == 1


def test_an_api_failure_is_one_line_naming_the_project(tmp_path: Path) -> None:
    from reports.imports.wandb_runs import read_wandb_api

    class Refusing:
        def runs(self, path: str, filters: dict[str, Any]) -> list[ApiRun]:
            raise PermissionError("401 Unauthorized: check WANDB_API_KEY")

    with pytest.raises(
        ImportFailed,
        match=r"^acme/vision: the W&B API failed \(PermissionError: "
        r"401 Unauthorized",
    ):
        read_wandb_api(
            "acme/vision", since=MONDAY_10, until=MONDAY_10 + timedelta(days=7), api=Refusing()
        )


def test_one_odd_run_of_a_project_is_skipped_and_named() -> None:
    from reports.imports.wandb_api import UNREADABLE
    from reports.imports.wandb_runs import read_wandb_api

    odd = ApiRun("bad1", "odd-config")
    odd.config = ["not", "a", "dict"]  # type: ignore[assignment]
    done = read_wandb_api(
        "acme/vision",
        since=MONDAY_10,
        until=MONDAY_10 + timedelta(days=7),
        api=Api([odd, ApiRun("ok1", "fine")]),
    )
    assert [r.name for r in done.records] == ["fine"]
    (name,) = done.skipped[UNREADABLE]
    assert name.startswith("odd-config (ValueError: ")


def api_read(*runs: ApiRun) -> Any:
    from reports.imports.wandb_runs import read_wandb_api

    week = (MONDAY_10, MONDAY_10 + timedelta(days=7))
    return read_wandb_api("acme/vision", since=week[0], until=week[1], api=Api(list(runs)))


class FarSamples(ApiRun):
    """W&B's system samples of one GPU at ``times`` (70%)."""

    def __init__(self, times: list[datetime]) -> None:
        super().__init__("far1", "far", gpus=1)
        self.times = times

    def history(self, **kwargs: Any) -> list[dict[str, Any]]:
        return [{"_timestamp": t.timestamp(), "system.gpu.0.gpu": 70} for t in self.times]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "apart", [timedelta(days=30), timedelta(days=50 * 365)], ids=["30-days", "50-years"]
)
def test_w_and_b_samples_months_apart_are_gaps_however_few(apart: timedelta) -> None:
    """Two samples 30 days apart were 720 GPU-h (their one interval, the median, made the gap
    90 days); 50 years apart the import split them into minutes without end. No sample covers
    more than a day: the run has no GPU-time, skipped and named. Sampled every 15 s for an hour
    before such a sample, the run is that hour."""
    from reports.imports.play import NO_GPU_TIME

    done = api_read(FarSamples([MONDAY_10, MONDAY_10 + apart]))
    assert (done.records, done.skipped) == ([], {NO_GPU_TIME: ["far"]})
    hour = [MONDAY_10 + timedelta(seconds=15 * k) for k in range(241)]
    (r,) = api_read(FarSamples([*hour, hour[-1] + apart])).records
    assert r.gpu_hours == pytest.approx(1.0)
    assert r.util_pct == pytest.approx(70.0)


def test_a_sample_at_a_20_digit_time_is_left_out_and_counted_not_a_traceback() -> None:
    """A system sample at ``_timestamp`` 1e19 (the API gives what the server holds) raised
    OverflowError out of the import. It is left out and counted; the run is its hour."""

    class Absurd(ApiRun):
        def history(self, **kwargs: Any) -> list[dict[str, Any]]:
            return [*super().history(**kwargs), {"_timestamp": 1e19, "system.gpu.0.gpu": 50}]

    done = api_read(Absurd("abs1", "absurd"))
    (r,) = done.records
    assert r.gpu_hours == pytest.approx(2.0)  # two H100s for an hour
    assert done.notes == [
        "skipped 1 reading(s) whose time is no time (outside the years 1970-9998): "
        "https://wandb.ai/acme/vision/runs/abs1 (a system sample at 1e+19 s since 1970)"
    ]


class OursOnly(ApiRun):
    """A run our callback logged where W&B kept no GPU metrics: its config (``gpu_kpi/…``) and
    our ``gpu/util_pct`` points at ``times`` (60%)."""

    def __init__(self, config: dict[str, Any], times: list[datetime]) -> None:
        super().__init__("ours1", "ours", config={k: {"value": v} for k, v in config.items()})
        self.times = times

    def history(self, **kwargs: Any) -> list[dict[str, Any]]:
        return [{"_timestamp": t.timestamp(), "system.cpu": 5.0} for t in self.times]

    def scan_history(self) -> list[dict[str, Any]]:
        return [{"_timestamp": t.timestamp(), "gpu/util_pct": 60.0} for t in self.times]


def test_our_config_is_bounded_like_a_tensorboard_note() -> None:
    """The W&B side of a forged note: ``gpu_kpi/gpu_count`` 1e308 with no price made a
    4,096-GPU run; a 5,000-character ``gpu_kpi/run_id`` went into every minute row; our points
    30 days apart covered the 30 days. Now: the count is refused (skipped, named), the id
    hashed, and a point covers at most the hour before it."""
    from reports.imports.play import UNBACKED

    hour = [MONDAY_10 + timedelta(minutes=m) for m in range(61)]
    claim = {"gpu_kpi/run_id": "x" * 5000, "gpu_kpi/gpu_model": "H100"}
    done = api_read(OursOnly({**claim, "gpu_kpi/gpu_count": 1e308}, hour))
    assert (done.records, done.skipped) == ([], {UNBACKED: ["ours"]})
    done = api_read(OursOnly({**claim, "gpu_kpi/gpu_count": 2}, [*hour, hour[-1] + timedelta(30)]))
    (r,) = done.records
    assert r.id == "wandb-" + hashlib.sha256(("x" * 5000).encode()).hexdigest()[:24]
    assert (r.gpu_count, r.gpu_hours) == (2, pytest.approx(2.0))  # the hour, not 30 days
    assert {s.run_id for s in done.samples} == {r.id} and len(done.samples) == 2 * 60


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["acme/vision", "--since", "2026-W48"], "this import needs --until"),
        (
            ["acme/vision", "other/proj", "--since", "2026-W48", "--until", "2026-W49"],
            "one ENTITY/PROJECT",
        ),
        (["./wandb", "--map", "run=pod"], "--map is for Prometheus"),
        (["here/wandb", "--since", "2026-W48", "--until", "2026-W49"], "is a local path"),
    ],
)
def test_api_options_are_checked(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    (tmp_path / "here" / "wandb").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert main(["import", "wandb", *args, "--store", f"sqlite:///{tmp_path / 'r.db'}"]) == 2
    assert message in capsys.readouterr().err


def test_a_short_run_counts_from_its_start_to_its_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 111 s run (start record, exit runtime 111 s) whose H100 W&B sampled every 15 s from
    20 s to 80 s at 60%: 111 GPU-seconds, not the 60 s between its first and last sample.
    The first sample covers the 20 s before it (80 s known at 60%); the 31 s after the last are
    held without data: utilization 60% of the known time, never idle."""
    from wandb.proto import wandb_internal_pb2 as pb

    log = real_run(tmp_path, monkeypatch, name="short")
    records = list(readers.iter_wandb_records(log))
    start = next(r.run.start_time.seconds for r in records if r.WhichOneof("record_type") == "run")
    end = next(i for i, r in enumerate(records) if r.WhichOneof("record_type") == "exit")
    records[end].exit.runtime = 111
    env = pb.Record()
    gpu = env.environment.gpu_nvidia.add()
    gpu.name, gpu.uuid, gpu.memory_total = "NVIDIA H100 80GB HBM3", "GPU-s0", 80 * 2**30
    stats = []
    for at in (20, 35, 50, 65, 80):
        rec = pb.Record()
        rec.stats.timestamp.seconds = start + at
        item = rec.stats.item.add()
        item.key, item.value_json = "gpu.0.gpu", "60"
        stats.append(rec)
    readers.write_wandb_log(log, [*records[:end], env, *stats, *records[end:]])
    (r,) = read_wandb([tmp_path / "wandb"]).records
    assert r.gpu_hours == pytest.approx(111 / 3600)
    assert r.util_pct == pytest.approx(60.0)
    assert r.idle_usd == 0.0
    assert r.cost_usd == pytest.approx(111 / 3600 * H100_PRICE)


@pytest.mark.parametrize(
    "text",
    [
        '{"gpu_nvidia": "nope"}',
        "[1, 2]",
        "{not json",
        "[" * 100_000 + "]" * 100_000,
        " " * (1 << 21),
    ],
    ids=["wrong-type", "a-list", "not-json", "nested-past-the-parser", "too-big"],
)
def test_a_metadata_file_that_says_nothing_useful_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """A foreign or damaged ``wandb-metadata.json`` never stops the import: the run is skipped
    as it was without one (no GPU model), named."""
    log = real_run(tmp_path, monkeypatch, name="old-wandb")
    add_gpu_records(log, environment=False, minutes=2)
    (log.parent / "files").mkdir(exist_ok=True)
    (log.parent / "files" / "wandb-metadata.json").write_text(text)
    done = read_wandb([tmp_path / "wandb"])
    assert not done.records and list(done.skipped) == [
        "no GPU model in the log: say it with --gpu-model"
    ]
