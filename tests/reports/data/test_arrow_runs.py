"""The runs of a SQLite store read into Arrow by ADBC's driver (no Python tuple per run) are
exactly the runs read as the driver's tuples: the same frame in the same order, the same runs
left out with the same reasons. A store whose columns hold values of two types, text that is
not UTF-8 or a start that is no time is read as tuples, as is a store without the driver."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from fakes import run_record

import reports.gputime as gputime
from reports import kpi as kpis
from reports.data import scans as scans_module
from reports.data.columns import arrow_run_columns
from reports.data.scans import SampleScans
from reports.rows import parsed_links
from tracker.store import RunStore

pytest.importorskip("adbc_driver_sqlite")


@pytest.fixture(autouse=True)
def arrow_for_a_few_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These stores hold a few runs: read into Arrow all the same."""
    monkeypatch.setattr(scans_module, "ARROW_FROM_RUNS", 0)


W48 = datetime(2026, 11, 23, tzinfo=UTC)
SINCE, UNTIL = W48, W48 + timedelta(days=7)

GOOD: dict[str, dict[str, Any]] = {
    "plain": {},
    "tagged": {"tags": ("nightly", "=formula"), "links": {"wandb": "https://wandb.ai/x/y"}},
    "unknowns": {"util": None, "price": None, "model": None},
    "counted": {"samples": 1_000_000, "tokens": 10**15, "mfu": 0.41, "verdict": "healthy"},
    "running": {"status": "running", "ended_at": None, "heartbeat_at": W48 + timedelta(days=2)},
    "b-same-start": {},  # starts with "plain": the id decides the order
}

ONE_TYPE = {
    "neg-hours": "UPDATE runs SET gpu_hours = -3 WHERE id = :id",
    "util-250": "UPDATE runs SET util_pct = 250 WHERE id = :id",
    "bad-tags": "UPDATE runs SET tags = '{' WHERE id = :id",
    "int-tags": "UPDATE runs SET tags = '[1]' WHERE id = :id",
    "list-links": "UPDATE runs SET links = '[\"a\"]' WHERE id = :id",
    "int-gpu-hours": "UPDATE runs SET gpu_hours = 2 WHERE id = :id",  # REAL affinity: 2.0
    # links another writer spelled its own way: kept, in the store's spelling
    "own-links": """UPDATE runs SET links = '{"b":"2","a":"é"}' WHERE id = :id""",
    # the store's form, but no day: that column is parsed by pandas, the row named
    "nov-31-end": "UPDATE runs SET ended_at = '2026-11-31 10:00:00.000000' WHERE id = :id",
}
"""Changed rows whose columns keep one type each: read into Arrow, the bad ones named."""

TWO_TYPES = {
    "text-util": "UPDATE runs SET util_pct = 'abc' WHERE id = :id",
    "real-gpus": "UPDATE runs SET gpu_count = 2.5 WHERE id = :id",  # numbers: floats, taken
    "bytes-name": "UPDATE runs SET name = X'6e616d65' WHERE id = :id",
    "not-utf8": "UPDATE runs SET team = CAST(X'ff41' AS TEXT) WHERE id = :id",
    "bad-start": "UPDATE runs SET started_at = '2026-11-26 garbage' WHERE id = :id",
    # Arrow takes no 60th second (pandas makes it the next minute's first): read as tuples
    "second-60": "UPDATE runs SET started_at = '2026-11-26 10:00:60.000000' WHERE id = :id",
}
"""Changed rows the Arrow read does not take (text and numbers in a column, bytes, text that
is not UTF-8, a start whose text order is not its time order): the whole read is the tuples'.
Whole and fractional numbers in a column are floats both ways (as pandas makes the tuples):
that one is taken."""


def fill(path: Path, changes: dict[str, str]) -> str:
    url = f"sqlite:///{path}"
    with RunStore(url) as store:
        shapes = {**GOOD, **{rid: {} for rid in changes}}
        for i, (rid, shape) in enumerate(shapes.items()):
            kw = dict(shape)
            args = {k: kw.pop(k) for k in ("util", "price", "model") if k in kw}
            hour = 0 if rid == "b-same-start" else i
            record = run_record(rid, W48 + timedelta(hours=hour), 2, gpus=1 + i % 3, **args)
            store.upsert_run(record.replace(**kw))
        with store.engine.begin() as conn:
            for rid, statement in changes.items():
                conn.execute(sa.text(statement), {"id": rid})
    return url


