"""Complete weeks' headline KPIs kept beside the runs (``gpu_kpi_week_cache``), so that a
report's trend costs one week's work whatever the history.

A report keeps the headline of each complete week it computed with what it was computed from:
the report's settings (time zone, basis, thresholds, prices, owned GPUs, carbon figures, the
gpu-kpi version: :func:`cache_key`) and the store's change counters of the week's days as
they were read before its rows (:mod:`tracker.store.changes`: raised by every write of runs and
samples, in the write's transaction). A later report with the same settings that finds the same
counters takes the headline instead of reading the week; any write since (a late import, a
``--replace``, a run that finished) changed a counter, and the week is computed again.

Never kept or taken: the week under way, a week a still running run overlaps (its figures
move with the clock), any week of a store older than version 4 (no counters). The headline is
stored as JSON of numbers, read back checked field by field (a row that is not what this module
writes is a miss, never an error); nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tracker.store.schema import SCHEMA_LOCK_KEY, UTCDateTime, runs_table

if TYPE_CHECKING:
    from reports.rows import Headline
    from tracker.carbon import Carbon
    from tracker.cost import Thresholds
    from tracker.owned import OwnedGpu
    from tracker.store import RunStore

log = logging.getLogger("gpu_kpi")

CACHE_VERSION = 4
"""Raised when the KPI arithmetic changes: every kept week is computed again."""

_metadata = sa.MetaData()

cache_table = sa.Table(
    "gpu_kpi_week_cache",
    _metadata,
    sa.Column("week", sa.String(8), primary_key=True),
    sa.Column("time_zone", sa.Text, primary_key=True),
    sa.Column("basis", sa.String(16), primary_key=True),
    sa.Column("settings", sa.String(64), primary_key=True),
    sa.Column("team", sa.Text, primary_key=True),  # "": the fleet
    sa.Column("mark", sa.Text, nullable=False),
    sa.Column("headline", sa.Text, nullable=False),
    sa.Column("computed_at", UTCDateTime, nullable=False),
)


class CacheKey(NamedTuple):
    """What a kept week is kept under besides its label."""

    time_zone: str
    basis: str
    settings: str
    """A digest of the settings (:func:`cache_key`)."""


def cache_key(
    *,
    tz: tzinfo,
    basis: str,
    thresholds: Thresholds | None,
    prices: Mapping[str, float],
    owned: Mapping[str, OwnedGpu],
    carbon: Carbon,
) -> CacheKey:
    """The key of everything besides the store's rows that a week's headline depends on: the
    report's settings, this module's :data:`CACHE_VERSION` and gpu-kpi's version."""
    from tracker import __version__
    from tracker.cost import thresholds_for
    from tracker.prices import PriceTable

    table = PriceTable(prices)  # the built-in prices of this version, the overrides on top
    settings = {
        "cache": CACHE_VERSION,
        "gpu_kpi": __version__,
        "tz": str(tz),
        "basis": basis,
        "thresholds": asdict(thresholds or thresholds_for(basis)),
        "prices": sorted((str(k), float(v)) for k, v in prices.items()),
        "table": sorted(repr(p) for p in table.rows()),
        "owned": sorted((str(k), repr(v)) for k, v in owned.items()),
        "carbon": repr(carbon),
    }
    text = json.dumps(settings, sort_keys=True, default=repr)
    return CacheKey(str(tz), basis, hashlib.sha256(text.encode()).hexdigest())


def week_marks(
    store: RunStore,
    weeks: Sequence[tuple[str, datetime, datetime]],
    *,
    reach: timedelta,
) -> dict[str, str]:
    """Each week's change mark: the counters of the UTC days its minutes (and the idle rule's
    ``reach`` either side) fall on. Weeks without one: a store older than version 4, a week
    that a running run overlaps.

    Args:
        store: The open run store.
        weeks: (label, start, end) of each week, timezone-aware.
        reach: How far past a week's edges its figures read (the idle window less a minute).

    Returns:
        Label → mark, for the weeks that have one.
    """
    from tracker.store import changes

    if store.version < 4 or not weeks:
        return {}
    spans = {label: (changes.day_of(a - reach), changes.day_of(b + reach)) for label, a, b in weeks}
    first = min(d for d, _ in spans.values())
    last = max(d for _, d in spans.values())

    def work(conn: Connection) -> tuple[tuple[int, dict[int, int]], Any]:
        c = runs_table.c
        start = sa.func.min(sa.type_coerce(c.started_at, sa.String))  # as the driver gives it
        running = conn.execute(sa.select(start).where(c.status == "running"))
        return changes.marks(conn, first, last), running.scalar()

    (epoch, counters), raw = store.transaction(work, write=False)
    running_since = changes.as_time(raw)
    if raw is not None and running_since is None:  # a running run's start is no time
        return {}
    out = {}
    for label, _, end in weeks:
        if running_since is not None and end > running_since:
            continue  # a running run's figures up to now: not final
        lo, hi = spans[label]
        days = ",".join(str(counters.get(d, 0)) for d in range(lo, hi + 1))
        out[label] = f"{epoch}:{lo}:{days}"
    return out


