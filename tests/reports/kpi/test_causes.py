"""The week's waste by cause (:mod:`reports.kpi.causes`), worked out by hand: the idle part of
each run's waste is held idle, the rest its verdict's cause, an import's inferred; the causes
add up to the waste, and their cents to its cents."""

from __future__ import annotations

import math
from unittest import mock

import pandas as pd
import pytest

from reports.kpi import arrow_text
from reports.kpi.causes import waste_by_cause


def runs() -> pd.DataFrame:
    rows = [
        # name, source, verdict, waste, idle, priced
        ("loader", "tracker", "input-bound", 10.00, 2.50, True),
        ("smi-node", "nvidia-smi", "input-bound", 4.00, 0.0, True),
        ("fine", "tracker", "healthy", 1.005, 0.0, True),
        ("notebook", "tracker", "idle", 3.333, 3.0, True),
        ("no-price", "tracker", "small-batch", float("nan"), float("nan"), False),
        ("none", "tracker", "small-batch", 0.0, 0.0, True),
        ("odd", "tracker", None, 0.5, 0.75, True),  # idle over the waste: all of it idle
        ("big", "tracker", "below-target", 2.0, 0.25, True),  # an L4 would do (right-sizing)
    ]
    return pd.DataFrame(
        [
            {
                "run_id": f"r{i}",
                "name": n,
                "source": s,
                "verdict": v,
                "waste_usd": w,
                "idle_usd": d,
                "priced": p,
            }
            for i, (n, s, v, w, d, p) in enumerate(rows)
        ]
    )


def test_each_runs_waste_goes_to_its_causes_by_hand() -> None:
    lines = {c.cause: c for c in waste_by_cause(runs(), oversized={"r7", "r1"})}
    # most dollars first
    assert list(lines) == ["input-bound", "idle", "oversized", "below-target"]
    # input-bound: loader's 10.00 - 2.50 idle, and smi-node's 4.00 (inferred: an import)
    assert lines["input-bound"].waste_usd == pytest.approx(7.50 + 4.00)
    assert lines["input-bound"].inferred_usd == pytest.approx(4.00)
    assert lines["input-bound"].top == (
        ("loader", pytest.approx(7.5)),
        ("smi-node", pytest.approx(4.0)),
    )
    assert "DataLoader workers" in lines["input-bound"].fix
    # held idle: loader's 2.50, notebook's 3.333 (its verdict is idle: all of it), odd's
    # 0.50, big's 0.25
    idle = lines["idle"]
    assert idle.waste_usd == pytest.approx(2.50 + 3.333 + 0.50 + 0.25) and idle.runs == 4
    assert idle.top[0] == ("notebook", pytest.approx(3.333))
    # oversized: big's rest, 1.75 (its verdict names no cause and a cheaper GPU fits it;
    # loader fits one too, but its verdict names its cause)
    assert lines["oversized"].top == (("big", pytest.approx(1.75)),)
    assert "right-sizing" in lines["oversized"].fix
    # below target, unexplained: the healthy run's 1.005
    assert lines["below-target"].waste_usd == pytest.approx(1.005)
    # the sum: 20.838 in all; cents 1150 + 658 + 175 + 100 = 2083, one left for the
    # largest remainder (idle's .3 against below-target's .5): 2084
    total = 10.00 + 4.00 + 1.005 + 3.333 + 0.5 + 2.0
    assert math.fsum(c.waste_usd for c in lines.values()) == pytest.approx(total)
    assert sum(c.cents for c in lines.values()) == round(total * 100) == 2084
    cents = [lines[c].cents for c in ("input-bound", "idle", "oversized", "below-target")]
    assert cents == [1150, 658, 175, 101]


def test_a_week_without_waste_has_no_causes() -> None:
    assert waste_by_cause(runs().iloc[4:6]) == ()
    assert waste_by_cause(runs().iloc[:0]) == ()


def test_runs_of_one_name_stay_apart() -> None:
    """A tracked run and an nvidia-smi import both named "train": two runs, only the import's
    dollars inferred; a run with no name is shown by its id."""
    frame = pd.DataFrame(
        [
            {
                "run_id": "t",
                "name": "train",
                "source": "tracker",
                "verdict": "input-bound",
                "waste_usd": 5.0,
                "idle_usd": 0.0,
                "priced": True,
            },
            {
                "run_id": "s",
                "name": "train",
                "source": "nvidia-smi",
                "verdict": "input-bound",
                "waste_usd": 3.0,
                "idle_usd": 0.0,
                "priced": True,
            },
            {
                "run_id": "n",
                "name": None,
                "source": None,
                "verdict": "input-bound",
                "waste_usd": 1.0,
                "idle_usd": 0.0,
                "priced": True,
            },
        ]
    )
    (line,) = waste_by_cause(frame)
    assert (line.runs, line.inferred_usd) == (3, pytest.approx(3.0))
    assert line.top == (("train", 5.0), ("train", 3.0), ("n", 1.0))


