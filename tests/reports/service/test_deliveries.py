"""The delivery log on SQLite and PostgreSQL: a claim is won once, retaken only when deferred or
stale, and concurrent claimers get exactly one winner."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from fakes import run_together

from reports.service.deliveries import Delivery, DeliveryLog, pending_weeks
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
    assert (e.kind, e.week, e.recipient, e.status, e.attempts, e.claimed_by, e.message_id) == \
        (*KEY, "sent", 1, "a:1", "<m@x>")
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
    return Delivery(kind="summary", week=week, recipient="a@example.com", status=status,
                    attempts=1, claimed_by="h:1", claimed_at=NOW, finished_at=NOW,
                    message_id=None, error=None)


def test_pending_weeks() -> None:
    weeks = ["2026-W46", "2026-W47", "2026-W48"]
    assert pending_weeks([], weeks) == ["2026-W48"]  # no back issues for a newcomer
    assert pending_weeks([entry("2026-W45", "sent")], weeks) == weeks
    assert pending_weeks([entry("2026-W47", "sent")], weeks) == ["2026-W48"]
    assert pending_weeks([entry("2026-W47", "deferred")], weeks) == ["2026-W47", "2026-W48"]
    assert pending_weeks([entry("2026-W48", "failed")], weeks) == []
