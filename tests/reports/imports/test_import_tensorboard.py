"""``gpu-kpi import tensorboard``: logdirs written by torch's ``SummaryWriter`` and by our
tracker's TensorBoard sink, imported into a real store, the numbers checked by hand."""

from __future__ import annotations

import hashlib
import os
import re
import time
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import readers

from reports.cli import main
from reports.imports.play import NO_GPU_TIME, TRACKED, UNBACKED, Labels
from reports.imports.tb_runs import NO_MODEL, import_tensorboard, read_tensorboard
from tracker.session import track
from tracker.sinks.tensorboard import TensorBoardSink
from tracker.store import RunStore

MONDAY_10 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
A100_PRICE = 2.00  # the price table's A100-80GB, USD per GPU-hour


def summary_writer(logdir: Path, suffix: str = "") -> Any:
    """torch's ``SummaryWriter`` on ``logdir`` (TensorBoard's own event file writer): files
    named ``events.out.tfevents.<time>.<host>.<pid>.<n>`` and ``suffix``; torch is imported
    here, not at the top, so that collecting the fast suite imports no framework
    (``tests/test_fast_suite.py``)."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(logdir), filename_suffix=suffix)


def write_run(
    logdir: Path,
    *,
    seconds: int,
    every: int = 10,
    util: float | None = None,
    start: datetime = MONDAY_10,
    suffix: str = "",
) -> Path:
    """A run logged from ``start`` every ``every`` s for ``seconds``: a loss, a throughput of
    100 + step, and (``util``) a GPU utilization tag of the user's own."""
    w = summary_writer(logdir, suffix)
    for step in range(seconds // every + 1):
        wall = (start + timedelta(seconds=every * step)).timestamp()
        w.add_scalar("train/loss", 1.0 / (step + 1), step, walltime=wall)
        w.add_scalar("train/throughput", 100.0 + step, step, walltime=wall)
        if util is not None:
            w.add_scalar("sys/gpu_util", util, step, walltime=wall)
    w.close()
    return logdir


def test_a_plain_run_is_its_wall_time_on_the_gpus_given(tmp_path: Path, store_url: str) -> None:
    logs = tmp_path / "logs"
    write_run(logs / "exp1" / "version_0", seconds=3600)
    done = import_tensorboard(
        store_url,
        [logs],
        gpus=4,
        tags={"samples_per_s": "train/throughput"},
        labels=Labels(gpu_model="A100-80GB", team="speech"),
    )
    (r,) = done.records
    assert (r.source, r.name, r.gpu_model, r.gpu_count, r.team, r.steps) == (
        "tensorboard",
        "exp1/version_0",
        "A100-80GB",
        4,
        "speech",
        360,
    )
    assert (r.started_at, r.ended_at) == (MONDAY_10, MONDAY_10 + timedelta(hours=1))
    assert r.gpu_hours == pytest.approx(4.0)
    assert r.util_pct is None  # nothing says how busy the GPUs were
    assert r.cost_usd == pytest.approx(4 * A100_PRICE)
    assert r.samples_per_s == pytest.approx(100 + 360 / 2)  # mean of 100..460
    assert r.id.startswith("tb-") and r.links == {
        "tensorboard": str((logs / "exp1" / "version_0").resolve())
    }
    with RunStore(store_url) as store:
        assert len(store.samples(run_ids=[r.id])) == 4 * 60


@pytest.mark.slow  # 10,000+ scalars written and read back: ~4 s of CPU
def test_every_scalar_is_read_not_a_sample_of_10000(tmp_path: Path) -> None:
    """20,001 points a second apart at 30% (a tag mapped to utilization): all of them count."""
    write_run(tmp_path / "long", seconds=20_000, every=1, util=30.0)
    (r,) = read_tensorboard(
        [tmp_path / "long"], tags={"util_pct": "sys/gpu_util"}, labels=Labels(gpu_model="A100-80GB")
    ).records
    assert r.gpu_hours == pytest.approx(20_000 / 3600)
    assert r.util_pct == pytest.approx(30.0)
    assert r.waste_usd == pytest.approx(20_000 / 3600 * A100_PRICE * (1 - 30 / 85))


def test_importing_again_adds_nothing_and_no_model_is_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "logs" / "a", seconds=600)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["import", "tensorboard", str(tmp_path / "logs"), "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    i = out.index(f"skipped 1 run(s), {NO_MODEL}: a")
    # the flag that imports it, which the next import (below) uses
    assert out[i + 1] == (
        "  to import them, run the import again with --gpu-model MODEL (and --gpus N when not 1)"
    )
    assert out[-1].startswith("imported 0 run(s), 0.0 GPU-h")
    for _ in range(2):
        assert (
            main(
                [
                    "import",
                    "tensorboard",
                    str(tmp_path / "logs"),
                    "--gpu-model",
                    "A100-80GB",
                    "--store",
                    url,
                ]
            )
            == 0
        )
    with RunStore(url) as store:
        (r,) = store.list_runs()
        assert r.gpu_hours == pytest.approx(600 / 3600)
        assert len(store.samples()) == 10


def test_a_run_of_ours_comes_back_with_its_metrics(tmp_path: Path) -> None:
    """A plain-loop run tracked live (simulated H100 at 60%) through the TensorBoard sink: the
    store that tracked it skips it; a new store gets it from its ``gpu/*`` points."""
    tracked = f"sqlite:///{tmp_path / 'tracked.db'}"
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
        sinks=[TensorBoardSink(logdir=tmp_path / "tb")],
        log_to_python=False,
    ) as run:
        deadline = time.monotonic() + 3.2
        while time.monotonic() < deadline:
            time.sleep(0.01)
            run.step(samples=8)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    points = [(e.wall_time, e.value) for e in acc.Scalars("gpu/util_pct")]
    assert len(points) >= 4

    again = import_tensorboard(tracked, [tmp_path / "tb"])
    assert again.records == [] and again.skipped == {TRACKED: ["tb"]}
    (r,) = read_tensorboard([tmp_path / "tb"]).records
    assert (r.id, r.source, r.gpu_model, r.gpu_count) == (run.record.id, "tensorboard", "H100", 1)  # type: ignore[union-attr]
    span = points[-1][0] - points[0][0]
    assert r.gpu_hours == pytest.approx(span / 3600, rel=1e-6)
    weighted = sum((b[0] - a[0]) * b[1] for a, b in pairwise(points))
    assert r.util_pct == pytest.approx(weighted / span, rel=1e-6)
    assert r.samples_per_s == pytest.approx(run.record.samples_per_s, rel=1e-3)  # type: ignore[union-attr]
    # MFU comes back with its denominator (issue 45): the summary note carries them
    ours = run.record
    assert ours is not None and ours.mfu is not None and r.mfu == pytest.approx(ours.mfu, rel=1e-3)
    assert (r.mfu_peak_tflops, r.mfu_dtype, r.mfu_dtype_from) == (66.9, "fp32", "assumed")
    assert r.mfu_note == ours.mfu_note
    assert ours.ofu is not None and r.ofu == pytest.approx(ours.ofu, rel=1e-3)
    # who ran it and the tracker's verdict come back (issue 46: the team was lost, and the
    # verdict judged again from the points, which carry no data wait or MFU)
    assert (r.team, r.project, r.verdict, r.advice) == ("nlp", "llm", ours.verdict, ours.advice)
    # GPU-hours and dollars: the tracker's, or a note names the difference
    done = read_tensorboard([tmp_path / "tb"])
    if abs(r.gpu_hours - ours.gpu_hours) > 0.01 * ours.gpu_hours:
        (said,) = done.notes
        assert said.startswith(f"tb: {r.gpu_hours:.4g} GPU-h (${r.cost_usd:.4g}) from its logged")
        assert f"{ours.gpu_hours:.4g} GPU-h (${ours.cost_usd:.4g}) in the tracker's record" in said
    else:
        assert done.notes == []


def cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-3])


def flip_last_scalar(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # inside the last record's data: a scalar
    path.write_bytes(bytes(data))


def foreign(path: Path) -> None:
    path.write_bytes(b"step,loss\n0,1.0\n")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (cut, "cut off at byte"),
        (flip_last_scalar, "data checksum mismatch"),
        (foreign, "checksum mismatch"),
    ],
    ids=["cut", "flipped", "foreign"],
)
def test_a_damaged_event_file_is_one_line_naming_it_and_imports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: object, message: str
) -> None:
    write_run(tmp_path / "logs" / "good", seconds=600)
    write_run(tmp_path / "logs" / "bad", seconds=600)
    (bad,) = (tmp_path / "logs" / "bad").glob("events.out.tfevents.*")
    damage(bad)  # type: ignore[operator]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    code = main(
        [
            "import",
            "tensorboard",
            str(tmp_path / "logs"),
            "--gpu-model",
            "A100-80GB",
            "--store",
            url,
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"gpu-kpi: error: {bad.resolve()}: ") and message in err
    assert err.count("\n") == 1
    with RunStore(url) as store:
        assert store.list_runs() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tag", "loss=train/loss"], "KEY=TAG with KEY one of util_pct"),
        (["--gpus", "0"], "--gpus 0: from 1 to 4096"),
        (["--tz", "UTC"], "--tz and --per-gpu are for nvidia-smi logs"),
    ],
)
def test_bad_options_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    write_run(tmp_path / "logs", seconds=60)
    assert (
        main(
            [
                "import",
                "tensorboard",
                str(tmp_path / "logs"),
                *args,
                "--store",
                f"sqlite:///{tmp_path / 'runs.db'}",
            ]
        )
        == 2
    )
    assert message in capsys.readouterr().err


