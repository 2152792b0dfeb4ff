"""Sending mail over SMTP: the one module that imports :mod:`smtplib`.

The service and ``gpu-kpi send`` hand an :class:`~email.message.EmailMessage` and its recipients
to a :class:`Mailer`; :class:`SmtpMailer` delivers it over STARTTLS (port 587), implicit TLS
(465) or plain SMTP (25), with AUTH when a username is set. Every failure becomes one
:class:`MailError` that says whether it is worth trying later; temporary failures (4xx replies,
connection refused, timeouts, a dropped connection) are first retried here with exponential
backoff, within an optional total time limit; a failure of the SMTP settings themselves
(authentication, TLS, no STARTTLS, the sender refused) is marked as such (``MailError.config``).
The password comes from the environment or a file (:func:`read_password`), never from the
command line, and never appears in an error or a log line: a server reply that echoes it is
shown with ``***`` in its place.

```toml
[smtp]
host = "smtp.example.com"
security = "starttls"          # starttls | tls | none
username = "gpu-kpi"           # password: $GPU_KPI_SMTP_PASSWORD or password_file
sender = "gpu-kpi@example.com"
```
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import smtplib
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Protocol

from tracker.config import ConfigError, read_capped, secret_file
from tracker.text import one_line

CA_MAX_BYTES = 16 << 20
"""The largest ``smtp.ca_file`` read: a whole system bundle is ~200 KB."""

log = logging.getLogger("gpu_kpi")

SECURITY_MODES = ("starttls", "tls", "none")
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}
MAX_REASON_CHARS = 300
"""A server reply is cut to this many characters in an error or a log line."""


@dataclass(frozen=True, kw_only=True)
class SmtpSettings:
    """Where and how to send mail; the ``[smtp]`` table of the service's config."""

    host: str = "localhost"
    port: int | None = None
    """None: the usual port of ``security`` (:data:`DEFAULT_PORTS`)."""
    security: str = "starttls"
    """``starttls`` (upgrade a plain connection, required), ``tls`` (TLS from the first byte) or
    ``none`` (plain text: a relay on localhost or a trusted network only)."""
    username: str | None = None
    """None: no AUTH."""
    password_env: str = "GPU_KPI_SMTP_PASSWORD"
    """Name of the environment variable that holds the password."""
    password_file: str | None = None
    """A file that holds the password (a trailing newline is stripped)."""
    sender: str = "gpu-kpi@localhost"
    """The envelope sender (MAIL FROM)."""
    timeout_s: float = 30.0
    """Socket timeout of each connect, read and write."""
    retries: int = 3
    """Extra attempts after a temporary failure."""
    backoff_s: float = 30.0
    """Wait before retry ``i`` (from 0) is ``backoff_s * 2**i``."""
    ca_file: str | None = None
    """A PEM bundle of CAs to trust besides the system's (a self-signed or internal CA)."""

    def __post_init__(self) -> None:
        if self.security not in SECURITY_MODES:
            raise ConfigError(
                f"smtp.security: {self.security!r} is not one of {', '.join(SECURITY_MODES)}"
            )
        if not self.host:
            raise ConfigError("smtp.host: empty")
        if self.port is not None and not 0 < self.port < 65536:
            raise ConfigError(f"smtp.port: {self.port} is not a TCP port (1-65535)")
        if not self.timeout_s > 0:
            raise ConfigError(f"smtp.timeout_s: {self.timeout_s} must be above 0")
        if self.retries < 0:
            raise ConfigError(f"smtp.retries: {self.retries} must be 0 or more")
        if self.backoff_s < 0:
            raise ConfigError(f"smtp.backoff_s: {self.backoff_s} must be 0 or more")

    @property
    def effective_port(self) -> int:
        return DEFAULT_PORTS[self.security] if self.port is None else self.port


