"""The architecture rules of design.md, checked on the source and on a fresh interpreter."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the one module allowed to import each outside library
# (a folder: the package that is the boundary)
OWNERS = {"pynvml": "tracker/nvml.py", "sqlalchemy": "tracker/store/",
          "wandb": "tracker/wandb.py", "lightning": "tracker/lightning.py",
          "pytorch_lightning": "tracker/pytorch_lightning.py",
          "transformers": "tracker/transformers.py", "apscheduler": "reports/scheduler.py",
          "prometheus_client": "reports/prom.py", "smtplib": "reports/mailer.py"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_tracker_never_imports_reports_or_report_libraries() -> None:
    for path in (ROOT / "tracker").rglob("*.py"):
        found = imports(path) & {"reports", "pandas", "jinja2", "apscheduler", "matplotlib"}
        assert not found, f"{path.relative_to(ROOT)} imports {found}"


def test_one_module_per_outside_library() -> None:
    for path in [*(ROOT / "tracker").rglob("*.py"), *(ROOT / "reports").rglob("*.py")]:
        rel = str(path.relative_to(ROOT))
        for lib, owner in OWNERS.items():
            if lib in imports(path):
                ok = rel.startswith(owner) if owner.endswith("/") else rel == owner
                assert ok, f"{rel} imports {lib}; only {owner} may"


def test_importing_tracker_is_light_and_does_nothing() -> None:
    code = ("import sys, tracker, tracker.session, tracker.gpu.nvml, tracker.sampler\n"
            "heavy = [m for m in ('torch','lightning','transformers','pandas','jinja2',"
            "'apscheduler','wandb','pynvml','sqlalchemy','tensorboard') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=60, check=True)
    assert "HEAVY []" in p.stdout
