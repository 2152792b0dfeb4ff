"""The run store's tables, their schema version and the conversions between records and rows.

Every datetime going in must be timezone-aware; every datetime coming out is timezone-aware UTC.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect

from tracker.record import MinuteSample, RunRecord
from tracker.text import storable

SCHEMA_VERSION = 7
"""Version of the tables this module writes; stored in ``meta`` under ``schema_version``.
1: runs, samples, meta. 2: and ``rollups`` (:mod:`tracker.store.rollups`), built from the
samples when a version 1 store is opened for writing
(:func:`tracker.store.rollup_sql.migrate`). 3: the same tables, the rollups' idle seconds by
the seconds-weighted idle rule (:func:`tracker.cost.idle_flags`): rebuilt when a version 2
store is opened for writing; until then a report reads its minutes. 4: and ``changes``
(:mod:`tracker.store.changes`), the per-day counters every write raises: a report reuses a
complete week's KPIs while they hold. Writers older than version 4 would not raise them, so
they refuse a version 4 store (upgrade the trackers with the reports). 5: the runs' throttled
time, how their SM activity was measured and the step they resumed at
(:data:`RUN_COLUMNS_SINCE`), added to ``runs`` when
an older store is opened for writing; a reader of an older store reads them as unknown
(:func:`run_select_columns`). 6: the runs' MIG profile and how a shared GPU was split
between them, added alike. 7: MFU's denominator (the peak, its dtype and where the dtype came
from), what stands instead of MFU or beside it, and the hardware's observed FLOPs
utilization, added alike."""

# Key of the PostgreSQL advisory lock that serializes schema creation across processes.
SCHEMA_LOCK_KEY = 0x67_70_75_6B_70_69  # "gpukpi"
RUN_LOCK_CLASS = 0x67_6B_72  # "gkr": the class of PostgreSQL's per-run advisory locks (int4)
"""The first key of a run's advisory lock (the second: ``hashtext(run id)``), taken while its
rollups are added to (:func:`tracker.store.rollup_sql.write_samples`)."""


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime. SQLite keeps it as naive UTC text (fixed width, so text
    order is time order); PostgreSQL as ``timestamptz``."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = sa.MetaData()

runs_table = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("project", sa.String, nullable=False),
    sa.Column("team", sa.String, nullable=False),
    sa.Column("user", sa.String, nullable=False),
    sa.Column("host", sa.String, nullable=False),
    sa.Column("tags", sa.Text, nullable=False),  # JSON list
    sa.Column("framework", sa.String, nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("ended_at", UTCDateTime),
    sa.Column("heartbeat_at", UTCDateTime),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("gpu_source", sa.String, nullable=False),
    sa.Column("gpu_model", sa.String),
    sa.Column("gpu_count", sa.Integer, nullable=False),
    sa.Column("nodes", sa.Integer, nullable=False),
    sa.Column("price_per_gpu_hour", sa.Double),
    sa.Column("price_source", sa.String),
    sa.Column("gpu_hours", sa.Double, nullable=False),
    sa.Column("util_pct", sa.Double),
    sa.Column("sm_active_pct", sa.Double),
    sa.Column("mem_peak_gib", sa.Double),
    sa.Column("mem_total_gib", sa.Double),
    sa.Column("energy_kwh", sa.Double),
    sa.Column("steps", sa.BigInteger, nullable=False),
    sa.Column("samples", sa.BigInteger),
    sa.Column("tokens", sa.BigInteger),
    sa.Column("samples_per_s", sa.Double),
    sa.Column("tokens_per_s", sa.Double),
    sa.Column("mfu", sa.Double),
    sa.Column("data_wait_pct", sa.Double),
    sa.Column("cost_usd", sa.Double),
    sa.Column("waste_usd", sa.Double),
    sa.Column("idle_usd", sa.Double),
    sa.Column("verdict", sa.String),
    sa.Column("advice", sa.Text),
    sa.Column("source", sa.String, nullable=False),
    sa.Column("links", sa.Text, nullable=False),  # JSON object
    sa.Column("throttled_gpu_hours", sa.Double),
    sa.Column("throttle_source", sa.String),
    sa.Column("sm_active_source", sa.String),
    sa.Column("resumed_from_step", sa.BigInteger),
    sa.Column("mig_profile", sa.String),
    sa.Column("gpu_split", sa.String),
    sa.Column("mfu_peak_tflops", sa.Double),
    sa.Column("mfu_dtype", sa.String),
    sa.Column("mfu_dtype_from", sa.String),
    sa.Column("mfu_note", sa.Text),
    sa.Column("ofu", sa.Double),
    sa.Index("ix_runs_started_at", "started_at"),
    sa.Index("ix_runs_status", "status"),
)

samples_table = sa.Table(
    "samples",
    metadata,
    sa.Column("run_id", sa.String, primary_key=True),
    sa.Column("minute", UTCDateTime, primary_key=True),
    sa.Column("gpu", sa.String, primary_key=True),
    sa.Column("covered_s", sa.Double, nullable=False),
    sa.Column("util_pct", sa.Double),
    sa.Column("sm_active_pct", sa.Double),
    sa.Column("mem_used_gib", sa.Double),
    sa.Column("power_w", sa.Double),
    sa.Column("energy_kwh", sa.Double),
    sa.Index("ix_samples_minute", "minute"),
)

rollups_table = sa.Table(
    "rollups",
    metadata,
    sa.Column("run_id", sa.String, primary_key=True),
    sa.Column("gpu", sa.String, primary_key=True),
    sa.Column("hour", sa.BigInteger, primary_key=True),  # UTC epoch seconds // 3600
    sa.Column("minutes", sa.Integer, nullable=False),
    sa.Column("covered_s", sa.Double, nullable=False),
    sa.Column("util_known_s", sa.Double, nullable=False),
    sa.Column("util_s", sa.Double, nullable=False),
    sa.Column("util_idle_s", sa.Double, nullable=False),
    sa.Column("util_idle_value_s", sa.Double, nullable=False),
    sa.Column("sm_known_s", sa.Double, nullable=False),
    sa.Column("sm_s", sa.Double, nullable=False),
    sa.Column("sm_idle_s", sa.Double, nullable=False),
    sa.Column("sm_idle_value_s", sa.Double, nullable=False),
    sa.Column("energy_kwh", sa.Double),
    sa.Column("mem_peak_gib", sa.Double),
    sa.Column("dropped", sa.Integer, nullable=False),
    sa.Column("bad_util", sa.Integer, nullable=False),
    sa.Column("bad_sm", sa.Integer, nullable=False),
    sa.Column("bad_minutes", sa.Integer, nullable=False),
    # covers the reports' sums (reports.data.rollups): an hour's rows read from the index alone
    sa.Index(
        "ix_rollups_sums",
        "hour",
        "run_id",
        "gpu",
        "minutes",
        "covered_s",
        "util_known_s",
        "util_s",
        "util_idle_s",
        "util_idle_value_s",
        "sm_known_s",
        "sm_s",
        "sm_idle_s",
        "sm_idle_value_s",
        "dropped",
        "bad_util",
        "bad_sm",
        "bad_minutes",
    ),
)
ROLLUPS_OLD_INDEX = "ix_rollups_hour"
"""The rollups' index on the hour alone, of stores made before ``ix_rollups_sums``: replaced by
it when the rollups are rebuilt."""

changes_table = sa.Table(
    "changes",
    metadata,
    sa.Column("day", sa.Integer, primary_key=True),  # UTC days since 1970-01-01
    sa.Column("shard", sa.Integer, primary_key=True),  # of the run id: tracker.store.changes
    sa.Column("version", sa.BigInteger, nullable=False),
)

meta_table = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


RUN_COLUMNS_SINCE: dict[str, int] = {
    "throttled_gpu_hours": 5,
    "throttle_source": 5,
    "sm_active_source": 5,
    "resumed_from_step": 5,
    "mig_profile": 6,
    "gpu_split": 6,
    "mfu_peak_tflops": 7,
    "mfu_dtype": 7,
    "mfu_dtype_from": 7,
    "mfu_note": 7,
    "ofu": 7,
}
"""The columns of ``runs`` that a later schema version added, and the version (nullable: a
run tracked before has them unknown)."""


def run_select_columns(version: int) -> list[Any]:
    """The columns of ``runs`` to select from a store of schema ``version``: each one, or, for a
    column that version lacks, NULL under its name (a reader leaves an older store as it is)."""
    return [
        sa.null().label(col.name) if RUN_COLUMNS_SINCE.get(col.name, 0) > version else col
        for col in runs_table.c
    ]


def add_run_columns(conn: Connection) -> None:
    """Add to ``runs`` the columns of :data:`RUN_COLUMNS_SINCE` it lacks (a store of an older
    version: one transaction, the migrator's)."""
    have = {c["name"] for c in sa.inspect(conn).get_columns("runs")}
    for name in RUN_COLUMNS_SINCE:
        if name in have:
            continue
        kind = runs_table.c[name].type.compile(dialect=conn.dialect)
        conn.execute(sa.text(f"ALTER TABLE runs ADD COLUMN {name} {kind}"))


def create_schema(conn: Connection) -> None:
    """Create missing tables and the version row in one transaction. Concurrent openers of a
    new database queue behind each other: SQLite through BEGIN IMMEDIATE, PostgreSQL through
    an advisory lock; the one that comes second finds the tables in place."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
    metadata.create_all(conn, checkfirst=True)
    stmt = upsert(conn.dialect.name, meta_table, ("key",), update=False)
    conn.execute(stmt, {"key": "schema_version", "value": str(SCHEMA_VERSION)})


def insert(dialect_name: str, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """The dialect's INSERT, which has ``ON CONFLICT``."""
    return postgresql.insert(table) if dialect_name == "postgresql" else sqlite.insert(table)


UPSERT_OPTION = "gpu_kpi_upsert"
"""Execution option of an :func:`upsert` statement: ``(keys, update)``, its arguments, so that
a bulk write can send the same upsert of many rows as one statement
(:func:`tracker.store.rollup_sql.execute_all`)."""


@functools.cache
def upsert(
    dialect_name: str, table: sa.Table, keys: tuple[str, ...], *, update: bool = True
) -> sa.Executable:
    """``INSERT … ON CONFLICT (keys)`` that updates every other column, or does nothing: one
    statement for each set of arguments, made once (so compiled once, :func:`compiled`)."""
    stmt = insert(dialect_name, table)
    index = [table.c[k] for k in keys]
    if not update:
        done = stmt.on_conflict_do_nothing(index_elements=index)
    else:
        others = {c.name: stmt.excluded[c.name] for c in table.c if c.name not in keys}
        done = stmt.on_conflict_do_update(index_elements=index, set_=others)
    return done.execution_options(**{UPSERT_OPTION: (keys, update)})


def utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"naive datetime {value.isoformat()}: the run store needs timezone-aware times"
        )
    return value.astimezone(UTC)


