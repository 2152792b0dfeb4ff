"""Writing the report: all of the week's files or none of them, and an output folder that
cannot be written is a one-line error before anything is computed."""

from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from clirun import gpu_kpi
from fakes import draw_blank_charts, run_record

from reports import build as report_build
from reports import userfiles
from reports.build import build, compute
from reports.errors import ReportError
from reports.request import Request
from tracker.record import MinuteSample
from tracker.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
W47 = datetime(2026, 11, 16, tzinfo=UTC)
W48 = datetime(2026, 11, 23, tzinfo=UTC)
NOW = W48 + timedelta(days=8)
EVERY = ("html", "email", "json", "csv")


def fill(url: str) -> str:
    with RunStore(url) as s:
        s.upsert_run(run_record("w47", W47 + timedelta(days=1), 2, util=50.0, team="nlp"))
        run = run_record("w48", W48 + timedelta(days=1), 3, util=30.0, team="vision")
        s.upsert_run(run)
        s.upsert_samples(
            [
                MinuteSample(
                    run_id="w48",
                    minute=run.started_at + timedelta(minutes=i),
                    gpu="GPU-a",
                    util_pct=20.0 + i % 50,
                )
                for i in range(180)
            ]
        )
    return url


@pytest.fixture
def store(tmp_path: Path) -> str:
    return fill(f"sqlite:///{tmp_path}/runs.db")


@pytest.fixture(scope="module")
def w47_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """W47's report of the same runs, archived once for the module (each test copies it); its
    charts blank, as no test here reads them."""
    folder = tmp_path_factory.mktemp("w47")
    url = fill(f"sqlite:///{folder}/runs.db")
    with pytest.MonkeyPatch.context() as mp:
        draw_blank_charts(mp)
        build(url, Request(week="2026-W47", tz=UTC, formats=EVERY), folder / "out", now=NOW)
    return folder / "out"


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every entry of ``folder`` (hidden ones too) with its bytes and mtime."""
    return {
        p.name: (p.read_bytes() if p.is_file() else b"<dir>", p.stat().st_mtime_ns)
        for p in folder.iterdir()
    }


def archived_w47(w47_files: Path, out: Path) -> dict[str, tuple[bytes, int]]:
    """``out`` holding W47's report (files and index), as ``gpu-kpi report`` wrote it."""
    shutil.copytree(w47_files, out)
    before = snapshot(out)
    assert sorted(before) == [
        "2026-W47.csv",
        "2026-W47.eml",
        "2026-W47.html",
        "2026-W47.json",
        "index.html",
    ]
    return before


