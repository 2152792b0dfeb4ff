"""One Slurm job's GPU efficiency, as ``seff`` and jobstats say it, with dollars: ``gpu-kpi job
JOBID``.

The job is an imported allocation (:mod:`reports.data.allocations`); its figures are the weekly
report's rules over its own time: its GPU-seconds matched to minute samples by job id or by
node and time, every other job on its hosts sharing the node's samples
(:func:`reports.gputime.week_allocations` over ``[start, end)``). Per sampled GPU: its
utilization (time-weighted), peak memory and idle minutes. The note's waste is the report's
recoverable waste over the sampled GPU-time (:func:`tracker.cost.gpu_waste_usd` per GPU: its
idle time in full, the rest by the target rule; scaled to the job's share of a shared node's
samples); GPU-time with no samples is named apart, never guessed. A job that ended failed,
cancelled, on a node failure or out of memory (:func:`reports.rows.failed_state`) has
no waste: its sampled GPU-time is the ledger's failed work, named as such.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from reports.errors import ReportError
from reports.kpi.allocations import GpuRow, JobLine
from reports.kpi.ledger import UNMEASURED_ADVICE, UNMEASURED_VERDICT
from reports.rows import failed_state
from tracker.diagnosis import ADVICE
from tracker.units import WHOLE_S_PER_DAY, WHOLE_S_PER_HOUR

if TYPE_CHECKING:
    from reports.request import Request
    from reports.rows import Allocation
    from tracker.store import RunStore

NO_TELEMETRY = UNMEASURED_ADVICE
UNDER = (
    "The GPUs were busy under the target utilization: track the job with the gpu-kpi callback "
    "to name the bottleneck (input-bound, small batch, low efficiency) and what fixes it."
)


@dataclass(frozen=True, kw_only=True)
class JobNote:
    """A job's efficiency note."""

    line: JobLine
    gpus: tuple[GpuRow, ...]
    util_pct: float | None
    """Time-weighted over the sampled GPU-time (None: nothing sampled)."""
    waste_usd: float | None
    verdict: str
    advice: str
    basis_label: str
    target_pct: float
    shared_with: int
    """Other jobs on its hosts in its time (matched by node: their samples were shared)."""
    throttled_gpu_hours: float | None = None
    """Of its sampled GPU-time, the part its runs' GPUs were held below their clocks for power
    or thermal reasons (the ledger's throttled: the machine's), at most what its waste leaves;
    None: no run of it measured it. 0 when it failed (failed work takes it all)."""
    throttle_source: str | None = None
    """How its runs measured that (``counter``, ``sampled every N s``: the widest)."""

    @property
    def unmeasured_usd(self) -> float | None:
        """Its allocated GPU-time no sample covers, USD (the ledger's "not measured"); None:
        unpriced."""
        return self.line.no_samples_usd

    @property
    def failed(self) -> bool:
        """Whether the job ended failed, cancelled, on a node failure or out of memory."""
        return failed_state(self.line.state)

    @property
    def failed_usd(self) -> float | None:
        """Its sampled GPU-time when it failed (the ledger's failed work), USD; 0 when it did
        not; None: unpriced."""
        price = self.line.price_per_gpu_hour
        if price is None:
            return None
        return self.line.sampled_gpu_hours * price if self.failed else 0.0

    @property
    def throttled_usd(self) -> float | None:
        """Its throttled GPU-time's dollars; None: unpriced or not measured."""
        price = self.line.price_per_gpu_hour
        if price is None or self.throttled_gpu_hours is None:
            return None
        return self.throttled_gpu_hours * price

    @property
    def at_stake_usd(self) -> float | None:
        """What it paid that no figure shows useful: recoverable waste plus not measured plus
        failed work plus the machine's throttled time, USD (the epilog mail's measure); None:
        unpriced."""
        if self.line.price_per_gpu_hour is None:
            return None
        return (
            (self.waste_usd or 0.0)
            + (self.unmeasured_usd or 0.0)
            + (self.failed_usd or 0.0)
            + (self.throttled_usd or 0.0)
        )

    def machine(self) -> str | None:
        """``17% of this job's GPU-time and $0.64 were the machine (throttled 10 min,
        counter-exact), not your code`` (:func:`tracker.machine.machine_sentence`); None when
        the machine's share is nothing worth naming."""
        from tracker.machine import machine_sentence

        return machine_sentence(
            gpu_hours=self.line.sampled_gpu_hours,
            gpu_count=math.ceil(self.line.gpus),
            throttled_gpu_hours=self.throttled_gpu_hours,
            throttle_source=self.throttle_source,
            usd_per_gpu_hour=self.line.price_per_gpu_hour,
            what="job",
        )


