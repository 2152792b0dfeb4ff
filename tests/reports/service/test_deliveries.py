"""The delivery log on SQLite and PostgreSQL: a claim is won once, retaken only when deferred or
stale, and concurrent claimers get exactly one winner; a delivery sent through it
(:func:`reports.service.deliveries.deliver`, weekly reports and budget alerts alike) is
recorded however it ends."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from typing import Any

import pytest
from fakes import run_together

from reports.service.config import Recipient
from reports.service.deliveries import Delivery, DeliveryLog, deliver, pending_weeks
from reports.service.mailer import MailError
from reports.service.outcomes import STOPPED, Outcome
from tracker.store import RunStore

NOW = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
KEY = ("summary", "2026-W48", "cto@example.com")


def test_a_claim_is_won_once_and_finished(store_url: str) -> None:
    with RunStore(store_url) as store:
        log = DeliveryLog(store)
        assert log.claim(*KEY, owner="a:1", now=NOW) is True
        assert log.claim(*KEY, owner="b:2", now=NOW) is False
        log.finish(*KEY, status="sent", now=NOW + timedelta(seconds=2), message_id="<m@x>")
        assert log.claim(*KEY, owner="b:2", now=NOW + timedelta(days=1)) is False
        (e,) = log.entries()
    assert (e.kind, e.week, e.recipient, e.status, e.attempts, e.claimed_by, e.message_id) == (
        *KEY,
        "sent",
        1,
        "a:1",
        "<m@x>",
    )
    assert e.claimed_at == NOW and e.finished_at == NOW + timedelta(seconds=2)


def test_deferred_and_stale_claims_are_taken_again(store_url: str) -> None:
    with RunStore(store_url) as store:
        log = DeliveryLog(store, lease_s=600)
        assert log.claim(*KEY, owner="a:1", now=NOW)
        log.finish(*KEY, status="deferred", now=NOW, error="451 try later")
        assert log.claim(*KEY, owner="b:2", now=NOW + timedelta(hours=1))  # deferred: again
        # b dies while sending: its claim holds for the lease, then goes
        assert not log.claim(*KEY, owner="c:3", now=NOW + timedelta(hours=1, minutes=9))
        assert log.claim(*KEY, owner="c:3", now=NOW + timedelta(hours=1, minutes=11))
        (e,) = log.entries()
        assert (e.status, e.attempts, e.claimed_by) == ("sending", 3, "c:3")
        log.finish(*KEY, status="failed", now=NOW, error="550 no such user")
        assert not log.claim(*KEY, owner="d:4", now=NOW + timedelta(days=3))
        assert log.counts() == {("summary", "failed"): 1}


def test_concurrent_claimers_get_one_winner(store_url: str) -> None:
    stores: list[RunStore] = []

    def claimer(i: int) -> Callable[[], bool]:
        stores.append(store := RunStore(store_url))
        log = DeliveryLog(store)
        return lambda: log.claim(*KEY, owner=f"h{i}:1", now=NOW)

    try:
        wins = [won for won in run_together(8, claimer) if won]
    finally:
        for store in stores:
            store.close()
    assert len(wins) == 1


def entry(week: str, status: str) -> Delivery:
    return Delivery(
        kind="summary",
        week=week,
        recipient="a@example.com",
        status=status,
        attempts=1,
        claimed_by="h:1",
        claimed_at=NOW,
        finished_at=NOW,
        message_id=None,
        error=None,
    )


def test_pending_weeks() -> None:
    weeks = ["2026-W46", "2026-W47", "2026-W48"]
    assert pending_weeks([], weeks) == ["2026-W48"]  # no back issues for a newcomer
    assert pending_weeks([entry("2026-W45", "sent")], weeks) == weeks
    assert pending_weeks([entry("2026-W47", "sent")], weeks) == ["2026-W48"]
    assert pending_weeks([entry("2026-W47", "deferred")], weeks) == ["2026-W47", "2026-W48"]
    assert pending_weeks([entry("2026-W48", "failed")], weeks) == []


def test_a_config_fault_is_claimed_again_only_under_other_settings(store_url: str) -> None:
    """A delivery that failed for a fault of the SMTP settings (fingerprint "aaaa") is claimed
    again under other settings ("bbbb") or with retry_failed, not under the same ones; one that
    failed for the recipient (no fingerprint) only with retry_failed."""
    other = ("summary", "2026-W48", "nobody@example.com")
    with RunStore(store_url) as store:
        log = DeliveryLog(store)
        for key, at_fault in ((KEY, "aaaa"), (other, None)):
            assert log.claim(*key, owner="a:1", now=NOW)
            log.finish(*key, status="failed", now=NOW, error="535 / 550", smtp_config=at_fault)
        assert not log.claim(*KEY, owner="b:2", now=NOW, smtp_config="aaaa")
        assert not log.claim(*other, owner="b:2", now=NOW, smtp_config="bbbb")
        assert log.claim(*KEY, owner="b:2", now=NOW, smtp_config="bbbb")
        log.finish(*KEY, status="sent", now=NOW, smtp_config="bbbb")  # kept on failures only
        assert log.claim(*other, owner="c:3", now=NOW, retry_failed=True)
        log.finish(*other, status="failed", now=NOW, error="550 no such user")
        got = {e.recipient: (e.status, e.attempts, e.smtp_config) for e in log.entries()}
    assert got == {KEY[2]: ("sent", 2, None), other[2]: ("failed", 2, None)}


def test_a_released_claim_and_an_untried_delivery_are_owed_at_once(store_url: str) -> None:
    untried = ("team:nlp", "2026-W48", "lead@example.com")
    with RunStore(store_url) as store:
        log = DeliveryLog(store)
        assert log.claim(*KEY, owner="a:1", now=NOW)
        log.release(*KEY, owner="z:9", now=NOW, error="stopping")  # not the owner: nothing
        assert [e.status for e in log.entries()] == ["sending"]
        log.release(*KEY, owner="a:1", now=NOW, error="stopping")
        assert log.defer_unclaimed(*untried, owner="a:1", now=NOW, error="stopping")
        assert not log.defer_unclaimed(*KEY, owner="a:1", now=NOW, error="stopping")  # has a row
        rows = {e.recipient: (e.status, e.attempts, e.error) for e in log.entries()}
        assert rows == {
            KEY[2]: ("deferred", 0, "stopping"),
            untried[2]: ("deferred", 0, "stopping"),
        }
        # well within the lease: a restart takes both at once
        later = NOW + timedelta(seconds=5)
        assert log.claim(*KEY, owner="b:2", now=later)
        assert log.claim(*untried, owner="b:2", now=later)


def test_a_log_made_before_smtp_config_gets_the_column(store_url: str) -> None:
    import sqlalchemy as sa

    with RunStore(store_url) as store:
        with store.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "CREATE TABLE gpu_kpi_deliveries (kind TEXT, week VARCHAR(8), recipient TEXT, "
                    "status VARCHAR(16) NOT NULL, attempts INTEGER NOT NULL, claimed_by TEXT NOT NULL,"
                    " claimed_at TIMESTAMP NOT NULL, finished_at TIMESTAMP, message_id TEXT, "
                    "error TEXT, PRIMARY KEY (kind, week, recipient))"
                )
            )
            conn.execute(
                sa.text(
                    "INSERT INTO gpu_kpi_deliveries VALUES ('summary', '2026-W47', 'cto@example.com',"
                    " 'sent', 1, 'a:1', '2026-11-23 08:00:00', NULL, NULL, NULL)"
                )
            )
        log = DeliveryLog(store)
        DeliveryLog(store)  # a second start finds the column there
        assert [(e.week, e.status, e.smtp_config) for e in log.entries()] == [
            ("2026-W47", "sent", None)
        ]
        assert log.claim(*KEY, owner="a:1", now=NOW)
        log.finish(*KEY, status="failed", now=NOW, error="535", smtp_config="aaaa")
        assert log.entries()[-1].smtp_config == "aaaa"


def test_pending_weeks_owes_a_config_fault_again_under_other_settings() -> None:
    weeks = ["2026-W47", "2026-W48"]
    fault = replace(entry("2026-W48", "failed"), smtp_config="aaaa")
    history = [entry("2026-W47", "sent"), fault]
    assert pending_weeks(history, weeks, smtp_config="aaaa") == []
    assert pending_weeks(history, weeks, smtp_config="bbbb") == ["2026-W48"]
    assert (
        pending_weeks(
            [entry("2026-W47", "sent"), entry("2026-W48", "failed")], weeks, smtp_config="bbbb"
        )
        == []
    )  # the recipient's fault: stays failed
    assert (
        pending_weeks(
            [entry("2026-W47", "failed"), entry("2026-W48", "failed")], weeks, retry_failed=True
        )
        == weeks
    )


class _Mailer:
    """Takes every message, or raises ``error``."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.sent: list[tuple[str, list[str]]] = []

    def send(self, msg: EmailMessage, to: Sequence[str]) -> None:
        if self.error is not None:
            raise self.error
        self.sent.append((msg["Message-ID"], list(to)))


