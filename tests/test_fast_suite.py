"""The fast suite (``make test-fast``) imports no training framework while it is collected.

Collection imports every test module before ``-m`` deselects its tests, so a module that imports
torch, Lightning or transformers at the top costs the fast suite seconds of CPU for tests it
never runs. ``tests/conftest.py`` leaves out, unimported, the modules whose every test carries a
marker ``-m`` rules out (``trainer`` among them); any other test imports a framework inside the
test or fixture that needs it.
"""

from __future__ import annotations

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


def fast_expression() -> str:
    """The ``-m`` expression of ``make test-fast``, read from the Makefile."""
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\ntest-fast:", 1)[1].split("\n\n", 1)[0]
    found = re.search(r'pytest .*-m "([^"]+)"', target)
    assert found, "no -m expression in the Makefile's test-fast target"
    return found[1]


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
    rc, loaded = collect(fast_expression(), FRAMEWORKS, ["tests"], ROOT, [ROOT, ROOT / "tests"])
    assert rc == 0
    assert loaded == []


def test_the_check_finds_a_planted_framework_import(tmp_path: Path) -> None:
    """A test of the test: in a planted tree, a trainer module's top-level import is left out
    of the fast suite's collection, and so is a service module's; a plain module's is not, and
    ``-m trainer`` loads all three."""
    planted = ("planted_framework", "planted_library", "planted_server")
    for name in planted:
        (tmp_path / f"{name}.py").write_text("")
    (tmp_path / "test_trainer_module.py").write_text(
        "import pytest\nimport planted_framework\n\n"
        "pytestmark = [pytest.mark.trainer]\n\n\ndef test_a() -> None:\n    pass\n"
    )
    (tmp_path / "test_plain_module.py").write_text(
        "import planted_library\n\n\ndef test_b() -> None:\n    pass\n"
    )
    (tmp_path / "test_service_module.py").write_text(
        "import pytest\nimport planted_server\n\n"
        "pytestmark = pytest.mark.service\n\n\ndef test_c() -> None:\n    pass\n"
    )
    # the repository's conftest as a plugin: its collection hook, in a tree of its own
    path = [tmp_path, ROOT, ROOT / "tests"]
    args = ["-p", "conftest", "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)]
    rc, loaded = collect(fast_expression(), planted, args, tmp_path, path)
    assert (rc, loaded) == (0, ["planted_library"])
    rc, loaded = collect("trainer", planted, args, tmp_path, path)
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
