"""The Parquet file's columns made whole by Arrow (text as it is held, whole GPU counts cast)
against the value-by-value rule they replace (:func:`reports.render.parquet._text`, ``int()``):
the same table whatever the text's storage, a lone surrogate, bytes, a fraction or a count past
int64's range."""

from __future__ import annotations

import io
import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.render import parquet

D = {"week": "2026-W48", "basis": "util", "headline": {"gpu_hours": 1.0}}
TEXT = st.one_of(st.none(), st.just(math.nan), st.text(max_size=8), st.just("x\udcff"))


def _table(runs: pd.DataFrame) -> pa.Table:
    return pq.read_table(io.BytesIO(bytes(parquet.ParquetExport(D, runs))))


@settings(max_examples=examples(150), deadline=None)
@given(
    names=st.lists(TEXT, min_size=1, max_size=8),
    counts=st.lists(
        st.one_of(st.integers(0, 2**40).map(float), st.just(math.nan), st.just(math.inf)),
        min_size=8,
        max_size=8,
    ),
    storage=st.sampled_from(["pyarrow", "python", "object"]),
)
def test_text_and_counts_are_what_the_value_by_value_rule_makes(
    names: list[object], counts: list[float], storage: str
) -> None:
    n = len(names)
    if storage == "object":
        column = pd.Series(names, dtype=object)
    else:
        safe = [
            v if not isinstance(v, str) or storage == "python" else v.replace("\udcff", "?")
            for v in names
        ]
        with pd.option_context("mode.string_storage", storage):
            column = pd.Series(safe, dtype="str")
    runs = pd.DataFrame(
        {"run_id": [f"r{i}" for i in range(n)], "name": column, "gpu_count": counts[:n]}
    )
    t = _table(runs)
    assert t.column("name").to_pylist() == [parquet._text(v) for v in column.tolist()]
    want = [None if not math.isfinite(c) else int(c) for c in counts[:n]]
    assert t.column("gpu_count").to_pylist() == want
    assert t.column("run_id").to_pylist() == [f"r{i}" for i in range(n)]


def test_a_fraction_of_a_gpu_is_cut_as_int_cuts_it_and_bytes_are_read_as_text() -> None:
    runs = pd.DataFrame(
        {
            "run_id": pd.Series(["a", "b", "c"], dtype=object),
            "verdict": pd.Series([b"caf\xc3\xa9", "ok", None], dtype=object),
            "gpu_count": [2.5, -0.0, 7.0],
        }
    )
    t = _table(runs)
    assert t.column("gpu_count").to_pylist() == [2, 0, 7]
    assert t.column("verdict").to_pylist() == ["café", "ok", None]


def test_a_count_past_int64_fails_as_it_did() -> None:
    runs = pd.DataFrame({"run_id": ["a"], "gpu_count": [2.0**70]})
    with pytest.raises(OverflowError):
        _table(runs)
