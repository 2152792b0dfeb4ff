"""Recurring jobs: the runs of the same work, grouped by a job key, and their cost per unit of
work over the weeks.

A run's key (:func:`job_key`) is the one it recorded (``track(job_key=…)``, ``[tracker]
job_key``, ``GPU_KPI_JOB_KEY`` or Slurm's job name: its ``job_key`` link), else its
Kubernetes workload's (a DCGM import's ``kubernetes_workload`` link, the name's run number
dropped: a CronJob's Jobs are one job), else its name with the run's own suffixes dropped
(:func:`normalized_name`: ``resnet-nightly-1123`` → ``resnet-nightly``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from tracker.cost import weighted_util_pct
from tracker.record import JOB_KEY_LINK
from tracker.scheduler import WORKLOAD_LINK

_SUFFIX = re.compile(r"^(?P<rest>.*?[^-_.:/ ])[-_.:/ ]+(?P<token>[0-9A-Za-z]+)$")
_HASH = re.compile(r"^(?=.*\d)(?=.*[a-f])[0-9a-f]{6,}$")
_STAMP = re.compile(r"^\d+(t\d+z?)?$")

RECURRING_COLUMNS = (
    "job_key",
    "runs",
    "weeks",
    "runs_this_week",
    "gpu_hours",
    "spend_usd",
    "utilization_pct",
    "usd_per_1k_samples",
    "usd_per_1m_tokens",
    "first_week",
    "first_usd_per_unit",
    "last_usd_per_unit",
    "unit",
)
"""A recurring job over the report's weeks (:func:`recurring_jobs`)."""


def normalized_name(name: str) -> str:
    """A run's name without what makes it one run of many: trailing numbers, dates and times
    (``-1123``, ``-20261123-101500``, ``_2026-11-23``) and hashes (``-3f9e2c1a``), each after a
    separator; the name itself where nothing else would be left.

    Args:
        name: The run's name.
    """
    out = " ".join(str(name).split())
    while (m := _SUFFIX.match(out)) and (
        _STAMP.match(m["token"].lower()) or _HASH.match(m["token"].lower())
    ):
        out = m["rest"]
    return out


def job_key(name: object, links: object) -> str:
    """The run's job key (see the module docstring); "" for a run with no name.

    Args:
        name: The run's name.
        links: The run's links (a mapping; anything else is none).
    """
    links = links if isinstance(links, Mapping) else {}
    given = links.get(JOB_KEY_LINK)
    if isinstance(given, str) and given.strip():
        return " ".join(given.split())
    workload = links.get(WORKLOAD_LINK)
    if isinstance(workload, str) and workload.strip():
        head, _, last = workload.strip().rpartition("/")
        return f"{head}/{normalized_name(last)}" if head else normalized_name(last)
    return normalized_name(name) if isinstance(name, str) else ""


def recurring_jobs(per: pd.DataFrame, weeks: Sequence[Any], this_week: Any) -> pd.DataFrame:
    """The job keys with runs in two weeks or more of ``weeks``, most spend first: their runs,
    GPU-hours, spend and utilization over the weeks, and their cost per unit of work (per 1k
    samples, else per 1M tokens, over the runs that counted them, else per GPU-hour) in the
    first of those weeks and in the last.

    Args:
        per: The (run, week) rows (:func:`reports.kpi.weekly.run_weeks`): ``run_id``,
            ``week``, ``name``, ``links``, ``gpu_hours``, ``known_hours``, ``used_hours``,
            ``spend_usd``, ``priced``, and ``samples`` and ``tokens`` (a run's count shared
            among its weeks by GPU-hours).
        weeks: The weeks looked at.
        this_week: The report's week.

    Returns:
        A frame of :data:`RECURRING_COLUMNS`.
    """
    rows = per[per["week"].isin(list(weeks))]
    if not len(rows):
        return pd.DataFrame(columns=list(RECURRING_COLUMNS))
    keys = [job_key(n, lk) for n, lk in zip(rows["name"], rows["links"], strict=True)]
    rows = rows.assign(job_key=keys)
    rows = rows[rows["job_key"] != ""]
    priced = rows["priced"].astype(bool)
    out = []
    for key, g in rows.groupby("job_key", sort=False):
        if g["week"].nunique() < 2:
            continue
        gp = priced[g.index]
        unit, per_week = _unit_costs(g, gp)
        first = next(((w, v) for w, v in per_week if v is not None), (None, None))
        last = next(((w, v) for w, v in reversed(per_week) if v is not None), (None, None))
        out.append(
            {
                "job_key": key,
                "runs": g["run_id"].nunique(),
                "weeks": g["week"].nunique(),
                "runs_this_week": g.loc[g["week"] == this_week, "run_id"].nunique(),
                "gpu_hours": float(g["gpu_hours"].sum()),
                "spend_usd": float(g.loc[gp, "spend_usd"].sum()),
                "utilization_pct": weighted_util_pct(
                    100.0 * float(g["used_hours"].sum()), float(g["known_hours"].sum())
                ),
                "usd_per_1k_samples": _per(g, gp, "samples", 1_000.0),
                "usd_per_1m_tokens": _per(g, gp, "tokens", 1_000_000.0),
                "first_week": first[0],
                "first_usd_per_unit": first[1],
                "last_usd_per_unit": last[1]
                if last[0] is not None and last[0] != first[0]
                else None,
                "unit": unit,
            }
        )
    frame = pd.DataFrame(out, columns=list(RECURRING_COLUMNS))
    return frame.sort_values(["spend_usd", "job_key"], ascending=[False, True], ignore_index=True)


def _per(g: pd.DataFrame, priced: pd.Series, column: str, unit: float) -> float | None:
    """USD per ``unit`` of ``column`` over the priced rows whose run counted it."""
    counted = pd.to_numeric(g[column], errors="coerce")
    ok = priced & counted.notna() & (counted > 0)
    work = float(counted[ok].sum())
    return float(g.loc[ok, "spend_usd"].sum()) / work * unit if work > 0 else None


def _unit_costs(g: pd.DataFrame, priced: pd.Series) -> tuple[str, list[tuple[Any, float | None]]]:
    """The unit the key's work is counted in (``1k samples``, ``1M tokens``, else
    ``GPU-hour``) and its cost per unit in each week, oldest first."""
    units = (("samples", 1_000.0, "1k samples"), ("tokens", 1_000_000.0, "1M tokens"))
    column, unit, name = next(
        (u for u in units if pd.to_numeric(g[u[0]], errors="coerce").fillna(0).gt(0).any()),
        ("", 1.0, "GPU-hour"),
    )
    out = []
    for week, w in g.groupby("week", sort=True):
        if column:
            out.append((week, _per(w, priced[w.index], column, unit)))
        else:
            hours = float(w.loc[priced[w.index], "gpu_hours"].sum())
            out.append(
                (
                    week,
                    float(w.loc[priced[w.index], "spend_usd"].sum()) / hours if hours > 0 else None,
                )
            )
    return name, out
