"""The week's ledger: every GPU-second someone pays for, in exactly one bucket, with its owner,
model and price.

The runs' GPU-time (:func:`reports.kpi.weekly.run_weeks`, one row per run and week) splits by
the waste rule of :func:`tracker.cost.gpu_waste_usd`, per GPU:

- **not measured**: a GPU-week of a run with no utilization value at all (no sample says what
  it did: a summary-only run, a tracker without NVML). A GPU with some minutes measured has
  the rest of its time judged by them (the waste rule's own extrapolation), never here;
- **failed work**: the rest of the GPU-time of a run that ended failed or crashed (and that
  no later run of its job resumed from a checkpoint: then only its steps past the checkpoint
  were lost, and they are re-done work), or of a scheduler's job that ended failed,
  cancelled, on a node failure or out of memory (:data:`reports.rows.FAILED_STATES`,
  :func:`failed_work`): whatever it did, it did not finish, so none of it is idle or below
  target too;
- **held idle**: its minutes in idle stretches (the idle rule);
- **busy below target**: the recoverable share of the rest;
- **re-done work**: of what is left, a run's GPU-time on steps that the next run of its job
  ran again, having resumed from an earlier checkpoint (:func:`redone_shares`): paid twice,
  kept once;
- **throttled**: of what is left, the GPU-time the clocks were held down for power or thermal
  reasons (:func:`throttled_work`: the run's ``throttled_gpu_hours`` in each week pro rata by
  its GPU-hours there): the machine's, not the code's;
- **slow node**: of what is left, a run's GPU-hours on a node its recurring job runs slower
  on than on its other nodes, × the slowdown (:func:`reports.kpi.slownodes.slow_node_work`):
  the machine's too;
- **useful**: what is left.

The scheduler's jobs (:class:`reports.kpi.allocations.JobLine`) add the GPU-time no run holds:
a job's allocated seconds that no sample covers are **not measured** (a row of its own, owned
by the job's user and team, priced at the job's price), and a job known only by ``sacct``'s
step average (no minute sample) is judged whole at that average (idle, below target,
useful). What a job's matched runs sampled is already theirs. So :func:`job_rows` returns rows
shaped like ``run_weeks``' (``kind`` ``job``), and a week's headline, breakdowns, runs to fix,
team pages and budgets sum runs and jobs alike, each GPU-second once.

**Capacity nobody held** (:func:`unallocated`) is the paid capacity (``[owned.<MODEL>]``
GPUs, else the nodes a scheduler import listed) less the GPU-hours held on it; it has no owner
and is named beside the spend, not in it.

One price per GPU-second: a run's is :func:`reports.kpi.pricing.run_prices`', a job's its
line's (the model its samples saw, else its gres type; :func:`tracker.prices.reported_price`);
a GPU-second of a model without a price has unknown dollars (NaN, ``priced`` False), never $0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports.kpi.allocations import CapacityLine, JobLine
from reports.rows import FAILED_STATES, links_text
from tracker.cost import gpu_waste_usd, weighted_util_pct
from tracker.owned import OwnedGpu
from tracker.prices import PriceTable, owned_row

BUCKETS: dict[str, str] = {
    "unallocated": "capacity nobody held",
    "unmeasured": "allocated, not measured",
    "failed": "failed work",
    "idle": "held idle",
    "below_target": "busy below target",
    "redone": "re-done work",
    "throttled": "throttled (the machine)",
    "slow_node": "slow node (the machine)",
    "useful": "useful",
}
"""The ledger's buckets, each key and its name, in the order a GPU-second falls through them."""

BESIDE_WASTE_USD = ("unmeasured_usd", "failed_usd", "redone_usd", "throttled_usd", "slow_node_usd")
"""A row's dollars paid and in no cause of waste, bucket by bucket (not measured, failed work,
re-done work, the machine's throttled time and slow node): summed beside the waste on every
surface."""

FAILED_COLUMNS = ("waste_usd", "idle_usd", "waste_hours", "idle_hours")
"""The figures of a row that are 0 when its GPU-time is failed work (it is in no later
bucket)."""


