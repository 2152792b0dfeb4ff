"""``gpu-kpi job JOBID``: one Slurm job's efficiency note (seff's manner, with dollars) from an
imported job and its samples, worked out by hand; ``--mail`` sends it once through the delivery
log to a real SMTP server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clirun import gpu_kpi
from fakes import StoreTemplates
from smtp_servers import *  # noqa: F403  (the fixtures)
from smtp_servers import SmtpServer
from test_slurm_report import SACCT, _fill

CONFIG = """\
[store]
url = "{store}"
[smtp]
host = "127.0.0.1"
port = {port}
security = "none"
sender = "gpu-kpi@example.com"
[[recipients]]
to = "lead@example.com"
"""


def import_jobs(store_url: str, folder: Path) -> None:
    """The runs and minutes of ``test_slurm_report``, and its sacct output imported."""
    _fill(store_url)
    saved = folder / "sacct.txt"
    saved.write_text(SACCT)
    env = {"GPU_KPI_STORE": store_url}
    assert (
        gpu_kpi("import", "slurm", str(saved), "--account-team", "nlp=NLP", env=env).returncode == 0
    )


@pytest.fixture
def imported(store_url: str, tmp_path: Path, store_templates: StoreTemplates) -> dict[str, str]:
    """The environment naming a store of :func:`import_jobs`, the test's own (on SQLite a copy
    of the module's)."""
    store_templates.made(store_url, "imported", lambda url: import_jobs(url, tmp_path))
    return {"GPU_KPI_STORE": store_url}


def test_a_tracked_jobs_note_by_hand(imported: dict[str, str]) -> None:
    p = gpu_kpi("job", "101", env=imported)
    assert p.returncode == 0, p.stderr
    text = p.stdout
    # 2 H100 for 2 h: 4 GPU-h at $3.85; its tracked run ran both at 80% for the first hour
    assert "Job ID: 101 on gpukpi" in text and "User/Account: ana/nlp (team NLP)" in text
    assert "Wall-clock time: 02:00:00" in text and "GPUs: 2 x H100" in text
    assert "Allocated: 4.0 GPU-h, $15.40" in text
    assert "GPU efficiency: 80.0% NVML utilization over 2.0 GPU-h sampled (by job id: ra)" in text
    assert "Allocated, no samples: 2.0 GPU-h, $7.70" in text
    # waste: 2 sampled GPU-h x $3.85 x (1 - 80/85)
    assert f"Recoverable waste (target 85%): ${2 * 3.85 * (1 - 80 / 85):.2f}" in text
    assert "ra/a0" in text and "ra/a1" in text
    # a tracked run without a verdict of its own: 80% is under the 85% target
    assert "Verdict: below-target" in text and "Advice: Utilization is under target" in text


def test_a_job_as_the_report_names_it(imported: dict[str, str]) -> None:
    # the report's Job column and a run's slurm link say CLUSTER/JOBID: the same note
    by_id = gpu_kpi("job", "101", "--json", env=imported)
    named = gpu_kpi("job", "gpukpi/101", "--json", env=imported)
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout) == json.loads(by_id.stdout)
    assert json.loads(named.stdout)["cluster"] == "gpukpi"


def test_an_idle_jobs_note_as_json(imported: dict[str, str]) -> None:
    p = gpu_kpi("job", "103", "--json", env=imported)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    # 2 GPUs for 90 min on n3, whose two logged GPUs sat at 0% the whole time
    assert (d["matched"], d["runs"], d["verdict"]) == ("node", ["smi3"], "idle")
    assert d["allocated_gpu_hours"] == pytest.approx(3.0) and d["idle_gpu_hours"] == pytest.approx(
        3.0
    )
    assert d["util_pct"] == 0.0 and d["waste_usd"] == pytest.approx(3 * 3.85)
    assert [(g["gpu"], g["idle_minutes"]) for g in d["per_gpu"]] == [("c0", 90), ("c1", 90)]
    assert d["shared_with"] == 0 and "release" in d["advice"]


def test_a_job_nobody_measured(imported: dict[str, str]) -> None:
    p = gpu_kpi("job", "102", env=imported)
    assert p.returncode == 0, p.stderr
    assert (
        "Verdict: not measured" in p.stdout
        and "Allocated, no samples: 2.0 GPU-h, $7.70" in p.stdout
    )
    assert "&lt;" not in p.stdout and "<script>" in p.stdout  # text as it is, on one line


