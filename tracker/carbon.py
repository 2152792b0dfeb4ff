"""Carbon: kg CO2e from the energy a run's GPUs drew (``[carbon]`` in the config file).

CO2e = GPU energy × PUE × grid intensity: the facility's overhead (cooling, power conversion)
scales the GPUs' energy, and the grid's carbon intensity, in g CO2e per kWh, turns it into
emissions. The intensity may differ per cluster or region, chosen by host name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

DEFAULT_G_PER_KWH = 480.0
"""World-average grid intensity, g CO2e/kWh, for 2023: Ember, Global Electricity Review 2024
(lifecycle emissions, all gases, 100-year CO2e). A placeholder: set your grid's
(``[carbon] g_per_kwh``), which ranges from ~30 (hydro, nuclear) to ~800 (coal)."""

G_PER_KG = 1000.0


@dataclass(frozen=True, kw_only=True)
class Carbon:
    g_per_kwh: float = DEFAULT_G_PER_KWH
    """Grid carbon intensity where no host pattern matches, g CO2e per kWh."""
    pue: float = 1.0
    """Facility energy ÷ IT energy; 1.0 counts the GPUs' energy alone."""
    hosts: tuple[tuple[str, float], ...] = ()
    """(host glob, g CO2e/kWh), in file order: the first pattern matching a host wins;
    case-insensitive (``dgx-eu-*``)."""

    def intensity_for(self, host: str) -> float:
        """g CO2e/kWh for ``host``: its first matching pattern's, else :attr:`g_per_kwh`."""
        name = host.lower()
        return next(
            (g for pattern, g in self.hosts if fnmatchcase(name, pattern.lower())), self.g_per_kwh
        )

    def co2e_kg(self, energy_kwh: float | None, host: str = "") -> float | None:
        """kg CO2e of ``energy_kwh`` of GPU energy drawn on ``host``: energy × PUE × g/kWh ÷ 1000;
        None when the energy is unknown (None or NaN)."""
        if energy_kwh is None or math.isnan(energy_kwh):
            return None
        return energy_kwh * self.pue * self.intensity_for(host) / G_PER_KG

    def co2e_kg_series(self, energy_kwh: Any, hosts: Any) -> Any:
        """:meth:`co2e_kg` over pandas Series aligned on one index (energy NaN gives NaN); the
        intensity is looked up once per distinct host. pandas is not imported here (the
        tracker does not depend on it): anything with ``map`` and arithmetic will do."""
        distinct = hosts.unique() if hasattr(hosts, "unique") else set(hosts)  # not per run
        g = {h: self.intensity_for(h if isinstance(h, str) else "") for h in distinct}
        per_host = hosts.map(g)
        if hasattr(per_host, "astype"):  # an empty Series of Arrow text maps to text, not numbers
            per_host = per_host.astype(float)
        return energy_kwh * per_host * (self.pue / G_PER_KG)
