"""The benchmarks name what the code has: every ``from reports… / tracker… import NAME`` in
``bench/`` resolves (no CI run times them, so a refactor that moves a function would break a
benchmark silently: ``recurring_of_weeks`` left ``reports.build`` for ``reports.sections``).

A module that imports a training framework when it loads (``tracker.lightning``: Lightning and
torch, seconds of CPU) is checked by the test marked ``trainer``, the others in the fast suite."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("torch", "lightning", "pytorch_lightning", "transformers")


def bench_imports() -> Iterator[tuple[str, int, str, list[str]]]:
    """Each ``from reports… / tracker… import NAMES`` of ``bench/``: the file's name, the line,
    the module and the names."""
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.module.split(".")[0] not in ("reports", "tracker"):
                continue
            yield path.name, node.lineno, node.module, [a.name for a in node.names]


def loads_a_framework(module: str) -> bool:
    """Whether ``module`` imports a training framework when it loads: an import in its body
    (or in a ``try``, ``if`` or ``with`` there), not one inside a function. Read from its source,
    without importing it."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    body = list(ast.parse(Path(spec.origin).read_text()).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    body.extend(getattr(node, field, []))
            continue
        if any(n.split(".")[0] in FRAMEWORKS for n in names):
            return True
    return False


def missing(frameworks: bool) -> list[str]:
    """The names the benchmarks import that their module lacks, of the modules that load a
    training framework (``frameworks``) or of the others."""
    gone = []
    for file, line, name, names in bench_imports():
        if loads_a_framework(name) != frameworks:
            continue
        module = importlib.import_module(name)
        for alias in names:
            if hasattr(module, alias):
                continue
            try:
                importlib.import_module(f"{name}.{alias}")
            except ImportError:
                gone.append(f"{file}:{line}: {name}.{alias}")
    return gone


def test_every_project_name_a_benchmark_imports_exists() -> None:
    gone = missing(frameworks=False)
    assert not gone, "\n".join(gone)


@pytest.mark.trainer  # imports Lightning and torch
def test_every_name_a_benchmark_imports_from_a_framework_callback_exists() -> None:
    gone = missing(frameworks=True)
    assert not gone, "\n".join(gone)


def test_a_callback_module_is_known_to_load_its_framework() -> None:
    """A test of the split: the Lightning callback's module loads Lightning (in a ``try``), the
    store's and the report's do not."""
    assert loads_a_framework("tracker.lightning")
    assert not loads_a_framework("tracker.store")
    assert not loads_a_framework("reports.build")
