"""Test helpers: read back what W&B (offline mode) and TensorBoard wrote to disk.

Tests import this module as ``import readers`` / ``from readers import read_wandb``: ``tests/``
has no ``__init__.py``, so pytest's default ``prepend`` import mode puts ``tests/`` on ``sys.path``
(for conftest.py and each test module) and this sibling module is importable by its bare name.

Known lossiness: wandb-core writes history values as JSON text only, so a logged ``1.0`` reads
back as the int ``1``; NaN/Infinity come back as floats.

* :func:`read_wandb` parses the ``run-<id>.wandb`` transaction log that ``wandb`` (0.31, via
  ``wandb-core``) writes in offline mode. 0.31 ships no Python reader for it, so the LevelDB-log
  framing is implemented here:

  - file header, 7 bytes: ``b":W&B"``, magic ``0xBEE1`` (uint16 LE), version ``0`` (uint8);
  - then 32 KiB blocks of records, each with a 7-byte header: CRC-32 (zlib/IEEE, over the type
    byte and then the payload; uint32 LE), payload length (uint16 LE), type (uint8:
    1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST). A block tail shorter than 7 bytes is zero padding.
    The first block is 7 bytes shorter because it holds the file header.
  - each reassembled payload is a serialized ``wandb.proto.wandb_internal_pb2.Record``.

* :func:`read_tensorboard` / :func:`read_tensorboard_text` use TensorBoard's own
  ``EventAccumulator`` with ``size_guidance`` 0 (keep everything).
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

__all__ = [
    "Page",
    "WandbRun",
    "find_wandb_file",
    "is_finite",
    "iter_wandb_records",
    "parse_html",
    "read_finished_wandb",
    "read_tensorboard",
    "read_tensorboard_text",
    "read_wandb",
    "write_wandb_log",
]

# -- W&B transaction log -----------------------------------------------------------------------

_FILE_HEADER = struct.Struct("<4sHB")  # ident, magic, version
_FILE_IDENT = b":W&B"
_FILE_MAGIC = 0xBEE1
_FILE_VERSION = 0
_REC_HEADER = struct.Struct("<IHB")  # crc32, length, type
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@dataclass
class WandbRun:
    """What one offline W&B run wrote, decoded from its ``.wandb`` file."""

    path: Path
    run_id: str | None = None
    project: str | None = None
    entity: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # define_metric records
    record_types: dict[str, int] = field(default_factory=dict)  # record kind -> count
    exit_code: int | None = None

    def series(self, key: str, step_key: str = "_step") -> list[tuple[Any, Any]]:
        """``[(row[step_key], row[key])]`` for every history row that has both keys."""
        return [(row[step_key], row[key]) for row in self.history if key in row and step_key in row]


def find_wandb_file(root: Path | str) -> Path:
    """The single ``*.wandb`` file anywhere under ``root`` (or ``root`` itself if it is one)."""
    root = Path(root)
    if root.is_file():
        return root
    found = sorted(p for p in root.rglob("*.wandb") if p.is_file())
    if len(found) != 1:
        raise AssertionError(f"expected exactly one .wandb file under {root}, found {found}")
    return found[0]


def _iter_payloads(data: bytes, *, check_crc: bool = True) -> Iterator[bytes]:
    # the package's reader of the framing, tolerant of a torn tail (a run still being written)
    from reports.imports.wandb_log import payloads

    return payloads(data, check_crc=check_crc, whole=False)


def iter_wandb_records(path: Path | str, *, check_crc: bool = True) -> Iterator[Any]:
    """Every ``wandb_internal_pb2.Record`` in a ``.wandb`` file (or the one under a directory)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = find_wandb_file(path).read_bytes()
    for payload in _iter_payloads(data, check_crc=check_crc):
        rec = pb.Record()
        rec.ParseFromString(payload)
        yield rec


def _loads(text: str) -> Any:
    # wandb writes NaN/Infinity/-Infinity as bare tokens; json.loads accepts them.
    return json.loads(text)


def _item_key(item: Any) -> str:
    # wandb-core writes every key as nested_key; a logged nested dict {"a": {"b": 1}} arrives as
    # nested_key ["a", "b"], flattened here as "a.b" (the W&B public API's convention).
    return ".".join(item.nested_key) if len(item.nested_key) else item.key


