"""The callbacks' docstrings list every key they log, so that ``help(GpuKpiCallback)`` is the
reference. Read from the source, so that no framework is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracker.metrics import KEYS

ROOT = Path(__file__).resolve().parents[3]


def class_doc(path: str, name: str) -> str:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    doc = ast.get_docstring(node)
    assert doc is not None
    return doc


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("tracker/integrations/lightning_hooks.py", "LightningHooks"),
        ("tracker/transformers.py", "GpuKpiCallback"),
    ],
)
def test_a_callbacks_docstring_names_every_logged_key(path: str, name: str) -> None:
    doc = class_doc(path, name)
    listed = {word.strip("`") for word in doc.split() if word.startswith("``gpu/")}
    listed |= {word.strip("`") for word in doc.split() if word.startswith(("``perf/", "``cost/"))}
    assert sorted(KEYS - listed) == []
    assert sorted(listed - KEYS) == []
    for section in ("Args:", "Example:"):
        assert section in doc
