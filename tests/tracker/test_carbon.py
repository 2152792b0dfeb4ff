"""tracker.carbon: kg CO2e = GPU energy × PUE × grid g/kWh ÷ 1000, per host, checked by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tracker.carbon import DEFAULT_G_PER_KWH, Carbon

EU_FIRST = Carbon(g_per_kwh=400, pue=1.2, hosts=(("dgx-eu-*", 56), ("dgx-*", 300)))


def test_energy_times_pue_times_intensity() -> None:
    assert EU_FIRST.co2e_kg(10.0, "node7") == pytest.approx(4.8)  # 10 kWh × 1.2 × 400 g
    assert EU_FIRST.co2e_kg(10.0) == pytest.approx(4.8)  # no host: the default intensity
    assert Carbon().co2e_kg(10.0) == pytest.approx(4.8)  # 10 × 1.0 × 480 g
    assert (Carbon().g_per_kwh, Carbon().pue, DEFAULT_G_PER_KWH) == (480.0, 1.0, 480.0)


def test_unknown_energy_has_no_emissions_figure() -> None:
    assert EU_FIRST.co2e_kg(None, "dgx-eu-1") is None
    assert EU_FIRST.co2e_kg(math.nan, "dgx-eu-1") is None
    assert EU_FIRST.co2e_kg(0.0, "dgx-eu-1") == 0.0


def test_the_first_matching_host_pattern_wins_whatever_the_case() -> None:
    assert EU_FIRST.intensity_for("DGX-EU-01") == 56
    assert EU_FIRST.intensity_for("dgx-us-2") == 300
    assert EU_FIRST.intensity_for("gpu-node1") == 400
    assert EU_FIRST.intensity_for("") == 400
    # the broad pattern first shadows the narrow one
    assert (
        Carbon(g_per_kwh=400, hosts=(("dgx-*", 300), ("dgx-eu-*", 56))).intensity_for("dgx-eu-1")
        == 300
    )
    assert EU_FIRST.co2e_kg(10.0, "dgx-eu-7") == pytest.approx(0.672)  # 10 × 1.2 × 56 g


def test_a_series_of_runs_gets_each_hosts_intensity() -> None:
    energy = pd.Series([10.0, math.nan, 2.0, 5.0])
    hosts = pd.Series(["dgx-eu-1", "dgx-us-1", "node3", None])
    kg = EU_FIRST.co2e_kg_series(energy, hosts)
    assert kg.iloc[0] == pytest.approx(0.672)  # 10 × 1.2 × 56
    assert math.isnan(kg.iloc[1])
    assert kg.iloc[2] == pytest.approx(0.96)  # 2 × 1.2 × 400
    assert kg.iloc[3] == pytest.approx(2.4)  # no host: 5 × 1.2 × 400
