"""The weekly report as a chat card (Slack, Microsoft Teams, a JSON webhook): the headline, the
week-over-week change, the few runs to fix first and the report's link, in plain text that
:func:`tracker.sinks.webhook.message` escapes and shapes for each chat."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import tzinfo

from reports.kpi import WeekKpis, user_week
from reports.render.email import _email_context, report_link, subject_line
from reports.render.fmt import fmt_usd
from reports.weeks import label_of
from tracker.text import one_line

CARD_RUNS = 3
"""Runs to fix listed on a card: a chat message is read at a glance; the report has the rest."""
CARD_FACTS = 5


@dataclass(frozen=True, kw_only=True)
class Card:
    title: str
    text: str
    facts: tuple[tuple[str, str], ...] = ()
    link: tuple[str, str] | None = None
    """(label, URL) of the week's report page, when ``report_url`` is set."""


def _runs(runs: list[dict[str, str]], *, team: bool) -> list[str]:
    return [
        f"{i}. {r['name']}"
        + (f" ({r['team']})" if team and r.get("team") else "")
        + f": {r['utilization']} · {r['waste']} recoverable"
        + (f" · {r['verdict']}" if r.get("verdict") not in (None, "", "—") else "")
        for i, r in enumerate(runs[:CARD_RUNS], 1)
    ]


def _change(card: dict[str, str]) -> str:
    """`` (+12.0% on last week's $74.10)``, or `` (last week $0.00)`` without a change."""
    if card["change"] in ("", "n/a", "—"):
        return f" (last week {card['previous']})"
    return f" ({card['change']} on last week's {card['previous']})"


def chat_card(
    k: WeekKpis,
    *,
    tz: tzinfo,
    report_url: str | None,
    scope: str | None = None,
    team: str | None = None,
    user: str | None = None,
) -> Card | None:
    """The card of the week's report (``scope``/``team``: one team's), or of ``user``'s
    underutilized runs (None when there are none: nothing is sent)."""
    week = label_of(k.week)
    link = report_link(report_url, week, team)
    if user is not None:
        k = user_week(k, user)  # their rows alone: nobody else's run can reach the card
        mine = k.underutilized
        if mine.empty:
            return None
        ctx = _email_context(k, tz, report_url)
        waste = fmt_usd(sum(float(x) for x in mine["waste_usd"]))
        n = len(mine)
        under, target = ctx["thresholds"]["underutilized"], ctx["thresholds"]["target"]
        lede = f"{n} of your runs used their GPUs" if n != 1 else "One of your runs used its GPUs"
        text = "\n".join(
            [
                f"{lede} under {under} this week: {waste} recoverable at the {target} target.",
                *_runs(ctx["runs"], team=False),
            ]
        )
        return Card(
            title=f"GPU efficiency {week}: {n} of your runs under {under}, {waste} recoverable",
            text=text,
            link=("Open the report", link) if link else None,
        )
    ctx = _email_context(k, tz, report_url, scope=scope, team=team)
    facts = tuple(
        (
            c["label"],
            f"{c['value']}{' ' + c['unit'] if c['unit'] else ''}"
            + (_change(c) if k.previous is not None else ""),
        )
        for c in ctx["cards"][:CARD_FACTS]
    )
    lines = [one_line(ctx["lede"], 400)]
    if ctx["runs"]:
        lines += ["", "Runs to fix first:", *_runs(ctx["runs"], team=team is None)]
        if len(ctx["runs"]) > CARD_RUNS or ctx["more_runs"] > 0:
            lines.append(
                f"… and {len(ctx['runs']) - CARD_RUNS + ctx['more_runs']} more in the report"
            )
    for part in k.parts.values():
        if more := part.card_lines():
            lines += ["", *more]
    return Card(
        title=subject_line(k, week, scope),
        text="\n".join(lines),
        facts=facts,
        link=("Open the report", link) if link else None,
    )
