"""A SQLite file's rows read into Arrow by ADBC's SQLite driver (the ``adbc`` extra), in a
process of its own: :func:`read_table` runs this file as a script (:func:`main`), which writes
the rows as an Arrow IPC stream.

ADBC's driver carries its own copy of SQLite. Two copies of SQLite in one process break each
other's locks: POSIX locks belong to the process, so each copy believes it is alone. Closing
the driver's connection deletes the WAL and its shared memory under a connection of Python's
``sqlite3`` still open on them; opening one truncates the shared memory the other has mapped,
which dies of a bus error (seen in CI). So the driver's copy runs in a child process, never in
the process that holds the store open. As a script this file imports nothing of the project.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Any

log = logging.getLogger("gpu_kpi")

BATCH_ROWS_OPTION = "adbc.sqlite.query.batch_rows"
BATCH_ROWS = 1 << 30
"""One batch: the driver takes each column's type from its first batch and fails a later one
that differs (NULLs first: a number column read as int). A read this long is not taken."""

NANOARROW_BELOW_RUNS = 250_000
"""Below this many runs in the span read (the caller's count), the child writes its rows by
nanoarrow (:func:`_write_stream`), which starts in a fraction of pyarrow's time; from it, by
pyarrow: nanoarrow's writer held a copy of the batch, 861 MB of the child's memory against
485 MB for a million runs (the same 2.4-2.6 s), where at 101,000 both took 109 MB."""

TIMEOUT_S = 600.0
"""A read that takes longer is killed (a driver that hangs): the rows are read another way. A
million runs take ~10 s."""


def read_table(database: Path, sql: str, *, light: bool = False) -> Any:
    """The rows of ``sql`` from the SQLite file ``database``, opened read-only by ADBC's driver
    in a child process, as an Arrow table checked whole (text that is not UTF-8: the driver
    does not check it). The stream is read as it comes (held once, not twice).

    Args:
        database: The SQLite file.
        sql: One query.
        light: Whether the read is small enough for nanoarrow's writer in the child
            (:data:`NANOARROW_BELOW_RUNS`); else pyarrow's.

    Returns:
        The table; None where the child cannot run or takes over :data:`TIMEOUT_S`, or the
        driver fails (a column of values of two types, say: the caller reads the rows another
        way, which names what is wrong), or the table holds no row or is too long for one
        batch.
    """
    if not sys.executable:  # an embedded interpreter: no Python to start
        return None
    uri = f"file:{urllib.parse.quote(os.fsencode(database.resolve()))}?mode=ro"
    # -P: the child's path does not start with this folder (no module here shadows another)
    cmd = [sys.executable, "-P", __file__, uri, *(["--nanoarrow"] if light else [])]
    try:
        with (
            tempfile.TemporaryFile() as err,
            subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            ) as child,
        ):
            timer = threading.Timer(TIMEOUT_S, child.kill)
            timer.start()
            try:
                return _table(child, sql, err)
            finally:
                timer.cancel()
    except OSError as e:  # no interpreter to start, or it went away
        log.debug("gpu-kpi: read as rows, not by ADBC: %s", e)
        return None


def _table(child: subprocess.Popen[bytes], sql: str, err: Any) -> Any:
    """The table :func:`read_table`'s ``child`` writes, or None (its error logged)."""
    import pyarrow as pa

    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(sql.encode())  # a query: far under a pipe's buffer
    child.stdin.close()
    why = ""
    try:
        table = pa.ipc.open_stream(child.stdout).read_all()
        table.validate(full=True)
    except (pa.ArrowException, ValueError) as e:
        table, why = None, str(e)
        child.kill()  # it may be blocked writing what is no longer read
    status = child.wait()
    if status:  # the driver's error (or the timer's kill) says more than a cut stream
        err.seek(0)
        said = err.read().decode(errors="replace").strip()
        table, why = None, said or why or f"exit status {status}"
    if table is None:
        log.debug("gpu-kpi: read as rows, not by ADBC: %s", why)
        return None
    if not 0 < table.num_rows < BATCH_ROWS:
        return None
    return table


def main(argv: list[str]) -> int:
    """The child: ``python adbc_read.py URI [--nanoarrow]`` with the SQL on standard input;
    the rows on standard output as an Arrow IPC stream (written by nanoarrow where asked and
    installed, else by pyarrow). Exit status 0, or 1 with the driver's error on standard
    error."""
    # the driver's own API, not its DB-API module (which imports pandas: 1 s more a read)
    import adbc_driver_manager
    import adbc_driver_sqlite

    uri, *flags = argv
    light = flags == ["--nanoarrow"]
    sql = sys.stdin.buffer.read().decode()  # UTF-8, as the parent writes it
    try:
        with (
            adbc_driver_sqlite.connect(uri) as db,
            adbc_driver_manager.AdbcConnection(db) as conn,
            adbc_driver_manager.AdbcStatement(conn) as stmt,
        ):
            stmt.set_options(**{BATCH_ROWS_OPTION: str(BATCH_ROWS)})
            stmt.set_sql_query(sql)
            stream, _ = stmt.execute_query()
            _write_stream(stream, sys.stdout.buffer, light=light)
    except Exception as e:  # the driver's errors: the caller's own read names what is wrong
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


def _write_stream(stream: Any, out: Any, *, light: bool) -> None:
    """The driver's C stream written to ``out`` as an Arrow IPC stream: where ``light`` by
    nanoarrow, if installed (the ``adbc`` extra's: the child starts in ~0.05 s of CPU,
    against ~0.2 s with pyarrow, which also starts its thread pools; 101,000 runs read in
    0.30 s of the child's CPU, not 0.48), else by pyarrow, which writes a big batch without
    a copy (:data:`NANOARROW_BELOW_RUNS`). The same table either way to the reader."""
    na_ipc = _nanoarrow_ipc() if light else None
    if na_ipc is not None:
        writer = na_ipc.StreamWriter.from_writable(out)
        writer.write_stream(stream)
        writer.close()
        return
    import pyarrow as pa

    reader = pa.RecordBatchReader._import_from_c(stream.address)
    with pa.ipc.new_stream(out, reader.schema) as pa_writer:
        for batch in reader:
            pa_writer.write_batch(batch)


def _nanoarrow_ipc() -> Any:
    """``nanoarrow.ipc``, or None where nanoarrow is not installed."""
    try:
        import nanoarrow.ipc
    except ImportError:
        return None
    return nanoarrow.ipc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
