"""The data of ``bench/report_scale.py``, and DuckDB's reference figures over it.

One fleet size is ``gpus`` GPUs (runs of 8 GPUs, the last one with the rest) for one week of
per-minute samples (2026-W48, UTC), plus 11 earlier weeks of run summaries. The samples are generated once, by
DuckDB, into Parquet; the run store (SQLite file or PostgreSQL database) is loaded from that
Parquet, so the store and DuckDB's reference read the same rows. Cases:

- ``benign``: a run idles (1%) for its first 2 hours when its index is a multiple of 7; every
  other minute is ``base + minute % 13`` (a base per run, drawn from ``random.Random(1000)``);
- ``worst``: the same, plus one minute at 1% at both ends of every GPU's week (its first and its
  last minute), so that every GPU has a low minute stretch spanning its whole week.

As a script it is DuckDB's side of the benchmark, run in its own process so that its time and
peak memory are its own::

    python bench/scale_data.py reference SAMPLES.parquet RUNS.parquet

prints the week's headline figures as JSON (:func:`reference`). Nothing here imports pandas or
the project at module level: the reference process pays for DuckDB only.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

WEEK = datetime(2026, 11, 23, tzinfo=UTC)  # 2026-W48
GPUS_PER_RUN, MINUTES, HISTORY_WEEKS = 8, 7 * 24 * 60, 11
MODELS = ("H100", "A100-80GB", "H200", "L40S")
TEAMS = ("nlp", "vision", "search", "research", "speech")
PRICE = 3.0
IDLE_PCT, IDLE_WINDOW = 5.0, 30  # tracker.cost.Thresholds' defaults on NVML utilization
# a value counts as under the threshold when under it by tracker.cost.IDLE_MARGIN_PCT
IDLE_LIMIT = IDLE_PCT - 1e-6
CASES = ("benign", "worst")
"""The week's shapes; a case ``split<M>`` is ``benign``'s samples cut into single-GPU runs of
``M`` minutes each (:func:`split_minutes`): 1,000 GPUs at ``split100`` are ~101k runs, at
``split10`` 1.008 M runs in the week."""
DATA_VERSION = "2"  # bump when the generated data changes: cached files are keyed by it
SAMPLE_COLUMNS = (
    "run_id",
    "minute",
    "gpu",
    "covered_s",
    "util_pct",
    "sm_active_pct",
    "mem_used_gib",
    "power_w",
    "energy_kwh",
)


def split_minutes(case: str) -> int:
    """The minutes of each run of a ``split<M>`` case; 0 for the cases of 8-GPU runs a week long."""
    if case in CASES:
        return 0
    m = re.fullmatch(r"split([1-9][0-9]*)", case)
    if not m:
        raise ValueError(f"case {case!r}: one of {CASES} or split<MINUTES>")
    return int(m.group(1))


def week_run_count(gpus: int, case: str) -> int:
    """How many runs the week has in ``case``."""
    m = split_minutes(case)
    return gpus * -(-MINUTES // m) if m else runs_of(gpus)


def runs_of(gpus: int) -> int:
    """Runs of 8 GPUs, the last one with the rest when ``gpus`` is no multiple of 8."""
    if gpus <= 0:
        raise ValueError(f"--gpus {gpus}: a positive number of GPUs")
    return -(-gpus // GPUS_PER_RUN)


def gpus_of_run(gpus: int, i: int) -> int:
    return min(GPUS_PER_RUN, gpus - GPUS_PER_RUN * i)


# -- runs ---------------------------------------------------------------------------------------
def draws(runs: int) -> tuple[list[float], list[float]]:
    """The history runs' utilizations (11 weeks x ``runs``, newest week first) and each week
    run's base utilization: one seeded stream, in the order the first version of the bench
    drew them (at 1,000 GPUs the figures are those of the first version)."""
    rng = random.Random(1000)
    history = [rng.uniform(5, 95) for _ in range(HISTORY_WEEKS * runs)]
    return history, [rng.uniform(0, 100) for _ in range(runs)]


def _record(
    run_id: str, group: int, start: datetime, end: datetime, gpus: int, util: float, **more: Any
) -> Any:
    """A finished run of 8-GPU group ``group`` (its team, project, user and model), priced at
    :data:`PRICE`, with its GPU-hours from its span."""
    from tracker.record import RunRecord

    return RunRecord(
        id=run_id,
        name=f"job-{run_id.split('-', 1)[1]}",
        team=TEAMS[group % 5],
        project=f"p{group % 17}",
        user=f"u{group % 40}",
        started_at=start,
        ended_at=end,
        status="finished",
        gpu_source="nvml",
        gpu_model=MODELS[group % 4],
        gpu_count=gpus,
        price_per_gpu_hour=PRICE,
        gpu_hours=gpus * (end - start).total_seconds() / 3600.0,
        util_pct=util,
        **more,
    )


def run_records(gpus: int, case: str = "benign") -> Iterator[Any]:
    """The RunRecords: 11 earlier weeks of summaries, then the week's runs (with samples): runs
    of 8 GPUs a week long, or in a ``split<M>`` case one run per GPU and ``M`` minutes."""
    runs = runs_of(gpus)
    history_util, _ = draws(runs)
    week_end = WEEK + timedelta(days=7)
    for w in range(1, HISTORY_WEEKS + 1):
        monday = WEEK - timedelta(days=7 * w)
        for i in range(runs):
            util = history_util[(w - 1) * runs + i]
            end = monday + timedelta(days=7)
            yield _record(f"h{w:02d}-{i:04d}", i, monday, end, gpus_of_run(gpus, i), util)
    memory = {"mem_peak_gib": 20.0, "mem_total_gib": 80.0}
    split = split_minutes(case)
    if not split:
        for i in range(runs):
            rid = f"w-{i:04d}"
            more = {**memory, "links": _links(rid, i)}
            yield _record(rid, i, WEEK, week_end, gpus_of_run(gpus, i), 50.0, **more)
        return
    for j in range(gpus):
        i = j // GPUS_PER_RUN  # the GPU's 8-GPU group: its team, model and base utilization
        for k in range(-(-MINUTES // split)):
            start = WEEK + timedelta(minutes=k * split)
            end = min(start + timedelta(minutes=split), week_end)
            rid = f"w-{j:05d}-{k:04d}"
            yield _record(rid, i, start, end, 1, 50.0, **memory, links=_links(rid, i))


def _links(run_id: str, group: int) -> dict[str, str]:
    """A week's run's links as the tracker records them for a run logged to W&B (each run its
    own page): the report reads a million of them."""
    return {"wandb": f"https://wandb.ai/acme/p{group % 17}/runs/{run_id}"}


# -- samples, in Parquet --------------------------------------------------------------------------
def write_parquet(gpus: int, case: str, samples: Path, runs_file: Path) -> None:
    """The week's minute samples of ``case`` (sorted by run, GPU, minute) and the week's runs'
    prices (``id``, ``price_per_gpu_hour``), each written to a temporary name and renamed."""
    import duckdb

    split = split_minutes(case)
    runs = runs_of(gpus)
    _, bases = draws(runs)
    worst = case == "worst"
    con = duckdb.connect()
    try:
        con.execute("CREATE TEMP TABLE base (i INTEGER, base DOUBLE)")
        con.executemany("INSERT INTO base VALUES (?, ?)", list(enumerate(bases)))
        low = "(b.i % 7 = 0 AND m.m < 120)" + (
            f" OR m.m = 0 OR m.m = {MINUTES - 1}" if worst else ""
        )
        tmp = samples.with_name(samples.name + ".tmp")
        run_id = (
            f"printf('w-%05d-%04d', i * {GPUS_PER_RUN} + g, m // {split})"
            if split
            else "printf('w-%04d', i)"
        )
        con.execute(f"""
            COPY (
                SELECT {run_id} AS run_id,
                       TIMESTAMP '{WEEK:%Y-%m-%d %H:%M:%S}' + to_minutes(m) AS minute,
                       printf('GPU-%04d-%d', i, g) AS gpu,
                       60.0::DOUBLE AS covered_s, u AS util_pct, u * 0.7 AS sm_active_pct,
                       20.0::DOUBLE AS mem_used_gib, 300.0::DOUBLE AS power_w,
                       0.005::DOUBLE AS energy_kwh
                FROM (SELECT b.i, g.g, m.m,
                             CASE WHEN {low} THEN 1.0::DOUBLE
                                  ELSE least(100.0::DOUBLE,
                                             greatest(0.0::DOUBLE, b.base + m.m % 13)) END AS u
                      FROM base b, range({GPUS_PER_RUN}) g(g), range({MINUTES}) m(m)
                      WHERE b.i * {GPUS_PER_RUN} + g.g < {gpus})
                ORDER BY i, g, m
            ) TO '{tmp}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)""")
        tmp.replace(samples)
        if not runs_file.exists():
            tmp = runs_file.with_name(runs_file.name + ".tmp")
            ids = (
                f"SELECT printf('w-%05d-%04d', j, k) AS id FROM range({gpus}) a(j), "
                f"range({-(-MINUTES // split)}) b(k)"
                if split
                else f"SELECT printf('w-%04d', i) AS id FROM range({runs}) r(i)"
            )
            con.execute(f"""
                COPY (SELECT id, {PRICE}::DOUBLE AS price_per_gpu_hour FROM ({ids}))
                TO '{tmp}' (FORMAT parquet)""")
            tmp.replace(runs_file)
    finally:
        con.close()


