"""Weekly KPIs: pure functions of pandas frames (no I/O), so a test can state every number.

- :mod:`.checks`: which runs and sample rows the report cannot use, and why;
- :mod:`.frames`: the frames read from the store's records and rows; the utilization basis and
  its thresholds;
- :mod:`.gputime`: GPU-time per (run, GPU, week), from minute samples, the store's totals or
  run summaries, the idle rule (:func:`tracker.cost.idle_flags`) run on each GPU's minutes;
- :mod:`.weekly`: one week's headline, change, breakdowns, runs, trend;
- :mod:`.rightsizing`: runs that would have cost less on a cheaper GPU.

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
