"""The weekly job: a real store, a real SMTP server on 127.0.0.1, time injected. Each report
reaches each recipient once: reruns, restarts and catch-ups send nothing twice."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path

import pytest
from fakes import run_record, run_together
from smtp_servers import *  # noqa: F403  (the SMTP server fixtures)
from smtp_servers import USERS, SmtpServer

from reports.service.config import Recipient, ServiceSettings
from reports.service.deliveries import DeliveryLog
from reports.service.job import RunResult, Service
from tracker.config import Settings
from tracker.record import MinuteSample
from tracker.store import RunStore

pytestmark = pytest.mark.service  # real SMTP servers, schedulers, subprocesses: `make test`

W46 = datetime(2026, 11, 9, tzinfo=UTC)
W47 = datetime(2026, 11, 16, tzinfo=UTC)
W48 = datetime(2026, 11, 23, tzinfo=UTC)
W49 = datetime(2026, 11, 30, tzinfo=UTC)
MONDAY_8 = timedelta(hours=8)

CTO = Recipient(to="cto@example.com")
NLP = Recipient(to="nlp-lead@example.com", report="team", team="nlp")
ALICE = Recipient(to="alice@example.com", report="runs", user="alice")


def add_week(url: str, monday: datetime) -> None:
    """nlp: alice's 2×H100 run at 30% for 4 h (underutilized) and bob's at 90% for 2 h;
    vision: carol's 1×H100 at 60% for 10 h. Prices $3.85 per GPU-hour."""
    day = monday + timedelta(days=1)
    tag = monday.strftime("%V")
    with RunStore(url) as s:
        s.upsert_run(
            run_record(
                f"a{tag}",
                day,
                4,
                gpus=2,
                util=30.0,
                team="nlp",
                user="alice",
                name=f"alice-sweep-w{tag}",
                verdict="input-bound",
                advice="raise num_workers",
            )
        )
        s.upsert_run(run_record(f"b{tag}", day, 2, gpus=2, util=90.0, team="nlp", user="bob"))
        s.upsert_run(run_record(f"c{tag}", day, 10, util=60.0, team="vision", user="carol"))


def three_weeks(tmp_path: Path) -> str:
    """A store with :func:`add_week`'s runs in W46, W47 and W48."""
    url = f"sqlite:///{tmp_path}/runs.db"
    for monday in (W46, W47, W48):
        add_week(url, monday)
    return url


@pytest.fixture
def store(tmp_path: Path) -> str:
    return three_weeks(tmp_path)


def settings(
    tmp_path: Path, store: str, server: SmtpServer, *recipients: Recipient, **kw: object
) -> ServiceSettings:
    return ServiceSettings(
        tracker=Settings(store=store),
        out_dir=str(tmp_path / "archive"),
        smtp=server.settings(),
        recipients=recipients or (CTO, NLP, ALICE),
        report_url="https://gpu-kpi.example.com/r",
        **kw,
    )  # type: ignore[arg-type]


def to(server: SmtpServer, addr: str) -> list[EmailMessage]:
    return [m.message for m in server.messages if addr in m.rcpt_tos]


def subject(msg: EmailMessage) -> str:
    # a long Subject is folded on the wire; the stdlib parser keeps the fold's leading space
    return str(msg["Subject"]).strip()


def text_of(msg: EmailMessage) -> str:
    part = msg.get_body(("plain",))
    assert part is not None
    return str(part.get_content())


