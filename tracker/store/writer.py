"""The tracker's background store writer: run records and minute samples go to the run store
from a daemon thread, and to the local spool (:mod:`tracker.store.spool`) whenever the store does not
take them. Nothing here raises into the training process."""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tracker.record import MinuteSample, RunRecord
from tracker.store.spool import RunSink, Spool, store_unavailable
from tracker.store.spool_files import run_key
from tracker.text import one_line

__all__ = ["StoreWriter"]

logger = logging.getLogger("gpu_kpi")

_Item = tuple[str, str, Any]  # (op, run id, RunRecord or list of MinuteSample)
_STOP = ("stop", "", None)


class StoreWriter:
    """Hands run records and minute samples to the run store from a daemon thread.

    ``store`` is a store URL (None: :func:`tracker.store.default_store_url`) or a function that
    opens a store. The store is opened in the thread, on the first op. Before each write the
    spool is flushed if it holds anything; an op the store does not take goes to ``spool``, with
    one warning on the ``gpu_kpi`` logger for the writer's whole life. After a failure the store
    is not tried again for ``retry_after_s`` seconds (by ``clock``, in seconds); ops go straight
    to the spool meanwhile. No method raises.
    """

    def __init__(
        self,
        store: str | Callable[[], RunSink] | None = None,
        *,
        spool: Spool | None = None,
        retry_after_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = store if callable(store) else functools.partial(_open_store, store)
        self._url = "" if callable(store) else store  # "": a store of the caller's making
        if spool is None:
            # a URL's (or the default store's) records are that store's; a factory's are kept
            # without a store, for whichever store a flush opens
            spool = Spool() if callable(store) else Spool.for_store(store)
        self._spool = spool
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._store: RunSink | None = None
        self._retry_at = float("-inf")
        self._warned = False
        self._spool_failed = False
        self._lost: set[str] = set()
        """Runs with an op neither the store nor the spool took."""
        self._lock = threading.Lock()
        self._closed = False
        self._abandoned = False  # close() timed out and took over the queue
        self._inflight: _Item | None = None
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="gpu-kpi-store", daemon=True)
        self._thread.start()

    def submit_run(self, record: RunRecord) -> None:
        """Queue an insert-or-replace of ``record``."""
        self._submit(("run", record.id, record))

    def submit_samples(self, rows: Sequence[MinuteSample]) -> None:
        """Queue an upsert of ``rows`` (one op per run among them)."""
        by_run: dict[str, list[MinuteSample]] = {}
        for row in rows:
            by_run.setdefault(row.run_id, []).append(row)
        for run_id, run_rows in by_run.items():
            self._submit(("samples", run_id, run_rows))

    def where(self, run_id: str) -> str:
        """Where the run's record is, after :meth:`close`: nowhere when an op of it reached
        neither the store nor the spool; the spool's set-aside file when the store refused an
        op; the local spool while the store could not take it; else the store (its URL, any
        password masked). Never raises."""
        try:
            if run_id in self._lost:
                return (
                    f"nowhere whole: the store was unreachable and the spool "
                    f"{self._spool.directory} could not be written (some of the run is lost)"
                )
            if run_key(run_id) in self._spool.set_aside_keys:
                return (
                    f"the run store in part: it refused some of the run, set aside in "
                    f"{self._spool.directory}"
                )
            if self._spool.has_pending(run_id):
                return (
                    f"the local spool {self._spool.directory}: the store was unreachable "
                    "(`gpu-kpi sync` sends it)"
                )
            if self._url == "":
                return "the run store"
            from tracker.store.engine import default_store_url, mask_url, parse_url

            return mask_url(parse_url(self._url or default_store_url()))
        except Exception:
            return "the run store"

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued, waiting at most ``timeout_s`` seconds; spool what is left."""
        try:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
            self._queue.put(_STOP)
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                return
            with self._lock:
                self._abandoned = True
                left = [self._inflight] if self._inflight is not None else []
                while not self._queue.empty():
                    left.append(self._queue.get_nowait())
                left = [item for item in left if item is not _STOP]
                self._queue.put(_STOP)  # for the thread, once the store lets it go
            # The op in flight may still reach the store too; sending it twice is harmless.
            for item in left:
                self._to_spool(item)
            self._warn(f"run store too slow, {len(left)} op(s) left after {timeout_s:g} s")
        except Exception:
            logger.debug("gpu-kpi: closing the store writer failed", exc_info=True)

    def _submit(self, item: _Item) -> None:
        try:
            with self._lock:
                closed = self._closed
            if closed:
                self._to_spool(item)
            else:
                self._queue.put(item)
        except Exception:
            logger.debug("gpu-kpi: queueing a store write failed", exc_info=True)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            with self._lock:
                if item is _STOP or self._abandoned:
                    break
                self._inflight = item
            try:
                self._write(item)
            except Exception:
                logger.debug("gpu-kpi: store writer error", exc_info=True)
            with self._lock:
                self._inflight = None
        try:
            # Ops left from a failed flush in this process are sent now rather than later; not
            # after close() gave up waiting, when the caller may be exiting.
            if self._store is not None and not self._abandoned and self._spool.has_pending():
                self._spool.flush(self._store)
        except Exception as e:
            self._store_failed(e)
        self._drop_store()

    def _write(self, item: _Item) -> None:
        op, run_id, payload = item
        if self._store is None and self._clock() >= self._retry_at:
            try:
                self._store = self._factory()
            except Exception as e:
                self._store_failed(e)
        if self._store is not None:
            try:
                if self._spool.has_pending():
                    self._spool.flush(self._store)
                # Ops of this run still in the spool (another flush holds them) must go first.
                if not self._spool.has_pending(run_id):
                    if op == "run":
                        self._store.upsert_run(payload)
                    else:
                        self._store.upsert_samples(payload)
                    return
            except Exception as e:
                if store_unavailable(e):
                    self._store_failed(e)
                # Otherwise the store refused the op: spooled, the next flush sets it aside.
        self._to_spool(item)

    def _store_failed(self, exc: Exception) -> None:
        self._drop_store()
        self._retry_at = self._clock() + self._retry_after_s
        self._warn(one_line(exc))

    def _drop_store(self) -> None:
        store, self._store = self._store, None
        close = getattr(store, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()

    def _warn(self, reason: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "gpu-kpi: run store unavailable (%s); keeping records in the spool %s, to be "
                "sent when it is back",
                reason,
                self._spool.directory,
            )

    def _to_spool(self, item: _Item) -> None:
        op, run_id, payload = item
        try:
            self._spool.append(run_id, op, payload)
        except Exception as e:
            self._lost.add(run_id)
            if not self._spool_failed:
                self._spool_failed = True
                logger.error(
                    "gpu-kpi: cannot write the spool %s; run records are lost: %s",
                    self._spool.directory,
                    one_line(e),
                )


def _open_store(url: str | None) -> RunSink:
    from tracker.store import RunStore

    return RunStore(url)
