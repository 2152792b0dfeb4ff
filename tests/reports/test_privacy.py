"""A per-user or per-team output is built from that owner's rows only: another user's or team's
run, job, budget and left-out sample rows are planted in the same week, and no byte of them
reaches the engineer's mail and chat card, or the team's page, email, JSON, CSV and card."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fakes import minutes, run_record, slurm_job

from reports.build import Computed, compute, render
from reports.kpi.budgets import Budget
from reports.render.chat import chat_card
from reports.render.email import build_runs_email
from reports.request import Request
from tracker.store import RunStore

W48 = datetime(2026, 11, 23, tzinfo=UTC)
NOW = datetime(2026, 12, 2, tzinfo=UTC)
BUDGETS = (Budget(team="nlp", usd_per_week=100.0), Budget(team="zz-vision", usd_per_week=1.0))
# what no output of jlee's, nor of team nlp's, may hold
THEIRS = ("zz-vision", "ben-secret", "secret-ben-run", "proj-ben", "ben-job")
# nlp's other engineer: on the team's outputs, never on jlee's own
DANA = "dana-secret"


def _request() -> Request:
    return Request(
        week="2026-W48", tz=UTC, formats=("html", "email", "json", "csv"), budgets=BUDGETS
    )


@pytest.fixture(scope="module")
def computed(tmp_path_factory: pytest.TempPathFactory) -> Computed:
    from reports.data.allocations import write_allocations

    url = f"sqlite:///{tmp_path_factory.mktemp('privacy')}/runs.db"
    tue = W48 + timedelta(days=1, hours=9)
    runs = [
        run_record("jlee-a", tue, 3, gpus=2, util=20.0, team="nlp", user="jlee"),
        run_record("dana-a", tue, 3, gpus=2, util=15.0, team="nlp", user=DANA, name="dana-secret"),
        run_record(
            "secret-ben-run",
            tue,
            3,
            gpus=2,
            util=10.0,
            team="zz-vision",
            user="ben-secret",
            project="proj-ben",
        ),
    ]
    with RunStore(url) as s:
        for r in runs:
            s.upsert_run(r)
        # ben's run has one minute out of range: left out, and named in the fleet's report
        s.upsert_samples(
            minutes("secret-ben-run", tue, 179, 10.0) + minutes("secret-ben-run", tue, 1, 150.0)
        )
        write_allocations(
            s,
            [
                slurm_job(
                    "99",
                    4,
                    tue + timedelta(hours=4),
                    tue + timedelta(hours=6),
                    ("node-ben",),
                    cluster="c1",
                    name="ben-job",
                    user="ben-secret",
                    account="zz-vision",
                    team="zz-vision",
                )
            ],
        )
    return compute(url, _request(), now=NOW)


def _texts(files: dict[str, object]) -> dict[str, str]:
    out = {k: bytes(v).decode() for k, v in files.items() if k != "eml"}  # type: ignore[call-overload]
    if "eml" in files:
        msg = email.message_from_bytes(bytes(files["eml"]), policy=email.policy.default)  # type: ignore[call-overload]
        out["subject"] = str(msg["Subject"])
        for part in msg.walk():
            if part.get_content_type() in ("text/plain", "text/html"):
                out[part.get_content_type()] = part.get_content()
    return out


def test_the_fleets_report_holds_everyone(computed: Computed) -> None:
    # the planted rows are there to leak: the fleet's page names each of them
    page = bytes(render(computed.kpis, _request(), images={})["html"]).decode()
    for s in (*THEIRS, DANA, "jlee"):
        assert s in page, s


def test_an_engineers_mail_and_card_hold_their_runs_alone(computed: Computed) -> None:
    msg = build_runs_email(computed.kpis, "jlee", tz=UTC, now=NOW)
    assert msg is not None
    texts = _texts({"eml": msg.as_bytes()})
    assert "One of your runs used its GPUs under" in texts["text/plain"]
    assert "jlee-a" in texts["text/plain"] and "jlee-a" in texts["text/html"]
    card = chat_card(computed.kpis, tz=UTC, report_url=None, user="jlee")
    assert card is not None
    texts["card"] = f"{card.title}\n{card.text}"
    for where, text in texts.items():
        for s in (*THEIRS, DANA):
            assert s not in text, f"{s!r} in jlee's {where}"


def test_a_teams_outputs_hold_the_teams_rows_alone(computed: Computed) -> None:
    nlp = computed.team(_request(), "nlp")
    assert nlp is not None
    texts = _texts(render(nlp, _request(), images={}))
    card = chat_card(nlp, tz=UTC, report_url=None, team="nlp", scope="team nlp")
    assert card is not None
    texts["card"] = f"{card.title}\n{card.text}"
    assert DANA in texts["html"] and "jlee" in texts["html"]  # the team's own engineers
    for where, text in texts.items():
        for s in THEIRS:
            assert s not in text, f"{s!r} in team nlp's {where}"


def test_a_week_without_their_runs_sends_them_nothing(computed: Computed, tmp_path: Path) -> None:
    assert build_runs_email(computed.kpis, "nobody", tz=UTC, now=NOW) is None
    assert chat_card(computed.kpis, tz=UTC, report_url=None, user="nobody") is None
