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
```

The SMTP password is never a setting: it is read, when a message is sent, from the variable named
by ``smtp.password_env`` (default ``GPU_KPI_SMTP_PASSWORD``) or the file ``smtp.password_file``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import tzinfo
from email.utils import parseaddr
from pathlib import Path
from typing import Any

from reports.service.mailer import SECURITY_MODES, SmtpSettings
from tracker.config import ENV_PREFIX, ConfigError, Settings, config_path, read_toml, settings_from

REPORT_KINDS = ("summary", "team", "runs")
"""summary: the whole week's email (management); team: the same report for one team's runs
(a team lead); runs: one user's underutilized runs with their verdict and advice (an engineer)."""


@dataclass(frozen=True, kw_only=True)
class Recipient:
    to: str
    report: str = "summary"
    team: str | None = None
    user: str | None = None

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
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    recipients: tuple[Recipient, ...] = ()

    @property
    def tz(self) -> tzinfo:
        from reports.weeks import zone

        return zone(self.timezone)

    def thresholds(self) -> Any:
        """The KPI thresholds of the basis (:func:`reports.kpi.thresholds_for`)."""
        from reports.kpi import thresholds_for

        return thresholds_for(self.basis, self.tracker)


# -- reading ----------------------------------------------------------------------------------
# key → (section, parser). Parsers raise ValueError with the reason; the key is added here.
def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value.strip()


def _number(low: float, high: float | None = None) -> Callable[[object], float]:
    def parse(value: object) -> float:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            x = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {value!r}") from None
        if not (x >= low and (high is None or x <= high)):
            bounds = f"between {low:g} and {high:g}" if high is not None else f">= {low:g}"
            raise ValueError(f"expected a number {bounds}, got {value!r}")
        return x
    return parse


def _whole(low: int, high: int | None = None) -> Callable[[object], int]:
    number = _number(low, high)

    def parse(value: object) -> int:
        x = number(value)
        if x != int(x):
            raise ValueError(f"expected a whole number, got {value!r}")
        return int(x)
    return parse


def _choice(options: tuple[str, ...]) -> Callable[[object], str]:
    def parse(value: object) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return str(value)
    return parse


def _zone(value: object) -> str:
    from reports.weeks import WeekError, zone

    name = _text(value)
    try:
        zone(name)
    except WeekError as e:
        raise ValueError(str(e)) from None
    return name


def _url(value: object) -> str:
    text = _text(value)
    if not text.startswith(("http://", "https://")):
        raise ValueError(f"expected an http(s) URL, got {value!r}")
    return text.rstrip("/")


def parse_address(value: object) -> str:
    text = _text(value)
    _, addr = parseaddr(text)
    if "@" not in addr or any(c in text for c in "\r\n"):
        raise ValueError(f"expected an email address, got {value!r}")
    return text


def _schedule(value: object) -> str:
    from reports.service.scheduler import parse_schedule

    text = _text(value)
    parse_schedule(text, "UTC")  # ValueError with APScheduler's reason
    return text


_KEYS: dict[str, dict[str, Callable[[object], Any]]] = {
    "report": {"timezone": _zone, "out_dir": _text, "report_url": _url,
               "basis": _choice(("util", "sm_active"))},
    "service": {"schedule": _schedule, "misfire_grace_h": _number(0),
                "catch_up_weeks": _whole(0, 52), "retry_after_min": _number(1),
                "metrics_host": _text, "metrics_port": _whole(0, 65535)},
    "smtp": {"host": _text, "port": _whole(1, 65535), "security": _choice(SECURITY_MODES),
             "username": _text, "password_env": _text, "password_file": _text,
             "sender": parse_address, "timeout_s": _number(0.1), "retries": _whole(0, 20),
             "backoff_s": _number(0), "ca_file": _text},
}
_RECIPIENT_KEYS = {"to": parse_address, "report": _choice(REPORT_KINDS), "team": _text, "user": _text}
_ENV_KEYS = {  # GPU_KPI_<NAME> → (section, key)
    "TIMEZONE": ("report", "timezone"), "OUT_DIR": ("report", "out_dir"),
    "REPORT_URL": ("report", "report_url"), "BASIS": ("report", "basis"),
    "SCHEDULE": ("service", "schedule"), "CATCH_UP_WEEKS": ("service", "catch_up_weeks"),
    "METRICS_PORT": ("service", "metrics_port"), "METRICS_HOST": ("service", "metrics_host"),
    "SMTP_HOST": ("smtp", "host"), "SMTP_PORT": ("smtp", "port"),
    "SMTP_SECURITY": ("smtp", "security"), "SMTP_USERNAME": ("smtp", "username"),
    "SMTP_PASSWORD_FILE": ("smtp", "password_file"), "SMTP_SENDER": ("smtp", "sender"),
}
"""Variables that override the file; the password variable itself is read only when sending."""


class _Errors:
    def __init__(self) -> None:
        self.items: list[str] = []

    def parse(self, key: str, parser: Callable[[object], Any], value: object) -> Any:
        try:
            return parser(value)
        except ValueError as e:
            self.items.append(f"{key}: {e}")
            return None
        except ConfigError as e:
            self.items.append(str(e))
            return None


def _section(data: Mapping[str, Any], name: str, errors: _Errors,
             env: Mapping[str, str]) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, Mapping):
        errors.items.append(f"{name}: expected a table")
        table = {}
    values = dict(table)
    for var, (section, key) in _ENV_KEYS.items():
        if section == name and env.get(ENV_PREFIX + var):
            values[key] = env[ENV_PREFIX + var]
    out: dict[str, Any] = {}
    for key, value in values.items():
        parser = _KEYS[name].get(key)
        if parser is None:
            errors.items.append(f"{name}.{key}: unknown setting")
            continue
        parsed = errors.parse(f"{name}.{key}", parser, value)
        if parsed is not None:
            out[key] = parsed
    return out


def _recipients(data: Mapping[str, Any], errors: _Errors) -> tuple[Recipient, ...]:
    rows = data.get("recipients", [])
    if not isinstance(rows, list):
        errors.items.append("recipients: expected an array of tables ([[recipients]])")
        return ()
    out = []
    for i, row in enumerate(rows):
        key = f"recipients[{i}]"
        if not isinstance(row, Mapping):
            errors.items.append(f"{key}: expected a table")
            continue
        values: dict[str, Any] = {}
        for k, v in row.items():
            parser = _RECIPIENT_KEYS.get(k)
            if parser is None:
                errors.items.append(f"{key}.{k}: unknown setting")
            elif (parsed := errors.parse(f"{key}.{k}", parser, v)) is not None:
                values[k] = parsed
        report = values.get("report", "summary")
        if "to" not in values:
            if "to" not in row:
                errors.items.append(f"{key}.to: missing (the recipient's address)")
            continue
        if report == "team" and not values.get("team"):
            errors.items.append(f"{key}.team: missing (report = \"team\" needs the team)")
            continue
        if report == "runs" and not values.get("user"):
            errors.items.append(f"{key}.user: missing (report = \"runs\" needs the user)")
            continue
        out.append(Recipient(**values))
    return tuple(out)


def read_service_settings(path: str | Path | None = None, *, env: Mapping[str, str] | None = None,
                          store: str | None = None) -> tuple[ServiceSettings, list[str]]:
    """The settings and every error found (each ``key: reason``, one line). Defaults < file <
    environment < ``store``; a value in error keeps its default."""
    env = os.environ if env is None else env
    errors = _Errors()
    file = Path(path) if path is not None else config_path(env)
    data: Mapping[str, Any] = {}
    if file is not None:
        try:
            data = read_toml(file)
        except ConfigError as e:
            return ServiceSettings(), [str(e)]
    try:
        tracker = settings_from(data, env, store=store)
    except ConfigError as e:
        errors.items.append(str(e))
        tracker = Settings(store=store)
    report, service = _section(data, "report", errors, env), _section(data, "service", errors, env)
    smtp_values = _section(data, "smtp", errors, env)
    if service.get("metrics_port") == 0:
        service["metrics_port"] = None
    smtp = SmtpSettings(**smtp_values)
    settings = ServiceSettings(tracker=tracker, **report, **service, smtp=smtp,
                               recipients=_recipients(data, errors))
    return settings, errors.items


def load_service_settings(path: str | Path | None = None, *, env: Mapping[str, str] | None = None,
                          store: str | None = None) -> ServiceSettings:
    """The settings; :class:`ConfigError` (one line, every error with its key) when any is wrong."""
    settings, errors = read_service_settings(path, env=env, store=store)
    if errors:
        raise ConfigError("; ".join(errors))
    return settings


def check_service_settings(settings: ServiceSettings,
                           env: Mapping[str, str] | None = None) -> list[str]:
    """What ``serve`` would trip on later: the password (readable, present when a username is
    set) and the output directory (creatable)."""
    from reports.service.mailer import read_password

    problems = []
    try:
        read_password(settings.smtp, env)
    except ConfigError as e:
        problems.append(str(e))
    out = Path(settings.out_dir).expanduser()
    parent = next((p for p in (out, *out.parents) if p.exists()), None)
    if parent is None or not os.access(parent, os.W_OK) or (out.exists() and not out.is_dir()):
        problems.append(f"report.out_dir: cannot write to {out}")
    return problems
