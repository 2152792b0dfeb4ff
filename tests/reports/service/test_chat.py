"""Chat channels as recipients of the weekly report: Slack, Teams and JSON webhooks on real
local HTTP servers, through the delivery log: the card's headline, change, runs to fix and
link; each (kind, week, channel) posted once; a 429 waited out, a 5xx left owed to the next
run, a missing secret named without the URL."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import SmtpServer
from test_job import CTO, MONDAY_8, W49, settings, three_weeks
from webhook_server import webhook_server

from reports.service.config import Recipient, read_service_settings
from reports.service.deliveries import DeliveryLog
from reports.service.job import Service
from tracker.sinks.webhook import post
from tracker.store import RunStore

pytestmark = pytest.mark.service


@pytest.fixture
def store(tmp_path: Path) -> str:
    return three_weeks(tmp_path)


SLACK = Recipient(chat="#ml-platform", webhook_env="HOOK_SLACK", webhook_kind="slack")
TEAMS = Recipient(
    chat="nlp channel", webhook_env="HOOK_TEAMS", webhook_kind="teams", report="team", team="nlp"
)
ALICE_DM = Recipient(chat="alice", webhook_env="HOOK_JSON", report="runs", user="alice")


def test_each_channel_gets_its_card_once(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with webhook_server() as slack, webhook_server() as teams, webhook_server() as plain:
        monkeypatch.setenv("HOOK_SLACK", slack.url)
        monkeypatch.setenv("HOOK_TEAMS", teams.url)
        monkeypatch.setenv("HOOK_JSON", plain.url)
        service = Service(settings(tmp_path, store, smtp_server, CTO, SLACK, TEAMS, ALICE_DM))
        result = service.run(now=W49 + MONDAY_8)
        again = Service(settings(tmp_path, store, smtp_server, CTO, SLACK, TEAMS, ALICE_DM)).run(
            now=W49 + MONDAY_8
        )
    assert [(o.recipient, o.status) for o in result.outcomes] == [
        ("cto@example.com", "sent"),
        ("chat:#ml-platform", "sent"),
        ("chat:nlp channel", "sent"),
        ("chat:alice", "sent"),
    ]
    assert again.outcomes == ()  # nothing owed: exactly once
    assert len(smtp_server.messages) == 1
    # Slack: the fleet's headline (22 GPU-hours x $3.85 = $84.70), the runs to fix, the link
    (card,) = slack.bodies
    text = card["text"]
    assert text.startswith("*GPU efficiency 2026-W48: $85 spend, ")
    assert "Runs to fix first:\n1. alice-sweep-w48 (nlp): 30.0% · $19.93 recoverable" in text
    assert "<https://gpu-kpi.example.com/r/2026-W48.html|Open the report>" in text
    assert "• Spend: $84.70 (0.0% on last week's $84.70)\n" in text  # the change
    assert text.index("• GPU-hours") < text.index("Runs to fix first")
    # Teams: nlp's card, 12 GPU-hours = $46.20, its page linked
    (teams_card,) = teams.bodies
    content = teams_card["attachments"][0]["content"]
    assert content["body"][0]["text"].startswith("GPU efficiency 2026-W48, team nlp: $46 spend")
    # each line a paragraph: a Teams text block would run single line breaks together
    assert "Runs to fix first:\n\n1. alice-sweep-w48: 30.0%" in content["body"][2]["text"]
    assert content["actions"][0]["url"] == "https://gpu-kpi.example.com/r/teams/nlp/2026-W48.html"
    # JSON: alice's own runs
    (mine,) = plain.bodies
    assert mine["title"] == (
        "GPU efficiency 2026-W48: 1 of your runs under 50%, $19.93 recoverable"
    )
    assert "1. alice-sweep-w48: 30.0% · $19.93 recoverable · input-bound" in mine["text"]
    assert mine["link"] == "https://gpu-kpi.example.com/r/2026-W48.html"
    with RunStore(store) as s:
        logged = {(e.kind, e.recipient, e.status) for e in DeliveryLog(s).entries()}
    assert ("summary", "chat:#ml-platform", "sent") in logged
    assert not any("secret-token" in r for _, r, _ in logged)


def test_429_is_waited_out_and_a_5xx_is_owed_to_the_next_run(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (
        webhook_server(answers=[(429, {"Retry-After": "0"})]) as slack,
        webhook_server(answers=[(503, {})] * 4) as plain,
    ):
        monkeypatch.setenv("HOOK_SLACK", slack.url)
        monkeypatch.setenv("HOOK_JSON", plain.url)
        monkeypatch.setattr("reports.service.chat.post", partial(post, sleep=lambda s: None))
        s = settings(tmp_path, store, smtp_server, SLACK, ALICE_DM)
        first = Service(s).run(now=W49 + MONDAY_8)
        assert [(o.recipient, o.status) for o in first.outcomes] == [
            ("chat:#ml-platform", "sent"),
            ("chat:alice", "deferred"),
        ]
        (deferred,) = [o for o in first.outcomes if o.status == "deferred"]
        assert deferred.error is not None and "HTTP 503 after 4 tries" in deferred.error
        assert "secret-token" not in deferred.error
        assert [r.status for r in slack.received] == [429, 200]
        # an hour later (retry_after_min) the next run posts it, and only it
        later = Service(s).run(now=W49 + MONDAY_8 + timedelta(minutes=s.retry_after_min + 1))
    assert [(o.recipient, o.status) for o in later.outcomes] == [("chat:alice", "sent")]
    assert len(plain.bodies) == 1 and len(slack.bodies) == 1


def test_a_missing_webhook_secret_fails_that_channel_only(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOOK_SLACK", raising=False)
    result = Service(settings(tmp_path, store, smtp_server, SLACK, CTO)).run(now=W49 + MONDAY_8)
    assert [(o.recipient, o.status) for o in result.outcomes] == [
        ("chat:#ml-platform", "failed"),
        ("cto@example.com", "sent"),
    ]
    assert result.outcomes[0].error == (
        "recipient chat:#ml-platform: the variable HOOK_SLACK holding its webhook URL is not set"
    )


def test_two_chat_recipients_of_one_name_are_an_error(tmp_path: Path) -> None:
    cfg = tmp_path / "gpu-kpi.toml"
    cfg.write_text(
        '[[recipients]]\nchat = "#ml"\nwebhook_env = "A"\n'
        '[[recipients]]\nchat = "#ml"\nwebhook_env = "B"\n'
    )
    settings_, errors = read_service_settings(cfg, env={})
    assert [r.address for r in settings_.recipients] == ["chat:#ml"]
    assert errors == [
        "recipients[1]: the same summary to chat:#ml as recipients[0] (give each chat its own name)"
    ]


def test_a_chat_recipient_in_the_config(tmp_path: Path) -> None:
    secret = tmp_path / "slack-url"
    secret.write_text("https://hooks.slack.com/services/T/B/x\n")
    cfg = tmp_path / "gpu-kpi.toml"
    cfg.write_text(f'''
[[recipients]]
chat = "#ml-platform"
webhook_file = "{secret}"
[[recipients]]
chat = "#nlp"
report = "team"
team = "nlp"
[[recipients]]
to = "a@example.com"
chat = "#both"
[[recipients]]
chat = "#kind"
webhook_env = "X"
webhook_kind = "discord"
''')
    settings_, errors = read_service_settings(cfg, env={})
    # the one in error is kept with its default kind (serve refuses to start on any error)
    assert [r.address for r in settings_.recipients] == ["chat:#ml-platform", "chat:#kind"]
    assert errors == [
        "recipients[1]: a chat recipient needs webhook_env (the variable holding its URL) or "
        "webhook_file, one of them",
        "recipients[2]: needs either to (an email address) or chat (a webhook's name with "
        "webhook_env or webhook_file), not both",
        "recipients[3].webhook_kind: expected one of slack, teams, json, got 'discord'",
    ]


def test_cards_past_the_jobs_time_for_chat_are_owed_to_the_next_run(
    tmp_path: Path, store: str, smtp_server: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weekly job spends at most CHAT_JOB_S posting cards (each post at most CHAT_POST_S):
    with that time spent, the cards are deferred, not posted, and the email still goes out;
    the next run with time to spare posts them."""
    with webhook_server() as slack:
        monkeypatch.setenv("HOOK_SLACK", slack.url)
        monkeypatch.setattr("reports.service.chat.CHAT_JOB_S", 0.0)
        s = settings(tmp_path, store, smtp_server, CTO, SLACK)
        first = Service(s).run(now=W49 + MONDAY_8)
        assert [(o.recipient, o.status) for o in first.outcomes] == [
            ("cto@example.com", "sent"),
            ("chat:#ml-platform", "deferred"),
        ]
        assert first.outcomes[1].error == (
            "the weekly job's time for chat posts ran out: owed to the next run"
        )
        assert slack.bodies == []
        monkeypatch.setattr("reports.service.chat.CHAT_JOB_S", 300.0)
        later = Service(s).run(now=W49 + MONDAY_8 + timedelta(minutes=s.retry_after_min + 1))
    assert [(o.recipient, o.status) for o in later.outcomes] == [("chat:#ml-platform", "sent")]
    assert len(slack.bodies) == 1
