"""The run store: run records and per-minute GPU samples in SQLite or PostgreSQL.

One URL chooses the database: ``sqlite:///PATH`` (the default, a file under the user's data
directory) or ``postgresql://…`` / ``postgres://…`` (psycopg 3). This package is the only code
that imports SQLAlchemy; it uses SQLAlchemy Core, not the ORM. Every datetime going in must be
timezone-aware; every datetime coming out is timezone-aware UTC.

What the tracker writes, and reads back:

- :mod:`.runs`: :class:`RunStore`, runs and minute samples in and out;
- :mod:`.schema`: the tables and the record ↔ row conversions;
- :mod:`.engine`: URLs, SQLite settings, :class:`StoreError`;
- :mod:`.writer`: the tracker's background writer, which spools what the store does not take;
- :mod:`.spool`: the local spool (JSON lines), flushed by the next write or ``gpu-kpi sync``.

What only the reports read or write (apart, so the tracker's path stays small):

- :mod:`.scans`, over :mod:`.samples`' SQL: millions of minute samples summed per run, GPU and
  week in the database, and read around idle stretches;
- :mod:`.deliveries`: the report service's delivery log (its claims are SQL).
"""

from tracker.store.engine import StoreError, default_store_url
from tracker.store.runs import RunStore
from tracker.store.samples import SampleTotals
from tracker.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "RunStore", "SampleTotals", "StoreError", "default_store_url"]
