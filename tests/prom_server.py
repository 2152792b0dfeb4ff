"""A real Prometheus server (Debian's ``prometheus``) on 127.0.0.1 over a TSDB built from
generated DCGM-exporter samples with ``promtool tsdb create-blocks-from openmetrics``.

``make test`` installs the package where it is missing (``tests/prom-up.sh``); without it the
tests that need it skip locally and fail in CI (``CI=true``), as the PostgreSQL ones do.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["Sample", "openmetrics", "running_prometheus", "serving"]

Sample = tuple[str, dict[str, str], float, float]
"""(metric name, labels, value, epoch seconds)."""


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        message = f"{tool} is not installed (Debian's prometheus package; tests/prom-up.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def openmetrics(samples: Iterable[Sample]) -> str:
    """OpenMetrics text: each metric's samples together, each series in time order."""
    by_metric: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]] = {}
    for name, labels, value, t in samples:
        key = tuple(sorted(labels.items()))
        by_metric.setdefault(name, {}).setdefault(key, []).append((t, value))
    lines: list[str] = []
    for name, series in by_metric.items():
        lines.append(f"# TYPE {name} gauge")
        for key, points in series.items():
            shown = ",".join(f'{k}="{v}"' for k, v in key)
            lines.extend(f"{name}{{{shown}}} {v} {t:.3f}" for t, v in sorted(points))
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_prometheus(workdir: Path, samples: Iterable[Sample]) -> Iterator[str]:
    """A Prometheus serving ``samples``; its base URL."""
    source = workdir / "dcgm.om"
    source.write_text(openmetrics(samples))
    with serving(workdir, source) as url:
        yield url


@contextmanager
def serving(workdir: Path, source: Path) -> Iterator[str]:
    """A Prometheus serving the OpenMetrics file ``source`` (ending ``# EOF``); its base URL."""
    promtool, prometheus = _need("promtool"), _need("prometheus")
    data = workdir / "tsdb"
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
        timeout=3600,
    )
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\n")
    port = _free_port()
    proc = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=3650d",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "prometheus.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "prometheus did not start: " + (workdir / "prometheus.log").read_text()[-2000:]
                )
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
