"""The local spool: run-store writes that could not be sent, kept on disk until a flush replays
them, in order, into the store they were meant for. The tracker's background writer
(:mod:`tracker.store.writer`) spools what the store does not take.

**One spool per store.** A spool bound to a store (:meth:`Spool.for_store`, what the session
gives its writer) keeps its ops in ``stores/<key>/`` under the spool directory. ``<key>`` is
the first 32 hex digits of the SHA-256 of the store's URL without its password, normalized
(:func:`store_identity`), and ``stores/<key>/store.json`` holds that URL, so that ``gpu-kpi
sync`` can reconnect later: the password then comes from the environment or ``~/.pgpass`` as
always, or from the configured URL when that names the same store. Flushing a bound spool sends
its store's ops only, so a run spooled while store A was down never lands in store B;
:meth:`Spool.flush_all` sends each store's ops to their own store.

**Ops without a store** (written by versions before the key, at the top of the spool
directory) go to the first store a flush opens, as those versions did: nothing records which
store they were meant for, and the store in use now is the likeliest.

Files: one JSON-lines file per run (``<run>.jsonl``); each line is one op, ``run`` (a
:class:`RunRecord`) or ``samples`` (a list of :class:`MinuteSample`), datetimes as ISO 8601
strings (:mod:`tracker.store.spool_files`). Ops are idempotent upserts, so replaying one twice is
harmless; the spool still sends each op once.

A flush claims a run's file by renaming it to ``<run>.<claim ns>.<host>.<pid>.claimed``: an
append that comes later starts a new file, two flushers cannot both claim the same file, and a
file whose claimer died mid-send stays on disk for the next flush to take over. Flushes of one
spool directory also take turns through a lock file, so that a run's older ops are never sent
after its newer ones. Locking uses ``fcntl`` (Unix); without it, only ordering across
concurrent flushers is lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tracker.record import MinuteSample, RunRecord
from tracker.store.spool_files import (
    PENDING_SUFFIX,
    append_line,
    claim_name,
    claimer_gone,
    decode_line,
    encode_line,
    fcntl,
    file_key,
    flock_within,
    host,
    parse_claim,
    read_lines,
    run_key,
)
from tracker.text import one_line

__all__ = ["OPS", "Flushed", "RunSink", "Spool", "store_identity", "store_unavailable"]

logger = logging.getLogger("gpu_kpi")

OPS = ("run", "samples")
"""The ops a spool line can hold."""

_LOCK_NAME = ".flush.lock"
_REJECTED_NAME = ".rejected.jsonl"
_STORES = "stores"
_STORE_FILE = "store.json"
_STORE_KEY = re.compile(r"^[0-9a-f]{32}$")
# Serializes flushes between threads of this process (the lock file does it between processes).
_PROCESS_FLUSH_LOCK = threading.Lock()


class RunSink(Protocol):
    """What the spool replays into: a :class:`tracker.store.RunStore`, or a test double."""

    def upsert_run(self, record: RunRecord) -> None: ...

    def upsert_samples(self, rows: Sequence[MinuteSample]) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Flushed:
    """What :meth:`Spool.flush_all` did for one store: ``sent`` ops, ``left`` still spooled,
    and why not all, in one line (``error``: the store could not be reached or opened)."""

    url: str
    """The store's URL without its password."""
    sent: int
    left: int
    error: str | None = None


