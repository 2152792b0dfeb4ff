"""The "fix first" section, right under the headline: the week's largest dollars an owner can
act on, per run or scheduler job (recoverable waste plus GPU-time paid and not measured), with
who owns it, its cause and the fix in a few words; the JSON's ``fix_first`` and the CSV's
section ``fix_first``. A team's page has its own largest items."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd

from reports.kpi import runs_to_fix
from reports.kpi.causes import CAUSES, cause_of
from reports.kpi.ledger import (
    BUCKETS,
    FAILED_CAUSE,
    JOB_KIND,
    REDONE_CAUSE,
    SLOW_NODE_CAUSE,
    THROTTLED_CAUSE,
    UNMEASURED_VERDICT,
)
from reports.render.exports import plain
from reports.render.fmt import as_number, fmt_usd, text_or_dash

if TYPE_CHECKING:
    from reports.sections.week import Week

ITEMS = 5
"""Items the section names."""
MIN_USD = 0.005
"""Dollars under which an item is not named (nothing to act on)."""
SHORT_FIX: dict[str, str] = {
    "idle": "release the GPUs while they are not used",
    "imbalanced": "request only the GPUs the job uses",
    "input-bound": "more DataLoader workers, pin_memory",
    "communication-bound": "overlap communication with compute",
    "small-batch": "raise the batch size",
    "low-efficiency": "bf16 and fused kernels",
    "oversized": "run it on the cheaper GPU right-sizing names",
    "below-target": "profile a few steps",
    UNMEASURED_VERDICT: "track all of its time, or release the GPUs",
    FAILED_CAUSE: "read why it stopped; checkpoint so a restart resumes",
    REDONE_CAUSE: "checkpoint more often, so a restart re-does less",
    THROTTLED_CAUSE: "ask the node's operators to check its cooling and power caps",
    SLOW_NODE_CAUSE: "ask the node's operators to check it against its siblings",
}
"""Each cause's fix in a few words (the full advice is in the runs to fix)."""
_CSV_FIELDS = (
    "kind",
    "name",
    "usd",
    "waste_usd",
    "unmeasured_usd",
    "failed_usd",
    "redone_usd",
    "throttled_usd",
    "slow_node_usd",
    "cause",
)
"""An item's fields in the CSV's ``fix_first`` rows."""


@dataclass(frozen=True)
class FixFirst:
    """The week's first runs and jobs to fix (:func:`reports.kpi.runs_to_fix`: by recoverable
    waste plus not measured plus failed and re-done work plus the machine's throttled time
    and slow nodes; its first
    4 × :data:`ITEMS` and each team's
    first as many, what the section and a team's page look at), of which the section names the
    first :data:`ITEMS`."""

    rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    oversized: frozenset[str] = frozenset()
    """Run ids a cheaper GPU fits (the right-sizing's)."""
    name: ClassVar[str] = "fix_first"
    place: ClassVar[str] = "lead"

    def of_team(self, team: str) -> FixFirst:
        rows = self.rows
        if len(rows) and "team" in rows:
            rows = rows[rows["team"] == team].reset_index(drop=True)
        return FixFirst(rows, self.oversized)

    def items(self) -> list[dict[str, Any]]:
        """The first :data:`ITEMS` with dollars to act on, as plain values."""
        out = []
        for r in self.rows.head(4 * ITEMS).to_dict("records"):
            waste = _usd(r.get("waste_usd"))
            unmeasured = _usd(r.get("unmeasured_usd"))
            failed = _usd(r.get("failed_usd"))
            throttled = _usd(r.get("throttled_usd"))
            slow = _usd(r.get("slow_node_usd"))
            redone = _usd(r.get("redone_usd"))
            usd = waste + unmeasured + failed + redone + throttled + slow
            if usd < MIN_USD:
                continue
            job = r.get("kind") == JOB_KIND
            verdict = r.get("verdict")
            if failed >= max(waste, unmeasured, throttled, slow) and failed > 0:  # its largest
                cause = FAILED_CAUSE
            elif redone > max(waste, unmeasured, throttled, slow):
                cause = REDONE_CAUSE
            elif max(throttled, slow) > max(waste, unmeasured):  # the machine's
                cause = THROTTLED_CAUSE if throttled >= slow else SLOW_NODE_CAUSE
            elif job or unmeasured > waste:
                cause = UNMEASURED_VERDICT
            else:
                cause = cause_of(verdict, oversized=str(r.get("run_id")) in self.oversized)
            out.append(
                {
                    "run_id": str(r.get("run_id")),
                    "kind": "job" if job else "run",
                    "name": r.get("name"),
                    "user": r.get("user"),
                    "team": r.get("team"),
                    "usd": usd,
                    "waste_usd": waste,
                    "unmeasured_usd": unmeasured,
                    "failed_usd": failed,
                    "redone_usd": redone,
                    "throttled_usd": throttled,
                    "slow_node_usd": slow,
                    "cause": cause,
                }
            )
            if len(out) == ITEMS:
                break
        return out

    def view(self, *, brief: bool = False) -> Mapping[str, Any] | None:
        items = self.items()
        if not items:
            return None
        return {
            "items": [
                {
                    "usd": fmt_usd(i["usd"]),
                    "name": text_or_dash(i["name"], i["run_id"]),
                    "job": i["run_id"].partition(":")[2] if i["kind"] == "job" else "",
                    "who": " · ".join(text_or_dash(x) for x in (i["user"], i["team"]) if x) or "—",
                    "cause": CAUSES.get(i["cause"], BUCKETS.get(i["cause"], i["cause"])),
                    "fix": SHORT_FIX.get(i["cause"], ""),
                }
                for i in items
            ]
        }

    def summary(self) -> list[tuple[str, str, str]]:
        return []

    def document(self, tz: tzinfo) -> dict[str, Any]:
        return {"fix_first": [plain(i) for i in self.items()]}

    def csv_rows(self, doc: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
        for i in doc["fix_first"]:
            yield (
                "fix_first",
                i["run_id"],
                {f: i[f] for f in _CSV_FIELDS},
            )

    def card_lines(self) -> list[str]:
        return []


def _usd(value: object) -> float:
    """Known dollars; an unpriced (NaN, None) amount is not a figure to rank by."""
    return as_number(value) or 0.0


def read(week: Week) -> FixFirst:
    """The week's runs and jobs to fix, as the runs to fix orders them."""
    k = week.kpis
    fits = k.rightsizing
    oversized = frozenset(fits["run_id"].astype(str).tolist()) if "run_id" in fits else frozenset()
    # the rows the section and each team's page can show (a million runs are not kept)
    return FixFirst(runs_to_fix(k, first=4 * ITEMS, by_team=True), oversized)
