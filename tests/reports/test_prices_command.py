"""``gpu-kpi prices`` shows the rate the reports charge each model with the config in force (an
owned model's amortized rate, else ``[prices]``, else the table) and where it comes from, run
as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clirun import gpu_kpi

from tracker.config import load_settings
from tracker.prices import DEFAULT_PRICES, reported_price

# the demo's [owned.A100-80GB] (reports/demo.py writes it to .gpu-kpi-demo/gpu-kpi.toml)
DEMO_OWNED = """
[owned.A100-80GB]
purchase_usd = 15000
life_years = 4
power_w = 500
usd_per_kwh = 0.1
pue = 1.3
gpus = 4
"""
# purchase ÷ (life × 8766 h) + kW × $/kWh × PUE, by hand: 0.42779 + 0.065
DEMO_A100_RATE = 15000 / (4 * 8766) + 500 / 1000 * 0.10 * 1.3


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpu-kpi.toml"
    path.write_text(text)
    return str(path)


def rows(cfg: str, *args: str) -> dict[str, dict[str, Any]]:
    p = gpu_kpi("prices", "--config", cfg, "--format", "json", *args)
    assert p.returncode == 0, p.stderr
    return {r["gpu"]: r for r in json.loads(p.stdout)}


def table_line(stdout: str, gpu: str) -> str:
    (line,) = [ln for ln in stdout.splitlines() if ln.split()[0] == gpu]
    return line


def test_owned_model_at_its_amortized_rate_as_a_user_runs_it(tmp_path: Path) -> None:
    cfg = config(tmp_path, DEMO_OWNED)
    settings = load_settings(cfg)
    assert abs(DEMO_A100_RATE - 0.49279) < 1e-5
    assert reported_price("A100-80GB", None, None, {}, settings.owned)[0] == pytest.approx(
        DEMO_A100_RATE
    )

    got = rows(cfg)
    a100 = got["A100-80GB"]
    assert a100["usd_per_gpu_hour"] == pytest.approx(DEMO_A100_RATE)
    assert a100["priced_by"] == "owned" and a100["as_of"] == "user"
    assert a100["source"].startswith("owned (amortized): $15,000 over 4 y + 0.50 kW")
    assert a100["source"].endswith("= $0.493/GPU-h")
    # a model neither owned nor overridden keeps its table row
    assert got["H100"]["usd_per_gpu_hour"] == 3.85 and got["H100"]["priced_by"] == "table"
    assert "Nebius 3.85" in got["H100"]["source"] and got["H100"]["as_of"] == "2026-09"

    # the command itself, as the table a user reads
    p = gpu_kpi("prices", "--config", cfg)
    assert p.returncode == 0, p.stderr
    assert table_line(p.stdout, "A100-80GB").split()[1:4] == ["0.49", "user", "owned"]
    assert table_line(p.stdout, "H100").split()[1:3] == ["3.85", "2026-09"]
    one = gpu_kpi("prices", "--config", cfg, "--gpu", "NVIDIA A100-SXM4-80GB")
    assert one.returncode == 0, one.stderr
    assert len(one.stdout.splitlines()) == 2
    assert table_line(one.stdout, "A100-80GB").split()[1] == "0.49"


def test_config_price_shows_as_config(tmp_path: Path) -> None:
    cfg = config(tmp_path, '[prices]\nH100 = 2.5\n"MI300X" = 3.1\n' + DEMO_OWNED)
    got = rows(cfg)
    assert got["H100"] == {
        "gpu": "H100",
        "usd_per_gpu_hour": 2.5,
        "as_of": "user",
        "source": "config [prices]",
        "priced_by": "config",
    }
    assert got["MI300X"]["usd_per_gpu_hour"] == 3.1 and got["MI300X"]["priced_by"] == "config"
    assert got["A100-80GB"]["usd_per_gpu_hour"] == pytest.approx(DEMO_A100_RATE)
    assert got["A100-40GB"]["usd_per_gpu_hour"] == 1.99  # the table's, untouched
    out = gpu_kpi("prices", "--config", cfg, "--gpu", "H100").stdout
    assert table_line(out, "H100").split()[1:] == ["2.50", "user", "config", "[prices]"]


def test_owned_model_wins_over_its_own_config_price(tmp_path: Path) -> None:
    cfg = config(tmp_path, '[prices]\n"A100 80GB" = 1.7\n' + DEMO_OWNED)
    a100 = rows(cfg, "--gpu", "A100-80GB")["A100-80GB"]
    assert a100["priced_by"] == "owned"
    assert a100["usd_per_gpu_hour"] == pytest.approx(DEMO_A100_RATE)


def test_a_variant_priced_in_prices_is_rented_not_the_owned_base(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        '[prices]\n"H100 NVL" = 3.0\n\n[owned.H100]\npurchase_usd = 30000\nlife_years = 5\n'
        "power_w = 700\nusd_per_kwh = 0.12\n",
    )
    h100_rate = 30000 / (5 * 8766) + 700 / 1000 * 0.12  # PUE 1.0 by default
    got = rows(cfg)
    assert got["H100"]["priced_by"] == "owned"
    assert got["H100"]["usd_per_gpu_hour"] == pytest.approx(h100_rate)
    assert got["H100-NVL"]["priced_by"] == "config" and got["H100-NVL"]["usd_per_gpu_hour"] == 3.0
    # a model name as NVML gives it, one by one: the NVL is rented, the PCIe card (no price
    # of its own) is the owned H100
    nvl = rows(cfg, "--gpu", "NVIDIA H100 NVL")
    assert list(nvl) == ["H100-NVL"] and nvl["H100-NVL"]["usd_per_gpu_hour"] == 3.0
    pcie = rows(cfg, "--gpu", "NVIDIA H100 PCIe")
    assert list(pcie) == ["H100"] and pcie["H100"]["usd_per_gpu_hour"] == pytest.approx(h100_rate)


def test_owned_models_the_table_has_no_row_for_are_listed(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        '[owned."H200 NVL"]\npurchase_usd = 32000\nlife_years = 4\npower_w = 600\n'
        "usd_per_kwh = 0.1\n\n[owned.MI300X]\npurchase_usd = 20000\nlife_years = 4\n"
        "power_w = 750\nusd_per_kwh = 0.1\n",
    )
    p = gpu_kpi("prices", "--config", cfg, "--format", "json")
    listed = [r["gpu"] for r in json.loads(p.stdout)]
    assert listed[-2:] == ["H200-NVL", "MI300X"]  # after the table's rows
    got = rows(cfg)
    assert got["H200-NVL"]["usd_per_gpu_hour"] == pytest.approx(
        32000 / (4 * 8766) + 600 / 1000 * 0.1
    )
    assert got["H200"]["usd_per_gpu_hour"] == 4.50  # the base model is not owned
    mi = rows(cfg, "--gpu", "AMD Instinct MI300X")["MI300X"]
    assert mi["priced_by"] == "owned"
    assert mi["usd_per_gpu_hour"] == pytest.approx(20000 / (4 * 8766) + 750 / 1000 * 0.1)


@pytest.mark.parametrize(
    "text",
    ["", DEMO_OWNED, '[prices]\nH100 = 2.5\n"H100 NVL" = 3.0\n' + DEMO_OWNED],
)
def test_every_row_is_what_the_reports_charge(tmp_path: Path, text: str) -> None:
    cfg = config(tmp_path, text)
    settings = load_settings(cfg)
    got = rows(cfg)
    # every model of the table is a row, an override under the table's name for it
    assert {p.gpu for p in DEFAULT_PRICES} <= set(got)
    overridden = {"H100": 2.5, "H100-NVL": 3.0} if "[prices]" in text else {}
    assert {g: got[g]["usd_per_gpu_hour"] for g in overridden} == overridden
    assert ("A100-80GB" in got and got["A100-80GB"]["priced_by"] == "owned") == ("owned" in text)
    for gpu, row in got.items():
        charged = reported_price(gpu, None, None, settings.prices, settings.owned)[0]
        assert row["usd_per_gpu_hour"] == charged, gpu


def test_no_owned_and_no_overrides_is_the_table_as_before(tmp_path: Path) -> None:
    cfg = config(tmp_path, "")
    p = gpu_kpi("prices", "--config", cfg)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["gpu", "usd/gpu-h", "as_of", "source"]
    assert len(lines) == 1 + len(DEFAULT_PRICES)
    for line, price in zip(lines[1:], DEFAULT_PRICES, strict=True):
        assert line.split(maxsplit=3) == [
            price.gpu,
            f"{price.usd_per_gpu_hour:.2f}",
            price.as_of,
            price.source,
        ]
    got = json.loads(gpu_kpi("prices", "--config", cfg, "--format", "json").stdout)
    assert [r["gpu"] for r in got] == [p.gpu for p in DEFAULT_PRICES]
    assert {r["priced_by"] for r in got} == {"table"}


@pytest.mark.parametrize("text", ["", DEMO_OWNED])
def test_an_unknown_model_is_one_line(tmp_path: Path, text: str) -> None:
    p = gpu_kpi("prices", "--config", config(tmp_path, text), "--gpu", "NoSuchGPU")
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("gpu-kpi: error: unknown GPU model 'NoSuchGPU'")
