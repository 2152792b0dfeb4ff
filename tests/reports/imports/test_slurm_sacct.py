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
from fakes import traced_peak

from reports.errors import ImportFailed
from reports.imports.slurm import FORMAT, expand_nodes, gpus_of_gres, gpus_of_tres, read_sacct

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
    # job 4: a field too many is JobName's (a name may hold |), so the fields after it, read
    # from the right, are one off: its End is its Elapsed
    lines[3] = lines[3] + "|extra"
    lines[4] = lines[4].rsplit("|", 1)[0]  # job 6: a field too few, no line after it to join
    got = read_sacct("\n".join(lines), tz=UTC)
    assert [(u.where, u.reason) for u in got.unreadable] == [
        ("line 2", "Start is not a time: 'yesterday'"),
        ("line 3", "gres/gpu is not a count: 'one'"),
        ("line 4", "End is not a time: '00:00:00'"),
        ("line 5", "13 fields where the header has 14"),
    ]
    assert len(got.jobs) == 11


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


# -- issue 41: what a job's name, a delimiter, a node list or a count can do to the import -------
def _gpu_seconds_of_file(name: str) -> int:
    """Σ gres/gpu × ElapsedRaw of the file's jobs, from its own columns (no name in them)."""
    total = 0
    for row in file_rows(name):
        m = re.search(r"(?:^|,)gres/gpu=(\d+)", row["AllocTRES"])
        total += int(m.group(1)) * int(row["ElapsedRaw"]) if m else 0
    return total


def _renamed(job: str, name: str, text: str | None = None) -> str:
    """sacct-X.txt with job ``job``'s JobName set to ``name``, as sacct -P writes it (raw)."""
    lines = (text or (DATA / "sacct-X.txt").read_text()).split("\n")
    for i, line in enumerate(lines):
        cells = line.split("|")
        if cells[0] == job:
            lines[i] = "|".join([*cells[:2], name, *cells[3:]])
    return "\n".join(lines)


@pytest.mark.parametrize("name", ["a|b|c", "a\nb", "x|\n|y\n\nz", "a|b\n"])
def test_a_name_with_bars_or_line_breaks_keeps_its_job(name: str) -> None:
    """Any user names their job: a | or a line break in JobName neither hides the job nor
    moves its fields. Job 1 (nlp-train, 2 GPUs × 20 s) renamed: every job read, 181
    GPU-seconds as the file's own columns say."""
    got = read_sacct(_renamed("1", name), tz=UTC)
    assert got.unreadable == []
    jobs = {j.job_id: j for j in got.jobs}
    assert len(jobs) == 15 and jobs["1"].gpus == 2 and jobs["1"].user == "root"
    assert jobs["1"].name == name.replace("\n\n", "\n")  # a blank line is passed over
    seconds = sum(j.gpus * (j.end - j.start).total_seconds() for j in got.jobs if j.end)
    assert seconds == _gpu_seconds_of_file("sacct-X.txt") == 181


def test_a_name_with_a_line_break_in_p_output_and_with_jobname_last() -> None:
    """``-p`` (a | after the last field) and this import's own --format (JobName last): the
    name ``a|b`` + line break + ``c|`` is one job's; GPU-seconds as the rows say (2 × 3600 +
    4 × 60)."""
    header = FORMAT.replace(",", "|")
    rows = [
        ("c|7|7|ann|nlp|gpu|COMPLETED|1700000000|1700003600|3600|gres/gpu=2|n1|", "a|b\nc|"),
        ("c|8|8|bob|nlp|gpu|COMPLETED|1700000000|1700000060|60|gres/gpu=4|n2|", "plain"),
    ]
    for end in ("", "|"):  # -P, -p
        text = "\n".join([header + end, *(fields + name + end for fields, name in rows)])
        got = read_sacct(text, tz=UTC)
        assert got.unreadable == []
        assert [(j.raw_id, j.name, j.user) for j in got.jobs] == [
            ("7", "a|b\nc|", "ann"),
            ("8", "plain", "bob"),
        ]
        seconds = sum(j.gpus * (j.end - j.start).total_seconds() for j in got.jobs if j.end)
        assert seconds == 2 * 3600 + 4 * 60


