"""The block reader holds a job's times as numbers (wall-clock seconds and the zone they are
in) and makes datetimes only when asked: on random outputs of the times that make this hard,
it gives what the line reader gives, to the zone of each time: a daylight-saving change (an
hour that is not, an hour twice), a start and an end in two forms (local and seconds since
1970), a time with its own offset or a fraction of a second, the first and the last second a
datetime holds, a requeued job (its start from its elapsed time) and a running one (its start
plus elapsed: the output's own time, or past year 9999)."""

from __future__ import annotations

import random
from datetime import UTC, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from fakes import examples
from test_sacct_blocks import both, same

from reports.imports import arrow_csv, slurm
from reports.imports.slurm import SacctRead, read_sacct

pytestmark = pytest.mark.skipif(not arrow_csv.available(), reason="needs pyarrow")

BERLIN = ZoneInfo("Europe/Berlin")
TIMES = [
    "2026-10-25T02:30:00",  # Berlin: twice (CEST, then CET)
    "2026-10-25T02:59:59",
    "2026-10-25T03:00:00",
    "2026-03-29T02:30:00",  # Berlin: no such hour
    "2026-03-29T01:59:59",
    "2026-03-29T03:00:00",
    "1792882800",  # 2026-10-25T01:00:00Z: 02:00 or 03:00 in Berlin
    "1792886400",
    "1774744200",
    "0001-01-01T00:00:00",
    "9999-12-31T23:59:59",
    "253402300799",
    "253402300800",
    "2026-10-25T02:30:00+01:00",
    "2026-10-25T02:30:00.5",
    "2026-10-25T01:30:00Z",
    "Unknown",
    "None",
    "",
]


def output(rng: random.Random) -> str:
    """Jobs with times drawn from :data:`TIMES`, elapsed times from none to past any time."""
    lines = ["JobID|Start|End|Submit|ElapsedRaw|AllocTRES|NodeList|JobName"]
    for job in range(1000, 1000 + rng.randint(1, 40)):
        start, end, submit = (rng.choice(TIMES) for _ in range(3))
        if rng.random() < 0.3:
            end = start  # a job that never started, or one of no time
        elapsed = rng.choice(["", "0", "1800", "3600", "7200", "99999999999", str(10**17)])
        gpus = rng.choice(["gres/gpu=2", "", "cpu=1"])
        node = rng.choice(["gpu01", "None assigned"])
        job_id = rng.choice([str(job), f"{job}_3", f"{job}.batch"])
        lines.append(f"{job_id}|{start}|{end}|{submit}|{elapsed}|{gpus}|{node}|j{job}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(examples(200)))
def test_times_held_as_numbers_are_the_line_reader_s(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(slurm, "BLOCK_BYTES", rng.choice([100, 1 << 20]))
    text = output(rng)
    tz = rng.choice([UTC, BERLIN, timezone(timedelta(hours=1)), ZoneInfo("UTC")])
    fast, slow = both(monkeypatch, lambda: read_sacct(text, tz=tz))
    assert isinstance(fast, SacctRead) and isinstance(slow, SacctRead), (fast, slow)
    same(fast, slow, f"seed {seed}")
    assert fast.unreadable == slow.unreadable


def test_an_hour_twice_keeps_its_wall_clock_and_zone() -> None:
    """Berlin's 02:30 on the day clocks go back is the first one (CEST, fold 0), as
    ``datetime.fromisoformat`` makes it; a requeued job's last run starts 30 minutes before an
    end of 03:00 by the wall clock (02:30, the zone's own arithmetic)."""
    text = (
        "JobID|Start|End|ElapsedRaw|AllocTRES|NodeList\n"
        "1|2026-10-25T02:30:00|2026-10-25T04:00:00|5400|gres/gpu=1|n1\n"
        "2|2026-10-25T01:00:00|2026-10-25T03:00:00|1800|gres/gpu=1|n1\n"
    )
    got = read_sacct(text, tz=BERLIN)
    first, requeued = got.jobs
    assert first.start.fold == 0 and first.start.utcoffset() == timedelta(hours=2)
    assert requeued.start.isoformat() == "2026-10-25T02:30:00+02:00"
    assert got.latest is not None and got.latest.isoformat() == "2026-10-25T04:00:00+01:00"
