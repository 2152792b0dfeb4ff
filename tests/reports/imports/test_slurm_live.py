"""Real jobs on a real Slurm (``tests/slurm-up.sh``: slurmctld, slurmd and slurmdbd with
accounting), read back from the real ``sacct`` in both its forms: the GPUs each job held and for
how long, checked against sacct's own ``ElapsedRaw`` and ``AllocTRES`` columns parsed here."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the fixtures)
from smtp_servers import SmtpServer

from reports.imports.slurm import FORMAT, read_sacct
from tracker.store import RunStore

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


def _sbatch(*args: str, env: dict[str, str] | None = None) -> str:
    """``sbatch --parsable ARGS`` (output to /dev/null unless ARGS say ``-o``): the job id."""
    out = () if "-o" in args else ("-o", "/dev/null")
    p = subprocess.run(
        ["sbatch", "--parsable", *out, *args],
        check=False,
        capture_output=True,
        text=True,
        env=env or ENV,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().split(";")[0]


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


def _wait_in_window(
    ids: list[str], since: datetime, until: datetime, limit_s: float = 60.0
) -> None:
    """Poll sacct until a window query (``-S since -E until``, as ``gpu-kpi import slurm``
    asks) shows the jobs ``ids``: slurmdbd answers ``-j`` with a job some seconds before a
    window query finds it (seen here: 3 of 5 jobs missing from the window right after ``-j``
    said COMPLETED). A bound, not a measurement."""
    t = "%Y-%m-%dT%H:%M:%S"
    deadline = time.monotonic() + limit_s
    while True:
        out = _run(
            "sacct", "-a", "-X", "-n", "-P", "--format=JobIDRaw",
            "-S", f"{since:{t}}", "-E", f"{until:{t}}",
        )  # fmt: skip
        if set(ids) <= set(out.split()):
            return
        assert time.monotonic() < deadline, f"jobs {ids} not in the window: {out!r}"
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
    text = _run("sacct", "-a", "-X", "-P", f"--format={FORMAT}", "-j", ",".join(ids))
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


@pytest.mark.usefixtures("cluster")
def test_jobs_named_with_bars_and_line_breaks_are_billed(tmp_path: Path) -> None:
    """Issue 41 on the real Slurm: any user names their job, and sacct writes the name as
    given. A job named ``…a|b|c`` (2 GPUs), and one whose name holds a line break and then a
    whole row of this import's own format (a forged job of 8 GPUs for a week, billed to
    ``victim``), imported by ``gpu-kpi import slurm`` running sacct itself: each job in the
    store with its name and the GPU-seconds sacct's own ElapsedRaw and AllocTRES say; no job
    of the row in the name."""
    from clirun import gpu_kpi

    from reports.data.allocations import allocations_named

    tag = f"gk{os.getpid()}"
    forged = (
        "gpukpi|999999|999999|victim|vision|gpu|COMPLETED|1700000000|1700604800|604800|"
        "billing=8,gres/gpu=8|vm|forged"
    )
    names = {f"{tag}-a|b|c": "--gres=gpu:h100:2", f"{tag}-evil\n{forged}": "--gres=gpu:h100:1"}
    since = datetime.now(UTC) - timedelta(minutes=1)
    ids = {
        name: _sbatch("-A", "nlp", gres, "-J", name, "--wrap", "sleep 2")
        for name, gres in names.items()
    }
    _wait_until_done(list(ids.values()), set(ids.values()))
    until = datetime.now(UTC) + timedelta(minutes=1)
    _wait_in_window(list(ids.values()), since, until)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    t = "%Y-%m-%dT%H:%M:%S"
    p = gpu_kpi(
        "import", "slurm", "--since", f"{since:{t}}", "--until", f"{until:{t}}", "--store", store
    )
    assert p.returncode == 0 and "skipped" not in p.stdout, p.stdout + p.stderr
    # sacct's own columns, without the name: each job's GPUs × seconds
    text = _run(
        "sacct", "-a", "-X", "-P", "-n", "--format=JobIDRaw,ElapsedRaw,AllocTRES", "-j",
        ",".join(ids.values()),
    )  # fmt: skip
    held = {}
    for line in text.splitlines():
        raw, elapsed, tres = line.split("|")
        m = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
        held[raw] = int(m.group(1)) * int(elapsed) if m else 0
    assert held[ids[f"{tag}-a|b|c"]] >= 2 * 2  # 2 GPUs for at least the 2 s sleep
    with RunStore(store) as s:
        for name, job in ids.items():
            (a,) = allocations_named(s, job, None)
            assert (a.name, a.user != "victim", a.cluster) == (name, True, "gpukpi")
            assert a.gpus * (a.until - a.start_at).total_seconds() == held[job], name
        assert allocations_named(s, "999999", None) == []


def _next_minute(unless_left: float = 61.0) -> None:
    """Sleep to a second past the next minute, unless ``unless_left`` seconds of this one are
    left: jobs matched by node and time need minutes of their own (the samples of a node's
    minute are shared among the jobs in it)."""
    left = 60 - time.time() % 60
    if left < unless_left:
        time.sleep(left + 1)


TRACKED = """\
import time
from tracker import track
with track(name="live-tracked", backend="simulated:healthy@H100:2", log_to_python=False) as run:
    time.sleep(3)