def test_a_name_cannot_write_a_row_where_gpu_kpi_runs_sacct() -> None:
    """Running sacct, the import gives it a delimiter no name holds: a name holding a line
    break and a whole row of this import's format (| between) stays the name."""
    from reports.imports.slurm_jobs import unguessable

    d = unguessable()
    assert re.fullmatch(r"\|[0-9a-f]{16}\|", d) and d != unguessable()
    forged = (
        "gpukpi|999|999|victim|vision|gpu|COMPLETED|1700000000|1700360000|360000|gres/gpu=8|n1|x"
    )
    text = "\n".join(
        [
            FORMAT.replace(",", d),
            d.join(["gpukpi", "9", "9", "eve", "nlp", "gpu", "COMPLETED", "1700000000"])
            + d
            + d.join(["1700000600", "600", "gres/gpu=1", "n1", f"evil\n{forged}"]),
        ]
    )
    for given in (d, None):  # saved with such a delimiter, it is found in the header
        got = read_sacct(text, tz=UTC, delimiter=given)
        assert [(j.raw_id, j.user, j.gpus, j.name) for j in got.jobs] == [
            ("9", "eve", 1, f"evil\n{forged}")
        ]


def test_a_custom_delimiter_is_found_in_the_header() -> None:
    """GCM writes sacct -P --delimiter='|#': the delimiter is what stands between the header's
    field names, and the file reads as the | file does; sacct's own table (spaces), and a
    delimiter its values hold (``,``: ``cpu=1,gres/gpu=2``), are refused, naming what was
    found."""
    plain = (DATA / "sacct-X.txt").read_text()
    for d in ("|#", ";", "\t", "::", "|5f3a9c0d2e4b6a18|"):
        got = read_sacct(plain.replace("|", d), tz=UTC)
        assert got == read_sacct(plain, tz=UTC), d
    with pytest.raises(ImportFailed, match=re.escape("fields separated by ' ', sacct's own")):
        read_sacct("JobID JobIDRaw Start End AllocTRES\n1 1 x y z\n", tz=UTC)
    with pytest.raises(ImportFailed, match=re.escape("separated by ',', which sacct's own")):
        read_sacct(plain.replace("|", ","), tz=UTC)


def test_a_saved_files_running_job_ends_at_the_files_own_time(tmp_path: Path) -> None:
    """A file saved on 2024-03-01 and imported years later: its running job (4 GPUs from
    08:00) runs to the file's latest time, the other job's End 12:30: 4 × 4.5 h = 18 GPU-h,
    and 1 × 3.5 h = 3.5 GPU-h beside it: 21.5 GPU-h, not 4 GPUs up to today."""
    from clirun import gpu_kpi

    saved = tmp_path / "sacct-2024.txt"
    saved.write_text(
        "JobID|JobIDRaw|JobName|User|Account|Partition|State|Start|End|AllocTRES|NodeList\n"
        "500|500|train|ann|nlp|gpu|RUNNING|2024-03-01T08:00:00|Unknown|gres/gpu=4|gpu01\n"
        "501|501|eval|bob|nlp|gpu|COMPLETED|2024-03-01T09:00:00|2024-03-01T12:30:00|"
        "gres/gpu=1|gpu02\n"
    )
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    p = gpu_kpi("import", "slurm", str(saved), "--store", store)
    assert p.returncode == 0, p.stderr
    assert "imported 2 Slurm job(s) holding 21.5 GPU-h" in p.stdout


