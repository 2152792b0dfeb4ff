"""The weekly report's email: its MIME structure read back from bytes, hand-computed figures in
the text part, escaping, the size budget, and delivery through a real SMTP server."""

from __future__ import annotations

import email
import email.policy
import io
import random
import smtplib
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from email.message import EmailMessage, Message
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import readers
from fakes import run_record as run

from reports import kpi as kpis
from reports.demo import fleet_history
from reports.render.charts import CHART_NAMES, charts
from reports.render.email import (
    CHART_PREFERENCE,
    SIZE_BUDGET_BYTES,
    build_email,
    report_link,
    team_folder,
    wire_size,
)
from tracker.record import RunRecord

W48 = datetime(2026, 11, 23, tzinfo=UTC)  # Monday of ISO week 2026-W48
W47 = W48 - timedelta(days=7)
NOW = W48 + timedelta(days=8, hours=8)  # the Tuesday after
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EVIL_RUN = "<script>alert(1)</script>"
EVIL_TEAM = "vision\nBcc: victim@example.com"
ARCHIVE = "https://reports.example.com/gpu/"
LINK = "https://reports.example.com/gpu/2026-W48.html"


def week(runs: list[RunRecord], at: datetime = W48, tz: tzinfo = UTC) -> kpis.WeekKpis:
    return kpis.week_kpis(kpis.runs_frame(runs), kpis.samples_frame([]), at, tz=tz, now=NOW)


def small_week() -> kpis.WeekKpis:
    """W48: 14 GPU-h at $3.85 — 10 h at 90% and 4 GPU-h at 10% (hostile names); W47: 7 h at 50%."""
    return week(
        [
            run("p", W47, 7, util=50.0, name="llama-sft-old", team="R&D"),
            run(
                "a",
                W48,
                10,
                util=90.0,
                name="llama-sft",
                team="R&D",
                project="llm",
                user="ana",
                verdict="healthy",
                links={"wandb": "https://wandb.ai/acme/llm/runs/a1"},
            ),
            run(
                "b",
                W48 + timedelta(days=1),
                1,
                gpus=4,
                util=10.0,
                name=EVIL_RUN,
                team=EVIL_TEAM,
                project="vision",
                user="ben",
                verdict="input-bound",
                advice="<b>more</b> DataLoader workers",
                links={
                    "wandb": "https://wandb.ai/acme/vision/runs/b2",
                    "tensorboard": "javascript:alert(1)",
                },
            ),
        ]
    )


def realistic_week() -> kpis.WeekKpis:
    """The demo fleet's 12 weeks (6 jobs a week, 4 teams) plus 9 more runs in W48: 15 runs."""
    records = fleet_history(W48 - timedelta(days=7 * 11), 12)
    rng = random.Random(7)
    teams = ["nlp", "vision", "research", "search"]
    models = [("H100", 8, 3.85), ("A100-80GB", 4, 2.00), ("L4", 1, 0.80), ("H200", 2, 4.50)]
    for i in range(9):
        model, gpus, price = models[i % len(models)]
        util = rng.uniform(5, 95)
        bad = util < 50
        records.append(
            run(
                f"extra-{i}",
                W48 + timedelta(hours=rng.uniform(0, 120)),
                rng.uniform(1, 12),
                gpus=gpus,
                util=util,
                model=model,
                price=price,
                team=teams[i % 4],
                project=f"project-{i % 3}",
                user=rng.choice(["ana", "ben", "chen", "dana"]),
                name=f"{teams[i % 4]}-experiment-{i:02d}-lr{rng.choice(['1e-4', '3e-4'])}",
                verdict="input-bound" if bad else "healthy",
                advice="Raise DataLoader num_workers and pin memory." if bad else None,
                links={"wandb": f"https://wandb.ai/acme/runs/x{i}"},
            )
        )
    return week(records)


@pytest.fixture(scope="module")
def small() -> tuple[kpis.WeekKpis, dict[str, bytes]]:
    k = small_week()
    return k, charts(k)


@pytest.fixture(scope="module")
def realistic() -> tuple[kpis.WeekKpis, dict[str, bytes]]:
    k = realistic_week()
    return k, charts(k)


def parsed(msg: EmailMessage) -> EmailMessage:
    """The message as a client gets it: its bytes, parsed back."""
    out = email.message_from_bytes(msg.as_bytes(), policy=email.policy.default)
    assert isinstance(out, EmailMessage)
    return out