def run_to_row(record: RunRecord) -> dict[str, Any]:
    # the fields as they are: tags and links are made JSON below (asdict's deep copy: 80 µs)
    values = ((name, getattr(record, name)) for name in _RUN_FIELDS)
    row: dict[str, Any] = {k: storable(v) if isinstance(v, str) else v for k, v in values}
    row["tags"] = json.dumps([storable(t) for t in record.tags])
    row["links"] = json.dumps(
        {storable(k): storable(v) for k, v in record.links.items()}, sort_keys=True
    )
    for name in ("started_at", "ended_at", "heartbeat_at"):
        stamp = getattr(record, name)
        row[name] = None if stamp is None else utc(stamp)
    return row


def row_to_run(row: sa.RowMapping) -> RunRecord:
    values = dict(row)
    values["tags"] = tuple(json.loads(values["tags"]))
    values["links"] = json.loads(values["links"])
    return RunRecord(**values)


_SAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(MinuteSample))
_RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunRecord))
_sample_values = operator.attrgetter(*_SAMPLE_FIELDS)


def sample_to_row(sample: MinuteSample) -> dict[str, Any]:
    # the fields as they are (all plain values): asdict's deep copy cost 70 µs a row
    row = dict(zip(_SAMPLE_FIELDS, _sample_values(sample), strict=True))
    row["minute"] = utc(sample.minute)
    row["run_id"], row["gpu"] = storable(sample.run_id), storable(sample.gpu)
    return row


