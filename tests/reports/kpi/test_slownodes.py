"""The slow node (:mod:`reports.kpi.slownodes`), worked out by hand: a recurring job 18% slower on
one node than on its three others is named, with the GPU-hours and dollars the slowdown cost;
a job only 5% slower, one whose runs spread as widely, one run alone and a failed run are not.
Through the report: the section's JSON and CSV rows and a team's part."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fakes import run_record

from reports import kpi as kpis
from reports.build import compute
from reports.kpi.ledger import bucket_hours
from reports.kpi.slownodes import _median_without, slow_nodes
from reports.render.exports import to_csv, to_dict
from reports.request import Request
from reports.sections.slownodes import sentence
from tracker.store import RunStore

W48 = datetime(2026, 11, 23, tzinfo=UTC)


def runs_of(
    job: str, by_host: dict[str, list[float]], *, team: str = "nlp", first: int = 0
) -> list:
    """One 2-hour single-GPU run of ``job`` per throughput (samples/s) on each host, every 3
    hours from 00:00 of 2026-W48's day ``first // 20`` (a job's runs within its day and the
    next)."""
    out = []
    n = first
    for host, speeds in by_host.items():
        for speed in speeds:
            out.append(
                run_record(
                    f"{job}-{1000 + n}",
                    W48 + timedelta(days=first // 20, hours=3 * (n - first)),
                    2,
                    name=f"{job}-{1000 + n}",
                    host=host,
                    team=team,
                    samples_per_s=speed,
                    nodes=1,
                )
            )
            n += 1
    return out


def fleet() -> list:
    # nightly-train: 1,000/s on n01-n03, 820/s on n07: 18% slower (noise 1.5%)
    nightly = runs_of(
        "nightly-train",
        {"n01": [1000, 1010], "n02": [990, 1005], "n03": [995, 1000], "n07": [820, 830, 810]},
    )
    # eval: 5% slower on n04, under the 10% floor
    evals = runs_of("eval", {"n01": [500, 500, 500], "n04": [475, 475]}, first=20)
    # sweep: 20% slower on n05, but its runs spread ±40% (noise 30%: 3 x 30% > 20%)
    sweep = runs_of("sweep", {"n01": [600, 1000, 1400], "n05": [800, 800]}, first=40)
    # once: one run on n06
    once = runs_of("once", {"n01": [100, 100, 100], "n06": [50]}, first=60)
    # a failed run counts for nothing: n08's two runs, one failed, leave one
    failed = runs_of("ft", {"n01": [300, 300, 300], "n08": [150, 150]}, team="vision", first=80)
    failed[-1] = dataclasses.replace(failed[-1], status="failed")
    return [*nightly, *evals, *sweep, *once, *failed]


def test_the_slow_node_is_named_with_what_it_cost() -> None:
    got = slow_nodes(kpis.runs_frame(fleet()))
    assert got[["job_key", "host"]].values.tolist() == [["nightly-train", "n07"]]
    r = got.iloc[0]
    assert (r["runs_on_node"], r["runs_elsewhere"], r["nodes_elsewhere"]) == (3, 6, 3)
    assert (r["throughput_node"], r["throughput_elsewhere"]) == (820.0, 1000.0)
    assert r["slowdown_pct"] == pytest.approx(18.0)
    # the job's spread: its nine runs' median is 995, |x - 995| 185, 175, 165, 5, 0, 5, 5, 10,
    # 15: median 10, x 1.4826, / the 1,000 elsewhere
    assert r["noise_pct"] == pytest.approx(100 * 1.4826 * 10 / 1000)
    # three 2-GPU-hour runs x 18% = 1.08 GPU-h, at the H100's $3.85
    assert (r["gpu_hours"], r["lost_gpu_hours"]) == (6.0, pytest.approx(1.08))
    assert r["lost_usd"] == pytest.approx(1.08 * 3.85)
    assert sentence(r) == (
        "nightly-train on n07 ran 18% slower than on its 3 other nodes (noise 1%): 1.1 GPU-h, "
        "$4.16 of its GPU-time was the machine, not the code"
    )


def test_tokens_where_a_job_counts_them_and_nothing_without_a_host() -> None:
    runs = [
        dataclasses.replace(r, samples_per_s=None, tokens_per_s=r.samples_per_s)
        for r in runs_of("lm", {"a": [1000, 1000, 1000], "b": [700, 700]})
    ]
    (row,) = slow_nodes(kpis.runs_frame(runs)).to_dict("records")
    assert (row["unit"], row["slowdown_pct"]) == ("tokens", pytest.approx(30.0))
    no_host = [dataclasses.replace(r, host="") for r in runs]
    assert slow_nodes(kpis.runs_frame(no_host)).empty
    assert slow_nodes(kpis.runs_frame([])).empty


def test_the_report_names_it_in_its_json_csv_and_team_part(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    # a week earlier (read for the trend): a node half as fast, not this week's to name
    earlier = [
        dataclasses.replace(
            r,
            started_at=r.started_at - timedelta(weeks=1),
            ended_at=r.ended_at - timedelta(weeks=1),
        )
        for r in runs_of("old", {"n01": [100, 100, 100], "n09": [50, 50]}, first=100)
    ]
    with RunStore(url) as store:
        for r in [*fleet(), *earlier]:
            store.upsert_run(r)
    assert all(W48 <= r.started_at < W48 + timedelta(days=7) for r in fleet())
    c = compute(url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 7, tzinfo=UTC))
    part = c.kpis.parts["slow_nodes"]
    d = to_dict(c.kpis, UTC)
    (row,) = d["slow_nodes"]
    assert (row["job_key"], row["host"], row["team"]) == ("nightly-train", "n07", "nlp")
    assert row["lost_usd"] == pytest.approx(1.08 * 3.85)
    csv = to_csv(d, c.kpis.runs, c.kpis.parts)
    assert ",slow_node,nightly-train@n07,slowdown_pct," in csv
    assert part.of_team("nlp").view() is not None and part.of_team("vision").view() is None
    assert isinstance(part.rows, pd.DataFrame)
    # a bucket of the week's ledger: each n07 run's 2 GPU-h x 18%, after its below-target
    # share (at 50%: 0.82 GPU-h of 2), the same $4.16 as the section's
    k = c.kpis
    assert k.headline.slow_node_gpu_hours == pytest.approx(1.08)
    assert k.headline.slow_node_usd == pytest.approx(1.08 * 3.85)
    assert d["ledger"]["slow_node"] == {
        "gpu_hours": pytest.approx(1.08),
        "usd": pytest.approx(4.158),
    }
    on = k.runs[k.runs["host"] == "n07"]
    assert on["slow_node_hours"].tolist() == [pytest.approx(0.36)] * 3
    b = bucket_hours(k.runs)
    assert (b.sum(axis=1) - k.runs["gpu_hours"]).abs().max() == pytest.approx(0.0, abs=1e-12)
    teams = k.by["team"].set_index("team")
    assert teams.loc["nlp", "slow_node_usd"] == pytest.approx(4.158)
    assert teams.loc["vision", "slow_node_usd"] == 0.0
    # the page, as the command writes it
    from reports.cli import main

    out = tmp_path / "out"
    week = ["--week", "2026-W48", "--format", "html", "--out", str(out)]
    assert main(["report", "--store", url, *week]) == 0
    page = (out / "2026-W48.html").read_text(encoding="utf-8")
    assert "Slow nodes: the machine, not the code" in page
    assert "nightly-train on n07 ran 18% slower than on its 3 other nodes" in page
    assert "820 vs 1,000 samples/s" in page
    # each of its runs to fix says the machine's share under its verdict: 2 GPU-h x 18%
    assert (
        "18% of this run&#39;s GPU-time and $1.39 were the machine (node n07 18% slower than its "
        "siblings), not your code"
    ) in page


def test_the_median_elsewhere_is_numpy_s_median_of_what_is_left() -> None:
    # ties, odd and even counts: each node's runs taken out of the job's sorted throughputs
    rng = np.random.default_rng(7)
    for _ in range(500):
        whole = np.sort(rng.integers(0, 6, size=int(rng.integers(3, 15))).astype(float))
        taken = np.sort(
            rng.choice(len(whole), size=int(rng.integers(1, len(whole))), replace=False)
        )
        assert _median_without(whole, whole[taken]) == np.median(np.delete(whole, taken))
