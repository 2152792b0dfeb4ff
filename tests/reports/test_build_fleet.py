"""Issue 11, rent or own and carbon: an owned fleet's amortized price, the rent-vs-own line and
its break-even, and kg CO2e per run, team and week, all from a config file read by
``gpu-kpi report`` (a real subprocess, a real SQLite store) and checked by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from clirun import gpu_kpi
from fakes import run_record

from tracker.store import RunStore

CONFIG = """
store = "sqlite:///{db}"

[owned.H100]
purchase_usd = 30000
life_years = 4
power_w = 700
usd_per_kwh = 0.12
pue = 1.3
gpus = 4

[carbon]
g_per_kwh = 400
pue = 1.2

[carbon.hosts]
"dgx-eu-*" = 56
"""
RATE = 30000 / (4 * 8766) + 0.7 * 0.12 * 1.3  # $0.964778 per owned H100-hour


@pytest.mark.slow  # a whole weekly report through the CLI: ~2-4 s
def test_an_owned_fleet_and_its_carbon_in_the_weekly_report(tmp_path: Path) -> None:
    """nlp: 2 x H100 for 10 h on dgx-eu-1, 60%, 14 kWh. vision: 1 x A100-80GB for 4 h on
    gpu-us-1, 90%, 1.2 kWh. W48 (UTC) is 168 h.
    - The H100 run is priced at the amortized $0.964778/GPU-h: 20 x 0.964778 = $19.30 (it ran
      with $3.85); the A100 at its $2.00: $8.00. Spend $27.30.
    - Rent or own: renting the 20 H100-hours at the table's $3.85 = $77.00; owning 4 costs
      4 x 168 x 0.964778 = $648.33. Allocation 20 / 672 = 2.98%; break-even 0.964778 / 3.85 =
      25.06%: renting is cheaper at this allocation.
    - CO2e: nlp 14 kWh x 1.2 x 56 g = 0.9408 kg; vision 1.2 x 1.2 x 400 g = 0.576 kg; the
      week 1.5168 kg over 15.2 kWh."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    day = datetime(2026, 11, 24, 9, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(
            run_record(
                "h", day, 10, gpus=2, util=60.0, team="nlp", host="dgx-eu-1", energy_kwh=14.0
            )
        )
        s.upsert_run(
            run_record(
                "a",
                day,
                4,
                model="A100-80GB",
                price=2.0,
                util=90.0,
                team="vision",
                host="gpu-us-1",
                energy_kwh=1.2,
            )
        )
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(CONFIG.format(db=db))
    out = tmp_path / "out"
    p = gpu_kpi(
        "report",
        "--config",
        str(config),
        "--week",
        "2026-W48",
        "--tz",
        "UTC",
        "--out",
        str(out),
        "--format",
        "html,json",
    )
    assert p.returncode == 0, p.stderr
    d = json.loads((out / "2026-W48.json").read_text())

    h = d["headline"]
    assert h["spend_usd"] == pytest.approx(20 * RATE + 8.0)
    assert h["energy_kwh"] == pytest.approx(15.2)
    assert h["co2e_kg"] == pytest.approx(0.9408 + 0.576)
    assert h["energy_gpu_hours"] == pytest.approx(24.0)
    teams = {t["team"]: t for t in d["by_team"]}
    assert teams["nlp"]["co2e_kg"] == pytest.approx(0.9408)
    assert teams["vision"]["co2e_kg"] == pytest.approx(0.576)
    assert teams["nlp"]["spend_usd"] == pytest.approx(20 * RATE)
    assert d["carbon"] == {
        "g_per_kwh": 400.0,
        "pue": 1.2,
        "hosts": [{"pattern": "dgx-eu-*", "g_per_kwh": 56.0}],
    }

    (line,) = d["rent_vs_own"]
    assert line["model"] == "H100" and line["gpus"] == 4 and line["hours_in_period"] == 168.0
    assert line["rented_usd"] == pytest.approx(77.0)
    assert line["owned_usd"] == pytest.approx(4 * 168 * RATE) == pytest.approx(648.33, abs=0.005)
    assert line["allocation_pct"] == pytest.approx(100 * 20 / 672)
    assert line["break_even_allocation_pct"] == pytest.approx(100 * RATE / 3.85)
    assert round(line["break_even_allocation_pct"], 2) == 25.06
    assert line["cheaper"] == "rent"
    assert line["util_pct"] == pytest.approx(60.0)

    page = (out / "2026-W48.html").read_text()
    assert "Rent or own:" in page and "breaks even at 25%" in page and "$648" in page
    assert "owned: $30,000 over 4 y + 0.70 kW × $0.12/kWh × PUE 1.3 = $0.965/GPU-h" in page
    assert "Energy 15 kWh · 1.52 kg CO2e (400 g/kWh or per host, PUE 1.2)" in page


