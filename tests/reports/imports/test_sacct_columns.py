"""What a read of sacct's output holds: the allocations as a column per field
(:class:`reports.imports.slurm.SlurmJobs`), filled a batch at a time by the block reader and
taken by the import a row at a time, with no :class:`SlurmJob` made for a job; a job asked
for by index is one, equal to what the line reader reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reports.imports import arrow_csv, slurm
from reports.imports.slurm import SacctRead, SlurmJob, SlurmJobs, read_sacct
from reports.imports.slurm_jobs import SlurmImported, allocations_of

HEAD = "Cluster|JobID|JobIDRaw|User|Account|State|Start|End|ElapsedRaw|AllocTRES|NodeList|JobName"
T0 = datetime(2026, 12, 2, 10, tzinfo=UTC)


def output(jobs: int) -> str:
    """``jobs`` ended jobs: job 100+i holds 1 + i % 4 GPUs of h100 on node ``n<i % 3>`` from
    10:00 + i minutes for 30 minutes; every 5th an array task (``100+i_7``)."""
    lines = [HEAD]
    for i in range(jobs):
        start, end = T0 + timedelta(minutes=i), T0 + timedelta(minutes=i + 30)
        shown = f"{100 + i}_7" if i % 5 == 0 else str(100 + i)
        gpus = 1 + i % 4
        lines.append(
            f"c1|{shown}|{100 + i}|u{i % 2}|nlp|COMPLETED|{start:%Y-%m-%dT%H:%M:%S}|"
            f"{end:%Y-%m-%dT%H:%M:%S}|1800|cpu=4,gres/gpu:h100={gpus},gres/gpu={gpus}|"
            f"n{i % 3}|train-{i}"
        )
    return "\n".join(lines) + "\n"


def test_the_columns_hold_each_job_s_fields_in_order() -> None:
    """40 jobs: 1+2+3+4 GPUs repeating, 25 GPUs per 10 jobs, 100 in all; 8 array tasks (every
    5th); job 13 is the 14th, on n1, from 10:13."""
    got = read_sacct(output(40), tz=UTC)
    jobs = got.jobs
    assert isinstance(jobs, SlurmJobs) and len(jobs) == 40
    assert sum(jobs.columns["gpus"]) == 100
    assert sum(t is not None for t in jobs.columns["array_task_id"]) == 8
    assert set(jobs.columns["gpu_types"]) == {(("h100", n),) for n in (1, 2, 3, 4)}
    j = jobs[13]
    assert isinstance(j, SlurmJob)
    assert (j.job_id, j.raw_id, j.nodes, j.gpus, j.start) == (
        "113",
        "113",
        "n1",
        2,
        T0 + timedelta(minutes=13),
    )
    assert jobs[-1].name == "train-39" and [x.job_id for x in jobs[:2]] == ["100_7", "101"]
    assert list(jobs) == [jobs[i] for i in range(40)]
    assert [tuple(vars(x).values()) for x in jobs] == list(jobs.rows())


def test_a_list_of_jobs_is_made_columns_and_compares_equal() -> None:
    got = read_sacct(output(6), tz=UTC)
    again = SacctRead(jobs=list(got.jobs))
    assert isinstance(again.jobs, SlurmJobs)
    assert again.jobs == got.jobs and got.jobs == list(got.jobs)
    assert got.jobs != list(got.jobs)[:5]


def test_no_job_record_is_made_between_the_blocks_and_the_allocations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With SlurmJob unusable, the block reader and the import still give all 300 allocations
    (75 of each GPU count: 750 GPUs, each for 30 minutes: 375 GPU-hours)."""
    if not arrow_csv.available():
        pytest.skip("needs pyarrow")
    text = output(300)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a SlurmJob was made")

    monkeypatch.setattr(slurm, "SlurmJob", refused)
    got = read_sacct(text, tz=UTC)
    out = SlurmImported()
    allocations_of(got, where="f", seen_at=T0 + timedelta(days=1), cluster="", teams={}, out=out)
    assert len(out.jobs) == 300 and out.unreadable == []
    hours = sum(a.gpus * (a.end_at - a.start_at).total_seconds() / 3600 for a in out.jobs)
    assert hours == 375.0
    assert out.types == {"h100": "H100"}


def test_the_import_of_columns_equals_the_import_of_records() -> None:
    """allocations_of over the columns the blocks filled and over the same jobs made records
    first (the line reader's way): the same allocations, in order."""
    got = read_sacct(output(50), tz=UTC)
    seen = T0 + timedelta(days=1)
    a, b = SlurmImported(), SlurmImported()
    allocations_of(got, where="f", seen_at=seen, cluster="", teams={"nlp": "NLP"}, out=a)
    records = SacctRead(jobs=SlurmJobs(list(got.jobs)))
    allocations_of(records, where="f", seen_at=seen, cluster="", teams={"nlp": "NLP"}, out=b)
    assert a.jobs == b.jobs and len(a.jobs) == 50
    assert {x.team for x in a.jobs} == {"NLP"} and a.jobs[13].hosts == ("n1",)
