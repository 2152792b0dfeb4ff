"""Text columns through Arrow's compute kernels, where pyarrow is installed (the ``parquet``
or ``adbc`` extra): whether each value is among others, the order of distinct texts, blank
texts. A million run ids are hashed or sorted in C, not one Python object at a time. Each
function answers None where pyarrow is not installed or the values are not all text: the
caller then does it pandas' way, with the same answer. The one module of :mod:`reports.kpi`
that imports pyarrow."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pandas as pd

SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
"""Every character Python's ``str.isspace`` (and so ``str.strip``) takes for a space, as the
inside of a regular expression's class (RE2's ``\\s`` knows the ASCII ones alone); a test
holds it to Python's own."""


@cache
def available() -> bool:
    """Whether pyarrow is installed (its compute kernels); asked once, for the report's
    modules (:mod:`reports.render.csv_arrow` too)."""
    try:
        import pyarrow.compute  # noqa: F401
    except ImportError:
        return False
    return True


def _text(values: Any) -> Any:
    """``values`` (a Series, an Index, an array or a list) as one Arrow string array (missing
    values null), or None where they are not all text or missing."""
    import pyarrow as pa

    kind = getattr(values, "dtype", None)  # a list has none: Arrow says what it holds
    if kind is not None and kind != np.dtype(object) and not isinstance(kind, pd.StringDtype):
        return None
    try:
        arrow = pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return None
    if isinstance(arrow, pa.ChunkedArray):
        arrow = arrow.combine_chunks()
    if pa.types.is_large_string(arrow.type) or pa.types.is_null(arrow.type):
        arrow = arrow.cast(pa.string())  # (null: nothing but missing values)
    return arrow if pa.types.is_string(arrow.type) else None


def text_in(column: pd.Series, listed: Any) -> np.ndarray | None:
    """For each of ``column``, whether it is among ``listed``, as :meth:`pandas.Series.isin`
    answers: one hash table of ``listed``, probed in C. None where either side is not text, or
    both hold missing values (which pandas tells apart: None is not NaN).

    Args:
        column: The values to test.
        listed: What to look for (a Series, an Index, an array or a list).

    Returns:
        A boolean array, one per value of ``column``; or None (the caller asks pandas).
    """
    pair = _texts(column, listed)
    if pair is None:
        return None
    import pyarrow.compute as pc

    found = pc.is_in(pair[0], value_set=pair[1], skip_nulls=False)
    return found.to_numpy(zero_copy_only=False)


def text_positions(values: Any, among: Any) -> np.ndarray | None:
    """For each of ``values``, its position in ``among`` (-1: not there), as
    :func:`reports.kpi.frames.positions_in` answers: one hash table of ``among``, probed in C.
    None where either side is not text, or both hold missing values.

    Args:
        values: The keys to look up.
        among: The keys looked among (unique: a key twice is found at one of its places).

    Returns:
        Each value's position (int64), -1 where it is not there; or None (the caller asks
        pandas).
    """
    pair = _texts(values, among)
    if pair is None:
        return None
    import pyarrow.compute as pc

    found = pc.index_in(pair[0], value_set=pair[1], skip_nulls=True)
    return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _texts(values: Any, others: Any) -> tuple[Any, Any] | None:
    """``values`` and ``others`` as Arrow string arrays (:func:`_text`), for one side to be
    looked up in the other; None without pyarrow, where either is not text, or where both hold
    missing values (None, NaN and pd.NA are one null to Arrow, three values to pandas)."""
    if not available():
        return None
    a, b = _text(values), _text(others)
    if a is None or b is None or (a.null_count and b.null_count):
        return None
    return a, b


def text_order(distinct: Any) -> np.ndarray | None:
    """The order of distinct texts sorted as Python sorts them (by code point: Arrow
    compares UTF-8 bytes, which order as code points do).

    Args:
        distinct: Distinct values (objects, or a Series of text).

    Returns:
        The positions of ``distinct`` in sorted order (int64); None where they are not all
        text or one is missing, or without pyarrow.
    """
    if not available():
        return None
    import pyarrow.compute as pc

    text = _text(distinct)
    if text is None or text.null_count:
        return None
    return pc.sort_indices(text).to_numpy()


def blank(texts: np.ndarray) -> np.ndarray | None:
    """Whether each text (all of them ``str``) is empty or only spaces (``not t.strip()``),
    by one regular expression of :data:`SPACES`.

    Args:
        texts: The texts (objects, each a ``str``).

    Returns:
        A boolean array, one per text; None without pyarrow or where a text is no UTF-8 (a
        lone surrogate).
    """
    if not available():
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(texts):
        return np.zeros(0, dtype=bool)
    try:
        text = pa.array(texts, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):  # a lone surrogate: no UTF-8
        return None
    found = pc.match_substring_regex(text, f"^[{SPACES}]*$")
    return found.to_numpy(zero_copy_only=False)
