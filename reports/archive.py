"""The report archive on disk: one folder of week files (``<YYYY-Www>.<suffix>``: html, eml,
json, csv), team pages under ``teams/<slug>/`` (:func:`reports.render.email.team_folder`), and
``index.html``, the multi-week index built from the week JSON files gpu-kpi wrote.

Writes are all or none: every file is written into a temporary folder inside the archive, then
moved into place (``os.replace`` each, the index last): an error before the moves (a full disk,
a failing renderer) changes nothing of the archive and the temporary folder is removed. The
moves are renames in one folder, which take no space.

Which files are ours (:func:`read_archive`): a name ``YYYY-Www.json`` of a week that exists,
JSON of an object whose ``week`` is that name, whose ``headline`` has every index figure as a
number or null, and whose ``generator`` is ``gpu-kpi``. Archives written before the
``generator`` mark have none: they are taken when their ``schema`` is a ``gpu-kpi.week/…`` id
(every version wrote one) and the rest holds. Any other ``*-W*.json`` is left out, counted and
named on the page; a JSON file whose name does not look like a week is not looked at.
Whatever reading or interpreting such a file raises (JSON nested too deep for the parser, a
number no float holds, a file too big for memory) leaves it out with the reason: a file that
is not ours never stops the report.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Protocol

from reports.errors import ReportError
from reports.render.exports import GENERATOR, SCHEMA
from reports.render.index import HEADLINE_INDEX_FIELDS, LeftOut
from reports.weeks import WeekError, parse_week
from tracker.text import one_line

log = logging.getLogger("gpu_kpi")

_ARCHIVE_NAME = re.compile(r"^(\d{4}-W\d{2})\.json$")
_SO_FAR_NAME = re.compile(r"^(\d{4}-W\d{2})-so-far\.json$")
"""A week under way's own files (``gpu-kpi report --week current``): ours, never a week."""


def week_file(label: str, suffix: str) -> str:
    """The archive's name of a week's file: ``2026-W48.html``.

    Args:
        label: The week, ``YYYY-Www`` (or ``index``).
        suffix: ``html``, ``eml``, ``json`` or ``csv``.

    Returns:
        The file name, without a folder.
    """
    return f"{label}.{suffix}"


def is_archived(out_dir: Path, label: str) -> bool:
    """Whether the archive in ``out_dir`` holds the week ``label`` (its JSON).

    Args:
        out_dir: The archive folder.
        label: The week, ``YYYY-Www``.

    Returns:
        True when ``<label>.json`` is there.
    """
    return (out_dir / week_file(label, "json")).exists()


# -- reading the archive back ------------------------------------------------------------------
def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")  # NaN, Infinity: JSON has none


def _index_number(v: object) -> bool:
    """Whether ``v`` can be an index figure: null, or a number a float holds (JSON's
    ``1`` followed by 400 zeros is a Python int no float can be)."""
    if v is None:
        return True
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _week_row(name: str, text: str) -> dict[str, Any]:
    """The index row of the archived week JSON ``text`` named ``name``; ValueError with the
    reason when it is not one of ours."""
    label = _ARCHIVE_NAME.match(name)
    if label is None:
        raise ValueError("name is not YYYY-Www.json")
    try:
        parse_week(label.group(1))
    except WeekError:
        raise ValueError("no such week") from None
    try:
        d = json.loads(text, parse_constant=_no_constant)
    except ValueError:
        raise ValueError("not JSON") from None
    except RecursionError:  # e.g. '[' * 100000: nested deeper than the parser goes
        raise ValueError("not JSON (nested too deep)") from None
    if not isinstance(d, dict):
        raise ValueError("not a gpu-kpi week report")
    generator, schema = d.get("generator"), d.get("schema")
    legacy = (
        "generator" not in d
        and isinstance(schema, str)
        and schema.startswith(SCHEMA.rsplit("/", 1)[0] + "/")
    )  # gpu-kpi.week/…
    if generator != GENERATOR and not legacy:
        raise ValueError("not a gpu-kpi week report")
    if d.get("week") != label.group(1):
        raise ValueError("its week is not its name")
    head = d.get("headline")
    if not isinstance(head, dict):
        raise ValueError("no headline")
    for f in HEADLINE_INDEX_FIELDS:
        if f not in head:
            raise ValueError(f"headline lacks {f}")
        if not _index_number(head[f]):
            raise ValueError(f"headline {f} is not a number")
    basis = d.get("basis_label")
    return {
        "label": label.group(1),
        "basis_label": basis if isinstance(basis, str) else None,
        **{f: head[f] for f in HEADLINE_INDEX_FIELDS},
    }