class Spool:
    """Pending run-store ops in ``directory`` (default ``<user data dir>/spool``, created on the
    first append). Safe to use from several threads and processes at once.

    With ``store_url`` the spool is that store's: it appends there and flushes only that
    store's ops (and those without a store). Without, it appends ops without a store, and
    :meth:`pending` and :meth:`has_pending` see every store's.

    ``lock_wait_s`` is how long a flush waits for another one on the same directory to finish
    before giving up and sending nothing.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        store_url: str | None = None,
        lock_wait_s: float = 10.0,
    ) -> None:
        if directory is None:
            from tracker.paths import data_dir

            directory = data_dir() / "spool"
        self.directory = Path(directory)
        self.lock_wait_s = lock_wait_s
        self.store_key: str | None = None
        self.set_aside_keys: set[str] = set()
        """The runs (:func:`run_key`) this spool set an op of aside, refused by the store."""
        self.store_url: str | None = None
        """The store's URL without its password (None: not bound to a store)."""
        if store_url is not None:
            self.store_key, self.store_url = store_identity(store_url)

    @classmethod
    def for_store(
        cls, url: str | None, directory: Path | None = None, *, lock_wait_s: float = 10.0
    ) -> Spool:
        """The spool of the store at ``url`` (None: :func:`tracker.store.default_store_url`)."""
        from tracker.store.engine import default_store_url

        return cls(
            directory,
            store_url=url if url is not None else default_store_url(),
            lock_wait_s=lock_wait_s,
        )

    def __repr__(self) -> str:
        store = f", store_url={self.store_url!r}" if self.store_url is not None else ""
        return f"Spool({str(self.directory)!r}{store})"

    def append(self, run_id: str, op: str, payload: RunRecord | Sequence[MinuteSample]) -> None:
        """Add one op for run ``run_id`` at the end of its file."""
        data = encode_line(run_id, op, payload)
        home = self.directory if self.store_key is None else self._store_dir(self.store_key)
        home.mkdir(parents=True, exist_ok=True)
        if self.store_url is not None and not (home / _STORE_FILE).exists():
            tmp = home / f".{_STORE_FILE}.{os.getpid()}.{threading.get_ident()}"
            tmp.write_text(json.dumps({"url": self.store_url}) + "\n")
            os.replace(tmp, home / _STORE_FILE)
        append_line(home / (run_key(run_id) + PENDING_SUFFIX), data)

    def pending(self) -> int:
        """Number of ops waiting to be sent, claimed ones included."""
        return sum(_count_ops(self._files(d)) for d in self._dirs())

    def has_pending(self, run_id: str | None = None) -> bool:
        """Whether any op (of run ``run_id``, when given) waits to be sent."""
        key = None if run_id is None else run_key(run_id)
        return any(
            key is None or file_key(path.name) == key
            for d in self._dirs()
            for path in self._files(d)
        )

    def flush(self, store: RunSink) -> int:
        """Send the pending ops meant for ``store``, each run's in the order appended, and delete
        what was sent: a bound spool's ops (into ``store`` whatever it is: also the way to send
        a lost store's ops elsewhere), an unbound spool's for the store at ``store.url`` when it
        has one; either way also the ops without a store.

        Returns the number of ops sent (0 from a directory another flush held for
        ``lock_wait_s``). Raises what the store raises; ops not yet sent stay in the spool.
        """
        key = self.store_key
        if key is None and isinstance(url := getattr(store, "url", None), str):
            key = store_identity(url)[0]
        dirs = [self.directory, *([self._store_dir(key)] if key is not None else [])]
        return sum(self._flush_dir(d, store) for d in dirs)

    def flush_all(
        self, open_store: Callable[[str], RunSink], default_url: str | None = None
    ) -> list[Flushed]:
        """Send every store's pending ops to that store (a bound spool: its own store's only):
        ``open_store(url)`` opens each; ``default_url`` (None: the default store) is the URL for
        the store it names, password included, and takes the ops without a store.

        One :class:`Flushed` per store that had ops, the default store first. A store that
        cannot be reached or opened keeps its ops (``error`` says why); any other error
        raises."""
        if default_url is None:
            from tracker.store.engine import default_store_url

            default_url = default_store_url()
        default_key, default_plain = store_identity(default_url)
        targets: dict[str, list[Path]] = {}
        if self._files(self.directory):
            targets[default_key] = [self.directory]
        for d in self._dirs()[1:]:
            if self._files(d):
                targets.setdefault(d.name, []).append(d)
        results = []
        for key, dirs in sorted(targets.items(), key=lambda kv: kv[0] != default_key):
            url = default_url if key == default_key else _stored_url(self._store_dir(key))
            plain = default_plain if key == default_key else store_identity(url or "")[1]
            sent, error = 0, None
            if url is None:
                plain, error = f"<store {key}>", f"no readable {_STORE_FILE}: unknown store"
            else:
                try:
                    store = open_store(url)
                    try:
                        for d in dirs:
                            sent += self._flush_dir(d, store)
                    finally:
                        with contextlib.suppress(Exception):
                            getattr(store, "close", lambda: None)()
                except Exception as e:
                    if not store_unavailable(e):
                        raise
                    error = one_line(e)
            left = sum(_count_ops(self._files(d)) for d in dirs)
            results.append(Flushed(url=plain, sent=sent, left=left, error=error))
        return results

    # -- internals ------------------------------------------------------------------------------

    def _store_dir(self, key: str) -> Path:
        return self.directory / _STORES / key

    def _dirs(self) -> list[Path]:
        """The directories this spool sees: the ops without a store first, then the stores'."""
        if self.store_key is not None:
            return [self.directory, self._store_dir(self.store_key)]
        try:
            entries = sorted(e.name for e in os.scandir(self.directory / _STORES) if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        return [self.directory, *(self._store_dir(n) for n in entries if _STORE_KEY.match(n))]

    @staticmethod
    def _files(directory: Path) -> list[Path]:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [Path(e.path) for e in entries if file_key(e.name) and e.is_file()]

    def _flush_dir(self, directory: Path, store: RunSink) -> int:
        if not directory.is_dir():
            return 0
        with self._flush_lock(directory) as locked:
            if not locked:
                return 0
            keys = sorted({k for k in (file_key(p.name) for p in self._files(directory)) if k})
            return sum(self._flush_run(directory, key, store) for key in keys)

    def _flush_run(self, directory: Path, key: str, store: RunSink) -> int:
        me, pid = host(), os.getpid()
        claims = sorted(
            (c for c in map(parse_claim, directory.glob(f"{key}.*.claimed")) if c),
            key=lambda c: c.ts_ns,
        )
        mine: list[Path] = []
        for claim in claims:
            if (claim.host, claim.pid) == (me, pid):
                mine.append(claim.path)
            elif claimer_gone(claim):
                taken = claim.path.with_name(claim_name(key, claim.ts_ns, me, pid))
                try:
                    os.rename(claim.path, taken)
                except FileNotFoundError:
                    continue
                mine.append(taken)
            else:
                # A live process holds older ops of this run; sending newer ones now would
                # put the run back in an older state when it sends those.
                return 0
        last_ts = claims[-1].ts_ns if claims else 0
        claimed = directory / claim_name(key, max(time.time_ns(), last_ts + 1), me, pid)
        try:
            os.rename(directory / (key + PENDING_SUFFIX), claimed)
            mine.append(claimed)
        except FileNotFoundError:
            pass
        sent = 0
        for path in mine:
            for line in read_lines(path):
                try:
                    op, payload = decode_line(line)
                    if op == "run":
                        store.upsert_run(payload)
                    else:
                        store.upsert_samples(payload)
                except Exception as e:
                    if store_unavailable(e):
                        raise
                    self._set_aside(directory, line, e)
                    self.set_aside_keys.add(key)
                    continue
                sent += 1
            path.unlink()
        return sent

    def _set_aside(self, directory: Path, line: bytes, exc: Exception) -> None:
        """Keep an op the store refused (or a line cut short by a crash) out of the way of the
        others, in ``.rejected.jsonl``, so that it cannot block the spool."""
        rejected = directory / _REJECTED_NAME
        append_line(rejected, line + b"\n")
        logger.warning(
            "gpu-kpi: set aside a spooled op the run store cannot take (%s) in %s",
            one_line(exc),
            rejected,
        )

    @contextlib.contextmanager
    def _flush_lock(self, directory: Path) -> Iterator[bool]:
        if not _PROCESS_FLUSH_LOCK.acquire(timeout=self.lock_wait_s):
            yield False
            return
        try:
            if fcntl is None:
                yield True
                return
            fd = os.open(directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                yield flock_within(fd, self.lock_wait_s)
            finally:
                os.close(fd)  # also releases the flock
        finally:
            _PROCESS_FLUSH_LOCK.release()


def store_identity(url: str) -> tuple[str, str]:
    """(key, URL without its password) of the store at ``url``. The URL is normalized as the
    store opens it (``postgres://`` as ``postgresql+psycopg://``, a relative SQLite path made
    absolute, a ``password`` query parameter dropped), so that every spelling of one store,
    with or without its password (or with ``***`` for it, as :attr:`RunStore.url` shows it),
    has one key: the first 32 hex digits of the normalized URL's SHA-256."""
    from tracker.store.engine import StoreError, mask_text, parse_url

    try:
        u = parse_url(url)
        u = u._replace(password=None).difference_update_query(["password"])
        db = u.database or ""
        if (
            u.get_backend_name() == "sqlite"
            and db
            and db != ":memory:"
            and not db.startswith("file:")
        ):
            u = u.set(database=os.path.abspath(db))
        plain = u.render_as_string(hide_password=False)
    except StoreError:  # not a URL the store can open: key it by its text, password masked
        plain = mask_text(url.strip(), None)
    return hashlib.sha256(plain.encode()).hexdigest()[:32], plain


def _stored_url(directory: Path) -> str | None:
    try:
        url = json.loads((directory / _STORE_FILE).read_text())["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return url if isinstance(url, str) else None


def _count_ops(files: list[Path]) -> int:
    count = 0
    for path in files:
        with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
            count += sum(1 for line in f if line.strip())
    return count


def store_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the store cannot be reached now (try later), rather than that it
    refused the op (a bug or bad data, which no retry fixes)."""
    from tracker.store import StoreError

    if isinstance(exc, StoreError):
        return not exc.refused  # a refused value is set aside, never retried in front of others
    return isinstance(exc, ConnectionError | TimeoutError)