def test_the_reader_agrees_with_tensorboards_own(tmp_path: Path) -> None:
    """Our TFRecord reading sees the same scalars as TensorBoard's EventAccumulator."""
    write_run(tmp_path / "r", seconds=300, util=42.0)
    scalars = readers.read_tensorboard(tmp_path / "r")
    (r,) = read_tensorboard(
        [tmp_path / "r"], tags={"util_pct": "sys/gpu_util"}, labels=Labels(gpu_model="A100-80GB")
    ).records
    assert len(scalars["sys/gpu_util"]) == 31
    assert r.gpu_hours == pytest.approx((31 - 1) * 10 / 3600)


def test_progress_goes_to_a_terminal_only(capsys: pytest.CaptureFixture[str]) -> None:
    from reports.imports.play import progress

    assert list(progress(["a", "b"], "TensorBoard runs", show=True)) == ["a", "b"]
    assert capsys.readouterr().err == "\rTensorBoard runs: 1/2\rTensorBoard runs: 2/2\n"
    assert list(progress(["a", "b"], "TensorBoard runs")) == ["a", "b"]  # stderr is no tty here
    assert capsys.readouterr().err == ""


def test_two_points_at_one_wall_time_do_not_stop_the_import(tmp_path: Path) -> None:
    """Two writers (or a restarted one) logging the mapped tag at the same wall time: one point
    per time, the last; the run goes in."""
    write_run(tmp_path / "r", seconds=600, util=50.0)
    w = summary_writer(tmp_path / "r")
    w.add_scalar("sys/gpu_util", 70.0, 999, walltime=(MONDAY_10 + timedelta(minutes=5)).timestamp())
    w.close()
    (r,) = read_tensorboard(
        [tmp_path / "r"], tags={"util_pct": "sys/gpu_util"}, labels=Labels(gpu_model="A100-80GB")
    ).records
    assert r.gpu_hours == pytest.approx(600 / 3600)
    # the point at 10:05 (70%) covers 10 s of 600
    assert r.util_pct == pytest.approx((590 * 50 + 10 * 70) / 600)


