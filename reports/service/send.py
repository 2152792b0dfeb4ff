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
    """Mail one week's report now (``gpu-kpi send``), outside the delivery log.

    Args:
        service: The service (settings, store, mailer).
        label: The week, ``YYYY-Www``.
        to: The addresses; the first one is the recipient the report is made for.
        kind: ``summary``, ``team`` or ``runs``.
        team: The team of a ``team`` report.
        user: The user of a ``runs`` report.
        now: The current time (timezone-aware); None for the clock's.
        dry_run: Write the message to ``<dry_run>/<week>.eml`` instead of sending it (through
            :func:`reports.userfiles.write_file`: a symlink there is followed, a FIFO written).
        timeout_s: Give up after this many seconds, retries and their waits included.
        retry: False for one attempt only.

    Returns:
        The ``.eml`` written by a dry run; None when the message was sent.

    Raises:
        NothingToSend: The report would be empty (a team without GPU time, a user without
            underutilized runs).
        ConfigError: The SMTP settings cannot make a mailer.
        reports.errors.UsageError: A dry run's file cannot be written.
        reports.service.mailer.MailError: The message was not delivered.
    """
    from reports.userfiles import write_file

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
        write_file(path, msg.as_bytes(), flag="--out")
        return path
    mailer, errors = service._open_mailer(total_s=timeout_s, retry=retry)
    if mailer is None:
        raise ConfigError(errors[0])
    mailer.send(msg, list(to))
    return None


def _file_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