def find_job(store: RunStore, job_id: str, cluster: str | None) -> list[Allocation]:
    """The imported jobs ``job_id`` names (:func:`reports.data.allocations.allocations_named`).

    Args:
        store: The run store.
        job_id: ``1234``, ``1234_7`` or ``1234+0``.
        cluster: The cluster; None: any.
    """
    from reports.data.allocations import allocations_named

    return allocations_named(store, job_id, cluster)


def job_note(store: RunStore, job: Allocation, req: Request) -> JobNote:
    """The job's note.

    Args:
        store: The run store (its runs, minutes and the other jobs on the job's hosts).
        job: The job.
        req: The report's settings: basis, thresholds, prices, owned GPUs.

    Raises:
        ReportError: The job held no GPU (nothing to say).
    """
    from reports.data.allocations import allocations_in
    from reports.data.scans import SampleScans
    from reports.gputime import week_allocations
    from reports.kpi.allocations import gpu_rows, short_host
    from reports.kpi.frames import BASES, SampleFrameBuilder
    from tracker.cost import gpu_waste_usd, thresholds_for, weighted_util_pct

    if job.gpus <= 0 or job.until <= job.start_at:
        raise ReportError(f"job {job.shown_id} held no GPU ({job.gpus} GPUs, {job.state})")
    t = thresholds_for(req.basis, req.thresholds)
    since, until = job.start_at, job.until
    scans = SampleScans(store)
    runs, _ = scans.read_runs(since=since, until=until)
    records = [
        {
            "id": r.id,
            "host": r.host,
            "links": r.links,
            "gpu_model": r.gpu_model,
            "started_at": r.started_at,
        }
        for r in runs
    ]
    week = week_allocations(
        store,
        records,
        since,
        until,
        basis=req.basis,
        thresholds=t,
        prices=req.prices,
        owned=req.owned,
    )
    line = next(j for j in week.jobs if (j.cluster, j.job_id) == (job.cluster, job.job_id))
    hosts = {short_host(h) for h in job.hosts}
    jobs, _ = allocations_in(store, since, until)
    others = sum(
        1
        for a in jobs
        if (a.cluster, a.job_id) != (job.cluster, job.job_id)
        and hosts & {short_host(h) for h in a.hosts}
    )
    column = BASES[req.basis][0]
    window = timedelta(minutes=t.idle_window_min)
    columns = ("run_id", "minute", "gpu", "covered_s", column, "mem_used_gib")
    frames = SampleFrameBuilder(columns, runs=list(line.runs))
    if line.runs:
        scans.scan_samples(frames, columns=columns, since=since - window, until=until + window)
    gpus = gpu_rows(
        frames.frame(), column, since, until, idle_pct=t.idle_pct, window=t.idle_window_min
    )
    sampled = math.fsum(g.sampled_hours for g in gpus)
    util = weighted_util_pct(
        math.fsum(g.util_hours for g in gpus), math.fsum(g.known_hours for g in gpus)
    )
    waste = None
    if line.price_per_gpu_hour is not None and sampled > 0:
        scale = line.sampled_gpu_hours / sampled  # the job's share of shared samples
        waste = math.fsum(
            gpu_waste_usd(  # the per-GPU rule, each GPU on its own time
                g.sampled_hours * scale * line.price_per_gpu_hour,
                held=g.sampled_hours,
                known=g.known_hours,
                util_time=g.util_hours,
                idle=g.idle_hours,
                idle_util_time=g.idle_util_hours,
                target_util_pct=t.target_util_pct,
            )
            for g in gpus
        )
    if line.matched == "sacct":  # no minute samples: the steps' average stands for them all
        util, h = line.util_pct, line.sampled_gpu_hours
        if line.price_per_gpu_hour is not None:
            waste = gpu_waste_usd(
                h * line.price_per_gpu_hour,
                held=h,
                known=h,
                util_time=(util or 0.0) * h,
                idle=line.idle_gpu_hours,
                idle_util_time=(util or 0.0) * line.idle_gpu_hours,
                target_util_pct=t.target_util_pct,
            )
    if failed_state(line.state) and waste is not None:
        waste = 0.0  # its sampled time is failed work: in no later bucket of the ledger
    verdict, advice = _verdict(line, util, runs, t.underutilized_pct, t.target_util_pct)
    throttled, source = _throttled(line, runs, waste)
    label = BASES[req.basis][1]
    return JobNote(
        line=line,
        gpus=tuple(gpus),
        util_pct=util,
        waste_usd=waste,
        verdict=verdict,
        advice=advice,
        basis_label=label,
        target_pct=t.target_util_pct,
        shared_with=others if line.matched == "node" else 0,
        throttled_gpu_hours=throttled,
        throttle_source=source,
    )


