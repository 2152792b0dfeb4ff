"""The scheduler section: the week's Slurm jobs and Kubernetes pods against the minute samples
that say what their GPUs did (:mod:`reports.kpi.allocations`), per cluster capacity →
allocated → busy → useful, per team what the allocated GPU-time paid for; on the page, in the
email (its totals), the JSON (``allocations``) and the CSV (sections ``allocations``,
``capacity``, ``allocation_team``, ``job``). Shown once a job or pod was ever imported; a
week without any says none held GPUs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, ClassVar

from reports.kpi.allocations import AllocationWeek
from reports.render.exports import MAX_JSON_RUNS, plain
from reports.render.fmt import fmt_gpus, fmt_hours, fmt_pct, fmt_usd
from reports.render.html import MAX_RUN_ROWS

if TYPE_CHECKING:
    from reports.sections.week import Week

JOB_FIELDS = (
    "source",
    "cluster",
    "job_id",
    "shown_id",
    "name",
    "user",
    "account",
    "team",
    "partition",
    "state",
    "start",
    "end",
    "gpus",
    "gpu_model",
    "matched",
    "runs",
    "allocated_gpu_hours",
    "sampled_gpu_hours",
    "idle_gpu_hours",
    "no_samples_gpu_hours",
    "util_pct",
    "sm_known_gpu_hours",
    "sm_active_pct",
    "price_per_gpu_hour",
    "allocated_usd",
    "idle_usd",
    "no_samples_usd",
)
"""A Slurm job's or Kubernetes pod's week (:class:`reports.kpi.allocations.JobLine`):
``source`` ``slurm`` or ``kubernetes``; ``matched`` ``id``, ``node``, ``workload`` or empty;
``runs`` the run ids whose samples it took; ``util_pct`` on the report's basis,
``sm_active_pct`` SM activity (null where no sample has it); dollars null where unpriced."""
ALLOCATION_TOTALS = (
    "jobs",
    "allocated_gpu_hours",
    "sampled_gpu_hours",
    "idle_gpu_hours",
    "no_samples_gpu_hours",
    "allocated_usd",
    "idle_usd",
    "no_samples_usd",
    "unpriced_gpu_hours",
)
"""The week's jobs together: GPU-hours allocated, with samples, of those idle, with no samples;
the dollars of the priced jobs; the GPU-hours of jobs no price covers."""
CAPACITY_FIELDS = (
    "source",
    "cluster",
    "nodes",
    "gpus",
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "allocation_pct",
    "sampled_gpu_hours",
    "busy_gpu_hours",
    "util_pct",
    "sm_known_gpu_hours",
    "sm_active_pct",
    "unallocated_gpu_hours",
    "unallocated_owned_usd",
)
"""A scheduler's nodes in the week (:class:`reports.kpi.allocations.CapacityLine`): capacity →
allocated → sampled → busy, the utilization of the allocated time measured, useful: the SM
activity of the allocated time with an SM value (null: none), and the unallocated GPU-hours (in
dollars for owned models)."""
TEAM_ALLOCATION_FIELDS = (
    "team",
    "jobs",
    "allocated_gpu_hours",
    "productive_gpu_hours",
    "idle_gpu_hours",
    "no_samples_gpu_hours",
    "allocated_usd",
    "productive_usd",
    "idle_usd",
    "no_samples_usd",
    "unpriced_gpu_hours",
)
"""A team's allocated GPU-time (:class:`reports.kpi.allocations.TeamAllocation`): productive
(sampled, not idle), allocated-idle and allocated with no samples, whose dollars add up to the
allocated dollars (of priced jobs)."""

MATCHED = {
    "id": "by job id",
    "node": "by node and time",
    "workload": "by workload and node",
    "sacct": "sacct's step average",
}
"""How a job's samples were found (:attr:`reports.kpi.allocations.JobLine.matched`), in words."""


