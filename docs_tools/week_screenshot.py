"""The screenshot of the docs' "Reading the week page" (``docs/reading.md``): the demo's week
page in headless Chromium, as a PNG of its first 1280 × 1400 px (the headline, "Fix first" and
the start of "by team").

    .venv/bin/python docs_tools/week_screenshot.py [--out docs/img/week-page.png] [--html PAGE]

``make docs`` runs it before ``mkdocs build --strict``, so the picture is of the page as the code
renders it today. The demo (:func:`reports.demo.run_demo`) is built with a fixed clock, Friday
2026-12-04 12:00 UTC, so its week is always 2026-W48 and the page the same every run; the report
is the one ``gpu-kpi report --config <the demo's config> --week 2026-W48`` writes, at that time.
Everything goes to a temporary folder that is also the process's HOME (no config, spool or
matplotlib cache of the user's is read or written), and Chromium reaches no network. About
8 s; exits 1 with one line when Chromium is missing or writes no picture.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
"""The demo's clock: a Friday, so its last complete week is :data:`WEEK`."""
WEEK = "2026-W48"
WINDOW_PX = (1280, 1400)
"""Chromium's window, width × height in CSS px at a device scale of 1: the PNG's size."""
CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMIUM_TIMEOUT_S = 60.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Chromium never leaves the machine: no update, sync, QUIC or name lookups, a fresh profile
_OFFLINE_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


class ScreenshotError(Exception):
    """Chromium is missing, failed, or wrote no PNG: the one line the script prints."""


def week_page(folder: Path) -> Path:
    """Build the demo's store and config under ``folder`` at :data:`NOW`, then its report of
    :data:`WEEK` as ``gpu-kpi report --config … --week 2026-W48`` would (the CLI's config
    readers, its default formats), with the report's clock at :data:`NOW` too.

    Args:
        folder: An empty, writable folder; the store, config and report go under it.

    Returns:
        The week's HTML page.
    """
    from reports.build import build
    from reports.cli_support import _report_section, _settings
    from reports.demo import demo_config, run_demo
    from reports.request import FORMATS, Request
    from reports.weeks import zone

    store = f"sqlite:///{folder / 'runs.db'}"
    config = folder / "gpu-kpi.toml"
    config.write_text(demo_config(store), encoding="utf-8")
    run_demo(store, now=NOW, config=str(config))
    args = argparse.Namespace(config=str(config), store=None)
    settings = _settings(args)
    section = _report_section(args)
    req = Request.from_settings(
        settings,
        week=WEEK,
        tz=zone(section.get("timezone", "UTC")),
        formats=FORMATS,
        basis=section.get("basis", "util"),
        report_url=section.get("report_url"),
        budgets=section["budgets"],
    )
    written = build(settings.store, req, folder / "reports", now=NOW)
    return next(p for p in written if p.name == f"{WEEK}.html")


def find_chromium() -> str:
    """The Chromium executable on PATH.

    Raises:
        ScreenshotError: None is installed.
    """
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise ScreenshotError("Chromium not found on PATH (apt-get install -y chromium)")


def screenshot(page: Path, out: Path, *, chromium: str, scratch: Path) -> None:
    """Open ``page`` in headless Chromium at :data:`WINDOW_PX` and write what it shows to
    ``out`` as a PNG. ``out`` is replaced only by a PNG Chromium did write: a stale picture
    never passes for a fresh one.

    Args:
        page: The HTML file.
        out: Where the PNG goes (its folder is created).
        chromium: The Chromium executable.
        scratch: A writable folder for Chromium's profile and its first copy of the PNG.

    Raises:
        ScreenshotError: Chromium failed, timed out or wrote no PNG.
    """
    shot = scratch / "shot.png"
    width, height = WINDOW_PX
    command = [
        chromium,
        *_OFFLINE_FLAGS,
        f"--user-data-dir={scratch / 'chromium-profile'}",
        f"--window-size={width},{height}",
        f"--screenshot={shot}",
        page.as_uri(),
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise ScreenshotError(f"Chromium took over {CHROMIUM_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScreenshotError(f"Chromium exited with {done.returncode}: {last}")
    if not shot.is_file() or not shot.read_bytes().startswith(PNG_SIGNATURE):
        raise ScreenshotError(f"{chromium} exited 0 but wrote no PNG")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, out)


def isolate(home: Path) -> None:
    """This process's environment down to ``PATH``, with ``home`` as HOME and its XDG folders:
    no ``GPU_KPI_*`` variable, user config, Slurm job or CI branch of the machine reaches the
    demo's runs or the page."""
    path = os.environ.get("PATH", os.defpath)
    os.environ.clear()
    os.environ.update(
        PATH=path,
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CACHE_HOME=str(home / "cache"),
        TZ="UTC",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "img" / "week-page.png",
        help="where the PNG goes (default docs/img/week-page.png)",
    )
    parser.add_argument(
        "--html", type=Path, help="also copy the page here (to read the figures the docs quote)"
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    with tempfile.TemporaryDirectory(prefix="week-screenshot-") as tmp:
        scratch = Path(tmp)
        isolate(scratch)
        try:
            chromium = find_chromium()
            (scratch / "demo").mkdir()
            page = week_page(scratch / "demo")
            screenshot(page, out, chromium=chromium, scratch=scratch)
        except ScreenshotError as e:
            print(f"week_screenshot.py: error: {e}", file=sys.stderr)
            return 1
        if args.html is not None:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, args.html)
    width, height = WINDOW_PX
    print(f"{out}: the demo's {WEEK} page, {width}x{height} px, {out.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
