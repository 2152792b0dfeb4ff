"""A running job's ``ElapsedRaw`` that no time can follow (start + 99,999,999,999,999 s is
1,157,407,407 days on: past year 9999, past what a ``timedelta`` holds) is a bad row like a
bad time: skipped, counted and named, the other jobs read, by the block reader, the line
reader, the JSON reader and the import of a saved file alike."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reports.imports import arrow_csv
from reports.imports.slurm import SacctRead, Unreadable, read_sacct

HEAD = "JobID|JobIDRaw|State|Start|End|ElapsedRaw|AllocTRES|NodeList|JobName\n"
RUNNING = "7|7|RUNNING|2026-12-01T10:00:00|Unknown|{elapsed}|gres/gpu=4|n1|train\n"
ENDED = "8|8|COMPLETED|2026-12-01T10:00:00|2026-12-01T11:00:00|3600|gres/gpu=2|n2|eval\n"


def parsable(elapsed: str, repeat: int = 1) -> str:
    return HEAD + (RUNNING.format(elapsed=elapsed) + ENDED) * repeat


@pytest.mark.parametrize("blocks", [True, False], ids=["arrow blocks", "line by line"])
@pytest.mark.parametrize("elapsed", ["99999999999999", "999999999999", "99999999999999999"])
def test_an_elapsed_time_past_any_date_names_its_row(
    monkeypatch: pytest.MonkeyPatch, blocks: bool, elapsed: str
) -> None:
    """Three rows of each kind (lines 2, 4, 6 running; 3, 5, 7 ended): the three running ones
    are named (14 digits overflow ``timedelta``; 12 digits, 31,700 years, the date; 17 digits
    both), the three ended ones read, each of 2 GPUs; the output's time is the ended jobs'
    end, 11:00 (the bad rows' start, 10:00, noted too)."""
    if blocks and not arrow_csv.available():
        pytest.skip("needs pyarrow")
    if not blocks:
        monkeypatch.setattr(arrow_csv, "available", lambda: False)
    got = read_sacct(parsable(elapsed, repeat=3), tz=UTC)
    assert [(j.job_id, j.gpus) for j in got.jobs] == [("8", 2)] * 3
    reason = f"ElapsedRaw is not a time span from the start: {int(elapsed)}"
    assert got.unreadable == [Unreadable(f"line {n}", reason) for n in (2, 4, 6)]
    assert (got.steps, got.not_started) == (0, 0)
    assert got.latest == datetime(2026, 12, 1, 11, tzinfo=UTC)


def test_a_running_job_of_a_sane_elapsed_time_still_counts_to_its_start_plus_it() -> None:
    """The same row with ElapsedRaw 7,200 is a job, and 10:00 + 2 h = 12:00 is the output's
    time (later than the ended job's 11:00)."""
    got = read_sacct(parsable("7200"), tz=UTC)
    ended = datetime(2026, 12, 1, 11, tzinfo=UTC)
    assert [(j.job_id, j.end) for j in got.jobs] == [("7", None), ("8", ended)]
    assert got.unreadable == []
    assert got.latest == datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_the_json_form_names_the_job_too() -> None:
    """sacct --json: job 7 running since 10:00 with an elapsed time of 99,999,999,999,999 s is
    named by its id; job 8 is read."""
    start = int(datetime(2026, 12, 1, 10, tzinfo=UTC).timestamp())
    gpus = [{"type": "gres", "name": "gpu", "count": 2}]
    jobs = [
        {"job_id": 7, "time": {"start": start, "end": 0, "elapsed": 99_999_999_999_999}},
        {"job_id": 8, "time": {"start": start, "end": start + 3600, "elapsed": 3600}},
    ]
    for job in jobs:
        job.update({"nodes": "n1", "tres": {"allocated": gpus}})
    got = read_sacct(json.dumps({"jobs": jobs}), tz=UTC)
    assert isinstance(got, SacctRead)
    assert [j.raw_id for j in got.jobs] == ["8"]
    assert got.unreadable == [
        Unreadable("job 7", "time.elapsed is not a time span from the start: 99999999999999")
    ]


def test_the_import_of_a_saved_file_skips_and_names_the_row(tmp_path: Path) -> None:
    """``gpu-kpi import slurm FILE``'s read: the ended job is an allocation of 2 GPUs for an
    hour, the running one is named with the file and line."""
    from reports.imports.slurm_jobs import read_files

    saved = tmp_path / "sacct.txt"
    saved.write_text(parsable("99999999999999"))
    done = read_files([str(saved)], tz=UTC, cluster="c", teams={}, now=datetime.now(UTC))
    assert [(a.job_id, a.gpus, a.end_at - a.start_at) for a in done.jobs] == [
        ("8", 2, datetime(2026, 12, 1, 11) - datetime(2026, 12, 1, 10))
    ]
    assert [u.where for u in done.unreadable] == [f"{saved} line 2"]
