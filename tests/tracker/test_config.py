"""Settings: defaults < TOML < GPU_KPI_* environment < arguments; errors name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker.config import ConfigError, load_settings


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gpu-kpi.toml"
    p.write_text(text)
    return p


def test_precedence(tmp_path: Path) -> None:
    path = write(tmp_path, 'store = "sqlite:///a.db"\n[tracker]\ninterval_s = 2\n'
                 '[thresholds]\ntarget_util_pct = 80\n[prices]\nH100 = 2.5\nT4 = 0.4\n'
                 '[smtp]\nhost = "mail"\n')
    env = {"GPU_KPI_INTERVAL_S": "5", "GPU_KPI_PRICE_T4": "0.35"}
    s = load_settings(path, env=env, target_util_pct=90.0)
    assert s.store == "sqlite:///a.db"  # file
    assert s.interval_s == 5.0  # env beats file
    assert s.thresholds.target_util_pct == 90.0  # argument beats file
    assert dict(s.prices) == {"H100": 2.5, "T4": 0.35}
    assert s.thresholds.alert_util_pct == 70.0  # default


def test_config_path_from_env(tmp_path: Path) -> None:
    path = write(tmp_path, 'gpu = "simulated:idle"\n')
    assert load_settings(env={"GPU_KPI_CONFIG": str(path)}).gpu == "simulated:idle"


@pytest.mark.parametrize(("text", "message"), [
    ("[tracker]\ninterval_s = \"fast\"\n", "tracker.interval_s: expected a number, got 'fast'"),
    ("[tracker]\nintervall_s = 1\n", "tracker.intervall_s: unknown setting"),
    ("[thresholds]\nidle_window_min = 2.5\n", "idle_window_min: expected a whole number"),
    ("[prices]\nH100 = -1\n", "prices.H100: expected a number >= 0, got -1"),
    ("store = [1]\n", "store: expected a non-empty string"),
    ("[tracker\n", "gpu-kpi.toml: "),
])
def test_bad_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_settings(write(tmp_path, text), env={})


def test_bad_env_value_names_the_variable_key() -> None:
    with pytest.raises(ConfigError,
                       match=r"tracker.warmup_steps \(from GPU_KPI_WARMUP_STEPS\): expected a number"):
        load_settings(env={"GPU_KPI_WARMUP_STEPS": "many"})


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, '[tracker]\ninterval_s = 0\n[thresholds]\ntarget_util_pct = 0\n'
                 'idle_pct = 101\n[prices]\nH100 = inf\n')
    with pytest.raises(ConfigError) as e:
        load_settings(path, env={})
    assert str(e.value).split("; ") == [
        "tracker.interval_s: expected a number >= 0.01, got 0",
        "thresholds.target_util_pct: expected a number between 1 and 100, got 0",
        "thresholds.idle_pct: expected a number between 0 and 100, got 101",
        "prices.H100: expected a number >= 0, got inf",
    ]


def test_the_service_reads_the_same_keys_with_the_same_parser(tmp_path: Path) -> None:
    from reports.service.config import read_service_settings

    path = write(tmp_path, '[thresholds]\ntarget_util_pct = 80\nunderutilized_min_gpu_hours = 2\n'
                 '[tracker]\ninterval_s = "x"\n[recipent]\nto = "a@b.c"\n')
    settings, errors = read_service_settings(path, env={})
    assert errors == ["recipent: unknown setting (did you mean 'recipients'?)",
                      "tracker.interval_s: expected a number, got 'x'"]
    assert settings.thresholds().target_util_pct == 80.0
    assert settings.thresholds().underutilized_min_gpu_hours == 2.0
