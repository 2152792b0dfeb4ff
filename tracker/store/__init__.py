"""The run store: run records and per-minute GPU samples in SQLite or PostgreSQL.

One URL chooses the database: ``sqlite:///PATH`` (the default, a file under the user's data
directory) or ``postgresql://…`` / ``postgres://…`` (psycopg 3). This package is the tracker
side's only importer of SQLAlchemy (:mod:`reports.data` is the reports'); it uses SQLAlchemy
Core, not the ORM. Every datetime going in must be timezone-aware; every datetime coming out is
timezone-aware UTC.

What a training process needs (and ``gpu-kpi sync``, ``store rebuild-rollups``):

- :mod:`.runs`: :class:`RunStore`, runs and minute samples in and out;
- :mod:`.schema`: the tables and the record ↔ row conversions; :mod:`.sample_sql`, the
  samples table's driver-level SQL (usable rows, placeholders, minutes as the driver has them);
- :mod:`.engine`: URLs, SQLite settings, :class:`StoreError`, the live writer's statements
  through the driver's own cursor;
- :mod:`.writer`: the tracker's background writer, which spools what the store does not take;
- :mod:`.spool` (+ :mod:`.spool_files`): the local spool (JSON lines), flushed by the next
  write or ``gpu-kpi sync``;
- :mod:`.rollups` + :mod:`.rollup_sql`: the hourly rollups, computed and kept as samples are
  written, rebuilt, and built by the 1 → 2 migration;
- :mod:`.changes`: the per-day change counters every write of runs and samples raises in its
  transaction (`Touched`, `marks`); what a kept week is checked against.

The reports' reads and writes of the same database (fleet-scale scans, the rollups summed, the
delivery log, the BI tables) are :mod:`reports.data`'s, the second owner of SQLAlchemy.
"""

from tracker.store.engine import StoreError, default_store_url
from tracker.store.runs import RunStore
from tracker.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "RunStore", "StoreError", "default_store_url"]