@dataclass
class Parts:
    text: str
    html: str
    images: dict[str, bytes]
    """Content-ID (without <>) → PNG bytes."""
    related: EmailMessage


def parts(msg: EmailMessage) -> Parts:
    """The alternative's two parts in order: text/plain, then multipart/related(text/html,
    image/png…) — or text/html alone when no chart is attached."""
    assert msg.get_content_type() == "multipart/alternative"
    plain, rich = msg.iter_parts()
    assert plain.get_content_type() == "text/plain"
    assert isinstance(plain, EmailMessage) and isinstance(rich, EmailMessage)
    if rich.get_content_type() == "text/html":
        return Parts(text=plain.get_content(), html=rich.get_content(), images={}, related=rich)
    assert rich.get_content_type() == "multipart/related"
    html_part, *image_parts = rich.iter_parts()
    assert html_part.get_content_type() == "text/html" and image_parts
    images: dict[str, bytes] = {}
    for p in image_parts:
        assert p.get_content_type() == "image/png"
        cid = str(p["Content-ID"])
        assert cid.startswith("<") and cid.endswith(">")
        assert cid[1:-1] not in images
        images[cid[1:-1]] = p.get_content()
    assert isinstance(html_part, EmailMessage)
    return Parts(
        text=plain.get_content(), html=html_part.get_content(), images=images, related=rich
    )


def cids(doc: readers.Page) -> list[str]:
    srcs = [img["src"] for img in doc.all("img")]
    assert all(s.startswith("cid:") for s in srcs)
    return [s[len("cid:") :] for s in srcs]


# -- structure ---------------------------------------------------------------------------------
def test_alternative_of_text_and_related_html_with_every_cid_matched(small: tuple) -> None:
    k, c = small
    msg = parsed(build_email(k, c, tz=UTC, recipients=["lead@example.com"], now=NOW))
    p = parts(msg)
    referenced = cids(readers.parse_html(p.html))
    assert sorted(referenced) == sorted(p.images)  # each cid has its part and each part a cid
    assert len(referenced) == len(set(referenced)) == len(CHART_NAMES)
    assert sorted(p.images.values()) == sorted(c.values())
    assert all(png.startswith(PNG_SIGNATURE) for png in p.images.values())
    for image in list(p.related.iter_parts())[1:]:
        assert image.get_content_disposition() == "inline"
        assert image["Content-Transfer-Encoding"] == "base64"
    # both text parts are 7-bit clean on the wire, whatever the relay
    assert all(b < 128 for b in build_email(k, c, tz=UTC).as_bytes())


def test_headers(small: tuple) -> None:
    k, c = small
    msg = parsed(
        build_email(
            k,
            c,
            tz=ZoneInfo("Europe/Berlin"),
            sender="GPU KPI <kpi@acme.example>",
            recipients=["lead@acme.example", "ops@acme.example"],
            now=NOW,
        )
    )
    # 86 characters: folded after "Subject:", which CPython's parser reads back with the
    # fold's space in front (mail clients unfold it away)
    assert str(msg["Subject"]).strip() == (
        "GPU efficiency 2026-W48: $54 spend, 67.1% utilization, $13.59 recoverable"
    )
    assert msg["From"].addresses[0].addr_spec == "kpi@acme.example"
    assert [a.addr_spec for a in msg["To"].addresses] == ["lead@acme.example", "ops@acme.example"]
    assert msg["Date"].datetime == NOW
    assert msg["Date"].datetime.utcoffset() == timedelta(hours=1)  # Berlin in winter
    assert str(msg["Message-ID"]).endswith("@acme.example>")
    assert msg["Auto-Submitted"] == "auto-generated"
    assert msg["MIME-Version"] == "1.0"


def test_the_subject_can_be_given_but_never_with_a_line_break(small: tuple) -> None:
    k, c = small
    assert build_email(k, c, tz=UTC, subject="GPU report")["Subject"] == "GPU report"
    with pytest.raises(ValueError, match="linefeed"):
        build_email(k, c, tz=UTC, subject="GPU report\nBcc: victim@example.com")
    with pytest.raises(ValueError, match="linefeed"):
        build_email(k, c, tz=UTC, recipients=["a@example.com\r\nBcc: victim@example.com"])