def _throttled(line: JobLine, runs: Any, waste: float | None) -> tuple[float | None, str | None]:
    """The job's throttled GPU-hours (its runs' by id, each pro rata by its GPU-hours inside
    the job's sampled time, at most what the waste leaves of it, as the ledger's
    :func:`reports.kpi.ledger.throttled_work` caps a row) and how they were measured; (None,
    None) where no run of it measured it."""
    from tracker.figures import COUNTER_EXACT, sampled_every

    mine = [r for r in runs if r.id in line.runs and r.throttled_gpu_hours is not None]
    if not mine or line.matched != "id":
        return None, None
    if failed_state(line.state):
        return 0.0, mine[0].throttle_source
    held = math.fsum(r.gpu_hours or 0.0 for r in mine)
    share = min(line.sampled_gpu_hours / held, 1.0) if held > 0 else 0.0
    hours = math.fsum(r.throttled_gpu_hours for r in mine) * share
    price = line.price_per_gpu_hour
    if waste is not None and price:
        hours = min(hours, max(line.sampled_gpu_hours - waste / price, 0.0))
    # counter-exact where every run's is; else the widest interval any run was sampled at
    widest = max(mine, key=lambda r: sampled_every(r.throttle_source))
    return hours, widest.throttle_source or COUNTER_EXACT


def _verdict(
    line: JobLine, util: float | None, runs: Any, under_pct: float, target_pct: float
) -> tuple[str, str]:
    """A tracked run's own verdict where the job ran one, else from the samples."""
    if line.sampled_gpu_hours <= 0:
        return UNMEASURED_VERDICT, NO_TELEMETRY
    if line.matched == "id":
        mine = [r for r in runs if r.id in line.runs and r.verdict]
        largest = max(mine, key=lambda r: r.gpu_hours or 0.0, default=None)
        if largest is not None:
            return largest.verdict, largest.advice or ADVICE.get(largest.verdict, "")
    if line.idle_gpu_hours >= 0.5 * line.sampled_gpu_hours:
        return "idle", ADVICE["idle"]
    if util is not None and util < target_pct:
        # a tracked run without a verdict of its own (a plain loop's): the table's advice
        advice = ADVICE["below-target"] if line.matched == "id" else UNDER
        return ("underutilized" if util < under_pct else "below-target"), advice
    return "healthy", ""