def test_a_job_ending_after_its_outputs_own_time_is_a_bad_row(tmp_path: Path) -> None:
    """End 9999-12-31 (the attack's own) was 139,781,550 GPU-h of one job; a start in 2090 of a
    running one, the same: each is after the file's own time (its last change, here set to
    2026-11-30), skipped and named; the other job's 2 GPU-h are imported."""
    import os

    from clirun import gpu_kpi

    saved = tmp_path / "sacct.txt"
    saved.write_text(
        "JobID|JobIDRaw|JobName|User|Account|Partition|State|Start|End|AllocTRES|NodeList\n"
        "1|1|x|u|a|gpu|COMPLETED|2026-11-24T10:00:00|9999-12-31T23:59:59|gres/gpu=2|n1\n"
        "2|2|y|u|a|gpu|COMPLETED|2026-11-24T10:00:00|2026-11-24T11:00:00|gres/gpu=2|n1\n"
        "3|3|z|u|a|gpu|RUNNING|2090-01-01T00:00:00|Unknown|gres/gpu=2|n1\n"
    )
    written = datetime(2026, 11, 30, tzinfo=UTC).timestamp()
    os.utime(saved, (written, written))
    p = gpu_kpi("import", "slurm", str(saved), "--store", f"sqlite:///{tmp_path / 'runs.db'}")
    assert p.returncode == 0, p.stderr
    assert "imported 1 Slurm job(s) holding 2.0 GPU-h" in p.stdout
    said = p.stdout + p.stderr
    assert "job 1: ends 9999-12-31T23:59:59+00:00, after the output's own time" in said
    assert "job 3: starts 2090-01-01T00:00:00+00:00, after the output's own time" in said


def test_json_counts_a_jobs_elapsed_time_and_its_running_jobs_to_its_own_time(
    tmp_path: Path,
) -> None:
    """sacct --json (22.05's shape): a requeued job, end − start 2 h 11 min but elapsed 2 h on
    2 GPUs: 4.0 GPU-h (not 4.37); a running job of 4 GPUs from 11:00, elapsed 1.5 h when
    sacct wrote it: to 12:30, 6.0 GPU-h: 10.0 GPU-h."""
    import json

    from clirun import gpu_kpi

    def at(hh: int, mm: int) -> int:
        return int(datetime(2024, 3, 1, hh, mm, tzinfo=UTC).timestamp())

    def job(raw: int, gpus: int, time: dict[str, int], state: str) -> dict[str, object]:
        return {
            "job_id": raw,
            "name": f"j{raw}",
            "user": "ann",
            "account": "nlp",
            "partition": "gpu",
            "state": {"current": state},
            "time": {"submission": at(9, 0), **time},
            "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": gpus}]},
            "nodes": "gpu01",
            "cluster": "c24",
        }

    jobs = [
        job(1, 2, {"start": at(10, 0), "end": at(12, 11), "elapsed": 7200}, "COMPLETED"),
        job(2, 4, {"start": at(11, 0), "end": 0, "elapsed": 5400}, "RUNNING"),
    ]
    saved = tmp_path / "sacct.json"
    saved.write_text(json.dumps({"jobs": jobs}, indent=2))
    p = gpu_kpi("import", "slurm", str(saved), "--store", f"sqlite:///{tmp_path / 'r.db'}")
    assert p.returncode == 0, p.stderr
    assert "imported 2 Slurm job(s) holding 10.0 GPU-h" in p.stdout
    got = read_sacct(saved.read_text(), tz=UTC)
    assert got.latest == datetime(2024, 3, 1, 12, 30, tzinfo=UTC)
    first = got.jobs[0]
    assert (first.start, first.end) == (
        datetime(2024, 3, 1, 10, 11, tzinfo=UTC),  # end − elapsed: its last run
        datetime(2024, 3, 1, 12, 11, tzinfo=UTC),
    )


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a[1-100]b[1-100]c[1-100]d[1-100]", "node list of more than 65,536 hosts"),
        ("a[1]" * 5_000, "node list: a host name of over 255 characters"),
    ],
)
def test_node_list_bombs_are_refused_before_they_expand(text: str, reason: str) -> None:
    """130 bytes naming 10⁸ hosts, and 5,000 brackets in one name: counted and measured
    first, refused in well under a second, in a few KiB (the old reader made 10⁸ names, or
    recursed 5,000 deep)."""
    peak, refused = traced_peak(_refusal, text, warm=("n[1-2]",))
    assert refused == reason
    assert peak < 1 << 20, peak


def _refusal(text: str) -> str | None:
    """Why :func:`expand_nodes` refuses ``text`` (None: it does not)."""
    try:
        expand_nodes(text)
    except ValueError as e:
        return str(e)
    return None