def _email() -> EmailMessage:
    msg = EmailMessage()
    msg["Message-ID"] = "<w48@example.com>"
    msg.set_content("the week")
    return msg


CTO = Recipient(to="cto@example.com")


def _deliver(store: RunStore, mailer: _Mailer, **kw: Any) -> Outcome:
    args: dict[str, Any] = {
        "what": "summary for 2026-W48",
        "mailer": mailer,
        "owner": "a:1",
        "now": NOW,
        "smtp_config": "smtp-1",
    }
    make = kw.pop("make", _email)
    return deliver(DeliveryLog(store), "summary", "2026-W48", CTO, make, **(args | kw))


def test_a_delivery_is_sent_once_and_recorded_with_its_message_id(store_url: str) -> None:
    mailer = _Mailer()
    made: list[int] = []

    def make() -> EmailMessage:
        made.append(1)
        return _email()

    with RunStore(store_url) as store:
        first = _deliver(store, mailer, make=make)
        again = _deliver(store, mailer, make=make, owner="b:2")
        (e,) = DeliveryLog(store).entries()
    assert (first.status, again.status, len(made)) == ("sent", "skipped", 1)
    assert mailer.sent == [("<w48@example.com>", ["cto@example.com"])]
    assert (e.status, e.message_id, e.claimed_by) == ("sent", "<w48@example.com>", "a:1")


