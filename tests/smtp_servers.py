"""Real SMTP servers (aiosmtpd) on 127.0.0.1 for tests of the mailer and the service.

Each server listens on a free port of its own and records what it received: the parsed message
(:class:`email.message.EmailMessage`, ``policy.default``), the envelope sender and recipients,
and whether the session was encrypted. Use the fixtures by importing them into a test module::

    from smtp_servers import *  # noqa: F403  (the fixtures; see __all__)
    from smtp_servers import SmtpServer

    def test_something(smtp_server: SmtpServer) -> None:
        SmtpMailer(smtp_server.settings(), password=None).send(msg, ["a@example.com"])
        assert smtp_server.messages[0].message["Subject"] == "…"

or start one directly with ``with running_server(security="tls") as server: …``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from reports.service.mailer import SmtpSettings

__all__ = [
    "AUTH_MECHANISMS",
    "HOST",
    "REFUSED",
    "USERS",
    "Received",
    "SmtpServer",
    "auth_server",
    "flaky_server",
    "refusing_server",
    "running_server",
    "silent_server",
    "smtp_ca",
    "smtp_server",
    "smtp_server_factory",
    "starttls_server",
    "tls_server",
    "unused_port",
]

HOST = "127.0.0.1"
USERS = {"alice": "correct horse battery staple"}
"""The accounts of :func:`auth_server`."""
AUTH_MECHANISMS = ("PLAIN", "LOGIN")


@dataclass(frozen=True)
class Received:
    """One message as the server took it."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    tls: bool
    """The session was encrypted (STARTTLS or implicit TLS) when the message came."""
    login: str | None
    """The AUTH login of the session, None without AUTH."""


@dataclass
class SmtpServer:
    """A running server: where it is, what it received, how to reach it."""

    host: str
    port: int
    security: str
    """How a client must connect: ``starttls``, ``tls`` or ``none`` (SmtpSettings.security)."""
    ca_file: str | None = None
    """PEM of the CA that signed the server's certificate (TLS servers)."""
    messages: list[Received] = field(default_factory=list)
    auths: list[tuple[str, str]] = field(default_factory=list)
    """(mechanism, login) of each successful AUTH."""
    data_replies_sent: list[str] = field(default_factory=list)
    """The scripted DATA replies given so far (``data_replies``)."""

    def settings(self, **overrides: Any) -> SmtpSettings:
        """SmtpSettings that reach this server, trusting its CA, with short timeouts and no
        backoff; ``overrides`` replace any field."""
        fields: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "security": self.security,
            "ca_file": self.ca_file,
            "timeout_s": 5.0,
            "retries": 0,
            "backoff_s": 0.0,
            "sender": "gpu-kpi@example.com",
        }
        return SmtpSettings(**{**fields, **overrides})


class _Handler:
    def __init__(
        self, server: SmtpServer, *, data_replies: Sequence[str], refuse: Mapping[str, str]
    ) -> None:
        self._server = server
        self._data_replies = list(data_replies)
        self._refuse = {a.lower(): r for a, r in refuse.items()}
        self._lock = threading.Lock()

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address.lower() in self._refuse:
            return self._refuse[address.lower()]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self._lock:
            if self._data_replies:
                reply = self._data_replies.pop(0)
                self._server.data_replies_sent.append(reply)
                return reply
        raw = envelope.original_content or envelope.content
        assert isinstance(raw, bytes)
        # the wire has CRLF line ends; parse as Python does a file, so texts compare with "\n"
        message = BytesParser(policy=policy.default).parsebytes(raw.replace(b"\r\n", b"\n"))
        assert isinstance(message, EmailMessage)
        login = (
            session.auth_data.login.decode()
            if isinstance(session.auth_data, LoginPassword)
            else None
        )
        self._server.messages.append(
            Received(
                mail_from=str(envelope.mail_from),
                rcpt_tos=list(envelope.rcpt_tos),
                message=message,
                tls=_encrypted(server),
                login=login,
            )
        )
        return "250 2.0.0 OK queued"


def _encrypted(smtp: SMTP) -> bool:
    return smtp.transport is not None and smtp.transport.get_extra_info("ssl_object") is not None


