"""Settings: defaults < TOML < GPU_KPI_* environment < arguments; errors name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker.config import ConfigError, load_settings, read_settings


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gpu-kpi.toml"
    p.write_text(text)
    return p


def test_precedence(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'store = "sqlite:///a.db"\n[tracker]\ninterval_s = 2\n'
        "[thresholds]\ntarget_util_pct = 80\n[prices]\nH100 = 2.5\nT4 = 0.4\n"
        '[smtp]\nhost = "mail"\n',
    )
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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[tracker]\ninterval_s = "fast"\n', "tracker.interval_s: expected a number, got 'fast'"),
        ("[tracker]\nintervall_s = 1\n", "tracker.intervall_s: unknown setting"),
        ("[thresholds]\nidle_window_min = 2.5\n", "idle_window_min: expected a whole number"),
        ("[prices]\nH100 = -1\n", "prices.H100: expected a number between 0 and 10000, got -1"),
        ("store = [1]\n", "store: expected a non-empty string"),
        ("[tracker\n", "gpu-kpi.toml: "),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_settings(write(tmp_path, text), env={})


def test_a_price_without_a_model_is_named_and_the_others_kept(tmp_path: Path) -> None:
    """``[prices] "" = 3`` passed the check, then every report failed on it and the tracker
    dropped every override. Now: a one-line error, and for a training run only that key is
    left out (H100 keeps its $2.50)."""
    path = write(tmp_path, '[prices]\n"" = 3\nH100 = 2.5\n" " = 4\n')
    with pytest.raises(ConfigError) as e:
        load_settings(path, env={})
    assert str(e.value).split("; ") == [
        "'prices.': a GPU model's name, printable and not empty (H100)",
        "'prices. ': a GPU model's name, printable and not empty (H100)",
    ]
    assert dict(read_settings(path, env={}).prices) == {"H100": 2.5}
    with pytest.raises(ConfigError, match="'GPU_KPI_PRICE_': a GPU model's name"):
        load_settings(env={"GPU_KPI_PRICE_": "3"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (  # float() overflowed: a traceback, and tracking off for the whole run
            f"[tracker]\ninterval_s = {10**400}\n",
            "tracker.interval_s: expected a number >= 0.01, got a 401-digit number",
        ),
        (f"[prices]\nH100 = {-(10**300)}\n", "got a 301-digit number"),
        ("[tracker]\ninterval_s = nan\n", "tracker.interval_s: expected a finite number >= 0.01"),
        (  # a NUL in a path: os.stat's "embedded null byte" ended the run's tracking
            'store = "sqlite:////tmp/a\\u0000b.db"\n',
            "store: expected text without a NUL character, got 'sqlite:////tmp/a\\x00b.db'",
        ),
    ],
)
def test_values_no_parser_expected_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_settings(path, env={})
    assert message in str(e.value) and len(str(e.value)) < 200
    read_settings(path, env={})  # a training run keeps the key's default, with a warning


def test_bad_env_value_names_the_variable_key() -> None:
    with pytest.raises(
        ConfigError, match=r"tracker.warmup_steps \(from GPU_KPI_WARMUP_STEPS\): expected a number"
    ):
        load_settings(env={"GPU_KPI_WARMUP_STEPS": "many"})


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[tracker]\ninterval_s = 0\n[thresholds]\ntarget_util_pct = 0\n"
        "idle_pct = 101\n[prices]\nH100 = inf\n",
    )
    with pytest.raises(ConfigError) as e:
        load_settings(path, env={})
    assert str(e.value).split("; ") == [
        "tracker.interval_s: expected a number >= 0.01, got 0",
        "thresholds.target_util_pct: expected a number between 1 and 100, got 0",
        "thresholds.idle_pct: expected a number between 0 and 100, got 101",
        "prices.H100: expected a finite number between 0 and 10000, got inf",
    ]


def test_the_service_reads_the_same_keys_with_the_same_parser(tmp_path: Path) -> None:
    from reports.service.config import read_service_settings

    path = write(
        tmp_path,
        "[thresholds]\ntarget_util_pct = 80\nunderutilized_min_gpu_hours = 2\n"
        '[tracker]\ninterval_s = "x"\n[recipent]\nto = "a@b.c"\n',
    )
    settings, errors = read_service_settings(path, env={})
    assert errors == [
        "recipent: unknown setting (did you mean 'recipients'?)",
        "tracker.interval_s: expected a number, got 'x'",
    ]
    assert settings.thresholds().target_util_pct == 80.0
    assert settings.thresholds().underutilized_min_gpu_hours == 2.0


OWNED_AND_CARBON = """
[owned.H100]
purchase_usd = 30000
life_years = 4
power_w = 700
usd_per_kwh = 0.12
pue = 1.3
gpus = 64
[carbon]
g_per_kwh = 400
pue = 1.2
[carbon.hosts]
"dgx-eu-*" = 56
"dgx-*" = 300
"""


def test_owned_fleets_and_carbon_from_the_file(tmp_path: Path) -> None:
    from tracker.carbon import Carbon
    from tracker.owned import OwnedGpu, owned_prices

    s = load_settings(write(tmp_path, OWNED_AND_CARBON), env={})
    assert dict(s.owned) == {
        "H100": OwnedGpu(
            model="H100",
            purchase_usd=30000,
            life_years=4,
            power_w=700,
            usd_per_kwh=0.12,
            pue=1.3,
            gpus=64,
        )
    }
    assert owned_prices(s.owned)["H100"] == pytest.approx(0.964778, abs=1e-6)
    assert s.carbon == Carbon(g_per_kwh=400, pue=1.2, hosts=(("dgx-eu-*", 56), ("dgx-*", 300)))
    assert s.carbon.co2e_kg(10, "DGX-EU-3") == pytest.approx(0.672)  # 10 kWh × 1.2 × 56 g
    defaults = load_settings(write(tmp_path, ""), env={})
    assert (dict(defaults.owned), defaults.carbon) == ({}, Carbon())


def test_the_carbon_variables_beat_the_file_and_keep_its_hosts(tmp_path: Path) -> None:
    s = load_settings(
        write(tmp_path, OWNED_AND_CARBON),
        env={"GPU_KPI_CARBON_G_PER_KWH": "30", "GPU_KPI_CARBON_PUE": "1.1"},
    )
    assert (s.carbon.g_per_kwh, s.carbon.pue, s.carbon.intensity_for("dgx-eu-1")) == (30, 1.1, 56)
    with pytest.raises(ConfigError) as e:
        load_settings(env={"GPU_KPI_CARBON_G_PER_KWH": "dirty"})
    assert str(e.value) == (
        "carbon.g_per_kwh (from GPU_KPI_CARBON_G_PER_KWH): expected a number, got 'dirty'"
    )


def test_owned_and_carbon_errors_one_line_each(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[owned.H100]\npurchase_usd = 30000\nlife_years = "x"\npower_w = 700\n'
        "usd_per_kwh = 0.12\ngpu = 8\n[owned.A100]\npower_w = 400\n"
        '[carbon]\ng_per_kwh = -1\npue = 0.9\nhost = 1\n[carbon.hosts]\n"a*" = "low"\n'
        "[ownd]\n",
    )
    with pytest.raises(ConfigError) as e:
        load_settings(path, env={})
    assert str(e.value).split("; ") == [
        "ownd: unknown setting (did you mean 'owned'?)",
        "owned.H100.life_years: expected a number, got 'x'",
        "owned.H100.gpu: unknown setting (did you mean 'gpus'?)",
        "owned.A100.purchase_usd: missing (the price paid per GPU)",
        "owned.A100.life_years: missing (the service life)",
        "owned.A100.usd_per_kwh: missing (the electricity price)",
        "carbon.g_per_kwh: expected a number between 0 and 10000, got -1",
        "carbon.pue: expected a number between 1 and 10, got 0.9",
        "carbon.host: unknown setting",
        "carbon.hosts.a*: expected a number, got 'low'",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("owned = 1\n", "owned: expected a table per GPU model ([owned.H100])"),
        ("[owned]\nH100 = 2.5\n", "owned.H100: expected a table"),
        ("carbon = 400\n", "carbon: expected a table"),
        ("[carbon]\nhosts = 56\n", "carbon.hosts: expected a table of host pattern = g CO2e/kWh"),
    ],
)
def test_owned_and_carbon_must_be_tables(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, text), env={})
    assert str(e.value) == message


def test_a_training_run_leaves_a_bad_owned_model_out_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tracker.config import read_settings

    s = read_settings(
        write(tmp_path, OWNED_AND_CARBON.replace("life_years = 4", "life_years = 0")), env={}
    )
    assert dict(s.owned) == {}
    assert s.carbon.g_per_kwh == 400
    assert "owned.H100.life_years: expected a number between 0.1 and 100, got 0" in caplog.text


def test_the_service_accepts_owned_and_carbon(tmp_path: Path) -> None:
    from reports.service.config import read_service_settings

    settings, errors = read_service_settings(write(tmp_path, OWNED_AND_CARBON), env={})
    assert errors == []
    assert set(settings.tracker.owned) == {"H100"}
    assert settings.tracker.carbon.pue == 1.2


def test_one_owned_model_twice_and_overflowing_figures_are_errors(tmp_path: Path) -> None:
    """Two tables for the H100 would price its runs by one and count its hours in both lines;
    a finite but absurd figure would overflow a week's sums into inf."""
    base = "purchase_usd = 30000\nlife_years = 4\npower_w = 700\nusd_per_kwh = 0.12\n"
    path = write(
        tmp_path,
        f'[owned.H100]\n{base}[owned."H100 SXM"]\n{base}'
        f"[owned.L4]\n{base.replace('700', '1e200')}"
        "[prices]\nA100 = 1e308\n[carbon]\ng_per_kwh = 1e308\n",
    )
    with pytest.raises(ConfigError) as e:
        load_settings(path, env={})
    assert str(e.value).split("; ") == [
        "prices.A100: expected a number between 0 and 10000, got 1e+308",
        "owned.L4.power_w: expected a number between 0 and 100000, got 1e+200",
        "owned.H100 SXM: the same GPU model (H100) as owned.H100: describe each owned model once",
        "carbon.g_per_kwh: expected a number between 0 and 10000, got 1e+308",
    ]