def kept_headlines(
    store: RunStore, key: CacheKey, marks: Mapping[str, str]
) -> dict[str, dict[str, Headline]]:
    """The kept headlines of the weeks in ``marks`` whose settings and mark are the same.

    Args:
        store: The open run store.
        key: The report's settings (:func:`cache_key`).
        marks: Label → the week's mark now (:func:`week_marks`).

    Returns:
        Label → team (``""``: the fleet) → headline, for the weeks kept and still valid; a
        week without the fleet's is left out.
    """
    if not marks:
        return {}
    c = cache_table.c
    stmt = sa.select(c.week, c.team, c.mark, c.headline).where(
        c.week.in_(list(marks)),
        c.time_zone == key.time_zone,
        c.basis == key.basis,
        c.settings == key.settings,
    )

    def work(conn: Connection) -> list[Any]:
        if not sa.inspect(conn).has_table(cache_table.name):
            return []
        return list(conn.execute(stmt))

    out: dict[str, dict[str, Headline]] = {}
    for week, team, mark, text in store.transaction(work, write=False):
        headline = _headline_of(text)
        if marks.get(week) == mark and headline is not None and isinstance(team, str):
            out.setdefault(week, {})[team] = headline
    return {week: teams for week, teams in out.items() if "" in teams}


def keep_headlines(
    store: RunStore,
    key: CacheKey,
    headlines: Mapping[str, Mapping[str, tuple[str, Headline]]],
    *,
    now: datetime,
) -> None:
    """Keep these weeks' headlines with their marks (read before their rows), replacing what
    was kept for those weeks; a store that will not take them costs a warning, not the report.

    Args:
        store: The open run store.
        key: The report's settings (:func:`cache_key`).
        headlines: Label → team (``""``: the fleet) → (mark, headline) of complete weeks
            computed from the rows.
        now: When they were computed (timezone-aware).
    """
    if not headlines:
        return
    keyed = key._asdict()
    rows = [
        {
            **keyed,
            "week": week,
            "team": team,
            "mark": mark,
            "headline": json.dumps(asdict(h)),
            "computed_at": now,
        }
        for week, teams in headlines.items()
        for team, (mark, h) in teams.items()
    ]
    c = cache_table.c

    def work(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        _metadata.create_all(conn, checkfirst=True)
        conn.execute(
            sa.delete(cache_table).where(
                c.week.in_(list(headlines)),
                *(c[k] == v for k, v in keyed.items()),
            )
        )
        conn.execute(sa.insert(cache_table), rows)

    try:
        store.transaction(work, write=True)
    except Exception as e:  # a role that may only read, a locked file: the next report computes
        from tracker.store.engine import mask_text
        from tracker.text import one_line

        log.info(  # an optimization: a read-only role costs a longer report, not a warning
            "gpu-kpi: the weeks' KPIs are not kept in the store (%s: %s); the next report "
            "computes its trend again",
            type(e).__name__,
            mask_text(one_line(str(e))[:300], None),
        )


def _headline_of(text: object) -> Headline | None:
    """A kept headline read back, or None when the row is not what :func:`keep_headlines`
    writes (the field names and number types of :class:`Headline`)."""
    from reports.rows import Headline

    try:
        values = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    names = {f.name for f in fields(Headline)}
    if not isinstance(values, dict) or set(values) != names:
        return None
    for v in values.values():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            return None
        if isinstance(v, float) and math.isinf(v):
            return None
    return Headline(**values)


def week_spans(weeks: Sequence[datetime], tz: tzinfo) -> list[tuple[str, datetime, datetime]]:
    """(label, start, end) of weeks by their starts."""
    from reports.weeks import label_of, shift_week

    return [(label_of(w), w, shift_week(w, tz, 1)) for w in weeks]