def test_one_run_archives_the_week_and_mails_each_recipient_their_report(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    result = Service(settings(tmp_path, store, smtp_server)).run(now=W49 + MONDAY_8)

    archive = tmp_path / "archive"
    assert sorted(p.name for p in archive.iterdir()) == [
        "2026-W48.csv",
        "2026-W48.eml",
        "2026-W48.html",
        "2026-W48.json",
        "index.html",
        "teams",
    ]
    # the team lead's link opens a page of nlp's numbers: 12 GPU-hours, $46.20, no vision
    team_page = archive / "teams" / "nlp" / "2026-W48.html"
    assert sorted(p.name for p in team_page.parent.iterdir()) == ["2026-W48.html"]
    page = team_page.read_text()
    assert "team nlp" in page and "$46.20" in page and "vision" not in page
    assert "carol" not in page and "alice-sweep-w48" in page
    assert (
        'The whole fleet\'s report: <a href="https://gpu-kpi.example.com/r/2026-W48.html"' in page
    )
    assert [(o.kind, o.week, o.status) for o in result.outcomes] == [
        ("summary", "2026-W48", "sent"),
        ("team:nlp", "2026-W48", "sent"),
        ("runs:alice", "2026-W48", "sent"),
    ]
    assert len(smtp_server.messages) == 3

    # the summary: the whole fleet, 8 + 4 + 10 = 22 GPU-hours × $3.85 = $84.70
    (cto,) = to(smtp_server, CTO.to)
    assert subject(cto).startswith("GPU efficiency 2026-W48: $85 spend")
    assert cto.get_content_type() == "multipart/alternative"
    assert "https://gpu-kpi.example.com/r/2026-W48.html" in text_of(cto)
    # the team lead's: only nlp, 12 GPU-hours = $46.20, utilization (8×30 + 4×90)/12 = 50%
    (lead,) = to(smtp_server, NLP.to)
    assert subject(lead).startswith("GPU efficiency 2026-W48, team nlp: $46 spend, 50.0%")
    assert "vision" not in text_of(lead)
    assert "https://gpu-kpi.example.com/r/teams/nlp/2026-W48.html" in text_of(lead)
    assert "https://gpu-kpi.example.com/r/2026-W48.html" not in text_of(lead)
    # alice's own: her one underutilized run, waste 8 × 3.85 × (1 − 30/85) = $19.93
    (mine,) = to(smtp_server, ALICE.to)
    body = text_of(mine)
    assert "alice-sweep-w48" in body and "$19.93" in body and "raise num_workers" in body
    assert "bob" not in body and "carol" not in body
    with RunStore(store) as s:
        log = DeliveryLog(s).entries()
    assert {(e.kind, e.week, e.recipient, e.status) for e in log} == {
        ("summary", "2026-W48", CTO.to, "sent"),
        ("team:nlp", "2026-W48", NLP.to, "sent"),
        ("runs:alice", "2026-W48", ALICE.to, "sent"),
    }
    assert all(e.message_id and e.message_id.startswith("<") for e in log)


def test_a_second_run_sends_nothing(tmp_path: Path, store: str, smtp_server: SmtpServer) -> None:
    s = settings(tmp_path, store, smtp_server)
    Service(s).run(now=W49 + MONDAY_8)
    again = Service(s, owner="another-host:1").run(now=W49 + MONDAY_8 + timedelta(minutes=5))
    assert again.outcomes == () and again.weeks == ("2026-W48",)
    assert len(smtp_server.messages) == 3


def test_racing_senders_send_once(tmp_path: Path, store_url: str, smtp_server: SmtpServer) -> None:
    """Four services (as four `serve` processes would) run the same week at the same moment,
    on SQLite and on PostgreSQL."""
    add_week(store_url, W48)
    s = settings(tmp_path, store_url, smtp_server)

    def sender(i: int) -> Callable[[], RunResult]:
        service = Service(s, owner=f"host-{i}:1")
        return lambda: service.run(now=W49 + MONDAY_8)

    results = run_together(4, sender)
    assert len(results) == 4
    assert sorted(m.rcpt_tos[0] for m in smtp_server.messages) == [ALICE.to, CTO.to, NLP.to]
    assert sum(r.count("sent") for r in results) == 3


def test_three_weeks_of_service_mail_three_reports_to_each_recipient(
    tmp_path: Path, smtp_server: SmtpServer
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    s = settings(tmp_path, url, smtp_server)
    for monday in (W46, W47, W48):
        add_week(url, monday)
        after = monday + timedelta(days=7) + MONDAY_8
        Service(s).run(now=after)  # the Monday trigger
        Service(s).run(now=after + timedelta(seconds=30))  # a duplicate trigger
        Service(s).run(now=after + timedelta(days=2))  # a restart mid-week
    for r in (CTO, NLP, ALICE):
        weeks = sorted(subject(m).split()[2].rstrip(":,") for m in to(smtp_server, r.to))
        assert weeks == ["2026-W46", "2026-W47", "2026-W48"], r
    assert len(smtp_server.messages) == 9


def test_a_missed_week_is_caught_up_once(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    s = settings(tmp_path, store, smtp_server, CTO)
    Service(s).run(now=W47 + MONDAY_8)  # sends W46
    # the service is down on W48's Monday; it comes back on W49's
    result = Service(s).run(now=W49 + MONDAY_8)
    assert [(o.week, o.status) for o in result.outcomes] == [
        ("2026-W47", "sent"),
        ("2026-W48", "sent"),
    ]
    Service(s).run(now=W49 + MONDAY_8 + timedelta(hours=1))
    subjects = sorted(subject(m).split()[2].rstrip(":") for m in to(smtp_server, CTO.to))
    assert subjects == ["2026-W46", "2026-W47", "2026-W48"]
    assert (tmp_path / "archive" / "2026-W47.html").exists()


def test_catch_up_is_limited(tmp_path: Path, store: str, smtp_server: SmtpServer) -> None:
    s = settings(tmp_path, store, smtp_server, CTO, catch_up_weeks=1)
    Service(s).run(now=W46 - timedelta(days=7) + MONDAY_8)  # W45: no data, still logged
    result = Service(s).run(now=W49 + MONDAY_8)  # down for three Mondays
    assert [o.week for o in result.outcomes] == ["2026-W47", "2026-W48"]  # not W46


def test_a_new_recipient_gets_no_back_issues(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    Service(settings(tmp_path, store, smtp_server, CTO)).run(now=W47 + MONDAY_8)
    s = settings(tmp_path, store, smtp_server, CTO, Recipient(to="new@example.com"))
    result = Service(s).run(now=W49 + MONDAY_8)
    assert sorted((o.recipient, o.week) for o in result.outcomes) == [
        (CTO.to, "2026-W47"),
        (CTO.to, "2026-W48"),
        ("new@example.com", "2026-W48"),
    ]


def test_an_engineer_without_underutilized_runs_gets_no_email(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    bob = Recipient(to="bob@example.com", report="runs", user="bob")
    result = Service(settings(tmp_path, store, smtp_server, bob)).run(now=W49 + MONDAY_8)
    assert [o.status for o in result.outcomes] == ["empty"]
    assert smtp_server.messages == []
    again = Service(settings(tmp_path, store, smtp_server, bob)).run(now=W49 + MONDAY_8)
    assert again.outcomes == ()


def test_a_refused_recipient_does_not_stop_the_others(
    tmp_path: Path, store: str, refusing_server: SmtpServer, caplog: pytest.LogCaptureFixture
) -> None:
    nobody = Recipient(to="nobody@example.com")  # 550
    s = settings(tmp_path, store, refusing_server, nobody, CTO)
    with caplog.at_level(logging.WARNING):
        result = Service(s).run(now=W49 + MONDAY_8)
    assert [(o.recipient, o.status) for o in result.outcomes] == [
        ("nobody@example.com", "failed"),
        (CTO.to, "sent"),
    ]
    assert "550" in (result.outcomes[0].error or "")
    assert any("nobody@example.com" in r.message and "failed" in r.message for r in caplog.records)
    assert [m.rcpt_tos for m in refusing_server.messages] == [[CTO.to]]
    # permanent: not tried again
    again = Service(s).run(now=W49 + MONDAY_8 + timedelta(hours=1))
    assert again.outcomes == ()


def test_a_temporary_failure_is_sent_on_the_next_run(
    tmp_path: Path, store: str, smtp_server_factory: object
) -> None:
    server = smtp_server_factory(data_replies=["451 4.3.0 try again later"])  # type: ignore[operator]
    s = settings(tmp_path, store, server, CTO)
    first = Service(s).run(now=W49 + MONDAY_8)
    assert [o.status for o in first.outcomes] == ["deferred"] and first.deferred == 1
    assert server.messages == []
    second = Service(s).run(now=W49 + MONDAY_8 + timedelta(hours=1))
    assert [o.status for o in second.outcomes] == ["sent"]
    with RunStore(store) as st:
        (entry,) = DeliveryLog(st).entries()
    assert (entry.status, entry.attempts) == ("sent", 2)


def test_no_server_listening_still_archives(tmp_path: Path, store: str) -> None:
    from smtp_servers import unused_port

    from reports.service.mailer import SmtpSettings

    s = ServiceSettings(
        tracker=Settings(store=store),
        out_dir=str(tmp_path / "archive"),
        smtp=SmtpSettings(
            host="127.0.0.1", port=unused_port(), security="none", retries=0, timeout_s=2
        ),
        recipients=(CTO,),
    )
    result = Service(s).run(now=W49 + MONDAY_8)
    assert [o.status for o in result.outcomes] == ["deferred"]
    assert (tmp_path / "archive" / "2026-W48.html").exists()


def test_the_password_stays_out_of_logs_and_errors(
    tmp_path: Path,
    store: str,
    auth_server: SmtpServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = "wr0ng-Secret-Passw0rd"
    monkeypatch.setenv("GPU_KPI_SMTP_PASSWORD", wrong)
    s = ServiceSettings(
        tracker=Settings(store=store),
        out_dir=str(tmp_path / "archive"),
        smtp=auth_server.settings(username="alice"),
        recipients=(CTO,),
    )
    with caplog.at_level(logging.DEBUG):
        result = Service(s).run(now=W49 + MONDAY_8)
    assert [o.status for o in result.outcomes] == ["failed"]
    assert "535" in (result.outcomes[0].error or "")
    assert wrong not in (result.outcomes[0].error or "")
    ours = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith("mail.log")
    )  # the test server echoes it on purpose
    assert "535" in ours and wrong not in ours
    with RunStore(store) as st:
        assert wrong not in str(DeliveryLog(st).entries())
    # and the right one gets through
    monkeypatch.setenv("GPU_KPI_SMTP_PASSWORD", USERS["alice"])
    s2 = ServiceSettings(
        tracker=Settings(store=store),
        out_dir=str(tmp_path / "archive"),
        smtp=auth_server.settings(username="alice"),
        recipients=(Recipient(to="ok@example.com"),),
    )
    assert [o.status for o in Service(s2).run(now=W49 + MONDAY_8).outcomes] == ["sent"]
    assert auth_server.messages[0].login == "alice"


def test_starttls_with_a_self_signed_certificate(
    tmp_path: Path, store: str, starttls_server: SmtpServer
) -> None:
    s = settings(tmp_path, store, starttls_server, CTO)
    assert [o.status for o in Service(s).run(now=W49 + MONDAY_8).outcomes] == ["sent"]
    assert starttls_server.messages[0].tls is True


def test_minute_samples_split_the_team_report(tmp_path: Path, smtp_server: SmtpServer) -> None:
    """A team report from samples, not summaries: 60 minutes at 20% then 60 at 80% → 50%."""
    url = f"sqlite:///{tmp_path}/runs.db"
    start = W48 + timedelta(days=2)
    with RunStore(url) as st:
        st.upsert_run(run_record("s1", start, 2, util=None, team="nlp", user="alice"))
        st.upsert_samples(
            [
                MinuteSample(
                    run_id="s1",
                    minute=start + timedelta(minutes=i),
                    gpu="GPU-a",
                    covered_s=60.0,
                    util_pct=20.0 if i < 60 else 80.0,
                )
                for i in range(120)
            ]
        )
    Service(settings(tmp_path, url, smtp_server, NLP)).run(now=W49 + MONDAY_8)
    (lead,) = to(smtp_server, NLP.to)
    assert ", team nlp: $8 spend, 50.0% utilization" in subject(lead)


def test_user_strings_are_escaped_in_the_team_and_runs_emails(
    tmp_path: Path, smtp_server: SmtpServer
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    team = '"><img src=x onerror=alert(1)>\nBcc: evil@example.com'
    with RunStore(url) as st:
        st.upsert_run(
            run_record(
                "x",
                W48 + timedelta(days=1),
                4,
                util=10.0,
                team=team,
                user="eve",
                name="<script>alert(1)</script>",
            )
        )
    recipients = (
        Recipient(to="lead@example.com", report="team", team=team),
        Recipient(to="eve@example.com", report="runs", user="eve"),
    )
    result = Service(settings(tmp_path, url, smtp_server, *recipients)).run(now=W49 + MONDAY_8)
    assert [o.status for o in result.outcomes] == ["sent", "sent"]
    # one message each, to its own recipient only: no Bcc smuggled in
    assert sorted(m.rcpt_tos for m in smtp_server.messages) == [
        ["eve@example.com"],
        ["lead@example.com"],
    ]
    for m in smtp_server.messages:
        html = m.message.get_body(("html",))
        assert html is not None
        body = str(html.get_content())
        assert "<script>alert(1)</script>" not in body and "<img src=x" not in body
        # the team lead's email names the team; the engineer's names the run
        assert ("&lt;img" if m.rcpt_tos == ["lead@example.com"] else "&lt;script&gt;") in body
        assert "\n" not in subject(m.message)


def test_the_metrics_refresh_reads_the_week_and_the_delivery_log(
    tmp_path: Path, store: str, smtp_server: SmtpServer
) -> None:
    from reports.service.prom import KpiExporter
    from reports.service.serve import MetricsRefresher

    s = settings(tmp_path, store, smtp_server)
    Service(s).run(now=W49 + MONDAY_8)
    exporter = KpiExporter()
    MetricsRefresher(s, exporter)(now=W49 + MONDAY_8 + timedelta(hours=1))
    got = exporter.samples()
    assert dict(got["gpu_kpi_week_spend_usd"]) == {("2026-W48", "util"): pytest.approx(84.7)}
    # the 12-week history, from the first week with GPU-time: the store's W46 to W48
    assert dict(got["gpu_kpi_weekly_spend_usd"]) == {
        (w, "util"): pytest.approx(84.7) for w in ("2026-W46", "2026-W47", "2026-W48")
    }
    assert dict(got["gpu_kpi_emails_total"]) == {
        ("runs", "sent"): 1.0,
        ("summary", "sent"): 1.0,
        ("team", "sent"): 1.0,
    }
    # the current week (W49) has no runs yet: zero GPU-hours so far
    assert dict(got["gpu_kpi_week_to_date_gpu_seconds"]) == {("2026-W49", "util"): 0.0}


def test_an_unreadable_password_file_archives_and_sends_nothing(
    tmp_path: Path, store: str, auth_server: SmtpServer
) -> None:
    smtp = auth_server.settings(username="alice", password_file=str(tmp_path / "missing"))
    s = ServiceSettings(
        tracker=Settings(store=store),
        out_dir=str(tmp_path / "archive"),
        smtp=smtp,
        recipients=(CTO,),
    )
    result = Service(s).run(now=W49 + MONDAY_8)
    assert result.outcomes == () and auth_server.messages == []
    assert len(result.errors) == 1 and result.errors[0].startswith("smtp.password_file: ")
    assert (tmp_path / "archive" / "2026-W48.html").exists()
    (tmp_path / "missing").write_text(USERS["alice"] + "\n")  # fixed: the week is still owed
    assert [o.status for o in Service(s).run(now=W49 + MONDAY_8).outcomes] == ["sent"]


def test_the_metrics_refresh_serves_what_fixes_saved(tmp_path: Path) -> None:
    # the demo's fix of resnet-sweep, marked two weeks before its week: /metrics, as serve
    # refreshes it, shows what it saved per team and per change, as the week's JSON has it
    # (before, the refresh took the savings from the two-week read, which has none: no series)
    from reports.build import compute
    from reports.demo import run_demo
    from reports.render.exports import to_dict
    from reports.request import Request
    from reports.service.prom import KpiExporter
    from reports.service.serve import MetricsRefresher

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    now = datetime(2026, 12, 2, 9, tzinfo=UTC)
    run_demo(url, now=now)
    s = ServiceSettings(tracker=Settings(store=url), out_dir=str(tmp_path / "archive"))
    exporter = KpiExporter()
    MetricsRefresher(s, exporter)(now=now)
    got = exporter.samples()
    doc = to_dict(compute(url, Request(week="2026-W48", tz=UTC), now=now).kpis, UTC)
    assert doc["savings_by_team"], "the demo's week has a fix"
    assert dict(got["gpu_kpi_savings_usd_per_week"]) == {
        ("2026-W48", "util", t["team"]): pytest.approx(t["usd_per_week"])
        for t in doc["savings_by_team"]
    }
    fixes = {labels[3]: v for labels, v in got["gpu_kpi_fix_savings_to_date_usd"]}
    assert fixes == {c["job_key"]: pytest.approx(c["usd_to_date"]) for c in doc["savings"]}
