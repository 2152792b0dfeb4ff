"""The count of the docs' examples at the end of a run that collected them: run, checked as
synopses, and not run (with each reason), so a growing list of marks is seen."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from examples import commands, pages

ROOT = Path(__file__).resolve().parents[2]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not any(
        "tests/docs/test_examples.py" in r.nodeid
        for reports in terminalreporter.stats.values()
        for r in reports
        if hasattr(r, "nodeid")
    ):
        return
    found = [
        c for p in pages(ROOT) for c in commands(p.relative_to(ROOT).as_posix(), p.read_text())
    ]
    kinds = Counter(c.kind for c in found)
    terminalreporter.write_sep("-", "docs examples")
    terminalreporter.write_line(
        f"{kinds['run']} run as written, {kinds['synopsis']} synopsis lines checked against "
        f"the parser, {kinds['skip']} not run:"
    )
    for (reason, program), n in sorted(
        Counter((c.reason, c.program) for c in found if c.kind == "skip").items()
    ):
        terminalreporter.write_line(f"  {n} × {program}: {reason}")
