"""The service's settings: the tracker's file (store, prices, thresholds) plus the sections the
reports side owns, then ``GPU_KPI_*`` environment variables. Every error names its key.

```toml
store = "postgresql://gpu_kpi@db.internal/gpu_kpi"

[report]
timezone = "Europe/Berlin"
out_dir = "/var/lib/gpu-kpi/reports"
report_url = "https://gpu-kpi.internal/reports"   # the emails link <report_url>/<week>.html
basis = "util"                                    # or "sm_active"

[service]
schedule = "0 8 * * mon"      # cron (minute hour day month weekday), in the report time zone
misfire_grace_h = 12          # a run missed by up to this long still happens (coalesced)
catch_up_weeks = 2            # after downtime, send at most this many missed weeks
retry_after_min = 60          # a delivery that failed for a temporary reason is tried again
metrics_port = 9464           # Prometheus /metrics; absent or 0: off
metrics_host = "127.0.0.1"
http_port = 8080              # the archive over HTTP, read-only; absent or 0: off
http_host = "127.0.0.1"       # behind a reverse proxy; "0.0.0.0" to serve other hosts
http_user = "reports"         # optional basic auth; password: GPU_KPI_HTTP_PASSWORD or
http_password_file = "/etc/gpu-kpi/http-password"

[smtp]
host = "smtp.example.com"
port = 587
security = "starttls"         # starttls | tls | none
username = "gpu-kpi"
password_file = "/etc/gpu-kpi/smtp-password"   # or the variable GPU_KPI_SMTP_PASSWORD
sender = "GPU efficiency <gpu-kpi@example.com>"

[[recipients]]                # who gets what: summary, a team's report, a user's own runs
to = "cto@example.com"
report = "summary"

[[recipients]]
to = "nlp-lead@example.com"
report = "team"
team = "nlp"

[[recipients]]
to = "alice@example.com"
report = "runs"
user = "alice"

[[recipients]]                # a chat channel: Slack, Teams or JSON webhook (kind from the host)
chat = "#ml-platform"
webhook_env = "GPU_KPI_WEBHOOK_ML_PLATFORM"   # or webhook_file = "/etc/gpu-kpi/slack-url"
report = "summary"

[[budgets]]                   # the report shows spend against it; 80% and 100% alert once
team = "nlp"                  # each, to the summary's and the team's recipients
usd_per_month = 8000          # and/or usd_per_week; periods in the report time zone
```

The SMTP password is never a setting: it is read, when a message is sent, from the variable named
by ``smtp.password_env`` (default ``GPU_KPI_SMTP_PASSWORD``) or the file ``smtp.password_file``;
a chat webhook's URL, a secret too, likewise from its ``webhook_env`` or ``webhook_file``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import tzinfo
from email.utils import parseaddr
from pathlib import Path
from typing import Any

from reports.kpi.budgets import Budget
from reports.service.mailer import SECURITY_MODES, SmtpSettings
from tracker.config import (
    ConfigError,
    Errors,
    Key,
    Sections,
    Settings,
    choice,
    config_path,
    flag,
    number,
    read_sections,
    read_toml,
    read_tracker,
    text,
    whole,
)
from tracker.cost import Thresholds, thresholds_for

REPORT_KINDS = ("summary", "team", "runs")
"""summary: the whole week's email (management); team: the same report for one team's runs
(a team lead); runs: one user's underutilized runs with their verdict and advice (an engineer)."""


@dataclass(frozen=True, kw_only=True)
class Recipient:
    to: str | None = None
    """An email address; or a chat webhook (``chat``)."""
    report: str = "summary"
    team: str | None = None
    user: str | None = None
    chat: str | None = None
    """A chat webhook's name (``#nlp-alerts``): the delivery log's name for it, never the URL."""
    webhook_env: str | None = None
    """The variable holding the webhook URL (a secret, read when sending)."""
    webhook_file: str | None = None
    """Or the file holding it."""
    webhook_kind: str | None = None
    """``slack``, ``teams`` or ``json``; default: from the URL's host."""
    budget_alerts: bool = True
    """A summary or team recipient gets the budget alerts (of every team, of its team)."""

    @property
    def address(self) -> str:
        """Who the delivery log says got it: the email address, or ``chat:<name>``."""
        return self.to if self.to is not None else f"chat:{self.chat}"

    @property
    def kind(self) -> str:
        """The delivery log's report kind: ``summary``, ``team:<team>`` or ``runs:<user>``."""
        if self.report == "team":
            return f"team:{self.team}"
        if self.report == "runs":
            return f"runs:{self.user}"
        return self.report


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    tracker: Settings = field(default_factory=Settings)
    """The store, prices and thresholds (shared with the tracker)."""
    timezone: str = "UTC"
    out_dir: str = "reports-out"
    report_url: str | None = None
    basis: str = "util"
    schedule: str = "0 8 * * mon"
    misfire_grace_h: float = 12.0
    catch_up_weeks: int = 2
    retry_after_min: float = 60.0
    budget_check_min: float = 15.0
    """How often ``serve`` checks the teams' spend against ``budgets`` for alerts."""
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    http_host: str = "127.0.0.1"
    http_port: int | None = None
    """The archive served read-only over HTTP (:mod:`reports.service.archive_http`)."""
    http_user: str | None = None
    http_password_file: str | None = None
    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    recipients: tuple[Recipient, ...] = ()
    budgets: tuple[Budget, ...] = ()

    @property
    def tz(self) -> tzinfo:
        from reports.weeks import zone

        return zone(self.timezone)

    def thresholds(self) -> Thresholds:
        """The KPI thresholds of the basis (:func:`tracker.cost.thresholds_for`)."""
        return thresholds_for(self.basis, self.tracker.thresholds)


