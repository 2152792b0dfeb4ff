"""The local spool: run-store writes that could not be sent, kept on disk until
:meth:`Spool.flush` replays them, in order, into the store. The tracker's background writer
(:mod:`tracker.store.writer`) spools what the store does not take.

One JSON-lines file per run (``<run>.jsonl``); each line is one op, ``run`` (a
:class:`RunRecord`) or ``samples`` (a list of :class:`MinuteSample`), datetimes as ISO 8601
strings. Ops are idempotent upserts, so replaying one twice is harmless; the spool still
sends each op once.

A flush claims a run's file by renaming it to ``<run>.<claim ns>.<host>.<pid>.claimed``: an
append that comes later starts a new file, two flushers cannot both claim the same file, and a
file whose claimer died mid-send stays on disk for the next flush to take over. Flushes of one
spool directory also take turns through a lock file, so that a run's older ops are never sent
after its newer ones. Locking uses ``fcntl`` (Unix); without it, only ordering across
concurrent flushers is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote

from tracker.record import MinuteSample, RunRecord

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["OPS", "RunSink", "Spool", "one_line", "store_unavailable"]

logger = logging.getLogger("gpu_kpi")

OPS = ("run", "samples")
"""The ops a spool line can hold."""

_PENDING_SUFFIX = ".jsonl"
_CLAIMED = re.compile(r"^(?P<key>[^.]+)\.(?P<ts>\d+)\.(?P<host>[^.]+)\.(?P<pid>\d+)\.claimed$")
_LOCK_NAME = ".flush.lock"
_REJECTED_NAME = ".rejected.jsonl"
_MAX_KEY_LEN = 120
# A claim from another host cannot be checked for a live process; after this long it is taken.
_FOREIGN_CLAIM_STALE_S = 3600.0
_RUN_TIMES = ("started_at", "ended_at", "heartbeat_at")
# Serializes flushes between threads of this process (the lock file does it between processes).
_PROCESS_FLUSH_LOCK = threading.Lock()


class RunSink(Protocol):
    """What the spool replays into: a :class:`tracker.store.RunStore`, or a test double."""

    def upsert_run(self, record: RunRecord) -> None: ...

    def upsert_samples(self, rows: Sequence[MinuteSample]) -> None: ...


class _Claim(NamedTuple):
    path: Path
    key: str
    ts_ns: int
    host: str
    pid: int


class Spool:
    """Pending run-store ops in ``directory`` (default ``<user data dir>/spool``, created on the
    first append). Safe to use from several threads and processes at once.

    ``lock_wait_s`` is how long a flush waits for another one on the same directory to finish
    before giving up and sending nothing.
    """

    def __init__(self, directory: Path | None = None, *, lock_wait_s: float = 10.0) -> None:
        if directory is None:
            from tracker.paths import data_dir

            directory = data_dir() / "spool"
        self.directory = Path(directory)
        self.lock_wait_s = lock_wait_s

    def __repr__(self) -> str:
        return f"Spool({str(self.directory)!r})"

    def append(self, run_id: str, op: str, payload: RunRecord | Sequence[MinuteSample]) -> None:
        """Add one op for run ``run_id`` at the end of its file."""
        if op == "run" and isinstance(payload, RunRecord):
            body: Any = _encode(payload)
        elif op == "samples" and not isinstance(payload, RunRecord):
            body = [_encode(sample) for sample in payload]
        else:
            raise ValueError(f"spool op must be 'run' with a RunRecord or 'samples', not {op!r}")
        line = json.dumps({"op": op, "run_id": run_id, "payload": body}, separators=(",", ":"))
        self.directory.mkdir(parents=True, exist_ok=True)
        _append_line(self.directory / (_key(run_id) + _PENDING_SUFFIX), (line + "\n").encode())

    def pending(self) -> int:
        """Number of ops waiting to be sent, claimed ones included."""
        count = 0
        for path in self._files():
            with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
                count += sum(1 for line in f if line.strip())
        return count

    def has_pending(self, run_id: str | None = None) -> bool:
        """Whether any op (of run ``run_id``, when given) waits to be sent."""
        key = None if run_id is None else _key(run_id)
        return any(key is None or _file_key(path.name) == key for path in self._files())

    def flush(self, store: RunSink) -> int:
        """Send every pending op, each run's in the order appended, and delete what was sent.

        Returns the number of ops sent (0 when another flush of this directory held the lock
        for ``lock_wait_s``). Raises what the store raises; ops not yet sent stay in the spool.
        """
        if not self.directory.is_dir():
            return 0
        with self._flush_lock() as locked:
            if not locked:
                return 0
            keys = sorted({k for k in (_file_key(p.name) for p in self._files()) if k})
            return sum(self._flush_run(key, store) for key in keys)

    # -- internals ------------------------------------------------------------------------------

    def _files(self) -> list[Path]:
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        return [Path(e.path) for e in entries if _file_key(e.name)]

    def _flush_run(self, key: str, store: RunSink) -> int:
        host, pid = _host(), os.getpid()
        claims = sorted(
            (c for c in map(_parse_claim, self.directory.glob(f"{key}.*.claimed")) if c),
            key=lambda c: c.ts_ns,
        )
        mine: list[Path] = []
        for claim in claims:
            if (claim.host, claim.pid) == (host, pid):
                mine.append(claim.path)
            elif _claimer_gone(claim):
                taken = claim.path.with_name(_claim_name(key, claim.ts_ns, host, pid))
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
        claimed = self.directory / _claim_name(key, max(time.time_ns(), last_ts + 1), host, pid)
        try:
            os.rename(self.directory / (key + _PENDING_SUFFIX), claimed)
            mine.append(claimed)
        except FileNotFoundError:
            pass
        sent = 0
        for path in mine:
            for line in _read_lines(path):
                try:
                    op, payload = _decode(line)
                    if op == "run":
                        store.upsert_run(payload)
                    else:
                        store.upsert_samples(payload)
                except Exception as e:
                    if store_unavailable(e):
                        raise
                    self._set_aside(line, e)
                    continue
                sent += 1
            path.unlink()
        return sent

    def _set_aside(self, line: bytes, exc: Exception) -> None:
        """Keep an op the store refused (or a line cut short by a crash) out of the way of the
        others, in ``.rejected.jsonl``, so that it cannot block the spool."""
        rejected = self.directory / _REJECTED_NAME
        _append_line(rejected, line + b"\n")
        logger.warning(
            "gpu-kpi: set aside a spooled op the run store cannot take (%s) in %s", one_line(exc), rejected
        )

    @contextlib.contextmanager
    def _flush_lock(self) -> Iterator[bool]:
        if not _PROCESS_FLUSH_LOCK.acquire(timeout=self.lock_wait_s):
            yield False
            return
        try:
            if fcntl is None:
                yield True
                return
            fd = os.open(self.directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                yield _flock_within(fd, self.lock_wait_s)
            finally:
                os.close(fd)  # also releases the flock
        finally:
            _PROCESS_FLUSH_LOCK.release()


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _flock_within(fd: int, wait_s: float) -> bool:
    """Take an exclusive flock on ``fd``, waiting at most ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _append_line(path: Path, data: bytes) -> None:
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            # A flush may have claimed (renamed) the file between our open and our lock; it has
            # read that file already, so the line must go to a new one.
            if _is_at(fd, path):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
                return
        finally:
            os.close(fd)


