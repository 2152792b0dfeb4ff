"""The docs' screenshot of the week page (``docs_tools/week_screenshot.py``, run by ``make docs``)
and the page that walks through it (``docs/reading.md``): the script writes a PNG of Chromium's
window size with a page on it, the picture the docs link is in the repository at that size, and
every figure the walk-through quotes is on the demo's page of 2026-W48."""

from __future__ import annotations

import html.parser
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "docs_tools" / "week_screenshot.py"
READING = ROOT / "docs" / "reading.md"
PICTURE = ROOT / "docs" / "img" / "week-page.png"


def week_screenshot() -> ModuleType:
    """The script, imported from its path (``docs_tools/`` is no package)."""
    spec = importlib.util.spec_from_file_location("week_screenshot", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """A PNG's chunks in order, ``(type, data)``, read with struct (length, type, data, CRC)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        chunks.append((data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    return chunks


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG, px, from its IHDR (always the first chunk)."""
    kind, ihdr = png_chunks(data)[0]
    assert kind == b"IHDR"
    width, height = struct.unpack(">II", ihdr[:8])
    return width, height


class _Text(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._hidden += tag in ("style", "script")

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("style", "script")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def page_text(page: str) -> str:
    """What a reader sees of an HTML page: its text, entities decoded, runs of white space as one
    space."""
    reader = _Text()
    reader.feed(page)
    return " ".join(" ".join(reader.parts).split())


FIGURE = re.compile(
    r"\$[\d,]*\d(?:\.\d+)?"  # dollars
    r"|[−-]?\d+(?:\.\d+)?%"  # percentages, signed as the page signs a change (−35%)
    r"|\d[\d,]*(?:\.\d+)? (?:GPU-h|GiB)\b"
)


def figures(text: str) -> list[str]:
    """The dollars, percentages, GPU-hours and GiB a Markdown text quotes, in order."""
    return FIGURE.findall(text)


def test_the_figure_reader_finds_dollars_percentages_and_hours() -> None:
    text = "cost $1,597.98 at 80.7% over 538.8 GPU-h; −35% a unit; 11.0 GiB; 4 × H100 in 2026-W48"
    assert figures(text) == ["$1,597.98", "80.7%", "538.8 GPU-h", "−35%", "11.0 GiB"]
    assert page_text("<p>a&nbsp;<b>$1</b>\n  b<style>.x{}</style></p>") == "a $1 b"


def test_the_walk_through_shows_the_picture_the_repository_holds() -> None:
    """The picture is in git (GitHub renders the page without ``make docs``) and of the size the
    script takes it at: a change of window size without a fresh picture fails here."""
    assert "![The demo's week page, 2026-W48](img/week-page.png)" in READING.read_text()
    assert png_size(PICTURE.read_bytes()) == week_screenshot().WINDOW_PX


@pytest.mark.slow
def test_every_figure_the_walk_through_quotes_is_on_the_demo_page(tmp_path: Path) -> None:
    """The script's page of 2026-W48, built here without Chromium: each dollar, percentage and
    GPU-hour figure of ``docs/reading.md`` is in its text, the headline's among them."""
    page = page_text(week_screenshot().week_page(tmp_path).read_text(encoding="utf-8"))
    quoted = figures(READING.read_text())
    assert {"$1,597.98", "$60.33", "$28.52", "538.8 GPU-h", "80.7%"} <= set(quoted)
    assert "538.8 GPU-h across 11 runs and 6 scheduler jobs cost $1,597.98" in page
    assert [f for f in quoted if f not in page] == []


def _chromium() -> None:
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is missing in CI: apt-get install -y chromium")
        pytest.skip("Chromium not installed (apt-get install -y chromium)")


@pytest.mark.chromium
def test_the_script_writes_a_png_of_the_window_with_the_page_on_it(tmp_path: Path) -> None:
    from PIL import Image

    _chromium()
    out, page = tmp_path / "shots" / "week.png", tmp_path / "week.html"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--html", str(page)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = out.read_bytes()
    width, height = week_screenshot().WINDOW_PX
    assert png_size(data) == (width, height) == (1280, 1400)
    idat = b"".join(body for kind, body in png_chunks(data) if kind == b"IDAT")
    # a blank 1280 x 1400 page compresses to a few KB; text, cards and tables do not
    assert len(idat) > 100_000
    bit_depth, color_type = png_chunks(data)[0][1][8:10]
    channels = {2: 3, 6: 4}[color_type]  # RGB, RGBA
    # every row whole: its filter byte, then each pixel's 8-bit channels
    assert bit_depth == 8 and len(zlib.decompress(idat)) == height * (1 + width * channels)
    with Image.open(out) as im:
        colors = im.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colors is None or len(colors) > 200
    assert "<title>GPU efficiency report — 2026-W48" in page.read_text(encoding="utf-8")
    assert done.stdout.strip().endswith(
        f"the demo's 2026-W48 page, 1280x1400 px, {len(data):,} bytes"
    )


def test_without_chromium_the_script_says_so_in_one_line(tmp_path: Path) -> None:
    """No Chromium on PATH: exit 1, one line on stderr, and no picture."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = tmp_path / "week.png"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "week_screenshot.py: error: Chromium not found on PATH (apt-get install -y chromium)"
    ]
    assert not out.exists()
