"""A real HTTP server on 127.0.0.1 that stands for a chat webhook (Slack, Teams, a JSON
endpoint) in tests: it records every request (path, headers, JSON body) and answers from a
script (``429`` with ``Retry-After``, a ``5xx``, a redirect), then ``200``.

    with webhook_server(answers=[(429, {"Retry-After": "1"})]) as hook:
        post(hook.url, {...})
        assert [r.status for r in hook.received] == [429, 200]
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    status: int
    """What the server answered."""


@dataclass
class Hook:
    url: str
    received: list[Received] = field(default_factory=list)
    answers: list[tuple[int, Mapping[str, str]]] = field(default_factory=list)

    @property
    def bodies(self) -> list[Any]:
        """The bodies of the posts the server took (answered 2xx)."""
        return [r.body for r in self.received if 200 <= r.status < 300]


@contextmanager
def webhook_server(
    answers: Sequence[tuple[int, Mapping[str, str]]] = (),
    path: str = "/services/T000/B000/secret-token",
) -> Iterator[Hook]:
    """A server answering ``answers`` in turn, then 200; its ``url`` ends in ``path`` (the
    secret a webhook URL carries)."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            with lock:
                status, headers = hook.answers.pop(0) if hook.answers else (200, {})
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                hook.received.append(Received(self.path, dict(self.headers), body, status))
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook = Hook(url=f"http://127.0.0.1:{server.server_address[1]}{path}", answers=list(answers))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
