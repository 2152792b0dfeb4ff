"""A chat channel as a recipient of the weekly report: its card (:mod:`reports.render.chat`)
posted to a Slack, Teams or JSON webhook (:mod:`tracker.sinks.webhook`), through the same
delivery log as an email, so each (kind, week, channel) is posted once.

The webhook URL is a secret like the SMTP password: read from the recipient's ``webhook_env``
variable or ``webhook_file`` when the card is sent, never kept in the settings or logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from reports.service.config import Recipient
from reports.service.mailer import MailError
from tracker.config import Errors, read_secret
from tracker.sinks.webhook import WebhookError, kind_of, message, post

if TYPE_CHECKING:
    from reports.render.chat import Card


CHAT_POST_S = 60.0
"""The most one card's post may take, its retries and waits included: one slow webhook held the
weekly job for a quarter of an hour, and a stop waited for it."""
CHAT_JOB_S = 300.0
"""The most a weekly job spends posting cards; the cards left are owed to the next run."""


def webhook_url(r: Recipient, env: Mapping[str, str] | None = None) -> str:
    """The recipient's webhook URL; :class:`MailError` (permanent) naming the variable or file
    when it is missing or unreadable."""
    env = os.environ if env is None else env
    where = f"recipient chat:{r.chat}"
    if r.webhook_env is not None:
        url = env.get(r.webhook_env, "").strip()
        if not url:
            raise MailError(
                f"{where}: the variable {r.webhook_env} holding its webhook URL is not set",
                temporary=False,
            )
        return url
    errors = Errors()
    url = read_secret(f"{where}.webhook_file", r.webhook_file or "", errors) or ""
    if not url:
        raise MailError("; ".join(errors.items), temporary=False)
    return url


def post_card(
    r: Recipient, card: Card, *, env: Mapping[str, str] | None = None, **post_args: object
) -> None:
    """Post ``card`` to ``r``'s webhook; :class:`MailError` when it did not get through
    (``temporary``: a 429, a 5xx or no connection, worth trying again later)."""
    url = webhook_url(r, env)
    body = message(
        r.webhook_kind or kind_of(url), card.title, card.text, facts=card.facts, link=card.link
    )
    try:
        post(url, body, **post_args)  # type: ignore[arg-type]
    except WebhookError as e:
        raise MailError(str(e), temporary=e.temporary) from None