def test_a_node_list_bomb_skips_its_row_and_names_it(tmp_path: Path) -> None:
    from reports.imports.slurm_jobs import read_files

    saved = tmp_path / "sacct.txt"
    saved.write_text(
        "JobID|Start|End|AllocTRES|NodeList\n"
        "1|2026-12-02T10:00:00|2026-12-02T11:00:00|gres/gpu=1|a[1-100]b[1-100]c[1-100]d[1-100]\n"
        f"2|2026-12-02T10:00:00|2026-12-02T11:00:00|gres/gpu=1|{'a[1]' * 5_000}\n"
        "3|2026-12-02T10:00:00|2026-12-02T11:00:00|gres/gpu=1|n[1-2]\n"
    )
    done = read_files([str(saved)], tz=UTC, cluster="", teams={}, now=datetime.now(UTC))
    assert [(a.job_id, a.hosts) for a in done.jobs] == [("3", ("n1", "n2"))]
    assert [(u.where, u.reason) for u in done.unreadable] == [
        (f"{saved} job 1", "node list of more than 65,536 hosts"),
        (f"{saved} job 2", "node list: a host name of over 255 characters"),
    ]


@pytest.mark.slow  # ~12 s under tracemalloc
def test_saved_output_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """200,000 rows left out (steps, as sacct without -X writes them) around 3 jobs, read in
    blocks of 256 KiB: the read's peak memory is a small part of the file (the old one read it
    whole, then split it: twice its size; a block costs a few times its size, so the default
    blocks of 4 MiB would take more than this file of 16 MB)."""
    t0, t1 = "2026-12-02T10:00:00", "2026-12-02T11:00:00"
    saved = tmp_path / "sacct-steps.txt"
    with saved.open("w") as f:
        f.write("JobID|JobIDRaw|JobName|Start|End|AllocTRES|NodeList\n")
        for job in range(3):
            f.write(f"{job}|{job}|train-{job}|{t0}|{t1}|gres/gpu=2|n{job}\n")
            for step in range(66_667):
                f.write(f"{job}.{step}|{job}.{step}|python|{t0}|{t1}|cpu=1,gres/gpu=2|n{job}\n")
    size = saved.stat().st_size
    small = tmp_path / "sacct-small.txt"  # read first: imports done before measuring
    small.write_text(f"JobID|Start|End|AllocTRES|NodeList\n1|{t0}|{t1}|gres/gpu=1|n1\n")
    peak, done = traced_peak(_saved_read, saved, warm=(small,))
    assert done == (3, 200_001, 0)
    assert size > 12_000_000 and peak < size / 4, (peak, size)


def _saved_read(saved: Path) -> tuple[int, int, int]:
    """A saved output read as ``gpu-kpi import slurm FILE`` reads it, in blocks of 256 KiB (in
    a process of its own): (jobs, steps, rows not read)."""
    from reports.imports import slurm
    from reports.imports.slurm_jobs import read_files

    slurm.BLOCK_BYTES = 256 << 10

    done = read_files([str(saved)], tz=UTC, cluster="", teams={}, now=datetime.now(UTC))
    return len(done.jobs), done.steps, len(done.unreadable)