def _batches(samples: Path, select: str, rows: int = 200_000) -> Any:
    """The Parquet's rows through ``select`` (a SELECT list over its columns), in batches."""
    import duckdb

    con = duckdb.connect()
    try:
        cur = con.execute(f"SELECT {select} FROM read_parquet('{samples}')")
        while batch := cur.fetchmany(rows):
            yield batch
    finally:
        con.close()


# -- the run store, loaded from the Parquet -------------------------------------------------------
def _write_runs(url: str, gpus: int, case: str) -> None:
    """The schema (the project's RunStore creates it) and every run, in one transaction."""
    import itertools

    from tracker.store import RunStore
    from tracker.store.schema import run_to_row, runs_table, upsert

    def write(conn: Any) -> None:
        records = run_records(gpus, case)
        while chunk := [run_to_row(r) for r in itertools.islice(records, 50_000)]:
            conn.execute(stmt, chunk)

    with RunStore(url) as store:
        stmt = upsert(store.engine.dialect.name, runs_table, ("id",))
        store.transaction(write, write=True)


def load_sqlite(path: Path, gpus: int, case: str, samples: Path) -> int:
    """A SQLite store at ``path`` (written under a temporary name, then renamed) with the runs
    and ``samples``' rows; the number of sample rows."""
    import sqlite3

    tmp = path.with_name(path.name + ".tmp")
    for stale in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        stale.unlink(missing_ok=True)
    _write_runs(f"sqlite:///{tmp}", gpus, case)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA synchronous=OFF")
    n = 0
    # the store's text form of a UTC minute (tracker.store.schema.UTCDateTime on SQLite)
    select = ", ".join(
        "strftime(minute, '%Y-%m-%d %H:%M:%S.%f')" if c == "minute" else c for c in SAMPLE_COLUMNS
    )
    insert = (
        f"INSERT INTO samples ({', '.join(SAMPLE_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(SAMPLE_COLUMNS))})"
    )
    for batch in _batches(samples, select):
        con.executemany(insert, batch)
        con.commit()
        n += len(batch)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    tmp.replace(path)
    return n


