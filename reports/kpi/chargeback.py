"""Chargeback for finance: one row per (week, team, project, GPU model) with the GPU-hours,
spend, recoverable waste and idle dollars of the runs there, as the weekly report counts them
(spend and waste of priced GPU-time only; GPU-hours without a price in a column of their own),
and the scheduler's GPU-time no run holds (the week's ledger, :mod:`reports.kpi.ledger`: a
job's unsampled time) in ``gpu_hours`` and ``spend_usd`` of its team's row, not in ``runs``.

Where Slurm jobs or Kubernetes pods are imported, what the scheduler allocated to each team is
charged too, split by what the samples said: ``allocated_usd`` = ``productive_usd`` (sampled,
not idle) + ``allocated_idle_usd`` + ``allocated_no_data_usd`` (:class:`reports.kpi.allocations.
TeamAllocation`). A job has no project: these are on the team's row of its GPU model with the
project empty (a row of their own where the team's runs all name a project), in the columns
:data:`ALLOCATION_COLUMNS`, which the CSV has only where allocations were ever imported."""

from __future__ import annotations

from typing import Any

from reports.kpi.weekly import WeekKpis

COLUMNS = (
    "week",
    "team",
    "project",
    "gpu_model",
    "runs",
    "gpu_hours",
    "spend_usd",
    "waste_usd",
    "idle_usd",
    "unpriced_gpu_hours",
)
ALLOCATION_COLUMNS = (
    "allocated_gpu_hours",
    "allocated_usd",
    "productive_usd",
    "allocated_idle_usd",
    "allocated_no_data_usd",
)
"""After :data:`COLUMNS` where the store has Slurm jobs or Kubernetes pods imported."""
_KEYS = ["team", "project", "gpu_model"]


def chargeback_rows(k: WeekKpis, week: str) -> list[dict[str, Any]]:
    """The week's rows (``week``: its label), sorted by team, project and model; a run
    without a team or project is under ``""``. Their sums are the week's headline figures (and
    the allocation columns' the report's allocation totals, where ``k.allocations`` is set)."""
    rows = {(str(r["team"]), str(r["project"]), str(r["gpu_model"])): r for r in _run_rows(k, week)}
    if k.allocations is None:
        return [rows[key] for key in sorted(rows)]
    for j in k.allocations.jobs:
        key = (j.team, "", j.gpu_model or "")
        row = rows.get(key)
        if row is None:
            row = rows[key] = {
                "week": week,
                "team": key[0],
                "project": "",
                "gpu_model": key[2],
                **dict.fromkeys(("runs", "gpu_hours", "spend_usd", "waste_usd", "idle_usd"), 0),
                "unpriced_gpu_hours": 0.0,
            }
        got = {
            "allocated_gpu_hours": j.allocated_gpu_hours,
            "allocated_usd": j.allocated_usd,
            "productive_usd": j.productive_usd,
            "allocated_idle_usd": j.idle_usd,
            "allocated_no_data_usd": j.no_samples_usd,
        }
        for c, v in got.items():
            row[c] = float(row.get(c) or 0.0) + (v or 0.0)
    out = []
    for key in sorted(rows):
        row = rows[key]
        for c in ALLOCATION_COLUMNS:
            row[c] = round(float(row.get(c) or 0.0), 4 if c.endswith("hours") else 2)
        out.append(row)
    return out


def _run_rows(k: WeekKpis, week: str) -> list[dict[str, Any]]:
    """The rows of the week's runs."""
    r = k.runs
    if r.empty:
        return []
    priced = r["priced"].astype(bool)
    frame = r.assign(
        **{c: r[c].fillna("").astype(str) for c in _KEYS},
        spend=r["spend_usd"].where(priced, 0.0).fillna(0.0),
        waste=r["waste_usd"].where(priced, 0.0).fillna(0.0),
        idle=r["idle_usd"].where(priced, 0.0).fillna(0.0),
        unpriced=r["gpu_hours"].where(~priced, 0.0),
        # a scheduler job's row (the ledger's GPU-time no run holds) is charged, not a run
        run=r["run_id"].where(r["kind"] != "job") if "kind" in r else r["run_id"],
    )
    g = (
        frame.groupby(_KEYS, sort=True)
        .agg(
            runs=("run", "nunique"),
            gpu_hours=("gpu_hours", "sum"),
            spend_usd=("spend", "sum"),
            waste_usd=("waste", "sum"),
            idle_usd=("idle", "sum"),
            unpriced_gpu_hours=("unpriced", "sum"),
        )
        .reset_index()
    )
    return [
        {
            "week": week,
            "team": row.team,
            "project": row.project,
            "gpu_model": row.gpu_model,
            "runs": int(row.runs),
            "gpu_hours": round(float(row.gpu_hours), 4),
            "spend_usd": round(float(row.spend_usd), 2),
            "waste_usd": round(float(row.waste_usd), 2),
            "idle_usd": round(float(row.idle_usd), 2),
            "unpriced_gpu_hours": round(float(row.unpriced_gpu_hours), 4),
        }
        for row in g.itertuples(index=False)
    ]
