"""The fast suite (``make test-fast``) imports no training framework while it is collected.

Collection imports every test module before ``-m`` deselects its tests, so a module that imports
torch, Lightning or transformers at the top costs the fast suite seconds of CPU for tests it
never runs. The tests that train (marker ``trainer``) live in ``tests/trainer/``, which the
fast suite leaves out with ``--ignore``; any other test imports a framework inside the test or
fixture that needs it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("torch", "lightning", "pytorch_lightning", "transformers")

# fresh interpreters that collect the whole suite (~10 s of CPU): `make test` runs them
pytestmark = pytest.mark.slow

# pytest run in a fresh interpreter: collect only, then list which of the given modules it loaded
_COLLECT = textwrap.dedent("""
    import json, sys
    import pytest
    expr, modules, args = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
    rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-m", expr, *args])
    loaded = [m for m in modules if m in sys.modules]
    print("LOADED " + json.dumps({"rc": int(rc), "loaded": loaded}))
""")


def fast_args() -> tuple[str, list[str]]:
    """The ``-m`` expression of ``make test-fast`` and the folders it leaves out
    (``--ignore=...``), read from the Makefile."""
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\ntest-fast:", 1)[1].split("\n\n", 1)[0]
    found = re.search(r'pytest .*-m "([^"]+)"', target)
    assert found, "no -m expression in the Makefile's test-fast target"
    return found[1], re.findall(r"--ignore=\S+", target)


def whole_module_marks(source: str) -> set[str]:
    """The markers a test module's source gives all its tests with a top-level ``pytestmark``
    (a mark or a list of marks, ``pytest.mark.NAME``)."""
    found: set[str] = set()
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign):
            continue
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            continue
        for sub in ast.walk(node.value):
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Attribute)
                and sub.value.attr == "mark"
                and isinstance(sub.value.value, ast.Name)
                and sub.value.value.id == "pytest"
            ):
                found.add(sub.attr)
    return found


def misplaced(tests: Path) -> list[str]:
    """The test modules under ``tests`` on the wrong side of ``tests/trainer/``: one there whose
    tests are not all marked ``trainer`` (a fast test ``--ignore`` would hide), or one elsewhere
    whose tests all are (it belongs there; a single test marked ``trainer`` elsewhere imports
    its framework inside the test)."""
    wrong = []
    for path in sorted(tests.rglob("test_*.py")):
        marked = "trainer" in whole_module_marks(path.read_text(encoding="utf-8"))
        inside = tests / "trainer" in path.parents
        if inside and not marked:
            wrong.append(f"{path.relative_to(tests)}: in trainer/, not marked trainer as a whole")
        if marked and not inside:
            wrong.append(f"{path.relative_to(tests)}: marked trainer as a whole, not in trainer/")
    return wrong


def collect(
    expr: str, modules: Sequence[str], args: Sequence[str], cwd: Path, path: Sequence[Path]
) -> tuple[int, list[str]]:
    """Collect ``args`` with ``-m expr`` in a fresh interpreter: pytest's exit code, and which
    of ``modules`` were imported by then."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    proc = subprocess.run(
        [sys.executable, "-c", _COLLECT, expr, json.dumps(list(modules)), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("LOADED ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(lines[-1].removeprefix("LOADED "))
    return result["rc"], result["loaded"]


def test_collecting_the_fast_suite_imports_no_framework() -> None:
    expr, ignores = fast_args()
    assert ignores == ["--ignore=tests/trainer"]
    rc, loaded = collect(expr, FRAMEWORKS, [*ignores, "tests"], ROOT, [ROOT, ROOT / "tests"])
    assert rc == 0
    assert loaded == []


def test_the_trainer_tests_and_only_they_are_in_their_folder() -> None:
    assert misplaced(ROOT / "tests") == []
    names = sorted(p.name for p in (ROOT / "tests" / "trainer").glob("test_*.py"))
    assert names == ["test_lightning.py", "test_transformers.py"]


def test_the_checks_find_a_planted_trainer_test_outside_its_folder(tmp_path: Path) -> None:
    """A test of the tests: in a planted tree, the fast suite's collection leaves the trainer
    folder's framework import out and loads a plain module's; a trainer test planted outside
    the folder is loaded (the framework check above would fail) and :func:`misplaced` names it,
    as it names an unmarked module planted in the folder; ``-m trainer`` without the
    ``--ignore`` loads all three."""
    planted = ("planted_framework", "planted_library", "planted_stray")
    for name in planted:
        (tmp_path / f"{name}.py").write_text("")
    tests = tmp_path / "tests"
    (tests / "trainer").mkdir(parents=True)
    (tests / "trainer" / "test_trainer_module.py").write_text(
        "import pytest\nimport planted_framework\n\n"
        "pytestmark = [pytest.mark.trainer]\n\n\ndef test_a() -> None:\n    pass\n"
    )
    (tests / "test_plain_module.py").write_text(
        "import planted_library\n\n\ndef test_b() -> None:\n    pass\n"
    )
    (tests / "test_stray_module.py").write_text(
        "import pytest\nimport planted_stray\n\n"
        "pytestmark = pytest.mark.trainer\n\n\ndef test_c() -> None:\n    pass\n"
    )
    (tests / "trainer" / "test_unmarked_module.py").write_text("def test_d() -> None:\n    pass\n")
    expr, ignores = fast_args()
    path = [tmp_path]
    args = ["-W", "ignore::pytest.PytestUnknownMarkWarning", *ignores, "tests"]
    rc, loaded = collect(expr, planted, args, tmp_path, path)
    assert (rc, loaded) == (0, ["planted_library", "planted_stray"])
    assert misplaced(tests) == [
        "test_stray_module.py: marked trainer as a whole, not in trainer/",
        "trainer/test_unmarked_module.py: in trainer/, not marked trainer as a whole",
    ]
    rc, loaded = collect("trainer", planted, [*args[:2], "tests"], tmp_path, path)
    assert (rc, loaded) == (0, list(planted))


def test_fresh_folders_are_numbered_in_order_past_pytests_own(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """``conftest.fresh_dir`` (each test's ``tmp_path`` and user dirs) numbers a prefix's
    folders as ``mktemp`` does, without listing the base folder: 0, then ``mktemp``'s own 1
    (it lists the folder and finds 0), then 2, stepping over 1; each new and empty, and this
    test's ``tmp_path`` is one of them, named after the test."""
    from conftest import fresh_dir

    first = fresh_dir(tmp_path_factory, "planted")
    (first / "kept").write_text("")
    theirs = tmp_path_factory.mktemp("planted")
    after = fresh_dir(tmp_path_factory, "planted")
    assert [first.name, theirs.name, after.name] == ["planted0", "planted1", "planted2"]
    assert list(after.iterdir()) == [] and (first / "kept").exists()
    assert tmp_path.parent == tmp_path_factory.getbasetemp()
    assert tmp_path.name == "test_fresh_folders_are_numbere0" and list(tmp_path.iterdir()) == []
