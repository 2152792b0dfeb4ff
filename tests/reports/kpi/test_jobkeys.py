"""Recurring jobs (:mod:`reports.kpi.jobkeys`): a run's job key from what it recorded, its
workload or its name, and a key's runs over the weeks with its cost per unit of work, by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fakes import run_record as run

from reports import kpi as kpis
from reports.kpi.jobkeys import job_key, normalized_name

W47 = datetime(2026, 11, 16, tzinfo=UTC)
W48 = W47 + timedelta(days=7)
NOW = W48 + timedelta(days=8)
H100 = 3.85


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("resnet-nightly-1123", "resnet-nightly"),
        ("bert-sweep-17", "bert-sweep"),
        ("llm-20261123-101500", "llm"),  # the tracker's default name: <project>-date-time
        ("eval_2026-11-23", "eval"),
        ("vit-train-3f9e2c1a", "vit-train"),  # a hash
        ("llama-8b-sft", "llama-8b-sft"),  # 8b is no run number
        ("gpt-v2", "gpt-v2"),
        ("deadbeef-feed", "deadbeef-feed"),  # hex words with no digit are words
        ("1123", "1123"),  # nothing would be left
        ("  two   words-7 ", "two words"),
    ],
)
def test_a_runs_own_suffixes_are_dropped(name: str, want: str) -> None:
    assert normalized_name(name) == want


def test_the_key_a_run_recorded_wins_then_its_workload_then_its_name() -> None:
    assert job_key("resnet-nightly-1123", {"job_key": " nightly  resnet "}) == "nightly resnet"
    # a CronJob's Jobs are one job: the run number of the workload's name dropped
    workload = {"kubernetes_workload": "ml/Job/resnet-nightly-29123456"}
    assert job_key("dcgm-node7", workload) == "ml/Job/resnet-nightly"
    assert job_key("resnet-nightly-1123", {"slurm": "c/7"}) == "resnet-nightly"
    assert job_key(None, None) == ""


def test_a_recurring_jobs_runs_and_cost_per_unit_by_hand() -> None:
    """resnet-nightly ran in W47 (2 GPU-h, 100k samples) and W48 (2 GPU-h, 250k samples): its
    $ per 1k samples fell from 2 × 3.85 / 100 to 2 × 3.85 / 250; a one-off run is no recurring
    job, and a key's runs of one week are not either."""
    runs = [
        run("a", W47 + timedelta(days=1), 2.0, name="resnet-nightly-1117", samples=100_000),
        run("b", W48 + timedelta(days=1), 1.0, gpus=2, name="resnet-nightly-1124", samples=250_000),
        run("c", W48 + timedelta(days=2), 3.0, name="one-off"),
        run("d", W48 + timedelta(days=2), 1.0, name="sweep-1", util=20.0),
        run("e", W48 + timedelta(days=3), 1.0, name="sweep-2", util=40.0),
    ]
    k = kpis.week_kpis(kpis.runs_frame(runs), kpis.samples_frame([]), W48, tz=UTC, now=NOW)
    rec = k.recurring.set_index("job_key")
    assert list(rec.index) == ["resnet-nightly"]
    r = rec.loc["resnet-nightly"]
    assert (r["runs"], r["weeks"], r["runs_this_week"]) == (2, 2, 1)
    assert r["spend_usd"] == pytest.approx(4 * H100) and r["gpu_hours"] == pytest.approx(4.0)
    assert r["unit"] == "1k samples"
    assert r["first_usd_per_unit"] == pytest.approx(2 * H100 / 100)
    assert r["last_usd_per_unit"] == pytest.approx(2 * H100 / 250)
    assert r["usd_per_1k_samples"] == pytest.approx(4 * H100 / 350)
    assert r["utilization_pct"] == pytest.approx(50.0)
    # the report's table and the JSON
    from reports.render.exports import to_dict
    from reports.render.html import report_context

    (row,) = report_context(k, {}, title="t", report_url=None, generated_at=None)["recurring"]
    assert row["key"] == "resnet-nightly" and "1 this week" in row["runs"]
    assert row["unit"] == "$0.0770 → $0.0308 (▼ 60.0%) per 1k samples"
    (doc,) = to_dict(k, UTC)["recurring_jobs"]
    assert (doc["job_key"], doc["runs"], doc["unit"]) == ("resnet-nightly", 2, "1k samples")
