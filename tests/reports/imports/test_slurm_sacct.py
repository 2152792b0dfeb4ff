"""sacct's output, as a real Slurm 22.05 wrote it (``tests/data/slurm``), read into allocations:
each job's GPUs and span against figures recomputed from the file's own columns, the JSON and
the parsable forms against each other, and what is not an allocation left out and counted."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from reports.errors import ImportFailed
from reports.imports.slurm import expand_nodes, gpus_of_gres, gpus_of_tres, read_sacct

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"


def read(name: str, tz: object = UTC):  # type: ignore[no-untyped-def]
    return read_sacct((DATA / name).read_text(), tz=tz)  # type: ignore[arg-type]


def file_rows(name: str) -> list[dict[str, str]]:
    lines = (DATA / name).read_text().splitlines()
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"), strict=True)) for line in lines[1:]]


def test_every_allocation_of_the_finished_jobs() -> None:
    got = read("sacct-X.txt")
    assert got.unreadable == [] and got.steps == 0
    assert got.not_started == 1  # vis-cancel-pending: cancelled before it ran, no AllocTRES
    jobs = {j.job_id: j for j in got.jobs}
    assert sorted(jobs) == sorted(
        ["1", "3", "4", "6", "7", "8", "9", "11", "12", "13", "14", "15", "2_0", "2_1", "2_2"]
    )
    train = jobs["1"]
    assert (train.name, train.user, train.account, train.partition) == (
        "nlp-train",
        "root",
        "nlp",
        "gpu",
    )
    assert (train.state, train.gpus, train.gpu_types, train.nodes) == (
        "COMPLETED",
        2,
        (("h100", 2),),
        "vm",
    )
    assert train.start == datetime(2026, 12, 2, 10, 34, 28, tzinfo=UTC)
    assert train.end == datetime(2026, 12, 2, 10, 34, 48, tzinfo=UTC)
    assert jobs["6"].state == "CANCELLED"  # "CANCELLED by 0"
    assert (jobs["9"].gpus, jobs["11"].state, jobs["14"].gpus) == (3, "TIMEOUT", 0)
    # array tasks: their own allocation ids; the last task keeps the array's id
    assert [
        (jobs[t].raw_id, jobs[t].array_job_id, jobs[t].array_task_id) for t in ("2_0", "2_1", "2_2")
    ] == [
        ("16", "2", 0),
        ("17", "2", 1),
        ("2", "2", 2),
    ]
    assert jobs["1"].array_job_id is None and jobs["15"].user == "nobody"


def test_gpu_seconds_against_the_files_own_columns() -> None:
    """Σ GPUs × (end − start) of the reader against Σ gres/gpu × ElapsedRaw of each line,
    parsed here with a regular expression: 181 GPU-seconds (1: 2 × 20, 9: 3 × 15, 11: 62, …)."""
    expected = 0
    for row in file_rows("sacct-X.txt"):
        m = re.search(r"(?:^|,)gres/gpu=(\d+)", row["AllocTRES"])
        expected += int(m.group(1)) * int(row["ElapsedRaw"]) if m else 0
    got = read("sacct-X.txt").jobs
    seconds = sum(j.gpus * (j.end - j.start).total_seconds() for j in got if j.end)
    assert expected == 181 and seconds == expected


def test_the_json_says_what_the_parsable_form_says() -> None:
    text, js = read("sacct-X.txt"), read("sacct-X.json")
    assert js.unreadable == [] and js.not_started == text.not_started == 1
    assert {j.cluster for j in js.jobs} == {"gpukpi"}  # the parsable file has no Cluster field
    assert {j.cluster for j in text.jobs} == {""}
    assert sorted(js.jobs, key=lambda j: j.raw_id) == sorted(
        (dataclasses.replace(j, cluster="gpukpi") for j in text.jobs), key=lambda j: j.raw_id
    )


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu[01-03,07],cpu1", ("gpu01", "gpu02", "gpu03", "gpu07", "cpu1")),
        ("r[1-2]n[08-09]", ("r1n08", "r1n09", "r2n08", "r2n09")),
        ("a[9-11],a10", ("a9", "a10", "a11")),
        ("vm", ("vm",)),
        ("None assigned", ()),
    ],
)
def test_node_lists_expand_as_slurm_writes_them(text: str, hosts: tuple[str, ...]) -> None:
    assert expand_nodes(text) == hosts


@pytest.mark.parametrize("text", ["a[1-", "a[x]", "a[3-1]", "a[0-99999999]", "a]"])
def test_a_node_list_that_is_none_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="node list"):
        expand_nodes(text)


def test_steps_are_counted_and_left_out() -> None:
    steps = read("sacct-steps.txt")
    rows = file_rows("sacct-steps.txt")
    assert steps.steps == sum("." in r["JobID"] for r in rows) > 15  # .batch, .extern, srun's .0 …
    assert steps.jobs == read("sacct-X.txt").jobs


def test_while_jobs_run_and_wait() -> None:
    got = read("midrun2-sacct-X.txt")
    jobs = {j.job_id: j for j in got.jobs}
    assert (jobs["6"].state, jobs["6"].end) == ("RUNNING", None)
    assert jobs["9"].gpus == 3 and jobs["9"].end is None
    # vis-cancel-pending, and 11, 12, 13, 14, 15 pending: Start Unknown, no AllocTRES
    assert got.not_started == 6 and "11" not in jobs
    assert read("midrun-sacct-X.json").jobs == []  # "Nothing found": no job, no error


def test_times_without_a_zone_are_in_the_zone_given() -> None:
    berlin = read("sacct-X.txt", tz=ZoneInfo("Europe/Berlin"))
    train = next(j for j in berlin.jobs if j.job_id == "1")
    assert train.start == datetime(2026, 12, 2, 9, 34, 28, tzinfo=UTC)  # 10:34:28 CET
    assert train.end is not None and train.end - train.start == timedelta(seconds=20)


def test_a_bad_line_is_named_and_the_others_read() -> None:
    lines = (DATA / "sacct-X.txt").read_text().splitlines()
    lines[1] = lines[1].replace("2026-12-02T10:34:28", "yesterday")  # job 1
    lines[2] = lines[2].replace("gres/gpu=1,", "gres/gpu=one,")  # job 3
    lines[3] = lines[3] + "|extra"  # job 4
    got = read_sacct("\n".join(lines), tz=UTC)
    assert [(u.where, u.reason) for u in got.unreadable] == [
        ("line 2", "Start is not a time: 'yesterday'"),
        ("line 3", "gres/gpu is not a count: 'one'"),
        ("line 4", "15 fields where the header has 14"),
    ]
    assert len(got.jobs) == 12


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            (DATA / "sacct-X-lowercase-p.txt").read_text(),
            "sacct output without Start, End, AllocTRES",
        ),
        ("JobID JobName State\n1 x COMPLETED\n", "not sacct output"),
        ("", "not sacct output"),
        ("{not json", "the JSON cannot be read"),
        ('{"meta": {}}', "no list of jobs"),
    ],
)
def test_what_is_not_sacct_output_is_refused(text: str, message: str) -> None:
    with pytest.raises(ImportFailed, match=re.escape(message)):
        read_sacct(text, tz=UTC)


def test_tres_and_gres_lists() -> None:
    assert gpus_of_tres("billing=2,cpu=2,gres/gpu:h100=2,gres/gpu=2,mem=4G,node=1") == {
        "h100": 2,
        "": 2,
    }
    assert gpus_of_tres("cpu=8,gres/gpu:a100=4,gres/gpu:v100=2,mem=64G") == {"a100": 4, "v100": 2}
    assert gpus_of_tres("cpu=1,mem=500M,gres/gpumem=40G,gres/gpuutil=80") == {}
    assert gpus_of_gres("gpu:tesla:2(IDX:0-1),gpu:k80:1(IDX:2)") == {"tesla": 2, "k80": 1}
    assert gpus_of_gres("gpu:4") == {"": 4}


PUBLIC = DATA / "public"


def test_a_public_clusters_parsable_output_every_field() -> None:
    """facebookresearch/gcm's sample: 107 fields, a byte that is no UTF-8, steps without
    their job's row. GPU-seconds from its own gres/gpu and ElapsedRaw: 8 × 99 + 1 × 7212."""
    text = (
        (PUBLIC / "gcm-sample-sacct-output-invalid-utf8.txt").read_bytes().decode(errors="replace")
    )
    got = read_sacct(text, tz=UTC)
    assert got.unreadable == [] and got.steps == 9 and got.not_started == 0
    by_id = {j.job_id: j for j in got.jobs}
    assert sorted(by_id) == ["3557891", "3557892"]
    assert (by_id["3557891"].gpus, by_id["3557891"].state) == (8, "FAILED")
    assert (by_id["3557892"].gpus, by_id["3557892"].state) == (1, "TIMEOUT")
    expected = 0
    for line in text.splitlines()[1:]:
        row = dict(zip(text.splitlines()[0].split("|"), line.split("|"), strict=True))
        m = re.search(r"(?:^|,)gres/gpu=(\d+)", row["AllocTRES"])
        if "." not in row["JobID"] and m:
            expected += int(m.group(1)) * int(row["ElapsedRaw"])
    seconds = sum(j.gpus * (j.end - j.start).total_seconds() for j in got.jobs if j.end)
    assert expected == 8 * 99 + 7212 and seconds == expected


