"""A budget alert (a team's spend reached 80% or 100% of its budget) as an email and as a chat
card: the spend against the budget, the forecast for the period, the largest spends, the
archive's link. Team and run names are user strings: on one line, cut, and escaped by Jinja2
in the HTML (and by :func:`tracker.sinks.webhook.message` on a card)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from typing import Any

from reports.kpi.budgets import BudgetLine
from reports.render.chat import Card
from reports.render.email import MAX_NAME_CHARS, _alternative, _domain
from reports.render.fmt import budget_row, fmt_pct, fmt_usd, safe_http_url
from reports.render.html import environment
from tracker.text import one_line


def _period(b: BudgetLine) -> str:
    """``week 2026-W49`` or ``December 2026``."""
    return f"week {b.label}" if b.period == "week" else f"{b.start:%B %Y}"


def alert_context(b: BudgetLine, *, report_url: str | None) -> dict[str, Any]:
    """The alert's display strings (the templates' context)."""
    row = budget_row(b)
    team = one_line(b.team, MAX_NAME_CHARS)
    counted = b.until - timedelta(microseconds=1) if b.complete else b.until
    forecast = None
    if not b.complete and b.forecast_usd is not None:
        forecast = (
            f"At this rate the {b.period} ends at {fmt_usd(b.forecast_usd)} "
            f"({fmt_pct(b.forecast_pct, 0)} of the budget)."
        )
    return {
        "team": team,
        "period": _period(b),
        "kind": b.period,
        "spend": row["spend"],
        "budget": row["budget"],
        "used": row["used"],
        "level": b.level,
        "status": row["status"],
        "counted": f"{counted:%-d %b %H:%M} {counted.tzname() or ''}".rstrip(),
        "forecast": forecast,
        "runs": [{"name": one_line(n, MAX_NAME_CHARS), "spend": fmt_usd(v)} for n, v in b.runs],
        "link": safe_http_url(report_url) or "",
    }


def subject(b: BudgetLine) -> str:
    """``GPU budget: nlp at 84% of December 2026 ($6,720.00 of $8,000.00)``: short, as a
    header of 70 to 78 characters is folded whole onto a line of its own, which some readers
    show with a leading space."""
    c = alert_context(b, report_url=None)
    return (
        f"GPU budget: {one_line(b.team, 24)} at {c['used']} of {c['period']} "
        f"({c['spend']} of {c['budget']})"
    )


def _text(c: dict[str, Any]) -> list[str]:
    lines = [
        f"Team {c['team']} has spent {c['spend']} of its {c['budget']} budget for "
        f"{c['period']}: {c['used']}, counted to {c['counted']}."
    ]
    if c["forecast"]:
        lines.append(c["forecast"])
    if c["runs"]:
        lines += [
            "",
            f"Largest spends this {c['kind']}:",
            *(f"{i}. {r['name']}: {r['spend']}" for i, r in enumerate(c["runs"], 1)),
        ]
    return lines


def budget_email(
    b: BudgetLine,
    *,
    sender: str,
    recipients: Sequence[str],
    report_url: str | None,
    now: datetime | None = None,
) -> EmailMessage:
    """The alert as a ``multipart/alternative`` email (text and HTML, no images)."""
    c = alert_context(b, report_url=report_url)
    env = environment()
    ctx = {**c, "lines": _text(c)}
    html = env.get_template("budget_alert.html.j2").render(ctx)
    text = environment(autoescape=False).get_template("budget_alert.txt.j2").render(ctx)
    return _alternative(
        str(text),
        str(html),
        subject=subject(b),
        sender=sender,
        recipients=recipients,
        date=(now or datetime.now(UTC)).astimezone(b.until.tzinfo or UTC),
        domain=_domain(sender),
    )


def budget_card(b: BudgetLine, *, report_url: str | None) -> Card:
    """The alert as a chat card."""
    c = alert_context(b, report_url=report_url)
    facts = [("Spent", f"{c['spend']} of {c['budget']} ({c['used']})")]
    if b.forecast_usd is not None and not b.complete:
        facts.append(
            (
                f"{b.period.capitalize()} forecast",
                f"{fmt_usd(b.forecast_usd)} ({fmt_pct(b.forecast_pct, 0)})",
            )
        )
    return Card(
        title=subject(b),
        text="\n".join(_text(c)),
        facts=tuple(facts),
        link=("Open the reports", c["link"]) if c["link"] else None,
    )
