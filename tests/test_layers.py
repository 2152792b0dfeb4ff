"""The architecture rules (ARCHITECTURE.md), checked on the source and on a fresh
interpreter: who may import which outside library, no import cycle, imports only go down the
floors, importing the tracker or the CLI stays light."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tracker", "reports")

# the module (or, ending in "/", the package) allowed to import each outside library
OWNERS: dict[str, tuple[str, ...]] = {
    "pynvml": ("tracker/gpu/nvml.py",),
    "sqlalchemy": ("tracker/store/", "reports/data/"),
    "wandb": (
        "tracker/sinks/wandb.py",
        "reports/imports/wandb_log.py",
        "reports/imports/wandb_api.py",
    ),
    "lightning": ("tracker/lightning.py",),
    "pytorch_lightning": ("tracker/pytorch_lightning.py",),
    "transformers": ("tracker/transformers.py",),
    "torch": ("tracker/integrations/", "tracker/sinks/tensorboard.py"),
    "platformdirs": ("tracker/paths.py",),
    "apscheduler": ("reports/service/scheduler.py",),
    "prometheus_client": ("reports/service/prom.py",),
    "smtplib": ("reports/service/mailer.py",),
    "jinja2": ("reports/render/html.py",),
    "matplotlib": ("reports/render/charts.py",),
    "pyarrow": (
        "reports/render/parquet.py",
        "reports/imports/arrow_csv.py",
        "reports/data/adbc_read.py",
        "reports/data/arrow_pool.py",
        "reports/data/columns.py",
        "reports/kpi/arrow_text.py",
        "reports/render/csv_arrow.py",
    ),
    "adbc_driver_sqlite": ("reports/data/adbc_read.py",),
    "adbc_driver_manager": ("reports/data/adbc_read.py",),
    "nanoarrow": ("reports/data/adbc_read.py",),
    "pandas": (
        "reports/kpi/",
        "reports/render/",
        "reports/build.py",
        "reports/budgets.py",
        "reports/gputime.py",
        "reports/data/columns.py",
        "reports/data/rollups.py",
        "reports/data/scans.py",
        "reports/imports/nvsmi_fast.py",
        "reports/sections/savings.py",
        "reports/sections/slownodes.py",
        "reports/sections/first.py",
        "reports/sections/week.py",
    ),
    "numpy": (
        "reports/kpi/",
        "reports/data/columns.py",
        "reports/data/rollups.py",
        "reports/gputime.py",
        "reports/imports/arrow_csv.py",
        "reports/imports/civil.py",
        "reports/imports/nvsmi_fast.py",
        "reports/imports/nvsmi_minutes.py",
        "reports/imports/slurm.py",
        "reports/imports/slurm_jobs.py",
        "reports/render/csv_arrow.py",
    ),
}

# Floors, lowest first: a module imports only modules on its own floor or below. A walk from a
# training step (tracker.lightning) to a row of the weekly JSON (reports.render.exports) goes
# down through these, never back up.
FLOORS: tuple[tuple[str, ...], ...] = (
    (
        "tracker.units",
        "tracker.metrics",
        "tracker.record",
        "tracker.paths",
        "tracker.owned",
        "tracker.carbon",
        "tracker.parsers",
        "tracker.text",
        "tracker.scheduler",
        "tracker.extras",
    ),
    (
        "tracker.cost",
        "tracker.throughput",
        "tracker.prices",
        "tracker.peaks",
        "tracker.ranks",
        "tracker.config",
        "tracker.diagnosis",
        "tracker.machine",
        "tracker.shares",
    ),
    ("tracker.gpu", "tracker.sinks", "tracker.store"),
    ("tracker.sampler",),
    ("tracker.figures",),
    ("tracker.session",),
    ("tracker.integrations",),
    (
        "tracker",
        "tracker.lightning",
        "tracker.pytorch_lightning",
        "tracker.transformers",
        "tracker.wandb",
        "tracker.tensorboard",
    ),
    ("reports.errors", "reports.weeks", "reports.rows", "reports.userfiles"),
    ("reports.kpi", "reports.data"),  # side by side: neither imports the other (a test below)
    ("reports.render",),
    ("reports.request",),
    (
        "reports.gputime",
        "reports.build",
        "reports.budgets",
        "reports.archive",
        "reports.jobs",
        "reports.sections",
    ),
    ("reports.service", "reports.demo", "reports.imports"),
    ("reports.cli_support",),  # what the commands share: the store, the settings, the sections
    ("reports.compare", "reports.ledger", "reports.listing", "reports.price_list"),  # commands
    ("reports", "reports.cli"),
)
"""An entry with a dot is a module or a package, its sub-modules with it (the longest entry that
matches wins); ``tracker`` and ``reports`` stand for their ``__init__`` alone, so that a new
module of either is on no floor until someone decides which."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