def _authenticator(
    server: SmtpServer, users: Mapping[str, str], fail_code: int
) -> Callable[..., AuthResult]:
    def authenticate(
        smtp: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        login = auth_data.login.decode()
        password = auth_data.password.decode()
        if users.get(login) == password:
            server.auths.append((mechanism, login))
            return AuthResult(success=True, auth_data=auth_data)
        # a careless server that echoes what it refused, so that tests can check the masking
        return AuthResult(
            success=False,
            handled=False,
            message=f"{fail_code} 5.7.8 credentials rejected for {login}:{password}",
        )

    return authenticate


class _FreePortController(Controller):
    """Binds port 0 and reads back the port the system chose (no race for a 'free' port)."""

    def _trigger_server(self) -> None:
        assert isinstance(self.server, asyncio.Server)
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


@contextmanager
def running_server(
    *,
    security: str = "none",
    ca: trustme.CA | None = None,
    users: Mapping[str, str] | None = None,
    mechanisms: Sequence[str] = AUTH_MECHANISMS,
    auth_fail_code: int = 535,
    data_replies: Sequence[str] = (),
    refuse: Mapping[str, str] | None = None,
) -> Iterator[SmtpServer]:
    """A server on 127.0.0.1 for the duration of the block.

    security: ``none`` (plain), ``starttls`` (offers and requires STARTTLS) or ``tls`` (implicit
    TLS); the certificate, for 127.0.0.1 and localhost, is signed by ``ca`` (a fresh trustme CA
    when None) whose PEM is ``server.ca_file``. users: login → password; when given the server
    offers AUTH ``mechanisms`` (over plain text too) and answers a wrong password with
    ``auth_fail_code`` and a reply that echoes the password. data_replies: replies to the first
    DATA commands, in order (``["451 4.3.0 try again later"] * 2``: two temporary failures, then
    the message is taken). refuse: address → RCPT reply (``"550 5.1.1 no such user"``).
    """
    with ExitStack() as stack:
        server = SmtpServer(host=HOST, port=0, security=security)
        kwargs: dict[str, Any] = {
            "hostname": HOST,
            "server_hostname": "smtp.test",
            "ready_timeout": 10.0,
        }
        if security != "none":
            ca = ca or trustme.CA()
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ca.issue_cert(HOST, "localhost").configure_cert(context)
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="smtp-ca-")))
            server.ca_file = str(folder / "ca.pem")
            ca.cert_pem.write_to_path(server.ca_file)
            if security == "starttls":
                kwargs.update(tls_context=context, require_starttls=True)
            elif security == "tls":
                kwargs.update(ssl_context=context)
            else:
                raise ValueError(f"security {security!r}")
        if users is not None:
            excluded = [m for m in AUTH_MECHANISMS if m not in mechanisms]
            kwargs.update(
                authenticator=_authenticator(server, users, auth_fail_code),
                auth_require_tls=False,
                auth_exclude_mechanism=excluded,
            )
        handler = _Handler(server, data_replies=data_replies, refuse=refuse or {})
        controller = _FreePortController(handler, port=0, **kwargs)
        controller.start()
        stack.callback(controller.stop)
        server.port = controller.port
        yield server


def unused_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connecting is refused)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (the client times out)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        s.listen(8)
        yield int(s.getsockname()[1])


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def smtp_ca() -> trustme.CA:
    """A self-signed CA for the TLS servers (one per session: making keys takes time)."""
    return trustme.CA()


@pytest.fixture
def smtp_server_factory(smtp_ca: trustme.CA) -> Iterator[Callable[..., SmtpServer]]:
    """``factory(**running_server kwargs) -> SmtpServer``; each server stops after the test."""
    with ExitStack() as stack:

        def start(**kwargs: Any) -> SmtpServer:
            kwargs.setdefault("ca", smtp_ca)
            return stack.enter_context(running_server(**kwargs))

        yield start


@pytest.fixture
def smtp_server(smtp_server_factory: Callable[..., SmtpServer]) -> SmtpServer:
    """Plain SMTP, no AUTH; takes every message."""
    return smtp_server_factory()


@pytest.fixture
def starttls_server(smtp_server_factory: Callable[..., SmtpServer]) -> SmtpServer:
    """Offers and requires STARTTLS; its certificate is signed by ``server.ca_file``."""
    return smtp_server_factory(security="starttls")


@pytest.fixture
def tls_server(smtp_server_factory: Callable[..., SmtpServer]) -> SmtpServer:
    """Implicit TLS (TLS from the first byte, like port 465)."""
    return smtp_server_factory(security="tls")


@pytest.fixture
def auth_server(smtp_server_factory: Callable[..., SmtpServer]) -> SmtpServer:
    """Plain SMTP with AUTH PLAIN and LOGIN for :data:`USERS`; a wrong password gets 535."""
    return smtp_server_factory(users=USERS)


@pytest.fixture
def flaky_server(smtp_server_factory: Callable[..., SmtpServer]) -> SmtpServer:
    """Answers the first two DATA commands with 451, then takes the message."""
    return smtp_server_factory(data_replies=["451 4.3.0 try again later"] * 2)


REFUSED = {
    "nobody@example.com": "550 5.1.1 no such user",
    "busy@example.com": "450 4.2.1 mailbox busy, try later",
}


@pytest.fixture
def refusing_server(smtp_server_factory: Callable[..., SmtpServer]) -> SmtpServer:
    """Refuses the recipients of :data:`REFUSED` (one 5xx, one 4xx) on every try; takes the rest."""
    return smtp_server_factory(refuse=REFUSED)