# -- reading: the tracker's parsers (tracker.config), with the sections this side owns ---------
def _zone(value: object) -> str:
    from reports.weeks import WeekError, zone

    name = text(value)
    try:
        zone(name)
    except WeekError as e:
        raise ValueError(str(e)) from None
    return name


def _url(value: object) -> str:
    url = text(value)
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"expected an http(s) URL, got {value!r}")
    return url.rstrip("/")


def parse_address(value: object) -> str:
    address = text(value)
    _, addr = parseaddr(address)
    if "@" not in addr or any(c in address for c in "\r\n"):
        raise ValueError(f"expected an email address, got {value!r}")
    return address


def _schedule(value: object) -> str:
    from reports.service.scheduler import parse_schedule

    expr = text(value)
    parse_schedule(expr, "UTC")  # ValueError with APScheduler's reason
    return expr


SERVICE_SECTIONS: Sections = {
    "report": {
        "timezone": Key(_zone, "TIMEZONE"),
        "out_dir": Key(text, "OUT_DIR"),
        "report_url": Key(_url, "REPORT_URL"),
        "basis": Key(choice(("util", "sm_active")), "BASIS"),
    },
    "service": {
        "schedule": Key(_schedule, "SCHEDULE"),
        "misfire_grace_h": Key(number(0)),
        "catch_up_weeks": Key(whole(0, 52), "CATCH_UP_WEEKS"),
        "retry_after_min": Key(number(1)),
        "budget_check_min": Key(number(1, 1440)),
        "metrics_host": Key(text, "METRICS_HOST"),
        "metrics_port": Key(whole(0, 65535), "METRICS_PORT"),
        "http_host": Key(text, "HTTP_HOST"),
        "http_port": Key(whole(0, 65535), "HTTP_PORT"),
        "http_user": Key(text, "HTTP_USER"),
        "http_password_file": Key(text, "HTTP_PASSWORD_FILE"),
    },
    "smtp": {
        "host": Key(text, "SMTP_HOST"),
        "port": Key(whole(1, 65535), "SMTP_PORT"),
        "security": Key(choice(SECURITY_MODES), "SMTP_SECURITY"),
        "username": Key(text, "SMTP_USERNAME"),
        "password_env": Key(text),
        "password_file": Key(text, "SMTP_PASSWORD_FILE"),
        "sender": Key(parse_address, "SMTP_SENDER"),
        "timeout_s": Key(number(0.1)),
        "retries": Key(whole(0, 20)),
        "backoff_s": Key(number(0)),
        "ca_file": Key(text),
    },
}
"""The reports side's keys; ``GPU_KPI_<env>`` overrides the file. The SMTP password variable
itself is read only when sending."""
_RECIPIENT_KEYS = {
    "to": parse_address,
    "report": choice(REPORT_KINDS),
    "team": text,
    "user": text,
    "chat": text,
    "webhook_env": text,
    "webhook_file": text,
    "webhook_kind": choice(("slack", "teams", "json")),
    "budget_alerts": flag,
}
_BUDGET_KEYS = {"team": text, "usd_per_week": number(0.01), "usd_per_month": number(0.01)}


def _tables(
    data: Mapping[str, Any], name: str, parsers: Mapping[str, Any], errors: Errors
) -> Iterator[tuple[str, Mapping[str, Any], dict[str, Any]]]:
    """Each table of the array ``[[name]]``: its key (``name[i]``), its raw values and those
    that parsed; every error (not an array, not a table, an unknown key, a bad value) said."""
    rows = data.get(name, [])
    if not isinstance(rows, list):
        errors.items.append(f"{name}: expected an array of tables ([[{name}]])")
        return
    for i, row in enumerate(rows):
        key = f"{name}[{i}]"
        if not isinstance(row, Mapping):
            errors.items.append(f"{key}: expected a table")
            continue
        values: dict[str, Any] = {}
        for k, v in row.items():
            parser = parsers.get(k)
            if parser is None:
                errors.unknown(f"{key}.{k}", k, parsers)
            elif (parsed := errors.parse(f"{key}.{k}", parser, v)) is not None:
                values[k] = parsed
        yield key, row, values