def pg_url_for(server_url: str, database: str) -> str:
    import sqlalchemy as sa

    return sa.make_url(server_url).set(database=database).render_as_string(hide_password=False)


def _pg_conninfo(url: str) -> str:
    """A libpq URI for psycopg (no SQLAlchemy driver suffix)."""
    import sqlalchemy as sa

    u = sa.make_url(url).set(drivername="postgresql")
    return u.render_as_string(hide_password=False)


BENCH_MARK = "bench_report_scale"
"""The ``meta`` key whose value says a bench database was loaded completely (and with what)."""


def pg_loaded(url: str, expect: str) -> bool:
    """Whether the bench database at ``url`` exists and was loaded completely with ``expect``."""
    import psycopg

    try:
        with psycopg.connect(_pg_conninfo(url), connect_timeout=5) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = %s", (BENCH_MARK,)).fetchone()
    except psycopg.Error:
        return False
    return row is not None and row[0] == expect


def _copy_csv(conn: Any, table: str, columns: Sequence[str], csv: Path) -> None:
    """``COPY`` the CSV file ``csv`` (no header) into ``table``'s ``columns`` (psycopg)."""
    with (
        conn.cursor() as cur,
        cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT csv)") as cp,
        csv.open("rb") as f,
    ):
        while chunk := f.read(1 << 20):
            cp.write(chunk)