def schedulers(a: Any) -> tuple[str, str, str]:
    """Who allocated and what to, in words, by the sources of the week's jobs: ("Slurm",
    "job", "jobs"), ("Kubernetes", "pod", "pods"), both, or either where the week has none."""
    sources = {j.source for j in a.jobs}
    if sources == {"kubernetes"}:
        return "Kubernetes", "pod", "pods"
    if "kubernetes" in sources:
        return "Slurm and Kubernetes", "job or pod", "jobs and pods"
    if not sources:
        return "Slurm or Kubernetes", "job or pod", "jobs or pods"
    return "Slurm", "job", "jobs"


@dataclass(frozen=True)
class Scheduler:
    """The week's jobs and pods, and the nodes' capacity (None: none was ever imported)."""

    week: AllocationWeek | None = None
    name: ClassVar[str] = "allocations"
    place: ClassVar[str] = "top"

    def of_team(self, team: str) -> Scheduler:
        """The team's jobs (by their account's team); the nodes stay the fleet's."""
        return Scheduler(None if self.week is None else self.week.of_team(team))

    def view(self, *, brief: bool = False) -> Mapping[str, Any] | None:
        """The section's display strings: the jobs together, those with the most idle and
        unsampled dollars, each cluster's capacity, each team's share; None: nothing
        imported."""
        a = self.week
        if a is None:
            return None

        def usd(value: float | None, hours: float) -> str:
            return "n/a" if value is None and hours > 0 else fmt_usd(value or 0.0)

        rows = []
        for j in a.jobs[:MAX_RUN_ROWS]:
            rows.append(
                {
                    "job": f"{j.cluster}/{j.shown_id}" if j.cluster else j.shown_id,
                    "name": j.name,
                    "who": " · ".join(x for x in (j.user, j.team) if x),
                    "gpus": f"{fmt_gpus(j.gpus)} × {j.gpu_model}"
                    if j.gpu_model
                    else fmt_gpus(j.gpus),
                    "allocated": fmt_hours(j.allocated_gpu_hours),
                    "idle": fmt_hours(j.idle_gpu_hours),
                    "no_samples": fmt_hours(j.no_samples_gpu_hours),
                    "unused": usd(
                        None if j.price_per_gpu_hour is None else j.unused_usd,
                        j.idle_gpu_hours + j.no_samples_gpu_hours,
                    ),
                    "matched": MATCHED.get(j.matched, "no samples"),
                }
            )
        unpriced = a.unpriced_gpu_hours
        who, one, many = schedulers(a)
        return {
            "who": who,
            "one": one,
            "many": many,
            "jobs": len(a.jobs),
            "allocated": fmt_hours(a.total("allocated_gpu_hours")),
            "allocated_usd": fmt_usd(a.total_usd("allocated_usd")),
            "sampled": fmt_hours(a.total("sampled_gpu_hours")),
            "idle": fmt_hours(a.total("idle_gpu_hours")),
            "idle_usd": fmt_usd(a.total_usd("idle_usd")),
            "no_samples": fmt_hours(a.total("no_samples_gpu_hours")),
            "no_samples_usd": fmt_usd(a.total_usd("no_samples_usd")),
            "unpriced": fmt_hours(unpriced) if unpriced > 0 else "",
            "rows": rows,
            "capacity": [
                {
                    "who": {"slurm": "Slurm", "kubernetes": "Kubernetes"}.get(c.source, c.source)
                    + (f" ({c.cluster})" if c.cluster else ""),
                    "nodes": f"{c.gpus:,} GPUs on {c.nodes:,} node{'s' if c.nodes != 1 else ''}",
                    "capacity": fmt_hours(c.capacity_gpu_hours),
                    "allocated": fmt_hours(c.allocated_gpu_hours),
                    "allocation_pct": fmt_pct(c.allocation_pct, 0),
                    "busy": fmt_hours(c.busy_gpu_hours),
                    "busy_pct": fmt_pct(
                        100.0 * c.busy_gpu_hours / c.allocated_gpu_hours
                        if c.allocated_gpu_hours > 0
                        else None,
                        0,
                    ),
                    "unsampled": fmt_hours(max(0.0, c.allocated_gpu_hours - c.sampled_gpu_hours)),
                    "util": fmt_pct(c.util_pct, 0),
                    "useful": f"{fmt_pct(c.sm_active_pct, 0)} of {fmt_hours(c.sm_known_gpu_hours)}"
                    if c.sm_active_pct is not None
                    else "",
                    # hours only: the dollars of capacity nobody held are the ledger's (the lede's),
                    # which count owned GPUs from [owned] and leave out what runs held outside jobs
                    "unallocated": fmt_hours(c.unallocated_gpu_hours),
                }
                for c in a.capacity
            ],
            "teams": [
                {
                    "team": t.team or "(none)",
                    "jobs": t.jobs,
                    "allocated": f"{fmt_hours(t.allocated_gpu_hours)} · {fmt_usd(t.allocated_usd)}",
                    "productive": fmt_usd(t.productive_usd),
                    "idle": fmt_usd(t.idle_usd),
                    "no_samples": fmt_usd(t.no_samples_usd),
                    "productive_pct": fmt_pct(
                        100.0 * t.productive_usd / t.allocated_usd if t.allocated_usd > 0 else None,
                        0,
                    ),
                }
                for t in a.by_team()[:MAX_RUN_ROWS]
            ],
            "more": max(len(a.jobs) - MAX_RUN_ROWS, 0),
            "skipped": list(a.skipped),
        }

    def summary(self) -> list[tuple[str, str, str]]:
        return []

    def document(self, tz: tzinfo) -> dict[str, Any]:
        return {"allocations": self._document(tz)}

    def _document(self, tz: tzinfo) -> dict[str, Any] | None:
        a = self.week
        if a is None:
            return None
        totals: dict[str, Any] = {"jobs": len(a.jobs)}
        for f in ALLOCATION_TOTALS[1:]:
            if f.endswith("_usd"):
                totals[f] = a.total_usd(f)
            elif f == "unpriced_gpu_hours":
                totals[f] = a.unpriced_gpu_hours
            else:
                totals[f] = a.total(f)
        return {
            "totals": plain(totals),
            "jobs_count": len(a.jobs),
            "jobs": [_job(j, tz) for j in a.jobs[:MAX_JSON_RUNS]],
            "by_team": [
                plain({f: getattr(t, f) for f in TEAM_ALLOCATION_FIELDS}) for t in a.by_team()
            ],
            "capacity": [plain({f: getattr(c, f) for f in CAPACITY_FIELDS}) for c in a.capacity],
            "skipped": list(a.skipped),
        }

    def csv_rows(self, doc: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
        doc = doc["allocations"]
        if doc is None:
            return
        yield "allocations", "", doc["totals"]
        for row in doc["capacity"]:
            key = f"{row['source']}/{row['cluster']}" if row["cluster"] else row["source"]
            yield "capacity", key, {f: row[f] for f in CAPACITY_FIELDS[2:]}
        for row in doc["by_team"]:
            yield "allocation_team", row["team"], {f: row[f] for f in TEAM_ALLOCATION_FIELDS[1:]}
        for row in doc["jobs"]:
            key = f"{row['cluster']}/{row['job_id']}" if row["cluster"] else row["job_id"]
            yield "job", key, {f: row[f] for f in JOB_FIELDS if f not in ("cluster", "job_id")}

    def card_lines(self) -> list[str]:
        return []


def _job(j: Any, tz: tzinfo) -> dict[str, Any]:
    row = {f: getattr(j, f) for f in JOB_FIELDS}
    row["start"] = j.start.astimezone(tz).isoformat()
    row["end"] = None if j.end is None else j.end.astimezone(tz).isoformat()
    row["runs"] = list(j.runs)
    return plain(row)


def read(week: Week) -> Scheduler:
    """The week's jobs and pods as the report's KPIs hold them (:attr:`reports.kpi.WeekKpis.allocations`)."""
    return Scheduler(week.kpis.allocations)
