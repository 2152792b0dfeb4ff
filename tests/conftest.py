"""Shared test fixtures."""

from __future__ import annotations

import gc
import itertools
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from fakes import StoreTemplates
    from sqlalchemy.engine import URL, Engine


# no deadline per example: a busy machine (CI's two cores, two workers) is no reason to fail a
# property test, and no test asserts on the wall clock
settings.register_profile("gpu-kpi", deadline=None)
settings.register_profile("fast", parent=settings.get_profile("gpu-kpi"), max_examples=10)
# make test-fast: a tenth of the examples (see fakes.examples)
settings.load_profile("fast" if os.environ.get("GPU_KPI_TEST_FAST") == "1" else "gpu-kpi")


# -- the garbage collector: what the modules before left alive is not scanned again ------------

_frozen_for: list[Path] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """At a test module's first test, collect the garbage the module before left, then freeze
    what is still alive (the imported libraries, the collected tests, session fixtures): the
    cyclic collector's full passes then scan only what the tests since made. Those passes over
    pandas', SQLAlchemy's and matplotlib's objects cost seconds of CPU in the fast suite; an
    object a test makes is collected as ever."""
    if _frozen_for and _frozen_for[-1] == item.path:
        return
    _frozen_for[:] = [item.path]
    gc.collect()
    gc.freeze()


# -- temporary folders: numbered without listing the base folder -------------------------------

_numbers: dict[str, itertools.count[int]] = {}


def fresh_dir(factory: pytest.TempPathFactory, prefix: str) -> Path:
    """A new, empty folder ``PREFIX<n>`` under the session's base temporary folder, as
    ``factory.mktemp(prefix)`` makes it, without its cost: ``mktemp`` lists the whole base folder
    to find the next number, so each test's two folders (its ``tmp_path`` and its user dirs)
    cost time in proportion to the tests before it, seconds of CPU over the fast suite's ~1,600
    tests. Here the number is counted in this process (a folder already there, made by
    ``mktemp`` itself, is stepped over)."""
    base = factory.getbasetemp()
    count = _numbers.setdefault(prefix, itertools.count())
    while True:
        path = base / f"{prefix}{next(count)}"
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's ``tmp_path`` (a new, empty folder per test, named after the test and kept
    after the run), made by :func:`fresh_dir`."""
    name = re.sub(r"[\W]", "_", request.node.name)[:30]
    return fresh_dir(tmp_path_factory, name)


@pytest.fixture(autouse=True)
def _isolated_user_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads the developer's config or writes to their data dir (store, spool)."""
    from fakes import isolate_user_dirs

    isolate_user_dirs(monkeypatch, fresh_dir(tmp_path_factory, "xdg"))


# -- run store: one fresh store per test, on SQLite and on PostgreSQL ----------------------------
#
# PostgreSQL comes from $GPU_KPI_TEST_PG, else the server tests/pg-up.sh starts. Unreachable, its
# tests skip locally and fail in CI (CI=true). Each test gets its own database, dropped after.
# SQLAlchemy is imported inside the fixtures so that tests of `import tracker` stay honest.

_DEFAULT_TEST_PG = "postgresql://gpu_kpi:gpu_kpi@127.0.0.1:5432/gpu_kpi_test"


def _psycopg_url(url: str) -> URL:
    import sqlalchemy as sa

    parsed = sa.make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


@pytest.fixture(scope="session")
def pg_url() -> str:
    """URL of a PostgreSQL database whose role may CREATE DATABASE."""
    import sqlalchemy as sa

    url = os.environ.get("GPU_KPI_TEST_PG") or _DEFAULT_TEST_PG
    engine = sa.create_engine(_psycopg_url(url), connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as e:
        where = sa.make_url(url).render_as_string(hide_password=True)
        error = " ".join(str(getattr(e, "orig", None) or e).split())[:200]
        reason = f"PostgreSQL at {where} unreachable ({error}); run tests/pg-up.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    finally:
        engine.dispose()
    return url


@pytest.fixture(scope="session")
def _pg_admin(pg_url: str) -> Iterator[Engine]:
    import sqlalchemy as sa

    engine = sa.create_engine(
        _psycopg_url(pg_url), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
    )
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of a new, empty run store (no tables yet)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'runs.db'}"
        return
    import sqlalchemy as sa

    pg_url: str = request.getfixturevalue("pg_url")
    admin: Engine = request.getfixturevalue("_pg_admin")
    name = f"gpu_kpi_t_{uuid.uuid4().hex[:16]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    finally:
        # FORCE cannot end an autovacuum worker (the superuser's) that a test's writes woke on
        # this database: it ends within moments, so try again rather than fail the test
        for attempt in range(10):
            try:
                with admin.connect() as conn:
                    conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                break
            except sa.exc.DBAPIError:
                if attempt == 9:
                    raise
                time.sleep(0.5)


@pytest.fixture(scope="module")
def store_templates(tmp_path_factory: pytest.TempPathFactory) -> StoreTemplates:
    """Stores filled once for the module and copied for each test (:class:`StoreTemplates`)."""
    from fakes import StoreTemplates

    return StoreTemplates(tmp_path_factory)


# -- charts ------------------------------------------------------------------------------------


@pytest.fixture
def blank_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's charts as blank PNGs of their size, for tests of what the pages say and
    where they are written: drawing the five matplotlib charts costs more CPU than the rest of
    a report. The charts themselves are drawn and checked in ``tests/reports/render/``."""
    from fakes import draw_blank_charts

    draw_blank_charts(monkeypatch)


# -- the docs' examples, counted ------------------------------------------------------------------


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The count of the docs' examples (``tests/docs/``) at the end of a run that ran them: run,
    checked as synopses, and not run with each reason, so a growing list of marks is seen.
    Here, not in ``tests/docs/``: under pytest-xdist only this file's hooks run in the process
    that prints the summary."""
    if not any(
        "tests/docs/test_examples.py" in r.nodeid
        for reports in terminalreporter.stats.values()
        for r in reports
        if hasattr(r, "nodeid")
    ):
        return
    import importlib.util
    import sys
    from collections import Counter

    name = "gpu_kpi_docs_examples"  # tests/docs/examples.py, not on this process's path
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "docs/examples.py")
    assert spec is not None and spec.loader is not None
    examples = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(examples)
    root = Path(__file__).resolve().parents[1]
    found = [
        c
        for p in examples.pages(root)
        for c in examples.commands(p.relative_to(root).as_posix(), p.read_text())
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