def test_a_runs_own_price_beats_the_owned_rate_as_in_the_tracker(tmp_path: Path) -> None:
    """Two 1-GPU H100 runs of 2 h: one given its own $1.50 (price_source "override"), one that
    ran with the table's $3.85. With H100 owned, the first keeps $3.00, the second is priced
    2 x $0.964778."""
    from reports.build import compute
    from reports.request import Request
    from tracker.owned import OwnedGpu

    url = f"sqlite:///{tmp_path}/runs.db"
    day = datetime(2026, 11, 24, 9, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("own", day, 2, price=1.5, price_source="override"))
        s.upsert_run(run_record("table", day, 2, price_source="table"))
    owned = {
        "H100": OwnedGpu(
            model="H100", purchase_usd=30000, life_years=4, power_w=700, usd_per_kwh=0.12, pue=1.3
        )
    }
    k = compute(
        url, Request(week="2026-W48", tz=UTC, owned=owned), now=datetime(2026, 12, 1, tzinfo=UTC)
    ).kpis
    spend = k.runs.set_index("run_id")["spend_usd"]
    assert spend["own"] == pytest.approx(3.0)
    assert spend["table"] == pytest.approx(2 * RATE)
    # the run that paid its own price was rented: only the other's 2 h are owned use
    (line,) = k.rent_vs_own
    assert line.gpu_hours == pytest.approx(2.0) and line.rented_usd == pytest.approx(7.70)


def test_a_variant_priced_in_prices_is_rented_not_the_owned_base(tmp_path: Path) -> None:
    """H100 is owned; "H100 NVL" has its own $3.00 in [prices]. A 1 h run on an NVL is rented
    at $3.00 and stays out of the owned H100's hours; a 1 h run on an SXM H100 is owned."""
    from reports.build import compute
    from reports.request import Request
    from tracker.owned import OwnedGpu

    url = f"sqlite:///{tmp_path}/runs.db"
    day = datetime(2026, 11, 24, 9, tzinfo=UTC)
    with RunStore(url) as s:
        s.upsert_run(run_record("nvl", day, 1, model="NVIDIA H100 NVL", price=None))
        s.upsert_run(run_record("sxm", day, 1, model="NVIDIA H100 80GB HBM3", price=None))
    owned = {
        "H100": OwnedGpu(
            model="H100",
            purchase_usd=30000,
            life_years=4,
            power_w=700,
            usd_per_kwh=0.12,
            pue=1.3,
            gpus=1,
        )
    }
    k = compute(
        url,
        Request(week="2026-W48", tz=UTC, owned=owned, prices={"H100 NVL": 3.0}),
        now=datetime(2026, 12, 1, tzinfo=UTC),
    ).kpis
    spend = k.runs.set_index("run_id")["spend_usd"]
    assert spend["nvl"] == pytest.approx(3.0) and spend["sxm"] == pytest.approx(RATE)
    (line,) = k.rent_vs_own
    assert line.gpu_hours == pytest.approx(1.0)
    assert line.allocation_pct == pytest.approx(100 / 168)


def test_a_summary_claiming_more_idle_than_spend_is_capped_at_its_hours(tmp_path: Path) -> None:
    """A summary-only run: 10 GPU-h at $2 = $20, utilization 50%, but idle_usd $30 (bad data).
    Its idle hours are capped at its 10 GPU-hours: idle $20, waste $20, never idle > waste."""
    from reports.build import compute
    from reports.request import Request

    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as s:
        s.upsert_run(
            run_record(
                "c",
                datetime(2026, 11, 24, 9, tzinfo=UTC),
                10,
                price=2.0,
                cost_usd=20.0,
                idle_usd=30.0,
            )
        )
    h = compute(
        url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 1, tzinfo=UTC)
    ).kpis.headline
    assert (h.spend_usd, h.idle_usd, h.waste_usd) == pytest.approx((20.0, 20.0, 20.0))