def _read_lines(path: Path) -> list[bytes]:
    """The non-empty lines of a claimed spool file."""
    with path.open("rb") as f:
        if fcntl is not None:
            # Wait out an append that opened the file before it was claimed.
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        return [line for line in f.read().splitlines() if line.strip()]


def _decode(line: bytes) -> tuple[str, Any]:
    entry = json.loads(line)
    op = entry["op"]
    if op == "run":
        return op, _decode_run(entry["payload"])
    if op == "samples":
        return op, [_decode_sample(row) for row in entry["payload"]]
    raise ValueError(f"unknown spool op {op!r}")


def store_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the store cannot be reached now (try later), rather than that it
    refused the op (a bug or bad data, which no retry fixes)."""
    from tracker.store import StoreError

    return isinstance(exc, StoreError | ConnectionError | TimeoutError)


def _is_at(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino)


def _key(run_id: str) -> str:
    """A file-name-safe key for a run id, without dots (they separate a claim's fields)."""
    key = quote(run_id, safe="-_").replace(".", "%2E").replace("~", "%7E")
    if not key or len(key) > _MAX_KEY_LEN:
        key = "~" + hashlib.sha256(run_id.encode()).hexdigest()
    return key


def _file_key(name: str) -> str | None:
    """The run key of a spool file name, or None for any other file."""
    if name.endswith(_PENDING_SUFFIX):
        key = name[: -len(_PENDING_SUFFIX)]
        return key if key and "." not in key else None
    match = _CLAIMED.match(name)
    return match["key"] if match else None


def _claim_name(key: str, ts_ns: int, host: str, pid: int) -> str:
    return f"{key}.{ts_ns}.{host}.{pid}.claimed"


def _parse_claim(path: Path) -> _Claim | None:
    match = _CLAIMED.match(path.name)
    if match is None:
        return None
    return _Claim(path, match["key"], int(match["ts"]), match["host"], int(match["pid"]))


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "localhost"


def _claimer_gone(claim: _Claim) -> bool:
    if claim.host != _host():
        return (time.time_ns() - claim.ts_ns) / 1e9 > _FOREIGN_CLAIM_STALE_S
    try:
        os.kill(claim.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # e.g. PermissionError: the process exists under another user
        return False
    return False


def _encode(value: RunRecord | MinuteSample) -> dict[str, Any]:
    out = dataclasses.asdict(value)
    for name, item in out.items():
        if isinstance(item, datetime):
            out[name] = item.isoformat()
        elif isinstance(item, tuple):
            out[name] = list(item)
    return out


def _decode_run(data: dict[str, Any]) -> RunRecord:
    known = {f.name for f in dataclasses.fields(RunRecord)}
    values = {k: v for k, v in data.items() if k in known}
    for name in _RUN_TIMES:
        if values.get(name) is not None:
            values[name] = datetime.fromisoformat(values[name])
    values["tags"] = tuple(values.get("tags", ()))
    return RunRecord(**values)


def _decode_sample(data: dict[str, Any]) -> MinuteSample:
    known = {f.name for f in dataclasses.fields(MinuteSample)}
    values = {k: v for k, v in data.items() if k in known}
    values["minute"] = datetime.fromisoformat(values["minute"])
    return MinuteSample(**values)
