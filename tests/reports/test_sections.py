"""The report's sections that are units (:mod:`reports.sections`): each registered section
has its partials, and is shown through every format from its one part; a team's report holds
its team's rows only. The budgets section, by hand, through each format."""

from __future__ import annotations

import csv
import email
import email.policy
import importlib
import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fakes import run_record, slurm_job

from reports.build import Computed, compute, render
from reports.kpi.budgets import Budget
from reports.render.chat import chat_card
from reports.request import Request
from reports.sections import SECTIONS
from tracker.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
W48 = datetime(2026, 11, 23, tzinfo=UTC)
NOW = datetime(2026, 12, 2, tzinfo=UTC)
VISION = "<b>vision</b>"
BUDGETS = (Budget(team="nlp", usd_per_week=10.0), Budget(team=VISION, usd_per_week=100.0))
FORMATS = ("html", "email", "json", "csv")


@pytest.fixture(scope="module")
def computed(tmp_path_factory: pytest.TempPathFactory) -> Computed:
    url = f"sqlite:///{tmp_path_factory.mktemp('sections')}/runs.db"
    with RunStore(url) as s:
        # nlp: 2 GPUs x 2 h of H100 at $3.85 = $15.40 of $10.00; vision: 1 GPU-h, $3.85 of $100
        s.upsert_run(run_record("a", W48 + timedelta(days=1), 2, gpus=2, team="nlp"))
        s.upsert_run(run_record("b", W48 + timedelta(days=2), 1, team=VISION))
    req = Request(week="2026-W48", tz=UTC, formats=FORMATS, budgets=BUDGETS)
    return compute(url, req, now=NOW)


def outputs(k: object) -> dict[str, str]:
    req = Request(week="2026-W48", tz=UTC, formats=FORMATS, budgets=BUDGETS)
    files = render(k, req, images={})  # type: ignore[arg-type]
    msg = email.message_from_bytes(bytes(files["eml"]), policy=email.policy.default)
    body = msg.get_body(("plain",))
    html_body = msg.get_body(("html",))
    assert body is not None and html_body is not None
    return {
        "html": bytes(files["html"]).decode(),
        "text": body.get_content(),
        "email_html": html_body.get_content(),
        "json": bytes(files["json"]).decode(),
        "csv": bytes(files["csv"]).decode(),
    }


def test_every_section_has_its_partials_and_one_name() -> None:
    names = [s.name for s in SECTIONS]
    assert len(names) == len(set(names)) and names
    for section in SECTIONS:
        name = section.name
        part = section.read.__annotations__["return"]
        place = getattr(importlib.import_module(section.read.__module__), part).place
        assert place in ("lead", "top", "detail"), f"{name}: no place on the page"
        # the email shows the top sections
        for fmt in ("html", "email.html", "email.txt") if place == "top" else ("html",):
            partial = ROOT / "templates" / f"_{name}.{fmt}.j2"
            assert partial.is_file(), f"{name}: no {partial.name}"
            text = partial.read_text()
            assert "view." in text or 'view["' in text, f"{partial.name} shows nothing of its view"


def test_the_parts_are_the_registry_in_its_order(computed: Computed) -> None:
    assert list(computed.kpis.parts) == [s.name for s in SECTIONS]


