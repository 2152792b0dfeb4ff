"""Names no database wants: a NUL (PostgreSQL's text refuses it), a lone surrogate (what
``os.fsdecode`` makes of a non-UTF-8 file name), arbitrary Unicode. Every store keeps them the
same way (:func:`tracker.text.storable`), and one such run never blocks the others."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta

import pytest
from fakes import T0, Clock, examples, run_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracker import track
from tracker.record import MinuteSample
from tracker.store import RunStore
from tracker.store.spool import Spool
from tracker.text import storable

T0_TIME = datetime.fromtimestamp(T0, UTC)
NAMES = [
    "exp\x00-42",  # PostgreSQL: "text fields cannot contain NUL": the spool stuck behind it
    os.fsdecode(b"exp-caf\xe9"),  # a non-UTF-8 path: set aside in the spool, "stored" said
    "half-\ud800-pair",  # a lone surrogate of no file name
    "ok-\u00e9\u6f22\U0001f680",  # plain Unicode: kept as it is
]


def test_storable_is_the_text_or_replacement_characters() -> None:
    assert [storable(n) for n in NAMES] == [
        "exp\ufffd-42",
        "exp-caf\ufffd",
        "half-?-pair",
        "ok-\u00e9\u6f22\U0001f680",
    ]


def test_runs_with_such_names_are_stored_and_the_next_one_too(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each of :data:`NAMES` tracked in turn (team and tags too) into a real store: every run
    lands, under the cleaned name, and nothing is left in the spool."""
    clock = Clock()
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        for i, name in enumerate(NAMES):
            with track(
                name=name,
                team=name,
                tags=[name],
                run_id=f"run-{i}",
                backend="simulated:healthy",
                clock=clock,
                threaded=False,
                store=store_url,
                log_to_python=False,
            ) as run:
                for _ in range(90):
                    clock.t += 1.0
                    run.sampler.sample()  # type: ignore[union-attr]
    with RunStore(store_url) as store:
        runs = {r.id: r for r in store.list_runs()}
        assert sorted(runs) == [f"run-{i}" for i in range(len(NAMES))]
        for i, name in enumerate(NAMES):
            r = runs[f"run-{i}"]
            assert (r.name, r.team, r.tags) == (storable(name), storable(name), (storable(name),))
            assert r.gpu_hours == pytest.approx(90 / 3600)
    assert Spool.for_store(store_url).pending() == 0
    assert not [m for m in caplog.messages if "spool" in m or "store" in m]


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(name=st.text(st.characters(codec=None, categories=None), min_size=1, max_size=40))
def test_any_name_reads_back_as_stored_on_both_engines(store_url: str, name: str) -> None:
    """Any text as a run's id, name and GPU: it reads back as :func:`storable` makes it, the
    same on SQLite and PostgreSQL, and the run's minute rows follow it."""
    with RunStore(store_url) as store:
        r = run_record("x", T0_TIME, 1, name=name)
        store.upsert_run(r.replace(id=name))
        store.upsert_samples(
            [MinuteSample(run_id=name, minute=T0_TIME + timedelta(minutes=1), gpu=name)]
        )
        got = store.get_run(name)
        assert got is not None and got.name == storable(name) and got.id == storable(name)
        (row,) = store.samples(run_ids=[storable(name)])
        assert (row.run_id, row.gpu) == (storable(name), storable(name))


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_value_postgresql_refuses_is_a_refusal_not_an_unreachable_store(
    store_url: str,
) -> None:
    """A PostgreSQL data error (class 22, as a NUL in text was) was taken for "run store
    unavailable": the op stayed first in the spool and every sync failed on it. It is a
    refusal now, which the spool sets aside (``test_store``'s set-aside test) so that the runs
    behind it are sent."""
    from tracker.store import StoreError
    from tracker.store.spool import store_unavailable

    with RunStore(store_url) as store, pytest.raises(StoreError) as e:
        store._transaction(lambda conn: conn.exec_driver_sql("SELECT 1/0").all(), write=False)
    assert e.value.refused and not store_unavailable(e.value)
    assert "refused a value: division by zero" in str(e.value)
    assert store_unavailable(StoreError("run store …: connection refused"))
