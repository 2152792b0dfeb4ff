"""Chargeback for finance: one row per (week, team, project, GPU model) with the GPU-hours,
spend, recoverable waste and idle dollars of the runs there, as the weekly report counts them
(spend and waste of priced GPU-time only; GPU-hours without a price in a column of their own)."""

from __future__ import annotations

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
_KEYS = ["team", "project", "gpu_model"]


def chargeback_rows(k: WeekKpis, week: str) -> list[dict[str, object]]:
    """The week's rows (``week``: its label), sorted by team, project and model; a run
    without a team or project is under ``""``. Their sums are the week's headline figures."""
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
    )
    g = (
        frame.groupby(_KEYS, sort=True)
        .agg(
            runs=("run_id", "nunique"),
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
