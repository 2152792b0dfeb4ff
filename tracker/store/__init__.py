"""The run store: run records and per-minute GPU samples in SQLite or PostgreSQL.

One URL chooses the database: ``sqlite:///PATH`` (the default, a file under the user's data
directory) or ``postgresql://…`` / ``postgres://…`` (psycopg 3). This package is the only code
that imports SQLAlchemy; it uses SQLAlchemy Core, not the ORM. Every datetime going in must be
timezone-aware; every datetime coming out is timezone-aware UTC.

- :mod:`.core`: :class:`RunStore`, the store's reads and writes;
- :mod:`.schema`: the tables and the record ↔ row conversions;
- :mod:`.engine`: URLs, SQLite settings, :class:`StoreError`;
- :mod:`.samples`: the SQL that reads millions of minute samples;
- :mod:`.deliveries`: the report service's delivery log (its claims are SQL).
"""

from tracker.store.engine import StoreError, default_store_url
from tracker.store.runs import RunStore
from tracker.store.samples import SampleTotals
from tracker.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "RunStore", "SampleTotals", "StoreError", "default_store_url"]
