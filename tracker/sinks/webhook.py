"""Chat webhooks: Slack and Microsoft Teams incoming webhooks, or any URL that takes JSON. The
tracker's live alerts go to one (:class:`WebhookSink`); the service posts its weekly summary
card through :func:`post` too (:mod:`reports.service.chat`).

A webhook URL carries its secret in the path (``hooks.slack.com/services/T…/B…/XXXX``): it is
read from the environment or a file, never from argv, and shown only as its scheme and host.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from tracker.record import RunRecord

log = logging.getLogger("gpu_kpi")

KINDS = ("slack", "teams", "json")
RETRY_AFTER_MAX_S = 60.0
"""The longest ``Retry-After`` (of a 429) honoured; a longer one fails the post."""


class WebhookError(Exception):
    """A post that did not get through: one line, the URL shown by its host only.
    ``temporary``: worth trying again later (429, 5xx, no connection), not a refusal."""

    def __init__(self, message: str, *, temporary: bool = False) -> None:
        super().__init__(message)
        self.temporary = temporary


def shown(url: str) -> str:
    """The URL as it may be logged: scheme and host, the secret path left out (``?`` for what
    cannot be read as a URL)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        scheme = parts.scheme if parts.scheme in ("http", "https") else "?"
    except ValueError:
        return "?://?/…"
    return f"{scheme}://{host if host.isascii() and host.isprintable() else '?'}/…"


def check_url(url: str) -> None:
    """:class:`WebhookError` (the URL shown by :func:`shown`) unless ``url`` is an http(s) URL
    urllib can send to: no blank or control character (a comment pasted after it), a port
    that is a number, ASCII only."""
    try:
        parts = urlsplit(url)
        _ = parts.port
        ok = (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and url.isascii()
            and url.isprintable()
            and " " not in url
        )
    except ValueError:
        ok = False
    if not ok:
        raise WebhookError(
            f"webhook {shown(url)}: not a valid http(s) URL (a blank, a "
            "control character, a bad port, not ASCII?)"
        )


def kind_of(url: str) -> str:
    """``slack`` for ``hooks.slack.com``, ``teams`` for a Teams incoming webhook or workflow
    (``*.webhook.office.com``, ``*.logic.azure.com``, ``*.powerplatform.com``), else ``json``."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return "json"
    if host == "hooks.slack.com":
        return "slack"
    if host.endswith((".webhook.office.com", ".logic.azure.com", ".powerplatform.com")):
        return "teams"
    return "json"


def _slack_text(text: str) -> str:
    """Slack's control characters escaped: a run name cannot make a link or a mention."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _teams_text(text: str) -> str:
    """Text for a Teams card's text block, which reads a little Markdown and shows a
    backslash escape as it is: a link (``[x](url)``, ``<url>``), emphasis (``*``, ``_``) and
    a heading cannot be made from the user's text (a zero-width space breaks each), and each
    line is a paragraph (a single line break would be lost)."""
    for mark in ("](", "<", "*", "_", "#", "~"):
        text = text.replace(mark, mark[0] + "\u200b" + mark[1:])
    return "\n\n".join(text.split("\n"))