class MailError(Exception):
    """A message could not be delivered. ``str()`` is one line that names the server and never
    holds the password.

    ``temporary``: every failure was of the kind worth trying again later (a 4xx reply,
    connection refused, a timeout, a dropped connection). ``config``: a permanent failure of the
    SMTP settings, the same for every recipient (authentication refused, TLS or the certificate
    failed, STARTTLS or AUTH not offered, the sender refused): worth trying again once they
    change. ``recipients``: the addresses the message did not reach: all of them, unless the
    server refused only some.
    """

    def __init__(
        self, message: str, *, temporary: bool, recipients: Sequence[str] = (), config: bool = False
    ) -> None:
        super().__init__(message)
        self.temporary = temporary
        self.config = config and not temporary
        self.recipients = tuple(recipients)


def read_password(settings: SmtpSettings, env: Mapping[str, str] | None = None) -> str | None:
    """The SMTP password: the environment variable named by ``settings.password_env`` when it is
    set and not empty, else the content of ``settings.password_file`` less its trailing newline,
    else None. A username with no password from either is a :class:`ConfigError`."""
    environ = os.environ if env is None else env
    value = environ.get(settings.password_env)
    if value:
        return value
    if settings.password_file:
        password = secret_file("smtp.password_file", settings.password_file)
        if password:
            return password
    if settings.username:
        raise ConfigError(_no_password(settings))
    return None


