"""The docs cannot drift: ARCHITECTURE.md's module map against the source files, mkdocs.yml's nav
against docs/, every relative link of the Markdown files against its target, and the names the
docs promise (metric keys, CLI subcommands) against the code.

``mkdocs build --strict`` (``make docs``) checks the site's links and anchors too; these tests
need no MkDocs and run with the rest of the suite."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tracker", "reports")
MAP_SECTION = "## The tree"


# -- ARCHITECTURE.md's module map ------------------------------------------------------------


def source_modules(root: Path) -> list[str]:
    """Every Python module of ``tracker/`` and ``reports/`` as the map names it: its path from
    the repository root (``tracker/store/runs.py``), and a package's ``__init__.py`` as the
    package's folder (``tracker/store/``). ``__pycache__`` and symlinked folders (a checkout's
    ``reports/templates``) are not walked."""
    found = []
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(root / pkg):
            here = Path(dirpath)
            dirnames[:] = [
                d for d in dirnames if d != "__pycache__" and not (here / d).is_symlink()
            ]
            rel = here.relative_to(root).as_posix()
            for name in filenames:
                if name == "__init__.py":
                    found.append(f"{rel}/")
                elif name.endswith(".py"):
                    found.append(f"{rel}/{name}")
    return sorted(found)


def package_of(module: str) -> str:
    """The package whose table lists ``module``: ``tracker/store/`` for
    ``tracker/store/runs.py`` and for ``tracker/store/`` itself."""
    if module.endswith("/"):
        return module
    return module.rsplit("/", 1)[0] + "/"


@dataclass(frozen=True, kw_only=True)
class MapRow:
    path: str
    table: str  # the package of the `### `pkg/`` heading above the row's table; "" if none
    line: int  # 1-based, in ARCHITECTURE.md


def parse_module_map(text: str) -> tuple[list[MapRow], list[str]]:
    """The rows of the map, and what could not be read.

    The map is the ``## The tree`` section: under a heading ``### `tracker/store/```, a table
    whose header's first cell is ``module``; each row's first cell is one path in backticks.
    Tables with another first header cell (``folder``) are not the map."""
    lines = text.splitlines()
    try:
        start = lines.index(MAP_SECTION)
    except ValueError:
        return [], [f"no '{MAP_SECTION}' section"]
    rows: list[MapRow] = []
    problems: list[str] = []
    table = ""
    in_map_table = False
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        if line.startswith("### "):
            heading = re.fullmatch(r"### `([^`]+/)`", line.strip())
            table = heading.group(1) if heading else ""
            in_map_table = False
            continue
        if not line.startswith("|"):
            in_map_table = False
            continue
        first = line.strip().strip("|").split("|")[0].strip()
        if first == "module":
            in_map_table = True
            continue
        if not in_map_table or set(first) <= set("-: "):
            continue
        path = re.fullmatch(r"`([^`\s]+)`", first)
        if path:
            rows.append(MapRow(path=path.group(1), table=table, line=number))
        else:
            problems.append(f"line {number}: the first cell is not one `path`: {first!r}")
    if not rows and not problems:
        problems.append(f"no table with the header '| module | what it holds |' in '{MAP_SECTION}'")
    return rows, problems


def map_problems(text: str, modules: list[str]) -> list[str]:
    """What is wrong with the map against ``modules`` (:func:`source_modules`), one line each,
    saying what to do."""
    rows, problems = parse_module_map(text)
    listed = Counter(r.path for r in rows)
    missing = sorted(set(modules) - set(listed))
    gone = sorted(set(listed) - set(modules))
    twice = sorted(p for p, n in listed.items() if n > 1)
    if missing:
        problems.append(
            f"missing from the map ({len(missing)}; add a row to its package's table): "
            + ", ".join(missing)
        )
    if gone:
        problems.append(
            f"listed but not in the source ({len(gone)}; remove or rename the row): "
            + ", ".join(f"{p} (line {r.line})" for p in gone for r in rows if r.path == p)
        )
    if twice:
        problems.append(
            "listed more than once (keep one row): "
            + ", ".join(
                f"{p} (lines {', '.join(str(r.line) for r in rows if r.path == p)})" for p in twice
            )
        )
    for r in rows:
        if r.path in set(modules) and r.table != package_of(r.path):
            problems.append(
                f"{r.path} (line {r.line}) is in the table of {r.table or 'no package'}; "
                f"move it under ### `{package_of(r.path)}`"
            )
    return problems


def test_the_module_map_lists_every_module_once() -> None:
    problems = map_problems((ROOT / "ARCHITECTURE.md").read_text(), source_modules(ROOT))
    assert not problems, "ARCHITECTURE.md, '## The tree', is out of date:\n  " + "\n  ".join(
        problems
    )


def test_the_map_check_names_what_is_missing_extra_doubled_or_misplaced(tmp_path: Path) -> None:
    # a test of the test: a planted tree and a planted map, each fault named as it is
    for path in ("tracker/__init__.py", "tracker/cost.py", "tracker/gpu/__init__.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / "tracker/gpu/nvml.py").write_text("")
    (tmp_path / "tracker/__pycache__").mkdir()
    (tmp_path / "tracker/__pycache__/cost.cpython-311.py").write_text("")
    (tmp_path / "reports").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere/linked.py").write_text("")
    (tmp_path / "reports/templates").symlink_to(tmp_path / "elsewhere")
    modules = source_modules(tmp_path)
    assert modules == ["tracker/", "tracker/cost.py", "tracker/gpu/", "tracker/gpu/nvml.py"]

    text = "\n".join(
        [
            "# Architecture",
            "## The tree",
            "### `tracker/`",
            "| module | what it holds |",
            "|---|---|",
            "| `tracker/` | the package |",
            "| `tracker/gpu/nvml.py` | NVML, in the wrong table |",
            "| `tracker/sampler.py` | gone |",
            "| `tracker/` | again |",
            "| tracker/cost.py | no backticks |",
            "### `tracker/gpu/`",
            "| module | what it holds |",
            "|---|---|",
            "| `tracker/gpu/` | the package |",
            "### Around",
            "| folder | what it holds |",
            "|---|---|",
            "| `tests/` | not a module row |",
            "## Floors",
            "| module | not the map |",
            "|---|---|",
            "| `tracker/floors.py` | after the section |",
        ]
    )
    assert map_problems(text, modules) == [
        "line 10: the first cell is not one `path`: 'tracker/cost.py'",
        "missing from the map (1; add a row to its package's table): tracker/cost.py",
        "listed but not in the source (1; remove or rename the row): tracker/sampler.py (line 8)",
        "listed more than once (keep one row): tracker/ (lines 6, 9)",
        "tracker/gpu/nvml.py (line 7) is in the table of tracker/; move it under ### `tracker/gpu/`",
    ]
    assert map_problems("# Architecture\n", modules)[0] == "no '## The tree' section"


# -- mkdocs.yml's nav and docs/ ---------------------------------------------------------------


def nav_pages(mkdocs_yml: str) -> list[str]:
    """The pages the ``nav:`` block names, in order. A line-based read (no YAML library): the
    block is every indented line after ``nav:``, and a page is the ``….md`` a line ends with."""
    pages: list[str] = []
    in_nav = False
    for line in mkdocs_yml.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            in_nav = line.rstrip() == "nav:"
            continue
        page = re.search(r"([\w./-]+\.md)\s*$", line) if in_nav else None
        if page:
            pages.append(page.group(1))
    return pages


def test_the_nav_reader_reads_nested_sections_and_stops_at_the_next_key() -> None:
    yml = "site_name: x\nnav:\n  - Home: index.md\n  - Part:\n      - A b: a/b.md\n      - c.md\n"
    assert nav_pages(yml + "theme:\n  x: not.md\n") == ["index.md", "a/b.md", "c.md"]


def test_every_nav_page_exists_and_every_docs_page_is_in_the_nav() -> None:
    pages = nav_pages((ROOT / "mkdocs.yml").read_text())
    on_disk = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert "index.md" in pages
    assert sorted(set(pages) - set(on_disk)) == [], "in mkdocs.yml's nav but not in docs/"
    assert sorted(set(on_disk) - set(pages)) == [], "in docs/ but not in mkdocs.yml's nav"
    assert [p for p, n in Counter(pages).items() if n > 1] == [], "in the nav twice"


# -- links ------------------------------------------------------------------------------------


def markdown_files() -> list[Path]:
    top = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "CONTRIBUTING.md"]
    return top + sorted((ROOT / "docs").rglob("*.md"))


def without_code(text: str) -> str:
    """``text`` with fenced code blocks and inline code blanked (a ``](`` there is no link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(text: str) -> set[str]:
    """The heading anchors of a page, as MkDocs and GitHub both make them for our headings:
    lower case, punctuation dropped, spaces as ``-``."""
    return {
        re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", without_code(text) + "\n", flags=re.MULTILINE)
    }


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", without_code(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file():
            bad.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            bad.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


# -- names the docs promise -------------------------------------------------------------------


def test_every_metric_key_is_in_the_metric_names_page() -> None:
    from tracker.metrics import METRICS, RANK_METRICS

    page = (ROOT / "docs/metrics.md").read_text()
    missing = [m.key for m in (*METRICS, *RANK_METRICS) if f"`{m.key}`" not in page]
    assert missing == [], "not in docs/metrics.md"


def test_the_readme_cli_table_and_the_cli_page_list_every_subcommand() -> None:
    import argparse

    from reports.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = set(sub.choices)
    readme = (ROOT / "README.md").read_text()
    glance = readme.split("## The CLI at a glance", 1)[1].split("\n## ", 1)[0]
    in_table = set(re.findall(r"^\| `gpu-kpi ([a-z-]+)", glance, flags=re.MULTILINE))
    assert sorted(commands - in_table) == [], "missing from the README's CLI table"
    assert sorted(in_table - commands) == [], "in the README's CLI table but not a subcommand"
    cli_page = (ROOT / "docs/cli.md").read_text()
    assert sorted(c for c in commands if f"gpu-kpi {c}" not in cli_page) == [], "not in cli.md"


def test_every_config_key_is_in_the_docs() -> None:
    """Each key of the tracker's and the service's sections (``[tracker]``, ``[thresholds]``,
    ``[report]``, ``[service]``, ``[smtp]``, the top level) is named in a docs page: in a TOML
    example (``key = …`` at a line's start) or in inline code."""
    from reports.service.config import SERVICE_SECTIONS
    from tracker.config import TRACKER_SECTIONS

    docs = "\n".join(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md")))

    def named(key: str) -> bool:
        k = re.escape(key)
        return bool(
            re.search(rf"`[^`\n]*\b{k}\b[^`\n]*`", docs)
            or re.search(rf"^{k} *=", docs, flags=re.MULTILINE)
        )

    missing = [
        f"{section}.{key}" if section else key
        for sections in (TRACKER_SECTIONS, SERVICE_SECTIONS)
        for section, keys in sections.items()
        for key in keys
        if not named(key)
    ]
    assert missing == [], "config keys no docs page names"


def fast_markers() -> set[str]:
    """The markers the Makefile's ``test-fast`` leaves out (its ``-m "not a and not b…"``)."""
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\ntest-fast:", 1)[1].split("\n\n", 1)[0]
    (expr,) = re.findall(r'-m "([^"]+)"', recipe)
    return set(re.findall(r"not (\w+)", expr))


def test_the_markers_test_fast_leaves_out_are_the_ones_the_docs_name() -> None:
    """docs/tests.md says which markers ``make test-fast`` leaves out; the Makefile decides."""
    page = (ROOT / "docs/tests.md").read_text()
    said = page.split("leaves out the", 1)[1].split(".", 1)[0]
    assert set(re.findall(r"`(\w+)`", said)) == fast_markers()


def test_every_marker_is_in_contributing_s_table_as_pyproject_has_it() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    registered = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    table = (ROOT / "CONTRIBUTING.md").read_text().split("| marker | meaning |", 1)[1]
    rows = re.findall(r"^\| `(\w+)` \|", table.split("\n\n", 1)[0], flags=re.MULTILINE)
    assert sorted(rows) == sorted(registered) and len(rows) == len(set(rows))
    assert fast_markers() <= registered  # test-fast leaves out only markers that exist


def test_a_package_that_lists_its_modules_lists_them_all() -> None:
    """A package docstring with a ``:mod:`.name``` list names every module of the package,
    and no module it lacks (``reports/kpi`` once listed 5 of its 20)."""
    import ast

    checked = []
    for init in sorted(
        [*ROOT.glob("tracker/**/__init__.py"), *ROOT.glob("reports/**/__init__.py")]
    ):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if not re.search(r"^- :mod:`\.", doc, flags=re.MULTILINE):
            continue  # a package that points elsewhere (the module map) lists none
        listed = re.findall(r":mod:`\.(\w+)`", doc)
        present = {p.stem for p in init.parent.glob("*.py") if p.stem != "__init__"}
        present |= {p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()}
        where = init.relative_to(ROOT)
        assert sorted(set(listed)) == sorted(present), f"{where}: {set(listed) ^ present}"
        checked.append(str(where.parent))
    assert {"reports/kpi", "reports/data", "tracker/gpu", "tracker/store"} <= set(checked)


def test_the_repository_cites_no_file_outside_it() -> None:
    """A maintainer has only the repository: no page, test or module sends them to the team's
    design or style notes, which are not in it (CONTRIBUTING.md once said "From style.md")."""
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    outside = re.compile(r"\b(?:design|style)\.md\b|\.\./shared/")
    cited = [
        f"{name}: {m.group(0)}"
        for name in tracked
        if name != "tests/test_docs.py" and (ROOT / name).suffix in (".md", ".py", ".toml")
        for m in outside.finditer((ROOT / name).read_text(errors="replace"))
    ]
    assert not cited, "\n".join(cited)