def load_pg(
    server_url: str, database: str, gpus: int, case: str, samples: Path, expect: str, work_dir: Path
) -> int:
    """(Re)create the database ``database`` on the server of ``server_url`` (its role needs
    CREATEDB; the database of ``server_url`` itself is never touched), create the schema with
    RunStore, COPY ``samples``' rows in, ANALYZE, and mark it loaded; the number of rows."""
    import duckdb
    import psycopg

    with psycopg.connect(_pg_conninfo(server_url), autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}"')
        admin.execute(f'CREATE DATABASE "{database}"')
    url = pg_url_for(server_url, database)
    _write_runs(url, gpus, case)
    csv = work_dir / f"{database}.csv"
    select = ", ".join(
        "strftime(minute, '%Y-%m-%d %H:%M:%S+00') AS minute" if c == "minute" else c
        for c in SAMPLE_COLUMNS
    )
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT {select} FROM read_parquet('{samples}')) TO '{csv}' "
            "(FORMAT csv, HEADER false)"
        )
        count = con.execute(f"SELECT count(*) FROM read_parquet('{samples}')").fetchone()
        n = int(count[0]) if count else 0
    finally:
        con.close()
    try:
        with psycopg.connect(_pg_conninfo(url)) as conn:
            _copy_csv(conn, "samples", SAMPLE_COLUMNS, csv)
            conn.commit()
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE")
            conn.execute("INSERT INTO meta (key, value) VALUES (%s, %s)", (BENCH_MARK, expect))
    finally:
        csv.unlink(missing_ok=True)
    return n


# -- the earlier weeks as rollups -------------------------------------------------------------
WEEK_HOUR = int(WEEK.timestamp()) // 3600


def _history_select(gpus: int) -> str:
    """DuckDB's SELECT of the earlier weeks' hourly rollups (the columns of the store's
    ``rollups`` table, in its order):
    every GPU of each of the 11 weeks' runs, all 168 hours at the run's utilization (a full
    minute each minute, SM activity 0.7 of it, 300 W, 20 GiB), over a table ``hist(w, i, u)``."""
    return f"""
        SELECT printf('h%02d-%04d', h.w, h.i) AS run_id, printf('GPU-%04d-%d', h.i, g.g) AS gpu,
               ({WEEK_HOUR} - 168 * h.w + t.t)::BIGINT AS hour, 60 AS minutes,
               3600.0::DOUBLE AS covered_s, 3600.0::DOUBLE AS util_known_s,
               h.u * 3600.0 AS util_s, 0.0::DOUBLE AS util_idle_s, 0.0::DOUBLE AS util_idle_value_s,
               3600.0::DOUBLE AS sm_known_s, h.u * 0.7 * 3600.0 AS sm_s, 0.0::DOUBLE AS sm_idle_s,
               0.0::DOUBLE AS sm_idle_value_s, 0.3::DOUBLE AS energy_kwh,
               20.0::DOUBLE AS mem_peak_gib, 0 AS dropped, 0 AS bad_util, 0 AS bad_sm,
               0 AS bad_minutes
        FROM hist h, range({GPUS_PER_RUN}) g(g), range(168) t(t)
        WHERE h.i * {GPUS_PER_RUN} + g.g < {gpus}"""