@cache
def imported(path: Path) -> frozenset[str]:
    """Every module ``path`` imports, at the top or inside a function (a lazy import is still a
    dependency); ``from pkg import sub`` counts as ``pkg.sub`` when ``sub`` is a module. Read
    once per run: each rule below walks every module's imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                names.add(sub if sub in modules() else node.module)
    return frozenset(names)


@cache
def graph() -> dict[str, frozenset[str]]:
    return {
        m: frozenset(n for n in imported(p) if n in modules() and n != m)
        for m, p in modules().items()
    }


def floor_of(module: str) -> int:
    best = None
    for i, floor in enumerate(FLOORS):
        for entry in floor:
            inside = module == entry or ("." in entry and module.startswith(entry + "."))
            if inside and (best is None or len(entry) > best[1]):
                best = (i, len(entry))
    assert best is not None, f"{module} is on no floor: add it to FLOORS"
    return best[0]


def test_every_module_is_on_a_floor_someone_gave_it() -> None:
    """A module of the packages' top level is on no floor until it is named; one of a
    sub-package takes its package's. Planted: a new top-level module fails."""
    for m in modules():
        floor_of(m)
    with pytest.raises(AssertionError, match=r"reports\.planted is on no floor"):
        floor_of("reports.planted")
    with pytest.raises(AssertionError, match=r"tracker\.planted is on no floor"):
        floor_of("tracker.planted")
    assert floor_of("reports.kpi.planted") == floor_of("reports.kpi")
    assert floor_of("tracker") == floor_of("tracker.lightning")


def architecture_floors() -> list[tuple[int, set[str]]]:
    """ARCHITECTURE.md's floors table: each row's number and modules (the backticked names)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    table = text.split("## Floors", 1)[1].split("| floor | modules |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"\| \d+ \|", line)]
    return [
        (
            int(row.split("|")[1]),
            {n for n in re.findall(r"`([a-z_.]+)`", row) if n.split(".")[0] in PACKAGES},
        )
        for row in rows
    ]


def test_the_floors_table_in_architecture_md_is_floors() -> None:
    """Row by row, its number and its modules (planted: a row renumbered, a module moved)."""
    assert architecture_floors() == [(i, set(floor)) for i, floor in enumerate(FLOORS)]


def test_tracker_never_imports_reports_or_report_libraries() -> None:
    for path in (ROOT / "tracker").rglob("*.py"):
        found = {n.split(".")[0] for n in imported(path)} & {
            "reports",
            "pandas",
            "numpy",
            "jinja2",
            "apscheduler",
            "matplotlib",
        }
        assert not found, f"{path.relative_to(ROOT)} imports {found}"


def test_one_module_per_outside_library() -> None:
    for path in modules().values():
        rel = str(path.relative_to(ROOT))
        tops = {n.split(".")[0] for n in imported(path)}
        for lib, owners in OWNERS.items():
            if lib in tops:
                ok = any(rel.startswith(o) if o.endswith("/") else rel == o for o in owners)
                assert ok, f"{rel} imports {lib}; only {', '.join(owners)} may"


def test_every_owner_exists_and_imports_its_library() -> None:
    for lib, owners in OWNERS.items():
        for owner in owners:
            files = list((ROOT / owner).rglob("*.py")) if owner.endswith("/") else [ROOT / owner]
            assert files and all(f.exists() for f in files), owner
            assert any(lib in {n.split(".")[0] for n in imported(f)} for f in files), (
                f"{owner} is named the owner of {lib} but does not import it"
            )


def test_no_import_cycles() -> None:
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_check_finds_a_planted_cycle(tmp_path: Path) -> None:
    # the walker must see a lazy import inside a function, or the cycle test proves nothing
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from tracker import session\n    return session\n")
    assert "tracker.session" in imported(a)


def test_the_data_layer_and_the_kpi_maths_never_import_each_other() -> None:
    """``reports.data`` is SQL that returns rows, ``reports.kpi`` maths on them: the types
    they share are ``reports.rows``'; what joins the two is ``reports.gputime``, above both."""
    across = [
        f"{m} imports {n}"
        for m, deps in graph().items()
        for n in deps
        for a, b in (("reports.data", "reports.kpi"), ("reports.kpi", "reports.data"))
        if (m == a or m.startswith(a + ".")) and (n == b or n.startswith(b + "."))
    ]
    assert not across, "\n".join(sorted(across))


