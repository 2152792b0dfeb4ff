"""``gpu-kpi serve``, ``serve --once`` and ``send`` as a user runs them: a subprocess, a config
file, a real SMTP server on 127.0.0.1, the Prometheus endpoint scraped over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from email import message_from_bytes, policy
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import SmtpServer, unused_port

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


def config(tmp_path: Path, store: str, port: int, extra: str = "") -> Path:
    path = tmp_path / "gpu-kpi.toml"
    path.write_text(f"""
store = "{store}"
[report]
out_dir = "{tmp_path}/archive"
[smtp]
host = "127.0.0.1"
port = {port}
security = "none"
retries = 0
sender = "gpu-kpi@example.com"
[[recipients]]
to = "cto@example.com"
[[recipients]]
to = "nlp-lead@example.com"
report = "team"
team = "nlp"
{extra}""")
    return path


def gpu_kpi(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reports.cli", *args], capture_output=True,
                          text=True, timeout=180, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "GPU_KPI_SMTP_PASSWORD": SECRET}, **kw)  # type: ignore[call-overload]


def test_serve_once_archives_and_delivers(tmp_path: Path, store: str,
                                          smtp_server: SmtpServer) -> None:
    cfg = config(tmp_path, store, smtp_server.port)
    p = gpu_kpi("serve", "--once", "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    week = latest_label()
    assert f"{week} summary cto@example.com: sent" in p.stdout
    assert f"{week} team:nlp nlp-lead@example.com: sent" in p.stdout
    assert str(tmp_path / "archive" / f"{week}.html") in p.stdout.splitlines()
    assert sorted(m.rcpt_tos[0] for m in smtp_server.messages) == ["cto@example.com",
                                                                   "nlp-lead@example.com"]
    again = gpu_kpi("serve", "--once", "--config", str(cfg))
    assert again.returncode == 0 and "sent" not in again.stdout
    assert len(smtp_server.messages) == 2
    assert SECRET not in p.stdout + p.stderr + again.stdout + again.stderr


def test_send_dry_run_writes_the_message(tmp_path: Path, store: str) -> None:
    cfg = config(tmp_path, store, unused_port())
    week = latest_label()
    out = tmp_path / "dry"
    p = gpu_kpi("send", "--week", week, "--to", "boss@example.com", "--dry-run",
                "--out", str(out), "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"dry run: {out / (week + '.eml')} (not sent)"
    msg = message_from_bytes((out / f"{week}.eml").read_bytes(), policy=policy.default)
    assert msg["To"] == "boss@example.com" and msg.get_content_type() == "multipart/alternative"


def test_send_mails_now_and_says_so(tmp_path: Path, store: str, smtp_server: SmtpServer) -> None:
    cfg = config(tmp_path, store, smtp_server.port)
    week = latest_label()
    p = gpu_kpi("send", "--week", week, "--to", "a@example.com", "--to", "b@example.com",
                "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (f"sent {week} to a@example.com, b@example.com via "
                                f"127.0.0.1:{smtp_server.port}")
    assert [m.rcpt_tos for m in smtp_server.messages] == [["a@example.com", "b@example.com"]]


@pytest.mark.parametrize(("args", "needle"), [
    (("--week", "2026-W60", "--to", "a@example.com"), "does not exist"),
    (("--week", "{week}", "--to", "not-an-address"), "--to: expected an email address"),
    (("--week", "{week}", "--to", "a@example.com"), "127.0.0.1"),  # nothing listening
])
def test_send_errors_are_one_line(tmp_path: Path, store: str, args: tuple[str, ...],
                                  needle: str) -> None:
    cfg = config(tmp_path, store, unused_port())
    p = gpu_kpi("send", *(a.format(week=latest_label()) for a in args), "--config", str(cfg))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("gpu-kpi: error: ")
    assert needle in p.stderr


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def test_serve_runs_until_sigterm_and_exports_metrics(tmp_path: Path, store: str,
                                                      smtp_server: SmtpServer) -> None:
    port = unused_port()
    cfg = config(tmp_path, store, smtp_server.port,
                 extra=f"[service]\nmetrics_port = {port}\n")
    proc = subprocess.Popen([sys.executable, "-m", "reports.cli", "serve", "--config", str(cfg)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
        assert "gpu_kpi_week_to_date_gpu_hours" in text
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "serving; next weekly report at" in err and "SIGTERM" in err
    assert smtp_server.messages == []  # a first start owes no back issue