def test_the_budgets_section_through_every_format_by_hand(computed: Computed) -> None:
    out = outputs(computed.kpis)
    # the page: one row per team, the team's name escaped, the over-budget one flagged
    page = out["html"]
    assert 'id="budgets"' in page and "<b>vision</b>" not in page
    assert "&lt;b&gt;vision&lt;/b&gt;" in page
    budgets = page[page.index('id="budgets"') :]
    row = re.search(r'<tr><td class="name">nlp</td>.*?</tr>', budgets)
    assert row is not None
    assert "$15.40" in row[0] and "$10.00" in row[0] and "154%" in row[0]
    assert 'class="bad">over budget' in row[0]
    # the email, both parts
    assert "- nlp, week 2026-W48: $15.40 of $10.00 (154%) - over budget" in out["text"]
    assert "- <b>vision</b>, week 2026-W48: $3.85 of $100.00 (4%) - within budget" in out["text"]
    assert "&lt;b&gt;vision&lt;/b&gt;" in out["email_html"]
    # the JSON and the CSV, from the same lines
    doc = json.loads(out["json"])["budgets"]
    assert [(b["team"], b["spend_usd"], b["budget_usd"]) for b in doc] == [
        (VISION, pytest.approx(3.85), 100.0),
        ("nlp", pytest.approx(15.40), 10.0),
    ]
    rows = [r for r in csv.reader(io.StringIO(out["csv"])) if r[2] == "budget"]
    nlp = {r[4]: r[5] for r in rows if r[3] == "nlp"}
    assert float(nlp["2026-W48:spend_usd"]) == pytest.approx(15.40)
    assert nlp["2026-W48:complete"] == "1" and nlp["2026-W48:level"] == "100"
    # the chat card: only the budget reached
    card = chat_card(computed.kpis, tz=UTC, report_url=None)
    assert card is not None
    assert "Budgets:\nnlp, week 2026-W48: $15.40 of $10.00 (154%), over budget" in card.text
    assert "vision" not in card.text.split("Budgets:")[1]


def test_a_teams_report_holds_its_own_budget_alone(computed: Computed) -> None:
    req = Request(week="2026-W48", tz=UTC, formats=FORMATS, budgets=BUDGETS)
    nlp = computed.team(req, "nlp")
    assert nlp is not None
    out = outputs(nlp)
    assert [b["team"] for b in json.loads(out["json"])["budgets"]] == ["nlp"]
    for text in out.values():
        assert "vision" not in text


def test_a_week_without_budgets_shows_no_section(computed: Computed) -> None:
    none = computed.team(Request(week="2026-W48", tz=UTC), "nobody")
    assert none is None  # no GPU time: no team report at all
    bare = computed.kpis.parts["budgets"].of_team("nobody")
    assert bare.view() is None and bare.document(UTC) == {"budgets": []}
    assert bare.card_lines() == [] and bare.summary() == []


def test_a_teams_report_holds_its_own_jobs_alone(tmp_path: Path) -> None:
    from reports.data.allocations import write_allocations
    from reports.rows import Allocation

    url = f"sqlite:///{tmp_path}/runs.db"
    start = W48 + timedelta(days=1, hours=10)

    def job(job_id: str, team: str) -> Allocation:
        end = start + timedelta(hours=2)
        return slurm_job(
            job_id, 2, start, end, (f"node-{team}",), cluster="c1", name=f"train-{team}",
            account=team, team=team,
        )  # fmt: skip

    with RunStore(url) as s:
        s.upsert_run(run_record("a", W48 + timedelta(days=2), 2, gpus=2, team="nlp"))
        write_allocations(s, [job("11", "nlp"), job("12", "vision")], [])
    req = Request(week="2026-W48", tz=UTC, formats=FORMATS)
    c = compute(url, req, now=NOW)
    fleet = json.loads(outputs(c.kpis)["json"])["allocations"]
    assert sorted(j["job_id"] for j in fleet["jobs"]) == ["11", "12"]
    nlp = c.team(req, "nlp")
    assert nlp is not None
    out = outputs(nlp)
    mine = json.loads(out["json"])["allocations"]
    # its job alone, by its figures: 2 GPUs x 2 h nobody sampled, at H100's $3.85
    (only,) = mine["jobs"]
    assert (only["job_id"], only["no_samples_usd"]) == ("11", pytest.approx(4 * 3.85))
    assert mine["totals"]["allocated_gpu_hours"] == pytest.approx(4.0)
    assert [t["team"] for t in mine["by_team"]] == ["nlp"]
    for text in out.values():
        assert "train-vision" not in text
    assert "train-nlp" in out["html"]


def test_one_run_is_one_run_in_the_lede(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(run_record("solo", W48 + timedelta(days=1), 2, gpus=2, team="nlp"))
    out = outputs(compute(url, Request(week="2026-W48", tz=UTC, formats=FORMATS), now=NOW).kpis)
    # 2 GPUs x 2 h of H100 at $3.85
    assert "4.0 GPU-h across 1 run cost $15.40 at" in " ".join(out["text"].split())
    assert "across 1 runs" not in out["html"]
