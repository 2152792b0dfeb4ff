"""The weekly report as an email: ``multipart/alternative`` with a real plain-text part and an
HTML part that email clients can show.

Structure::

    multipart/alternative
    ├── text/plain                  the headline figures, the top underutilized runs, the link
    └── multipart/related
        ├── text/html               CSS inlined in style="" attributes, table layout, 640 px
        └── image/png …             the charts, each with a Content-ID the HTML shows by cid:

The display strings come from :func:`reports.render.html.report_context`, so the email and the HTML
report show the same figures. Both text parts are quoted-printable (7-bit clean for any relay).
The whole message stays under :data:`SIZE_BUDGET_BYTES` (Gmail clips a message over ~100 KB):
charts are left out, least useful first, until it fits, and the email says where they are.

Every user string (run, team, verdict, advice) is escaped by Jinja2 in the HTML and shown on
one line in the text; the subject holds only the week and numbers, and the stdlib policy refuses
a header value with a line break, so no run or team name can add a header.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from email import policy as email_policy
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid, parseaddr
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from reports.kpi import WeekKpis, user_week
from reports.render.charts import CHART_NAMES
from reports.render.fmt import fmt_pct, fmt_usd, safe_http_url
from reports.render.html import CHART_ALT, dates_of, environment, report_context, sections
from reports.weeks import label_of
from tracker.text import one_line

SIZE_BUDGET_BYTES = 90_000
"""The most a message may take on the wire (CRLF line ends), charts included: Gmail clips at
~100 KB, and this leaves margin for the headers relays add."""
CHART_PREFERENCE = (
    "trend_utilization",
    "trend_spend",
    "waste_by_team",
    "trend_waste",
    "util_distribution",
)
"""Charts by usefulness: when the message is too big, the last ones go first."""
CHART_TITLES = {
    "trend_utilization": "utilization trend",
    "trend_spend": "spend trend",
    "trend_waste": "waste and idle trend",
    "util_distribution": "GPU-hours by utilization",
    "waste_by_team": "waste by team",
}
MAX_RUNS = 10
"""Underutilized runs listed in the email (the full report lists them all)."""
MAX_TEAMS = 8
MAX_SKIPPED = 5
"""Runs left out of the figures named in the email (the full report names them all)."""
MAX_NAME_CHARS = 60
MAX_ADVICE_CHARS = 200
CHART_WIDTH_PX, CHART_HEIGHT_PX = 600, 244
"""How big the 640×260 chart PNGs are shown in the 640 px message (20 px padding each side)."""


def team_folder(team: str) -> str:
    """The archive folder of a team's pages, ``teams/<slug>``: the name lower-cased with every
    run of other characters than a-z, 0-9 made one ``-``, and a hash of the name when that
    changed it or the name ends like a hash (``Research & Dev`` →
    ``teams/research-dev-1a2b3c4d``), so two teams never share a folder (short of a 32-bit
    hash collision) and no name reaches outside the archive."""
    slug = re.sub(r"[^a-z0-9]+", "-", team.lower()).strip("-")[:48]
    # a name that already looks hashed gets a hash too: "foo-1cbec737" never lands on the
    # folder of "Foo"
    if slug != team or not slug or re.search(r"-[0-9a-f]{8}$", slug):
        digest = hashlib.sha256(team.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        slug = f"{slug}-{digest}" if slug else digest
    return f"teams/{slug}"


def report_link(report_url: str | None, week: str, team: str | None = None) -> str | None:
    """``<report_url>/<week>.html`` (``<report_url>/teams/<slug>/<week>.html`` for a team's
    page) when ``report_url`` is an http(s) URL (the archive's base), else None."""
    base = safe_http_url(report_url)
    if base is None:
        return None
    parts = urlsplit(base)
    folder = f"/{team_folder(team)}" if team is not None else ""
    path = f"{parts.path.rstrip('/')}{folder}/{week}.html"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def subject_line(k: WeekKpis, week: str, scope: str | None = None) -> str:
    """``GPU efficiency 2026-W48: $1,662 spend, 80.7% utilization, $62.50 recoverable`` — the
    week and numbers, and the ``scope`` (``team nlp``) on one line when given."""
    h = k.headline
    util = "n/a" if h.utilization_pct is None else fmt_pct(h.utilization_pct)
    where = f", {one_line(scope, MAX_NAME_CHARS)}" if scope else ""
    if h.none_priced:
        return f"GPU efficiency {week}{where}: spend n/a (unpriced), {util} utilization"
    return (
        f"GPU efficiency {week}{where}: ${round(h.spend_usd):,} spend, {util} utilization, "
        f"{fmt_usd(h.waste_usd)} recoverable"
    )


def _domain(sender: str) -> str:
    """The sender's mail domain, for Message-ID and Content-IDs (no DNS lookup)."""
    domain = parseaddr(sender)[1].rpartition("@")[2]
    return domain if re.fullmatch(r"[A-Za-z0-9.-]+", domain) else "localhost"


def _email_context(
    k: WeekKpis,
    tz: tzinfo,
    report_url: str | None,
    scope: str | None = None,
    team: str | None = None,
) -> dict[str, Any]:
    """The report's display strings, trimmed for an email: the week in ``tz``, the top runs
    and teams, user strings on one line and cut to a sensible length."""
    ctx = report_context(k, {}, title="GPU efficiency report", report_url=None, generated_at=None)
    week = label_of(k.week)  # the ISO week of Monday 00:00 in tz, whatever zone it is in
    shown = week + (" so far" if k.so_far else "")
    runs = [
        {
            **r,
            "name": one_line(r["name"], MAX_NAME_CHARS),
            "team": one_line(r["team"], MAX_NAME_CHARS),
            "verdict": one_line(r["verdict"], MAX_NAME_CHARS),
            "advice": one_line(r["advice"], MAX_ADVICE_CHARS),
        }
        for r in ctx["runs"][:MAX_RUNS]
    ]
    by_team = next(b for b in ctx["breakdowns"] if b["key"] == "team")
    teams = [
        {**r, "name": one_line(r["name"], MAX_NAME_CHARS)} for r in by_team["rows"][:MAX_TEAMS]
    ]
    skipped = ctx["skipped"]
    named = [
        {
            **r,
            "name": one_line(r["name"], MAX_NAME_CHARS),
            "run_id": one_line(r["run_id"], MAX_NAME_CHARS),
        }
        for r in [*skipped["runs"], *skipped["samples"]][:MAX_SKIPPED]
    ]
    skipped = {
        "summary": skipped["summary"],
        "named": named,
        "more": len(skipped["runs"]) + len(skipped["samples"]) - len(named),
    }
    return {
        **ctx,
        "week": shown,
        "dates": dates_of(k),
        "skipped": skipped,
        "scope": one_line(scope, MAX_NAME_CHARS) if scope else "",
        "report_link": report_link(report_url, week, team) or "",
        "runs": runs,
        "more_runs": ctx["runs_to_fix"] - len(runs),
        "sections": sections(k, "email.html", brief=True),
        "text_sections": sections(k, "email.txt", brief=True),
        "teams": teams,
        "more_teams": len(k.by.get("team", ())) - len(teams),
    }


def _render(
    ctx: Mapping[str, Any], charts: Sequence[Mapping[str, str]], omitted: Sequence[str]
) -> tuple[str, str]:
    env = environment()
    context = {
        **ctx,
        "charts": charts,
        "omitted": omitted,
        "chart_width": CHART_WIDTH_PX,
        "chart_height": CHART_HEIGHT_PX,
    }
    html = env.get_template("email.html.j2").render(context)
    # the plain-text part must not be HTML-escaped: its own environment, autoescape off
    text = environment(autoescape=False).get_template("email.txt.j2").render(context)
    return str(text), str(html)


def _alternative(
    text: str,
    html: str,
    *,
    subject: str,
    sender: str,
    recipients: Sequence[str],
    date: datetime,
    domain: str,
) -> EmailMessage:
    """The headers and the ``multipart/alternative`` of a text and an HTML part."""
    msg = EmailMessage(policy=email_policy.default)
    msg["Subject"] = subject
    msg["From"] = sender
    if recipients:
        msg["To"] = ", ".join(recipients)
    msg["Date"] = format_datetime(date)
    msg["Message-ID"] = make_msgid(domain=domain)
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies
    msg.set_content(text, subtype="plain", cte="quoted-printable")
    msg.add_alternative(html, subtype="html", cte="quoted-printable")
    return msg


def _message(
    ctx: Mapping[str, Any],
    charts: Mapping[str, bytes],
    names: Sequence[str],
    *,
    subject: str,
    sender: str,
    recipients: Sequence[str],
    date: datetime,
    domain: str,
) -> EmailMessage:
    # short Content-IDs: a header line over 78 characters is folded, which some parsers
    # (CPython's among them) read back with the fold's leading space
    shown = [
        {
            "name": n,
            "cid": f"{n}.{secrets.token_hex(8)}@{domain}",
            "alt": CHART_ALT.get(n, n.replace("_", " ")),
        }
        for n in names
    ]
    omitted = [CHART_TITLES.get(n, n.replace("_", " ")) for n in charts if n not in names]
    text, html = _render(ctx, shown, omitted)
    msg = _alternative(
        text, html, subject=subject, sender=sender, recipients=recipients, date=date, domain=domain
    )
    _, html_part = msg.iter_parts()
    for chart in shown:
        html_part.add_related(
            charts[chart["name"]],
            maintype="image",
            subtype="png",
            cid=f"<{chart['cid']}>",
            disposition="inline",
            filename=f"{chart['name']}.png",
        )
    return msg


def wire_size(msg: EmailMessage) -> int:
    """Bytes the message takes on the wire (SMTP: CRLF line ends)."""
    return len(msg.as_bytes(policy=email_policy.SMTP))


def build_email(
    k: WeekKpis,
    charts: Mapping[str, bytes],
    *,
    tz: tzinfo,
    sender: str = "gpu-kpi@localhost",
    recipients: Sequence[str] = (),
    report_url: str | None = None,
    subject: str | None = None,
    scope: str | None = None,
    team: str | None = None,
    now: datetime | None = None,
) -> EmailMessage:
    """The week's report as an email (see the module docstring for its parts).

    ``charts``: PNG bytes by name, from :func:`reports.render.charts.charts`; as many are attached as
    keep the message under :data:`SIZE_BUDGET_BYTES`, the least useful left out first
    (:data:`CHART_PREFERENCE`). ``tz``: the report's time zone (the week label and dates).
    ``report_url``: the archive's base URL; the email links ``<report_url>/<week>.html`` when it
    is http(s), and nothing otherwise. ``subject``: defaults to :func:`subject_line`; a value with
    a line break is refused (ValueError). ``scope``: what the figures cover when not the whole
    fleet (``team nlp``), in the subject and the heading; ``team``: the link opens that team's
    page (:func:`team_folder`). ``now``: the Date header (default: the current time)."""
    ctx = _email_context(k, tz, report_url, scope, team)
    known = [n for n in CHART_NAMES if n in charts]
    names = known + [n for n in charts if n not in known]  # the report's order
    keep = sorted(
        names,
        key=lambda n: CHART_PREFERENCE.index(n) if n in CHART_PREFERENCE else len(CHART_PREFERENCE),
    )
    date = (now or datetime.now(UTC)).astimezone(tz)
    options: dict[str, Any] = {
        "subject": subject_line(k, ctx["week"], scope) if subject is None else subject,
        "sender": sender,
        "recipients": list(recipients),
        "date": date,
        "domain": _domain(sender),
    }
    while True:
        msg = _message(ctx, charts, [n for n in names if n in keep], **options)
        if not keep or wire_size(msg) <= SIZE_BUDGET_BYTES:
            return msg
        keep.pop()


def build_runs_email(
    k: WeekKpis,
    user: str,
    *,
    tz: tzinfo,
    sender: str = "gpu-kpi@localhost",
    recipients: Sequence[str] = (),
    report_url: str | None = None,
    now: datetime | None = None,
) -> EmailMessage | None:
    """One engineer's underutilized runs of the week (those with ``user``), with each run's
    verdict, advice and links; None when there are none. No charts: a short, personal list."""
    k = user_week(k, user)  # their rows alone: nobody else's run can reach the message
    mine = k.underutilized
    if mine.empty:
        return None
    ctx = _email_context(k, tz, report_url)
    waste = sum(float(x) for x in mine["waste_usd"])
    ctx = {
        **ctx,
        "user": one_line(user, MAX_NAME_CHARS),
        "count": len(mine),
        "waste": fmt_usd(waste),
    }
    env = environment()
    html = env.get_template("runs_email.html.j2").render(ctx)
    text = environment(autoescape=False).get_template("runs_email.txt.j2").render(ctx)
    subject = (
        f"GPU efficiency {ctx['week']}: {len(mine)} of your runs under "
        f"{ctx['thresholds']['underutilized']} utilization, {fmt_usd(waste)} recoverable"
    )
    return _alternative(
        str(text),
        str(html),
        subject=subject,
        sender=sender,
        recipients=recipients,
        date=(now or datetime.now(UTC)).astimezone(tz),
        domain=_domain(sender),
    )
