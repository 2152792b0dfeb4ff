"""What keeps a week of a million runs from being held twice: sorting by moving columns, a
week's rows by position, one Python object per distinct text, one shared column of None that
a write still keeps apart (copy on write)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from fakes import run_record as run

from reports import kpi as kpis
from reports.kpi import frames
from reports.kpi.frames import shared_objects, sorted_moving
from reports.kpi.savings import _objects, _text_values
from reports.kpi.weekly import _week_positions
from tracker.prices import PriceTable

W48 = datetime(2026, 11, 23, tzinfo=UTC)  # Monday of ISO week 2026-W48
NOW = W48 + timedelta(days=10)


@pytest.mark.parametrize("move_from", [0, 100_000], ids=["moved", "copied"])
def test_sorted_moving_is_sort_values_and_leaves_its_input_empty(
    move_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most waste first, then most spend, NaN last: c (3.0), d (1.0, spend 3), a (1.0,
    spend 2), e (0.0), b (NaN); the same whether the columns are moved one at a time (the
    input left empty) or the frame is sorted whole (few rows)."""
    monkeypatch.setattr(frames, "MOVE_FROM", move_from)
    rows = pd.DataFrame(
        {
            "run_id": np.array(["a", "b", "c", "d", "e"], dtype=object),
            "waste_usd": [1.0, np.nan, 3.0, 1.0, 0.0],
            "spend_usd": [2.0, 5.0, 1.0, 3.0, np.nan],
            "team": pd.Series(["x", None, "y", "x", "z"], dtype="str"),
        },
        index=[10, 11, 12, 13, 14],
    )
    expected = rows.sort_values(["waste_usd", "spend_usd"], ascending=False, ignore_index=True)
    got = sorted_moving(rows, ["waste_usd", "spend_usd"], ascending=False)
    assert got["run_id"].tolist() == ["c", "d", "a", "e", "b"]
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    if move_from == 0:
        assert list(rows.columns) == []  # each column moved out


def test_week_positions_are_each_weeks_rows_and_no_key_for_a_week_without_any() -> None:
    """Rows 0 and 2 are W48, row 1 is W49, row 3 has no week: W47 has none."""
    w47, w48, w49 = (pd.Timestamp(W48 + timedelta(days=7 * k)) for k in (-1, 0, 1))
    week = pd.Series([w48, w49, w48, pd.NaT], dtype="datetime64[ns, UTC]")
    at = _week_positions(week, [w47, w48, w49])
    assert sorted(at) == [w48, w49]
    assert at[w48].tolist() == [0, 2]
    assert at[w49].tolist() == [1]


def test_text_is_one_object_per_distinct_value_and_missing_stays_missing() -> None:
    """Five runs of two teams and one without: two string objects, the missing one NaN, as
    ``to_numpy`` gives them."""
    teams = pd.Series(["nlp", "vision", "nlp", None, "nlp"], dtype="str")
    for shared in (_objects(teams), shared_objects(teams)):
        assert shared[:3].tolist() == ["nlp", "vision", "nlp"] and shared[4] == "nlp"
        assert isinstance(shared[3], float) and np.isnan(shared[3])
        assert shared[0] is shared[2] is shared[4]
        assert len({id(v) for v in shared if isinstance(v, str)}) == 2
    # a frame makes the same text of Arrow's text as of those objects
    as_given = pd.DataFrame({"t": _text_values(teams)})["t"]
    as_objects = pd.DataFrame({"t": teams.astype(object).to_numpy()})["t"]
    pd.testing.assert_series_equal(as_given, as_objects)


def test_a_column_of_none_is_shared_and_a_write_to_one_leaves_the_others() -> None:
    """Two runs without a verdict or advice: their week rows hold one column of None for
    both, and setting one row's verdict leaves the advice None."""
    runs = kpis.runs_frame([run("a", W48, 2.0), run("b", W48, 1.0)])
    assert runs["verdict"].tolist() == [None, None] and runs["advice"].tolist() == [None, None]
    gt = kpis.gpu_time(runs, kpis.samples_frame([]), tz=UTC, now=NOW)
    per = kpis.run_weeks(gt, runs, prices=PriceTable(), target_util_pct=85.0)
    assert np.shares_memory(per["verdict"].to_numpy(), per["advice"].to_numpy())
    per.loc[0, "verdict"] = "idle"
    assert per["verdict"].tolist() == ["idle", None]
    assert per["advice"].tolist() == [None, None]
    assert runs["verdict"].tolist() == [None, None]
