"""The blocks of ``docs/benchmarks.md`` a benchmark writes itself, so that the docs show its
own output, never a figure copied by hand: between ``<!-- NAME: written by the bench -->``
and ``<!-- end NAME -->``."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def markers(name: str) -> tuple[str, str]:
    """The lines that open and close the block ``name``."""
    return f"<!-- {name}: written by the bench -->", f"<!-- end {name} -->"


def read_block(name: str, path: Path = DOCS) -> str:
    """The block's text (between its markers, without them)."""
    begin, end = markers(name)
    _, sep, rest = path.read_text().partition(begin + "\n")
    body, sep2, _ = rest.partition(end)
    if not sep or not sep2:
        raise SystemExit(f"{path}: the markers of {name} are missing ({begin} … {end})")
    return body.removesuffix("\n")


def write_block(name: str, body: str, path: Path = DOCS) -> None:
    """Put ``body`` between the markers of ``name`` in ``path`` (which must have them)."""
    begin, end = markers(name)
    text = path.read_text()
    head, _, rest = text.partition(begin + "\n")
    _, _, tail = rest.partition(end)
    read_block(name, path)  # both markers there
    path.write_text(f"{head}{begin}\n{body}\n{end}{tail}")