def as_tuples(scans: SampleScans, monkeypatch: pytest.MonkeyPatch) -> Any:
    """:func:`reports.gputime.usable_runs` reading the driver's tuples."""
    with monkeypatch.context() as m:
        m.setattr(SampleScans, "run_table", lambda self, **kw: None)
        return gputime.usable_runs(scans, since=SINCE, until=UNTIL)


def read_with_table(scans: SampleScans, monkeypatch: pytest.MonkeyPatch) -> Any:
    """:func:`reports.gputime.usable_runs`' read of the span, and the table
    :meth:`SampleScans.run_table` gave it (one driver's process per read, not two)."""
    tables: list[Any] = []
    real = SampleScans.run_table

    def spy(self: SampleScans, **kw: Any) -> Any:
        tables.append(real(self, **kw))
        return tables[-1]

    with monkeypatch.context() as m:
        m.setattr(SampleScans, "run_table", spy)
        frame, excluded = gputime.usable_runs(scans, since=SINCE, until=UNTIL)
    (table,) = tables
    return table, frame, excluded


def test_the_arrow_read_is_the_tuples_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = fill(tmp_path / "runs.db", ONE_TYPE)
    with RunStore(url) as store:
        scans = SampleScans(store)
        table, frame, excluded = read_with_table(scans, monkeypatch)
        expected, expected_excluded = as_tuples(scans, monkeypatch)
    assert table is not None and table.num_rows == len(GOOD) + len(ONE_TYPE)
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)
    assert excluded == expected_excluded
    # the bad values named (neg-hours, util-250, the tags and links), the rest kept
    kept = {"int-gpu-hours", "own-links"}
    assert sorted(e.run_id for e in excluded) == sorted(set(ONE_TYPE) - kept)
    assert sorted(frame["id"]) == sorted([*GOOD, *kept])
    # by start, then id: plain and b-same-start start together
    assert frame["id"].tolist()[:2] == ["b-same-start", "plain"]
    tagged = frame.loc[frame["id"] == "tagged"].iloc[0]
    assert tagged["tags"] == ("nightly", "=formula")
    # links as the JSON text the store writes (no dict per run), the same object read back
    assert tagged["links"] == '{"wandb": "https://wandb.ai/x/y"}'
    assert parsed_links(tagged["links"]) == {"wandb": "https://wandb.ai/x/y"}
    own = frame.loc[frame["id"] == "own-links", "links"].tolist()
    assert own == ['{"a": "\\u00e9", "b": "2"}']
    assert frame.loc[frame["id"] == "int-gpu-hours", "gpu_hours"].tolist() == [2.0]
    assert frame.loc[frame["id"] == "counted", "tokens"].tolist() == [10**15]


