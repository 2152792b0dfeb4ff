"""Real jobs on a real Slurm (``tests/slurm-up.sh``: slurmctld, slurmd and slurmdbd with
accounting), read back from the real ``sacct`` in both its forms: the GPUs each job held and for
how long, checked against sacct's own ``ElapsedRaw`` and ``AllocTRES`` columns parsed here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from datetime import UTC
from pathlib import Path

import pytest

from reports.imports.slurm import FORMAT, read_sacct

pytestmark = pytest.mark.slurm
ENV = {**os.environ, "TZ": "UTC"}  # sacct writes local times: UTC here
MARKER = "# written by gpu-kpi tests/slurm-up.sh for its tests"  # its configs' first line
DONE = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")


def _run(*args: str) -> str:
    p = subprocess.run(args, check=False, capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 0, f"{' '.join(args)}: {p.stderr.strip()}"
    return p.stdout


@pytest.fixture(scope="module")
def cluster() -> None:
    """The test cluster answers, else skip (fail in CI)."""
    reason = ""
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    if shutil.which("sbatch") is None or shutil.which("sacct") is None:
        reason = "Slurm is not installed; run tests/slurm-up.sh"
    elif not conf.is_file() or MARKER not in conf.read_text(errors="replace").splitlines()[:1]:
        # jobs go only to the test cluster, never to a real one this machine is a client of
        reason = f"{conf} is not the test cluster's; run tests/slurm-up.sh"
    else:
        try:
            p = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%T"],
                check=False,
                capture_output=True,
                text=True,
                timeout=10,
            )
            if not re.search(r"^(idle|mixed|allocated)", p.stdout, re.M):
                reason = f"no Slurm node up ({p.stdout.strip() or p.stderr.strip()}); run tests/slurm-up.sh"
        except (OSError, subprocess.TimeoutExpired) as e:
            reason = f"sinfo failed ({e}); run tests/slurm-up.sh"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def _sbatch(*args: str) -> str:
    return _run("sbatch", "--parsable", "-o", "/dev/null", *args).strip().split(";")[0]


def _wait_until_done(ids: list[str], want: set[str], limit_s: float = 180.0) -> None:
    """Poll sacct until it shows the rows ``want`` (job ids as sacct writes them), all ended:
    slurmdbd records a job's end, and an array task's own id, some moments after the job
    ends. A bound, not a measurement."""
    deadline = time.monotonic() + limit_s
    while True:
        out = _run("sacct", "-a", "-X", "-n", "-P", "--format=JobID,State", "-j", ",".join(ids))
        rows = dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
        if set(rows) == want and all(s.split(" ")[0] in DONE for s in rows.values()):
            return
        assert time.monotonic() < deadline, f"jobs {ids} not done: {out!r}"
        time.sleep(0.5)


@pytest.mark.usefixtures("cluster")
def test_real_jobs_read_from_real_sacct() -> None:
    tag = f"gk{os.getpid()}"
    two = _sbatch("-A", "nlp", "--gres=gpu:h100:2", "-J", f"{tag}-two", "--wrap", "sleep 2")
    array = _sbatch(
        "-A", "vision", "--array=0-1", "--gpus=1", "-J", f"{tag}-arr", "--wrap", "sleep 1"
    )
    later = _sbatch(
        "-A", "nlp", "--gres=gpu:1", "--begin=now+1hour", "-J", f"{tag}-later", "--wrap", "true"
    )
    _run("scancel", later)  # cancelled before it started: no allocation
    ids = [two, array, later]
    _wait_until_done(ids, {two, f"{array}_0", f"{array}_1", later})
    text = _run("sacct", "-a", "-X", "-P", f"--format={FORMAT},ElapsedRaw", "-j", ",".join(ids))
    got = read_sacct(text, tz=UTC)
    assert got.unreadable == [] and got.not_started == 1 and got.steps == 0
    jobs = {j.job_id: j for j in got.jobs}
    assert sorted(jobs) == sorted([two, f"{array}_0", f"{array}_1"])
    j2 = jobs[two]
    assert (j2.name, j2.account, j2.state, j2.gpus, j2.gpu_types) == (
        f"{tag}-two",
        "nlp",
        "COMPLETED",
        2,
        (("h100", 2),),
    )
    tasks = sorted((jobs[f"{array}_{t}"] for t in (0, 1)), key=lambda j: j.job_id)
    assert [(t.array_job_id, t.array_task_id, t.gpus, t.account) for t in tasks] == [
        (array, 0, 1, "vision"),
        (array, 1, 1, "vision"),
    ]
    assert len({t.raw_id for t in tasks}) == 2  # each task its own allocation
    # GPU-seconds: the reader's GPUs x (end - start) against sacct's own columns
    lines = text.splitlines()
    header = lines[0].split("|")
    expected = 0
    for line in lines[1:]:
        row = dict(zip(header, line.split("|"), strict=True))
        m = re.search(r"(?:^|,)gres/gpu=(\d+)", row["AllocTRES"])
        expected += int(m.group(1)) * int(row["ElapsedRaw"]) if m else 0
    seconds = sum(j.gpus * (j.end - j.start).total_seconds() for j in got.jobs if j.end)
    assert seconds == expected and expected >= 2 * 2  # two GPUs for at least the 2 s sleep
    # the JSON form says the same
    js = read_sacct(_run("sacct", "-a", "-X", "--json", "-j", ",".join(ids)), tz=UTC)
    assert js.not_started == 1
    assert sorted(js.jobs, key=lambda j: j.raw_id) == sorted(got.jobs, key=lambda j: j.raw_id)