def message(
    kind: str,
    title: str,
    text: str,
    *,
    facts: Sequence[tuple[str, str]] = (),
    link: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON body of a post: a title, a text, name-value ``facts`` and a ``link`` (label,
    URL), shaped for ``kind`` (Slack blocks, a Teams Adaptive Card, or plain JSON). Every
    user-supplied string is escaped for the chat's markup."""
    if kind == "slack":
        lines = [
            f"*{_slack_text(title)}*",
            *(f"• {_slack_text(k)}: {_slack_text(v)}" for k, v in facts),
            _slack_text(text),
        ]
        if link is not None:
            lines.append(f"<{_slack_text(link[1])}|{_slack_text(link[0])}>")
        body = "\n".join(line for line in lines if line)
        return {
            "text": body,
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": body}}],
        }
    if kind == "teams":
        card: dict[str, Any] = {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": [
                {
                    "type": "TextBlock",
                    "text": _teams_text(title),
                    "weight": "Bolder",
                    "size": "Medium",
                    "wrap": True,
                }
            ],
        }
        if facts:
            card["body"].append(
                {
                    "type": "FactSet",
                    "facts": [{"title": _teams_text(k), "value": _teams_text(v)} for k, v in facts],
                }
            )
        card["body"].append({"type": "TextBlock", "text": _teams_text(text), "wrap": True})
        if link is not None:
            card["actions"] = [{"type": "Action.OpenUrl", "title": link[0], "url": link[1]}]
        return {
            "type": "message",
            "attachments": [
                {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
            ],
        }
    return {
        "source": "gpu-kpi",
        "title": title,
        "text": text,
        "facts": dict(facts),
        **({"link": link[1]} if link is not None else {}),
    }


def post(
    url: str,
    body: Mapping[str, Any],
    *,
    timeout_s: float = 30.0,
    retries: int = 3,
    backoff_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    total_s: float | None = None,
    stopping: Callable[[], bool] | None = None,
) -> None:
    """POST ``body`` as JSON.

    A 429 waits its ``Retry-After`` (at most :data:`RETRY_AFTER_MAX_S`), a 5xx or no
    connection ``backoff_s`` doubling, up to ``retries`` times; another status fails at once,
    and so does a post sent but not answered in time (it may have arrived: a chat shows a card
    twice, never).

    Args:
        url: The webhook.
        body: The JSON message.
        timeout_s: The most one receive may wait.
        retries: Attempts after the first.
        backoff_s: The first wait after a 5xx or no connection.
        sleep: Waits (injected in tests).
        total_s: The most the whole post may take, attempts, waits and the answer's reading
            included (a server that drips its answer held the weekly job for 15 minutes);
            None: no bound but the others.
        stopping: True once the caller stops (SIGTERM): no further attempt or wait.

    Raises:
        WebhookError: It did not get through; it names the webhook by its host only.
    """
    check_url(url)
    data = json.dumps(body).encode()
    deadline = None if total_s is None else time.monotonic() + total_s

    def left() -> float:
        return timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())

    for attempt in range(retries + 1):
        if stopping is not None and stopping():
            raise WebhookError(f"webhook {shown(url)}: stopped before it was sent", temporary=True)
        request = urllib.request.Request(
            url,
            data=data,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "gpu-kpi"},
        )
        try:
            with _OPENER.open(request, timeout=max(0.1, left())) as response:
                read = 0
                while read < 65_536 and (chunk := response.read1(65_536 - read)):
                    read += len(chunk)  # as it comes: the deadline holds for a drip too
                    if left() <= 0:
                        raise TimeoutError
                return
        except urllib.error.HTTPError as e:
            status, wait = e.code, backoff_s * 2**attempt
            if status == 429:
                wait = _retry_after(e.headers.get("Retry-After"), wait)
                if wait > RETRY_AFTER_MAX_S:
                    raise WebhookError(
                        f"webhook {shown(url)}: HTTP 429, retry after {wait:.0f} s", temporary=True
                    ) from None
            elif status < 500:  # a redirect too: never followed
                raise WebhookError(f"webhook {shown(url)}: HTTP {status}") from None
            why = f"HTTP {status}"
        except (TimeoutError, urllib.error.URLError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                # sent, maybe received: once is the rule, so never again by itself
                bound = timeout_s if total_s is None else min(timeout_s, total_s)
                raise WebhookError(
                    f"webhook {shown(url)}: no whole answer within {bound:g} s; "
                    "the message may have arrived, so it is not sent again "
                    "by itself"
                ) from None
            why, wait = f"cannot connect ({type(reason).__name__})", backoff_s * 2**attempt
        except Exception as e:  # whatever else urllib raises may quote the secret URL
            raise WebhookError(f"webhook {shown(url)}: {type(e).__name__}") from None
        if attempt == retries:
            raise WebhookError(
                f"webhook {shown(url)}: {why} after {retries + 1} tries", temporary=True
            )
        if deadline is not None and time.monotonic() + wait >= deadline:
            raise WebhookError(
                f"webhook {shown(url)}: {why} after {attempt + 1} tries, and no time left to "
                f"try again within {total_s:g} s",
                temporary=True,
            )
        if stopping is None:
            sleep(wait)
            continue
        until = time.monotonic() + wait
        while (remaining := until - time.monotonic()) > 0:  # a stop ends the wait
            if stopping():
                raise WebhookError(f"webhook {shown(url)}: stopped while waiting", temporary=True)
            sleep(min(remaining, 0.5))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a new address to send the message to."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _retry_after(value: str | None, default: float) -> float:
    """Seconds from a ``Retry-After`` header's number (a date or nothing: ``default``)."""
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


class WebhookSink:
    """The run's alerts (low utilization, idle) posted to a chat webhook, in order, from a
    thread of the sink's own so that training never waits on the network; a failed post costs
    one warning."""

    name = "webhook"

    def __init__(self, url: str, *, kind: str | None = None, **post_args: Any) -> None:
        check_url(url)  # a bad URL is said at the start, once, and costs only the webhook
        self.url = url
        self.kind = kind or kind_of(url)
        self.post_args = post_args
        self._queue: queue.SimpleQueue[Mapping[str, Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._record: RunRecord | None = None

    def start(self, record: RunRecord) -> None:
        self._record = record

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def summary(self, record: RunRecord) -> None:
        pass

    def alert(self, title: str, text: str) -> None:
        r = self._record
        facts = (
            []
            if r is None
            else [
                (k, v)
                for k, v in (
                    ("project", r.project),
                    ("team", r.team),
                    ("user", r.user),
                    ("host", r.host),
                )
                if v
            ]
        )
        link = next(
            (
                (label, r.links[key])
                for key, label in (("wandb", "Open in W&B"), ("tensorboard", "TensorBoard"))
                if r and r.links.get(key) and r.links[key].startswith(("http://", "https://"))
            ),
            None,
        )
        self._queue.put(message(self.kind, f"gpu-kpi: {title}", text, facts=facts, link=link))
        if self._thread is None:
            self._thread = threading.Thread(target=self._posts, daemon=True, name="gpu-kpi-webhook")
            self._thread.start()

    def _posts(self) -> None:
        while (body := self._queue.get()) is not None:
            try:
                post(self.url, body, **self.post_args)
            except Exception as e:
                log.warning("gpu-kpi: the alert did not reach the webhook: %s", e)

    def close(self) -> None:
        """Send what is queued, waiting 5 s at most (a short run's alert at its end); a post
        still under way goes on in the background."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5.0)
