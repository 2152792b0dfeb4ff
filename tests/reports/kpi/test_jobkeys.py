"""Recurring jobs (:mod:`reports.kpi.jobkeys`): a run's job key from what it recorded, its
workload or its name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.kpi.jobkeys import job_key, job_keys, normalized_name

W47 = datetime(2026, 11, 16, tzinfo=UTC)
W48 = W47 + timedelta(days=7)
NOW = W48 + timedelta(days=8)
H100 = 3.85


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("resnet-nightly-1123", "resnet-nightly"),
        ("llm-20261123-101500", "llm"),  # the tracker's default name: <project>-date-time
        ("eval_2026-11-23", "eval"),
        ("eval_2026-11-23T10:15:00Z", "eval"),
        ("vit-train-3f9e2c1a", "vit-train"),  # a hash
        ("cron-29123456-7f3a9c", "cron"),  # a number, then a hash
        ("resnet-50", "resnet-50"),  # a model, not a run number
        ("bert-sweep-17", "bert-sweep-17"),  # a trial is its own work
        ("llama-8b-sft", "llama-8b-sft"),
        ("deadbeef-feed", "deadbeef-feed"),  # hex words with no digit are words
        ("2026-11-23", "2026-11-23"),  # nothing would be left
        ("1123", "1123"),
        ("  two   words-1123 ", "two words"),
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
    # a long name is looked at up to 200 characters, at once
    assert job_key("x-1" * 5000, {}) == ("x-1" * 5000)[:200]


@settings(max_examples=examples(300), deadline=None)
@given(
    names=st.lists(
        st.one_of(st.none(), st.text(alphabet="-_ .:/0123456789abcdefTtZxy\t", max_size=40)),
        min_size=1,
        max_size=20,
    ),
    kinds=st.lists(st.sampled_from(["", "given", "workload", "blank"]), min_size=20, max_size=20),
)
def test_many_at_once_are_each_one_alone(names: list[str | None], kinds: list[str]) -> None:
    links: list[object] = []
    for name, kind in zip(names, kinds, strict=False):
        if kind == "given":
            links.append({"job_key": f" k {name} "})
        elif kind == "workload":
            links.append({"kubernetes_workload": f"ns/Job/{name}"})
        elif kind == "blank":
            links.append({"job_key": "  "})
        else:
            links.append(None)
    many = job_keys(pd.Series(names, dtype=object), pd.Series(links, dtype=object))
    assert list(many) == [job_key(n, lk) for n, lk in zip(names, links, strict=True)]
