"""The SMTP mailer against real aiosmtpd servers on 127.0.0.1 (no mock of smtplib)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the server fixtures)
from smtp_servers import REFUSED, USERS, SmtpServer, silent_server, unused_port

from reports.service.mailer import (
    DEFAULT_PORTS,
    MailError,
    SmtpMailer,
    SmtpSettings,
    read_password,
)
from tracker.config import ConfigError

pytestmark = pytest.mark.service  # real SMTP servers, schedulers, subprocesses: `make test`

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


def report_message() -> EmailMessage:
    msg = EmailMessage()
    msg["Subject"] = "GPU KPIs 2026-W07: 61.2% utilization"
    msg["From"] = "GPU KPI <gpu-kpi@example.com>"
    msg["To"] = "team@example.com"
    msg.set_content("Utilization 61.2 %\nWaste 1 234 USD\n")
    msg.add_alternative("<p>Utilization <b>61.2 %</b></p>", subtype="html")
    html = msg.get_body(preferencelist=("html",))
    assert isinstance(html, EmailMessage)
    html.add_related(PNG, "image", "png", cid="<trend@gpu-kpi>")
    return msg


class Sleeps(list[float]):
    """An injected sleep that records how long it was asked to wait."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def text_of(msg: EmailMessage, subtype: str) -> str:
    part = msg.get_body(preferencelist=(subtype,))
    assert isinstance(part, EmailMessage)
    return str(part.get_content())


def test_message_arrives_with_its_parts_and_envelope(
    smtp_server: SmtpServer, capfd: pytest.CaptureFixture[str]
) -> None:
    SmtpMailer(smtp_server.settings(), password=None).send(
        report_message(), ["team@example.com", "boss@example.com"]
    )

    [got] = smtp_server.messages
    assert got.rcpt_tos == ["team@example.com", "boss@example.com"]
    assert got.mail_from == "gpu-kpi@example.com"
    assert not got.tls
    assert got.message["Subject"] == "GPU KPIs 2026-W07: 61.2% utilization"
    assert got.message["To"] == "team@example.com"
    assert text_of(got.message, "plain") == "Utilization 61.2 %\nWaste 1 234 USD\n"
    assert "<b>61.2 %</b>" in text_of(got.message, "html")
    [image] = [p for p in got.message.walk() if p.get_content_type() == "image/png"]
    assert image["Content-ID"] == "<trend@gpu-kpi>"
    assert image.get_content() == PNG
    assert capfd.readouterr().err == ""  # smtplib's debug output is off


def test_duplicate_recipients_get_one_copy(smtp_server: SmtpServer) -> None:
    SmtpMailer(smtp_server.settings(), password=None).send(
        report_message(), ["a@example.com", "b@example.com", "a@example.com"]
    )
    assert [m.rcpt_tos for m in smtp_server.messages] == [["a@example.com", "b@example.com"]]


def test_no_recipients_is_a_bug_not_a_mail_error(smtp_server: SmtpServer) -> None:
    with pytest.raises(ValueError, match="no recipients"):
        SmtpMailer(smtp_server.settings(), password=None).send(report_message(), [])


# -- TLS ---------------------------------------------------------------------------------------------


def test_starttls_with_the_servers_ca_trusted(starttls_server: SmtpServer) -> None:
    SmtpMailer(starttls_server.settings(), password=None).send(report_message(), ["a@example.com"])
    [got] = starttls_server.messages
    assert got.tls
    assert got.rcpt_tos == ["a@example.com"]


def test_starttls_without_the_ca_fails_for_good_on_the_certificate(
    starttls_server: SmtpServer,
) -> None:
    sleeps = Sleeps()
    mailer = SmtpMailer(
        starttls_server.settings(ca_file=None, retries=3), password=None, sleep=sleeps
    )
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["a@example.com"])
    err = caught.value
    assert not err.temporary
    assert "certificate not trusted" in str(err)
    assert str(err).startswith(f"smtp 127.0.0.1:{starttls_server.port}: ")
    assert str(err).endswith("(permanent)")
    assert err.recipients == ("a@example.com",)
    assert sleeps == []
    assert starttls_server.messages == []


