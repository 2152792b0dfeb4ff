"""The reports' own data layer: what the report side reads from and writes to the run store's
database, through SQLAlchemy Core (the second owner of SQLAlchemy, besides
:mod:`tracker.store`, which keeps only what a training process needs).

- :mod:`.scans`: :class:`~reports.data.scans.SampleScans`, fleet-scale reads of an open
  :class:`tracker.store.RunStore` (sample sums per run, GPU and bucket, idle stretches, runs
  read row by row, which runs have samples, a GPU's runs in a span);
- :mod:`.samples`: the driver-level SQL of those reads and their typed rows
  (:class:`~reports.data.samples.SampleTotals`);
- :mod:`.rollups`: the hourly rollups summed per run, GPU and bucket
  (:class:`~reports.data.rollups.RollupTotals`);
- :mod:`.allocations`: the scheduler's tables (jobs, node capacity, sacct's step averages);
- :mod:`.deliveries`: the delivery log's SQL;
- :mod:`.kpi_tables`: the weekly figures as SQL tables for BI tools.

SQL only: nothing here imports :mod:`reports.kpi` (``tests/test_layers.py``). The row types both
use are :mod:`reports.rows`'; what joins a read to the maths (a week's GPU-time, the scheduler's
side of a span) is :mod:`reports.gputime`, above both.
"""