def test_a_holding_over_its_nodes_gpus_is_refused(tmp_path: Path) -> None:
    """1,000,000 GPUs on one node is $3.85M an hour of H100: over what a node can hold (64
    where its GPUs are not known), skipped and named; with sinfo's count of the nodes (running
    sacct), over theirs: 5 on a node of 4, 73 on a node of 8 and one not known (8 + 64)."""
    from reports.imports.slurm import SacctRead, SlurmJob
    from reports.imports.slurm_jobs import SlurmImported, allocations_of, read_files

    saved = tmp_path / "sacct.txt"
    saved.write_text(
        "JobID|Start|End|AllocTRES|NodeList\n"
        "1|2026-12-02T10:00:00|2026-12-02T11:00:00|gres/gpu:h100=1000000|gpu01\n"
        "2|2026-12-02T10:00:00|2026-12-02T11:00:00|gres/gpu:h100=64|gpu01\n"
    )
    done = read_files([str(saved)], tz=UTC, cluster="", teams={}, now=datetime.now(UTC))
    assert [a.job_id for a in done.jobs] == ["2"]
    assert [u.reason for u in done.unreadable] == [
        "1,000,000 GPUs on 1 node(s) that hold at most 64 (64 a node whose GPUs are not known)"
    ]

    def job(raw: str, gpus: int, nodes: str) -> SlurmJob:
        t = datetime(2026, 12, 2, 10, tzinfo=UTC)
        return SlurmJob(raw, raw, "x", "u", "a", "p", "COMPLETED", t, t, gpus, nodes=nodes)

    read = SacctRead(
        jobs=[job("1", 5, "vm"), job("2", 4, "vm"), job("3", 73, "g[1-2]"), job("4", 72, "g[1-2]")]
    )
    out = SlurmImported()
    seen = datetime(2026, 12, 2, 11, tzinfo=UTC)
    kw = {"where": "sacct", "seen_at": seen, "cluster": "c", "teams": {}, "out": out}
    allocations_of(read, node_gpus={"vm": 4, "g1": 8}, **kw)  # type: ignore[arg-type]
    assert [a.job_id for a in out.jobs] == ["2", "4"]
    assert [(u.where, u.reason) for u in out.unreadable] == [
        ("sacct job 1", "5 GPUs on 1 node(s) that hold at most 4 (4 GPUs known)"),
        (
            "sacct job 3",
            "73 GPUs on 2 node(s) that hold at most 72 (8 GPUs known, 64 a node whose GPUs "
            "are not known)",
        ),
    ]


def test_a_nul_in_a_job_name_is_stored_as_run_names_are(store_url: str, tmp_path: Path) -> None:
    """PostgreSQL's text refuses NUL: the name keeps the job, with U+FFFD for it (as
    :func:`tracker.text.storable` does for run names), and the other job goes in too."""
    from clirun import gpu_kpi

    from reports.data.allocations import allocations_in
    from tracker.store import RunStore

    saved = tmp_path / "sacct.txt"
    saved.write_text(_renamed("1", "nlp\x00train"))
    p = gpu_kpi("import", "slurm", str(saved), "--store", store_url)
    assert p.returncode == 0, p.stderr
    assert "imported 15 Slurm job(s)" in p.stdout
    with RunStore(store_url) as store:
        jobs, bad = allocations_in(
            store, datetime(2026, 12, 2, tzinfo=UTC), datetime(2026, 12, 3, tzinfo=UTC)
        )
    assert bad == 0 and len(jobs) == 15
    assert next(a for a in jobs if a.job_id == "1").name == "nlp\ufffdtrain"


def _jobs_in(store_url: str) -> list[tuple[str, str, str, float]]:
    """(cluster, job id, user, GPU-seconds) of every job stored, in order."""
    from reports.data.allocations import allocations_in
    from tracker.store import RunStore

    with RunStore(store_url) as store:
        jobs, bad = allocations_in(
            store, datetime(2020, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC)
        )
    assert bad == 0
    return sorted(
        (a.cluster, a.job_id, a.user, a.gpus * (a.until - a.start_at).total_seconds()) for a in jobs
    )


def test_the_same_job_without_and_with_its_cluster_is_one_job(
    store_url: str, tmp_path: Path
) -> None:
    """sacct-X.txt has no Cluster field; the same jobs with Cluster gpukpi (as running sacct
    brings them) are the same 15 jobs, not 30: under gpukpi, 181 GPU-seconds once; and the
    file without the field imported again after them adds nothing."""
    from clirun import gpu_kpi

    bare = tmp_path / "bare.txt"
    bare.write_text((DATA / "sacct-X.txt").read_text())
    named = tmp_path / "named.txt"
    named.write_text(
        "\n".join(
            ("Cluster|" if i == 0 else "gpukpi|") + line
            for i, line in enumerate((DATA / "sacct-X.txt").read_text().splitlines())
        )
    )
    for file, clusters in ((bare, {""}), (named, {"gpukpi"}), (bare, {"gpukpi"})):
        p = gpu_kpi("import", "slurm", str(file), "--store", store_url)
        assert p.returncode == 0 and "skipped" not in p.stdout, p.stdout + p.stderr
        jobs = _jobs_in(store_url)
        assert len(jobs) == 15 and sum(s for *_, s in jobs) == 181
        assert {c for c, *_ in jobs} == clusters, file
    if store_url.startswith("sqlite"):  # both in one import: the same 15
        one = f"sqlite:///{tmp_path / 'one.db'}"
        p = gpu_kpi("import", "slurm", str(bare), str(named), "--store", one)
        assert p.returncode == 0 and "imported 15 Slurm job(s)" in p.stdout, p.stdout
        jobs = _jobs_in(one)
        assert {c for c, *_ in jobs} == {"gpukpi"} and len(jobs) == 15


