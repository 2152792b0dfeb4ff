"""Recurring jobs before and after a change (:mod:`reports.kpi.savings`), worked out by hand:
a nightly job of 6 runs before a mark and 6 after, in a real store, through the report's own
read; the interval (Welch's t on the runs' log cost per unit) against a reference computed here
with numpy; a change found in the runs without a mark; too few runs; `gpu-kpi mark` through the
real CLI."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from clirun import gpu_kpi
from fakes import run_record

from reports.build import build, compute
from reports.data.marks import add_mark, read_marks
from reports.kpi import savings
from reports.kpi.intervals import t_quantile
from reports.request import Request
from reports.service.prom import kpi_samples
from tracker.store import RunStore

W44 = datetime(2026, 10, 26, tzinfo=UTC)
W45 = datetime(2026, 11, 2, tzinfo=UTC)  # the mark: Monday 00:00
NOW = datetime(2026, 11, 12, 9, tzinfo=UTC)
PRICE = 2.0  # $/GPU-hour the runs ran at
BEFORE_H = [10, 11, 9, 10, 12, 8]  # GPU-hours of each run before: $20, $22, $18, $20, $24, $16
AFTER_H = [6, 7, 5, 6, 6, 6]  # after: $12, $14, $10, $12, $12, $12
SAMPLES = 100_000  # each run's samples: 100 × 1k


def nightly(store_url: str, after: list[float] = AFTER_H, key: str = "resnet-nightly") -> None:
    """KEY-NNNN: a run a day at 01:00 from Tuesday 27 October, 6 before the mark (input-bound)
    and ``after`` from Monday 2 November (healthy); a one-off run beside."""
    with RunStore(store_url) as s:
        days = [(W44 + timedelta(days=1 + i), h, "input-bound") for i, h in enumerate(BEFORE_H)]
        days += [(W45 + timedelta(days=i), h, "healthy") for i, h in enumerate(after)]
        for n, (day, hours, verdict) in enumerate(days):
            s.upsert_run(
                run_record(
                    f"r{n}",
                    day + timedelta(hours=1),
                    hours,
                    name=f"{key}-{1100 + n}",
                    team="vision",
                    samples=SAMPLES,
                    verdict=verdict,
                    price=PRICE,
                )
            )
        s.upsert_run(run_record("once", W45 + timedelta(days=2), 3, name="notebook", team="nlp"))


def request() -> Request:
    return Request(week="2026-W45", tz=UTC)


def test_six_runs_before_a_mark_and_six_after_by_hand(store_url: str) -> None:
    nightly(store_url)
    with RunStore(store_url) as s:
        add_mark(s, "resnet-nightly", "loader: 8 workers", at=W45, now=NOW)
    k = compute(store_url, request(), now=NOW).kpis
    (c,) = k.parts["savings"].changes
    assert (c.job_key, c.team, c.how, c.note, c.unit) == (
        "resnet-nightly",
        "vision",
        "mark",
        "loader: 8 workers",
        "1k samples",
    )
    assert (c.runs_before, c.runs_after) == (6, 6)
    # before: $120 for 600k samples, $0.20 per 1k; after: $72 for 600k, $0.12 per 1k
    assert c.usd_per_unit_before == pytest.approx(120 / 600)
    assert c.usd_per_unit_after == pytest.approx(72 / 600)
    assert c.change_pct == pytest.approx(-40.0)
    # the 600k samples since would have cost $120 at the old rate: $48 saved, over the one
    # week from the mark to the report week's end
    assert c.usd_to_date == pytest.approx(48.0) and c.weeks_since == pytest.approx(1.0)
    assert c.usd_per_week == pytest.approx(48.0)
    assert (c.verdict_before, c.verdict_after) == ("input-bound", "healthy")
    # the interval: Welch's t on the runs' log $ per 1k samples, worked out here
    lb = np.log(PRICE * np.array(BEFORE_H, float) / (SAMPLES / 1000))
    la = np.log(PRICE * np.array(AFTER_H, float) / (SAMPLES / 1000))
    qb, qa = lb.var(ddof=1) / 6, la.var(ddof=1) / 6
    df = (qb + qa) ** 2 / (qb**2 / 5 + qa**2 / 5)
    assert df == pytest.approx(9.236, abs=1e-3)  # unrounded: between 5 and 10
    d, h = la.mean() - lb.mean(), t_quantile(0.975, df) * np.sqrt(qb + qa)
    low, high = 100 * np.expm1(d - h), 100 * np.expm1(d + h)
    assert (c.low_pct, c.high_pct) == (pytest.approx(low), pytest.approx(high))
    assert (round(low, 1), round(high, 1)) == (-48.9, -29.0)
    # it covers the geometric means' change, −39.8%, beside the ratio of sums' −40%
    assert low < 100 * np.expm1(d) < high and 100 * np.expm1(d) == pytest.approx(-39.77, abs=0.01)
    assert savings.sentence(c) == (
        "resnet-nightly: input-bound → healthy since 2026-W45 (mark: loader: 8 workers); "
        "$ per 1k samples −40% (95% interval −49…−29%); "
        "$48.00/week saved, $48.00 to date"
    )
    assert savings.ledger_by_team(k.parts["savings"].changes) == [
        ("vision", pytest.approx(48.0), pytest.approx(48.0), 1)
    ]
    # the recurring job: 12 runs over two weeks, $192 for 1,200k samples; the one-off is none
    (job,) = k.parts["savings"].recurring.to_dict("records")
    assert (job["job_key"], job["runs"], job["weeks"], job["runs_this_week"]) == (
        "resnet-nightly",
        12,
        2,
        6,
    )
    assert job["spend_usd"] == pytest.approx(192.0)
    assert job["usd_per_unit"] == pytest.approx(192 / 1200)
    assert job["first_usd_per_unit"] == pytest.approx(0.20)
    assert job["last_usd_per_unit"] == pytest.approx(0.12)
    assert job["verdict"] == "healthy"


def test_a_change_is_found_in_the_runs_without_a_mark(store_url: str) -> None:
    nightly(store_url)
    k = compute(store_url, request(), now=NOW).kpis
    (c,) = k.parts["savings"].changes
    # the split that best separates the runs' cost per unit: the first run after the fix
    assert (c.how, c.note, c.at) == ("change point", "", W45 + timedelta(hours=1))
    assert c.change_pct == pytest.approx(-40.0) and c.high_pct is not None and c.high_pct < 0
    # from the first run after to the report's end: 1 week less an hour, counted as one
    assert c.usd_to_date == pytest.approx(48.0) and c.usd_per_week == pytest.approx(48.0)
    assert "change point in its runs" in savings.sentence(c)


def test_runs_of_one_cost_show_no_change_point(store_url: str) -> None:
    nightly(store_url, after=[10, 11, 9, 10, 12, 8])  # the same costs again
    assert compute(store_url, request(), now=NOW).kpis.parts["savings"].changes == ()


def test_too_few_runs_after_say_so_instead_of_an_interval(store_url: str) -> None:
    nightly(store_url, after=[6, 6])
    with RunStore(store_url) as s:
        add_mark(s, "resnet-nightly", "loader: 8 workers", at=W45, now=NOW)
    (c,) = compute(store_url, request(), now=NOW).kpis.parts["savings"].changes
    assert c.too_few and c.low_pct is None and c.high_pct is None
    assert c.usd_to_date == pytest.approx(0.2 * 200 - 24)  # 200k samples for $24 instead of $40
    assert "too few runs for an interval (6 before, 2 after)" in savings.sentence(c)


def test_the_mark_command_keeps_a_mark_and_refuses_bad_ones(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("r", W44, 1))
    p = gpu_kpi("mark", "resnet-nightly", "loader: 8 workers", "--at", "2026-11-02", "--store", url)
    assert p.returncode == 0, p.stderr
    assert "marked 'resnet-nightly' from 2026-11-02 00:00 UTC: loader: 8 workers" in p.stdout
    with RunStore(url) as s:
        (m,) = read_marks(s)
    assert (m.job_key, m.at, m.note) == ("resnet-nightly", W45, "loader: 8 workers")
    listed = gpu_kpi("mark", "--list", "--store", url)
    assert listed.stdout.strip() == "2026-11-02 00:00 UTC  resnet-nightly  loader: 8 workers"
    for args, said in [
        (("resnet-nightly",), "needs a job key and a note"),
        (("k", "n", "--at", "next tuesday"), "--at: expected YYYY-MM-DD"),
        (("k", "n", "--at", "2999-01-01"), "in the future"),
        (("k", "x" * 201), "at most 200"),
        (("k", "   "), "note is empty"),
    ]:
        bad = gpu_kpi("mark", *args, "--store", url)
        assert bad.returncode == 2 and said in bad.stderr, (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1
    with RunStore(url) as s:
        assert len(read_marks(s)) == 1


def test_a_mark_of_a_key_no_run_has_warns_and_a_mark_can_be_deleted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    now = datetime.now(UTC)
    with RunStore(url) as s:  # runs of the last weeks: keys "resnet-nightly", "bert-sweep-17"
        s.upsert_run(run_record("a", now - timedelta(days=3), 1, name="resnet-nightly-0412"))
        s.upsert_run(run_record("b", now - timedelta(days=2), 1, name="bert-sweep-17"))
    typo = gpu_kpi("mark", "resnet-nightley", "loader", "--store", url)
    assert typo.returncode == 0 and "marked 'resnet-nightley'" in typo.stdout, typo.stderr
    (line,) = typo.stderr.strip().splitlines()
    assert line.startswith("gpu-kpi: warning: no run of the last 26 weeks has the job key")
    assert line.endswith("the keys: bert-sweep-17, resnet-nightly")
    good = gpu_kpi("mark", "resnet-nightly", "loader", "--store", url)
    assert good.returncode == 0 and good.stderr == ""
    # the typo undone; the key's other marks kept
    gone = gpu_kpi("mark", "--delete", "resnet-nightley", "--store", url)
    assert gone.returncode == 0 and "deleted 1 mark(s) of 'resnet-nightley'" in gone.stdout
    again = gpu_kpi("mark", "--delete", "resnet-nightley", "--store", url)
    assert again.returncode == 2 and "no mark of 'resnet-nightley' to delete" in again.stderr
    with RunStore(url) as s:
        assert [m.job_key for m in read_marks(s)] == ["resnet-nightly"]
    # one of a key's marks: by the minute --list shows
    gpu_kpi("mark", "resnet-nightly", "second", "--at", "2026-11-02", "--store", url)
    one = gpu_kpi("mark", "--delete", "resnet-nightly", "--at", "2026-11-02", "--store", url)
    assert "deleted 1 mark(s)" in one.stdout, one.stderr
    with RunStore(url) as s:
        assert [m.note for m in read_marks(s)] == ["loader"]


@pytest.mark.usefixtures("blank_charts")  # the pages' text, not their charts
def test_the_ledger_in_every_output_escaped_and_neutralized(tmp_path: Path) -> None:
    """A key a training script named: escaped in the HTML, neutralized in the CSV, as given in
    the JSON and /metrics; the figures the same everywhere."""
    url = f"sqlite:///{tmp_path}/runs.db"
    key = "=HYPERLINK(1)<img src=x onerror=alert(1)>"
    nightly(url, key=key)
    with RunStore(url) as s:
        add_mark(s, key, "<b>loader</b>: 8 workers", at=W45, now=NOW)
    out = tmp_path / "out"
    build(url, Request(week="2026-W45", tz=UTC, formats=("html", "json", "csv")), out, now=NOW)
    html = (out / "2026-W45.html").read_text()
    assert "<img src=x" not in html and "<b>loader</b>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "mark: &lt;b&gt;loader&lt;/b&gt;: 8 workers" in html
    assert 'id="savings"' in html and 'id="recurring"' in html
    assert "What fixes saved:</strong> $48.00 a week, $48.00 to date, net of 1 change" in html
    d = json.loads((out / "2026-W45.json").read_text())
    (saving,) = d["savings"]
    assert saving["job_key"] == key and saving["note"] == "<b>loader</b>: 8 workers"
    assert saving["usd_to_date"] == pytest.approx(48.0) and saving["week"] == "2026-W45"
    assert saving["at"] == "2026-11-02T00:00:00+00:00"
    assert d["savings_by_team"] == [
        {
            "team": "vision",
            "usd_per_week": pytest.approx(48.0),
            "usd_to_date": pytest.approx(48.0),
            "changes": 1,
        }
    ]
    (job,) = d["recurring_jobs"]
    assert (job["job_key"], job["runs"], job["first_week"], job["last_week"]) == (
        key,
        12,
        "2026-W44",
        "2026-W45",
    )
    rows = list(csv.reader((out / "2026-W45.csv").open(newline="")))
    saved = [r for r in rows if r[2] == "saving" and r[4] == "usd_to_date"]
    assert len(saved) == 1 and float(saved[0][5]) == pytest.approx(48.0)
    assert saved[0][3] == f"'{key}@2026-11-02T00:00:00+00:00"  # a formula no more
    assert all(not r[3].startswith("=") for r in rows)
    team = {r[4]: r[5] for r in rows if r[2] == "saving_team"}
    assert float(team["usd_per_week"]) == pytest.approx(48.0)
    k = compute(url, Request(week="2026-W45", tz=UTC), now=NOW).kpis
    s = kpi_samples(k)
    ((labels, value),) = s["gpu_kpi_savings_to_date_usd"]
    assert labels == ("2026-W45", "util", "vision") and value == pytest.approx(48.0)
    ((labels, value),) = s["gpu_kpi_fix_savings_usd_per_week"]
    assert labels == ("2026-W45", "util", "vision", key, "2026-11-02T00:00Z", "mark")
    assert value == pytest.approx(48.0)


def test_two_marks_add_up_and_a_later_one_keeps_the_earlier_ones_saving(store_url: str) -> None:
    """Marks on Monday 2 and Thursday 5 November: the first rate $0.20 per 1k samples (6 runs),
    then $0.12 (Monday to Wednesday: $12, $14, $10 for 300k), then $0.12 ($12, $12, $12). The
    first change saves $0.08 on all 600k samples since it, $48; the second nothing; together
    what the 600k would have cost at $0.20 less their $72."""
    nightly(store_url)
    thursday = W45 + timedelta(days=3)
    with RunStore(store_url) as s:
        add_mark(s, "resnet-nightly", "loader: 8 workers", at=W45, now=NOW)
        add_mark(s, "resnet-nightly", "bigger batch", at=thursday, now=NOW)
    by_note = {
        c.note: c for c in compute(store_url, request(), now=NOW).kpis.parts["savings"].changes
    }
    first, second = by_note["loader: 8 workers"], by_note["bigger batch"]
    assert (first.runs_before, first.runs_after, second.runs_before, second.runs_after) == (
        6,
        3,
        3,
        3,
    )
    assert first.usd_per_unit_after == pytest.approx(36 / 300)
    assert first.usd_to_date == pytest.approx((0.20 - 0.12) * 600)
    assert second.usd_to_date == 0.0 and second.change_pct == pytest.approx(0.0)
    assert first.usd_to_date + second.usd_to_date == pytest.approx(0.20 * 600 - 72)
    assert "0% (" in savings.sentence(second) and "$0.00/week saved" in savings.sentence(second)


def test_a_mark_that_measures_nothing_leaves_the_search_on(store_url: str) -> None:
    nightly(store_url)
    with RunStore(store_url) as s:  # before every run: no run before it
        add_mark(s, "resnet-nightly", "old fix", at=W44 - timedelta(days=30), now=NOW)
    (c,) = compute(store_url, request(), now=NOW).kpis.parts["savings"].changes
    assert (c.how, c.note, c.change_pct) == ("change point", "", pytest.approx(-40.0))


def test_a_run_that_counted_nothing_is_left_out_of_the_rate_not_the_unit(
    store_url: str,
) -> None:
    """A seventh run after the fix crashed before counting samples (and one cost nothing):
    the job is still priced per 1k samples, on the runs that counted them."""
    nightly(store_url)
    with RunStore(store_url) as s:
        s.upsert_run(
            run_record(
                "crashed", W45 + timedelta(days=6), 1, name="resnet-nightly-1199", price=PRICE
            )
        )
        s.upsert_run(
            run_record(
                "free", W45 + timedelta(days=6, hours=3), 0, name="resnet-nightly-1198", samples=5
            )
        )
        add_mark(s, "resnet-nightly", "loader: 8 workers", at=W45, now=NOW)
    (c,) = compute(store_url, request(), now=NOW).kpis.parts["savings"].changes
    assert (c.unit, c.runs_after) == ("1k samples", 6)
    assert c.usd_to_date == pytest.approx(48.0) and c.low_pct is not None


def test_the_weeks_before_the_runs_read_are_read_only_where_a_run_may_lie(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs before those the report read are read only where the store holds a run that
    started before them, or one whose start is no time (the read names it): a store of this
    week's runs alone reads no earlier week, and its recurring jobs are the same."""
    import sqlalchemy as sa

    from reports import gputime
    from reports.data.scans import SampleScans
    from reports.sections.savings import recurring_of_weeks

    with RunStore(store_url) as s:
        for d in range(3):  # this week's runs alone, a nightly of 2 GPU-hours
            s.upsert_run(
                run_record(f"n{d}", W45 + timedelta(days=d), 2, name=f"nightly-{1001 + d}")
            )
    reads: list[datetime | None] = []
    read = gputime.usable_runs

    def counted(scans: SampleScans, **kw: Any) -> Any:
        reads.append(kw.get("until"))
        return read(scans, **kw)

    monkeypatch.setattr(gputime, "usable_runs", counted)
    with RunStore(store_url) as s:
        scans = SampleScans(s)
        assert not scans.any_started_before(W45)
        assert scans.any_started_before(W45 + timedelta(minutes=1))
        runs, _ = read(scans, since=W45, until=W45 + timedelta(weeks=1))
        alone, _ = recurring_of_weeks(s, request(), W45, now=NOW, runs=runs, runs_since=W45)
        assert reads == []  # nothing before W45 to read
        whole, _ = recurring_of_weeks(s, request(), W45, now=NOW)
        assert len(reads) == 1
    pd.testing.assert_frame_equal(alone, whole)
    (job,) = whole.to_dict("records")
    assert (job["job_key"], job["runs"], job["gpu_hours"]) == ("nightly", 3, pytest.approx(6.0))
    if not store_url.startswith("sqlite"):
        return  # PostgreSQL's starts are always times
    # a run whose start is no time may lie anywhere: the earlier weeks are read (where it is
    # left out, as in every read)
    with RunStore(store_url) as s:
        s.transaction(
            lambda conn: conn.execute(
                sa.text("UPDATE runs SET started_at = '2026-11-03 garbage' WHERE id = 'n1'")
            ),
            write=True,
        )
    reads.clear()
    with RunStore(store_url) as s:
        assert SampleScans(s).any_started_before(W45)
        recurring_of_weeks(s, request(), W45, now=NOW, runs=runs, runs_since=W45)
    assert reads == [W45]