@pytest.mark.parametrize("suffix", ["", ".v2"], ids=["torch-names", "keras-names"])
def test_one_fit_in_train_and_validation_folders_is_one_run(tmp_path: Path, suffix: str) -> None:
    """Keras 3's ``TensorBoard`` callback (``keras/src/callbacks/tensorboard.py``) writes
    ``train/`` and ``validation/`` under its ``log_dir`` for one fit, from one process, through
    ``tf.summary.create_file_writer``: ``events.out.tfevents.<time>.<host>.<pid>.<n>.v2``,
    ``<n>`` a counter of the process's writers. The ``.v2`` made the pid unread (``<n>`` was
    taken for it), so the two folders were two runs holding the same hour ($4.00). One run of
    an hour on one A100 now ($2.00)."""
    logs = tmp_path / "keras" / "fit-1"
    write_run(logs / "train", seconds=3600, suffix=suffix)
    write_run(logs / "validation", seconds=3600, every=60, suffix=suffix)
    names = [f.name for f in sorted(logs.glob("*/events.out.tfevents.*"))]
    pattern = rf"events\.out\.tfevents\.\d+\.[^/]+\.{os.getpid()}\.\d+{re.escape(suffix)}"
    assert len(names) == 2 and all(re.fullmatch(pattern, n) for n in names), names
    assert len({n.split(".")[-2 if suffix else -1] for n in names}) == 2  # two writers' <n>
    done = read_tensorboard([tmp_path / "keras"], labels=Labels(gpu_model="A100-80GB"))
    (r,) = done.records
    assert r.name == "fit-1" and r.gpu_hours == pytest.approx(1.0)
    assert r.cost_usd == pytest.approx(A100_PRICE)


def test_split_folders_of_two_processes_stay_two_runs(tmp_path: Path) -> None:
    """``train/`` and ``validation/`` beside each other but written by two processes (another
    pid in the file name) are two fits' folders: two runs, an hour each."""
    logs = tmp_path / "fit-2"
    write_run(logs / "train", seconds=3600, suffix=".v2")
    write_run(logs / "validation", seconds=3600, suffix=".v2")
    (f,) = (logs / "validation").glob("events.out.tfevents.*")
    parts = f.name.split(".")
    parts[-3] = str(int(parts[-3]) + 1)  # <pid>: another process
    f.rename(f.with_name(".".join(parts)))
    done = read_tensorboard([logs], labels=Labels(gpu_model="A100-80GB"))
    assert sorted((r.name, round(r.gpu_hours, 6)) for r in done.records) == [
        ("train", 1.0),
        ("validation", 1.0),
    ]


def test_a_folder_of_the_process_we_logged_is_not_a_second_run(tmp_path: Path) -> None:
    """The HF Trainer writes its own folder beside ours, from the same process: our run holds
    that GPU-time, so the Trainer's folder is skipped and named, not imported as a second
    hour."""
    logs = tmp_path / "runs"
    w = summary_writer(logs / "gpu-kpi")
    w.add_text("gpu-kpi/run", "- run_id: hf-run-1\n- gpu_count: 1\n- gpu_model: H100", 0)
    for k in range(61):
        wall = (MONDAY_10 + timedelta(minutes=k)).timestamp()
        w.add_scalar("gpu/util_pct", 70.0, k, walltime=wall)
    w.close()
    write_run(logs / "Dec01_10-00-00_host", seconds=3600)  # the Trainer's own
    done = read_tensorboard([logs], labels=Labels(gpu_model="H100"))
    (r,) = done.records
    assert r.id == "hf-run-1" and r.gpu_hours == pytest.approx(1.0)
    assert r.util_pct == pytest.approx(70.0)
    (why,) = done.skipped
    assert why.startswith("written by the process of a run gpu-kpi logged")
    assert done.skipped[why] == ["Dec01_10-00-00_host"]


def test_a_lightning_run_is_named_with_its_project(tmp_path: Path) -> None:
    """Every Lightning project logs ``lightning_logs/version_0``: the name keeps the logdir's
    own name (``nerf/…``) so two projects' runs are told apart."""
    for project in ("nerf", "gpt"):
        write_run(tmp_path / project / "lightning_logs" / "version_0", seconds=600)
    done = read_tensorboard(
        [tmp_path / "nerf", tmp_path / "gpt"], labels=Labels(gpu_model="A100-80GB")
    )
    assert sorted(r.name for r in done.records) == [
        "gpt/lightning_logs/version_0",
        "nerf/lightning_logs/version_0",
    ]