def test_two_clusters_outputs_without_cluster_never_overwrite_each_other(
    store_url: str, tmp_path: Path
) -> None:
    """Job 100 of cluster A (ann, 2 GPUs, 10:00–11:00) and job 100 of cluster B (bob, 4 GPUs,
    12:00–13:00), both saved without Cluster: B's is refused and named, A's kept (2 GPU-h);
    with --cluster b it goes in beside it (4 GPU-h); in one import, the second file's is
    refused the same way."""
    from clirun import gpu_kpi

    header = "JobID|JobIDRaw|JobName|User|Account|Partition|State|Start|End|AllocTRES|NodeList"
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(
        f"{header}\n100|100|x|ann|nlp|gpu|COMPLETED|2026-12-02T10:00:00|2026-12-02T11:00:00|"
        "gres/gpu=2|n1\n"
    )
    b.write_text(
        f"{header}\n100|100|y|bob|cv|gpu|COMPLETED|2026-12-02T12:00:00|2026-12-02T13:00:00|"
        "gres/gpu=4|m1\n"
    )
    assert gpu_kpi("import", "slurm", str(a), "--store", store_url).returncode == 0
    p = gpu_kpi("import", "slurm", str(b), "--store", store_url)
    assert p.returncode == 0 and "imported 0 Slurm job(s) holding 0.0 GPU-h" in p.stdout
    assert (
        "skipped job 100: the store has another job 100 without a cluster (user 'ann', started "
        "2026-12-02T10:00:00+00:00): import each cluster's output with --cluster NAME"
    ) in p.stdout
    assert _jobs_in(store_url) == [("", "100", "ann", 2 * 3600.0)]
    p = gpu_kpi("import", "slurm", str(b), "--cluster", "b", "--store", store_url)
    assert "imported 1 Slurm job(s) holding 4.0 GPU-h" in p.stdout
    assert _jobs_in(store_url) == [("", "100", "ann", 7200.0), ("b", "100", "bob", 14400.0)]
    if store_url.startswith("sqlite"):  # both in one import
        fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
        p = gpu_kpi("import", "slurm", str(a), str(b), "--store", fresh)
        assert "imported 1 Slurm job(s) holding 2.0 GPU-h" in p.stdout
        assert f"skipped {b} job 100: another job 100 than the one read before" in p.stdout
        assert _jobs_in(fresh) == [("", "100", "ann", 7200.0)]


def test_a_job_without_a_cluster_that_two_clusters_have_is_refused() -> None:
    from fakes import slurm_job

    from reports.data.allocations import settle_clusters

    t = datetime(2026, 12, 2, 10, tzinfo=UTC)
    end = t + timedelta(hours=1)
    c1, c2 = (slurm_job("100", 2, t, end, ("n1",), cluster=c) for c in ("c1", "c2"))
    bare = slurm_job("100", 2, t, end, ("n1",), cluster="")
    got = settle_clusters([bare], [c1, c2])
    assert got.jobs == [] and got.refused == [
        (bare, "the same job is in clusters c1, c2: give --cluster NAME")
    ]
    # of one cluster: it takes that cluster; a named one replaces a stored one without it
    one = settle_clusters([bare], [c1])
    assert one.jobs == [c1] and one.moved == {"100": "c1"}
    assert settle_clusters([c1], [bare]).gone == [("", "100")]
    # another start and another end: another job, not c1's
    later = slurm_job("100", 2, end, end + timedelta(hours=1), ("n1",), cluster="")
    assert settle_clusters([later], [c1]).jobs == [later]