def test_starttls_required_but_not_offered_is_permanent(smtp_server: SmtpServer) -> None:
    sleeps = Sleeps()
    mailer = SmtpMailer(
        smtp_server.settings(security="starttls", retries=2), password=None, sleep=sleeps
    )
    with pytest.raises(MailError, match="does not offer STARTTLS") as caught:
        mailer.send(report_message(), ["a@example.com"])
    assert not caught.value.temporary
    assert sleeps == []
    assert smtp_server.messages == []


def test_a_server_that_requires_starttls_refuses_plain_text(starttls_server: SmtpServer) -> None:
    mailer = SmtpMailer(starttls_server.settings(security="none"), password=None)
    with pytest.raises(MailError, match=r"530 .*STARTTLS") as caught:
        mailer.send(report_message(), ["a@example.com"])
    assert not caught.value.temporary
    assert starttls_server.messages == []


def test_implicit_tls(tls_server: SmtpServer) -> None:
    SmtpMailer(tls_server.settings(), password=None).send(report_message(), ["a@example.com"])
    [got] = tls_server.messages
    assert got.tls
    assert got.message["Subject"].startswith("GPU KPIs 2026-W07")


def test_implicit_tls_without_the_ca_is_permanent(tls_server: SmtpServer) -> None:
    mailer = SmtpMailer(tls_server.settings(ca_file=None, retries=2), password=None, sleep=Sleeps())
    with pytest.raises(MailError, match="certificate not trusted") as caught:
        mailer.send(report_message(), ["a@example.com"])
    assert not caught.value.temporary


def test_an_unreadable_ca_file_is_a_config_error(tmp_path: Path) -> None:
    settings = SmtpSettings(host="127.0.0.1", ca_file=str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match=r"^smtp.ca_file: cannot read .*missing\.pem"):
        SmtpMailer(settings, password=None)


# -- AUTH ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
def test_auth_with_the_right_password(
    smtp_server_factory: Callable[..., SmtpServer], mechanism: str
) -> None:
    server = smtp_server_factory(users=USERS, mechanisms=[mechanism])
    settings = server.settings(username="alice")
    SmtpMailer(settings, password=USERS["alice"]).send(report_message(), ["a@example.com"])
    assert server.auths == [(mechanism, "alice")]
    [got] = server.messages
    assert got.login == "alice"


def test_auth_over_starttls(smtp_server_factory: Callable[..., SmtpServer]) -> None:
    server = smtp_server_factory(security="starttls", users=USERS)
    SmtpMailer(server.settings(username="alice"), password=USERS["alice"]).send(
        report_message(), ["a@example.com"]
    )
    [got] = server.messages
    assert (got.tls, got.login) == (True, "alice")


def test_a_wrong_password_is_permanent_and_never_shown(
    auth_server: SmtpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gpu_kpi")
    password = "hunter2-but-wrong"
    sleeps = Sleeps()
    mailer = SmtpMailer(
        auth_server.settings(username="alice", retries=3), password=password, sleep=sleeps
    )
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["a@example.com"])
    err = caught.value
    assert not err.temporary
    assert "authentication failed: 535" in str(err)
    assert "alice:***" in str(err)  # the server echoed the password; it is masked
    assert password not in str(err)
    assert password not in repr(err.args)
    assert password not in "".join(traceback.format_exception(err))
    assert password not in caplog.text
    assert "\n" not in str(err)
    assert sleeps == []
    assert auth_server.auths == []
    assert auth_server.messages == []


