"""Budget alerts on real local servers (SMTP, webhooks) through the delivery log: one alert per
(team, period, level) to the summary's and the team's recipients; 100% passed at once sends
that one only; a 5xx left owed to the next check; opted-out and other recipients get nothing;
``serve``'s scheduler fires the check; the weekly run checks too; a broken store costs a
warning."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from fakes import run_record
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import SmtpServer
from test_job import ALICE, CTO, NLP, settings
from webhook_server import webhook_server

from reports.kpi.budgets import Budget
from reports.service.budget_alerts import COVERED
from reports.service.config import Recipient
from reports.service.deliveries import DeliveryLog
from reports.service.job import Service
from reports.service.scheduler import ServiceScheduler
from tracker.sinks.webhook import post
from tracker.store import RunStore

pytestmark = pytest.mark.service

NOW = datetime(2026, 12, 10, 12, tzinfo=UTC)
MONTH = Budget(team="nlp", usd_per_month=45.0)
VISION = Recipient(to="vision-lead@example.com", report="team", team="vision")
SLACK = Recipient(chat="#ml-platform", webhook_env="HOOK_SLACK", webhook_kind="slack")


@pytest.fixture
def store(tmp_path: Path) -> str:
    """nlp: 10 GPU-hours on 2 Dec ($38.50: 85.6% of $45); vision: 100 GPU-hours, no budget."""
    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(
            run_record("n1", datetime(2026, 12, 2, tzinfo=UTC), 10, team="nlp", name="nlp-pretrain")
        )
        s.upsert_run(run_record("v1", datetime(2026, 12, 2, tzinfo=UTC), 100, team="vision"))
    return url


def add_run(url: str, hours: float, run_id: str = "n2") -> None:
    with RunStore(url) as s:
        s.upsert_run(run_record(run_id, datetime(2026, 12, 9, tzinfo=UTC), hours, team="nlp"))


def test_80_then_100_each_once(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with webhook_server() as slack:
        monkeypatch.setenv("HOOK_SLACK", slack.url)
        s = settings(tmp_path, store, smtp_server, CTO, NLP, VISION, ALICE, SLACK, budgets=(MONTH,))
        first = Service(s).budget_alerts(NOW)
        again = Service(s).budget_alerts(NOW + timedelta(minutes=15))
        add_run(store, 2)  # + $7.70: $46.20, 102.7%
        hundred = Service(s).budget_alerts(NOW + timedelta(minutes=30))
        last = Service(s).budget_alerts(NOW + timedelta(minutes=45))
    assert [(o.kind, o.week, o.recipient, o.status) for o in first] == [
        ("budget:nlp:80:45.00", "2026-12", "cto@example.com", "sent"),
        ("budget:nlp:80:45.00", "2026-12", "nlp-lead@example.com", "sent"),
        ("budget:nlp:80:45.00", "2026-12", "chat:#ml-platform", "sent"),
    ]
    assert again == [] and last == []
    assert [(o.kind, o.recipient, o.status) for o in hundred] == [
        ("budget:nlp:100:45.00", "cto@example.com", "sent"),
        ("budget:nlp:100:45.00", "nlp-lead@example.com", "sent"),
        ("budget:nlp:100:45.00", "chat:#ml-platform", "sent"),
    ]
    # by email: the vision lead and alice (an engineer's own runs) get none
    assert sorted(m.rcpt_tos[0] for m in smtp_server.messages) == [
        "cto@example.com",
        "cto@example.com",
        "nlp-lead@example.com",
        "nlp-lead@example.com",
    ]
    msg = smtp_server.messages[0].message
    # 10 GPU-h x $3.85 over 9.5 of December's 31 days: forecast 38.5 x 31 / 9.5 = $125.63
    assert msg["Subject"] == "GPU budget: nlp at 86% of December 2026 ($38.50 of $45.00)"
    text = msg.get_body(("plain",)).get_content()
    assert (
        "Team nlp has spent $38.50 of its $45.00 budget for December 2026: 86%, counted to "
        "10 Dec 12:00 UTC."
    ) in " ".join(text.split())  # wrapped at 76
    assert "At this rate the month ends at $125.63 (279% of the budget)." in text
    assert "Largest spends this month:\n1. nlp-pretrain: $38.50\n" in text
    assert "Reports: https://gpu-kpi.example.com/r" in text
    html = msg.get_body(("html",)).get_content()
    assert "<strong>$38.50</strong> spent of $45.00" in html
    card = slack.bodies[0]["text"]
    assert card.startswith("*GPU budget: nlp at 86% of December 2026 ($38.50 of $45.00)*")
    assert "• Month forecast: $125.63 (279%)" in card
    assert "<https://gpu-kpi.example.com/r|Open the reports>" in card
    assert slack.bodies[1]["text"].startswith("*GPU budget: nlp at 103% of December 2026")


def test_both_levels_at_once_send_the_100_alert_only(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    add_run(store, 5)  # $57.75 of $45
    s = settings(tmp_path, store, smtp_server, CTO, budgets=(MONTH,))
    got = Service(s).budget_alerts(NOW)
    assert [(o.kind, o.status, o.error) for o in got] == [
        ("budget:nlp:100:45.00", "sent", None),
        ("budget:nlp:80:45.00", "empty", COVERED),
    ]
    assert len(smtp_server.messages) == 1
    assert smtp_server.messages[0].message["Subject"] == (
        "GPU budget: nlp at 128% of December 2026 ($57.75 of $45.00)"
    )
    with RunStore(store) as st:
        logged = {(e.kind, e.week, e.status) for e in DeliveryLog(st).entries()}
    assert logged == {
        ("budget:nlp:100:45.00", "2026-12", "sent"),
        ("budget:nlp:80:45.00", "2026-12", "empty"),
    }


def test_a_weekly_budget_this_week_and_the_week_before(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    """W50 starts 7 Dec: 9 Dec's 2 GPU-h ($7.70) of $9 is 86% so far. W49, whole, is checked
    too: the 2 Dec run's $38.50 is 428% of it (spend a check of W49 may never have seen)."""
    add_run(store, 2)
    s = settings(tmp_path, store, smtp_server, CTO, budgets=(Budget(team="nlp", usd_per_week=9.0),))
    got = Service(s).budget_alerts(NOW)
    assert [(o.kind, o.week, o.status) for o in got] == [
        ("budget:nlp:100:9.00", "2026-W49", "sent"),
        ("budget:nlp:80:9.00", "2026-W49", "empty"),
        ("budget:nlp:80:9.00", "2026-W50", "sent"),
    ]
    assert [m.message["Subject"] for m in smtp_server.messages] == [
        "GPU budget: nlp at 428% of week 2026-W49 ($38.50 of $9.00)",
        "GPU budget: nlp at 86% of week 2026-W50 ($7.70 of $9.00)",
    ]
    whole = smtp_server.messages[0].message.get_body(("plain",)).get_content()
    assert "counted to 6 Dec 23:59 UTC." in " ".join(whole.split())
    assert "At this rate" not in whole  # the week is over: no forecast


