"""The CSV's numbers made in Arrow (:func:`reports.render.csv_arrow.number_cells`) against
Python's ``repr`` of each, over every magnitude a week's figures take and the edges where
``repr`` and Arrow write a number differently (whole numbers, exponents, 1e-4 and 1e16)."""

from __future__ import annotations

import io
import math
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from reports.render import csv_arrow, exports

pa = pytest.importorskip("pyarrow")  # what these tests are about: the Arrow way


def _expected(values: np.ndarray) -> list[str]:
    return [repr(v) if math.isfinite(v) else "" for v in values.tolist()]


def test_a_number_cell_is_what_repr_writes_across_magnitudes() -> None:
    rng = np.random.default_rng(7)
    mantissa = rng.random(200_000)
    scale = 10.0 ** rng.integers(-12, 24, size=200_000)
    sign = rng.choice([-1.0, 1.0], size=200_000)
    values = np.concatenate(
        [
            mantissa * scale * sign,  # shortest digits of random doubles, every exponent
            np.round(mantissa * 1e6, 2),  # cents
            np.round(mantissa * 1e3, 6),  # hours
            rng.integers(-(10**17), 10**17, size=50_000).astype(float),  # whole numbers
            rng.integers(0, 10**6, size=50_000).astype(float),
            [0.0, -0.0, 1e-4, 9.999999999999999e-05, 1e16, 9999999999999998.0, 1e15, 1e-05],
            [123456789012345.0, 1.5e12, 5e-324, 1.7976931348623157e308, 0.1, 1 / 3, 2.5e-7],
            [math.nan, math.inf, -math.inf],
        ]
    )
    got = csv_arrow.number_cells(values).to_pylist()
    want = _expected(values)
    wrong = [(v, g, w) for v, g, w in zip(values.tolist(), got, want, strict=True) if g != w]
    assert not wrong, wrong[:10]


def test_whole_numbers_keep_their_point_and_non_finite_ones_are_empty() -> None:
    got = csv_arrow.number_cells(np.array([3600.0, -0.0, 1e15, math.nan, -math.inf])).to_pylist()
    assert got == ["3600.0", "-0.0", "1000000000000000.0", "", ""]


def test_a_run_column_held_in_chunks_is_written_as_one_held_whole() -> None:
    # a team's runs, cut from the week's and joined: pandas keeps their text in Arrow chunks
    whole = pd.DataFrame(
        {
            "run_id": pd.Series(["a", "=b", 'c"d'], dtype="str"),
            "name": pd.Series(["x,y", None, "z"], dtype="str"),
            "gpu_hours": [1.0, 2.5, math.nan],
        }
    )
    chunked = pd.concat([whole.iloc[:1], whole.iloc[1:]], ignore_index=True)
    assert pa.array(chunked["name"]).num_chunks == 2  # what this test is about
    got, want = io.StringIO(), io.StringIO()
    exports._run_rows(got, ["2026-W48", "util", "run"], chunked)
    with mock.patch.object(csv_arrow, "available", return_value=False):  # a line at a time
        exports._run_rows(want, ["2026-W48", "util", "run"], whole)
    assert got.getvalue() == want.getvalue()
    assert '2026-W48,util,run,"c""d",name,z\r\n' in got.getvalue()


@pytest.mark.parametrize(
    "column",
    [
        pd.Series([1, None, 3], dtype="Int64"),  # pandas' nullable integers
        pd.Series([True, None], dtype="boolean"),
        pd.Series([2**63, 0], dtype="uint64"),
        pd.Series([1.5, None], dtype="Float64"),
    ],
    ids=["Int64", "boolean", "uint64", "Float64"],
)
def test_a_column_of_another_kind_of_number_is_written_as_without_arrow(
    column: pd.Series,
) -> None:
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(len(column))], "gpu_count": column})
    got, want = io.StringIO(), io.StringIO()
    exports._run_rows(got, ["2026-W48", "util", "run"], runs)
    with mock.patch.object(csv_arrow, "available", return_value=False):
        exports._run_rows(want, ["2026-W48", "util", "run"], runs)
    assert got.getvalue() == want.getvalue()
    assert "9223372036854775808" in got.getvalue() or column.dtype != "uint64"
