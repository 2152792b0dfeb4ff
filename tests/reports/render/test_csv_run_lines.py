"""The CSV's ``run`` section, made from its columns (:func:`reports.render.exports._run_rows`:
in Arrow, :mod:`reports.render.csv_arrow`, or without pyarrow a run at a time from a
template), against the standard library's CSV writer fed one
cell at a time through :mod:`reports.render.csvsafe`: the same bytes, whatever the figures
(NaN, infinities, -0.0, 1e16, 1e-05) and the text (formula starts, quotes, commas, line breaks,
``%`` and ``%s`` in a cell or in the week's own label)."""

from __future__ import annotations

import io
import math
from unittest import mock

import pandas as pd
import pytest
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.render import csv_arrow, exports
from reports.render.csvsafe import safe_row, writer

FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e16, 1e15, 1e-05, 0.0001, 123.456, 2.5, 1e22, 5e-324]),
)
TEXT = st.one_of(
    st.none(),
    st.sampled_from(
        ["=1+2", "+x", "-3", "@SUM(A1)", "\tx", "a,b", 'say "hi"', "x\r\n=1", "%s", "5%"]
    ),
    st.text(max_size=12),
)
USD = ("spend_usd", "waste_usd", "idle_usd", "unmeasured_usd")


def _runs(rows: list[tuple], text_dtype: object) -> pd.DataFrame:
    n = len(rows)
    frame = pd.DataFrame(
        {
            "run_id": pd.Series([f"r{i}" if r[0] is None else r[0] for i, r in enumerate(rows)]),
            "name": pd.Series([r[1] for r in rows], dtype=text_dtype),
            "team": pd.Series([r[2] for r in rows], dtype=text_dtype),
            "verdict": pd.Series([r[2] for r in rows], dtype=object),
            "gpu_count": pd.Series([r[3] for r in rows], dtype="int64"),
            "priced": pd.Series([r[4] for r in rows], dtype=bool),
        }
    )
    for j, f in enumerate(("gpu_hours", "utilization_pct", *USD, "co2e_kg")):
        frame[f] = pd.Series([r[5][j] for r in rows], dtype=float)
    assert len(frame) == n
    return frame


def _oracle(head: list[str], runs: pd.DataFrame) -> str:
    """A line per run and metric through csv.writer, each value as the JSON's plain() has it:
    a missing or non-finite number, or an unpriced run's dollars, an empty cell."""
    out = io.StringIO()
    w = writer(out)
    for r in runs.to_dict("records"):
        for f in exports._CSV_RUN_FIELDS:
            value = r.get(f)
            if f in USD and r["priced"] is False:
                value = None
            value = exports.plain(value)
            w.writerow([*head, r["run_id"], f, "" if value is None else value])
    return out.getvalue()


@settings(max_examples=examples(200), deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.one_of(st.none(), TEXT.filter(lambda t: t is not None)),
            TEXT,
            TEXT,
            st.integers(-(2**40), 2**40),
            st.booleans(),
            st.lists(FLOATS, min_size=7, max_size=7),
        ),
        min_size=1,
        max_size=12,
    ),
    text_dtype=st.sampled_from(["str", object]),
    basis=st.sampled_from(["util", "u%sx", "=x%"]),
    block=st.integers(1, 5),
    arrow=st.booleans() if csv_arrow.available() else st.just(False),
)
def test_the_run_lines_are_the_csv_writers_cell_by_cell(
    rows: list[tuple], text_dtype: object, basis: str, block: int, arrow: bool
) -> None:
    runs = _runs(rows, text_dtype)
    head = ["2026-W48", basis, "run"]
    got = io.StringIO()
    with mock.patch.object(csv_arrow, "available", return_value=arrow):  # both ways
        exports._run_rows(got, safe_row(head), runs, block=block)  # as CsvExport gives it
    assert got.getvalue() == _oracle(head, runs)


ARROW = [
    pytest.param(True, marks=pytest.mark.skipif(not csv_arrow.available(), reason="no pyarrow")),
    False,
]


@pytest.mark.parametrize("arrow", ARROW)
def test_a_runs_lines_carry_its_numbers_as_python_writes_them(arrow: bool) -> None:
    runs = _runs(
        [("=r", "a,b", "nlp", 8, True, [1e16, -0.0, math.nan, 2.5, math.inf, 1e-05, 0.1])], "str"
    )
    got = io.StringIO()
    with mock.patch.object(csv_arrow, "available", return_value=arrow):
        exports._run_rows(got, ["2026-W48", "util", "run"], runs)
    lines = got.getvalue().split("\r\n")
    assert lines[1] == '2026-W48,util,run,\'=r,name,"a,b"'
    cells = {line.split(",")[4]: line.split(",", 5)[5] for line in lines if line}
    assert cells["gpu_hours"] == "1e+16" and cells["utilization_pct"] == "-0.0"
    assert cells["spend_usd"] == "" and cells["waste_usd"] == "2.5" and cells["idle_usd"] == ""
    assert cells["gpu_count"] == "8" and cells["co2e_kg"] == "0.1"
    assert len(lines) == len(exports._CSV_RUN_FIELDS) + 1  # a last empty piece after CRLF


@pytest.mark.parametrize("arrow", ARROW)
@pytest.mark.parametrize("text_dtype", ["str", object])
def test_a_week_of_few_distinct_texts_is_the_csv_writers_cell_by_cell(
    arrow: bool, text_dtype: object
) -> None:
    # 300 runs, a few teams, names and verdicts each (a real week's shape: each distinct text
    # made a cell once), among them every text a cell must neutralize or quote
    texts = ["nlp", "=cmd|' /C calc'!A0", "a,b", 'say "hi"', "x\r\n=1", "-3", "", None, "%s"]
    rng = __import__("random").Random(3)
    rows = [
        (
            None,
            rng.choice(texts),
            rng.choice(texts),
            rng.randrange(8),
            rng.random() < 0.8,
            [rng.choice([0.5, 1e-05, 2.0, math.nan, 1e16, -0.0, 3600.0]) for _ in range(7)],
        )
        for _ in range(300)
    ]
    runs = _runs(rows, text_dtype)
    head = ["2026-W48", "util", "run"]
    got = io.StringIO()
    with mock.patch.object(csv_arrow, "available", return_value=arrow):
        exports._run_rows(got, safe_row(head), runs, block=128)
    assert got.getvalue() == _oracle(head, runs)
