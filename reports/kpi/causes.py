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
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from tracker.diagnosis import ADVICE

if TYPE_CHECKING:
    from reports.kpi.weekly import WeekKpis

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


def week_causes(k: WeekKpis) -> tuple[CauseLine, ...]:
    """The week's waste by cause (:func:`waste_by_cause`), its right-sizing's runs oversized."""
    fits = k.rightsizing
    oversized = set(fits["run_id"].astype(str)) if "run_id" in fits else set()
    return waste_by_cause(k.runs, oversized=oversized)


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
    # per cause: each run's dollars in it (an idle run's two parts are one), by run id
    by_run: dict[str, dict[str, list[float]]] = {c: {} for c in CAUSES}
    names: dict[str, str] = {}
    inferred_runs: set[str] = set()
    for r in runs.to_dict("records"):
        waste = _usd(r.get("waste_usd"))
        if not r.get("priced", True) or waste <= 0:
            continue
        idle = min(_usd(r.get("idle_usd")), waste)
        run_id = str(r.get("run_id"))
        name = r.get("name")
        names[run_id] = name if isinstance(name, str) and name.strip() else run_id
        if isinstance(r.get("source"), str) and r["source"] != "tracker":
            inferred_runs.add(run_id)
        rest = cause_of(r.get("verdict"), oversized=run_id in oversized)
        for cause, usd in (("idle", idle), (rest, waste - idle)):
            if usd > 0:
                by_run[cause].setdefault(run_id, []).append(usd)
    parts = {
        c: [(names[i], math.fsum(v), c != "idle" and i in inferred_runs) for i, v in p.items()]
        for c, p in by_run.items()
    }
    totals = {c: math.fsum(usd for _, usd, _ in p) for c, p in parts.items() if p}
    cents = _cents(totals)
    out = []
    for cause, total in totals.items():
        p = sorted(parts[cause], key=lambda x: (-x[1], x[0]))
        out.append(
            CauseLine(
                cause=cause,
                label=CAUSES[cause],
                waste_usd=total,
                inferred_usd=math.fsum(usd for _, usd, inferred in p if inferred),
                cents=cents[cause],
                runs=len(p),
                top=tuple((name, usd) for name, usd, _ in p[:TOP_RUNS]),
                fix=OVERSIZED_FIX if cause == "oversized" else ADVICE.get(cause, ""),
            )
        )
    out.sort(key=lambda c: (-c.waste_usd, c.cause))
    return tuple(out)


def _usd(value: object) -> float:
    """A dollar figure of a row: 0 for missing, NaN or negative."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) and x > 0 else 0.0


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
