"""A failure of the SMTP settings (authentication refused, a certificate not trusted) is no
verdict on the recipients: it is tried again once the settings change, or when
``serve --retry-failed`` asks; a recipient the server refuses (550) stays failed. Real servers on
127.0.0.1, a real store."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import USERS, SmtpServer
from test_job import CTO, MONDAY_8, W48, W49, add_week, settings

from reports.service.config import Recipient
from reports.service.deliveries import DeliveryLog
from reports.service.job import Service
from tracker.store import RunStore

pytestmark = pytest.mark.service  # real SMTP servers, schedulers, subprocesses: `make test`

NOBODY = Recipient(to="nobody@example.com")
RUN = W49 + MONDAY_8


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/runs.db"
    add_week(url, W48)
    return url


def log_of(store: str) -> dict[str, tuple[str, int, bool]]:
    """recipient → (status, attempts, whether the failure is marked the settings' fault)."""
    with RunStore(store) as st:
        return {
            e.recipient: (e.status, e.attempts, e.smtp_config is not None)
            for e in DeliveryLog(st).entries()
        }


def test_a_refused_login_is_sent_once_the_password_file_is_fixed(
    tmp_path: Path, store: str, smtp_server_factory: Callable[..., SmtpServer]
) -> None:
    server = smtp_server_factory(users=USERS, refuse={NOBODY.to: "550 5.1.1 no such user"})
    secret = tmp_path / "smtp-password"
    secret.write_text("not alice's\n")
    smtp = server.settings(username="alice", password_file=str(secret))
    s = replace(settings(tmp_path, store, server, CTO, NOBODY), smtp=smtp)
    first = Service(s).run(now=RUN)
    assert [(o.recipient, o.status) for o in first.outcomes] == [
        (CTO.to, "failed"),
        (NOBODY.to, "failed"),
    ]
    assert all("authentication failed: 535" in (o.error or "") for o in first.outcomes)
    assert log_of(store) == {CTO.to: ("failed", 1, True), NOBODY.to: ("failed", 1, True)}
    # the same settings: a run an hour later tries neither again
    assert Service(s).run(now=RUN + timedelta(hours=1)).outcomes == ()
    assert log_of(store) == {CTO.to: ("failed", 1, True), NOBODY.to: ("failed", 1, True)}

    secret.write_text(USERS["alice"] + "\n")  # the fix: a new password in the file
    fixed = Service(s).run(now=RUN + timedelta(hours=2))
    assert [(o.recipient, o.status) for o in fixed.outcomes] == [
        (CTO.to, "sent"),
        (NOBODY.to, "failed"),
    ]
    assert "550" in (fixed.outcomes[1].error or "")
    assert [m.rcpt_tos for m in server.messages] == [[CTO.to]]
    # nobody is refused for being nobody: failed for good, whatever the settings do next
    assert log_of(store) == {CTO.to: ("sent", 2, False), NOBODY.to: ("failed", 2, False)}
    os.utime(secret, ns=(secret.stat().st_atime_ns, secret.stat().st_mtime_ns + 10**9))
    assert Service(s).run(now=RUN + timedelta(hours=3)).outcomes == ()


def test_an_untrusted_certificate_is_sent_once_the_ca_is_configured(
    tmp_path: Path, store: str, starttls_server: SmtpServer
) -> None:
    blind = replace(
        settings(tmp_path, store, starttls_server, CTO), smtp=starttls_server.settings(ca_file=None)
    )
    first = Service(blind).run(now=RUN)
    assert [o.status for o in first.outcomes] == ["failed"]
    assert "certificate not trusted" in (first.outcomes[0].error or "")
    assert Service(blind).run(now=RUN + timedelta(hours=1)).outcomes == ()
    trusting = settings(tmp_path, store, starttls_server, CTO)  # smtp.ca_file set
    assert [o.status for o in Service(trusting).run(now=RUN + timedelta(hours=2)).outcomes] == [
        "sent"
    ]
    assert [m.rcpt_tos for m in starttls_server.messages] == [[CTO.to]]
    assert log_of(store) == {CTO.to: ("sent", 2, False)}


def test_retry_failed_sends_what_failed_under_unchanged_settings(
    tmp_path: Path, store: str, auth_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The password comes from the environment; fixing its value leaves the fingerprint as it
    was (the delivery log never holds a trace of the password), so it takes retry_failed."""
    monkeypatch.setenv("GPU_KPI_SMTP_PASSWORD", "wrong")
    s = replace(
        settings(tmp_path, store, auth_server, CTO), smtp=auth_server.settings(username="alice")
    )
    assert [o.status for o in Service(s).run(now=RUN).outcomes] == ["failed"]
    monkeypatch.setenv("GPU_KPI_SMTP_PASSWORD", USERS["alice"])
    assert Service(s).run(now=RUN + timedelta(hours=1)).outcomes == ()
    retried = Service(s).run(now=RUN + timedelta(hours=2), retry_failed=True)
    assert [(o.week, o.status) for o in retried.outcomes] == [("2026-W48", "sent")]
    assert [m.login for m in auth_server.messages] == ["alice"]
    assert Service(s).run(now=RUN + timedelta(hours=3), retry_failed=True).outcomes == ()