print(run.id)
"""
# what nvidia-smi --query-gpu=timestamp,name,uuid,utilization.gpu --format=csv -l 1 would log of
# the job's GPUs (the GPU is the one part simulated: the job, its GPUs and its times are Slurm's)
SMI = """\
import os, sys, time
from datetime import datetime
gpus = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
with open(sys.argv[1], "w") as f:
    f.write("timestamp, name, uuid, utilization.gpu [%]\\n")
    for _ in range(4):
        t = datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        for g in gpus:
            f.write(f"{t}, NVIDIA H100 80GB HBM3, GPU-{sys.argv[2]}-{g}, {sys.argv[3]} %\\n")
        f.flush()
        time.sleep(1)
"""


def _script(path: Path, body: str, *args: str) -> str:
    py = path.with_suffix(".py")
    py.write_text(body)
    sh = path.with_suffix(".sh")
    sh.write_text(f"#!/bin/sh\nexec {sys.executable} {py} {' '.join(args)}\n")
    return str(sh)


@pytest.mark.usefixtures("cluster")
def test_real_jobs_in_the_weekly_report(tmp_path: Path) -> None:
    """The done-when of issue 27 on the real Slurm: a tracked job, an untracked busy job (its
    nvidia-smi log), a job holding 2 GPUs doing nothing (its log at 0%) and an untracked job
    with no telemetry, imported from the real sacct by ``gpu-kpi import slurm`` (running sacct
    itself) and reported with each job's GPU-hours and dollars as sacct's own ``ElapsedRaw``
    and the samples in the store say."""
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {**ENV, "GPU_KPI_STORE": store, "GPU_KPI_GPU": ""}
    host = socket.gethostname().split(".")[0]

    def sbatch(*args: str) -> str:
        return _sbatch(*args, env=env)

    tag = f"gk{os.getpid()}"
    since = datetime.now(UTC) - timedelta(minutes=1)
    _next_minute(unless_left=30)  # minute A: the tracked job and the one with no telemetry
    out = tmp_path / "tracked.out"
    tracked = sbatch(
        "-A",
        "nlp",
        "--gres=gpu:h100:2",
        "-J",
        f"{tag}-tracked",
        "-o",
        str(out),
        _script(tmp_path / "tracked", TRACKED),
    )
    dark = sbatch(
        "-A",
        "nlp",
        "--gres=gpu:h100:1",
        "-J",
        f"{tag}-dark",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 3",
    )
    _wait_until_done([tracked, dark], {tracked, dark})

    def logged(kind: str, util: str) -> tuple[str, Path]:
        """A job of 2 GPUs that writes its nvidia-smi log at ``util`` %, in a minute of its own."""
        _next_minute()
        log = tmp_path / f"{kind}.csv"
        script = _script(tmp_path / kind, SMI, str(log), kind, util)
        job = sbatch("-A", "vision", "--gres=gpu:h100:2", "-J", f"{tag}-{kind}", script)
        _wait_until_done([job], {job})
        return job, log

    busy, busy_log = logged("busy", "90")  # minute B
    idle, idle_log = logged("idle", "0")  # minute C: holding 2 GPUs doing nothing
    run_id = out.read_text().strip().splitlines()[-1]

    def cli(*args: str) -> str:
        p = subprocess.run(
            [sys.executable, "-m", "reports.cli", *args],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert p.returncode == 0, f"gpu-kpi {' '.join(args)}: {p.stderr}"
        return p.stdout

    for log in (busy_log, idle_log):
        cli("import", "nvidia-smi", str(log), "--host", host)
    until = datetime.now(UTC) + timedelta(minutes=1)
    _wait_in_window([tracked, dark, busy, idle], since, until)
    t = "%Y-%m-%dT%H:%M:%S"
    before = datetime.now(UTC)
    said = cli(
        "import",
        "slurm",
        "--since",
        f"{since:{t}}",
        "--until",
        f"{until:{t}}",
        "--account-team",
        "nlp=NLP",
    )
    after = datetime.now(UTC)
    assert "1 node(s) with 4 GPUs (sinfo)" in said  # Gres=gpu:h100:4 of slurm-up.sh's node
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(
        "[thresholds]\nidle_window_min = 1\n"
    )  # a job of seconds: a 1-minute idle rule
    week = f"{datetime.now(UTC):%G-W%V}"
    cli(
        "report",
        "--config",
        str(config),
        "--week",
        week,
        "--format",
        "json",
        "--out",
        str(tmp_path / "out"),
    )
    (doc,) = (json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json"))
    jobs = {j["job_id"]: j for j in doc["allocations"]["jobs"]}
    # capacity: the node's 4 H100 over the import's range (since to the import), the jobs'
    # GPU-hours allocated against it
    (cap,) = doc["allocations"]["capacity"]
    assert (cap["source"], cap["nodes"], cap["gpus"]) == ("slurm", 1, 4)
    first = since.replace(microsecond=0)  # --since as given, to the second
    lo, hi = ((t - first).total_seconds() * 4 / 3600 for t in (before, after))
    assert lo <= cap["capacity_gpu_hours"] <= hi
    allocated = doc["allocations"]["totals"]["allocated_gpu_hours"]
    assert cap["allocated_gpu_hours"] == pytest.approx(allocated)
    assert cap["unallocated_gpu_hours"] == pytest.approx(cap["capacity_gpu_hours"] - allocated)
    # sacct's own columns: the GPUs and seconds each job held
    ids = [tracked, dark, busy, idle]
    text = _run(
        "sacct",
        "-a",
        "-X",
        "-P",
        "-n",
        "--format=JobIDRaw,ElapsedRaw,AllocTRES,Start,End",
        "-j",
        ",".join(ids),
    )
    held, minutes = {}, {}
    for line in text.splitlines():
        raw, elapsed, tres, start, end = line.split("|")
        minutes[raw] = (start[:16], end[:16])  # 2026-12-02T10:34 (TZ=UTC)
        m = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
        held[raw] = int(m.group(1)) * int(elapsed) / 3600 if m else 0.0
    # the premise: each group of jobs in minutes of its own (sacct's Start and End, to the minute)
    assert max(minutes[tracked][1], minutes[dark][1]) < minutes[busy][0], minutes
    assert minutes[busy][1] < minutes[idle][0], minutes
    with RunStore(store) as s:
        runs = {r.name: r for r in s.list_runs()}
        covered = {
            name: sum(x.covered_s for x in s.samples(run_ids=[r.id])) / 3600
            for name, r in runs.items()
        }
    smi = {n: runs[n].id for n in runs if n != "live-tracked"}
    busy_run = next(i for n, i in smi.items() if "busy" in n)
    idle_run = next(i for n, i in smi.items() if "idle" in n)
    by_name = {runs[n].id: covered[n] for n in runs}
    expect = {
        tracked: ("id", [run_id], "NLP", min(held[tracked], by_name[run_id]), 0.0),
        dark: ("", [], "NLP", 0.0, 0.0),
        busy: ("node", [busy_run], "vision", min(held[busy], by_name[busy_run]), 0.0),
        idle: ("node", [idle_run], "vision", min(held[idle], by_name[idle_run]), None),
    }
    for job, (matched, their_runs, team, sampled, idle_h) in expect.items():
        j = jobs[job]
        assert (j["matched"], j["runs"], j["team"], j["gpu_model"]) == (
            matched,
            their_runs,
            team,
            "H100",
        ), job
        assert j["allocated_gpu_hours"] == pytest.approx(held[job], abs=1e-9) and held[job] > 0
        assert j["sampled_gpu_hours"] == pytest.approx(sampled, abs=1e-9), (job, j, minutes)
        assert j["no_samples_gpu_hours"] == pytest.approx(held[job] - sampled, abs=1e-9)
        assert j["idle_gpu_hours"] == pytest.approx(sampled if idle_h is None else idle_h, abs=1e-9)
        assert j["allocated_usd"] == pytest.approx(held[job] * 3.85)
        assert j["no_samples_usd"] == pytest.approx((held[job] - sampled) * 3.85)
    assert (
        jobs[dark]["no_samples_gpu_hours"] == pytest.approx(held[dark])
        and jobs[idle]["idle_gpu_hours"] > 0
    )
    # nothing counted twice: the jobs' sampled hours are at most the samples' hours
    assert sum(jobs[j]["sampled_gpu_hours"] for j in ids) <= sum(covered.values()) + 1e-9


WASTEFUL = """\
import time
from tracker import track
with track(name="live-wasteful", backend="simulated:idle@H100:2", log_to_python=False) as run:
    time.sleep(4)
