"""Any name a training script gives a run, team, project or user is text in the report: the
page's element structure is the same as with plain names (hypothesis)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import readers
from fakes import examples
from fakes import run_record as run
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_html import W48, week

from reports.render import html as report_html
from tracker.text import storable

HOSTILE = st.text(
    alphabet=st.sampled_from(list("<>&\"'`=/ \\:;(){}!-x1\u2028\x00\x1b")) | st.characters(),
    min_size=1,
    max_size=30,
)


def _page(name: str, team: str, project: str, user: str) -> readers.Page:
    # as the store keeps them (tracker.text.storable: a lone surrogate, which no UTF-8 holds
    # and pandas' Arrow text refuses, is U+FFFD): the report only reads runs from a store
    name, team, project, user = map(storable, (name, team, project, user))
    k = week(
        [
            run("a", W48, 10, util=90.0, name="plain", team="nlp", project="llm", user="ana"),
            run(
                "b",
                W48 + timedelta(days=1),
                2,
                gpus=4,
                util=10.0,
                name=name,
                team=team,
                project=project,
                user=user,
                verdict="input-bound",
                advice=name,
                links={"wandb": "https://wandb.ai/acme/x/runs/b", name: name},
            ),
        ]
    )
    return readers.parse_html(report_html.render_html(k, {}))


def _structure(page: readers.Page) -> list[tuple[str, tuple[str, ...]]]:
    return [(tag, tuple(sorted(attrs))) for tag, attrs in page.tags]


BASELINE = _structure(_page("name", "team", "proj", "user"))


@pytest.mark.slow  # 40 report pages rendered (hypothesis): ~5 s of CPU
@given(HOSTILE, HOSTILE, HOSTILE, HOSTILE)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_names_never_become_markup(name: str, team: str, project: str, user: str) -> None:
    # a name equal to the other run's would merge their breakdown rows (a structure of its own;
    # hypothesis draws the strings of this file's code too)
    assume(team != "nlp" and project != "llm" and user != "ana")
    page = _page(name, team, project, user)
    assert _structure(page) == BASELINE
    # no link that a name made: every href is one the report itself writes or the W&B URL
    for a in page.all("a"):
        assert not a.get("href", "").lower().lstrip().startswith(("javascript:", "data:"))