@pytest.mark.usefixtures("blank_charts")
def test_a_failing_index_changes_nothing(
    store: str, w47_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is rendered last, after every file of the week was written somewhere: when
    it fails (here: a full disk), none of W48's files appear and W47's are untouched."""
    out = tmp_path / "out"
    before = archived_w47(w47_files, out)

    def full_disk(*args: object, **kw: object) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("reports.render.index.render_index", full_disk)
    with pytest.raises(ReportError) as e:
        build(store, Request(week="2026-W48", tz=UTC, formats=EVERY), out, now=NOW)
    assert str(e.value) == f"cannot write the report to {out}: No space left on device"
    assert snapshot(out) == before  # no new file, no temporary folder, nothing rewritten


@pytest.mark.usefixtures("blank_charts")
def test_a_failing_renderer_changes_nothing(
    store: str, w47_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    before = archived_w47(w47_files, out)

    def broken(*args: object, **kw: object) -> str:
        raise RuntimeError("a bug in the HTML renderer")

    monkeypatch.setattr("reports.render.html.render_html", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        build(store, Request(week="2026-W48", tz=UTC, formats=EVERY), out, now=NOW)
    assert snapshot(out) == before


def _small_files_only() -> None:  # runs in the child, before the CLI
    limit = 40_000  # the JSON and CSV fit; the HTML, with its charts, does not
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails with EFBIG instead


@pytest.mark.slow  # a whole report, in-process and through the CLI: ~3 s of CPU
def test_a_file_too_big_for_the_disk_leaves_no_half_report(
    store: str, w47_files: Path, tmp_path: Path
) -> None:
    """A real write failure, not a patched one: the kernel refuses the HTML (RLIMIT_FSIZE),
    after the JSON and CSV are written, and the CLI says so on one line."""
    out = tmp_path / "out"
    before = archived_w47(w47_files, out)
    # an earlier report kept the weeks (the store's own files may not grow past the limit
    # either: its writes would fail first, with a warning, not the HTML)
    compute(store, Request(week="2026-W48", tz=UTC), now=datetime.now(UTC))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "reports.cli",
            "report",
            "--week",
            "2026-W48",
            "--store",
            store,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_small_files_only,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr == f"gpu-kpi: error: cannot write the report to {out}: File too large\n"
    assert snapshot(out) == before


@pytest.mark.usefixtures("blank_charts")
def test_the_week_moves_in_at_once(store: str, w47_files: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    archived_w47(w47_files, out)
    written = build(store, Request(week="2026-W48", tz=UTC, formats=EVERY), out, now=NOW)
    assert [p.name for p in written] == [
        "2026-W48.json",
        "2026-W48.csv",
        "2026-W48.html",
        "2026-W48.eml",
        "index.html",
    ]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"2026-W4{w}.{s}" for w in (7, 8) for s in ("csv", "eml", "html", "json")] + ["index.html"]
    )
    mode = 0o666 & ~userfiles._umask()  # as open() makes a file
    assert {p.stat().st_mode & 0o777 for p in written} == {mode}  # not mkstemp's 0600
    index = (out / "index.html").read_text()
    assert 'href="2026-W47.html"' in index and 'href="2026-W48.html"' in index


@pytest.mark.usefixtures("blank_charts")
def test_the_csv_is_written_while_the_page_is_drawn(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run's CSV is written in another thread while the HTML is rendered: the CSV's
    writer waits for the renderer to start and the renderer for the writer, which only
    both running at once satisfies (one after the other, each would wait its full minute and
    the test would fail); the CSV and the JSON are those of the same report built without the
    waits."""
    from reports.render import exports, html

    writing, drawing = threading.Event(), threading.Event()
    saw: dict[str, bool] = {}
    write_to, render_html = exports.CsvExport.write_to, html.render_html

    def csv_write_to(self: exports.CsvExport, f: Any) -> None:
        writing.set()
        saw["the page drawn meanwhile"] = drawing.wait(60)
        write_to(self, f)

    def page(*args: Any, **kw: Any) -> str:
        drawing.set()
        saw["the CSV written meanwhile"] = writing.wait(60)
        return render_html(*args, **kw)

    req = Request(week="2026-W48", tz=UTC, formats=EVERY)
    alone = build(store, req, tmp_path / "alone", now=NOW)
    monkeypatch.setattr(exports.CsvExport, "write_to", csv_write_to)
    monkeypatch.setattr(html, "render_html", page)
    both = build(store, req, tmp_path / "both", now=NOW)
    assert saw == {"the page drawn meanwhile": True, "the CSV written meanwhile": True}
    assert [p.name for p in both] == [p.name for p in alone]
    for a, b in zip(alone, both, strict=True):
        if a.suffix in (".csv", ".json"):  # the page and the mail carry the time they were made
            assert b.read_bytes() == a.read_bytes(), a.name


@pytest.mark.usefixtures("blank_charts")
def test_a_failing_csv_write_changes_nothing(
    store: str, w47_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the CSV is written in its thread: one line, and the archive as it
    was (nothing of W48, no temporary folder), the page rendered meanwhile thrown away."""
    from reports.render import exports

    out = tmp_path / "out"
    before = archived_w47(w47_files, out)

    def full_disk(self: exports.CsvExport, f: Any) -> None:
        f.write(b"week,basis,section,key,metric,value\r\n")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(exports.CsvExport, "write_to", full_disk)
    with pytest.raises(ReportError) as e:
        build(store, Request(week="2026-W48", tz=UTC, formats=EVERY), out, now=NOW)
    assert str(e.value) == f"cannot write the report to {out}: No space left on device"
    assert snapshot(out) == before


def test_an_output_path_that_is_a_file(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_build, "compute", _never)
    out = tmp_path / "report.txt"
    out.write_text("keep me")
    with pytest.raises(ReportError) as e:
        build(store, Request(week="2026-W48", tz=UTC), out, now=NOW)
    assert str(e.value) == f"cannot write the report to {out}: it is not a folder"
    under = out / "reports"
    with pytest.raises(ReportError) as e:
        build(store, Request(week="2026-W48", tz=UTC), under, now=NOW)
    assert str(e.value) == f"cannot write the report to {under}: {out} is not a folder"
    assert out.read_text() == "keep me"


def test_the_cli_says_it_on_one_line(store: str, tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    out.write_text("")
    p = gpu_kpi("report", "--week", "2026-W48", "--store", store, "--out", str(out))
    assert p.returncode == 2
    assert p.stderr == f"gpu-kpi: error: cannot write the report to {out}: it is not a folder\n"


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root writes into a read-only folder anyway; "
    "test_an_output_path_that_is_a_file keeps a failing case",
)
def test_a_read_only_folder(store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_build, "compute", _never)
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        for out in (folder, folder / "reports"):
            with pytest.raises(ReportError, match="permission denied"):
                build(store, Request(week="2026-W48", tz=UTC), out, now=NOW)
    finally:
        folder.chmod(0o700)
    assert list(folder.iterdir()) == []


def _never(*args: object, **kw: object) -> object:
    raise AssertionError("computed before the output folder was checked")