def test_how_a_failure_is_recorded_and_never_raised(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    refused = MailError("smtp: auth refused", temporary=False, config=True)
    with RunStore(store_url) as store, caplog.at_level(logging.WARNING, "gpu_kpi"):
        later = _deliver(store, _Mailer(MailError("smtp: 451 busy", temporary=True)))
        (deferred,) = DeliveryLog(store).entries()
        failed = _deliver(store, _Mailer(refused), now=NOW + timedelta(hours=1))
        (config,) = DeliveryLog(store).entries()
        same = _deliver(store, _Mailer(), now=NOW + timedelta(hours=2))
        changed = _deliver(store, _Mailer(), make=lambda: None, smtp_config="smtp-2")
    assert (later.status, later.error, deferred.status) == (
        "deferred",
        "smtp: 451 busy",
        "deferred",
    )
    assert (failed.status, config.status, config.smtp_config) == ("failed", "failed", "smtp-1")
    assert "summary for 2026-W48 to cto@example.com failed: smtp: auth refused; a fault" in (
        caplog.text
    )
    assert same.status == "skipped"  # failed for the settings it still has: not tried again
    assert changed.status == "empty"  # new settings: tried again, and nothing to send


def test_a_bug_in_making_the_message_fails_that_delivery_only(store_url: str) -> None:
    def broken() -> EmailMessage:
        raise ValueError("no such team")

    with RunStore(store_url) as store:
        out = _deliver(store, _Mailer(), make=broken)
        (e,) = DeliveryLog(store).entries()
    assert (out.status, out.error, e.status) == ("failed", "ValueError: no such team", "failed")


def test_a_stop_while_the_message_is_made_gives_the_claim_back(store_url: str) -> None:
    mailer = _Mailer()
    with RunStore(store_url) as store:
        out = _deliver(store, mailer, stopping=lambda: True)
        (e,) = DeliveryLog(store).entries()
    assert (out.status, out.error, mailer.sent) == ("deferred", STOPPED, [])
    assert (e.status, e.attempts) == ("deferred", 0)
