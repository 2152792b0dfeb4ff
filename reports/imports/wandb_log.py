"""W&B's run transaction log (``run-<id>.wandb``, written by ``wandb`` 0.31's ``wandb-core`` in
online and offline mode alike), read into what an import needs.

The framing is LevelDB's log format behind a 7-byte file header:

- the header: ``b":W&B"``, magic ``0xBEE1`` (uint16 LE), version ``0`` (uint8);
- then 32 KiB blocks of chunks, each with a 7-byte header: CRC-32 (zlib, over the type byte and
  then the payload; uint32 LE), payload length (uint16 LE), type (1 full, 2 first, 3 middle,
  4 last). A block tail shorter than 7 bytes is padding; the first block is 7 bytes shorter.
- each whole payload is a ``wandb.proto.wandb_internal_pb2.Record``.

A damaged file (bad header, a chunk whose CRC does not match, a chunk longer than its block
holds) is an :class:`reports.errors.ImportFailed` naming the file and the byte offset. A record
cut off at the end, as a killed run leaves it, is left out: the run is read up to there (and
without its exit record, it is ``crashed``); only the file's last block can end so.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.errors import ImportFailed
from tracker.extras import install_hint
from tracker.units import LAST_EPOCH_S

_FILE_HEADER = struct.Struct("<4sHB")  # ident, magic, version
_CHUNK_HEADER = struct.Struct("<IHB")  # crc32, length, type
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


class LogDamaged(ValueError):
    """The bytes are not a whole W&B transaction log; the message says where."""


def payloads(data: bytes, *, check_crc: bool = True, whole: bool = True) -> Iterator[bytes]:
    """Each record's bytes, in order. A chunk whose CRC does not match raises
    :class:`LogDamaged` (unless not ``check_crc``), and so does a record cut off at the end
    when the log must be ``whole``; otherwise that torn tail is left out (a run still being
    written)."""
    if len(data) < _FILE_HEADER.size:
        raise LogDamaged("not a W&B transaction log: too short")
    ident, magic, version = _FILE_HEADER.unpack_from(data, 0)
    if (ident, magic, version) != (b":W&B", 0xBEE1, 0):
        raise LogDamaged(f"not a W&B transaction log (header {ident!r} {magic:#x} v{version})")
    pos = _FILE_HEADER.size
    pending: bytearray | None = None
    while pos < len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _CHUNK_HEADER.size:  # padding at the end of a block
            pos += left_in_block
            continue
        if pos + _CHUNK_HEADER.size > len(data):
            if whole:
                raise LogDamaged(f"cut off at byte {pos} (a run still being written?)")
            return
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        start = pos + _CHUNK_HEADER.size
        end = start + length
        if kind == 0 and length == 0:  # a zeroed, preallocated tail
            pos += left_in_block
            continue
        room = left_in_block - _CHUNK_HEADER.size
        if length > room:  # no chunk crosses its block: a damaged length, never a torn tail
            raise LogDamaged(
                f"damaged at byte {pos} (a chunk of {length} bytes where its block has {room})"
            )
        if end > len(data):  # the file ends inside this block: its last record, torn
            if whole:
                raise LogDamaged(f"cut off at byte {pos} (a run still being written?)")
            return
        chunk = data[start:end]
        if check_crc and zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise LogDamaged(f"damaged at byte {pos} (checksum mismatch)")
        pos = end
        if kind == _FULL:
            pending = None
            yield bytes(chunk)
        elif kind == _FIRST:
            pending = bytearray(chunk)
        elif kind == _MIDDLE and pending is not None:
            pending += chunk
        elif kind == _LAST and pending is not None:
            pending += chunk
            yield bytes(pending)
            pending = None
        elif kind not in (_MIDDLE, _LAST):
            raise LogDamaged(
                f"damaged at byte {pos - length - _CHUNK_HEADER.size} (chunk type {kind})"
            )
    if pending is not None and whole:
        raise LogDamaged(f"cut off at byte {pos} (a run still being written?)")


def _json(text: str) -> Any:
    try:
        return json.loads(text)  # W&B writes NaN and Infinity as bare tokens: json takes them
    except ValueError:
        return None


def _key(item: Any) -> str:
    # wandb-core writes keys as nested_key; a nested {"a": {"b": 1}} reads as "a.b"
    return ".".join(item.nested_key) if len(item.nested_key) else item.key


def number(value: Any) -> float | None:
    """A finite number, or None (text, None, NaN, a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class WandbLog:
    """What one ``.wandb`` file says about its run."""

    path: Path
    run_id: str = ""
    entity: str = ""
    project: str = ""
    name: str = ""
    host: str = ""
    user: str = ""
    tags: list[str] = field(default_factory=list)
    start: float | None = None
    """Epoch seconds."""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    gpus: dict[int, tuple[str, str, float | None]] = field(default_factory=dict)
    """GPU index → (name, UUID, memory GiB) from the environment record."""
    gpu_type: str = ""
    stats: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    """W&B's system metrics: (epoch seconds, key → value), keys such as ``gpu.0.gpu``."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Logged rows (``_step``, ``_timestamp`` and the user's keys)."""
    exit_code: int | None = None
    runtime_s: float | None = None
    """The run's runtime from its exit record, seconds (start + runtime: when it ended)."""
    url: str = ""
    """The run's page when it came through W&B's API (then ``path`` is entity/project/id)."""
    no_time: list[str] = field(default_factory=list)
    """Where its samples whose time is no time were (left out): the import counts them."""


def _seconds(ts: Any) -> float | None:
    return ts.seconds + ts.nanos / 1e9 if ts.seconds or ts.nanos else None


def read_log(path: Path) -> WandbLog:
    """The run in one ``.wandb`` file. Raises :class:`ImportFailed` naming the file for a damaged
    one."""
    try:
        from wandb.proto import wandb_internal_pb2 as pb
    except ImportError:
        raise ImportFailed(
            f"reading W&B run logs needs W&B's record format: {install_hint('wandb')}"
        ) from None
    run = WandbLog(path)
    try:
        data = path.read_bytes()
        for payload in payloads(data, whole=False):  # a killed run's torn tail: the rest
            rec = pb.Record()  # type: ignore[attr-defined]  # generated, no stubs
            rec.ParseFromString(payload)
            _take(run, rec)
    except (LogDamaged, OSError) as e:
        raise ImportFailed(f"{path}: {e}") from None
    except Exception as e:  # protobuf's DecodeError and kin: the same damage, another layer
        raise ImportFailed(f"{path}: not a readable W&B record ({type(e).__name__}: {e})") from None
    _metadata(run, path.parent / "files" / "wandb-metadata.json")
    return run


MAX_METADATA_BYTES = 1 << 20
"""A ``wandb-metadata.json`` larger than this is not read (W&B writes a few KB)."""


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _metadata(run: WandbLog, path: Path) -> None:
    """What the run directory's ``files/wandb-metadata.json`` says of the GPUs, host and user,
    where the log has no environment record (older wandb versions write none; the record wins
    where both exist). Its keys across versions: ``gpu``/``gpu_count`` and per GPU
    ``gpu_nvidia`` (``gpuNvidia``) or ``gpu_devices``, each with ``name``, ``uuid`` and
    ``memory_total`` (``memoryTotal``, bytes, a number or its text). A missing or unreadable
    file says nothing."""
    try:
        if path.stat().st_size > MAX_METADATA_BYTES:
            return  # not W&B's: its metadata is a few KB
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return
    if not isinstance(meta, dict):
        return
    if not run.gpus:
        devices = next(
            (
                d
                for k in ("gpu_nvidia", "gpuNvidia", "gpu_devices")
                if isinstance(d := meta.get(k), list)
            ),
            [],
        )
        for i, gpu in enumerate(d for d in devices if isinstance(d, dict)):
            raw = gpu.get("memory_total", gpu.get("memoryTotal"))
            memory = number(raw) if not isinstance(raw, str) else number(_float_or_none(raw))
            run.gpus[i] = (
                str(gpu.get("name") or ""),
                str(gpu.get("uuid") or ""),
                memory / 2**30 if memory else None,
            )
    if not run.gpu_type and isinstance(meta.get("gpu"), str):
        run.gpu_type = meta["gpu"]
    if not run.host and isinstance(meta.get("host"), str):
        run.host = meta["host"]
    if not run.user and isinstance(meta.get("username"), str):
        run.user = meta["username"]


def _take(run: WandbLog, rec: Any) -> None:
    kind = rec.WhichOneof("record_type")
    if kind == "run":
        r = rec.run
        run.run_id, run.entity, run.project = r.run_id, r.entity, r.project
        run.name, run.host = r.display_name or run.name, r.host or run.host
        run.tags = list(r.tags)
        run.start = _seconds(r.start_time) or run.start
        for item in r.config.update:
            run.config[_key(item)] = _json(item.value_json)
    elif kind == "config":
        for item in rec.config.update:
            run.config[_key(item)] = _json(item.value_json)
    elif kind == "environment":
        env = rec.environment
        run.host, run.user = env.host or run.host, env.username or run.user
        run.gpu_type = env.gpu_type or run.gpu_type
        for i, gpu in enumerate(env.gpu_nvidia):
            run.gpus[i] = (gpu.name, gpu.uuid, gpu.memory_total / 2**30 or None)
    elif kind == "stats":
        t = _seconds(rec.stats.timestamp)
        if t is not None and not 0 <= t < LAST_EPOCH_S:  # a bad sample, not a bad file
            run.no_time.append(f"{run.path} (a system-metrics record at {t:.0f} s since 1970)")
        elif t is not None:
            run.stats.append((t, {i.key: _json(i.value_json) for i in rec.stats.item}))
    elif kind == "history":
        run.history.append(
            {_key(i): _json(i.value_json) if i.value_json else _typed(i) for i in rec.history.item}
        )
    elif kind == "summary":
        for item in rec.summary.update:
            run.summary[_key(item)] = _json(item.value_json)
    elif kind == "exit":
        run.exit_code = rec.exit.exit_code
        run.runtime_s = float(rec.exit.runtime) if rec.exit.runtime > 0 else None


def _typed(item: Any) -> Any:
    kind = item.WhichOneof("value")
    if kind is None or kind == "none":
        return None
    return _json(item.json) if kind == "json" else getattr(item, kind)
