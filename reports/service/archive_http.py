"""The archive served read-only over HTTP (``[service] http_port``), so that the link in every
email works without other infrastructure: the index, the weekly pages and the team pages, with
optional basic auth. Behind a reverse proxy (TLS, single sign-on) it listens on 127.0.0.1.

Only files inside the archive are served (a ``..``, an encoded one or a link that leads out is
a 404), never a directory listing, only GET and HEAD. The password is a secret like the SMTP
one: ``$GPU_KPI_HTTP_PASSWORD`` or ``http_password_file``, compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import logging
import mimetypes
import os
import socket
import sys
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tracker.config import ConfigError, secret_file

log = logging.getLogger("gpu_kpi")

PASSWORD_ENV = "GPU_KPI_HTTP_PASSWORD"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".csv": "text/csv; charset=utf-8",
    ".eml": "message/rfc822",
    ".png": "image/png",
}
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Auth:
    user: str
    password: str


def read_auth(
    user: str | None, password_file: str | None, env: Mapping[str, str] | None = None
) -> Auth | None:
    """Basic auth when ``http_user`` is set: its password from :data:`PASSWORD_ENV`, else the
    file; :class:`ConfigError` naming where it looked when there is none."""
    if not user:
        return None
    env = os.environ if env is None else env
    password = env.get(PASSWORD_ENV, "")
    if not password and password_file:
        password = secret_file("service.http_password_file", password_file)
    if not password:
        raise ConfigError(
            f"service.http_user is set but there is no password: set "
            f"{PASSWORD_ENV} or service.http_password_file"
        )
    return Auth(user, password)


def resolve(root: Path, target: str) -> Path | None:
    """The file ``target`` (a request path) names inside ``root``, or None: outside it (``..``,
    ``%2e%2e``, a link leading out), a directory without an ``index.html``, or no such file."""
    path = unquote(urlsplit(target).path)
    if "\x00" in path or "\\" in path:
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    base = root.resolve()
    candidate = base.joinpath(*parts)
    try:
        real = candidate.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if real != base and base not in real.parents:
        return None  # a link out of the archive
    if real.is_dir():  # its index.html, if that too is inside (not a link out)
        return resolve(root, "/" + "/".join([*parts, "index.html"]))
    return real if real.is_file() else None


MAX_CONNECTIONS = 64
"""Connections served at once; more are closed as they come (a thread and a descriptor each)."""
MAX_PER_CLIENT = 16
"""Connections one address may hold at once: ~1,000 idle ones trickling header lines used up
the process's descriptors, and the archive and ``/metrics`` stopped answering."""
HEADER_S = 10.0
"""Seconds a connection has to send its whole request line and headers."""


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that holds at most :data:`MAX_CONNECTIONS` connections, at most
    :data:`MAX_PER_CLIENT` from one address, and says a client's leaving in a debug line (a
    download cut off is no error of ours, never a traceback)."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        who = str(client_address[0])
        with self._lock:
            if self._held.total() >= MAX_CONNECTIONS or self._held[who] >= MAX_PER_CLIENT:
                log.debug("gpu-kpi archive http: too many connections, %s refused", who)
                return False  # closed at once, before a thread or a byte is spent on it
            self._held[who] += 1
        return True

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._held[str(client_address[0])] -= 1
                self._held += Counter()  # drops the addresses at 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        log.debug(
            "gpu-kpi archive http: %s from %s: %s",
            type(error).__name__,
            client_address[0],
            error,
        )


class ArchiveServer:
    """``root`` served on ``host:port`` (0: any free port) from a daemon thread."""

    def __init__(self, root: Path, host: str, port: int, auth: Auth | None = None) -> None:
        self.root = root
        handler = _handler(root, auth)
        try:
            self._server = _Server((host, port), handler)
        except OSError as e:
            raise ConfigError(
                f"service.http_port: cannot serve the archive on {host}:{port}: {e.strerror or e}"
            ) from None
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}/"
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="gpu-kpi-archive-http"
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(root: Path, auth: Auth | None) -> type[BaseHTTPRequestHandler]:
    expected = (
        None if auth is None else base64.b64encode(f"{auth.user}:{auth.password}".encode()).decode()
    )

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpu-kpi"
        sys_version = ""
        timeout = 30  # a connection that sends nothing does not hold a thread for ever
        _sent: set[str]
        _slow: threading.Timer
        raw_requestline: bytes  # set by handle_one_request before parse_request

        def setup(self) -> None:
            super().setup()
            self._sent = set()
            # the request line and headers within HEADER_S, however slowly they trickle in
            self._slow = threading.Timer(HEADER_S, self._too_slow)
            self._slow.daemon = True
            self._slow.start()

        def _too_slow(self) -> None:
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def finish(self) -> None:
            self._slow.cancel()
            with contextlib.suppress(OSError):  # a client gone mid-answer
                super().finish()

        def parse_request(self) -> bool:
            if len(self.raw_requestline.split()) == 2:  # HTTP/0.9: a body with no headers
                self._slow.cancel()
                self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
                self.command, self.request_version = "", "HTTP/1.0"
                self.close_connection = True
                self.send_error(400, "HTTP/0.9 is not served")
                return False
            ok = super().parse_request()
            self._slow.cancel()
            return ok

        def send_header(self, keyword: str, value: str) -> None:
            self._sent.add(keyword.lower())
            super().send_header(keyword, value)

        def end_headers(self) -> None:
            for k, v in _HEADERS.items():  # every answer: errors and 501s too
                if k.lower() not in self._sent:
                    self.send_header(k, v)
            self._sent = set()
            super().end_headers()

        def _allowed(self, head: bool = False) -> bool:
            if expected is None:
                return True
            given = self.headers.get("Authorization", "")
            scheme, _, token = given.partition(" ")
            try:
                ok = scheme.lower() == "basic" and hmac.compare_digest(
                    base64.b64decode(token.strip(), validate=True), base64.b64decode(expected)
                )
            except (binascii.Error, ValueError):
                ok = False
            if not ok:
                self._send(
                    401,
                    b"authentication required\n",
                    "text/plain; charset=utf-8",
                    {"WWW-Authenticate": 'Basic realm="gpu-kpi", charset="UTF-8"'},
                    head=head,
                )
            return ok

        def _send(
            self,
            status: int,
            body: bytes,
            ctype: str,
            extra: Mapping[str, str] | None = None,
            head: bool = False,
        ) -> None:
            self.send_response(status)
            for k, v in {**_HEADERS, **(extra or {})}.items():
                self.send_header(k, v)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _serve(self, head: bool) -> None:
            if not self._allowed(head):
                return
            path = resolve(root, self.path)
            if path is None:
                self._send(404, b"not found\n", "text/plain; charset=utf-8", head=head)
                return
            ctype = (
                _TYPES.get(path.suffix)
                or mimetypes.guess_type(path.name)[0]
                or "application/octet-stream"
            )
            try:
                body = path.read_bytes()
            except OSError:
                self._send(404, b"not found\n", "text/plain; charset=utf-8", head=head)
                return
            self._send(200, body, ctype, head=head)

        def do_GET(self) -> None:
            self._serve(head=False)

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def _refuse(self) -> None:
            self._send(405, b"read-only\n", "text/plain; charset=utf-8", {"Allow": "GET, HEAD"})

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("gpu-kpi archive http: " + format, *args)

    return Handler
