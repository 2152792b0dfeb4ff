"""Where a week's waste went: each run's recoverable waste split into causes, in dollars.

A run's waste (:func:`tracker.cost.gpu_waste_usd`, per GPU) is its idle time in full plus the
rest of its spend × max(0, 1 − utilization of the rest ÷ target). The split follows that
sum: the idle part is **held idle**; the rest goes to the run's verdict
(:mod:`tracker.diagnosis`: input-bound, small batch, communication-bound, low math efficiency,
imbalanced), or, where the verdict names no cause (healthy, below-target, unknown), to
**oversized GPU** when a cheaper model holds the run's memory and compute
(:mod:`reports.kpi.rightsizing`: the GPU is too big for the work) and else to **below target,
unexplained**. A run whose verdict comes from an import (nvidia-smi, Prometheus, W&B,
TensorBoard: the utilization pattern, no step timing) counts as **inferred** within its cause.
The causes add up to the week's waste, and their cents to its cents (largest remainder).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports.kpi import arrow_text
from reports.kpi.frames import is_in, shared_objects
from tracker.diagnosis import ADVICE

CAUSES: dict[str, str] = {
    "idle": "held idle",
    "input-bound": "input-bound (data loading)",
    "small-batch": "small batch, launch-bound",
    "communication-bound": "communication-bound",
    "low-efficiency": "low math efficiency",
    "imbalanced": "GPUs held, unused by the job",
    "oversized": "oversized GPU",
    "below-target": "below target, unexplained",
}
"""Each cause's key (a verdict of :data:`tracker.diagnosis.VERDICTS`) and its name."""

_CODES = {c: i for i, c in enumerate(CAUSES)}
"""Each cause's position in :data:`CAUSES`: its code in the arrays."""
_IDLE = _CODES["idle"]
_NAMED = {c: i for c, i in _CODES.items() if c not in ("oversized", "below-target")}
"""The verdicts that name their cause (:func:`cause_of`), by code."""

TOP_RUNS = 5
"""The runs named behind each cause, most waste first."""


@dataclass(frozen=True, kw_only=True)
class CauseLine:
    """One cause's share of the week's waste."""

    cause: str
    """A key of :data:`CAUSES`."""
    label: str
    waste_usd: float
    inferred_usd: float
    """Of it, from runs whose verdict an import inferred from the utilization pattern."""
    cents: int
    """``waste_usd`` in whole cents, so that the causes' cents add up to the week's."""
    runs: int
    """Runs with waste in this cause."""
    top: tuple[tuple[str, float], ...]
    """The runs with the most waste in it: (name, USD), at most :data:`TOP_RUNS`."""
    fix: str
    """The usual fix (:data:`tracker.diagnosis.ADVICE`)."""


OVERSIZED_FIX = (
    "A cheaper GPU holds this work's memory and compute at the utilization it reaches: run it "
    "there (the report's right-sizing table names the model and the saving)."
)


def cause_of(verdict: object, *, oversized: bool = False) -> str:
    """The cause the non-idle part of a run's waste goes to, by its verdict (and, where that
    names no cause, whether a cheaper GPU fits it)."""
    if (
        isinstance(verdict, str)
        and verdict in CAUSES
        and verdict not in ("oversized", "below-target")
    ):
        return verdict
    return "oversized" if oversized else "below-target"


def week_causes(runs: pd.DataFrame, rightsizing: pd.DataFrame) -> tuple[CauseLine, ...]:
    """The week's waste by cause (:func:`waste_by_cause`), the runs its right-sizing names
    oversized; the report's is :attr:`reports.kpi.weekly.WeekKpis.causes`.

    Args:
        runs: The week's runs (:attr:`reports.kpi.weekly.WeekKpis.runs`).
        rightsizing: Its right-sizing (:func:`reports.kpi.rightsizing.rightsizing`).

    Returns:
        One :class:`CauseLine` per cause with waste, most dollars first.
    """
    oversized = (
        set(rightsizing["run_id"].astype(str).tolist()) if "run_id" in rightsizing else set()
    )
    return waste_by_cause(runs, oversized=oversized)