def test_the_note_is_mailed_once(
    imported: dict[str, str], tmp_path: Path, smtp_server: SmtpServer
) -> None:
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(CONFIG.format(store=imported["GPU_KPI_STORE"], port=smtp_server.port))
    args = ("job", "103", "--config", str(config), "--mail", "--to", "{user}@example.org")
    first = gpu_kpi(*args, "--no-sacct", env=imported)
    assert first.returncode == 0, first.stderr
    assert "mailed the note of job 103 to ana@example.org" in first.stdout
    second = gpu_kpi(*args, env=imported)
    assert second.returncode == 0 and "went to ana@example.org before" in second.stdout
    (got,) = smtp_server.messages
    assert got.rcpt_tos == ["ana@example.org"]
    assert got.message["Subject"] == "GPU efficiency of job 103 (sleeper): $11.55 recoverable"
    body = got.message.get_body(("plain",)).get_content()
    assert "Verdict: idle" in body and "Allocated, idle: 3.0 GPU-h, $11.55" in body
    # under the threshold: nothing sent, nothing logged
    low = gpu_kpi(
        "job", "104", "--config", str(config), "--mail", "--to", "x@example.org", env=imported
    )
    assert low.returncode == 0 and "not mailed: recoverable waste" in low.stdout
    assert len(smtp_server.messages) == 1


def test_a_job_nobody_measured_is_mailed_for_what_it_paid(
    imported: dict[str, str], tmp_path: Path, smtp_server: SmtpServer
) -> None:
    """No sample, so no recoverable waste: its unsampled GPU-time is still paid (2 H100 for an
    hour, $7.70), counts toward --min-waste-usd and is named "not measured", never "no price"."""
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(CONFIG.format(store=imported["GPU_KPI_STORE"], port=smtp_server.port))
    p = gpu_kpi("job", "102", "--config", str(config), env=imported)
    assert "Recoverable waste (target 85%): n/a (not measured)" in p.stdout
    assert "Paid, not shown useful (waste + no samples): $7.70" in p.stdout
    assert "no price" not in p.stdout
    args = ("job", "102", "--config", str(config), "--mail", "--to", "{user}@example.org")
    high = gpu_kpi(*args, "--min-waste-usd", "8", "--no-sacct", env=imported)
    assert high.returncode == 0, high.stderr
    assert "not mailed: recoverable waste $0.00 + not measured $7.70 = $7.70" in high.stdout
    sent = gpu_kpi(*args, "--min-waste-usd", "5", "--no-sacct", env=imported)
    assert sent.returncode == 0 and "mailed the note of job 102" in sent.stdout, sent.stderr
    (got,) = smtp_server.messages
    assert got.message["Subject"].endswith("$7.70 not measured")


