"""What the service's two HTTP servers share (the served archive, ``/metrics``): a threading
server that clients which misbehave cannot take down, and a request handler whose every answer
carries the security headers.

~1,000 connections that each trickled a header line used up the process's descriptors: the
archive and ``/metrics`` stopped answering and the accept loop spun. Now a server holds at most
:data:`MAX_CONNECTIONS` connections, :data:`MAX_PER_CLIENT` from one address (more are closed as
they come), and a connection whose request line and headers are not in after :data:`HEADER_S`
is closed, however slowly they trickle. A client that leaves mid-answer is a debug line, never
a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("gpu_kpi")

MAX_CONNECTIONS = 64
"""Connections served at once; more are closed as they come (a thread and a descriptor each)."""
MAX_PER_CLIENT = 16
"""Connections one address may hold at once."""
HEADER_S = 10.0
"""Seconds a connection has to send its whole request line and headers."""
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
"""On every answer, errors, 501s and 400s too."""


class BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server that holds at most :data:`MAX_CONNECTIONS` connections, at most
    :data:`MAX_PER_CLIENT` from one address, and says a client's leaving in a debug line."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    @classmethod
    def on(cls, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> BoundedServer:
        """A server bound to ``host:port`` (an IPv6 host too; port 0: any free port).

        Raises:
            OSError: The address cannot be bound.
        """
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type(cls.__name__, (cls,), {"address_family": family})
        return server_class((host, port), handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        who = str(client_address[0])
        with self._lock:
            if self._held.total() >= MAX_CONNECTIONS or self._held[who] >= MAX_PER_CLIENT:
                log.debug("gpu-kpi http: too many connections, %s refused", who)
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
        log.debug("gpu-kpi http: %s from %s: %s", type(error).__name__, client_address[0], error)


class LimitedHandler(BaseHTTPRequestHandler):
    """A request handler with :data:`HEADER_S` for the request, the security headers on every
    answer, and HTTP/0.9 (a body with no status line nor headers) refused with a 400."""

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
        for k, v in SECURITY_HEADERS.items():
            if k.lower() not in self._sent:
                self.send_header(k, v)
        self._sent = set()
        super().end_headers()
