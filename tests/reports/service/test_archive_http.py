"""The archive over HTTP (``[service] http_port``): a real server on 127.0.0.1 over a real
archive; the index and the weekly pages served, nothing outside the archive (``..``, encoded,
through a link), no listing, read-only, basic auth; and the pages opened in headless Chromium
from that server."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import SmtpServer, unused_port
from test_job import MONDAY_8, W49, settings, three_weeks

from reports.service.archive_http import ArchiveServer, Auth, read_auth, resolve
from reports.service.job import Service
from tracker.config import ConfigError

pytestmark = pytest.mark.service


@pytest.fixture
def archive(tmp_path: Path, smtp_server: SmtpServer) -> Path:
    s = replace(settings(tmp_path, three_weeks(tmp_path), smtp_server), recipients=())
    Service(s).run(now=W49 + MONDAY_8)
    out = tmp_path / "archive"
    (tmp_path / "secret.txt").write_text("not for the web")
    os.symlink(tmp_path / "secret.txt", out / "leak.html")  # a link out of the archive
    os.symlink(tmp_path, out / "up")
    return out


def get(
    url: str, *, auth: tuple[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method)
    if auth is not None:
        req.add_header(
            "Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def raw_get(port: int, target: str) -> int:
    """A request line sent as written (urllib would normalize ``..`` away)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", target, skip_host=False, skip_accept_encoding=True)
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


def test_the_archive_is_served_and_nothing_else(archive: Path) -> None:
    server = ArchiveServer(archive, "127.0.0.1", 0)
    try:
        status, headers, body = get(server.url)
        assert (
            status == 200
            and b"2026-W48" in body
            and headers["Content-Type"].startswith("text/html")
        )
        assert headers["X-Content-Type-Options"] == "nosniff"
        status, _, body = get(server.url + "2026-W48.html")
        assert status == 200 and b"GPU efficiency" in body
        assert get(server.url + "2026-W48.json")[1]["Content-Type"] == "application/json"
        for target in (
            "/../secret.txt",
            "/%2e%2e/secret.txt",
            "/..%2fsecret.txt",
            "/leak.html",
            "/up/secret.txt",
            "/teams/",
            "/nothing.html",
            "/%00",
            "/..\\secret.txt",
            "//etc/passwd",
        ):
            assert raw_get(server.port, target) == 404, target
        assert get(server.url + "2026-W48.html", method="POST")[0] == 405
        assert get(server.url + "2026-W48.html", method="DELETE")[0] == 405
        assert (archive / "2026-W48.html").exists()
    finally:
        server.close()


def test_basic_auth(archive: Path) -> None:
    server = ArchiveServer(archive, "127.0.0.1", 0, Auth("reports", "s3cret-Pw"))
    try:
        status, headers, _ = get(server.url)
        assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="gpu-kpi"')
        assert get(server.url, auth=("reports", "wrong"))[0] == 401
        assert get(server.url, auth=("other", "s3cret-Pw"))[0] == 401
        assert get(server.url, auth=("reports", "s3cret-Pw"))[0] == 200
        status, _, body = get(server.url, method="HEAD")
        assert status == 401 and body == b""
        # a 404 is not said to who has no password: it is a 401 first
        assert raw_get(server.port, "/../secret.txt") == 401
    finally:
        server.close()


def test_the_password_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert read_auth(None, None, {}) is None
    assert read_auth("reports", None, {"GPU_KPI_HTTP_PASSWORD": "pw"}) == Auth("reports", "pw")
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    assert read_auth("reports", str(secret), {}) == Auth("reports", "from-file")
    with pytest.raises(ConfigError, match=r"^service\.http_user is set but there is no password"):
        read_auth("reports", None, {})
    with pytest.raises(ConfigError, match=r"^service\.http_password_file: cannot read "):
        read_auth("reports", str(tmp_path / "missing"), {})
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # would wait for a writer forever
    with pytest.raises(ConfigError, match="is not a regular file"):
        read_auth("reports", str(pipe), {})


def test_resolve_stays_inside(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text("x")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "index.html").write_text("secret")
    root = tmp_path / "root"
    (root / "teams" / "nlp").mkdir(parents=True)
    os.symlink(tmp_path / "outside" / "index.html", root / "teams" / "nlp" / "index.html")
    assert resolve(root, "/teams/nlp/") is None  # its index.html is a link out
    assert resolve(root, "/.") is None
    assert resolve(tmp_path, "/a.html?x=1#y") == (tmp_path / "a.html").resolve()
    assert resolve(tmp_path, "/") is None  # no index.html: no listing either
    assert resolve(tmp_path, "/../a.html") is None


@pytest.mark.chromium
def test_served_by_serve_and_opened_in_chromium(
    tmp_path: Path, archive: Path, smtp_server: SmtpServer
) -> None:
    from test_scheduler import Results, serving

    exe = shutil.which("chromium")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is missing in CI: apt-get install -y chromium")
        pytest.skip("Chromium not installed (apt-get install -y chromium)")
    port = unused_port()
    s = replace(
        settings(tmp_path, f"sqlite:///{tmp_path}/runs.db", smtp_server),
        recipients=(),
        out_dir=str(archive),
        http_port=port,
        http_user="reports",
    )
    os.environ["GPU_KPI_HTTP_PASSWORD"] = "s3cret-Pw"
    try:
        with serving(s, Results()):
            url = f"http://127.0.0.1:{port}/"
            deadline = time.monotonic() + 30
            while True:
                try:
                    assert get(url)[0] == 401  # the password is asked for
                    break
                except urllib.error.URLError:  # not listening yet
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            authed = f"http://reports:s3cret-Pw@127.0.0.1:{port}/2026-W48.html"
            dom = subprocess.run(
                [
                    exe,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    f"--user-data-dir={tmp_path / 'profile'}",
                    "--dump-dom",
                    authed,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env={**os.environ, "HOME": str(tmp_path)},
            ).stdout
    finally:
        del os.environ["GPU_KPI_HTTP_PASSWORD"]
    assert 'id="headline"' in dom and "2026-W48" in dom