def waste_by_cause(runs: pd.DataFrame, *, oversized: Collection[str] = ()) -> tuple[CauseLine, ...]:
    """The week's waste by cause, most dollars first (causes with none left out).

    Args:
        runs: The week's runs (:attr:`reports.kpi.weekly.WeekKpis.runs`): ``run_id``,
            ``name``, ``waste_usd``, ``idle_usd``, ``verdict``, ``source`` and ``priced``.
            Unpriced runs have no dollars and are left out.
        oversized: The ids of runs a cheaper GPU model fits.

    Returns:
        One :class:`CauseLine` per cause with waste.
    """
    # column by column (a week may hold a million runs): the runs with waste, each one's idle
    # part and the rest, the rest's cause
    waste = _usd(runs, "waste_usd")
    kept = waste > 0
    if "priced" in runs:
        kept &= runs["priced"].to_numpy().astype(bool)  # each value's truth, NaN's too
    at = np.flatnonzero(kept)
    if not len(at):
        return ()
    waste = waste[at]
    idle = np.minimum(_usd(runs, "idle_usd")[at], waste)
    ids = _ids(runs, at)
    sources, is_source = _text(runs, "source", at, shared=True)
    verdicts, is_verdict = _text(runs, "verdict", at, shared=True)
    fits_smaller = (
        is_in(pd.Series(ids, dtype=object), list(oversized))
        if len(oversized)
        else np.zeros(len(ids), dtype=bool)
    )
    rest = _rest_causes(verdicts, is_verdict, fits_smaller)

    # one part per run and cause with dollars (an idle run's two parts are one): by run in the
    # order found, a run's last name and any inferred row of it standing for all of its rows
    run, _ = pd.factorize(ids)
    n_runs = int(run.max()) + 1
    last = ~pd.Series(run).duplicated(keep="last").to_numpy()
    last_of_run = np.empty(n_runs, dtype=np.int64)  # each run's last row (a position in ``at``)
    last_of_run[run[last]] = np.flatnonzero(last)
    del last
    inferred_row = is_source & (sources != "tracker")
    inferred_run = np.bincount(run, weights=inferred_row, minlength=n_runs) > 0
    part_cause = np.concatenate([np.full(len(at), _IDLE), rest])
    part_run = np.concatenate([run, run])
    part_usd = np.concatenate([idle, waste - idle])
    has = part_usd > 0
    keys, where = np.unique(part_cause[has] * n_runs + part_run[has], return_inverse=True)
    usd = _sums(where, part_usd[has], len(keys))
    cause, run_of = keys // n_runs, keys % n_runs  # by cause, in :data:`CAUSES` order
    inferred = (cause != _IDLE) & inferred_run[run_of]

    def names_of(parts: np.ndarray) -> np.ndarray:
        # the names of these parts' runs alone (a million runs' names are not made objects)
        rows = last_of_run[run_of[parts]]
        names, is_name = _text(runs, "name", at[rows])
        is_name[is_name] = ~_blank(names[is_name])
        return np.where(is_name, names, ids[rows])

    top = _top(cause, usd, names_of)

    bounds = np.searchsorted(cause, np.arange(len(CAUSES) + 1))
    totals: dict[str, float] = {}
    inferred_usd: dict[str, float] = {}
    for i, c in enumerate(CAUSES):
        lo, hi = bounds[i], bounds[i + 1]
        if hi > lo:
            totals[c] = math.fsum(usd[lo:hi].tolist())
            inferred_usd[c] = math.fsum(usd[lo:hi][inferred[lo:hi]].tolist())
    cents = _cents(totals)
    out = [
        CauseLine(
            cause=c,
            label=CAUSES[c],
            waste_usd=total,
            inferred_usd=inferred_usd[c],
            cents=cents[c],
            runs=int(bounds[_CODES[c] + 1] - bounds[_CODES[c]]),
            top=top.get(_CODES[c], ()),
            fix=OVERSIZED_FIX if c == "oversized" else ADVICE.get(c, ""),
        )
        for c, total in totals.items()
    ]
    out.sort(key=lambda c: (-c.waste_usd, c.cause))
    return tuple(out)


def _blank(texts: np.ndarray) -> np.ndarray:
    """Whether each text is empty or only spaces (``not t.strip()``): in Arrow where pyarrow
    is installed, one strip each where not."""
    found = arrow_text.blank(texts)
    if found is not None:
        return found
    return (pd.Series(texts, dtype=object).str.strip().str.len() == 0).to_numpy(dtype=bool)


def _rest_causes(verdicts: np.ndarray, is_text: np.ndarray, oversized: np.ndarray) -> np.ndarray:
    """:func:`cause_of` each run, as codes: its verdict's where text names a cause, else
    oversized or below target."""
    named = np.full(len(verdicts), -1)
    named[is_text] = pd.Series(verdicts[is_text], dtype=object).map(_NAMED).fillna(-1).to_numpy()
    unnamed = np.where(oversized, _CODES["oversized"], _CODES["below-target"])
    return np.where(named >= 0, named, unnamed)