def test_a_logdir_1200_folders_deep_is_walked(tmp_path: Path) -> None:
    """``rglob`` raised RecursionError on a logdir ~1,200 levels deep; the walk is a loop now,
    and the W&B import walks the same way."""
    from reports.imports.wandb_runs import find_logs

    deep = tmp_path / "logs"
    deep.mkdir()
    folders = [deep]
    for _ in range(1200):  # not os.makedirs: it recurses too
        deep = deep / "d"
        deep.mkdir()
        folders.append(deep)
    try:
        write_run(deep / "run", seconds=600)
        (r,) = read_tensorboard([tmp_path / "logs"], labels=Labels(gpu_model="H100")).records
        assert r.gpu_hours == pytest.approx(600 / 3600)
        (deep / "run-x.wandb").write_bytes(b"")
        assert find_logs([tmp_path / "logs"]) == [(deep / "run-x.wandb").resolve()]
    finally:  # bottom up: pytest's own clean-up (shutil.rmtree) recurses as deep
        for folder in reversed(folders):
            for entry in sorted(folder.rglob("*"), reverse=True) if folder == deep else ():
                entry.rmdir() if entry.is_dir() else entry.unlink()
            folder.rmdir()


def forged(
    logdir: Path,
    *,
    gpus: int | str,
    rate: float | None,
    points: list[datetime],
    run_id: str = "forged-1",
) -> None:
    """A run note of ours claiming ``gpus`` H100s, at $3.85 where it logs a ``rate`` (the
    price per hour, ``cost/usd_per_hour``, at every point; None: an unpriced note, no rate),
    then utilization at ``points``."""
    w = summary_writer(logdir)
    note = f"- run_id: {run_id}\n- gpu_count: {gpus}\n- gpu_model: H100"
    w.add_text("gpu-kpi/run", note + ("\n- price_per_gpu_hour: 3.85" if rate else ""), 0)
    for k, at in enumerate(points):
        w.add_scalar("gpu/util_pct", 50.0, k, walltime=at.timestamp())
        if rate is not None:
            w.add_scalar("cost/usd_per_hour", rate, k, walltime=at.timestamp())
    w.close()


def test_a_note_whose_gpu_count_its_own_points_contradict_is_not_imported(tmp_path: Path) -> None:
    """An 18 KB file whose note claimed 4,096 GPUs became 3,379 GPU-h and $13,010 never spent.
    Its own logged price per hour says one GPU ($3.85/h): the run is skipped and named."""
    hour = [MONDAY_10 + timedelta(minutes=m) for m in range(61)]
    forged(tmp_path / "logs" / "run", gpus=4096, rate=3.85, points=hour)
    done = read_tensorboard([tmp_path / "logs"])
    assert done.records == [] and done.samples == []
    assert done.skipped == {
        "its run note's GPU count disagrees with its own cost/usd_per_hour: a damaged or "
        "forged note": ["run"]
    }


def test_our_points_far_apart_are_a_gap_not_gpu_time(tmp_path: Path) -> None:
    """Two points of ours 100 days apart covered the 100 days (each point was taken for the
    window since the one before). A point covers at most an hour now: one GPU, consistent
    note, 1 GPU-h, not 2,400."""
    far = [MONDAY_10, MONDAY_10 + timedelta(minutes=60), MONDAY_10 + timedelta(days=100)]
    forged(tmp_path / "logs" / "run", gpus=1, rate=3.85, points=far)
    (r,) = read_tensorboard([tmp_path / "logs"]).records
    assert r.gpu_hours == pytest.approx(1.0)
    assert r.cost_usd == pytest.approx(3.85)


HOUR = [MONDAY_10 + timedelta(minutes=m) for m in range(61)]


