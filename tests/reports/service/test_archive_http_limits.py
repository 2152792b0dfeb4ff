"""The served archive under clients that misbehave: idle connections that trickle their
headers, too many from one address, a download cut off, methods and HTTP versions it does not
serve. Real sockets against the real server."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import reports.service.httpd as httpd
from reports.service.archive_http import ArchiveServer


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ArchiveServer]:
    (tmp_path / "index.html").write_text("<h1>GPU efficiency</h1>")
    (tmp_path / "big.csv").write_bytes(b"x" * (32 << 20))
    server = ArchiveServer(tmp_path, "127.0.0.1", 0)
    yield server
    server.close()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.settimeout(10)
    return s


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (waiting up to its timeout for it to)."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def answer(port: int, request: bytes) -> bytes:
    with connect(port) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_idle_connections_are_capped_per_client_and_closed_after_the_header_time(
    served: ArchiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """~1,000 connections trickling header lines used up the process's descriptors. Now one
    address holds at most MAX_PER_CLIENT (a further one is closed at once), and a connection
    whose headers are not in after HEADER_S is closed; then the archive answers again."""
    monkeypatch.setattr(httpd, "MAX_PER_CLIENT", 4)
    monkeypatch.setattr(httpd, "HEADER_S", 1.0)
    idle = [connect(served.port) for _ in range(4)]
    for s in idle:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    extra = connect(served.port)  # accepted after them: connections are accepted in order
    assert closed_by_server(extra)  # refused: the address holds 4
    assert all(closed_by_server(s) for s in idle)  # each closed once its header time ran out
    for s in [*idle, extra]:
        s.close()
    for _ in range(100):  # once the server's threads for them have ended too
        if got := answer(served.port, b"GET / HTTP/1.0\r\n\r\n"):
            break
        time.sleep(0.1)
    assert got.startswith(b"HTTP/1.0 200 ") and got.endswith(b"<h1>GPU efficiency</h1>")


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        (b"BREW / HTTP/1.0\r\n\r\n", b"HTTP/1.0 501 "),  # an unknown method
        (b"GET /\r\n", b"HTTP/1.0 400 "),  # HTTP/0.9: the body with no headers at all before
        (b"GET /nothing HTTP/1.0\r\n\r\n", b"HTTP/1.0 404 "),
    ],
)
def test_every_answer_has_a_status_line_and_the_security_headers(
    served: ArchiveServer, request_line: bytes, status: bytes
) -> None:
    got = answer(served.port, request_line)
    assert got.startswith(status), got[:80]
    head = got.split(b"\r\n\r\n", 1)[0].decode()
    for header in ("X-Content-Type-Options: nosniff", "X-Frame-Options: DENY"):
        assert header in head


def test_a_download_cut_off_is_a_debug_line_not_a_traceback(
    served: ArchiveServer, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.DEBUG, logger="gpu_kpi"):
        with connect(served.port) as s:
            # closed with a reset, as a browser tab closed mid-download
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.sendall(b"GET /big.csv HTTP/1.0\r\n\r\n")
            assert s.recv(1000)
        for _ in range(100):  # until the server has met the closed connection
            if any("from 127.0.0.1" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.1)
    said = [r for r in caplog.records if "from 127.0.0.1" in r.getMessage()]
    assert said and all(r.levelno == logging.DEBUG for r in said)
    assert "Traceback" not in capfd.readouterr().err


def test_metrics_answer_while_the_archive_is_flooded(
    served: ArchiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/metrics has the same bounds as the archive (prometheus_client's server had none): with
    every connection one address may hold taken on the archive, /metrics still answers."""
    from reports.service.prom import KpiExporter

    monkeypatch.setattr(httpd, "MAX_PER_CLIENT", 4)
    idle = [connect(served.port) for _ in range(4)]
    try:
        assert closed_by_server(connect(served.port))  # the archive: full for this address
        with KpiExporter().serve("127.0.0.1", 0) as metrics:
            got = answer(metrics.port, b"GET /metrics HTTP/1.0\r\n\r\n")
        assert got.startswith(b"HTTP/1.0 200 ") and b"gpu_kpi_reports_built_total" in got
        assert b"X-Content-Type-Options: nosniff" in got
    finally:
        for s in idle:
            s.close()
