"""The mailer's bounds and its verdicts, against real servers on 127.0.0.1: a total time limit
on one send (``gpu-kpi send --timeout``), a stop that ends the retries (SIGTERM), which failures
are the SMTP settings' fault, and the fingerprint of those settings."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the server fixtures)
from smtp_servers import SmtpServer, silent_server, unused_port
from test_mailer import Sleeps, report_message

from reports.service.commands import SEND_TIMEOUT_S
from reports.service.mailer import MailError, SmtpMailer, SmtpSettings, config_fingerprint

pytestmark = pytest.mark.service  # real SMTP servers, schedulers, subprocesses: `make test`


class Clock:
    """A monotonic clock that only the injected sleep moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps = Sleeps()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps(seconds)
        self.now += seconds


def refused(**kw: object) -> SmtpSettings:
    return SmtpSettings(host="127.0.0.1", port=unused_port(), security="none", **kw)  # type: ignore[arg-type]


def fail(mailer: SmtpMailer) -> MailError:
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["a@example.com"])
    return caught.value


def test_the_time_limit_ends_the_retries_and_says_how_long_it_tried() -> None:
    """Retries 5, backoff 10 s: attempts at t = 0, 10, 30; the next would start at 70 s, past
    the 45 s limit, so none does."""
    clock = Clock()
    err = fail(
        SmtpMailer(
            refused(retries=5, backoff_s=10.0),
            password=None,
            sleep=clock.sleep,
            clock=clock,
            total_s=45.0,
        )
    )
    assert clock.sleeps == [10.0, 20.0]
    assert err.temporary and not err.config
    assert str(err).endswith(
        "connection refused (temporary; gave up after 3 attempts in 30.0s; time limit 45s)"
    )


def test_the_send_default_limit_cuts_the_default_backoff() -> None:
    """The default settings wait 30 + 60 + 120 s between 4 attempts (3.5 minutes); under
    ``gpu-kpi send``'s 60 s only the first wait fits."""
    unbounded = Clock()
    fail(SmtpMailer(refused(), password=None, sleep=unbounded.sleep, clock=unbounded))
    assert unbounded.sleeps == [30.0, 60.0, 120.0]
    bounded = Clock()
    err = fail(
        SmtpMailer(
            refused(), password=None, sleep=bounded.sleep, clock=bounded, total_s=SEND_TIMEOUT_S
        )
    )
    assert bounded.sleeps == [30.0]
    assert "gave up after 2 attempts in 30.0s; time limit 60s" in str(err)


def test_the_time_limit_cuts_the_connection_timeout() -> None:
    """A server that accepts and never answers, a 30 s socket timeout, a 1 s limit: it gives up
    after about 1 s (the real clock), not 30."""
    with silent_server() as port:
        settings = SmtpSettings(host="127.0.0.1", port=port, security="none", timeout_s=30.0)
        start = time.monotonic()
        err = fail(SmtpMailer(settings, password=None, total_s=1.0))
        took = time.monotonic() - start
    # at least the limit (a sleep-like lower bound, true at any load), and far from the 30 s
    # socket timeout it must not wait for (what is left is CPU work that load can stretch)
    assert 0.9 <= took < 30.0 / 2, took
    assert "timed out after 1s" in str(err) and "time limit 1s" in str(err)


def test_a_stop_ends_the_retries() -> None:
    """SIGTERM arrives during the wait before the first retry (the injected sleep sets the
    stop): no further attempt; the failure stays temporary, so the delivery stays owed."""
    stop = threading.Event()
    sleeps = Sleeps()

    def interrupted(seconds: float) -> None:
        sleeps(seconds)
        stop.set()

    err = fail(
        SmtpMailer(refused(retries=3, backoff_s=5.0), password=None, sleep=interrupted, stop=stop)
    )
    assert sleeps == [5.0]
    assert err.temporary
    assert str(err).endswith(
        "connection refused; not retried: stopping (temporary; gave up after 1 attempt)"
    )
    stopped = threading.Event()
    stopped.set()  # already stopping: the attempt in hand is made, no retry is waited for
    sleeps.clear()
    fail(SmtpMailer(refused(retries=3), password=None, sleep=sleeps, stop=stopped))
    assert sleeps == []


@pytest.mark.parametrize(
    ("server", "settings", "config"),
    [
        ({"users": {"alice": "right"}}, {"username": "alice"}, True),  # 535
        ({"security": "starttls"}, {"ca_file": None}, True),  # certificate not trusted
        ({}, {"security": "starttls"}, True),  # STARTTLS not offered
        ({"refuse": {"a@example.com": "550 5.1.1 no such user"}}, {}, False),
        ({"data_replies": ["554 5.7.1 looks like spam"]}, {}, False),
        ({"data_replies": ["451 4.3.0 try again later"]}, {}, False),  # temporary: never config
    ],
)
def test_which_failures_are_the_settings_fault(
    smtp_server_factory: Callable[..., SmtpServer],
    server: dict[str, object],
    settings: dict[str, object],
    config: bool,
) -> None:
    srv = smtp_server_factory(**server)
    password = "wrong" if "username" in settings else None
    err = fail(SmtpMailer(srv.settings(**settings), password=password, sleep=Sleeps()))
    assert err.config is config, str(err)


def test_the_fingerprint_follows_the_settings_a_fault_can_lie_in(
    tmp_path: Path, smtp_server_factory: Callable[..., SmtpServer]
) -> None:
    ca = smtp_server_factory(security="starttls").ca_file
    secret = tmp_path / "password"
    secret.write_text("one\n")
    base = SmtpSettings(host="smtp.example.com", username="gpu-kpi", password_file=str(secret))
    env = {"OTHER": "x"}
    fp = config_fingerprint(base, env)
    assert len(fp) == 16 and fp == config_fingerprint(base, env)
    # what a retry or a timeout changes is no fix for a refused login or certificate
    same = [
        base.__class__(**{**base.__dict__, k: v})
        for k, v in (("timeout_s", 5.0), ("retries", 0), ("backoff_s", 1.0))
    ]
    assert {config_fingerprint(s, env) for s in same} == {fp}
    changed = [
        SmtpSettings(**{**base.__dict__, k: v})
        for k, v in (
            ("host", "smtp2.example.com"),
            ("port", 2525),
            ("security", "tls"),
            ("username", "gpu-kpi-2"),
            ("sender", "reports@example.com"),
            ("ca_file", ca),
        )
    ]
    prints = [config_fingerprint(s, env) for s in changed]
    prints.append(config_fingerprint(base, {"GPU_KPI_SMTP_PASSWORD": "from-the-env"}))
    os.utime(secret, ns=(secret.stat().st_atime_ns, secret.stat().st_mtime_ns + 10**9))
    prints.append(config_fingerprint(base, env))  # a new password written to the file
    assert len({fp, *prints}) == len(prints) + 1
    assert "one" not in fp and "from-the-env" not in "".join(prints)
