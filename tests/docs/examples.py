"""The shell examples of the Markdown docs, read as a user reads them: every command of a
fenced ``sh``/``bash``/``shell``/``console`` block, and every ``$ `` line of any other fenced
block that starts with one (a transcript: the lines after it, to the next ``$ ``, are its
output, which must be what the command prints; a last line ``…`` says the output goes on).

A block says how it is tested in HTML comments on the lines right above its fence (invisible on
GitHub and in the site)::

    <!-- docs-test: synopsis -->                     the block is a synopsis: each command's
                                                     subcommand and --flags must exist; not run
    <!-- docs-test: skip nvidia-smi: needs a GPU -->  commands that start with ``nvidia-smi``
                                                     are not run, for the reason given
    <!-- docs-test: exit 1: gpu-kpi gate -->          commands that start with ``gpu-kpi gate``
                                                     must exit 1 (else 0)

Every other command runs (``tests/docs/test_examples.py``). A directive this module cannot read,
a skip without a reason, or a directive that matches no command of its block is an error, so a
mark cannot outlive the command it was written for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
PROMPT = re.compile(r"^\$ (gpu-kpi|make|pip|python|sacct|nvidia-smi|duckdb|curl|export)\b")
"""A transcript's command line: the prompt, then a program a user of these docs runs."""
DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(.*?)\s*-->\s*$")

Kind = Literal["run", "synopsis", "skip"]


@dataclass(frozen=True, kw_only=True)
class Command:
    page: str
    """The page's path from the repository root (``docs/imports.md``)."""
    line: int
    """The 1-based line of the command's first line in the page."""
    text: str
    """The command as a shell takes it: continuation lines joined with their ``\\``."""
    kind: Kind
    reason: str = ""
    """Why it is not run (``skip``)."""
    exit: int = 0
    """The exit status it must end with (``run``)."""
    output: tuple[str, ...] = ()
    """A transcript's lines after the command (``$ gpu-kpi job …`` then what it prints)."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def program(self) -> str:
        words = self.text.split()
        return words[0] if words else ""


@dataclass(kw_only=True)
class Block:
    page: str
    line: int  # the fence's line
    lang: str
    body: list[tuple[int, str]]  # (line number, text)
    directives: list[tuple[int, str]] = field(default_factory=list)


class DocsTestError(ValueError):
    """A block's ``docs-test`` directives cannot be read or match nothing."""


def blocks(page: str, text: str) -> list[Block]:
    """The fenced blocks of ``text`` with the directives right above each."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        directives: list[tuple[int, str]] = []
        j = i - 1
        while j >= 0 and (d := DIRECTIVE.match(lines[j])):
            directives.insert(0, (j + 1, d.group(1)))
            j -= 1
        body: list[tuple[int, str]] = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence[:3]):
            body.append((i + 1, lines[i]))
            i += 1
        start = body[0][0] - 1 if body else i
        out.append(Block(page=page, line=start, lang=lang, body=body, directives=directives))
        i += 1
    return out


def _shell_commands(block: Block) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, command, output) of a shell block: ``\\`` continues a line; in a synopsis (or any
    block) a line that starts with a space continues the command above it; comment lines and
    blank lines are no command; a ``$ `` prompt is dropped."""
    out: list[tuple[int, str, tuple[str, ...]]] = []
    joined: list[str] = []
    for number, raw in block.body:
        line = raw[2:] if raw.startswith("$ ") else raw
        if joined and joined[-1].rstrip().endswith("\\"):
            joined.append(line)
            out[-1] = (out[-1][0], "\n".join(joined), ())
            continue
        if not line.strip() or (line.lstrip().startswith("#") and not line[:1].isspace()):
            joined = []
            continue
        if line[:1].isspace() and out:
            joined.append(line)
            out[-1] = (out[-1][0], "\n".join(joined), ())
            continue
        joined = [line]
        out.append((number, line, ()))
    return out


def _transcript(block: Block) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, command, output) of each ``$ `` line of a block that is not a shell block and
    starts with one."""
    out: list[tuple[int, str, tuple[str, ...]]] = []
    if not block.body or not PROMPT.match(block.body[0][1]):
        return out  # output alone
    for number, raw in block.body:
        if PROMPT.match(raw):  # not output that starts "$ per 1k samples"
            out.append((number, raw[2:], ()))
        elif out:
            line, command, shown = out[-1]
            out[-1] = (line, command, (*shown, raw))
    return out


def commands(page: str, text: str) -> list[Command]:
    """Every command of the page's examples, each with how it is tested.

    Raises:
        DocsTestError: A directive is unknown, a skip has no reason, or a directive matches no
            command of its block.
    """
    found: list[Command] = []
    for block in blocks(page, text):
        shell = block.lang in SHELL and block.lang != "console"
        raw = _shell_commands(block) if shell else _transcript(block)
        if not raw:
            if block.directives:
                raise DocsTestError(f"{page}:{block.directives[0][0]}: a mark on no command")
            continue
        synopsis = False
        skips: list[tuple[int, str, str]] = []
        exits: list[tuple[int, int, str]] = []
        for number, directive in block.directives:
            if directive == "synopsis":
                synopsis = True
            elif m := re.fullmatch(r"skip (.+?): (.+)", directive):
                skips.append((number, m.group(1), m.group(2)))
            elif m := re.fullmatch(r"exit (\d+): (.+)", directive):
                exits.append((number, int(m.group(1)), m.group(2)))
            else:
                raise DocsTestError(
                    f"{page}:{number}: unknown docs-test mark {directive!r} (synopsis, "
                    "'skip PREFIX: REASON' or 'exit N: PREFIX')"
                )
        used: set[int] = set()
        for number, command, shown in raw:
            kind: Kind = "synopsis" if synopsis else "run"
            reason, status = "", 0
            for at, prefix, why in skips:
                if command.startswith(prefix):
                    kind, reason = "skip", why
                    used.add(at)
                    break
            for at, code, prefix in exits:
                if command.startswith(prefix):
                    status = code
                    used.add(at)
            found.append(
                Command(
                    page=page,
                    line=number,
                    text=command,
                    kind=kind,
                    reason=reason,
                    exit=status,
                    output=tuple(line.rstrip() for line in shown),
                )
            )
        unused = [at for at, *_ in (*skips, *exits) if at not in used]
        if unused:
            raise DocsTestError(f"{page}:{unused[0]}: the mark matches no command of its block")
    return found


def pages(root: Path) -> list[Path]:
    """README.md and every page of docs/: the Markdown a user types commands from."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def without_comment(command: str) -> str:
    """A synopsis command on one line, its ``# …`` comments and ``\\`` continuations gone."""
    lines = [
        re.sub(r"(^|\s)#.*$", "", line).rstrip().removesuffix("\\") for line in command.splitlines()
    ]
    return " ".join(" ".join(lines).split())
