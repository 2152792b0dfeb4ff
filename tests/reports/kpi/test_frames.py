"""Frame helpers that must answer the same whether pandas keeps text in Python objects or in
Arrow arrays (pyarrow installed: the ``parquet`` extra, or a package that brings it)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from reports.kpi import is_in

STORAGES = ["python"] + (["pyarrow"] if importlib.util.find_spec("pyarrow") else [])


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["b", "x"], [False, True, False, False]),
        ({"a", "c"}, [True, False, True, False]),
        (frozenset(), [False, False, False, False]),
        ([None], [False, False, False, True]),  # a missing value is among a missing one
        ([2, "2"], [False, False, False, False]),  # a number is no text
        (np.array(["c", "zz"], dtype=object), [False, False, True, False]),
    ],
)
def test_is_in_as_isin(storage: str, values: object, expected: list[bool]) -> None:
    with pd.option_context("mode.string_storage", storage):
        column = pd.Series(["a", "x", "c", None], dtype="str")
        assert column.dtype.storage == storage
        got = is_in(column, values)  # type: ignore[arg-type]
        assert isinstance(got, np.ndarray) and got.dtype == bool
        assert got.tolist() == expected


@pytest.mark.parametrize("storage", STORAGES)
def test_is_in_a_column_of_the_same_text(storage: str) -> None:
    with pd.option_context("mode.string_storage", storage):
        ids = pd.Series([f"run-{i}" for i in range(1000)], dtype="str")
        wanted = pd.Series([f"run-{i}" for i in range(0, 2000, 3)], dtype="str")
        got = is_in(ids, wanted)
        assert np.flatnonzero(got).tolist() == list(range(0, 1000, 3))
        assert is_in(ids, pd.Index(wanted)).tolist() == got.tolist()
        assert is_in(ids.iloc[:0], wanted).tolist() == []
