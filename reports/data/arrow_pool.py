"""Which pool Arrow allocates from in the report's process. This module imports nothing but
pyarrow (and that only when called): the command line calls it before pandas is imported."""

from __future__ import annotations

import os

_POOL_SET: list[bool] = []
"""Whether :func:`use_returning_arrow_pool` has run in this process (once is enough)."""


def use_returning_arrow_pool() -> None:
    """Arrow's allocations from here on from jemalloc's pool, which hands freed pages back to
    the system sooner, where pyarrow is installed and has it; once per process, and never
    where ``ARROW_DEFAULT_MEMORY_POOL`` names the pool (the user's choice).

    pyarrow's default on Linux, mimalloc, keeps what a report's frames freed as the process's
    own while the next step grows: the report of a week of a million runs peaked at 1.40-1.43
    GiB with it, 1.35-1.39 GiB with jemalloc's pool from the first read of a week, 1.31-1.33
    GiB with it from before pandas is imported (mimalloc then never starts); 101,000 runs
    took 5% less time (``docs/benchmarks.md``). A buffer allocated before is freed to its
    own pool, as before."""
    if _POOL_SET:
        return
    _POOL_SET.append(True)
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    try:
        import pyarrow as pa
    except ImportError:  # [reports] without pyarrow: pandas keeps text in Python objects
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # a build without jemalloc (Windows): its default stays
        pass