def test_the_weeks_runs_read_once_give_the_recurring_jobs_of_26_weeks(store_url: str) -> None:
    """The report hands the savings section the runs it read (the trend's 12 weeks, or the one
    week when the earlier ones are kept): the section reads only the runs before them, and a
    run reaching across the edge counts once: the same table as reading all 26 weeks."""
    from reports.sections.savings import recurring_of_weeks

    first = W45 - timedelta(weeks=savings.HISTORY_WEEKS - 1)
    edge = W45 - timedelta(weeks=11)  # the trend's first week
    with RunStore(store_url) as s:
        for w in range(savings.HISTORY_WEEKS):  # a run each Tuesday, 2 GPU-hours
            at = first + timedelta(weeks=w, days=1)
            s.upsert_run(run_record(f"w{w}", at, 2, name=f"nightly-{1000 + w}", team="vision"))
        # Sunday evening before the edge to Tuesday: started before the trend, ends in it
        s.upsert_run(
            run_record("across", edge - timedelta(hours=4), 50, name="nightly-1999", team="vision")
        )
    with RunStore(store_url) as s:
        whole, _ = recurring_of_weeks(s, request(), W45, now=NOW)
    (job,) = whole.to_dict("records")
    assert (job["job_key"], job["runs"], job["weeks"]) == ("nightly", 27, 26)
    assert job["gpu_hours"] == pytest.approx(26 * 2 + 50)
    for _ in range(2):  # 12 weeks read, then the earlier 11 kept and the week alone read
        k = compute(store_url, request(), now=NOW).kpis
        pd.testing.assert_frame_equal(k.parts["savings"].recurring, whole)