def test_a_changed_budget_alerts_anew(tmp_path: Path, store: str, smtp_server: SmtpServer) -> None:
    s = settings(tmp_path, store, smtp_server, CTO, budgets=(MONTH,))
    assert [o.kind for o in Service(s).budget_alerts(NOW)] == ["budget:nlp:80:45.00"]
    raised = settings(
        tmp_path, store, smtp_server, CTO, budgets=(Budget(team="nlp", usd_per_month=48.0),)
    )
    assert [o.kind for o in Service(raised).budget_alerts(NOW)] == ["budget:nlp:80:48.00"]
    assert Service(raised).budget_alerts(NOW) == []


def test_a_period_that_is_over_is_alerted_once_a_level(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    """W49's $38.50 against $40 a week: 96%, alerted. Raised to $45, W49 (over, at 86%) is not
    alerted again: $45 was not its budget all week."""
    first = settings(
        tmp_path, store, smtp_server, CTO, budgets=(Budget(team="nlp", usd_per_week=40.0),)
    )
    assert [(o.kind, o.week) for o in Service(first).budget_alerts(NOW)] == [
        ("budget:nlp:80:40.00", "2026-W49")
    ]
    raised = settings(
        tmp_path, store, smtp_server, CTO, budgets=(Budget(team="nlp", usd_per_week=45.0),)
    )
    assert Service(raised).budget_alerts(NOW) == []
    assert len(smtp_server.messages) == 1


def test_a_5xx_is_owed_to_the_next_check(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("reports.service.chat.post", partial(post, sleep=lambda s: None))
    with webhook_server(answers=[(503, {})] * 4) as slack:
        monkeypatch.setenv("HOOK_SLACK", slack.url)
        s = settings(tmp_path, store, smtp_server, SLACK, budgets=(MONTH,))
        (first,) = Service(s).budget_alerts(NOW)
        (second,) = Service(s).budget_alerts(NOW + timedelta(minutes=15))
    assert (first.status, second.status) == ("deferred", "sent")
    assert first.error is not None and "HTTP 503" in first.error
    assert "secret-token" not in first.error
    assert len(slack.bodies) == 1


def test_opted_out_and_without_budgets_nothing(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    quiet = Recipient(to="cfo@example.com", budget_alerts=False)
    assert (
        Service(settings(tmp_path, store, smtp_server, quiet, budgets=(MONTH,))).budget_alerts(NOW)
        == []
    )
    assert Service(settings(tmp_path, store, smtp_server, CTO)).budget_alerts(NOW) == []
    assert smtp_server.messages == []


def test_the_weekly_run_checks_the_budgets(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    s = settings(tmp_path, store, smtp_server, CTO, budgets=(MONTH,))
    result = Service(s).run(now=NOW)
    assert [(o.kind, o.week, o.status) for o in result.outcomes] == [
        ("summary", "2026-W49", "sent")
    ]
    assert [(o.kind, o.week, o.status) for o in result.alerts] == [
        ("budget:nlp:80:45.00", "2026-12", "sent")
    ]
    # the week's report shows the month so far: 1-6 Dec, $38.50 of $45
    page = (tmp_path / "archive" / "2026-W49.html").read_text()
    assert '<td class="warn">80% reached, on course to exceed</td>' in page


def test_a_broken_store_costs_a_warning(
    tmp_path: Path, smtp_server: SmtpServer, caplog: pytest.LogCaptureFixture
) -> None:
    bad = tmp_path / "runs.db"
    bad.write_bytes(b"not a database" * 100)
    s = settings(tmp_path, f"sqlite:///{bad}", smtp_server, CTO, budgets=(MONTH,))
    with caplog.at_level(logging.WARNING, "gpu_kpi"):
        assert Service(s).budget_alerts(NOW) == []
    assert "gpu-kpi: budgets not checked: StoreError: " in caplog.text


def test_the_scheduler_fires_the_check() -> None:
    fired = threading.Event()

    class Settings:
        schedule = "0 8 * * mon"
        misfire_grace_h = 1.0
        retry_after_min = 60.0
        tz = UTC

    scheduler = ServiceScheduler(Settings(), job=lambda: None, budgets=fired.set, budgets_s=3600)
    scheduler.start()
    try:
        assert fired.wait(10)  # at the start, then every budgets_s
    finally:
        scheduler.shutdown()


def test_run_names_are_escaped(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's name is a training script's to choose: escaped in the HTML, on one line in the
    text and the subject, escaped for Slack."""
    with RunStore(store) as s:
        s.upsert_run(
            run_record(
                "evil",
                datetime(2026, 12, 3, tzinfo=UTC),
                1,
                team="nlp",
                name="<img src=x onerror=alert(1)>\r\nBcc: x@evil.example",
            )
        )
    with webhook_server() as slack:
        monkeypatch.setenv("HOOK_SLACK", slack.url)
        s = settings(tmp_path, store, smtp_server, CTO, SLACK, budgets=(MONTH,))
        assert [o.status for o in Service(s).budget_alerts(NOW)] == ["sent", "sent"]
    msg = smtp_server.messages[0].message
    assert msg["Bcc"] is None
    html = msg.get_body(("html",)).get_content()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    text = msg.get_body(("plain",)).get_content()
    assert "2. <img src=x onerror=alert(1)> Bcc: x@evil.example: $3.85" in text
    card = slack.bodies[0]["text"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in card and "<img" not in card
