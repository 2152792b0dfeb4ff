"""Runs read as columns: the rows :meth:`reports.data.scans.SampleScans.run_rows` gives, as a
frame, with no record made per run (a week may hold a million). A row that is not surely as
the store writes it goes to :func:`reports.data.scans.records_of`, which names what is wrong."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from reports.data.scans import RUN_COLUMNS, TIME_COLUMNS
from reports.rows import NO_LINKS, TIME_DTYPE, links_text
from tracker.record import RunRecord
from tracker.store.schema import runs_table

_TIME_TEXT = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{6})?"
"""A time as the store writes it on SQLite (naive UTC); any other text is read by
:func:`reports.data.scans.records_of`."""

_STORE_TIME = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$"
"""Its form with the six digits of microseconds (``2026-11-25 10:00:00.000000``), as the store
always writes it: text order is time order for these."""

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
"""The same, as pandas parses it exactly (the store always writes the six digits)."""

_NO_TAGS = np.empty((), dtype=object)
_NO_TAGS[()] = ()
"""``()`` as a value numpy sets in many rows at once (not as a sequence of none)."""

_FLOAT_COLUMNS = tuple(col.name for col in runs_table.c if isinstance(col.type, sa.Float))


def run_columns(rows: Sequence[Sequence[Any]], *, nan: bool) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows of :meth:`reports.data.scans.SampleScans.run_rows` as columns: the frame of
    :func:`reports.kpi.runs_frame` (a :class:`RunRecord` field a column; times UTC, ``tags``
    tuples, ``links`` the JSON text of :func:`reports.rows.links_text`), with no record made
    on the way, and for each row whether it was read as the store writes it.

    Only what is surely so is taken: a time shaped as the store writes it (or a datetime the
    driver made), tags ``[]`` or a JSON list of strings, links ``{}`` or a JSON object of
    strings, no NaN in a number column (PostgreSQL's ``'NaN'``: NULL and NaN would look
    alike in a float column). A row that is not (False) is to be read by
    :func:`reports.data.scans.records_of`, which names what is wrong; its values in the frame
    mean nothing.

    Args:
        rows: The driver's tuples, in :data:`RUN_COLUMNS` order.
        nan: Whether the database holds NaN (PostgreSQL; SQLite keeps NULL for it).

    Returns:
        The frame (a row per row, in order) and the mask of rows read as the store writes them.
    """
    n = len(rows)
    if n:
        df = pd.DataFrame.from_records(rows, columns=list(RUN_COLUMNS), nrows=n)
    else:
        df = pd.DataFrame({c: pd.Series([], dtype=object) for c in RUN_COLUMNS})
    return _checked(df, rows if nan else None)


def arrow_run_columns(table: Any) -> tuple[pd.DataFrame, np.ndarray, np.ndarray] | None:
    """An Arrow table of :meth:`reports.data.scans.SampleScans.run_table` as
    :func:`run_columns` makes the same rows (the same frame, the same mask), ordered as
    :meth:`~reports.data.scans.SampleScans.run_rows` orders them, with no Python object per
    row on the way (but ``tags`` and ``links``).

    Args:
        table: The table (``rowid`` and :data:`RUN_COLUMNS`), or None (no table, None). It is
            used up a column at a time: pass it as the call's own value (``f(read())``), not
            a name the caller keeps, so that each column read is freed once converted.

    Returns:
        The frame, the mask of rows read as the store writes them, and each row's ``rowid``;
        None when the table's order cannot be SQLite's (a start that is not a time as the
        store writes it: text order is time order only for those) or it holds no row.
    """
    if table is None or not table.num_rows:
        return None
    import pyarrow as pa

    n = table.num_rows
    names = [name for name in table.column_names if name != "rowid"]
    columns = dict(zip(table.column_names, table.columns, strict=True))
    del table
    for col in TIME_COLUMNS:  # the store's times parsed in Arrow (the others read as before)
        times = _store_times(columns[col])
        if times is not None:
            columns[col] = times
    started = columns["started_at"]
    if started.null_count or not pa.types.is_timestamp(started.type):
        return None
    order = _start_order(started, columns["id"])
    del started
    # no value at all: as the driver's tuples make it, None in Python objects (never taken)
    empty = [name for name in names if columns[name].null_count == n]
    for name in empty:
        del columns[name]
    if order is not None:  # by start and id as SQLite orders them (text by its bytes)
        for name in list(columns):  # a column at a time: the one it replaces is freed
            columns[name] = columns[name].take(order)
    rowids = columns.pop("rowid").to_numpy()
    kept = pa.table(columns)
    columns.clear()
    df = kept.to_pandas(split_blocks=True, self_destruct=True)
    del kept
    # one column of None for all of them (a million runs: 8 MB, not 8 MB each): the frame
    # knows they share it, and a write to one copies that one first (copy on write)
    nothing = pd.Series(np.full(n if empty else 0, None, dtype=object), dtype=object)
    for col in empty:
        df[col] = nothing
    del nothing
    frame, ok = _checked(df[names], None)
    return frame, ok, rowids