@pytest.mark.parametrize("version", ["22_5_9", "23_2_6", "23_11_5"])
def test_public_json_of_three_slurm_versions(version: str) -> None:
    import json

    text = (PUBLIC / f"sarc-slurm_{version}.json").read_text()
    raw = json.loads(text)["jobs"][0]
    got = read_sacct(text, tz=UTC)
    assert got.unreadable == [] and len(got.jobs) == 1
    job = got.jobs[0]
    assert job.start == datetime.fromtimestamp(raw["time"]["start"], tz=UTC)
    if version == "22_5_9":  # an array task that failed: 16 GPUs over 4 nodes
        assert (job.job_id, job.array_job_id, job.array_task_id) == (
            "20247445_100",
            "20247445",
            100,
        )
        assert (job.state, job.gpus, job.nodes) == ("FAILED", 16, "ng[30103,30203,30706-30707]")
        assert job.end is not None
        assert (job.end - job.start).total_seconds() == raw["time"]["elapsed"] == 124403
    else:  # the same running job, in 23.02's and 23.11's shapes
        assert (job.job_id, job.state, job.gpus, job.end, job.array_job_id) == (
            "4",
            "RUNNING",
            2,
            None,
            None,
        )


def test_sinfo_nodes_gpus_once_each_and_unavailable_ones_named() -> None:
    """``sinfo -N -h -o '%N|%G|%t'`` as Slurm 22.05 writes it: a node once per partition, GRES
    with a type and socket binding, two types on one node, a CPU node, a drained node."""
    from reports.imports.slurm_jobs import parse_sinfo

    text = "\n".join(
        [
            "gpu01|gpu:h100:8(S:0-1)|mix",
            "gpu01|gpu:h100:8(S:0-1)|mix",  # in a second partition
            "gpu02|gpu:a100:4(S:0),gpu:v100:2(S:1)|idle",
            "gpu03|gpu:4|alloc",
            "cpu01|(null)|idle",
            "gpu04|gpu:h100:8(S:0-1)|drain",
            "gpu05|gpu:h100:8|down*",
        ]
    )
    nodes, down = parse_sinfo(text)
    assert nodes == {"gpu01": (8, "h100"), "gpu02": (6, "a100"), "gpu03": (4, None)}
    assert down == ["gpu04", "gpu05"]
