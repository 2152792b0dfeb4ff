"""Which runs the report cannot use, and the sentence that says so."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest
from fakes import run_record

from reports import kpi as kpis
from reports.kpi.checks import BadSamples, ExcludedRun, Skipped, run_problem, usable_runs

W48 = datetime(2026, 11, 23, tzinfo=UTC)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, None),
        ({"util": None, "price": None}, None),  # unknown is not wrong
        ({"util": 0.0}, None),
        ({"util": 100.0}, None),
        ({"util": 100.5}, "util_pct out of 0–100"),
        ({"sm_active_pct": -0.1}, "sm_active_pct out of 0–100"),
        ({"price": float("nan")}, "non-finite price_per_gpu_hour"),  # PostgreSQL keeps NaN
        ({"price": float("inf")}, "non-finite price_per_gpu_hour"),
        ({"price": -1.0}, "negative price_per_gpu_hour"),
        ({"util": "abc"}, "text in util_pct"),
        ({"tokens": b"\x00"}, "unreadable tokens"),
        ({"mfu": float("-inf")}, "non-finite mfu"),
        ({"mem_peak_gib": -2.0}, "negative mem_peak_gib"),
        (
            {"energy_kwh": -2.0},
            "negative energy_kwh",
        ),  # CO2e reads it: a negative one would subtract
        ({"mem_peak_gib": 1e300}, "mem_peak_gib out of range"),  # finite, but sums reach inf
        ({"price": 1e19}, "price_per_gpu_hour out of range"),
        ({"tokens": 10**400}, "tokens out of range"),  # no float holds it
        ({"tokens": 3 * 10**13}, None),  # among the biggest runs trained
        ({"name": b"exp-42"}, None),
        ({"team": bytearray(b"vision")}, None),  # decoded, counted
        ({"verdict": None, "model": None}, None),  # text that may be unknown
        ({"name": 42}, "name is not text"),
        ({"team": None}, "team is not text"),
        ({"advice": ["a"]}, "advice is not text"),
    ],
)
def test_run_problem(changes: dict[str, object], problem: str | None) -> None:
    assert run_problem(run_record("r", W48, 1, **changes)) == problem  # type: ignore[arg-type]


def test_the_first_wrong_figure_is_the_reason_and_good_runs_keep_their_order() -> None:
    runs = [
        run_record("a", W48, 1),
        run_record("x", W48, 1, price=float("inf"), util="abc"),
        run_record("b", W48, 2),
    ]
    good, excluded = usable_runs(runs)  # type: ignore[arg-type]
    assert [r.id for r in good] == ["a", "b"]
    assert excluded == [ExcludedRun(run_id="x", name="x", reason="non-finite price_per_gpu_hour")]


def test_text_fields_stored_as_bytes_are_decoded_and_the_run_kept() -> None:
    """The store gives bytes for a BLOB in a TEXT column: the run counts with its text
    decoded (UTF-8, a bad byte replaced); a run whose id is bytes is named by its decoded id."""
    runs = [
        run_record(
            "a",
            W48,
            1,
            name=b"exp-42\n",
            team=b"vis\xffion",
            model=memoryview(b"H100"),
            advice=b"ok",
        ),
        run_record("b", W48, 1).replace(id=b"b\xff", name=b"n"),
    ]  # the key: never guessed
    good, excluded = usable_runs(runs)
    assert [(r.id, r.name, r.team, r.gpu_model, r.advice) for r in good] == [
        ("a", "exp-42\n", "vis\ufffdion", "H100", "ok")
    ]
    assert excluded == [ExcludedRun(run_id="b\ufffd", name="n", reason="id is not text")]
    assert kpis.runs_frame(good)["name"].tolist() == ["exp-42\n"]


def test_summary_and_log_line() -> None:
    s = Skipped(
        runs=(
            ExcludedRun(run_id="1", name="a\nb", reason="non-finite price_per_gpu_hour"),
            ExcludedRun(run_id="2", name="c", reason="text in util_pct"),
        ),
        samples=(
            BadSamples(run_id="3", name="d", rows=1, reason="unusable covered_s: left out"),
            BadSamples(run_id="3", name="d", rows=2, reason="r"),
        ),
    )
    assert s.sample_rows == 3 and bool(s) and not Skipped()
    assert s.summary() == (
        "2 runs excluded: non-finite price_per_gpu_hour (1), text in util_pct "
        "(1); 3 sample rows of 1 run left out or read as unknown"
    )
    assert s.log_line() == (
        s.summary() + " — a b (1): non-finite price_per_gpu_hour; "
        "c (2): text in util_pct; d (3): 1 sample row, unusable covered_s: "
        "left out; d (3): 2 sample rows, r"
    )
    many = Skipped(
        runs=tuple(ExcludedRun(run_id=str(i), name=f"n{i}", reason="x") for i in range(25))
    )
    assert many.log_line().endswith("n19 (19): x; and 5 more")


def test_bad_samples_per_run_of_the_report() -> None:
    totals = pd.DataFrame(
        {"run_id": ["s", "s", "t", "ghost"], "dropped": [1, 2, 0, 9], "bad_values": [0, 4, 0, 9]}
    )
    got = kpis.bad_samples(
        totals,
        pd.DataFrame({"id": ["s", "t"], "name": ["sampled", "clean"]}),
        value="sm_active_pct",
    )
    assert got == [
        BadSamples(run_id="s", name="sampled", rows=3, reason="unusable covered_s: left out"),
        BadSamples(
            run_id="s", name="sampled", rows=4, reason="unusable sm_active_pct: read as unknown"
        ),
    ]


def test_bad_samples_name_rows_whose_minute_is_no_time() -> None:
    totals = pd.DataFrame(
        {"run_id": ["s", "s"], "dropped": [0, 1], "bad_values": [0, 0], "bad_minutes": [2, 0]}
    )
    got = kpis.bad_samples(
        totals, pd.DataFrame({"id": ["s"], "name": ["sampled"]}), value="util_pct"
    )
    assert got == [
        BadSamples(run_id="s", name="sampled", rows=1, reason="unusable covered_s: left out"),
        BadSamples(run_id="s", name="sampled", rows=2, reason="unreadable minute: left out"),
    ]


def test_the_frame_builder_reads_bad_values_as_unknown_and_drops_unusable_rows() -> None:
    """The stretches the store hands the builder hold the raw values: they must agree with
    the store's totals (text, inf, out of range: unknown; a minute or covered_s that is no
    value: the row is left out)."""
    builder = kpis.SampleFrameBuilder(("run_id", "minute", "gpu", "covered_s", "util_pct"))
    builder(
        [
            ("r", "2026-11-23 00:00:00.000000", "g", 60.0, 50.0),
            ("r", "2026-11-23 00:01:00.000000", "g", 60.0, "abc"),
            ("r", "2026-11-23 00:02:00.000000", "g", 60.0, float("inf")),
            ("r", "2026-11-23 00:03:00.000000", "g", 60.0, 100.5),
            ("r", "2026-11-23 garbage", "g", 60.0, 10.0),
            ("r", "2026-11-23 00:05:00.000000", "g", "x", 10.0),
        ]
    )
    f = builder.frame()
    assert f["minute"].dt.minute.tolist() == [0, 1, 2, 3]
    assert f["util_pct"].tolist()[0] == 50.0 and f["util_pct"].iloc[1:].isna().all()
