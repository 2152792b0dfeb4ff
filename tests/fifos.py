"""A reader at a FIFO, for the tests of what gpu-kpi writes into one (``--out FIFO``, a FIFO as
``$GITHUB_STEP_SUMMARY``).

:class:`FifoReader` opens the FIFO when it is made, before the command runs (a writer that
finds nobody reading is refused, not kept waiting), and collects what is written on a thread
until the writer closes it. Where the writer never comes (a command that replaced the FIFO with a
file), the thread gives up after ``wait_s`` and :meth:`FifoReader.result` says None: the test
fails instead of hanging.
"""

from __future__ import annotations

import os
import select
import threading
from pathlib import Path


class FifoReader:
    """Whatever is written to the FIFO ``path`` from now until its writer closes it."""

    def __init__(self, path: Path, wait_s: float = 30.0) -> None:
        # O_NONBLOCK: opening for reading does not wait for a writer; Linux's poll then waits
        # for a writer's data (or its close), not for one to come
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self._wait_s = wait_s
        self._data: bytes | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        ready, _, _ = select.select([self._fd], [], [], self._wait_s)
        if not ready:
            os.close(self._fd)
            return
        os.set_blocking(self._fd, True)
        with open(self._fd, "rb") as f:
            self._data = f.read()

    def result(self) -> bytes | None:
        """What the writer wrote, once it closed the FIFO; None when no writer came."""
        self._thread.join()
        return self._data
