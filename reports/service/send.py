"""``gpu-kpi send``: one week's report mailed now, outside the schedule and the delivery log:
the summary, one team's report (``--kind team --team T``) or one engineer's runs
(``--kind runs --user U``), each as the scheduled service would send it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from reports.service.config import Recipient
from reports.service.job import Service
from reports.weeks import parse_week
from tracker.config import ConfigError


class NothingToSend(Exception):
    """The report asked for would be empty (a team without GPU time, a user without
    underutilized runs): nothing is sent, and the command says why."""


def send_now(
    service: Service,
    label: str,
    to: Sequence[str],
    *,
    kind: str = "summary",
    team: str | None = None,
    user: str | None = None,
    now: datetime | None = None,
    dry_run: Path | None = None,
    timeout_s: float | None = None,
    retry: bool = True,
) -> Path | None:
    """Mail week ``label``'s report of ``kind`` to ``to`` now; ``dry_run``: write the message to
    ``<dry_run>/<week>.eml`` instead (returned). ``timeout_s``: give up after this long, retries
    and their waits included; ``retry``: False for one attempt only. Raises
    :class:`NothingToSend` when the report would be empty."""
    from reports.archive import write_atomically

    now = now or datetime.now(UTC)
    parse_week(label)
    week = service._build(label, now)
    r = Recipient(to=to[0], report=kind, team=team, user=user)
    msg = service.message(r, week, now, to=to)
    if msg is None:
        raise NothingToSend(
            f"team {team!r} had no GPU time in {label}"
            if kind == "team"
            else f"user {user!r} had no underutilized runs in {label}"
        )
    if dry_run is not None:
        dry_run.mkdir(parents=True, exist_ok=True)
        suffix = {"team": f"-team-{team}", "runs": f"-runs-{user}"}.get(kind, "")
        path = dry_run / f"{label}{_file_safe(suffix)}.eml"
        write_atomically(path, msg.as_bytes())
        return path
    mailer, errors = service._open_mailer(total_s=timeout_s, retry=retry)
    if mailer is None:
        raise ConfigError(errors[0])
    mailer.send(msg, list(to))
    return None


def _file_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