def note_text(note: JobNote, tz: tzinfo) -> str:
    """The note as text, in the manner of ``seff``.

    Args:
        note: The job's note.
        tz: The zone its times are shown in.
    """
    from reports.render.fmt import fmt_gpus, fmt_hours, fmt_usd
    from tracker.machine import throttle_how
    from tracker.text import one_line

    j = note.line
    start = j.start.astimezone(tz)
    end = j.end.astimezone(tz) if j.end is not None else None
    held = j.end - j.start if j.end is not None else None

    def usd(value: float | None) -> str:
        return "n/a (no price for its GPU type)" if value is None else fmt_usd(value)

    waste = usd(note.waste_usd)
    if note.waste_usd is None and j.price_per_gpu_hour is not None:
        waste = "n/a (not measured)"  # priced, nothing sampled: unknown, not unpriced

    cluster = f" on {one_line(j.cluster, 60)}" if j.cluster else ""
    lines = [
        f"Job ID: {one_line(j.shown_id, 40)}{cluster}",
        f"Job name: {one_line(j.name, 120)}",
        f"User/Account: {one_line(j.user, 60)}/{one_line(j.account, 60)} (team {one_line(j.team, 60)})",
        f"Partition: {one_line(j.partition, 60)}",
        f"State: {one_line(j.state, 40)}",
        f"Start: {start:%Y-%m-%d %H:%M:%S %Z}",
        f"End: {end:%Y-%m-%d %H:%M:%S %Z}" if end else "End: still running when imported",
    ]
    if held is not None:
        lines.append(f"Wall-clock time: {_duration(held)}")
    model = f" x {j.gpu_model}" if j.gpu_model else ""
    lines += [
        f"GPUs: {fmt_gpus(j.gpus)}{model}",
        f"Allocated: {fmt_hours(j.allocated_gpu_hours)}, {usd(j.allocated_usd)}",
    ]
    how = {
        "id": "by job id: " + ", ".join(one_line(r, 60) for r in j.runs[:5]),
        "node": f"by node and time; the node's samples shared with {note.shared_with} other job(s)",
        "sacct": "no minute samples: the average of its steps' TRESUsageInAve gres/gpuutil",
    }.get(j.matched, "no samples")
    util = "n/a" if note.util_pct is None else f"{note.util_pct:.1f}%"
    lines += [
        f"GPU efficiency: {util} {note.basis_label} over {fmt_hours(j.sampled_gpu_hours)} sampled ({how})",
        f"Allocated, idle: {fmt_hours(j.idle_gpu_hours)}, {usd(j.idle_usd)}",
        f"Allocated, no samples: {fmt_hours(j.no_samples_gpu_hours)}, {usd(j.no_samples_usd)}",
        f"Recoverable waste (target {note.target_pct:.0f}%): {waste}",
    ]
    if note.failed:
        lines.append(
            f"Failed work (it ended {one_line(j.state, 40)}): "
            f"{fmt_hours(j.sampled_gpu_hours)}, {usd(note.failed_usd)}"
        )
    throttled = note.throttled_gpu_hours
    if throttled is not None and throttled > 0:
        lines.append(
            f"Throttled (the machine's, {one_line(throttle_how(note.throttle_source), 40)}): "
            f"{fmt_hours(throttled)}, {usd(note.throttled_usd)}"
        )
    parts = "waste + no samples" + (" + failed work" if note.failed else "")
    parts += " + throttled" if throttled else ""
    lines.append(f"Paid, not shown useful ({parts}): {usd(note.at_stake_usd)}")
    if note.gpus:
        lines += ["", f"{'GPU':<40} {'util':>7} {'mem peak':>9} {'idle':>8}"]
        for g in note.gpus[:64]:
            name = one_line(f"{g.run}/{g.gpu}", 40)
            u = "n/a" if g.util_pct is None else f"{g.util_pct:.1f}%"
            mem = "n/a" if g.mem_peak_gib is None else f"{g.mem_peak_gib:.1f} GiB"
            lines.append(f"{name:<40} {u:>7} {mem:>9} {g.idle_minutes:>4} min")
        if len(note.gpus) > 64:
            lines.append(f"and {len(note.gpus) - 64} more GPUs")
    lines += ["", f"Verdict: {note.verdict}"]
    if machine := note.machine():
        lines.append(one_line(machine, 300))
    if note.advice:
        lines.append(f"Advice: {note.advice}")
    return "\n".join(lines) + "\n"


def _duration(d: timedelta) -> str:
    seconds = int(d.total_seconds())
    days, rest = divmod(seconds, WHOLE_S_PER_DAY)
    h, rest = divmod(rest, WHOLE_S_PER_HOUR)
    m, s = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"


def note_dict(note: JobNote) -> Mapping[str, Any]:
    """The note as JSON-ready values (``gpu-kpi job --json``)."""
    j = note.line
    return {
        "cluster": j.cluster,
        "job_id": j.job_id,
        "shown_id": j.shown_id,
        "name": j.name,
        "user": j.user,
        "account": j.account,
        "team": j.team,
        "partition": j.partition,
        "state": j.state,
        "start": j.start.isoformat(),
        "end": None if j.end is None else j.end.isoformat(),
        "gpus": j.gpus,
        "gpu_model": j.gpu_model,
        "matched": j.matched,
        "runs": list(j.runs),
        "allocated_gpu_hours": j.allocated_gpu_hours,
        "sampled_gpu_hours": j.sampled_gpu_hours,
        "idle_gpu_hours": j.idle_gpu_hours,
        "no_samples_gpu_hours": j.no_samples_gpu_hours,
        "price_per_gpu_hour": j.price_per_gpu_hour,
        "allocated_usd": j.allocated_usd,
        "idle_usd": j.idle_usd,
        "no_samples_usd": j.no_samples_usd,
        "util_pct": note.util_pct,
        "basis": note.basis_label,
        "waste_usd": note.waste_usd,
        "unmeasured_usd": note.unmeasured_usd,
        "failed_usd": note.failed_usd,
        "throttled_gpu_hours": note.throttled_gpu_hours,
        "throttled_usd": note.throttled_usd,
        "throttle_source": note.throttle_source,
        "at_stake_usd": note.at_stake_usd,
        "verdict": note.verdict,
        "advice": note.advice,
        "shared_with": note.shared_with,
        "per_gpu": [
            {
                "run": g.run,
                "gpu": g.gpu,
                "sampled_gpu_hours": g.sampled_hours,
                "util_pct": g.util_pct,
                "mem_peak_gib": g.mem_peak_gib,
                "idle_minutes": g.idle_minutes,
            }
            for g in note.gpus
        ],
    }
