"""Run keys looked up and ordered by :mod:`reports.kpi.frames` as pandas would (a text index's
``get_indexer``, ``factorize(sort=True)``, ``isin``), whatever holds the text (Arrow or
objects), with pyarrow's kernels (:mod:`reports.kpi.arrow_text`) and without them."""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from reports.kpi import arrow_text
from reports.kpi.frames import is_in, positions_in, sorted_codes, sorted_codes_at


@pytest.fixture(params=[True, False], ids=["arrow", "pandas"])
def arrow(request: pytest.FixtureRequest) -> Iterator[bool]:
    """With pyarrow's kernels, and as without pyarrow installed."""
    if request.param and not arrow_text.available():
        pytest.skip("no pyarrow")
    with mock.patch.object(arrow_text, "available", return_value=request.param):
        yield request.param


@pytest.mark.parametrize("dtype", ["str", object])
def test_a_key_s_position_is_the_index_s_and_a_missing_one_is_minus_one(
    dtype: object, arrow: bool
) -> None:
    among = pd.Series(["r3", "r1", "é", "r10"], dtype=dtype)
    values = pd.Series(["r10", "x", "r3", None, "é", "r3"], dtype=dtype)
    got = positions_in(values, among)
    assert got.dtype == np.int64
    assert got.tolist() == [3, -1, 0, -1, 2, 0]
    assert got.tolist() == pd.Index(among).get_indexer(values).tolist()


@pytest.mark.parametrize(
    ("values", "among", "want"),
    [
        # a missing key is found where the keys hold one (None and NaN alike)
        (pd.Series(["a", None], dtype=object), pd.Series(["b", np.nan, "a"], dtype=object), [2, 1]),
        (pd.Series([2, 7, 1]), pd.Series([1, 2, 3]), [1, -1, 0]),
        (pd.Series(["1", 1], dtype=object), pd.Series([1, "1"], dtype=object), [1, 0]),
    ],
)
def test_keys_not_all_text_are_found_as_pandas_finds_them(
    values: pd.Series, among: pd.Series, want: list[int], arrow: bool
) -> None:
    assert positions_in(values, among).tolist() == want


@pytest.mark.parametrize("dtype", ["str", object])
def test_keys_coded_by_their_places_are_coded_as_by_their_own_sort(
    dtype: object, arrow: bool
) -> None:
    # the runs' ids (one without a row: its code unused) and the rows' ids, as run_weeks has them
    among = pd.Series(["r2", "é", "r10", "unused", "B", "😀"], dtype=dtype)
    values = pd.Series(["😀", "r10", "r2", "B", "r10", "é", "r2"], dtype=object)
    at = positions_in(values, among)
    codes, keys = sorted_codes_at(values, at, among)
    assert [keys[c] for c in codes] == values.tolist()
    assert all(keys[c] is v for c, v in zip(codes, values, strict=True))  # the rows' objects
    # the same order as sorting the rows' own keys: the codes rank the keys alike
    want_codes, want_keys = sorted_codes(values)
    assert [k for k in keys if k is not None] == want_keys.tolist()
    assert (
        np.argsort(codes, kind="stable").tolist() == np.argsort(want_codes, kind="stable").tolist()
    )
    # a row whose key is not among them: coded by its own sort
    at[0] = -1
    assert sorted_codes_at(values, at, among)[0].tolist() == want_codes.tolist()


@pytest.mark.parametrize("dtype", ["str", object])
def test_keys_are_coded_in_the_order_python_sorts_them(dtype: object, arrow: bool) -> None:
    # code points, not bytes of a locale: "B" < "a" < "é" < "😀"; a missing key -1
    values = pd.Series(["é", "a", None, "B", "😀", "a", "a10", "a2"], dtype=dtype)
    codes, keys = sorted_codes(values)
    assert keys.tolist() == ["B", "a", "a10", "a2", "é", "😀"]
    assert codes.tolist() == [4, 1, -1, 0, 5, 1, 2, 3]
    want_codes, want_keys = pd.factorize(values, sort=True)
    assert codes.tolist() == want_codes.tolist() and keys.tolist() == list(want_keys)


def test_keys_that_are_not_all_text_are_sorted_by_pandas() -> None:
    codes, keys = sorted_codes(pd.Series([3, 1, 2, 1], dtype=object))
    assert keys.tolist() == [1, 2, 3] and codes.tolist() == [2, 0, 1, 0]


def test_no_keys_give_no_codes() -> None:
    codes, keys = sorted_codes(pd.Series([], dtype=object))
    assert len(codes) == 0 and len(keys) == 0
    assert positions_in(pd.Series([], dtype=object), pd.Series(["a"])).tolist() == []
    assert isinstance(positions_in(pd.Series(["a"]), pd.Series([], dtype=object)), np.ndarray)


@pytest.mark.parametrize(
    ("column", "values"),
    [
        (pd.Series(["a", None, "b", "c"], dtype=object), ["a", None]),
        (pd.Series(["a", None, "b"], dtype="str"), ["b"]),
        (pd.Series(["a", np.nan, "b"], dtype="str"), pd.Series([np.nan], dtype=object)),
        (pd.Series(["a", "b"], dtype="str"), set()),
        (pd.Series([1, 2, 3]), [2]),
        (pd.Series(["1", 2, "x"], dtype=object), ["1", 2]),
        (pd.Series([None, None], dtype=object), ["a"]),
        (pd.Series(["a", b"a"], dtype=object), ["a"]),
        (pd.Series(["a", None], dtype=object), np.array(["a"], dtype=object)),
        (pd.Series(["é", "a"], dtype="str"), frozenset(["é"])),
        # None, NaN and pd.NA: three values to pandas in objects, one null to Arrow
        (pd.Series(["a", None, np.nan, pd.NA], dtype=object), [np.nan]),
        (pd.Series(["a", None, np.nan], dtype=object), [None]),
        (pd.Series(["a", None], dtype=object), [pd.NA]),
    ],
)
def test_is_in_answers_as_pandas_isin(column: pd.Series, values: object, arrow: bool) -> None:
    # text on both sides by Arrow's hash table; numbers, bytes or mixed values by pandas
    assert is_in(column, values).tolist() == column.isin(list(values)).tolist()
