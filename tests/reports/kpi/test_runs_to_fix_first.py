"""The runs to fix taken in part (:func:`reports.kpi.runs_to_fix` with ``first``): the first
rows, and with ``by_team`` each team's first rows, are those of the whole list, in order."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from reports.kpi import fix_order, runs_to_fix


def _week(seed: int, n: int = 400) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    runs = pd.DataFrame(
        {
            "run_id": [f"r{i}" for i in range(n)],
            "team": rng.choice(np.array(["nlp", "vision", None], dtype=object), n),
            # ties in dollars (cents of a few values), nothing, NaN, and verdicts alone
            "waste_usd": rng.choice([0.0, 0.001, 0.25, 1.5, 1.5, 7.0, np.nan], n),
            "unmeasured_usd": rng.choice([0.0, 0.0, 0.5, np.nan], n),
            "verdict": rng.choice(np.array(["healthy", "", None, "idle", "input-bound"]), n),
        }
    )
    return SimpleNamespace(runs=runs)


@pytest.mark.parametrize("seed", range(20))
def test_a_part_of_the_runs_to_fix_holds_their_first_and_each_teams_first(seed: int) -> None:
    k = _week(seed)
    whole = runs_to_fix(k)  # type: ignore[arg-type]
    assert len(whole) == len(fix_order(k))  # type: ignore[arg-type]
    part = runs_to_fix(k, first=7, by_team=True)  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(part.head(7), whole.head(7))
    for team in ("nlp", "vision"):
        got = part[part["team"] == team].head(7).reset_index(drop=True)
        want = whole[whole["team"] == team].head(7).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)
    assert len(part) <= 3 * 7  # the first rows and two teams' own: not every run
    pd.testing.assert_frame_equal(
        runs_to_fix(k, first=5),  # type: ignore[arg-type]
        whole.head(5),
    )


def test_the_runs_to_fix_by_hand() -> None:
    # waste plus not measured, largest first, ties as listed; a verdict other than healthy
    # makes a run with no dollars one to fix; under half a cent and healthy: none
    runs = pd.DataFrame(
        {
            "run_id": ["a", "b", "c", "d", "e", "f"],
            "team": ["nlp"] * 6,
            "waste_usd": [1.0, 3.0, 0.001, np.nan, 1.0, 0.5],
            "unmeasured_usd": [0.0, 0.0, 0.0, 0.0, 0.0, 0.5],
            "verdict": ["healthy", None, "", "idle", "healthy", "healthy"],
        },
        index=[10, 11, 12, 13, 14, 15],  # not a range: positions, not labels
    )
    k = SimpleNamespace(runs=runs)
    assert fix_order(k).tolist() == [1, 0, 4, 5, 3]  # type: ignore[arg-type]
    assert runs_to_fix(k)["run_id"].tolist() == ["b", "a", "e", "f", "d"]  # type: ignore[arg-type]