# -- the figures -------------------------------------------------------------------------------
def test_text_part_has_the_hand_computed_headline_with_change(small: tuple) -> None:
    k, c = small
    text = parts(parsed(build_email(k, c, tz=UTC, report_url=ARCHIVE))).text
    lines = text.splitlines()

    def row(label: str) -> list[str]:
        [line] = [ln for ln in lines if ln.startswith(label + " ")]
        return line[len(label) :].split()

    # W48: 14 GPU-h × $3.85; (10 × 90 + 4 × 10) / 14 = 67.14%; waste 15.40 × (1 − 10/85);
    # W47: 7 GPU-h, $26.95 at 50%, waste 26.95 × (1 − 50/85) = 11.10
    assert row("GPU-hours") == ["14.0", "GPU-h", "▲", "100.0%", "7.0", "GPU-h"]
    assert row("Spend") == ["$53.90", "▲", "100.0%", "$26.95"]
    # utilization changes in percentage points: 67.14 − 50.0 = 17.1 pp (not a relative 34.3%)
    assert row("Utilization, NVML utilization") == ["67.1%", "▲", "17.1", "pp", "50.0%"]
    assert row("Recoverable waste") == ["$13.59", "▲", "22.4%", "$11.10"]
    assert row("Idle") == ["$0.00", "n/a", "$0.00"]
    assert row("Runs") == ["2", "▲", "100.0%", "1"]
    assert lines[:2] == [
        "GPU efficiency — 2026-W48",
        "23–29 Nov 2026 · utilization basis: NVML utilization",
    ]
    assert "28.6% of the GPU-hours were in 1 underutilized run (4.0 GPU-h, $13.59" in text
    # the underutilized run: name, team, waste, verdict
    i = lines.index(f"1. {EVIL_RUN}")
    assert lines[i + 1].startswith("   team vision Bcc: victim@example.com · 4 × H100")
    assert lines[i + 2] == "   waste $13.59 · verdict: input-bound"
    assert lines[i + 3] == "   <b>more</b> DataLoader workers"
    assert f"Full report: {LINK}" in lines


def test_html_shows_the_same_figures(small: tuple) -> None:
    k, c = small
    p = parts(parsed(build_email(k, c, tz=UTC, report_url=ARCHIVE)))
    shown = " ".join(" ".join(readers.parse_html(p.html).text).split())
    for figure in (
        "14.0 GPU-h",
        "$53.90",
        "67.1%",
        "▲ 17.1 pp",
        "$13.59",
        "▲ 22.4%",
        "$26.95",
        "NVML utilization",
        "2026-W48",
        "28.6%",
        "input-bound",
    ):
        assert figure in shown and figure in p.text
    assert "Spend $53.90 ▲ 100.0% last week: $26.95" in shown


def test_week_label_and_dates_are_in_the_report_time_zone() -> None:
    # Monday 00:00 in Auckland is Sunday 11:00 UTC, still in W47 by the UTC calendar
    tz = ZoneInfo("Pacific/Auckland")
    monday = datetime(2026, 11, 23, tzinfo=tz)
    k = week([run("a", monday + timedelta(hours=1), 2, util=40.0)], at=monday, tz=tz)
    msg = parsed(build_email(k, {}, tz=tz, report_url=ARCHIVE, now=NOW))
    p = parts(msg)
    assert (
        str(msg["Subject"])
        .strip()
        .startswith("GPU efficiency 2026-W48: $8 spend, 40.0% utilization")
    )
    assert "23–29 Nov 2026" in p.text and LINK in p.text
    assert msg["Date"].datetime.utcoffset() == timedelta(hours=13)  # NZDT


# -- links -------------------------------------------------------------------------------------
def test_a_teams_link_is_its_own_page_in_a_folder_of_its_own() -> None:
    assert (
        report_link(ARCHIVE, "2026-W48", "nlp")
        == "https://reports.example.com/gpu/teams/nlp/2026-W48.html"
    )
    # a name that is not a plain slug keeps a hash of itself: two teams never share a folder,
    # and nothing in a name reaches out of the archive
    a, b = team_folder("Research & Dev"), team_folder("research-dev")
    assert a.startswith("teams/research-dev-") and len(a) == len("teams/research-dev-") + 8
    assert b == "teams/research-dev" and a != b
    assert team_folder("../../etc") == "teams/etc-" + team_folder("../../etc")[-8:]
    assert team_folder("Ünïcode") != team_folder("unicode") and "/" not in team_folder("a/b")[6:]
    assert team_folder("").startswith("teams/") and len(team_folder("")) == len("teams/") + 8
    # a name shaped like a hashed folder is hashed too: "foo-<hash of Foo>" is not Foo's folder
    foo = team_folder("Foo")
    assert team_folder(foo.removeprefix("teams/")) != foo