def _history_value(item: Any) -> Any:
    # Prefer the typed form (keeps 1.0 a float); fall back to the JSON form.
    kind = item.WhichOneof("value")
    if kind is None:
        return _loads(item.value_json) if item.value_json else None
    if kind == "none":
        return None
    if kind == "json":
        return _loads(item.json)
    return getattr(item, kind)  # boolean / integer / number / text


def _set_nested(target: dict[str, Any], item: Any, value: Any) -> None:
    if len(item.nested_key):
        *parents, last = item.nested_key
        node = target
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    else:
        target[item.key] = value


def _del_nested(target: dict[str, Any], item: Any) -> None:
    keys = list(item.nested_key) if len(item.nested_key) else [item.key]
    node: Any = target
    for part in keys[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(keys[-1], None)


def _plain_config(value: Any) -> Any:
    # Older W&B config files nest each value as {"value": ..., "desc": ...}.
    if isinstance(value, dict) and "value" in value and set(value) <= {"value", "desc"}:
        return value["value"]
    return value


def read_wandb(run_dir_or_file: Path | str) -> WandbRun:
    """Decode an offline W&B run (its ``.wandb`` file, or any directory above exactly one)."""
    path = find_wandb_file(run_dir_or_file)
    run = WandbRun(path=path)

    def apply_config(cfg: Any) -> None:
        for item in cfg.update:
            _set_nested(run.config, item, _plain_config(_loads(item.value_json)))
        for item in cfg.remove:
            _del_nested(run.config, item)

    def apply_summary(summ: Any) -> None:
        for item in summ.update:
            _set_nested(run.summary, item, _loads(item.value_json))
        for item in summ.remove:
            _del_nested(run.summary, item)

    for rec in iter_wandb_records(path):
        kind = rec.WhichOneof("record_type")
        run.record_types[kind] = run.record_types.get(kind, 0) + 1
        if kind == "run":
            r = rec.run
            run.run_id = r.run_id or run.run_id
            run.project = r.project or run.project
            run.entity = r.entity or run.entity
            if r.HasField("config"):
                apply_config(r.config)
            if r.HasField("summary"):
                apply_summary(r.summary)
        elif kind == "history":
            row = {_item_key(item): _history_value(item) for item in rec.history.item}
            if "_step" not in row and rec.history.HasField("step"):
                row["_step"] = rec.history.step.num
            run.history.append(row)
        elif kind == "summary":
            apply_summary(rec.summary)
        elif kind == "config":
            apply_config(rec.config)
        elif kind == "alert":
            a = rec.alert
            run.alerts.append(
                {
                    "title": a.title,
                    "text": a.text,
                    "level": a.level,
                    "wait_duration": a.wait_duration,
                }
            )
        elif kind == "metric":
            m = rec.metric
            run.metrics.append(
                {"name": m.name, "glob_name": m.glob_name, "step_metric": m.step_metric}
            )
        elif kind == "exit":
            run.exit_code = rec.exit.exit_code
    return run


# -- TensorBoard --------------------------------------------------------------------------------


def _event_dirs(logdir: Path | str) -> list[Path]:
    logdir = Path(logdir)
    dirs = sorted({p.parent for p in logdir.rglob("*tfevents*") if p.is_file()})
    return dirs


def _accumulators(logdir: Path | str) -> Iterator[tuple[str, Any]]:
    """(run name relative to logdir, loaded EventAccumulator) for each dir holding event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = Path(logdir)
    for d in _event_dirs(logdir):
        # size_guidance 0 = keep every event (the default keeps 10,000 scalars per tag).
        acc = EventAccumulator(str(d), size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        rel = d.relative_to(logdir).as_posix()
        yield ("" if rel == "." else rel), acc


def _tag(run: str, tag: str) -> str:
    return tag if not run else f"{run}/{tag}"


def read_tensorboard(logdir: Path | str) -> dict[str, list[tuple[int, float]]]:
    """Scalars from every event file under ``logdir``: tag -> [(step, value)] in write order.

    Event files in a subdirectory ``sub`` of ``logdir`` (e.g. ``add_scalars``' per-series
    writers) get their tags prefixed with ``sub/``. Scalars stored either as legacy ``simple_value``
    summaries or as scalar tensors (plugin ``scalars``) are both returned.
    """
    from tensorboard.util import tensor_util

    out: dict[str, list[tuple[int, float]]] = {}
    for run, acc in _accumulators(logdir):
        tags = acc.Tags()
        for tag in tags.get("scalars", []):
            out.setdefault(_tag(run, tag), []).extend(
                (int(e.step), float(e.value)) for e in acc.Scalars(tag)
            )
        for tag in tags.get("tensors", []):
            meta = acc.SummaryMetadata(tag)
            if meta.plugin_data.plugin_name not in ("scalars", ""):
                continue
            values = []
            for e in acc.Tensors(tag):
                arr = tensor_util.make_ndarray(e.tensor_proto)
                if arr.size != 1 or arr.dtype.kind not in "fiub":
                    break
                values.append((int(e.step), float(arr.reshape(()))))
            else:
                out.setdefault(_tag(run, tag), []).extend(values)
    for series in out.values():
        series.sort(key=lambda sv: sv[0])  # stable: equal steps keep write order
    return out


def read_tensorboard_text(logdir: Path | str) -> dict[str, list[str]]:
    """Text summaries (``add_text``, plugin ``text``) under ``logdir``: tag -> [text, ...].

    ``SummaryWriter.add_text("verdict", ...)`` stores the tag as ``"verdict/text_summary"``.
    """
    from tensorboard.util import tensor_util

    out: dict[str, list[str]] = {}
    for run, acc in _accumulators(logdir):
        for tag in acc.Tags().get("tensors", []):
            if acc.SummaryMetadata(tag).plugin_data.plugin_name != "text":
                continue
            texts = out.setdefault(_tag(run, tag), [])
            for e in sorted(acc.Tensors(tag), key=lambda ev: ev.step):
                arr = tensor_util.make_ndarray(e.tensor_proto)
                for v in arr.reshape(-1):
                    texts.append(v.decode("utf-8") if isinstance(v, bytes) else str(v))
    return out


def is_finite(value: Any) -> bool:
    """True for a real, finite number (handy when asserting on decoded W&B values)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_finished_wandb(root: Path | str, timeout_s: float = 20.0) -> WandbRun:
    """:func:`read_wandb` once wandb-core has written the run out: ``wandb.finish()`` (0.31) can
    return while the ``.wandb`` file still holds only its 7-byte header."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        run = read_wandb(root)
        if run.exit_code is not None or time.monotonic() > deadline:
            return run
        time.sleep(0.05)


# -- HTML ----------------------------------------------------------------------------------------
VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


@dataclass
class Page(HTMLParser):
    tags: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    stack: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack[-1:] != ["style"]:
            self.text.append(data)

    def all(self, tag: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag]

    def ids(self) -> set[str]:
        return {a["id"] for _, a in self.tags if "id" in a}

    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())


def parse_html(doc: str) -> Page:
    """A tiny DOM of ``doc``: elements with attributes, text, and a check that tags nest."""
    page = Page()
    page.feed(doc)
    page.close()
    assert page.errors == [] and page.stack == [], (page.errors, page.stack)
    return page


def write_wandb_log(path: Path | str, records: list[Any]) -> None:
    """Write ``wandb_internal_pb2.Record`` messages as a ``.wandb`` file, in the framing
    described above (chunks split across 32 KiB blocks): for tests that add to a log the real
    ``wandb`` package wrote what it cannot write on a machine without a GPU."""
    out = bytearray(_FILE_HEADER.pack(_FILE_IDENT, _FILE_MAGIC, _FILE_VERSION))
    for rec in records:
        payload = rec.SerializeToString()
        first = True
        while True:
            left = _BLOCK - len(out) % _BLOCK
            if left < _REC_HEADER.size:
                out += bytes(left)
                continue
            room = left - _REC_HEADER.size
            chunk, payload = payload[:room], payload[room:]
            kind = (
                (_FULL if not payload else _FIRST) if first else (_LAST if not payload else _MIDDLE)
            )
            crc = zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
            out += _REC_HEADER.pack(crc, len(chunk), kind) + chunk
            first = False
            if not payload:
                break
    Path(path).write_bytes(bytes(out))