def read_archive(
    folder: Path,
    *,
    staged: Path | None = None,
) -> tuple[list[dict[str, Any]], list[LeftOut]]:
    """Read the archive's week JSON files back as index rows (see the module docstring).

    Args:
        folder: The archive folder.
        staged: A folder of files about to replace those of the same name in ``folder`` (read
            instead of them).

    Returns:
        The index rows of the weeks archived (with ``href`` where the week's HTML is there),
        and the ``*-W*.json`` files left out with the reason.
    """
    files = {p.name: p for p in folder.glob("*-W*.json")}
    pages = {p.name for p in folder.glob("*-W*.html")}
    if staged is not None:
        files.update({p.name: p for p in staged.glob("*-W*.json")})
        pages.update(p.name for p in staged.glob("*-W*.html"))
    # a week under way's files are ours: the newest (of a week not archived whole) is the
    # index's week under way, the others are just left alone
    under_way = sorted(m.group(1) for name in files if (m := _SO_FAR_NAME.match(name)))
    for label in under_way:
        del files[f"{label}-so-far.json"]
    weeks, left_out = [], []
    archived = {m.group(1) for name in files if (m := _ARCHIVE_NAME.match(name))}
    if under_way and under_way[-1] not in archived and f"{under_way[-1]}-so-far.html" in pages:
        weeks.append(
            {"label": under_way[-1], "so_far": True, "href": f"{under_way[-1]}-so-far.html"}
        )
    for name in sorted(files):
        try:
            text = files[name].read_text(encoding="utf-8")
            row = _week_row(name, text)
        except UnicodeDecodeError:
            left_out.append(LeftOut(name=name, reason="not JSON"))
            continue
        except OSError as e:
            left_out.append(LeftOut(name=name, reason=f"unreadable: {e.strerror or e}"))
            continue
        except ValueError as e:
            left_out.append(LeftOut(name=name, reason=str(e)))
            continue
        except Exception as e:  # not our file: whatever it raises, it is left out
            left_out.append(LeftOut(name=name, reason=f"unreadable ({type(e).__name__})"))
            continue
        if f"{row['label']}.html" in pages:
            row["href"] = f"{row['label']}.html"
        weeks.append(row)
    return weeks, left_out


# -- writing, all or none ---------------------------------------------------------------------
class Streamed(Protocol):
    """A file's content written as it is made (a week's CSV of a million runs), not held."""

    def write_to(self, f: IO[bytes]) -> None: ...


Content = bytes | Streamed
"""A file of the archive: its bytes, or what writes them."""

SUFFIX_ORDER = ("json", "csv", "parquet", "html", "eml")
"""The order :func:`write_archive` gives a week's paths in."""


def _write_new(path: Path, data: Content) -> None:
    """Write ``data`` to the new file ``path`` (mode 0666 less the umask, as ``open`` makes
    it), and to the disk: a full disk shows here, before any rename."""
    with open(path, "xb") as f:
        if isinstance(data, bytes):
            f.write(data)
        else:
            data.write_to(f)
        f.flush()
        os.fsync(f.fileno())