def test_a_user_that_is_no_plain_local_part_is_not_mailed(
    store_url: str, tmp_path: Path, smtp_server: SmtpServer
) -> None:
    """A job whose user (as the scheduler's record has it) is ``victim@evil.example, root``:
    ``{user}@corp.example`` would mail evil.example. Nothing is sent or logged as sent, one line
    names the job and the user, and the epilog still exits 0 with that line in its log."""
    from datetime import timedelta

    from fakes import slurm_job
    from test_slurm_report import TEN

    from reports.data.allocations import write_allocations
    from tracker.store import RunStore

    users = {
        "201": "victim@evil.example, root",
        "202": "victim%evil.example",  # Postfix's percent hack: victim@evil.example
        "203": "evil.example!victim",  # a UUCP bang path
        "204": "a..b",
        "205": "x" * 65,
        "206": '"victim@evil.example"',
        "207": "ana\r\nBcc: victim@evil.example",
    }
    jobs = [
        slurm_job(job, 2, TEN, TEN + timedelta(hours=1), ("n9",), cluster="gpukpi", user=user)
        for job, user in users.items()
    ]
    with RunStore(store_url) as store:
        write_allocations(store, jobs)
    env = {"GPU_KPI_STORE": store_url}
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(CONFIG.format(store=store_url, port=smtp_server.port))
    for job, user in users.items():
        args = ("job", job, "--config", str(config), "--mail", "--to", "{user}@corp.example")
        p = gpu_kpi(*args, "--no-sacct", env=env)
        assert p.returncode == 2, (user, p.stdout)
        assert p.stderr == (
            f"gpu-kpi: error: the note of job {job} not mailed: its user {user!r} is not a "
            "plain mail local part ({user} in --to)\n"
        )
        assert "Allocated, no samples: 2.0 GPU-h, $7.70" in p.stdout  # the note, printed
    assert smtp_server.messages == []
    log = tmp_path / "epilog.log"
    env = {
        "PATH": os.environ["PATH"],
        "GPU_KPI": f"{sys.executable} -m reports.cli",
        "GPU_KPI_CONFIG": str(config),
        "GPU_KPI_STORE": store_url,
        "GPU_KPI_MAIL_DOMAIN": "corp.example",
        "GPU_KPI_EPILOG_LOG": str(log),
        "SLURM_JOB_ID": "201",
        "SLURM_CLUSTER_NAME": "gpukpi",
    }
    p = subprocess.run(
        ["sh", str(EPILOG)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0, p.stderr
    assert log.read_text().endswith(
        "job 201: gpu-kpi: error: the note of job 201 not mailed: its user "
        "'victim@evil.example, root' is not a plain mail local part ({user} in --to)\n"
    )
    assert smtp_server.messages == []
    # an address without {user} is the user's choice, mailed as written
    p = gpu_kpi("job", "201", "--config", str(config), "--mail", "--to", "x@corp.example", env=env)
    assert p.returncode == 0 and [m.rcpt_tos for m in smtp_server.messages] == [["x@corp.example"]]


def test_a_plain_local_part_is_taken_as_it_is() -> None:
    from reports.service.job_notes import address_of

    odd = "o'brien.j_x-1+gpu{7}"  # every sign a dot-atom allows but % and !: still one user
    assert address_of("{user}@corp.example", odd) == f"{odd}@corp.example"
    assert address_of("GPU <{user}@Corp.Example>", "ana") == "GPU <ana@Corp.Example>"
    assert address_of("{user}@corp.example", "x" * 64) == "x" * 64 + "@corp.example"
    assert address_of("lead@corp.example", "victim@evil.example, root") == "lead@corp.example"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("job", "12a"), "a Slurm job id"),
        (("job", "999", "--no-sacct"), "job 999 is not in the store"),
        (("job", "101", "--to", "a@b.c"), "--to and --min-waste-usd are for --mail"),
        (("job", "101", "--mail"), "--mail needs --to"),
        (("job", "101", "--mail", "--to", "{user}, x@y.z"), "{user} must make one address"),
        (("job", "gpukpi/101", "--cluster", "other"), "names cluster 'gpukpi'; --cluster says"),
        (("job", "other/101", "--no-sacct"), "job 101 is not in the store"),
    ],
)
def test_bad_job_requests_are_one_line(
    imported: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    p = gpu_kpi(*args, env=imported)
    assert p.returncode != 0 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1


EPILOG = Path(__file__).resolve().parents[2] / "contrib" / "slurm" / "epilog.sh"


def epilog(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``contrib/slurm/epilog.sh`` as slurmctld runs it, the job's variables in ``env``."""
    return subprocess.run(
        ["sh", str(EPILOG)], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def epilog_env(store: str, config: Path) -> dict[str, str]:
    """The environment slurmctld gives the epilog of job 103 (ana's, on cluster gpukpi)."""
    return {
        "PATH": os.environ["PATH"],
        "GPU_KPI": f"{sys.executable} -m reports.cli",
        "GPU_KPI_CONFIG": str(config),
        "GPU_KPI_STORE": store,
        "GPU_KPI_MAIL_DOMAIN": "example.org",
        "SLURM_JOB_ID": "103",
        "SLURM_CLUSTER_NAME": "gpukpi",
        "SLURM_JOB_USER": "ana",
    }


# three fresh interpreters (~1 s of CPU each): make test runs it. In the fast suite
# test_the_note_is_mailed_once checks the once (the delivery log), the test below that the
# epilog starts no gpu-kpi for a job id that is none, and
# test_a_user_that_is_no_plain_local_part_is_not_mailed that the epilog runs gpu-kpi job and
# exits 0 with its error in the log when gpu-kpi fails
@pytest.mark.slow
def test_the_epilog_mails_once_and_never_fails(
    imported: dict[str, str], tmp_path: Path, smtp_server: SmtpServer
) -> None:
    """``contrib/slurm/epilog.sh`` as slurmctld runs it (the job's variables in its
    environment), twice for the same job: one mail; and it exits 0 whatever goes wrong (a
    failing epilog drains the node)."""
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(CONFIG.format(store=imported["GPU_KPI_STORE"], port=smtp_server.port))
    env = epilog_env(imported["GPU_KPI_STORE"], config)
    for _ in range(2):
        p = epilog(env)
        assert p.returncode == 0, p.stderr
    (got,) = smtp_server.messages
    assert got.rcpt_tos == ["ana@example.org"] and "job 103 (sleeper)" in got.message["Subject"]
    p = epilog({**env, "GPU_KPI_STORE": "postgresql://nobody@127.0.0.1:1/none"})
    assert p.returncode == 0, p.stderr
    assert len(smtp_server.messages) == 1


@pytest.mark.parametrize("job", ["", "x; rm"])
def test_the_epilog_of_no_job_id_exits_0_and_starts_nothing(
    tmp_path: Path, smtp_server: SmtpServer, job: str
) -> None:
    """A ``SLURM_JOB_ID`` that is no job id: the epilog exits 0 (a failing epilog drains the
    node) without running gpu-kpi (``GPU_KPI_EPILOG_LOG`` gets no line), and nothing is
    mailed."""
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(CONFIG.format(store=store, port=smtp_server.port))
    log = tmp_path / "epilog.log"
    env = epilog_env(store, config)
    p = epilog({**env, "GPU_KPI_EPILOG_LOG": str(log), "SLURM_JOB_ID": job})
    assert p.returncode == 0, p.stderr
    assert not log.exists()
    assert smtp_server.messages == []


def idle_then_busy_job(
    store_url: str,
    folder: Path,
    state: str,
    *,
    utils: tuple[float, float] = (2.0, 50.0),
    **run: Any,
) -> dict[str, str]:
    """Job 106 on n5, ended ``state``: one H100 for 90 minutes, its tracked run idle (2%) for
    the first 30 and busy (50%) for the next 60 (``utils``; ``run``: more of its record). The
    environment naming the store."""
    from datetime import timedelta

    from fakes import minutes, run_record
    from test_slurm_report import HEADER, TEN, _sacct_line

    from tracker.store import RunStore

    with RunStore(store_url) as store:
        store.upsert_run(
            run_record("rb", TEN, 1.5, host="n5", links={"slurm": "gpukpi/106"}, **run)
        )
        store.upsert_samples(
            minutes("rb", TEN, 30, utils[0], "b0")
            + minutes("rb", TEN + timedelta(minutes=30), 60, utils[1], "b0")
        )
    saved = folder / "sacct.txt"
    line = _sacct_line(
        "106", "mixed", "nlp", TEN, TEN + timedelta(minutes=90), "gres/gpu:h100=1", "n5"
    )
    saved.write_text(f"{HEADER}\n{line.replace('|COMPLETED|', f'|{state}|')}\n")
    env = {"GPU_KPI_STORE": store_url}
    assert gpu_kpi("import", "slurm", str(saved), env=env).returncode == 0
    return env


def test_the_notes_waste_is_the_per_gpu_rule(store_url: str, tmp_path: Path) -> None:
    """Its idle time in full, the rest by the target rule — not the mean utilization's
    shortfall (1 − 34/85 would say 60.0%)."""
    env = idle_then_busy_job(store_url, tmp_path, "COMPLETED")
    d = json.loads(gpu_kpi("job", "106", "--json", env=env).stdout)
    assert d["util_pct"] == pytest.approx((30 * 2 + 60 * 50) / 90)
    assert d["idle_gpu_hours"] == pytest.approx(0.5)
    assert d["waste_usd"] == pytest.approx(1.5 * 3.85 * (1 / 3 + 2 / 3 * (1 - 50 / 85)))
    assert d["failed_usd"] == 0.0


def test_a_job_that_failed_has_failed_work_not_waste(store_url: str, tmp_path: Path) -> None:
    """The same job ended FAILED: none of its time is recoverable waste; its 1.5 sampled
    GPU-hours are failed work, $5.78, and what it paid that no figure shows useful."""
    env = idle_then_busy_job(store_url, tmp_path, "FAILED")
    d = json.loads(gpu_kpi("job", "106", "--json", env=env).stdout)
    assert d["state"] == "FAILED" and d["waste_usd"] == 0.0
    assert d["failed_usd"] == pytest.approx(1.5 * 3.85)
    assert d["at_stake_usd"] == pytest.approx(1.5 * 3.85)
    text = gpu_kpi("job", "106", env=env).stdout
    assert "Recoverable waste (target 85%): $0.00" in text
    assert "Failed work (it ended FAILED): 1.5 GPU-h, $5.78" in text


def test_a_throttled_jobs_note_names_the_machine(store_url: str, tmp_path: Path) -> None:
    """The same job at 92% throughout, its run's GPU held below its clocks 15 of its 90 minutes
    (the violation counter): no waste; 0.25 GPU-h throttled, $0.96, 17% of its GPU-time, the
    machine's, in what it paid that no figure shows useful."""
    env = idle_then_busy_job(
        store_url,
        tmp_path,
        "COMPLETED",
        utils=(92.0, 92.0),
        throttled_gpu_hours=0.25,
        throttle_source="counter",
        verdict="throttled",
    )
    d = json.loads(gpu_kpi("job", "106", "--json", env=env).stdout)
    assert d["waste_usd"] == 0.0
    assert d["throttled_gpu_hours"] == pytest.approx(0.25) and d["throttle_source"] == "counter"
    assert d["throttled_usd"] == pytest.approx(0.25 * 3.85)
    assert d["at_stake_usd"] == pytest.approx(0.25 * 3.85)
    text = gpu_kpi("job", "106", env=env).stdout
    assert "Throttled (the machine's, counter-exact): 0.25 GPU-h, $0.96" in text
    assert "Paid, not shown useful (waste + no samples + throttled): $0.96" in text
    assert "Verdict: throttled" in text
    assert (
        "17% of this job's GPU-time and $0.96 were the machine (throttled 15 min, "
        "counter-exact), not your code" in text
    )
