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
import hmac
import logging
import mimetypes
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from reports.service.httpd import BoundedServer, LimitedHandler
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


class ArchiveServer:
    """``root`` served on ``host:port`` (0: any free port) from a daemon thread."""

    def __init__(self, root: Path, host: str, port: int, auth: Auth | None = None) -> None:
        self.root = root
        handler = _handler(root, auth)
        try:
            self._server = BoundedServer.on(host, port, handler)
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

    class Handler(LimitedHandler):
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
            for k, v in (extra or {}).items():
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