print(run.id)
"""
EPILOG = Path(__file__).resolve().parents[3] / "contrib" / "slurm" / "epilog.sh"
EPILOG_ENV = Path(os.environ.get("GPU_KPI_SLURM_DIR", "/tmp/gpu-kpi-slurm")) / "epilog.env"


@pytest.mark.usefixtures("cluster")
def test_slurmctlds_epilog_mails_a_wasteful_job_once(
    tmp_path: Path, smtp_server: SmtpServer
) -> None:
    """``contrib/slurm/epilog.sh`` as the test cluster's ``EpilogSlurmctld`` (``tests/slurm-up.sh``
    runs it while ``epilog.env`` says how): a tracked job that holds 2 GPUs and idles ends, and
    its user gets the note, once; the epilog run again for it sends nothing."""
    conf = Path("/etc/slurm/slurm.conf").read_text()
    assert "EpilogSlurmctld=" in conf, "the test cluster predates its epilog: run tests/slurm-up.sh"
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(
        f'[smtp]\nhost = "127.0.0.1"\nport = {smtp_server.port}\nsecurity = "none"\n'
        'sender = "gpu-kpi@example.com"\n'
    )
    settings = {
        "GPU_KPI": f"{sys.executable} -m reports.cli",
        "GPU_KPI_CONFIG": str(config),
        "GPU_KPI_STORE": store,
        "GPU_KPI_MAIL_DOMAIN": "example.org",
        "GPU_KPI_MIN_WASTE_USD": "0.0001",  # a job of seconds wastes cents
        "GPU_KPI_EPILOG": str(EPILOG),
        "GPU_KPI_EPILOG_LOG": str(tmp_path / "epilog.log"),
        "PATH": os.environ["PATH"],
    }
    EPILOG_ENV.write_text("".join(f"export {k}='{v}'\n" for k, v in settings.items()))
    try:
        env = {**ENV, "GPU_KPI_STORE": store, "GPU_KPI_GPU": ""}
        job = _sbatch(
            "-A",
            "nlp",
            "--gres=gpu:h100:2",
            "-J",
            "wasteful",
            _script(tmp_path / "wasteful", WASTEFUL),
            env=env,
        )

        _wait_until_done([job], {job})
        deadline = time.monotonic() + 120  # a bound: the epilog runs as the job ends
        while not smtp_server.messages and time.monotonic() < deadline:
            time.sleep(0.5)
        said = (tmp_path / "epilog.log").read_text() if (tmp_path / "epilog.log").exists() else ""
        assert smtp_server.messages, (
            f"no mail from the epilog of job {job}: {said or 'it never ran'}"
        )
        again = subprocess.run(
            ["sh", str(EPILOG)],
            env={**settings, "SLURM_JOB_ID": job, "SLURM_CLUSTER_NAME": "gpukpi"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert again.returncode == 0
    finally:
        EPILOG_ENV.unlink(missing_ok=True)
    (got,) = smtp_server.messages
    user = subprocess.run(
        ["sacct", "-n", "-X", "-P", "--format=User", "-j", job],
        capture_output=True,
        text=True,
        env=ENV,
        check=True,
    ).stdout.strip()
    assert got.rcpt_tos == [f"{user}@example.org"]
    assert got.message["Subject"].startswith(f"GPU efficiency of job {job} (wasteful): $")
    body = got.message.get_body(("plain",)).get_content()
    assert f"Job ID: {job} on gpukpi" in body and "GPUs: 2 x H100" in body
    assert "GPU efficiency: 0.0% NVML utilization" in body and "(by job id: " in body
