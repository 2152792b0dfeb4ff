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
- :mod:`.kpi_tables`: the weekly figures as SQL tables for BI tools;
- :mod:`.adbc_read`: a SQLite file's rows read by ADBC's SQLite driver in a child process (this
  file run as a script), back as an Arrow IPC stream: the driver carries its own copy of SQLite,
  and two copies in one process break each other's locks (a WAL deleted under an open
  connection, a bus error);
- :mod:`.arrow_pool`: which pool Arrow allocates from: jemalloc's, which hands freed pages back
  (pyarrow's default mimalloc kept them), chosen by the week commands before pandas is imported
  (`reports/cli.py` `WEEK_COMMANDS`) and by any other caller at its first read of a week; a pool
  named by `ARROW_DEFAULT_MEMORY_POOL` stays;
- :mod:`.columns`: the runs read as columns, no record per run (`run_columns` of the driver's
  tuples, `arrow_run_columns` of an Arrow table); a row not surely as the store writes it is
  left to `scans.records_of`; links in the store's form are matched by a regular expression (in
  Arrow), not parsed;
- :mod:`.marks`: the marks table (`gpu_kpi_marks`): a recurring job's change dates and notes;
- :mod:`.week_cache`: complete weeks' headline KPIs kept beside the runs (`gpu_kpi_week_cache`)
  under the report's settings and the weeks' change marks: the trend reads them, not their rows.

SQL only: nothing here imports :mod:`reports.kpi` (``tests/test_layers.py``). The row types both
use are :mod:`reports.rows`'; what joins a read to the maths (a week's GPU-time, the scheduler's
side of a span) is :mod:`reports.gputime`, above both.
"""
