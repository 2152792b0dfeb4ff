"""A budget line's largest runs (:func:`reports.budgets.top_runs`: a sort and a head per team,
a pair made only for a run shown) against the rule run by run: every run ranked by dollars
then run id, each team's first :data:`reports.kpi.budgets.TOP_RUNS` taken."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.budgets import top_runs
from reports.kpi.budgets import TOP_RUNS

RUNS = st.lists(
    st.tuples(
        st.sampled_from(["r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"]),
        st.sampled_from(["a", "b", "=x", None]),
        st.sampled_from(["nlp", "vision", "nan", None]),
        st.sampled_from([0.5, 1.0, 2.0, 3.25, 10.0]),
    ),
    max_size=30,
    unique_by=lambda r: r[0],
)


def _one_by_one(runs: pd.DataFrame, team: str) -> tuple[tuple[str, float], ...]:
    """The rule as it was written before, a record per run: each value as ``str()`` (or
    ``float()``) writes the frame's own value (a missing name: ``nan``)."""
    ranked = runs.sort_values(["spend_usd", "run_id"], ascending=[False, True])
    pairs = [(str(r.team), str(r.name), float(r.spend_usd)) for r in ranked.itertuples()]
    return tuple((n, v) for t, n, v in pairs if t == team)[:TOP_RUNS]


def _frame(
    rows: Sequence[tuple[str, str | None, str | None, float]], dtype: object
) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": pd.Series([r[0] for r in rows], dtype=object),
            "name": pd.Series([r[1] for r in rows], dtype=dtype),
            "team": pd.Series([r[2] for r in rows], dtype=dtype),
            "spend_usd": pd.Series([r[3] for r in rows], dtype=float),
        }
    )


@settings(max_examples=examples(300), deadline=None)
@given(rows=RUNS, text=st.sampled_from(["str", object]), only=st.booleans())
def test_each_teams_largest_runs_are_the_rules(
    rows: list[tuple[str, str | None, str | None, float]], text: object, only: bool
) -> None:
    """A missing team is ``str()``'s ``nan`` (as a run's team was compared before), and a team
    named ``nan`` shares its line: both are the text ``nan``."""
    wanted = {"nlp", "nan"} if only else None
    runs = _frame(rows, text)
    got = top_runs(runs, wanted)
    teams = {str(t) for t in runs["team"]}
    for team in teams | {"vision", "ops"}:
        want = _one_by_one(runs, team) if wanted is None or team in wanted else ()
        assert got.get(team, ()) == want, team
    assert all(0 < len(v) <= TOP_RUNS for v in got.values())


def test_ties_go_to_the_smaller_run_id_and_only_three_are_made() -> None:
    rows = [(f"r{i}", f"job-{i}", "nlp", 5.0 if i % 2 else 7.5) for i in range(9, 0, -1)]
    got = top_runs(_frame(rows, "str"))
    # 7.5 for r2, r4, r6, r8 (ties by run id), then 5.0
    assert got == {"nlp": (("job-2", 7.5), ("job-4", 7.5), ("job-6", 7.5))}
    assert math.fsum(v for _, v in got["nlp"]) == 22.5
    assert top_runs(_frame([], object)) == {}
