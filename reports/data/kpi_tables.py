"""The weekly KPIs as SQL tables beside the runs, for the BI tools teams already run (Metabase,
Superset, Grafana's SQL data sources): ``gpu_kpi_weekly`` (one row per week, time zone and
basis: the report's headline) and ``gpu_kpi_weekly_team`` (the same per team). Written by every
report the CLI or the service builds, from the figures the report shows (its JSON's
``headline`` and ``by_team``), so a chart over them equals the report: prices, targets and the
idle rule are the report's, which plain SQL over the minute rows could not apply.

The tables are created on first use, like the delivery log; a week written again replaces its
rows (the report of a week can change when runs are imported late).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tracker.store.schema import SCHEMA_LOCK_KEY, UTCDateTime

if TYPE_CHECKING:
    from tracker.store import RunStore

HEADLINE = (
    "gpu_hours",
    "known_gpu_hours",
    "utilization_pct",
    "spend_usd",
    "waste_usd",
    "idle_usd",
    "runs",
    "underutilized_runs",
    "underutilized_gpu_hours_pct",
    "usd_per_1k_samples",
    "usd_per_1m_tokens",
    "unpriced_gpu_hours",
    "energy_kwh",
    "co2e_kg",
)
"""``gpu_kpi_weekly``'s figures, as the report's JSON ``headline`` names them."""
TEAM = ("gpu_hours", "utilization_pct", "spend_usd", "waste_usd", "idle_usd", "co2e_kg", "runs")
"""``gpu_kpi_weekly_team``'s figures, as the JSON ``by_team`` rows name them."""
_INTEGERS = {"runs", "underutilized_runs"}

_metadata = sa.MetaData()


def _key() -> list[sa.Column[Any]]:
    return [
        sa.Column("week", sa.String(8), primary_key=True),
        sa.Column("time_zone", sa.Text, primary_key=True),
        sa.Column("basis", sa.String(16), primary_key=True),
    ]


def _figures(names: Sequence[str]) -> list[sa.Column[Any]]:
    return [sa.Column(n, sa.Integer if n in _INTEGERS else sa.Double) for n in names]


weekly_table = sa.Table(
    "gpu_kpi_weekly",
    _metadata,
    *_key(),
    *_figures(HEADLINE),
    sa.Column("computed_at", UTCDateTime, nullable=False),
)
weekly_team_table = sa.Table(
    "gpu_kpi_weekly_team",
    _metadata,
    *_key(),
    sa.Column("team", sa.Text, primary_key=True),
    *_figures(TEAM),
    sa.Column("computed_at", UTCDateTime, nullable=False),
)


def write_week(
    store: RunStore,
    *,
    week: str,
    time_zone: str,
    basis: str,
    headline: Mapping[str, Any],
    teams: Sequence[Mapping[str, Any]],
    computed_at: datetime,
) -> None:
    """Replace the week's rows (``week``, ``time_zone``, ``basis``) with these figures, in one
    transaction; the tables are made on first use."""
    key = {"week": week, "time_zone": time_zone, "basis": basis}

    def work(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        _metadata.create_all(conn, checkfirst=True)
        for table in (weekly_table, weekly_team_table):
            conn.execute(sa.delete(table).where(*(table.c[k] == v for k, v in key.items())))
        conn.execute(
            sa.insert(weekly_table),
            [{**key, "computed_at": computed_at, **{f: headline.get(f) for f in HEADLINE}}],
        )
        rows = [
            {
                **key,
                "computed_at": computed_at,
                "team": str(t.get("team") or ""),
                **{f: t.get(f) for f in TEAM},
            }
            for t in teams
        ]
        if rows:
            conn.execute(sa.insert(weekly_team_table), rows)

    store.transaction(work, write=True)


def publish_week(store_url: str | None, week: Mapping[str, Any], *, now: datetime) -> None:
    """Write a week's report figures into the store's tables (:func:`write_week`), as the
    report shows them. A store that will not take them costs a warning, not the report.

    Args:
        store_url: The run store's URL (None: the default store); it must exist.
        week: The week's JSON export as a dict (:func:`reports.render.exports.to_dict`): its
            ``week``, ``time_zone``, ``basis``, ``headline`` and ``by_team``.
        now: When the figures were computed (timezone-aware).
    """
    from tracker.store import RunStore, default_store_url
    from tracker.store.engine import mask_text
    from tracker.text import one_line

    try:
        with RunStore(store_url or default_store_url(), create=False) as store:
            write_week(
                store,
                week=week["week"],
                time_zone=week["time_zone"],
                basis=week["basis"],
                headline=week["headline"],
                teams=week["by_team"],
                computed_at=now,
            )
    except Exception as e:  # a role that may read but not create tables, a locked file…
        logging.getLogger("gpu_kpi").warning(
            "gpu-kpi: the %s figures are not in the store's gpu_kpi_weekly tables: %s: %s",
            week["week"],
            type(e).__name__,
            mask_text(one_line(str(e))[:300], None),
        )