def test_a_temporary_auth_failure_is_retried_and_logged_without_the_password(
    smtp_server_factory: Callable[..., SmtpServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gpu_kpi")
    server = smtp_server_factory(users=USERS, auth_fail_code=454)
    password = "s3cret-not-alice"
    sleeps = Sleeps()
    mailer = SmtpMailer(
        server.settings(username="alice", retries=1, backoff_s=7.0), password=password, sleep=sleeps
    )
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["a@example.com"])
    assert caught.value.temporary
    assert sleeps == [7.0]
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    line = record.getMessage()
    assert f"127.0.0.1:{server.port}" in line
    assert "attempt 1 of 2" in line
    assert "454" in line and "***" in line
    assert password not in caplog.text
    assert password not in str(caught.value)


def test_a_username_needs_a_password(auth_server: SmtpServer) -> None:
    with pytest.raises(ConfigError, match=r"smtp\.password_env"):
        SmtpMailer(auth_server.settings(username="alice"), password=None)


# -- retries -----------------------------------------------------------------------------------------


def test_451_twice_then_accepted_is_delivered_once_after_backing_off(
    flaky_server: SmtpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_kpi")
    sleeps = Sleeps()
    mailer = SmtpMailer(
        flaky_server.settings(retries=3, backoff_s=0.5), password=None, sleep=sleeps
    )
    mailer.send(report_message(), ["a@example.com", "b@example.com"])
    assert len(flaky_server.data_replies_sent) == 2
    [got] = flaky_server.messages
    assert got.rcpt_tos == ["a@example.com", "b@example.com"]
    assert sleeps == [0.5, 1.0]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "attempt 1 of 4 failed: 451 4.3.0 try again later; retrying in 0.5s" in lines[0]
    assert "attempt 2 of 4" in lines[1]


def test_retries_exhausted_is_temporary(smtp_server_factory: Callable[..., SmtpServer]) -> None:
    server = smtp_server_factory(data_replies=["421 4.3.2 shutting down"] * 5)
    sleeps = Sleeps()
    mailer = SmtpMailer(server.settings(retries=2, backoff_s=2.0), password=None, sleep=sleeps)
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["a@example.com"])
    assert caught.value.temporary
    assert str(caught.value) == (
        f"smtp 127.0.0.1:{server.port}: 421 4.3.2 shutting down "
        "(temporary; gave up after 3 attempts)"
    )
    assert sleeps == [2.0, 4.0]
    assert len(server.data_replies_sent) == 3
    assert server.messages == []


def test_550_is_permanent_at_once(smtp_server_factory: Callable[..., SmtpServer]) -> None:
    server = smtp_server_factory(data_replies=["550 5.7.1 message rejected as spam"])
    sleeps = Sleeps()
    mailer = SmtpMailer(server.settings(retries=3), password=None, sleep=sleeps)
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["a@example.com"])
    assert not caught.value.temporary
    assert str(caught.value) == (
        f"smtp 127.0.0.1:{server.port}: 550 5.7.1 message rejected as spam (permanent)"
    )
    assert sleeps == []
    assert server.data_replies_sent == ["550 5.7.1 message rejected as spam"]


def test_nothing_listening_is_temporary_after_retries() -> None:
    port = unused_port()
    sleeps = Sleeps()
    settings = SmtpSettings(
        host="127.0.0.1", port=port, security="none", retries=2, backoff_s=1.0, timeout_s=2.0
    )
    with pytest.raises(MailError) as caught:
        SmtpMailer(settings, password=None, sleep=sleeps).send(report_message(), ["a@example.com"])
    assert caught.value.temporary
    assert str(caught.value) == (
        f"smtp 127.0.0.1:{port}: connection refused (temporary; gave up after 3 attempts)"
    )
    assert caught.value.recipients == ("a@example.com",)
    assert sleeps == [1.0, 2.0]


def test_a_silent_server_times_out_as_temporary() -> None:
    with silent_server() as port:
        settings = SmtpSettings(
            host="127.0.0.1", port=port, security="none", retries=0, timeout_s=0.2
        )
        with pytest.raises(MailError, match=r"timed out after 0\.2s \(temporary") as caught:
            SmtpMailer(settings, password=None).send(report_message(), ["a@example.com"])
    assert caught.value.temporary


# -- refused recipients ------------------------------------------------------------------------------


