"""``gpu-kpi serve``, ``serve --once`` and ``send`` as a user runs them: a subprocess, a config
file, a real SMTP server on 127.0.0.1, the Prometheus endpoint scraped over HTTP; what they say
when there is nothing to do, when the server is down and when the metrics port is taken."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from email import message_from_bytes, policy
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import USERS, SmtpServer, unused_port

from reports.service.config import ServiceSettings
from reports.service.job import Service
from reports.weeks import label_of

pytestmark = pytest.mark.service  # real SMTP servers, schedulers, subprocesses: `make test`

ROOT = Path(__file__).resolve().parents[3]
SECRET = "Pw-only-in-the-env-7781"


def latest_label() -> str:
    return label_of(Service(ServiceSettings()).latest_week(datetime.now(UTC)))


@pytest.fixture
def store(tmp_path: Path) -> str:
    from test_job import add_week

    url = f"sqlite:///{tmp_path}/runs.db"
    add_week(url, Service(ServiceSettings()).latest_week(datetime.now(UTC)))
    return url


def config(
    tmp_path: Path, store: str, port: int, extra: str = "", smtp: str = "retries = 0"
) -> Path:
    path = tmp_path / "gpu-kpi.toml"
    path.write_text(f"""
store = "{store}"
[report]
out_dir = "{tmp_path}/archive"
[smtp]
host = "127.0.0.1"
port = {port}
security = "none"
{smtp}
sender = "gpu-kpi@example.com"
[[recipients]]
to = "cto@example.com"
[[recipients]]
to = "nlp-lead@example.com"
report = "team"
team = "nlp"
{extra}""")
    return path


def gpu_kpi(*args: str, password: str = SECRET, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reports.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GPU_KPI_SMTP_PASSWORD": password},
        **kw,
    )  # type: ignore[call-overload]


def test_serve_once_archives_and_delivers(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    cfg = config(tmp_path, store, smtp_server.port)
    p = gpu_kpi("serve", "--once", "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    week = latest_label()
    assert f"{week} summary cto@example.com: sent" in p.stdout
    assert f"{week} team:nlp nlp-lead@example.com: sent" in p.stdout
    assert str(tmp_path / "archive" / f"{week}.html") in p.stdout.splitlines()
    assert sorted(m.rcpt_tos[0] for m in smtp_server.messages) == [
        "cto@example.com",
        "nlp-lead@example.com",
    ]
    again = gpu_kpi("serve", "--once", "--config", str(cfg))
    assert again.returncode == 0, again.stderr
    *archived, said = again.stdout.splitlines()
    assert sorted(archived) == sorted(
        line for line in p.stdout.splitlines() if line.startswith(str(tmp_path))
    )  # rewritten, not sent
    assert said == f"{week}: already delivered to 2 recipient(s); nothing owed"
    assert len(smtp_server.messages) == 2
    assert SECRET not in p.stdout + p.stderr + again.stdout + again.stderr


def test_send_dry_run_writes_the_message(tmp_path: Path, store: str) -> None:
    cfg = config(tmp_path, store, unused_port())
    week = latest_label()
    out = tmp_path / "dry"
    p = gpu_kpi(
        "send",
        "--week",
        week,
        "--to",
        "boss@example.com",
        "--dry-run",
        "--out",
        str(out),
        "--config",
        str(cfg),
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"dry run: {out / (week + '.eml')} (not sent)"
    msg = message_from_bytes((out / f"{week}.eml").read_bytes(), policy=policy.default)
    assert msg["To"] == "boss@example.com" and msg.get_content_type() == "multipart/alternative"


def test_send_dry_run_writes_through_a_symlink_and_into_a_fifo(tmp_path: Path, store: str) -> None:
    """The ``.eml`` a dry run writes may already be a symlink (its target gets the message, the
    link stays) or a FIFO with a reader (it gets the message; it is not replaced by a file)."""
    import stat

    from fifos import FifoReader

    cfg = config(tmp_path, store, unused_port())
    week = latest_label()
    out = tmp_path / "dry"
    out.mkdir()
    kept = tmp_path / "kept.eml"
    kept.write_bytes(b"old")
    (out / f"{week}.eml").symlink_to(kept)
    args = ("send", "--week", week, "--to", "boss@example.com", "--dry-run", "--out", str(out))
    p = gpu_kpi(*args, "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    assert (out / f"{week}.eml").is_symlink()
    msg = message_from_bytes(kept.read_bytes(), policy=policy.default)
    assert msg["To"] == "boss@example.com"
    (out / f"{week}.eml").unlink()
    os.mkfifo(out / f"{week}.eml")
    reader = FifoReader(out / f"{week}.eml")
    p = gpu_kpi(*args, "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    got = reader.result()
    assert got is not None
    assert message_from_bytes(got, policy=policy.default)["To"] == "boss@example.com"
    assert stat.S_ISFIFO(os.lstat(out / f"{week}.eml").st_mode)


def test_send_a_teams_or_an_engineers_report(tmp_path: Path, store: str) -> None:
    cfg = config(tmp_path, store, unused_port())
    week = latest_label()
    out = tmp_path / "dry"
    p = gpu_kpi(
        "send",
        "--week",
        week,
        "--to",
        "lead@example.com",
        "--team",
        "nlp",
        "--dry-run",
        "--out",
        str(out),
        "--config",
        str(cfg),
    )
    assert p.returncode == 0, p.stderr
    path = out / f"{week}-team-nlp.eml"
    assert p.stdout.strip() == f"dry run: {path} (not sent)"
    msg = message_from_bytes(path.read_bytes(), policy=policy.default)
    assert str(msg["Subject"]).strip().startswith(f"GPU efficiency {week}, team nlp: $46 spend")
    p = gpu_kpi(
        "send",
        "--week",
        week,
        "--to",
        "alice@example.com",
        "--kind",
        "runs",
        "--user",
        "alice",
        "--dry-run",
        "--out",
        str(out),
        "--config",
        str(cfg),
    )
    assert p.returncode == 0, p.stderr
    msg = message_from_bytes((out / f"{week}-runs-alice.eml").read_bytes(), policy=policy.default)
    assert "1 of your runs under 50%" in str(msg["Subject"])
    # bob's run was at 90%: nothing to send, and said so
    p = gpu_kpi(
        "send",
        "--week",
        week,
        "--to",
        "bob@example.com",
        "--user",
        "bob",
        "--dry-run",
        "--out",
        str(out),
        "--config",
        str(cfg),
    )
    assert p.returncode == 1
    assert (
        p.stderr.strip() == f"gpu-kpi: nothing sent: user 'bob' had no underutilized runs in {week}"
    )
    p = gpu_kpi(
        "send", "--week", week, "--to", "a@example.com", "--kind", "team", "--config", str(cfg)
    )
    assert p.returncode == 2 and p.stderr.strip() == "gpu-kpi: error: --kind team needs --team"
    p = gpu_kpi(
        "send",
        "--week",
        week,
        "--to",
        "a@example.com",
        "--team",
        "nlp",
        "--user",
        "alice",
        "--config",
        str(cfg),
    )
    assert p.returncode == 2 and "--team and --user: one report at a time" in p.stderr


def test_send_mails_now_and_says_so(tmp_path: Path, store: str, smtp_server: SmtpServer) -> None:
    cfg = config(tmp_path, store, smtp_server.port)
    week = latest_label()
    p = gpu_kpi(
        "send",
        "--week",
        week,
        "--to",
        "a@example.com",
        "--to",
        "b@example.com",
        "--config",
        str(cfg),
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (
        f"sent {week} to a@example.com, b@example.com via 127.0.0.1:{smtp_server.port}"
    )
    assert [m.rcpt_tos for m in smtp_server.messages] == [["a@example.com", "b@example.com"]]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--week", "2026-W60", "--to", "a@example.com"), "does not exist"),
        (("--week", "{week}", "--to", "not-an-address"), "--to: expected an email address"),
        (("--week", "{week}", "--to", "a@example.com"), "127.0.0.1"),  # nothing listening
    ],
)
def test_send_errors_are_one_line(
    tmp_path: Path, store: str, args: tuple[str, ...], needle: str
) -> None:
    cfg = config(tmp_path, store, unused_port())
    p = gpu_kpi("send", *(a.format(week=latest_label()) for a in args), "--config", str(cfg))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("gpu-kpi: error: ")
    assert needle in p.stderr


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def test_serve_runs_until_sigterm_and_exports_metrics(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    port = unused_port()
    cfg = config(tmp_path, store, smtp_server.port, extra=f"[service]\nmetrics_port = {port}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "reports.cli", "serve", "--config", str(cfg)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, text = time.monotonic() + 90, ""
        while time.monotonic() < deadline and "gpu_kpi_week_spend_usd{" not in text:
            time.sleep(0.3)
            try:
                text = scrape(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                pass
        # the last week: 8 + 4 + 10 GPU-hours at $3.85
        week = latest_label()
        assert f'gpu_kpi_week_spend_usd{{basis="util",week="{week}"}} 84.7' in text
        assert f'gpu_kpi_team_spend_usd{{basis="util",team="nlp",week="{week}"}} 46.2' in text
        assert "gpu_kpi_week_to_date_gpu_seconds" in text
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "serving; next weekly report at" in err and "SIGTERM" in err
    assert smtp_server.messages == []  # a first start owes no back issue


def test_serve_once_retry_failed_sends_what_a_wrong_password_failed(
    tmp_path: Path, store: str, smtp_server_factory: object
) -> None:
    server = smtp_server_factory(users=USERS)  # type: ignore[operator]
    cfg = config(tmp_path, store, server.port, smtp='retries = 0\nusername = "alice"')
    week = latest_label()
    failed = gpu_kpi("serve", "--once", "--config", str(cfg))  # SECRET is not alice's password
    assert failed.returncode == 1
    assert (
        f"{week} summary cto@example.com: failed (smtp 127.0.0.1:{server.port}: "
        "authentication failed: 535" in failed.stdout
    )
    # the right password in the same variable: the settings' fingerprint is the same
    same = gpu_kpi("serve", "--once", "--config", str(cfg), password=USERS["alice"])
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines()[-1] == (
        f"{week}: already delivered to 0 recipient(s), 2 "
        "failed (serve --retry-failed tries again); nothing owed"
    )
    retried = gpu_kpi(
        "serve", "--once", "--retry-failed", "--config", str(cfg), password=USERS["alice"]
    )
    assert retried.returncode == 0, retried.stderr
    assert f"{week} summary cto@example.com: sent" in retried.stdout
    assert f"{week} team:nlp nlp-lead@example.com: sent" in retried.stdout
    assert sorted(m.rcpt_tos[0] for m in server.messages) == [
        "cto@example.com",
        "nlp-lead@example.com",
    ]


def test_send_to_a_closed_port_gives_up_within_its_timeout_and_says_how_long(
    tmp_path: Path, store: str
) -> None:
    """smtp.retries = 10 with a 1 s backoff would try for 1 + 2 + … + 512 = 1023 s. With
    ``--timeout 5``: attempts at 0, 1 and 3 s; the next would start at 7 s, so it stops."""
    port = unused_port()
    cfg = config(tmp_path, store, port, smtp="retries = 10\nbackoff_s = 1")
    week = latest_label()
    start = time.monotonic()
    p = gpu_kpi(
        "send", "--week", week, "--to", "a@example.com", "--timeout", "5", "--config", str(cfg)
    )
    took = time.monotonic() - start
    *retrying, error = p.stderr.splitlines()  # one warning per retry, then the one-line error
    assert p.returncode == 2 and len(retrying) == 2, p.stderr
    assert all(line.startswith(f"smtp 127.0.0.1:{port}: attempt ") for line in retrying)
    found = re.fullmatch(
        rf"gpu-kpi: error: smtp 127\.0\.0\.1:{port}: connection refused "
        r"\(temporary; gave up after (\d+) attempts in ([\d.]+)s; time limit 5s\)",
        error,
    )
    assert found, p.stderr
    # three attempts: the backoffs of 1 and 2 s are slept (a lower bound at any load); a
    # fourth would start at 7 s, after the 5 s limit, so the trying stops before it
    assert int(found[1]) == 3 and 3.0 <= float(found[2]) < 7.0
    assert took < 1023 / 2  # far from ten retries' 1023 s (the report is built first)
    once = gpu_kpi(
        "send", "--week", week, "--to", "a@example.com", "--no-retry", "--config", str(cfg)
    )
    assert once.returncode == 2 and once.stderr.count("\n") == 1
    assert once.stderr.strip().endswith(
        "(temporary; gave up after 1 attempt in 0.0s; time limit 60s)"
    ), once.stderr


def test_a_bad_send_timeout_is_a_usage_error(tmp_path: Path, store: str) -> None:
    p = gpu_kpi(
        "send",
        "--week",
        latest_label(),
        "--to",
        "a@example.com",
        "--timeout",
        "0",
        "--config",
        str(config(tmp_path, store, unused_port())),
    )
    assert p.returncode == 2 and "--timeout: expected a number of seconds above 0" in p.stderr


def test_a_metrics_port_in_use_is_one_line_and_exit_2(tmp_path: Path, store: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = config(tmp_path, store, unused_port(), extra=f"[service]\nmetrics_port = {port}\n")
        p = gpu_kpi("serve", "--config", str(cfg))
    assert p.returncode == 2
    assert p.stderr == (
        f"gpu-kpi: error: service.metrics_port: cannot serve /metrics on "
        f"127.0.0.1:{port}: Address already in use\n"
    )
    assert p.stdout == ""