def test_report_link_is_the_weeks_page_under_an_http_archive() -> None:
    assert report_link(ARCHIVE, "2026-W48") == LINK
    assert report_link("https://reports.example.com/gpu", "2026-W48") == LINK
    assert report_link("http://host:8080", "2026-W01") == "http://host:8080/2026-W01.html"
    for bad in (
        None,
        "",
        "javascript:alert(1)",
        " JaVaScRiPt:alert(2)",
        "ftp://x/y",
        "/srv/reports",
        "https://",
    ):
        assert report_link(bad, "2026-W48") is None


@pytest.mark.parametrize("url", [None, "javascript:alert(1)", "data:text/html,<b>x</b>"])
def test_no_report_link_unless_http(small: tuple, url: str | None) -> None:
    k, c = small
    p = parts(parsed(build_email(k, c, tz=UTC, report_url=url)))
    assert "Full report:" not in p.text and "2026-W48.html" not in p.text
    hrefs = [a["href"] for a in readers.parse_html(p.html).all("a")]
    assert hrefs == ["https://wandb.ai/acme/vision/runs/b2"]  # the underutilized run's W&B run
    assert "javascript:" not in p.html and "data:" not in p.html


def test_report_link_in_both_parts(small: tuple) -> None:
    k, c = small
    p = parts(parsed(build_email(k, c, tz=UTC, report_url=ARCHIVE)))
    hrefs = [a["href"] for a in readers.parse_html(p.html).all("a")]
    assert hrefs.count(LINK) == 2  # the button and the footer
    assert all(h.startswith("https://") for h in hrefs)


# -- escaping and email-safe HTML --------------------------------------------------------------
def test_user_strings_are_escaped_in_html_and_plain_in_text(small: tuple) -> None:
    k, c = small
    msg = parsed(build_email(k, c, tz=UTC))
    p = parts(msg)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in p.html
    assert "&lt;b&gt;more&lt;/b&gt;" in p.html and "R&amp;D" in p.html
    doc = readers.parse_html(p.html)
    assert doc.all("script") == [] and doc.all("b") == []
    assert EVIL_RUN in doc.text and "vision Bcc: victim@example.com" in " ".join(doc.text)
    # the text part is not HTML-escaped: names as written, on one line
    assert EVIL_RUN in p.text and "<b>more</b>" in p.text and "R&D" in p.text
    assert "&lt;" not in p.text and "&amp;" not in p.text and "&#" not in p.text
    assert not any(line.startswith("Bcc:") for line in p.text.splitlines())
    # no header came from a name, at the top or in any part
    assert sorted(msg.keys()) == sorted(
        ["Subject", "From", "Date", "Message-ID", "Auto-Submitted", "MIME-Version", "Content-Type"]
    )
    for part in msg.walk():
        assert part["Bcc"] is None
        assert set(part.keys()) <= {
            "Subject",
            "From",
            "Date",
            "Message-ID",
            "Auto-Submitted",
            "MIME-Version",
            "Content-Type",
            "Content-Transfer-Encoding",
            "Content-ID",
            "Content-Disposition",
        }


def test_html_is_email_safe(realistic: tuple) -> None:
    k, c = realistic
    html = parts(parsed(build_email(k, c, tz=UTC, report_url=ARCHIVE))).html
    doc = readers.parse_html(html)
    for tag in ("style", "script", "link", "iframe", "form", "svg"):
        assert doc.all(tag) == [], tag
    assert "data:" not in html and "url(" not in html and "@import" not in html
    assert not [a for _, attrs in doc.tags for a in attrs if a.startswith("on")]
    # styles are inline on the elements that carry them, and the layout is tables
    for tag in ("h1", "h2", "p", "th"):
        assert doc.all(tag) and all("style" in a for a in doc.all(tag)), tag
    widths = [a for a in doc.all("table") if "max-width:640px" in a.get("style", "")]
    assert len(widths) == 1 and widths[0]["width"] == "640"
    for img in doc.all("img"):
        assert img["alt"] and int(img["width"]) <= 640 and "max-width" in img["style"]


