"""SIGTERM in the middle of a run: the message in flight is finished, what was not tried is left
owed in the delivery log (``deferred``, 0 attempts, no ``sending`` claim held for the hour-long
lease), ``serve --once`` exits non-zero saying so in one line, and the next run sends the rest at
once. A real ``gpu-kpi serve --once`` subprocess, a real SMTP server that holds the first
message at DATA until the signal has been taken."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import SmtpServer
from test_job import ALICE, CTO, NLP, settings
from test_scheduler import HeldData, Results, serving
from test_serve import ROOT, config, gpu_kpi, latest_label

from reports.service.config import ServiceSettings
from reports.service.deliveries import DeliveryLog
from reports.service.job import STOPPED, Service
from tracker.store import RunStore

pytestmark = pytest.mark.service  # real SMTP servers, schedulers, subprocesses: `make test`

ALICE_TOO = '[[recipients]]\nto = "alice@example.com"\nreport = "runs"\nuser = "alice"\n'


@pytest.fixture
def store(tmp_path: Path) -> str:
    from test_job import add_week

    url = f"sqlite:///{tmp_path}/runs.db"
    week = Service(ServiceSettings()).latest_week(datetime.now(UTC))
    add_week(url, week - timedelta(days=7))
    add_week(url, week)
    return url


def log_of(store: str) -> list[tuple[str, str, str, int]]:
    with RunStore(store) as st:
        return [(e.kind, e.recipient, e.status, e.attempts) for e in DeliveryLog(st).entries()]


class Stderr:
    """Reads a process's stderr on a thread; ``wait_for(text)`` until a line holds it."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: any(text in x for x in self.lines), timeout), (
                self.lines
            )

    def all(self) -> list[str]:
        self._thread.join(30)
        return self.lines


def test_sigterm_during_serve_once_finishes_the_message_and_leaves_the_rest_owed(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldData(monkeypatch)
    cfg = config(tmp_path, store, smtp_server.port, extra=ALICE_TOO)
    week = latest_label()
    proc = subprocess.Popen(
        [sys.executable, "-m", "reports.cli", "serve", "--once", "--config", str(cfg)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        err = Stderr(proc)
        assert held.arrived.wait(90), err.lines  # the summary is at DATA, the server holds it
        proc.send_signal(signal.SIGTERM)
        err.wait_for("SIGTERM: stopping after the message in flight")
        held.release.set()
        # stdout only: communicate() would read stderr too, racing the Stderr thread for lines
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.wait(timeout=60)
    finally:
        held.release.set()
        if proc.poll() is None:
            proc.kill()
    lines = err.all()
    assert proc.returncode == 128 + signal.SIGTERM == 143, lines
    assert lines[-1] == (
        "gpu-kpi: stopped by SIGTERM: 1 sent, 2 not tried and left owed (the next run sends them)"
    )
    assert f"{week} summary cto@example.com: sent" in out.splitlines()
    assert f"{week} team:nlp nlp-lead@example.com: deferred ({STOPPED})" in out.splitlines()
    assert f"{week} runs:alice alice@example.com: deferred ({STOPPED})" in out.splitlines()
    assert [m.rcpt_tos for m in smtp_server.messages] == [["cto@example.com"]]
    # no claim left "sending" (it would hold for the hour-long lease): all owed at once
    assert log_of(store) == [
        ("runs:alice", ALICE.to, "deferred", 0),
        ("summary", CTO.to, "sent", 1),
        ("team:nlp", NLP.to, "deferred", 0),
    ]

    again = gpu_kpi("serve", "--once", "--config", str(cfg))
    assert again.returncode == 0, again.stderr
    assert sorted(m.rcpt_tos[0] for m in smtp_server.messages) == sorted([CTO.to, NLP.to, ALICE.to])
    assert [(r, s, n) for _, r, s, n in log_of(store)] == [
        (ALICE.to, "sent", 1),
        (CTO.to, "sent", 1),
        (NLP.to, "sent", 1),
    ]


def test_a_stop_while_serving_finishes_the_message_and_a_restart_catches_up(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` (the scheduler) catching up a missed week when SIGTERM comes (its stop event,
    set as the signal handler sets it): the job ends after the message in flight, serve
    returns, and what was left is what a restart finds overdue."""
    s = settings(tmp_path, store, smtp_server, CTO, NLP, ALICE)
    Service(s).run(now=datetime.now(UTC) - timedelta(days=7))  # the week before went out
    sent_before = len(smtp_server.messages)
    held = HeldData(monkeypatch)
    results = Results()
    with serving(s, results) as stop:
        assert held.arrived.wait(90)
        stop.set()
        held.release.set()
        (stopped,) = results.wait(1)
    assert stopped.stopped
    assert [(o.recipient, o.status) for o in stopped.outcomes] == [
        (CTO.to, "sent"),
        (NLP.to, "deferred"),
        (ALICE.to, "deferred"),
    ]
    assert len(smtp_server.messages) == sent_before + 1
    assert Service(s).overdue() is True
    rerun = Service(s).run()
    assert [(o.recipient, o.status) for o in rerun.outcomes] == [
        (NLP.to, "sent"),
        (ALICE.to, "sent"),
    ]
    assert len(smtp_server.messages) == sent_before + 3