def test_imports_only_go_down_the_floors() -> None:
    up = [
        f"{m} (floor {floor_of(m)}) imports {n} (floor {floor_of(n)})"
        for m, deps in graph().items()
        for n in deps
        if floor_of(n) > floor_of(m)
    ]
    assert not up, "\n".join(sorted(up))


def test_every_package_is_in_the_wheel() -> None:
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    packages = {
        module_name(p.parent / "__init__.py")
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("__init__.py")
    }
    assert packages <= listed, f"missing from [tool.setuptools] packages: {packages - listed}"


FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "glob", "mkdir"}
# the one place reports.render reads a file: the template loader, reading the installed templates
TEMPLATE_LOADER = ("reports.render.html", "_load_resource")


def file_calls(name: str, path: Path) -> set[str]:
    """The calls in module ``name`` (at ``path``) that open, list or make files, outside the
    template loader."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef) and (name, fn.name) == TEMPLATE_LOADER
        for node in ast.walk(fn)
    }
    calls = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and id(node) not in skipped
    }
    return calls & FILE_CALLS


def test_render_reads_no_store_and_opens_no_file() -> None:
    """reports.render turns a week's figures into bytes: it imports neither store, nor the
    reports' data layer, nor the archive, and opens no file but its templates."""
    forbidden = ("tracker.store", "reports.data", "reports.archive", "sqlalchemy")
    for name, path in modules().items():
        if not (name == "reports.render" or name.startswith("reports.render.")):
            continue
        for dep in imported(path):
            assert not any(dep == f or dep.startswith(f + ".") for f in forbidden), (
                f"{name} imports {dep}"
            )
        assert not file_calls(name, path), f"{name} calls {sorted(file_calls(name, path))}"


def test_the_file_check_sees_a_file_opened_outside_the_template_loader(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def _load_resource(p):\n    return p.read_text()\n\n"
        "def week(p):\n    with open(p) as f:\n        return f.read()\n"
    )
    assert file_calls("reports.render.html", planted) == {"open"}
    assert file_calls("reports.render.fmt", planted) == {"open", "read_text"}


def fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_importing_tracker_and_the_cli_is_light_and_does_nothing() -> None:
    code = (
        "import sys, tracker, tracker.session, tracker.gpu.nvml, tracker.sampler, reports.cli\n"
        "heavy = [m for m in ('torch','lightning','transformers','pandas','jinja2',"
        "'apscheduler','wandb','pynvml','sqlalchemy','tensorboard','matplotlib') "
        "if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    p = fresh_python(code)
    assert "HEAVY []" in p.stdout, p.stdout + p.stderr[-2000:]


@pytest.mark.trainer  # imports Lightning and transformers (~10 s)
def test_the_public_import_paths_still_work() -> None:
    code = (
        "from tracker import track, Session\n"
        "from tracker.wandb import WandbSink\n"
        "from tracker.tensorboard import TensorBoardSink\n"
        "from tracker.store import RunStore\n"
        "from tracker.sinks.wandb import WandbSink as W\n"
        "assert WandbSink is W and callable(track)\n"
        "import tracker.lightning, tracker.pytorch_lightning, tracker.transformers\n"
        "print('OK', tracker.lightning.GpuKpiCallback.__name__, "
        "tracker.transformers.GpuKpiCallback.__name__, RunStore.__name__)"
    )
    p = fresh_python(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "OK GpuKpiCallback GpuKpiCallback RunStore" in p.stdout


def time_literals(path: Path) -> list[str]:
    """The seconds of an hour or a day written as a number in ``path`` (not in a comment or a
    string): ``line: value``."""
    tree = ast.parse(path.read_text())
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and type(node.value) in (int, float)
        and node.value in (3600, 86400, 604800)
    ]


def test_the_seconds_of_an_hour_or_a_day_are_tracker_units_alone() -> None:
    """Conversions live in ``tracker.units`` (CONTRIBUTING.md): an hour's 3,600 seconds written
    inline elsewhere is a second copy of the rule (48 such once)."""
    inline = [
        f"{path.relative_to(ROOT)}:{where}"
        for name, path in modules().items()
        if name != "tracker.units"
        for where in time_literals(path)
    ]
    assert not inline, "\n".join(inline)


def test_the_literal_check_sees_an_inline_hour(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text('HOURS = 7200 / 3600.0  # "3600" in a comment or a string is no number\n')
    assert time_literals(planted) == ["1: 3600.0"]