def set_history_rollups(url: str, gpus: int, want: bool, work_dir: Path) -> int:
    """Give the 11 earlier weeks' runs hourly rollups (``want``: a store whose every week was
    sampled, so that a report works its 12-week trend out from rollups, 11 x ``gpus`` x 168
    rows) or none (their summaries alone, as the bench's stores are loaded), written straight
    into the ``rollups`` table; nothing when the store already is so. The rows written (or
    deleted, negative)."""
    import duckdb
    import sqlalchemy as sa

    engine = sa.create_engine(
        url, **({} if url.startswith("sqlite") else {"isolation_level": "AUTOCOMMIT"})
    )
    try:
        with engine.begin() as conn:
            have = (
                conn.exec_driver_sql(
                    f"SELECT 1 FROM rollups WHERE hour < {WEEK_HOUR} LIMIT 1"
                ).first()
                is not None
            )
            if have == want:
                return 0
            if not want:
                n = conn.exec_driver_sql(f"DELETE FROM rollups WHERE hour < {WEEK_HOUR}").rowcount
                return -n
        from tracker.store.schema import rollups_table

        columns = [c.name for c in rollups_table.c]
        history, _ = draws(runs_of(gpus))
        con = duckdb.connect()
        con.execute("CREATE TEMP TABLE hist (w INTEGER, i INTEGER, u DOUBLE)")
        runs = runs_of(gpus)
        con.executemany(
            "INSERT INTO hist VALUES (?, ?, ?)",
            [
                (w, i, history[(w - 1) * runs + i])
                for w in range(1, HISTORY_WEEKS + 1)
                for i in range(runs)
            ],
        )
        n = 0
        made = [d[0] for d in con.execute(f"{_history_select(gpus)} LIMIT 0").description]
        if made != columns:
            raise RuntimeError(f"the history rollups' columns {made} are not the store's {columns}")
        if url.startswith("sqlite"):
            insert = (
                f"INSERT INTO rollups ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' * len(columns))})"
            )
            cur = con.execute(_history_select(gpus))
            with engine.begin() as conn:
                while batch := cur.fetchmany(200_000):
                    conn.exec_driver_sql(insert, batch)
                    n += len(batch)
        else:
            import psycopg

            csv = work_dir / "history-rollups.csv"
            con.execute(f"COPY ({_history_select(gpus)}) TO '{csv}' (FORMAT csv, HEADER false)")
            try:
                with psycopg.connect(_pg_conninfo(url)) as pg:
                    _copy_csv(pg, "rollups", columns, csv)
                    n = pg.execute(
                        f"SELECT count(*) FROM rollups WHERE hour < {WEEK_HOUR}"
                    ).fetchone()[0]
                    pg.commit()
                    pg.autocommit = True
                    pg.execute("VACUUM ANALYZE rollups")
            finally:
                csv.unlink(missing_ok=True)
        con.close()
        return n
    finally:
        engine.dispose()


