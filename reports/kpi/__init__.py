"""Weekly KPIs: pure functions of pandas frames (no I/O), so a test can state every number.

- :mod:`.checks`: which runs and sample rows the report cannot use, and why;
- :mod:`.frames`: the frames read from the store's records and rows; the utilization basis and
  its thresholds;
- :mod:`.gputime`: GPU-time per (run, GPU, week), from minute samples, the store's totals or
  run summaries, the idle rule (:func:`tracker.cost.idle_flags`) run on each GPU's minutes;
- :mod:`.weekly`: one week's headline, change, breakdowns, runs, trend;
- :mod:`.rightsizing`: runs that would have cost less on a cheaper GPU;
- :mod:`.allocations`: Slurm jobs and Kubernetes pods against minute samples: each one's
  allocated, sampled, idle and unsampled GPU-hours and dollars, matched by job id or pod, by a
  pod's workload on its node, or by node and time, no GPU-second counted twice;
- :mod:`.arrow_text`: text columns through Arrow's kernels where pyarrow is installed (is-in,
  sort order, blank names), None where not: the caller does it pandas' way;
- :mod:`.budgets`: spend against budget, the forecast for the period, the alert level;
- :mod:`.causes`: the week's waste by cause: each run's idle part held idle, the rest its
  verdict's (inferred for imports), in cents that add up to the week's;
- :mod:`.chargeback`: the finance rows per (week, team, project, GPU model);
- :mod:`.comparison`: two sides' figures and changes with a noise band over runs (Welch's t: on
  the log scale for rates and ratios); the gate's baseline, prediction-interval noise and
  verdict per metric;
- :mod:`.fleet`: an owned fleet in a week: rent versus own per owned model;
- :mod:`.intervals`: the one interval of a change: Welch's t at the unrounded Satterthwaite
  degrees of freedom (on the runs' logs for a ratio), the gate's prediction interval, Student's
  t quantile for any degrees of freedom (no SciPy);
- :mod:`.jobkeys`: recurring jobs: a run's job key (the one it recorded, its Kubernetes
  workload's, or its name without its run number, date or hash);
- :mod:`.ledger`: the week's ledger: every paid GPU-second in one bucket (capacity nobody held,
  not measured, failed work, held idle, busy below target, re-done work, throttled, slow node,
  useful); the scheduler's GPU-time no run holds as rows beside the runs' (`job_rows`), capacity
  nobody held (`unallocated`);
- :mod:`.pricing`: each run's price per GPU-hour as the reports charge it (`run_prices`);
- :mod:`.savings`: recurring jobs over 26 weeks and each change to one: cost per unit of work
  before and after (a mark, else a change point), its interval (Welch's t on the runs' log cost
  per unit), dollars saved a week and to date;
- :mod:`.slownodes`: the slow node: per recurring job key, a node whose runs' median throughput
  per GPU is over 10% and over 3× the job's own noise below its runs' on other nodes; the
  GPU-hours and dollars the slowdown cost, as the ledger's slow-node bucket (`slow_node_work`,
  judged per week);
- :mod:`.whatif`: the capacity what-if: GPUs returned by fixing the top runs, the months that
  defers at the trend's growth, their worth at the owned price.

Money (spend, waste, idle) and the thresholds are :mod:`tracker.cost`'s; weeks are
:mod:`reports.weeks`'.
"""

from reports.kpi.allocations import AllocationWeek, JobLine
from reports.kpi.checks import (
    PCT_RANGE,
    BadSamples,
    ExcludedRun,
    Skipped,
    bad_samples,
    surely_usable,
    usable_runs,
)
from reports.kpi.frames import (
    BASES,
    GT_COLUMNS,
    SAMPLE_COLUMNS,
    TOTALS_COLUMNS,
    SampleFrameBuilder,
    is_in,
    runs_frame,
    sample_columns,
    samples_frame,
)
from reports.kpi.gputime import (
    combine_gpu_time,
    gpu_time,
    idle_candidates,
    idle_of_series,
    sampled_gpu_time,
    summary_gpu_time,
    totals_gpu_time,
)
from reports.kpi.rightsizing import rightsizing
from reports.kpi.savings import Change
from reports.kpi.weekly import (
    HEADLINE_FIELDS,
    Headline,
    WeekKpis,
    fix_order,
    kpis_of_gpu_time,
    run_weeks,
    runs_to_fix,
    so_far_week,
    user_week,
    week_kpis,
)

__all__ = [
    "BASES",
    "GT_COLUMNS",
    "HEADLINE_FIELDS",
    "PCT_RANGE",
    "SAMPLE_COLUMNS",
    "TOTALS_COLUMNS",
    "AllocationWeek",
    "BadSamples",
    "Change",
    "ExcludedRun",
    "Headline",
    "JobLine",
    "SampleFrameBuilder",
    "Skipped",
    "WeekKpis",
    "bad_samples",
    "combine_gpu_time",
    "fix_order",
    "gpu_time",
    "idle_candidates",
    "idle_of_series",
    "is_in",
    "kpis_of_gpu_time",
    "rightsizing",
    "run_weeks",
    "runs_frame",
    "runs_to_fix",
    "sample_columns",
    "sampled_gpu_time",
    "samples_frame",
    "so_far_week",
    "summary_gpu_time",
    "surely_usable",
    "totals_gpu_time",
    "usable_runs",
    "user_week",
    "week_kpis",
]