# -- size --------------------------------------------------------------------------------------
def test_a_realistic_week_fits_with_every_chart(realistic: tuple) -> None:
    k, c = realistic
    assert k.headline.runs == 15 and len(k.by["team"]) == 4 and len(k.trend) == 12
    msg = build_email(k, c, tz=UTC, recipients=["lead@example.com"], report_url=ARCHIVE)
    size = len(msg.as_bytes())
    print(
        f"\nrealistic week: {size:,} bytes ({wire_size(msg):,} on the wire), "
        f"charts {sum(map(len, c.values())):,} bytes of PNG"
    )
    assert size < 100_000 and wire_size(msg) <= SIZE_BUDGET_BYTES
    p = parts(parsed(msg))
    assert len(p.images) == len(CHART_NAMES)
    assert "only in the full report" not in p.text
    # the runs to fix: every run with waste or a verdict, not only the underutilized ones
    from reports.kpi import runs_to_fix

    assert len(k.underutilized) < len(runs_to_fix(k))
    assert p.text.count("verdict: ") == min(len(runs_to_fix(k)), 10)


def noise_png(side: int, seed: int) -> bytes:
    """A PNG that does not compress: ~3 × side² bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.frombytes("RGB", (side, side), random.Random(seed).randbytes(3 * side * side)).save(
        buf, format="PNG"
    )
    return buf.getvalue()


def test_too_many_chart_bytes_keep_the_most_useful_charts(realistic: tuple) -> None:
    k, _ = realistic
    # ~13.2 KB each, ~18 KB in base64: three fit with the ~28 KB rest, four do not
    big = {name: noise_png(66, i) for i, name in enumerate(CHART_NAMES)}
    assert sum(map(len, big.values())) > 65_000
    msg = build_email(k, big, tz=UTC, report_url=ARCHIVE)
    assert wire_size(msg) <= SIZE_BUDGET_BYTES and len(msg.as_bytes()) < 100_000
    p = parts(parsed(msg))
    assert sorted(cids(readers.parse_html(p.html))) == sorted(p.images)
    kept = {next(n for n, png in big.items() if png == data) for data in p.images.values()}
    assert (
        kept == set(CHART_PREFERENCE[:3]) == {"trend_utilization", "trend_spend", "waste_by_team"}
    )
    note = " ".join(p.text.split())
    assert (
        "the waste and idle trend and GPU-hours by utilization charts are only in the full report"
    ) in note
    assert "GPU-hours by utilization charts are in the full report" in " ".join(
        " ".join(readers.parse_html(p.html).text).split()
    )


def test_a_chart_that_can_never_fit_is_left_out(small: tuple) -> None:
    k, _ = small
    msg = parsed(build_email(k, {"trend_utilization": noise_png(200, 1)}, tz=UTC))
    p = parts(msg)
    assert p.images == {} and cids(readers.parse_html(p.html)) == []
    assert "utilization trend chart is only in the full report" in " ".join(p.text.split())


# -- a real SMTP server ------------------------------------------------------------------------
@dataclass
class Inbox:
    received: list[tuple[str, list[str], bytes]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp_server() -> Iterator[tuple[int, Inbox]]:
    from aiosmtpd.controller import Controller

    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield controller.port, inbox
    finally:
        controller.stop()


def test_a_real_smtp_server_accepts_it(realistic: tuple, smtp_server: tuple[int, Inbox]) -> None:
    port, inbox = smtp_server
    k, c = realistic
    msg = build_email(
        k,
        c,
        tz=UTC,
        sender="gpu-kpi@example.com",
        recipients=["lead@example.com", "ops@example.com"],
        report_url=ARCHIVE,
    )
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
        refused = smtp.send_message(msg)
    assert refused == {}
    [(mail_from, rcpt_tos, content)] = inbox.received
    assert mail_from == "gpu-kpi@example.com"
    assert rcpt_tos == ["lead@example.com", "ops@example.com"]
    assert len(content) < 100_000
    got = email.message_from_bytes(content, policy=email.policy.default)
    assert isinstance(got, EmailMessage)
    assert got["Subject"] == parsed(msg)["Subject"]
    assert str(got["Subject"]).strip() == msg["Subject"]
    assert str(msg["Subject"]).startswith("GPU efficiency 2026-W48: $")
    # what smtplib sent: the message flattened with CRLF line ends
    sent = parts(
        email.message_from_bytes(
            msg.as_bytes(policy=email.policy.SMTP), policy=email.policy.default
        )
    )
    received = parts(got)
    assert len(received.images) == len(sent.images) == len(CHART_NAMES)
    assert received.html == sent.html and received.text == sent.text
    assert received.images == sent.images
    assert sorted(cids(readers.parse_html(received.html))) == sorted(received.images)
    assert not [m for m in got.walk() if isinstance(m, Message) and m.defects]