def test_runs_tied_in_dollars_are_named_in_name_order() -> None:
    """Six runs of $2.00 behind one of $3.00: the top five are the $3.00 one, then four of the
    ties by name (a-d; e, f and the blank-named r8, shown as its id, left out); a run without
    a waste figure (NaN) has none, and a missing idle figure is no idle part."""

    def row(i: int, name: str, waste: float, idle: float = 0.0) -> dict[str, object]:
        return {
            "run_id": f"r{i}",
            "name": name,
            "source": "tracker",
            "verdict": "input-bound",
            "waste_usd": waste,
            "idle_usd": idle,
            "priced": True,
        }

    rows = [row(0, "top", 3.0, float("nan"))]
    rows += [row(i, name, 2.0) for i, name in enumerate("fedcba", start=1)]
    rows += [row(7, "no-waste", float("nan"), 1.0), row(8, "   ", 2.0)]
    (line,) = waste_by_cause(pd.DataFrame(rows))
    assert line.cause == "input-bound"
    assert line.top == (("top", 3.0), ("a", 2.0), ("b", 2.0), ("c", 2.0), ("d", 2.0))
    # 3.00 + 7 x 2.00
    assert (line.runs, line.waste_usd, line.cents) == (8, 17.0, 1700)


def test_rows_of_one_run_id_are_one_run_summed_exactly() -> None:
    """Three rows of run d (all idle: $0.10 of rest, $0.20 idle, $0.30 of rest) are one run of
    $0.60, as fsum adds them (0.1 + 0.2 + 0.3 in floats, one after the other, is
    0.6000000000000001), named by its last row; an import's row makes no idle dollars
    inferred."""
    frame = pd.DataFrame(
        [
            {"run_id": "d", "name": "old", "source": "tracker", "waste_usd": 0.1, "idle_usd": 0.0},
            {
                "run_id": "d",
                "name": "old",
                "source": "nvidia-smi",
                "waste_usd": 0.2,
                "idle_usd": 0.2,
            },
            {"run_id": "d", "name": "new", "source": "tracker", "waste_usd": 0.3, "idle_usd": 0.0},
        ]
    ).assign(verdict="idle", priced=True)
    assert 0.1 + 0.2 + 0.3 == 0.6000000000000001
    (line,) = waste_by_cause(frame)
    assert (line.cause, line.runs, line.top) == ("idle", 1, (("new", 0.6),))
    assert (line.waste_usd, line.inferred_usd, line.cents) == (0.6, 0.0, 60)


@pytest.mark.parametrize(
    "arrow",
    [
        pytest.param(
            True, marks=pytest.mark.skipif(not arrow_text.available(), reason="no pyarrow")
        ),
        False,
    ],
)
def test_a_name_of_any_of_pythons_spaces_is_no_name(arrow: bool) -> None:
    """A name that ``str.strip`` empties (ideographic, no-break and information-separator
    spaces among them) is shown as the run's id; a zero-width space is no space to Python:
    that name stays."""
    names = ["\u3000", "\xa0 \x1c", "\u2029\n", "\u200b", "a"]
    frame = pd.DataFrame(
        {
            "run_id": [f"r{i}" for i in range(len(names))],
            "name": names,
            "source": "tracker",
            "verdict": "input-bound",
            "waste_usd": [5.0, 4.0, 3.0, 2.0, 1.0],
            "idle_usd": 0.0,
            "priced": True,
        }
    )
    # by one regular expression in Arrow, or a strip each without pyarrow
    with mock.patch.object(arrow_text, "available", return_value=arrow):
        (line,) = waste_by_cause(frame)
    assert [name for name, _ in line.top] == ["r0", "r1", "r2", "\u200b", "a"]


def test_the_spaces_a_name_may_be_made_of_are_pythons() -> None:
    import re
    import sys

    from reports.kpi.arrow_text import SPACES as _SPACES

    spaces = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    listed = {chr(c) for c in range(sys.maxunicode + 1) if re.fullmatch(f"[{_SPACES}]", chr(c))}
    assert listed == spaces


def test_a_name_that_is_no_utf8_is_judged_by_its_strip() -> None:
    # a lone surrogate (no UTF-8, so no Arrow text): the strip of each name decides
    import numpy as np

    from reports.kpi.causes import _blank

    names = np.array(["\ud800", " ", "a"], dtype=object)
    assert _blank(names).tolist() == [False, True, False]