def test_the_rows_not_surely_usable_are_read_again_as_tuples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad row found in the Arrow read is read by its row id through the tuples' path,
    which names the problem; the other rows are never made tuples."""
    url = fill(tmp_path / "runs.db", ONE_TYPE)
    asked: list[list[int]] = []
    real = SampleScans.run_rows_at

    def spy(self: SampleScans, rowids: list[int]) -> Any:
        asked.append(list(rowids))
        return real(self, rowids)

    monkeypatch.setattr(SampleScans, "run_rows_at", spy)
    with RunStore(url) as store:
        gputime.usable_runs(SampleScans(store), since=SINCE, until=UNTIL)
    # int-gpu-hours and own-links are good
    assert len(asked) == 1 and len(asked[0]) == len(ONE_TYPE) - 2


@pytest.mark.parametrize("change", sorted(TWO_TYPES))
def test_a_store_the_arrow_read_does_not_take_is_read_as_tuples(
    tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = fill(tmp_path / "runs.db", {change: TWO_TYPES[change]})
    with RunStore(url) as store:
        scans = SampleScans(store)
        table, frame, excluded = read_with_table(scans, monkeypatch)
        expected, expected_excluded = as_tuples(scans, monkeypatch)
    if change in ("bad-start", "second-60"):  # read, but its order may not be SQLite's
        assert table is not None and arrow_run_columns(table) is None
    elif change == "real-gpus":
        assert table is not None and str(table.schema.field("gpu_count").type) == "double"
    else:
        assert table is None
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)
    assert excluded == expected_excluded
    assert len(frame) + len(excluded) == len(GOOD) + 1


def test_without_the_driver_the_runs_are_read_as_tuples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = fill(tmp_path / "runs.db", {})
    with RunStore(url) as store:
        scans = SampleScans(store)
        with_driver = gputime.usable_runs(scans, since=SINCE, until=UNTIL)
        monkeypatch.setitem(sys.modules, "adbc_driver_sqlite", None)  # not installed
        assert scans.run_table(since=SINCE, until=UNTIL) is None
        without = gputime.usable_runs(scans, since=SINCE, until=UNTIL)
    pd.testing.assert_frame_equal(with_driver[0], without[0], check_exact=True)
    assert sorted(without[0]["id"]) == sorted(GOOD)


def test_an_empty_span_and_a_store_in_memory_are_read_as_tuples(tmp_path: Path) -> None:
    url = fill(tmp_path / "runs.db", {})
    with RunStore(url) as store:
        later = SINCE - timedelta(days=70)  # before every run
        assert SampleScans(store).run_table(since=later, until=later + timedelta(days=7)) is None
        frame, excluded = gputime.usable_runs(
            SampleScans(store), since=later, until=later + timedelta(days=7)
        )
    assert len(frame) == 0 and excluded == []
    with RunStore("sqlite://") as store:
        store.upsert_run(run_record("in-memory", W48, 2))
        assert SampleScans(store).run_table(since=SINCE, until=UNTIL) is None
        frame, _ = gputime.usable_runs(SampleScans(store), since=SINCE, until=UNTIL)
    assert frame["id"].tolist() == ["in-memory"]


def test_the_runs_with_kpis_are_those_of_the_records(tmp_path: Path) -> None:
    """Through the weekly figures: the runs read into Arrow price and sum as the records do."""
    url = fill(tmp_path / "runs.db", ONE_TYPE)
    with RunStore(url) as store:
        frame, _ = gputime.usable_runs(SampleScans(store), since=SINCE, until=UNTIL)
        records, _ = SampleScans(store).read_runs(since=SINCE, until=UNTIL)
    good, _ = kpis.usable_runs(records)
    expected = kpis.runs_frame(good)
    assert frame["gpu_hours"].sum() == expected["gpu_hours"].sum()
    assert sorted(frame["id"]) == sorted(expected["id"])


def test_runs_stored_in_start_order_are_not_sorted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs written as they start (a store's usual order) are read in that order with no sort
    of the table; ties of start are ordered by id as SQLite orders them."""
    from reports.data import columns

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store:
        for i, rid in enumerate(["a", "c", "d", "b"]):  # b starts with c and d: before them
            start = W48 + timedelta(hours=min(i, 1))
            store.upsert_run(run_record(rid, start, 2))
    takes: list[Any] = []  # the orders the table is taken in (None: as read)
    real = columns._start_order
    monkeypatch.setattr(columns, "_start_order", lambda *a: takes.append(real(*a)) or takes[-1])
    with RunStore(url) as store:
        scans = SampleScans(store)
        frame, _ = gputime.usable_runs(scans, since=SINCE, until=UNTIL)
        assert frame["id"].tolist() == ["a", "b", "c", "d"]
        assert len(takes) == 1 and takes[0].to_pylist() == [0, 3, 1, 2]
        store.engine.dispose()
    with sa.create_engine(url).begin() as conn:
        conn.execute(sa.text("DELETE FROM runs WHERE id = 'b'"))
    takes.clear()
    with RunStore(url) as store:
        scans = SampleScans(store)
        frame, _ = gputime.usable_runs(scans, since=SINCE, until=UNTIL)
        expected, _ = as_tuples(scans, monkeypatch)
    assert frame["id"].tolist() == ["a", "c", "d"] and takes == [None]
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="Linux's /proc")
def test_the_driver_s_sqlite_never_runs_in_the_reading_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADBC's driver carries its own copy of SQLite; two copies in one process break each
    other's locks (one truncates the WAL's shared memory the other has mapped: a bus error,
    seen once in CI). The read runs the driver in a process of its own, while this one holds
    the store open (its shared memory mapped) and goes on reading after."""
    url = fill(tmp_path / "runs.db", {})
    with RunStore(url) as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        before = conn.exec_driver_sql("SELECT count(*) FROM runs").scalar()
        table, frame, _ = read_with_table(SampleScans(store), monkeypatch)
        assert table is not None
        assert conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() == before == len(GOOD)
    assert sorted(frame["id"]) == sorted(GOOD)
    assert "libadbc_driver_sqlite" not in Path("/proc/self/maps").read_text()


def test_a_child_that_fails_or_writes_no_table_leaves_the_rows_to_the_tuples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's process failing (its error on standard error), killed (the time limit) or
    writing what is no Arrow stream: no table, and the read as tuples gives the runs."""
    from reports.data import adbc_read

    url = fill(tmp_path / "runs.db", {})
    db = tmp_path / "runs.db"
    fake = tmp_path / "child.py"
    for body in (
        "import sys; sys.stderr.write('boom'); sys.exit(1)",
        "import time; time.sleep(60)",
        "import sys; sys.stdout.write('not arrow' * 100000)",
    ):
        fake.write_text(body)
        monkeypatch.setattr(adbc_read, "__file__", str(fake))
        monkeypatch.setattr(adbc_read, "TIMEOUT_S", 2.0)
        assert adbc_read.read_table(db, "SELECT 1") is None
    with RunStore(url) as store:
        frame, _ = gputime.usable_runs(SampleScans(store), since=SINCE, until=UNTIL)
    assert sorted(frame["id"]) == sorted(GOOD)


