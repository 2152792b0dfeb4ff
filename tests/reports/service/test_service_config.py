"""The service's config: one TOML file, GPU_KPI_* variables over it, every error with its key."""

from __future__ import annotations

import os
import re
from datetime import date
from pathlib import Path

import pytest
from clirun import gpu_kpi, gpu_kpi_process

from reports.service.config import (
    Recipient,
    check_service_settings,
    load_service_settings,
    read_service_settings,
)
from tracker.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SECRET = "s3cret-Pa55word-x9"

FULL = """
store = "sqlite:///{dir}/runs.db"

[thresholds]
target_util_pct = 80
underutilized_pct = 40

[prices]
H100 = 2.49

[report]
timezone = "Europe/Berlin"
out_dir = "{dir}/archive"
report_url = "https://gpu-kpi.example.com/reports/"

[service]
schedule = "30 7 * * mon"
catch_up_weeks = 3
metrics_port = 0

[smtp]
host = "mail.example.com"
port = 2525
security = "tls"
username = "gpu-kpi"
password_file = "{dir}/smtp-password"
sender = "GPU efficiency <gpu-kpi@example.com>"

[[recipients]]
to = "cto@example.com"

[[recipients]]
to = "nlp-lead@example.com"
report = "team"
team = "nlp"

[[recipients]]
to = "alice@example.com"
report = "runs"
user = "alice"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpu-kpi.toml"
    path.write_text(text.format(dir=tmp_path))
    return path


def test_a_full_file_is_read_with_its_values(tmp_path: Path) -> None:
    s = load_service_settings(write(tmp_path, FULL), env={})
    assert s.tracker.store == f"sqlite:///{tmp_path}/runs.db"
    assert s.tracker.prices == {"H100": 2.49}
    assert s.timezone == "Europe/Berlin" and str(s.tz) == "Europe/Berlin"
    assert s.report_url == "https://gpu-kpi.example.com/reports"  # trailing slash dropped
    assert s.schedule == "30 7 * * mon" and s.catch_up_weeks == 3
    assert s.metrics_port is None  # 0 means off
    assert (s.smtp.host, s.smtp.port, s.smtp.security, s.smtp.username) == (
        "mail.example.com",
        2525,
        "tls",
        "gpu-kpi",
    )
    assert s.recipients == (
        Recipient(to="cto@example.com"),
        Recipient(to="nlp-lead@example.com", report="team", team="nlp"),
        Recipient(to="alice@example.com", report="runs", user="alice"),
    )
    assert [r.kind for r in s.recipients] == ["summary", "team:nlp", "runs:alice"]
    t = s.thresholds()
    assert (t.target_util_pct, t.underutilized_pct) == (80.0, 40.0)


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    s = load_service_settings(
        write(tmp_path, FULL),
        env={
            "GPU_KPI_SMTP_HOST": "relay.internal",
            "GPU_KPI_SMTP_PORT": "587",
            "GPU_KPI_SMTP_SECURITY": "starttls",
            "GPU_KPI_TIMEZONE": "UTC",
            "GPU_KPI_SCHEDULE": "0 9 * * tue",
            "GPU_KPI_PRICE_H100": "3.10",
        },
    )
    assert (s.smtp.host, s.smtp.port, s.smtp.security) == ("relay.internal", 587, "starttls")
    assert s.timezone == "UTC" and s.schedule == "0 9 * * tue"
    assert s.tracker.prices == {"H100": 3.10}


def test_defaults_without_a_file() -> None:
    s = load_service_settings(None, env={})
    assert (s.schedule, s.timezone, s.catch_up_weeks) == ("0 8 * * mon", "UTC", 2)
    assert (s.smtp.security, s.smtp.effective_port, s.smtp.password_env) == (
        "starttls",
        587,
        "GPU_KPI_SMTP_PASSWORD",
    )
    assert s.recipients == ()


@pytest.mark.parametrize(
    ("snippet", "key"),
    [
        ('[service]\nschedule = "0 8 * mon"\n', "service.schedule"),
        ('[service]\nschedule = "0 25 * * mon"\n', "service.schedule"),
        ('[report]\ntimezone = "Mars/Olympus"\n', "report.timezone"),
        ('[smtp]\nsecurity = "ssl"\n', "smtp.security"),
        ("[smtp]\nport = 70000\n", "smtp.port"),
        ('[smtp]\nhostname = "x"\n', "smtp.hostname"),
        ('[report]\nreport_url = "javascript:alert(1)"\n', "report.report_url"),
        ('[[recipients]]\nto = "not an address"\n', "recipients[0].to"),
        ('[[recipients]]\nto = "lead@example.com"\nreport = "team"\n', "recipients[0].team"),
        ('[[recipients]]\nreport = "summary"\n', "recipients[0].to"),
        ("[service]\ncatch_up_weeks = 1.5\n", "service.catch_up_weeks"),
    ],
)
def test_each_error_names_its_key(tmp_path: Path, snippet: str, key: str) -> None:
    _, errors = read_service_settings(write(tmp_path, snippet), env={})
    assert len(errors) == 1 and errors[0].startswith(f"{key}: "), errors
    with pytest.raises(ConfigError, match="^" + re.escape(key) + ": "):
        load_service_settings(write(tmp_path, snippet), env={})


def test_all_errors_are_reported_together(tmp_path: Path) -> None:
    text = '[service]\nschedule = "every monday"\n[report]\ntimezone = "Nowhere"\n'
    _, errors = read_service_settings(write(tmp_path, text), env={})
    assert [e.split(":")[0] for e in errors] == ["report.timezone", "service.schedule"]


def test_a_missing_password_file_is_found_by_the_check(tmp_path: Path) -> None:
    s = load_service_settings(write(tmp_path, FULL), env={})
    problems = check_service_settings(s, env={})
    assert len(problems) == 1 and problems[0].startswith("smtp.password_file: ")
    (tmp_path / "smtp-password").write_text(SECRET + "\n")
    assert check_service_settings(s, env={}) == []


def test_check_config_on_the_command_line(tmp_path: Path) -> None:
    bad = write(tmp_path, '[service]\nschedule = "61 * * * *"\n[smtp]\nsecurity = "ssl"\n')
    p = gpu_kpi("serve", "--check-config", "--config", str(bad))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert [line.split(": ")[2] for line in lines] == ["service.schedule", "smtp.security"]
    good = write(tmp_path, FULL)
    (tmp_path / "smtp-password").write_text(SECRET)
    p = gpu_kpi("serve", "--check-config", "--config", str(good))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("config OK: 3 recipient(s)")
    nxt = re.search(r"\(next: (\d{4}-\d\d-\d\d) 07:30 CES?T\)", p.stdout)  # "30 7 * * mon"
    assert nxt is not None and date.fromisoformat(nxt.group(1)).weekday() == 0
    assert SECRET not in p.stdout + p.stderr


@pytest.mark.parametrize(
    ("config", "warning"),
    [
        ("", "no [[recipients]]: the weekly job archives the report and sends it to nobody"),
        (
            '[[recipients]]\nto = "cto@example.com"\n',
            "no [smtp] table: mail goes through the built-in default, localhost:587 (starttls)",
        ),
    ],
)
def test_check_config_warns_of_what_a_valid_config_probably_did_not_mean(
    tmp_path: Path, config: str, warning: str
) -> None:
    # valid: exit 0 and "config OK", with a warning line each on stderr
    p = gpu_kpi("serve", "--check-config", "--config", str(write(tmp_path, config)))
    assert p.returncode == 0 and p.stdout.startswith("config OK: "), p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"gpu-kpi: config warning: {warning}"), line


def test_serve_refuses_a_bad_config_in_one_line(tmp_path: Path) -> None:
    bad = write(tmp_path, '[report]\ntimezone = "Atlantis/Deep"\n')
    p = gpu_kpi("serve", "--once", "--config", str(bad))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "report.timezone" in p.stderr


def test_the_password_is_in_no_help_text(tmp_path: Path) -> None:
    env = {"GPU_KPI_SMTP_PASSWORD": SECRET}
    for args in (("--help",), ("serve", "--help"), ("send", "--help")):
        p = gpu_kpi(*args, env=env)
        assert p.returncode == 0
        assert SECRET not in p.stdout + p.stderr
    assert "password" in gpu_kpi("send", "--help").stdout  # says where it comes from


@pytest.mark.parametrize("kind", ["device", "huge"])
def test_a_secret_file_that_is_no_secret_is_one_line(tmp_path: Path, kind: str) -> None:
    """``/dev/zero`` as smtp.password_file read without end; a huge file was read whole. Now
    each is one line naming the file."""
    secret = tmp_path / "smtp-password"
    if kind == "device":
        where, why = Path("/dev/zero"), "is not a regular file"
    else:
        secret.write_text("x" * (64 * 1024 + 1))
        where, why = secret, "is larger than 65,536 bytes"
    config = write(tmp_path, FULL.replace("{dir}/smtp-password", str(where)))
    p = gpu_kpi("serve", "--check-config", "--config", str(config))
    assert p.returncode == 2, p.stderr
    assert f"smtp.password_file: {where} {why}" in p.stderr
    assert p.stderr.count("\n") == 1


def test_fifos_as_secret_and_ca_files_are_one_line_each_not_a_hang(tmp_path: Path) -> None:
    """A FIFO as smtp.password_file hung ``serve --check-config`` (it waited for a writer), and
    smtp.ca_file was not checked at all. Now both are named at once (a real process: a hang
    would show as its timeout)."""
    os.mkfifo(tmp_path / "smtp-password")
    os.mkfifo(tmp_path / "ca.pem")
    text = FULL.replace('security = "tls"', f'security = "tls"\nca_file = "{tmp_path}/ca.pem"')
    p = gpu_kpi_process("serve", "--check-config", "--config", str(write(tmp_path, text)))
    assert p.returncode == 2, p.stderr
    assert f"smtp.password_file: {tmp_path}/smtp-password is not a regular file" in p.stderr
    assert f"smtp.ca_file: {tmp_path}/ca.pem is not a regular file" in p.stderr