def _recipients(data: Mapping[str, Any], errors: Errors) -> tuple[Recipient, ...]:
    out: list[Recipient] = []
    for key, row, values in _tables(data, "recipients", _RECIPIENT_KEYS, errors):
        report = values.get("report", "summary")
        if "to" not in row and "chat" not in row:
            errors.items.append(
                f"{key}.to: missing (the recipient's address; or chat = a webhook's name)"
            )
            continue
        if "to" in row and "chat" in row:
            errors.items.append(
                f"{key}: needs either to (an email address) or chat (a webhook's "
                "name with webhook_env or webhook_file), not both"
            )
            continue
        if "to" not in values and "chat" not in values:
            continue  # its value was in error, and said so
        if "chat" in row and ("webhook_env" in row) == ("webhook_file" in row):
            errors.items.append(
                f"{key}: a chat recipient needs webhook_env (the variable "
                "holding its URL) or webhook_file, one of them"
            )
            continue
        if report == "team" and not values.get("team"):
            errors.items.append(f'{key}.team: missing (report = "team" needs the team)')
            continue
        if report == "runs" and not values.get("user"):
            errors.items.append(f'{key}.user: missing (report = "runs" needs the user)')
            continue
        r = Recipient(**values)
        same = next(
            (j for j, o in enumerate(out) if (o.kind, o.address) == (r.kind, r.address)), None
        )
        if same is not None:  # one delivery-log key: the second would never be sent
            errors.items.append(
                f"{key}: the same {r.kind} to {r.address} as recipients[{same}]"
                " (give each chat its own name)"
            )
            continue
        out.append(r)
    return tuple(out)


def read_budgets(data: Mapping[str, Any], errors: Errors) -> tuple[Budget, ...]:
    """``[[budgets]]``: a team's ``usd_per_week`` and/or ``usd_per_month``, one entry a team."""
    out: dict[str, tuple[str, Budget]] = {}
    for key, row, values in _tables(data, "budgets", _BUDGET_KEYS, errors):
        if "team" not in row:
            errors.items.append(f"{key}.team: missing (the team whose runs it covers)")
        elif "usd_per_week" not in row and "usd_per_month" not in row:
            errors.items.append(f"{key}: needs usd_per_week or usd_per_month (or both)")
        elif "team" in values and values["team"] in out:
            errors.items.append(
                f"{key}.team: {values['team']!r} has a budget already "
                f"({out[values['team']][0]}): one entry a team"
            )
        elif len(values) == len(row):  # a value in error was said already
            out[values["team"]] = (key, Budget(**values))
    return tuple(b for _, b in out.values())


def read_service_settings(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    store: str | None = None,
) -> tuple[ServiceSettings, list[str]]:
    """The settings and every error found (each ``key: reason``, one line). Defaults < file <
    environment < ``store``; a value in error keeps its default."""
    env = os.environ if env is None else env
    errors = Errors()
    file = Path(path) if path is not None else config_path(env)
    data: Mapping[str, Any] = {}
    if file is not None:
        try:
            data = read_toml(file)
        except ConfigError as e:
            return ServiceSettings(), [str(e)]
    tracker = read_tracker(data, env, errors).replace(store=store)
    found = read_sections(data, SERVICE_SECTIONS, env, errors)
    service = found["service"]
    for port in ("metrics_port", "http_port"):
        if service.get(port) == 0:
            service[port] = None
    settings = ServiceSettings(
        tracker=tracker,
        **found["report"],
        **service,
        smtp=SmtpSettings(**found["smtp"]),
        recipients=_recipients(data, errors),
        budgets=read_budgets(data, errors),
    )
    return settings, errors.items


def load_service_settings(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    store: str | None = None,
) -> ServiceSettings:
    """The settings; :class:`ConfigError` (one line, every error with its key) when any is wrong."""
    settings, errors = read_service_settings(path, env=env, store=store)
    if errors:
        raise ConfigError("; ".join(errors))
    return settings


def check_service_settings(
    settings: ServiceSettings, env: Mapping[str, str] | None = None
) -> list[str]:
    """What ``serve`` would trip on later: the password (readable, present when a username is
    set), the CA file (a readable bundle), and the output directory (creatable)."""
    from reports.service.archive_http import read_auth
    from reports.service.mailer import read_password, tls_context

    problems = []
    try:
        read_password(settings.smtp, env)
    except ConfigError as e:
        problems.append(str(e))
    if settings.smtp.ca_file:
        try:
            tls_context(settings.smtp.ca_file)
        except ConfigError as e:
            problems.append(str(e))
    try:
        read_auth(settings.http_user, settings.http_password_file, env)
    except ConfigError as e:
        problems.append(str(e))
    out = Path(settings.out_dir).expanduser()
    parent = next((p for p in (out, *out.parents) if p.exists()), None)
    if parent is None or not os.access(parent, os.W_OK) or (out.exists() and not out.is_dir()):
        problems.append(f"report.out_dir: cannot write to {out}")
    return problems