def test_a_small_read_s_child_starts_without_pyarrow_and_every_writer_gives_one_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's process writes a read of fewer than ``NANOARROW_BELOW_RUNS`` runs by
    nanoarrow (the ``adbc`` extra's: it starts in a fraction of pyarrow's time), never
    importing pyarrow; a bigger one by pyarrow (nanoarrow's writer copies the batch), as where
    nanoarrow is missing: the same table to the reader."""
    import pyarrow as pa

    from reports.data import adbc_read

    pytest.importorskip("nanoarrow")
    fill(tmp_path / "runs.db", ONE_TYPE)
    uri = f"file:{tmp_path / 'runs.db'}?mode=ro"
    sql = "SELECT * FROM runs ORDER BY id"
    hidden = "sys.modules['nanoarrow'] = sys.modules['nanoarrow.ipc'] = None;"
    tables, imported = [], []
    for hide, flags in (("", ["--nanoarrow"]), ("", []), (hidden, ["--nanoarrow"])):
        code = (
            f"import sys; {hide} sys.path.insert(0, {str(Path(adbc_read.__file__).parent)!r});"
            f"import adbc_read; status = adbc_read.main({[uri, *flags]!r});"
            "sys.stderr.write(str('pyarrow' in sys.modules)); sys.exit(status)"
        )
        p = subprocess.run(
            [sys.executable, "-P", "-c", code], input=sql.encode(), capture_output=True, check=False
        )
        assert p.returncode == 0, p.stderr
        tables.append(pa.ipc.open_stream(p.stdout).read_all())
        imported.append(p.stderr.decode())
    assert imported == ["False", "True", "True"]
    assert tables[0].num_rows == len(GOOD) + len(ONE_TYPE)
    for other in tables[1:]:
        assert tables[0].equals(other) and tables[0].schema.equals(other.schema)
    # which writer a read asks for: by the runs started in its span
    asked: list[bool] = []
    real = scans_module.read_table

    def spy(database: Path, sql: str, *, light: bool = False) -> Any:
        asked.append(light)
        return real(database, sql, light=light)

    monkeypatch.setattr(scans_module, "read_table", spy)
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        assert SampleScans(store).run_table(since=SINCE, until=UNTIL) is not None
        monkeypatch.setattr(scans_module, "NANOARROW_BELOW_RUNS", len(GOOD))
        assert SampleScans(store).run_table(since=SINCE, until=UNTIL) is not None
    assert asked == [True, False]