def config_fingerprint(settings: SmtpSettings, env: Mapping[str, str] | None = None) -> str:
    """16 hex digits that change when a setting an authentication or TLS failure can lie in
    changes: host, port, security, username, sender, ``ca_file`` and its content, and where the
    password comes from (the variable's name; or the file's path and modification time, so a
    new password written there counts). Never the password nor a hash of it: the delivery log
    that keeps this is writable by every tracker. A new password in the same variable leaves it
    as it was (``serve --retry-failed`` then)."""
    environ = os.environ if env is None else env
    if environ.get(settings.password_env):
        source = f"env:{settings.password_env}"
    elif settings.password_file:
        path = Path(settings.password_file).expanduser()
        try:
            source = f"file:{path}:{path.stat().st_mtime_ns}"
        except OSError:
            source = f"file:{path}:unreadable"
    else:
        source = "none"
    ca = ""
    if settings.ca_file:
        try:
            ca = hashlib.sha256(
                read_capped("smtp.ca_file", settings.ca_file, CA_MAX_BYTES)
            ).hexdigest()
        except ConfigError:
            ca = "unreadable"
    parts = [
        settings.host,
        settings.effective_port,
        settings.security,
        settings.username,
        settings.sender,
        settings.ca_file,
        ca,
        source,
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _no_password(settings: SmtpSettings) -> str:
    return (
        f"smtp.username is {settings.username!r} but there is no password: set the environment "
        f"variable {settings.password_env} (smtp.password_env) or smtp.password_file"
    )


class Mailer(Protocol):
    """Delivers one message to its recipients, or raises :class:`MailError`."""

    def send(self, msg: EmailMessage, recipients: Sequence[str]) -> None: ...


Refusals = dict[str, tuple[int, str]]
"""Refused recipients: address → (reply code, reply text)."""


class SmtpMailer:
    """A :class:`Mailer` over SMTP. One connection per attempt.

    ``total_s``: a bound on one :meth:`send`, retries and waits included: no retry starts whose
    wait would end past it, and each connection's timeout is cut to the time left. ``stop``:
    once set, no retry starts (a message in flight is finished). ``sleep`` waits between
    attempts (default: ``stop.wait``, else ``time.sleep``) and ``clock`` reads the time (both
    injected so that tests do not wait)."""

    def __init__(
        self,
        settings: SmtpSettings,
        *,
        password: str | None,
        sleep: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
        total_s: float | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        if settings.username and not password:
            raise ConfigError(_no_password(settings))
        if total_s is not None and not total_s > 0:
            raise ValueError(f"total time limit {total_s}s: must be above 0")
        self._settings = settings
        self._password = password
        self._sleep = sleep if sleep is not None else stop.wait if stop else time.sleep
        self._clock = clock
        self._total_s = total_s
        self._stop = stop
        self._timeout = settings.timeout_s  # of the attempt under way (cut by total_s)
        self._where = f"{settings.host}:{settings.effective_port}"
        self._tls = None if settings.security == "none" else tls_context(settings.ca_file)

    def __repr__(self) -> str:
        s = self._settings
        return f"SmtpMailer({s.security} {self._where}, user={s.username!r})"

    def send(self, msg: EmailMessage, recipients: Sequence[str]) -> None:
        """Deliver ``msg`` from ``settings.sender`` to ``recipients`` (the envelope: Bcc
        recipients are in it, the headers are not read for it).

        A permanent failure raises at once; a temporary one is tried again ``retries`` times,
        waiting ``backoff_s * 2**i`` before retry ``i``. Recipients the server accepted are not
        sent to again; only those it refused with a 4xx reply are retried.
        """
        pending = list(dict.fromkeys(recipients))
        if not pending:
            raise ValueError("no recipients")
        refused_for_good: Refusals = {}
        allowed = self._settings.retries + 1
        start = self._clock()
        reason = ""
        attempts = 0
        while attempts < allowed:
            if attempts:
                delay = self._settings.backoff_s * 2 ** (attempts - 1)
                if self._stopping():
                    reason += "; not retried: stopping"
                    break
                if self._total_s is not None and self._elapsed(start) + delay >= self._total_s:
                    break
                log.warning(
                    "smtp %s: attempt %d of %d failed: %s; retrying in %gs",
                    self._where,
                    attempts,
                    allowed,
                    reason,
                    delay,
                )
                self._sleep(delay)
                if self._stopping():
                    reason += "; not retried: stopping"
                    break
            attempts += 1
            try:
                refused = self._send_once(msg, pending, self._timeout_s(start))
            except (smtplib.SMTPException, OSError) as e:
                explained, temporary, config = self._explain(e)
                reason = self._clean(explained)
                if not temporary:
                    raise self._error(
                        reason,
                        temporary=False,
                        config=config,
                        undelivered=[*pending, *refused_for_good],
                        order=recipients,
                        attempts=attempts,
                        start=start,
                    ) from None
                continue
            refused_for_good.update({a: r for a, r in refused.items() if not _is_temporary(r[0])})
            pending = [a for a in pending if a in refused and _is_temporary(refused[a][0])]
            if not pending:
                break
            reason = self._clean(self._refusal_reason({a: refused[a] for a in pending}))
        if pending:
            if refused_for_good:
                reason = f"{self._refusal_reason(refused_for_good)}; {reason}"
            raise self._error(
                reason,
                temporary=not refused_for_good,
                undelivered=[*pending, *refused_for_good],
                order=recipients,
                attempts=attempts,
                start=start,
            )
        if refused_for_good:
            raise self._error(
                self._refusal_reason(refused_for_good),
                temporary=False,
                undelivered=list(refused_for_good),
                order=recipients,
            )

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    def _elapsed(self, start: float) -> float:
        return max(0.0, self._clock() - start)

    def _timeout_s(self, start: float) -> float:
        """Each socket operation's timeout: the setting, cut to the time left of ``total_s``."""
        if self._total_s is None:
            return self._settings.timeout_s
        return max(0.1, min(self._settings.timeout_s, self._total_s - self._elapsed(start)))

    def _send_once(self, msg: EmailMessage, recipients: list[str], timeout_s: float) -> Refusals:
        """One connection: deliver, and return the recipients the server refused."""
        s = self._settings
        self._timeout = timeout_s
        smtp = self._connect(timeout_s)
        try:
            if s.username:
                assert self._password is not None
                smtp.login(s.username, self._password)
            try:
                refused = smtp.send_message(msg, from_addr=s.sender, to_addrs=recipients)
            except smtplib.SMTPRecipientsRefused as e:
                refused = e.recipients
            try:
                smtp.quit()
            except (smtplib.SMTPException, OSError):
                pass  # the server took the message; a failed goodbye changes nothing
        finally:
            smtp.close()
        return {addr: (code, _text(reply)) for addr, (code, reply) in refused.items()}

    def _connect(self, timeout_s: float) -> smtplib.SMTP:
        s = self._settings
        # the constructor connects: smtplib (3.11) checks the certificate against the host
        # given to it, not the one given to connect()
        smtp: smtplib.SMTP
        if s.security == "tls":
            smtp = smtplib.SMTP_SSL(s.host, s.effective_port, timeout=timeout_s, context=self._tls)
        else:
            smtp = smtplib.SMTP(s.host, s.effective_port, timeout=timeout_s)
        smtp.set_debuglevel(0)
        try:
            smtp.ehlo_or_helo_if_needed()
            if s.security == "starttls":
                if not smtp.has_extn("starttls"):
                    raise smtplib.SMTPNotSupportedError(
                        'server does not offer STARTTLS, which smtp.security = "starttls" requires'
                    )
                smtp.starttls(context=self._tls)
                smtp.ehlo()
        except BaseException:
            smtp.close()
            raise
        return smtp

    def _explain(self, e: OSError) -> tuple[str, bool, bool]:
        """(what went wrong, whether it is temporary, whether the SMTP settings are at fault)
        for an error of one attempt."""
        match e:
            case smtplib.SMTPAuthenticationError():
                return (
                    f"authentication failed: {e.smtp_code} {_text(e.smtp_error)}",
                    _is_temporary(e.smtp_code),
                    True,
                )
            case smtplib.SMTPSenderRefused():
                return (
                    f"sender {e.sender} refused: {e.smtp_code} {_text(e.smtp_error)}",
                    _is_temporary(e.smtp_code),
                    True,
                )
            case smtplib.SMTPResponseException():
                return f"{e.smtp_code} {_text(e.smtp_error)}", _is_temporary(e.smtp_code), False
            case smtplib.SMTPServerDisconnected() if isinstance(e.__context__, TimeoutError):
                return f"timed out after {self._timeout:.3g}s", True, False
            case smtplib.SMTPServerDisconnected():
                return f"server disconnected ({e or 'no reason given'})", True, False
            case smtplib.SMTPException():  # no STARTTLS or AUTH, no usable AUTH mechanism
                return str(e), False, True
            case ssl.SSLCertVerificationError():
                return (
                    f"certificate not trusted: {e.verify_message} "
                    "(smtp.ca_file can name the CA that signed it)",
                    False,
                    True,
                )
            case ssl.SSLError():
                return f"TLS failed: {e.reason or e}", False, True
            case ConnectionRefusedError():
                return "connection refused", True, False
            case TimeoutError():
                return f"timed out after {self._timeout:.3g}s", True, False
            case _:
                return e.strerror or str(e) or type(e).__name__, True, False

    def _refusal_reason(self, refused: Refusals) -> str:
        listed = ", ".join(f"{addr} ({code} {text})" for addr, (code, text) in refused.items())
        return f"recipients refused: {listed}"

    def _error(
        self,
        reason: str,
        *,
        temporary: bool,
        undelivered: Sequence[str],
        order: Sequence[str],
        attempts: int = 1,
        start: float | None = None,
        config: bool = False,
    ) -> MailError:
        kind = "temporary" if temporary else "permanent"
        if attempts > 1 or temporary:
            kind += f"; gave up after {attempts} attempt{'s' if attempts > 1 else ''}"
            if self._total_s is not None and start is not None:
                kind += f" in {self._elapsed(start):.1f}s; time limit {self._total_s:g}s"
        missed = set(undelivered)
        return MailError(
            f"smtp {self._where}: {self._clean(reason)} ({kind})",
            temporary=temporary,
            recipients=[a for a in dict.fromkeys(order) if a in missed],
            config=config,
        )

    def _clean(self, text: str) -> str:
        """One line, cut short, the password masked."""
        if self._password:
            text = text.replace(self._password, "***")
        return one_line(text, MAX_REASON_CHARS)


def _is_temporary(code: int) -> bool:
    return 400 <= code < 500


def _text(reply: bytes | str) -> str:
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The system's trusted CAs, plus ``ca_file``'s; hostnames checked."""
    context = ssl.create_default_context()
    if ca_file:
        path = Path(ca_file).expanduser()
        pem = read_capped("smtp.ca_file", path, CA_MAX_BYTES)
        try:
            context.load_verify_locations(cadata=pem.decode("ascii"))
        except (UnicodeDecodeError, ssl.SSLError) as e:
            reason = (e.reason if isinstance(e, ssl.SSLError) else None) or str(e)
            raise ConfigError(f"smtp.ca_file: cannot read {path}: {reason}") from None
    return context