def _sums(where: np.ndarray, usd: np.ndarray, n: int) -> np.ndarray:
    """The dollars summed by ``where`` (``n`` sums) as :func:`math.fsum` sums them: two parts
    (a run's idle part and its rest) in one rounding, as ``bincount`` adds them; more (rows of
    one run id) by fsum."""
    sums = np.bincount(where, weights=usd, minlength=n)
    count = np.bincount(where, minlength=n)
    many = np.flatnonzero(count > 2)
    if len(many):
        order = np.argsort(where, kind="stable")
        for k, lo in zip(many, np.searchsorted(where[order], many), strict=True):
            sums[k] = math.fsum(usd[order[lo : lo + count[k]]].tolist())
    return sums


def _top(
    cause: np.ndarray, usd: np.ndarray, names_of: Callable[[np.ndarray], np.ndarray]
) -> dict[int, tuple[tuple[str, float], ...]]:
    """Per cause (its code; ``cause`` sorted), its :data:`TOP_RUNS` runs with the most
    dollars, by name where the dollars tie: (name, USD); ``names_of``: the names of the runs
    at these positions."""
    # the runs at or over their cause's TOP_RUNS-th dollars (ties at it too), then those by
    # name: a million runs' names are never sorted
    by_usd = np.lexsort((-usd, cause))
    sorted_cause, sorted_usd = cause[by_usd], usd[by_usd]
    start = np.searchsorted(sorted_cause, sorted_cause, side="left")
    end = np.searchsorted(sorted_cause, sorted_cause, side="right")
    nth = sorted_usd[np.minimum(start + TOP_RUNS, end) - 1]
    picked = by_usd[sorted_usd >= nth]
    top = pd.DataFrame(
        {
            "cause": cause[picked],
            "usd": usd[picked],
            "name": pd.Series(names_of(picked), dtype=object),  # str's order, as sorted() has it
        }
    )
    top = top.sort_values(["cause", "usd", "name"], ascending=[True, False, True])
    return {
        int(code): tuple(zip(g["name"].tolist(), g["usd"].tolist(), strict=True))
        for code, g in top.groupby("cause").head(TOP_RUNS).groupby("cause")
    }


def _usd(runs: pd.DataFrame, column: str) -> np.ndarray:
    """A dollar column's values: 0 for missing, NaN, text or negative."""
    if column not in runs:
        return np.zeros(len(runs))
    x = pd.to_numeric(runs[column], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(x) & (x > 0), x, 0.0)


def _text(
    runs: pd.DataFrame, column: str, at: np.ndarray, *, shared: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """A column's values at rows ``at`` (None without the column), and which of them are text;
    ``shared``: one object per distinct value (:func:`shared_objects`: a million runs'
    sources are a few strings, not a million). The rows are taken before they are made
    objects: a few runs' names are not a million runs' names made objects."""
    if column not in runs:
        return np.full(len(at), None, dtype=object), np.zeros(len(at), dtype=bool)
    col = runs[column]
    every = len(at) == len(col) and bool((at == np.arange(len(at))).all())
    taken = col if every else col.iloc[at]
    values = shared_objects(taken) if shared else taken.to_numpy(dtype=object)
    if pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
        return values, pd.notna(values)
    # of mixed types (not from the store): each value looked at
    return values, np.fromiter((isinstance(v, str) for v in values), dtype=bool, count=len(at))


def _ids(runs: pd.DataFrame, at: np.ndarray) -> np.ndarray:
    """The run ids at rows ``at``, as text (``str`` of a value of another type)."""
    values, is_text = _text(runs, "run_id", at)
    if is_text.all():
        return values
    return np.array([str(v) for v in values.tolist()], dtype=object)


def _cents(totals: dict[str, float]) -> dict[str, int]:
    """Each total in whole cents, the rounding left over given to the largest remainders, so
    that they add up to the sum's cents."""
    whole = round(math.fsum(totals.values()) * 100)
    floors = {c: math.floor(v * 100) for c, v in totals.items()}
    left = whole - sum(floors.values())
    order: Sequence[str] = sorted(totals, key=lambda c: (-(totals[c] * 100 - floors[c]), c))
    for c in order[: max(left, 0)]:
        floors[c] += 1
    return floors