def check_out_dir(out_dir: Path) -> None:
    """Check, before anything is computed, that the report can be written to ``out_dir``: a
    folder this process may write in, or one it can make in the nearest folder above it that
    exists. Nothing is created.

    Args:
        out_dir: The archive folder.

    Raises:
        ReportError: It cannot (one line: ``cannot write the report to PATH: reason``).
    """
    there = out_dir
    while not there.exists() and there.parent != there:
        there = there.parent
    if not there.is_dir():
        what = "it is" if there == out_dir else f"{there} is"
        raise ReportError(f"cannot write the report to {out_dir}: {what} not a folder")
    if not os.access(there, os.W_OK | os.X_OK):
        where = "" if there == out_dir else f" in {there}"
        raise ReportError(f"cannot write the report to {out_dir}: permission denied{where}")


def write_archive(
    out_dir: Path,
    label: str,
    files: Mapping[str, Content],
    *,
    index: bool,
    later: Callable[[], Mapping[str, Content]] | None = None,
) -> list[Path]:
    """Write a week's files and the index into the archive, all or none (see the module
    docstring).

    Args:
        out_dir: The archive folder (made when missing).
        label: The week, ``YYYY-Www`` (``index`` with no files: the index alone).
        files: Suffix (``html``, ``eml``, ``json``, ``csv``) → content.
        index: Whether to write ``index.html`` too, from every week archived (this one's files
            included).
        later: More files, made by this call while ``files`` are written in another thread
            (a week's CSV of 100,000 runs, 1.8 M lines, is written while its page is drawn:
            the CSV's work is Arrow's and the file's, which leave the GIL); None: none.

    Returns:
        The paths written (:data:`SUFFIX_ORDER`, then any other suffix), the index last.

    Raises:
        OSError: The folder cannot be written; the archive is left as it was.
        Exception: Whatever ``later`` raises; the archive is left as it was.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".gpu-kpi-{label}-", suffix=".tmp"))
    try:
        if later is None:
            _write_files(staging, label, files)
            more: Mapping[str, Content] = {}
        else:
            # the pool waits for the thread however ``later`` ends: nothing writes into the
            # folder once it is removed
            with ThreadPoolExecutor(1, thread_name_prefix="gpu-kpi-write") as pool:
                written = pool.submit(_write_files, staging, label, files)
                more = later()
                written.result()
            _write_files(staging, label, more)
        suffixes = sorted(
            [*files, *more],
            key=lambda s: SUFFIX_ORDER.index(s) if s in SUFFIX_ORDER else len(SUFFIX_ORDER),
        )
        names = [week_file(label, suffix) for suffix in suffixes]
        if index:
            from reports.render.index import render_index

            weeks, left_out = read_archive(out_dir, staged=staging)
            if left_out:
                log.warning(
                    "gpu-kpi: the index of %s leaves out %d file(s) that are not "
                    "gpu-kpi week reports: %s",
                    out_dir,
                    len(left_out),
                    one_line("; ".join(f"{f.name} ({f.reason})" for f in left_out)),
                )
            _write_new(staging / "index.html", render_index(weeks, left_out=left_out).encode())
            names.append("index.html")
        for name in names:  # the index last: it links the week's page
            os.replace(staging / name, out_dir / name)
        return [out_dir / name for name in names]
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_files(staging: Path, label: str, files: Mapping[str, Content]) -> None:
    """Each of ``files`` (suffix → content) into ``staging`` under its week's name."""
    for suffix, data in files.items():
        _write_new(staging / week_file(label, suffix), data)


def write_team_page(out_dir: Path, team: str, label: str, page: bytes) -> list[Path]:
    """Write a team's page of a week into its folder of the archive, all or none.

    Args:
        out_dir: The archive folder.
        team: The team's name (its folder is :func:`reports.render.email.team_folder`'s).
        label: The week, ``YYYY-Www``.
        page: The page's HTML.

    Returns:
        The path written: ``<out_dir>/teams/<slug>/<label>.html``.

    Raises:
        OSError: The folder cannot be written.
    """
    from reports.render.email import team_folder

    return write_archive(out_dir / team_folder(team), label, {"html": page}, index=False)