def is_failed(status: pd.Series) -> np.ndarray:
    """For each status or state (any case; missing: not failed), whether it is a failure
    (:data:`reports.rows.FAILED_STATES`; one at a time: :func:`reports.rows.failed_state`).

    Args:
        status: Runs' statuses or jobs' states (text, Arrow's or objects).

    Returns:
        A boolean array, one per value.
    """
    if not len(status):
        return np.zeros(0, dtype=bool)
    # as text (a runs frame's is Arrow's already: no Python object per run), missing as missing
    text = status if isinstance(status.dtype, pd.StringDtype) else status.astype("str")
    found = text.str.match(_FAILED_START, case=False)  # no lowered copy of a million texts
    return found.fillna(False).to_numpy(dtype=bool)


_FAILED_START = "(?:" + "|".join(FAILED_STATES) + ")"
""":data:`reports.rows.FAILED_STATES` as one pattern (``str.match`` anchors at the start)."""


def failed_work(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the ledger's failed work: a failed row's GPU-hours that some sample
    measured (what no sample measured stays not measured), and its waste and idle figures
    (:data:`FAILED_COLUMNS`) 0 (unknown where unpriced, as before).

    Args:
        rows: :func:`reports.kpi.weekly.run_weeks`' or :func:`job_rows`' rows (``status``,
            ``gpu_hours``, ``unmeasured_hours``, ``price_per_gpu_hour`` in USD per GPU-hour);
            changed in place.

    Returns:
        ``rows``, with ``failed_hours`` (GPU-hours) and ``failed_usd`` (USD; NaN unpriced).
    """
    failed = is_failed(rows["status"]) if "status" in rows else np.zeros(len(rows), bool)
    if "run_resumed" in rows:  # resumed by a later run: what it lost is re-done work
        failed = failed & ~rows["run_resumed"].to_numpy(dtype=bool)
    hours = rows["gpu_hours"].to_numpy(dtype=float)
    measured = np.maximum(hours - rows["unmeasured_hours"].to_numpy(dtype=float), 0.0)
    rows["failed_hours"] = np.where(failed, measured, 0.0)
    price = rows["price_per_gpu_hour"].to_numpy(dtype=float, na_value=np.nan)
    rows["failed_usd"] = rows["failed_hours"].to_numpy() * price
    if failed.any():
        for name in FAILED_COLUMNS:
            values = rows[name].to_numpy(dtype=float, na_value=np.nan)
            rows[name] = np.where(failed, values * 0.0, values)  # NaN (unpriced) stays NaN
    return rows


RESUME_SLACK = np.timedelta64(60, "s")
"""How long after a resumed run's start the run before it may have ended (clocks, a
scheduler's restart)."""


def redone_shares(runs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per run, the share of its GPU-time spent on steps the next run of its job ran again (a
    run of the same job key that resumed from an earlier checkpoint, this one being the last
    of the job to end by its start): (its last global step − the step the next run resumed
    at) ÷ its steps, at most all of them; and whether such a next run resumed from it.

    Args:
        runs: The runs (:func:`reports.kpi.runs_frame`; ``resumed_from_step``, ``steps``,
            ``started_at``, ``name``, ``links``).

    Returns:
        The shares (0 where none) and the resumed flags, in the order of ``runs``.
    """
    from reports.kpi.jobkeys import job_keys

    n = len(runs)
    share, resumed = np.zeros(n), np.zeros(n, dtype=bool)
    if not n or "resumed_from_step" not in runs:
        return share, resumed
    at = pd.to_numeric(runs["resumed_from_step"], errors="coerce").to_numpy(dtype=float)
    later = np.flatnonzero(at > 0)  # the numbers first: most weeks have no resume at all
    if not len(later):
        return share, resumed
    keys = job_keys(runs["name"], runs["links"]).to_numpy(dtype=object)
    start = pd.to_datetime(runs["started_at"], utc=True).to_numpy(dtype="datetime64[ns]")
    end = pd.to_datetime(runs["ended_at"], utc=True).to_numpy(dtype="datetime64[ns]")
    steps = pd.to_numeric(runs["steps"], errors="coerce").fillna(0).to_numpy(dtype=float)
    last = np.nan_to_num(at) + steps  # each run's last global step
    of_key = pd.Series(np.arange(n)).groupby(keys).indices
    for i in later:
        same = of_key[keys[i]]
        # the run before it: the last of its job to end by its start (not a sweep's sibling
        # that ran beside it), a minute's slack for the scheduler's restart
        before = same[(end[same] <= start[i] + RESUME_SLACK) & (same != i) & (steps[same] > 0)]
        if not len(before):
            continue
        p = before[np.argmax(end[before])]
        share[p] = max(share[p], min(max(last[p] - at[i], 0.0) / steps[p], 1.0))
        resumed[p] = True
    return share, resumed


def redone_work(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the ledger's re-done work: each row's GPU-hours × its run's re-done share
    (``run_redone_share``, :func:`redone_shares`; pro rata over its weeks), at most what not
    measured, failed work and the waste rule leave of it.

    Args:
        rows: :func:`failed_work`'s rows (``gpu_hours``, ``unmeasured_hours``,
            ``failed_hours``, ``waste_hours``, ``price_per_gpu_hour``); changed in place. A row
            without ``run_redone_share`` (a job's) has none.

    Returns:
        ``rows``, with ``redone_hours`` (GPU-hours) and ``redone_usd`` (USD; NaN unpriced).
    """
    hours = rows["gpu_hours"].to_numpy(dtype=float)
    redone = np.zeros(len(rows))
    if "run_redone_share" in rows:
        share = pd.to_numeric(rows["run_redone_share"], errors="coerce").fillna(0.0)
        left = hours - rows["unmeasured_hours"].to_numpy(dtype=float)
        left -= rows["failed_hours"].to_numpy(dtype=float) + rows["waste_hours"].to_numpy(float)
        redone = np.clip(hours * share.to_numpy(dtype=float), 0.0, np.maximum(left, 0.0))
    rows["redone_hours"] = redone
    price = rows["price_per_gpu_hour"].to_numpy(dtype=float, na_value=np.nan)
    rows["redone_usd"] = redone * price
    return rows


def throttled_work(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the ledger's throttled time: each run's throttled GPU-hours
    (``run_throttled_gpu_hours``) in the week pro rata by its GPU-hours there (a run inside one
    week: all of it), at most what the earlier buckets leave (not measured, failed, idle, below
    target, re-done are the code's or unknown first; a failed run has none), and its dollars.

    Args:
        rows: :func:`failed_work`'s rows (``gpu_hours``, ``run_gpu_hours``,
            ``unmeasured_hours``, ``failed_hours``, ``waste_hours``, ``price_per_gpu_hour``);
            changed in place. A row without ``run_throttled_gpu_hours`` (a job's) has none.

    Returns:
        ``rows``, with ``throttled_hours`` (GPU-hours; 0 where not measured) and
        ``throttled_usd`` (USD; NaN unpriced).
    """
    hours = rows["gpu_hours"].to_numpy(dtype=float)
    if "run_throttled_gpu_hours" in rows and "run_gpu_hours" in rows:
        raw = pd.to_numeric(rows["run_throttled_gpu_hours"], errors="coerce").to_numpy(float)
        whole = pd.to_numeric(rows["run_gpu_hours"], errors="coerce").to_numpy(dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(whole > 0, np.minimum(hours / whole, 1.0), 0.0)
        throttled = np.nan_to_num(raw * share, nan=0.0)
        left = hours - rows["unmeasured_hours"].to_numpy(dtype=float)
        left -= rows["failed_hours"].to_numpy(dtype=float) + rows["waste_hours"].to_numpy(float)
        if "redone_hours" in rows:
            left -= rows["redone_hours"].to_numpy(dtype=float)
        throttled = np.clip(throttled, 0.0, np.maximum(left, 0.0))
    else:
        throttled = np.zeros(len(rows))
    rows["throttled_hours"] = throttled
    price = rows["price_per_gpu_hour"].to_numpy(dtype=float, na_value=np.nan)
    rows["throttled_usd"] = throttled * price
    return rows


FAILED_CAUSE = "failed"
"""What the runs to fix name a failed run's or job's GPU-time by (its ledger bucket)."""

THROTTLED_CAUSE = "throttled"
"""What the runs to fix name a run's throttled time by (its ledger bucket: the machine's)."""

REDONE_CAUSE = "redone"
"""What the runs to fix name a run's re-done work by (its ledger bucket)."""

SLOW_NODE_CAUSE = "slow_node"
"""What the runs to fix name a run's time lost to a slow node by (its ledger bucket)."""

UNMEASURED_VERDICT = "not measured"
"""The verdict of a job's row: GPU-time that no sample measured."""

UNMEASURED_ADVICE = (
    "No sample says what these GPUs did: track the job (the gpu-kpi callback, three lines), or "
    "run nvidia-smi or dcgm-exporter on its nodes and import their samples."
)

JOB_KIND = "job"
RUN_KIND = "run"


def job_key(j: JobLine) -> str:
    """A job's row id in the week's rows: ``slurm:CLUSTER/JOBID`` (``kubernetes:…`` for a
    pod), apart from every run id."""
    cluster = f"{j.cluster}/" if j.cluster else ""
    return f"{j.source}:{cluster}{j.shown_id}"


def job_rows(
    jobs: Iterable[JobLine],
    week: pd.Timestamp,
    *,
    target_util_pct: float,
    owned: Mapping[str, OwnedGpu] | None = None,
    prices: PriceTable | None = None,
    runs_held: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """The week's GPU-time of the scheduler's jobs that no run holds, as rows shaped like
    :func:`reports.kpi.weekly.run_weeks`' (one per job with any): its unsampled allocated
    GPU-hours (unknown utilization: not measured), or, for a job judged by ``sacct``'s step
    average, its whole allocation at that average.

    Args:
        jobs: The week's job lines (:class:`reports.kpi.allocations.AllocationWeek` ``jobs``).
        week: The week's start (UTC).
        target_util_pct: The waste rule's target.
        owned: The config's ``[owned.<MODEL>]`` (rows an owned model prices are marked
            ``owned_gpu``, as the runs' are).
        prices: The config's ``[prices]`` over the table (an owned variant rule's input).
        runs_held: Run id → its GPU-hours of the week with no minute sample
            (:func:`unsampled_run_hours`): of a job's unsampled time, what the runs naming it
            (:attr:`JobLine.named_by`, the join's own matching) hold is theirs already, never
            the job's too.

    Returns:
        The rows, ``kind`` ``job``, ``unmeasured_hours`` and ``waste_hours`` set; empty (with
        the columns) when no job has GPU-time outside the runs.
    """
    rows = []
    for j in jobs:
        theirs = math.fsum((runs_held or {}).get(r, 0.0) for r in j.named_by)
        if j.matched == "sacct":  # judged whole at its steps' average: the rest, pro rata
            hours = max(0.0, j.allocated_gpu_hours - theirs)
            share = hours / j.allocated_gpu_hours if j.allocated_gpu_hours > 0 else 0.0
            known, idle, util = j.known_gpu_hours * share, j.idle_gpu_hours * share, j.util_pct
        else:
            hours, known, idle, util = max(0.0, j.no_samples_gpu_hours - theirs), 0.0, 0.0, None
        if hours <= 1e-12:
            continue
        used = (util or 0.0) * known / 100.0
        waste_h = float(
            gpu_waste_usd(
                hours,
                held=hours,
                known=known,
                util_time=100.0 * used,
                idle=idle,
                idle_util_time=(util or 0.0) * idle,
                target_util_pct=target_util_pct,
            )
        )
        price = j.price_per_gpu_hour
        usd = math.nan if price is None else price
        owned_gpu = None
        if owned and j.gpu_model and price is not None:
            row = owned_row(j.gpu_model, owned, prices.overrides if prices else None)
            owned_gpu = row.gpu if row is not None else None
        rows.append(
            {
                "run_id": job_key(j),
                "week": week,
                "gpu_hours": hours,
                "known_hours": known,
                "used_hours": used,
                "spend_usd": hours * usd,
                "waste_usd": waste_h * usd,
                "idle_usd": idle * usd,
                "priced": price is not None,
                "utilization_pct": weighted_util_pct(100.0 * used, known),
                "unmeasured_hours": hours - known,
                "unmeasured_usd": (hours - known) * usd,
                "waste_hours": waste_h,
                "idle_hours": idle,
                "kind": JOB_KIND,
                "name": j.name or j.shown_id,
                "project": "",
                "team": j.team,
                "user": j.user,
                "host": "",
                "gpu_model": j.gpu_model,
                "gpu_count": math.ceil(j.gpus),  # devices: a share of one is one
                "verdict": UNMEASURED_VERDICT if known <= 0 else _sacct_verdict(j, util),
                "advice": UNMEASURED_ADVICE if known <= 0 else "",
                "links": links_text({j.source: job_key(j).split(":", 1)[1]}),
                "status": j.state.lower(),
                "started_at": j.start,
                "ended_at": j.end,
                "source": j.source,
                "owned_gpu": owned_gpu,
                "price_per_gpu_hour": math.nan if price is None else price,
            }
        )
    return throttled_work(redone_work(failed_work(pd.DataFrame(rows, columns=JOB_ROW_COLUMNS))))


def unsampled_run_hours(gt: pd.DataFrame) -> dict[pd.Timestamp, dict[str, float]]:
    """Per week, each run's GPU-hours with no minute sample (its summary rows, ``gpu``
    ``*``): where a run naming a scheduler job holds the job's unsampled time.

    Args:
        gt: GPU-time rows (:data:`reports.kpi.frames.GT_COLUMNS`).

    Returns:
        Week start → run id → GPU-hours.
    """
    summary = gt[gt["gpu"] == "*"] if len(gt) else gt
    out: dict[pd.Timestamp, dict[str, float]] = {}
    for rid, week, hours in zip(
        summary["run_id"], summary["week"], summary["gpu_hours"], strict=True
    ):
        mine = out.setdefault(pd.Timestamp(week), {})
        mine[str(rid)] = mine.get(str(rid), 0.0) + float(hours)
    return out


def _sacct_verdict(j: JobLine, util: float | None) -> str:
    """A job judged by its steps' average: idle when the idle rule says so, else unnamed."""
    if j.idle_gpu_hours >= 0.5 * j.allocated_gpu_hours:
        return "idle"
    return "below-target" if util is not None else ""


JOB_ROW_COLUMNS = (
    "run_id",
    "week",
    "gpu_hours",
    "known_hours",
    "used_hours",
    "spend_usd",
    "waste_usd",
    "idle_usd",
    "priced",
    "utilization_pct",
    "unmeasured_hours",
    "unmeasured_usd",
    "waste_hours",
    "idle_hours",
    "kind",
    "name",
    "project",
    "team",
    "user",
    "host",
    "gpu_model",
    "gpu_count",
    "verdict",
    "advice",
    "links",
    "status",
    "started_at",
    "ended_at",
    "source",
    "owned_gpu",
    "price_per_gpu_hour",
)


@dataclass(frozen=True, kw_only=True)
class Unallocated:
    """Capacity nobody held in a week: paid GPU-hours with no run and no job on them."""

    gpu_hours: float
    usd: float | None
    """At the capacity's price (an owned model's amortized rate, else the table's); None when
    none of it has a price."""
    unpriced_gpu_hours: float = 0.0


def unallocated(
    per: pd.DataFrame,
    *,
    hours_in_week: float,
    owned: Mapping[str, OwnedGpu] | None,
    capacity: Sequence[CapacityLine] = (),
) -> Unallocated | None:
    """The week's capacity nobody held: each owned model's GPUs (``[owned.<MODEL>] gpus``) ×
    the week's hours less the GPU-hours its rows (runs and jobs) held, at its amortized rate;
    and the scheduler's nodes of models not owned, their unallocated GPU-hours (dollars
    unknown: what a reserved node costs is the site's contract). An owned model's nodes are
    counted from ``[owned]`` alone, never again from the node listing: one GPU, one bucket.
    None when no capacity is known (no ``[owned]`` with ``gpus`` and no node import).

    Args:
        per: The week's rows (runs' and jobs'), with ``owned_gpu`` and ``gpu_hours``.
        hours_in_week: The week's hours (167, 168 or 169; to now for a week under way).
        owned: The config's ``[owned.<MODEL>]``.
        capacity: The scheduler's capacity lines of the week.
    """
    from tracker.prices import owned_table

    counted = {n: o for n, o in (owned or {}).items() if o.gpus}
    if not counted and not capacity:
        return None
    hours = usd = unpriced = 0.0
    table = owned_table(counted)
    for name, o in counted.items():
        row = table.lookup(name)
        if row is None or not o.gpus:  # (o.gpus: for mypy; counted has only those with some)
            continue
        mine = per["owned_gpu"] == row.gpu if "owned_gpu" in per else np.zeros(len(per), bool)
        held = float(per.loc[mine, "gpu_hours"].sum())
        free = max(0.0, o.gpus * hours_in_week - held)
        hours += free
        usd += free * row.usd_per_gpu_hour
    for c in capacity:
        free = max(0.0, c.unallocated_gpu_hours - c.unallocated_owned_gpu_hours)
        hours += free
        unpriced += free
    return Unallocated(
        gpu_hours=hours,
        usd=usd if counted else None,
        unpriced_gpu_hours=unpriced,
    )


def bucket_hours(per: pd.DataFrame) -> pd.DataFrame:
    """Each row's GPU-hours per bucket (``unmeasured``, ``failed``, ``idle``, ``below_target``,
    ``redone``, ``throttled``, ``slow_node``, ``useful``): they add up to its ``gpu_hours``
    (the rows of :func:`run_weeks` and :func:`job_rows`, after :func:`failed_work`,
    :func:`redone_work`, :func:`throttled_work` and
    :func:`reports.kpi.slownodes.slow_node_work`)."""
    hours = per["gpu_hours"].to_numpy(dtype=float)
    unmeasured = per["unmeasured_hours"].to_numpy(dtype=float)
    failed = (
        per["failed_hours"].to_numpy(dtype=float) if "failed_hours" in per else np.zeros(len(per))
    )
    idle = per["idle_hours"].to_numpy(dtype=float)
    waste = per["waste_hours"].to_numpy(dtype=float)
    below = np.maximum(waste - idle, 0.0)
    redone = (
        per["redone_hours"].to_numpy(dtype=float) if "redone_hours" in per else np.zeros(len(per))
    )
    throttled = (
        per["throttled_hours"].to_numpy(dtype=float)
        if "throttled_hours" in per
        else np.zeros(len(per))
    )
    slow = (
        per["slow_node_hours"].to_numpy(dtype=float)
        if "slow_node_hours" in per
        else np.zeros(len(per))
    )
    useful = np.maximum(hours - unmeasured - failed - idle - below - redone - throttled - slow, 0.0)
    return pd.DataFrame(
        dict(
            zip(
                list(BUCKETS)[1:],
                (unmeasured, failed, idle, below, redone, throttled, slow, useful),
                strict=True,
            )
        ),
        index=per.index,
    )


def ledger_totals(
    per: pd.DataFrame, unallocated_gpu_hours: float | None, unallocated_usd: float | None
) -> dict[str, dict[str, float | None]]:
    """The week's ledger in one table: per bucket (:data:`BUCKETS`, in order), its GPU-hours
    and dollars (the priced rows'; None where none is priced). The held buckets' dollars add up
    to the headline's spend and their hours to its GPU-hours; capacity nobody held (None when
    unknown) is beside them.

    Args:
        per: The week's rows (runs' and jobs'), with ``price_per_gpu_hour``.
        unallocated_gpu_hours: The headline's capacity nobody held, GPU-hours.
        unallocated_usd: Its dollars.
    """
    out: dict[str, dict[str, float | None]] = {}
    if unallocated_gpu_hours is not None:
        out["unallocated"] = {"gpu_hours": unallocated_gpu_hours, "usd": unallocated_usd}
    b = bucket_hours(per)
    price = per["price_per_gpu_hour"].to_numpy(dtype=float, na_value=np.nan)
    priced = ~np.isnan(price)
    for key in b.columns:
        hours = b[key].to_numpy(dtype=float)
        usd = float((hours[priced] * price[priced]).sum()) if priced.any() else None
        out[str(key)] = {"gpu_hours": float(hours.sum()), "usd": usd}
    return out
