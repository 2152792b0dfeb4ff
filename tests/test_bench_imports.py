"""The benchmarks name what the code has: every ``from reports… / tracker… import NAME`` in
``bench/`` resolves (no CI run times them, so a refactor that moves a function would break a
benchmark silently: ``recurring_of_weeks`` left ``reports.build`` for ``reports.sections``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_project_name_a_benchmark_imports_exists() -> None:
    missing = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.module.split(".")[0] not in ("reports", "tracker"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    continue
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    missing.append(f"{path.name}:{node.lineno}: {node.module}.{alias.name}")
    assert not missing, "\n".join(missing)
