"""The CSV's ``run`` lines made in Arrow, where pyarrow is installed (the ``parquet`` or
``adbc`` extra): a block of runs' lines is one element-wise join of the constants (the week,
the section, the metrics, the line ends) and the columns' cells, each run's lines one text,
and the block's text one buffer written at once. Sixteen million lines for a million runs,
with no Python code of their own per line or cell. Each cell is what
:func:`reports.render.exports._values` and :func:`csv.writer` (``excel``) make of the value:
the tests hold the two ways to the same bytes. Where pyarrow is not installed
(:func:`available`), :mod:`reports.render.exports` makes the lines itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from reports.kpi import arrow_text
from reports.render.csvsafe import FORMULA_START, QUOTED

POSITIONAL = (1e-4, 1e10)
"""Where Arrow and ``repr`` both write a float's shortest digits without an exponent: Arrow
from 1e10 on, ``repr`` below 1e-4 (and from 1e16) write one."""


def available() -> bool:
    """Whether pyarrow is installed, as :func:`reports.kpi.arrow_text.available` answers for
    the whole project (asked here by the CSV)."""
    return arrow_text.available()


def run_lines(
    part: pd.DataFrame,
    prefix: str,
    metrics: Sequence[tuple[str, str]],
    values_of: Callable[[pd.Series], list[Any]],
) -> memoryview:
    """A block of runs' lines as UTF-8: for each run (``part``'s rows, in order), a line per
    metric, ``prefix`` + the run's id cell + the metric's text + the value's cell + CRLF.

    Args:
        part: The runs, with ``run_id`` and the metrics' columns (a missing column: empty cells).
        prefix: The constant start of every line (``week,basis,run,``, already cells).
        metrics: Each metric's column and its text between the id and the value
            (``,gpu_hours,``).
        values_of: The cells of a column that is neither text nor numbers, as ``%s`` writes
            each (:func:`reports.render.exports._values`).

    Returns:
        The lines' UTF-8 bytes, CRLF-ended, a view of Arrow's buffer (no copy).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def large(value: Any) -> Any:  # 64-bit offsets: a block's text may pass 2 GiB
        if type(value) is str:
            return pa.scalar(value, pa.large_string())
        return value.cast(pa.large_string())

    start, end, none = large(prefix), large("\r\n"), large("")
    keys = large(cell_array(part["run_id"], values_of))
    pieces: list[Any] = []
    for column, text in metrics:
        values = part[column] if column in part.columns else None
        # a column no run of the block has a value of (MFU of imported runs): empty cells,
        # made once, not a cell a run
        empty = values is None or not values.notna().to_numpy().any()
        cells = none if empty else large(cell_array(values, values_of))
        pieces += [start, keys, large(text), cells, end]
    # each run's lines, one after another, as one text (the separator last, empty)
    lines = pc.binary_join_element_wise(*pieces, none)
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    n = len(part)
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)
    first, last = offsets[lines.offset], offsets[lines.offset + n]
    return memoryview(lines.buffers()[2])[first:last]


def cell_array(column: pd.Series, values_of: Callable[[pd.Series], list[Any]]) -> Any:
    """A column's cells as an Arrow string array, as ``%s`` makes each of ``values_of``'s
    values: text through :func:`text_cells`, numbers through :func:`number_cells`, other
    values (objects, mixed columns) through ``values_of`` itself."""
    import pyarrow as pa

    kind = column.dtype.kind if isinstance(column.dtype, np.dtype) else ""
    if pd.api.types.is_float_dtype(column):  # (a missing value of Float64: NaN, an empty cell)
        return number_cells(column.to_numpy(dtype=float, na_value=np.nan))
    if kind == "b":
        false = (~column.to_numpy(dtype=bool)).astype(np.int8)
        return pa.array(["True", "False"]).take(pa.array(false))
    if kind == "i":  # (unsigned, and pandas' nullable Int64 and boolean: values_of's way)
        return pa.array(column.to_numpy(dtype=np.int64)).cast(pa.string())
    if isinstance(column.dtype, pd.StringDtype) or (
        column.dtype == object and pd.api.types.infer_dtype(column) in ("string", "empty")
    ):
        text = pa.array(column, type=pa.string(), from_pandas=True)
        return text_cells(text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text)
    return pa.array([v if type(v) is str else str(v) for v in values_of(column)], pa.string())


def text_cells(text: Any) -> Any:
    """Text cells (a missing one empty): neutralized (:data:`FORMULA_START`), then quoted
    where a comma, a quote or a line break would otherwise end the cell; each distinct text
    once where few are (a million runs have a few teams, models and verdicts)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(text) > 64:
        coded = pc.dictionary_encode(text)
        if len(coded.dictionary) * 4 < len(text):
            cells = text_cells(coded.dictionary)
            return pc.fill_null(cells.take(coded.indices), pa.scalar("", pa.string()))
    formula = pc.starts_with(text, FORMULA_START[0])
    for first in FORMULA_START[1:]:
        formula = pc.or_(formula, pc.starts_with(text, first))
    if pc.any(formula).as_py():
        text = pc.if_else(formula, pc.binary_join_element_wise("'", text, ""), text)
    quoted = pc.match_substring_regex(text, QUOTED)
    if pc.any(quoted).as_py():
        doubled = pc.replace_substring(text, '"', '""')
        text = pc.if_else(quoted, pc.binary_join_element_wise('"', doubled, '"', ""), text)
    return pc.fill_null(text, pa.scalar("", pa.string()))


def number_cells(values: np.ndarray) -> Any:
    """Floats as cells, each as Python's ``repr`` writes it (``%s`` of a float), a non-finite
    one empty: Arrow's shortest round-trip digits (the same as ``repr``'s) where both write
    them without an exponent (:data:`POSITIONAL`), with ``.0`` added to a whole number;
    ``repr`` itself for the others (few figures of a week)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    finite = np.isfinite(values)
    magnitude = np.abs(np.where(finite, values, 0.0))
    low, high = POSITIONAL
    slow = (magnitude >= high) | ((magnitude < low) & (magnitude > 0))
    text = pa.array(values).cast(pa.string())
    whole = finite & ~slow & (values == np.trunc(np.where(finite, values, 0.0)))
    if whole.any():
        text = pc.if_else(pa.array(whole), pc.binary_join_element_wise(text, ".0", ""), text)
    if not finite.all():
        text = pc.if_else(pa.array(finite), text, pa.scalar("", pa.string()))
    at = np.flatnonzero(slow)
    if len(at):
        cells = text.to_numpy(zero_copy_only=False).astype(object)
        cells[at] = [repr(v) for v in values[at].tolist()]
        text = pa.array(cells, type=pa.string())
    return text
