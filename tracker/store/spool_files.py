"""The spool's files (:mod:`tracker.store.spool`): how an op is written as a JSON line, how a
run's file and a flusher's claim on it are named, and appends and reads under ``fcntl`` locks.
No policy here: which directory, which store and when is the spool's business."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from tracker.record import MinuteSample, RunRecord
from tracker.units import S_PER_HOUR

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

PENDING_SUFFIX = ".jsonl"
_CLAIMED = re.compile(r"^(?P<key>[^.]+)\.(?P<ts>\d+)\.(?P<host>[^.]+)\.(?P<pid>\d+)\.claimed$")
_MAX_KEY_LEN = 120
# A claim from another host cannot be checked for a live process; after this long it is taken.
_FOREIGN_CLAIM_STALE_S = S_PER_HOUR
_RUN_TIMES = ("started_at", "ended_at", "heartbeat_at")


class Claim(NamedTuple):
    path: Path
    key: str
    ts_ns: int
    host: str
    pid: int


def flock_within(fd: int, wait_s: float) -> bool:
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


def append_line(path: Path, data: bytes) -> None:
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


def read_lines(path: Path) -> list[bytes]:
    """The non-empty lines of a claimed spool file."""
    with path.open("rb") as f:
        if fcntl is not None:
            # Wait out an append that opened the file before it was claimed.
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        return [line for line in f.read().splitlines() if line.strip()]


def _is_at(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino)


def run_key(run_id: str) -> str:
    """A file-name-safe key for a run id, without dots (they separate a claim's fields)."""
    key = quote(run_id, safe="-_").replace(".", "%2E").replace("~", "%7E")
    if not key or len(key) > _MAX_KEY_LEN:
        key = "~" + hashlib.sha256(run_id.encode()).hexdigest()
    return key


def file_key(name: str) -> str | None:
    """The run key of a spool file name, or None for any other file."""
    if name.endswith(PENDING_SUFFIX):
        key = name[: -len(PENDING_SUFFIX)]
        return key if key and "." not in key else None
    match = _CLAIMED.match(name)
    return match["key"] if match else None


def claim_name(key: str, ts_ns: int, host: str, pid: int) -> str:
    return f"{key}.{ts_ns}.{host}.{pid}.claimed"


def parse_claim(path: Path) -> Claim | None:
    match = _CLAIMED.match(path.name)
    if match is None:
        return None
    return Claim(path, match["key"], int(match["ts"]), match["host"], int(match["pid"]))


def host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "localhost"


def claimer_gone(claim: Claim) -> bool:
    if claim.host != host():
        return (time.time_ns() - claim.ts_ns) / 1e9 > _FOREIGN_CLAIM_STALE_S
    try:
        os.kill(claim.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # e.g. PermissionError: the process exists under another user
        return False
    return False


def encode_line(run_id: str, op: str, payload: RunRecord | Any) -> bytes:
    """One op as a JSON line: ``run`` with a :class:`RunRecord`, ``samples`` with a sequence
    of :class:`MinuteSample`."""
    if op == "run" and isinstance(payload, RunRecord):
        body: Any = _encode(payload)
    elif op == "samples" and not isinstance(payload, RunRecord):
        body = [_encode(sample) for sample in payload]
    else:
        raise ValueError(f"spool op must be 'run' with a RunRecord or 'samples', not {op!r}")
    line = json.dumps({"op": op, "run_id": run_id, "payload": body}, separators=(",", ":"))
    return (line + "\n").encode()


def decode_line(line: bytes) -> tuple[str, Any]:
    entry = json.loads(line)
    op = entry["op"]
    if op == "run":
        return op, _decode_run(entry["payload"])
    if op == "samples":
        return op, [_decode_sample(row) for row in entry["payload"]]
    raise ValueError(f"unknown spool op {op!r}")


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