SampleKey = tuple[str, datetime, str]
"""A minute row's primary key as bound: (run id, UTC minute, GPU)."""


def sample_rows(samples: Iterable[MinuteSample]) -> dict[SampleKey, dict[str, Any]]:
    """:func:`sample_to_row` of each sample by its key, a later sample of a key winning (in
    the key's first place), made for many rows: each distinct minute converted to UTC once and
    each distinct run id and GPU made storable once (an import's 46,080 rows hold 360 minutes,
    128 GPUs and 2 runs), each row's dict made in one step. The same rows, the same errors."""
    # a time object seen before (most rows share one): by identity, the object kept (so its
    # id is no other's meanwhile); else equal times of one tzinfo object and fold, one instant
    # (equality ignores fold)
    objects: dict[int, tuple[datetime, datetime]] = {}
    stamps: dict[tuple[datetime, int, int], datetime] = {}
    texts: dict[str, str] = {}
    out: dict[SampleKey, dict[str, Any]] = {}
    fields, width = _SAMPLE_FIELDS, len(_SAMPLE_FIELDS)
    for sample in samples:
        # a MinuteSample's own fields are its __dict__: copied in one step
        if type(sample) is not MinuteSample or len(row := sample.__dict__.copy()) != width:
            row = dict(zip(fields, _sample_values(sample), strict=True))
        minute = row["minute"]
        if (seen := objects.get(id(minute))) is not None and seen[0] is minute:
            at = seen[1]
        else:
            stamp = (minute, minute.fold, id(minute.tzinfo))
            found = stamps.get(stamp)
            if found is None:
                found = stamps[stamp] = utc(minute)  # a naive time raises, as sample_to_row's
            at = found
            objects[id(minute)] = (minute, at)
        if (run := texts.get(run_id := row["run_id"])) is None:
            run = texts[run_id] = storable(run_id)
        if (g := texts.get(gpu := row["gpu"])) is None:
            g = texts[gpu] = storable(gpu)
        row["run_id"], row["minute"], row["gpu"] = run, at, g
        out[(run, at, g)] = row
    return out