def _store_times(column: Any) -> Any:
    """A column of text times as the store writes them on SQLite (each ``_TIME_FORMAT`` with
    its six digits, or missing) as Arrow's UTC timestamps, parsed in Arrow; None where any
    text is not (the frame's read parses or names those)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    if not text or column.null_count == len(column):
        return None
    shaped = pc.match_substring_regex(column, _STORE_TIME)
    if not pc.all(pc.or_kleene(shaped, pc.is_null(column))).as_py():
        return None
    try:  # a day or hour that is none (the 30th of February): the frame's read names it
        naive = pc.cast(column, pa.timestamp("us"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return pc.cast(naive, pa.timestamp("us", tz="UTC"))  # naive UTC, as the store writes it


_LINKS_TEXT = r"^\{(?:{s}: {s}(?:, {s}: {s})*)?\}$".replace(
    "{s}", r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\(?:["\\/bfnrt]|u[0-9a-f]{4}))*"'
)
"""A JSON object of strings with ``json.dumps``' separators (``", "``, ``": "``) and escapes
(ASCII): the store's links (:func:`reports.rows.links_text`), whatever the keys' order or
escapes; matched in Arrow, not parsed."""


def _json_values(texts: pd.Series) -> list[Any]:
    """Each text parsed as JSON; None for one that is no text or no JSON."""
    out: list[Any] = []
    for v in texts.to_numpy(dtype=object):
        try:
            out.append(json.loads(v) if type(v) is str else None)
        except Exception:  # not JSON, nested past the parser's depth (RecursionError)
            out.append(None)
    return out


def _links_texts(texts: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """The ``links`` column as the frame holds it (:func:`reports.rows.links_text`:
    the JSON text, no dict per run), and for each row whether it is a JSON object of strings.
    A text of :data:`_LINKS_TEXT` is kept as it is, matched, not parsed (in Arrow, for
    Arrow's strings); any other is parsed and written again as :func:`links_text` writes it."""
    # a column of no text (only NaN: pandas makes it float) has no string methods: each
    # value is looked at below, and the column made one of objects
    is_text = texts.dtype == object or isinstance(texts.dtype, pd.StringDtype)
    if is_text:
        shaped = texts.str.fullmatch(_LINKS_TEXT).to_numpy(dtype=bool, na_value=False)
    else:
        shaped = np.zeros(len(texts), dtype=bool)
    if shaped.all():
        return texts, shaped
    out = texts.to_numpy(dtype=object).copy()
    ok = shaped.copy()
    others = np.flatnonzero(~shaped)
    for i, value in zip(others, _json_values(texts.take(others)), strict=True):
        if type(value) is dict and all(type(v) is str for v in value.values()):
            out[i] = links_text(value)
            ok[i] = True
        else:
            out[i] = NO_LINKS  # the row is read by records_of, which names it
    return pd.Series(out, index=texts.index, dtype=texts.dtype if is_text else object), ok


def _start_order(started: Any, ids: Any) -> Any:
    """The order of the rows by start, then id (as :meth:`run_rows` reads them), or None
    where they are in it already (a store's rows, written as runs start, mostly are)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    step = np.diff(pc.cast(started, pa.int64()).to_numpy())
    if (step >= 0).all():
        ties = np.flatnonzero(step == 0)
        if not len(ties) or pc.all(pc.less(ids.take(ties), ids.take(ties + 1))).as_py():
            return None
    keys = pa.table({"started_at": started, "id": ids})
    return pc.sort_indices(keys, sort_keys=[("started_at", "ascending"), ("id", "ascending")])


def _checked(
    df: pd.DataFrame, rows: Sequence[Sequence[Any]] | None
) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`run_columns` of ``df``, the runs' columns as read; ``rows``: the driver's
    tuples where the database holds NaN (PostgreSQL), None where it does not."""
    n = len(df)
    nan = rows is not None
    ok = np.ones(n, dtype=bool)
    for col in TIME_COLUMNS:
        raw = df[col]
        missing = raw.isna().to_numpy()
        if missing.all():  # no time at all (no heartbeat, say): nothing to check
            df[col] = pd.Series(pd.NaT, index=df.index, dtype=TIME_DTYPE)
        elif pd.api.types.is_datetime64_any_dtype(raw):
            df[col] = pd.to_datetime(raw, utc=True).astype(TIME_DTYPE)
        elif isinstance(raw.dtype, pd.StringDtype):
            # text or missing (SQLite): the store's exact form parses, anything else is NaT
            parsed = pd.to_datetime(raw, format=_TIME_FORMAT, utc=True, errors="coerce")
            ok &= missing | parsed.notna().to_numpy()
            df[col] = parsed.astype(TIME_DTYPE)
        else:
            values = raw.to_numpy(dtype=object)
            datetimes = np.fromiter((isinstance(v, datetime) for v in values), bool, n)
            texts = np.fromiter((type(v) is str for v in values), bool, n)
            shaped = np.zeros(n, dtype=bool)
            if texts.any():
                shaped[texts] = pd.Series(values[texts], dtype=object).str.fullmatch(_TIME_TEXT)
            keep = shaped | datetimes
            parsed = pd.to_datetime(
                pd.Series(np.where(keep, values, None), dtype=object),
                utc=True,
                format="mixed",
                errors="coerce",
            )
            ok &= missing | (keep & parsed.notna().to_numpy())
            df[col] = parsed.astype(TIME_DTYPE).set_axis(df.index)
        if col == "started_at":
            ok &= ~missing  # a record without a start: read by records_of
    # tags: compared where the text is (Arrow's strings: no Python object per row)
    bare = (df["tags"] == "[]").to_numpy(dtype=bool, na_value=False)
    out = np.full(len(bare), None, dtype=object)
    out[bare] = _NO_TAGS  # one empty tuple for all
    others = np.flatnonzero(~bare)
    for i, value in zip(others, _json_values(df["tags"].take(others)), strict=True):
        if type(value) is not list or not all(type(t) is str for t in value):
            ok[i] = False
            continue
        out[i] = tuple(value)
    df["tags"] = pd.Series(out, dtype=object)
    df["links"], links_ok = _links_texts(df["links"])
    ok &= links_ok
    if nan:
        # NULL and NaN are both NaN in a float column: a NaN the driver gave is no NULL
        for col in _FLOAT_COLUMNS:
            if pd.api.types.is_float_dtype(df[col]):
                j = RUN_COLUMNS.index(col)
                for i in np.flatnonzero(df[col].isna().to_numpy()):
                    if rows is not None and rows[int(i)][j] is not None:
                        ok[i] = False
    return df[list(RunRecord.__dataclass_fields__)], ok