# -- DuckDB's reference figures -----------------------------------------------------------------
REFERENCE_SQL = f"""
WITH s AS (
    SELECT s.run_id, s.gpu, s.minute, s.covered_s, s.util_pct AS u, r.price_per_gpu_hour AS price
    FROM read_parquet($samples) s JOIN read_parquet($runs) r ON r.id = s.run_id
    WHERE s.minute >= $since AND s.minute < $until
), w AS (
    -- a window of {IDLE_WINDOW} consecutive rows of one (run, GPU) ending here, all with data,
    -- averaging under {IDLE_PCT} weighted by the seconds each row covers (tracker.cost.idle_flags)
    SELECT *, (COUNT(u) OVER win = {IDLE_WINDOW} AND SUM(covered_s) OVER win > 0
               AND SUM(u * covered_s) OVER win < {IDLE_LIMIT} * SUM(covered_s) OVER win)::INTEGER AS q
    FROM s
    WINDOW win AS (PARTITION BY run_id, gpu ORDER BY minute
                   ROWS BETWEEN {IDLE_WINDOW - 1} PRECEDING AND CURRENT ROW)
), c AS (
    -- a minute lies in a qualifying window when one ends in [this row, this row + 29 rows]
    SELECT *, MAX(q) OVER (PARTITION BY run_id, gpu ORDER BY minute
                           ROWS BETWEEN CURRENT ROW AND {IDLE_WINDOW - 1} FOLLOWING) = 1 AS covered
    FROM w
), i AS (
    SELECT *, covered AND u IS NOT NULL AND u < {IDLE_LIMIT} AS idle FROM c
)
SELECT SUM(covered_s) / 3600.0 AS gpu_hours,
       100.0 * SUM(CASE WHEN u IS NOT NULL THEN u / 100.0 * covered_s END)
           / SUM(CASE WHEN u IS NOT NULL THEN covered_s END) AS utilization_pct,
       SUM(covered_s / 3600.0 * price) AS spend_usd,
       SUM(CASE WHEN idle THEN covered_s / 3600.0 * price ELSE 0 END) AS idle_usd,
       SUM(CASE WHEN idle THEN covered_s ELSE 0 END) / 3600.0 AS idle_gpu_hours,
       COUNT(*) AS rows
FROM i
"""


def reference(samples: Path, runs: Path) -> dict[str, float | None]:
    """The week's headline figures over the Parquet rows, by DuckDB alone: GPU-hours,
    utilization (Σ util × s ÷ Σ s with data), spend (GPU-hours × price), idle $ and idle
    GPU-hours by the idle rule (window functions), and the query's own seconds."""
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect()
    try:
        cur = con.execute(
            REFERENCE_SQL,
            {
                "samples": str(samples),
                "runs": str(runs),
                "since": WEEK.replace(tzinfo=None),
                "until": (WEEK + timedelta(days=7)).replace(tzinfo=None),
            },
        )
        names = [d[0] for d in cur.description]
        row = cur.fetchone()
        if row is None:
            raise RuntimeError("DuckDB's reference query returned no row")
    finally:
        con.close()
    out = {k: float(v) if v is not None else None for k, v in zip(names, row, strict=True)}
    out["query_s"] = time.perf_counter() - t0
    return out


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "reference":
        sys.exit("usage: python bench/scale_data.py reference SAMPLES.parquet RUNS.parquet")
    print(json.dumps(reference(Path(sys.argv[2]), Path(sys.argv[3]))))


@contextmanager
def scratch_store(kind: str, database: str) -> Iterator[str]:
    """The URL of an empty store of ``kind``: ``sqlite`` (a file in a temporary folder) or a
    PostgreSQL server URL, whose database ``database`` is dropped and made again, and dropped
    after (the URL's role needs CREATEDB; its own database is never written to)."""
    import tempfile

    import sqlalchemy as sa

    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            yield f"sqlite:///{d}/{database}.db"
        return
    server = sa.create_engine(sa.make_url(kind), isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {database}")
        conn.exec_driver_sql(f"CREATE DATABASE {database}")
    try:
        yield sa.make_url(kind).set(database=database).render_as_string(hide_password=False)
    finally:
        with server.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        server.dispose()