def test_some_recipients_refused(refusing_server: SmtpServer) -> None:
    sleeps = Sleeps()
    mailer = SmtpMailer(
        refusing_server.settings(retries=1, backoff_s=3.0), password=None, sleep=sleeps
    )
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["ok@example.com", *REFUSED])
    err = caught.value
    # the 4xx one is tried once more (alone); the 5xx one is not
    assert sleeps == [3.0]
    assert [m.rcpt_tos for m in refusing_server.messages] == [["ok@example.com"]]
    assert err.recipients == ("nobody@example.com", "busy@example.com")
    assert not err.temporary  # one of them is refused for good
    assert str(err) == (
        f"smtp 127.0.0.1:{refusing_server.port}: recipients refused: "
        "nobody@example.com (550 5.1.1 no such user); recipients refused: "
        "busy@example.com (450 4.2.1 mailbox busy, try later) "
        "(permanent; gave up after 2 attempts)"
    )


def test_only_a_permanently_refused_recipient(refusing_server: SmtpServer) -> None:
    sleeps = Sleeps()
    mailer = SmtpMailer(refusing_server.settings(retries=3), password=None, sleep=sleeps)
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["ok@example.com", "nobody@example.com"])
    assert str(caught.value) == (
        f"smtp 127.0.0.1:{refusing_server.port}: recipients refused: "
        "nobody@example.com (550 5.1.1 no such user) (permanent)"
    )
    assert caught.value.recipients == ("nobody@example.com",)
    assert sleeps == []
    assert [m.rcpt_tos for m in refusing_server.messages] == [["ok@example.com"]]


def test_every_recipient_refused_with_4xx_is_temporary(refusing_server: SmtpServer) -> None:
    sleeps = Sleeps()
    mailer = SmtpMailer(
        refusing_server.settings(retries=2, backoff_s=1.0), password=None, sleep=sleeps
    )
    with pytest.raises(MailError) as caught:
        mailer.send(report_message(), ["busy@example.com"])
    assert caught.value.temporary
    assert caught.value.recipients == ("busy@example.com",)
    assert sleeps == [1.0, 2.0]
    assert refusing_server.messages == []


# -- settings and the password -----------------------------------------------------------------------


@pytest.mark.parametrize(("security", "port"), sorted(DEFAULT_PORTS.items()))
def test_default_ports(security: str, port: int) -> None:
    assert SmtpSettings(security=security).effective_port == port
    assert SmtpSettings(security=security, port=2525).effective_port == 2525


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"security": "ssl"}, "smtp.security"),
        ({"port": 70000}, "smtp.port"),
        ({"retries": -1}, "smtp.retries"),
        ({"timeout_s": 0}, "smtp.timeout_s"),
    ],
)
def test_bad_settings_name_their_key(change: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=f"^{key}: "):
        SmtpSettings(**change)  # type: ignore[arg-type]


def test_password_from_the_environment() -> None:
    settings = SmtpSettings(username="alice", password_env="MY_SMTP_PW")
    assert read_password(settings, {"MY_SMTP_PW": "from-env"}) == "from-env"


def test_password_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_KPI_SMTP_PASSWORD", "from-os-environ")
    assert read_password(SmtpSettings(username="alice")) == "from-os-environ"


def test_password_from_a_file_less_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("from file \n")
    settings = SmtpSettings(username="alice", password_file=str(path))
    assert read_password(settings, {}) == "from file "


def test_the_environment_wins_over_the_file_and_an_empty_variable_does_not(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("from-file\n")
    settings = SmtpSettings(username="alice", password_file=str(path))
    assert read_password(settings, {"GPU_KPI_SMTP_PASSWORD": "from-env"}) == "from-env"
    assert read_password(settings, {"GPU_KPI_SMTP_PASSWORD": ""}) == "from-file"


def test_a_missing_password_file_is_a_config_error(tmp_path: Path) -> None:
    settings = SmtpSettings(username="alice", password_file=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"^smtp.password_file: cannot read .*nope: No such file"):
        read_password(settings, {})


def test_no_password_without_a_username_is_none() -> None:
    assert read_password(SmtpSettings(), {}) is None


def test_a_username_without_any_password_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        read_password(SmtpSettings(username="alice"), {})
    assert "smtp.password_env" in str(caught.value)
    assert "smtp.password_file" in str(caught.value)
    assert "GPU_KPI_SMTP_PASSWORD" in str(caught.value)
