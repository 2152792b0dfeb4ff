"""The report's Arrow allocations come from a pool that hands freed pages back to the system."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from reports.data import arrow_pool


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process whose pool was never set by us; its pool as before afterwards."""
    before = pa.default_memory_pool()
    monkeypatch.setattr(arrow_pool, "_POOL_SET", [])
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    yield
    pa.set_memory_pool(before)


def jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


@pytest.mark.skipif(not jemalloc(), reason="this pyarrow is built without jemalloc")
@pytest.mark.usefixtures("pool")
def test_the_pool_is_jemallocs_once_and_buffers_made_before_are_freed_to_their_own() -> None:
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    held = pa.mimalloc_memory_pool().bytes_allocated()  # by others' arrays alive
    before = pa.array([1.5] * 1000)  # a buffer of mimalloc's
    assert pa.mimalloc_memory_pool().bytes_allocated() > held
    arrow_pool.use_returning_arrow_pool()
    assert pa.default_memory_pool().backend_name == "jemalloc"
    after = pa.array([2.5] * 1000)
    assert pa.jemalloc_memory_pool().bytes_allocated() >= after.nbytes
    del before  # freed to mimalloc, which it came from: no crash, nothing left counted
    assert pa.mimalloc_memory_pool().bytes_allocated() == held
    # once a process: a pool set since (by whoever embeds us) stays
    pa.set_memory_pool(pa.system_memory_pool())
    arrow_pool.use_returning_arrow_pool()
    assert pa.default_memory_pool().backend_name == "system"


@pytest.mark.usefixtures("pool")
def test_a_pool_the_user_named_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    pa.set_memory_pool(pa.system_memory_pool())  # as pyarrow read the variable at its start
    arrow_pool.use_returning_arrow_pool()
    assert pa.default_memory_pool().backend_name == "system"


def test_a_build_without_jemalloc_keeps_its_pool(
    pool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> pa.MemoryPool:
        raise pa.ArrowNotImplementedError("jemalloc support is not built")

    monkeypatch.setattr(pa, "jemalloc_memory_pool", missing)
    pa.set_memory_pool(pa.system_memory_pool())
    arrow_pool.use_returning_arrow_pool()
    assert pa.default_memory_pool().backend_name == "system"


def test_without_pyarrow_nothing_is_chosen_and_nothing_fails(
    pool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[reports]`` alone has no pyarrow: a week's read goes on without it."""
    pa.set_memory_pool(pa.system_memory_pool())
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # not installed
    arrow_pool.use_returning_arrow_pool()
    assert pa.default_memory_pool().backend_name == "system"


def test_a_week_read_sets_it(pool: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every report, live figure and budget reads its weeks through ``week_gpu_time``."""
    from reports import gputime

    calls: list[None] = []

    def load(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the read, after the pool")

    monkeypatch.setattr(gputime, "use_returning_arrow_pool", lambda: calls.append(None))
    monkeypatch.setattr(gputime, "load", load)
    with pytest.raises(RuntimeError, match="after the pool"):
        gputime.week_gpu_time(None, None, tz=None, now=None)  # type: ignore[arg-type]
    assert calls == [None]


def test_the_week_commands_are_commands() -> None:
    """What the command line chooses the pool for before pandas is imported: commands that
    exist (a renamed one would leave it to the first read of a week)."""
    import argparse

    from reports.cli import WEEK_COMMANDS, build_parser

    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) >= WEEK_COMMANDS, WEEK_COMMANDS - set(sub.choices)
    assert {"report", "serve", "runs", "budgets", "chargeback"} <= WEEK_COMMANDS


def test_a_week_command_allocates_from_jemalloc_from_its_start(tmp_path: Path) -> None:
    """In a process of its own (the pool is the process's): chosen before pandas is
    imported, so mimalloc never starts."""
    code = (
        "import sys, pyarrow as pa; from reports.cli import main; main(sys.argv[1:]);"
        "print(pa.default_memory_pool().backend_name, pa.mimalloc_memory_pool().max_memory())"
    )
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    argv = ["runs", "--store", f"sqlite:///{tmp_path / 'runs.db'}"]
    p = subprocess.run(
        [sys.executable, "-c", code, *argv], check=False, capture_output=True, text=True, env=env
    )
    backend, mimalloc_peak = p.stdout.split()[-2:]
    assert backend == ("jemalloc" if jemalloc() else "mimalloc"), (p.stdout, p.stderr)
    if jemalloc():
        assert mimalloc_peak == "0"
