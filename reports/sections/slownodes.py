"""The slow-node section: recurring jobs whose runs on one node went slower than on the job's
other nodes (:mod:`reports.kpi.slownodes`), from the week's runs' own throughput: the page's
"Slow nodes", the JSON's ``slow_nodes`` and the CSV's ``slow_node`` rows. The machine's part of
the week: what it cost is the ledger's slow-node bucket, node by node."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd

from reports.kpi import slownodes
from reports.render.exports import plain, rows_of
from reports.render.fmt import fmt_hours, fmt_pct, fmt_usd, missing, text_or_dash

if TYPE_CHECKING:
    from reports.sections.week import Week

UNITS = {"samples": "samples/s", "tokens": "tokens/s"}
"""A throughput unit's name on the page (per GPU)."""


@dataclass(frozen=True)
class SlowNodes:
    """The week's slow nodes (:data:`reports.kpi.slownodes.SLOW_NODE_COLUMNS`), most dollars
    lost first."""

    rows: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(slownodes.SLOW_NODE_COLUMNS))
    )
    name: ClassVar[str] = "slow_nodes"
    place: ClassVar[str] = "detail"

    def of_team(self, team: str) -> SlowNodes:
        rows = self.rows
        return SlowNodes(rows[rows["team"] == team].reset_index(drop=True) if len(rows) else rows)

    def view(self, *, brief: bool = False) -> Mapping[str, Any] | None:
        if not len(self.rows):
            return None
        return {
            "nodes": [
                {
                    "job_key": r["job_key"],
                    "host": r["host"],
                    "team": text_or_dash(r["team"]),
                    "sentence": sentence(r),
                    "runs": f"{r['runs_on_node']} here, {r['runs_elsewhere']} on "
                    f"{r['nodes_elsewhere']} other node{'s' if r['nodes_elsewhere'] != 1 else ''}",
                    "throughput": f"{r['throughput_node']:,.0f} vs "
                    f"{r['throughput_elsewhere']:,.0f} {UNITS[r['unit']]}",
                    "slowdown": fmt_pct(r["slowdown_pct"], 0),
                    "noise": fmt_pct(r["noise_pct"], 0),
                    "lost": f"{fmt_hours(r['lost_gpu_hours'])}, "
                    + ("n/a (no price)" if missing(r["lost_usd"]) else fmt_usd(r["lost_usd"])),
                }
                for r in self.rows.to_dict("records")
            ],
            "min_slowdown": fmt_pct(100 * slownodes.MIN_SLOWDOWN, 0),
            "noise_times": f"{slownodes.NOISE_TIMES:g}",
        }

    def summary(self) -> list[tuple[str, str, str]]:
        return []

    def document(self, tz: tzinfo) -> dict[str, Any]:
        return {
            "slow_nodes": [
                {f: plain(row[f]) for f in slownodes.SLOW_NODE_COLUMNS}
                for row in rows_of(self.rows)
            ]
        }

    def csv_rows(self, doc: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
        for row in doc["slow_nodes"]:
            key = f"{row['job_key']}@{row['host']}"
            yield "slow_node", key, {f: v for f, v in row.items() if f not in ("job_key", "host")}

    def card_lines(self) -> list[str]:
        return []


def sentence(r: Mapping[str, Any]) -> str:
    """One slow node said in a sentence.

    Args:
        r: A row of :data:`reports.kpi.slownodes.SLOW_NODE_COLUMNS`.

    Returns:
        ``nightly-train on n07 ran 18% slower than on its 3 other nodes (noise 1%): 1.1 GPU-h,
        $4.16 of its GPU-time was the machine, not the code``.
    """
    lost = "" if missing(r["lost_usd"]) else f", {fmt_usd(r['lost_usd'])}"
    n = r["nodes_elsewhere"]
    return (
        f"{r['job_key']} on {r['host']} ran {fmt_pct(r['slowdown_pct'], 0)} slower than on its "
        f"{n} other node{'s' if n != 1 else ''} (noise {fmt_pct(r['noise_pct'], 0)}): "
        f"{fmt_hours(r['lost_gpu_hours'])}{lost} of its GPU-time was the machine, not the code"
    )


def read(week: Week) -> SlowNodes:
    """The slow nodes of the runs of the report's week, as its ledger has them
    (:attr:`reports.kpi.weekly.WeekKpis.slow_nodes`)."""
    return SlowNodes(week.kpis.slow_nodes) if len(week.kpis.slow_nodes) else SlowNodes()