def test_an_unpriced_note_claiming_1e308_gpus_is_skipped_and_named(tmp_path: Path) -> None:
    """A note with no price (so no logged rate to check it by) and ``gpu_count: 1e308`` made a
    4,096-GPU run: 4,096 GPU-h of an hour. Nothing in the logdir shows more than one host's
    GPUs (its files name one host): over 64 the run is skipped and named, not cut down to a
    made-up count. Eight GPUs on one host, the note's word is taken."""
    forged(tmp_path / "logs" / "huge", gpus="1e308", rate=None, points=HOUR)
    forged(tmp_path / "logs" / "eight", gpus=8, rate=None, points=HOUR, run_id="eight-1")
    done = read_tensorboard([tmp_path / "logs"])
    assert done.skipped == {UNBACKED: ["huge"]}
    (r,) = done.records
    assert (r.id, r.gpu_count, r.gpu_hours) == ("eight-1", 8, pytest.approx(8.0))
    assert r.cost_usd == pytest.approx(8 * 3.85)  # the table's H100


def test_a_5000_character_run_id_is_hashed_not_written_into_every_row(tmp_path: Path) -> None:
    """A note's 5,000-character run id went into every minute row (a 20 KB logdir made a
    321 MB store). An id over 200 characters is no id the tracker makes: the run's id is a
    hash of it, in the record and every row."""
    long_id = "x" * 5000
    forged(tmp_path / "logs" / "run", gpus=1, rate=3.85, points=HOUR, run_id=long_id)
    done = read_tensorboard([tmp_path / "logs"])
    (r,) = done.records
    assert r.id == "tb-" + hashlib.sha256(long_id.encode()).hexdigest()[:24]
    assert r.gpu_hours == pytest.approx(1.0)
    assert len(done.samples) == 60
    assert {(s.run_id, s.gpu) for s in done.samples} == {(r.id, f"{r.id}-gpu0")}


def test_two_summaries_30_days_apart_are_no_gpu_time(tmp_path: Path) -> None:
    """A run of two events 30 days apart was 720 GPU-h (their one interval, the median, made
    the gap 90 days). No interval over a day is GPU-time: skipped and named."""
    w = summary_writer(tmp_path / "logs" / "far")
    for step, at in enumerate([MONDAY_10, MONDAY_10 + timedelta(days=30)]):
        w.add_scalar("train/loss", 1.0, step, walltime=at.timestamp())
    w.close()
    done = read_tensorboard([tmp_path / "logs"], labels=Labels(gpu_model="A100-80GB"))
    assert (done.records, done.skipped) == ([], {NO_GPU_TIME: ["far"]})


def test_an_event_at_a_20_digit_wall_time_is_left_out_and_counted(tmp_path: Path) -> None:
    """An event at 1e19 s since 1970 stopped the whole import ("no time", exit 2). It is a bad
    event, not a damaged file: left out, counted and named; the run is its hour."""
    write_run(tmp_path / "logs" / "r", seconds=3600)
    w = summary_writer(tmp_path / "logs" / "r")
    w.add_scalar("train/loss", 0.1, 999, walltime=1e19)
    w.close()
    done = read_tensorboard([tmp_path / "logs"], labels=Labels(gpu_model="A100-80GB"))
    (r,) = done.records
    assert r.gpu_hours == pytest.approx(1.0)
    (note,) = done.notes
    assert note.startswith(
        "skipped 1 reading(s) whose time is no time (outside the years 1970-9998): "
        f"{(tmp_path / 'logs' / 'r').resolve()}/events.out.tfevents."
    )
    assert note.endswith(": an event at 1e+19 s since 1970)")


def test_our_summary_s_words_are_kept_to_a_bound() -> None:
    """A summary is a file anyone can write: a verdict of a megabyte comes back cut."""
    from reports.imports.play import OUR_TEXT_MAX, our_texts

    summary = {"verdict": "x" * 1_000_000, "advice": 7, "mfu_note": ""}
    assert our_texts(summary.get) == {"verdict": "x" * OUR_TEXT_MAX}
