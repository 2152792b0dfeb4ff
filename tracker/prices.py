"""GPU models and their prices (USD per GPU-hour, on-demand), every row with its source and date.

The default table is a starting point; users override rows per run (``price_per_gpu_hour=``),
per config file (``[prices]`` in the TOML) or per environment. Model names from NVML
(``NVIDIA H100 80GB HBM3``) are mapped to the table's keys by :func:`canonical_gpu`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger("gpu_kpi")


class UnknownGpu(ValueError):
    """A GPU model the price table does not know."""


@dataclass(frozen=True, kw_only=True)
class Price:
    gpu: str
    """Canonical model key, e.g. ``H100``."""
    usd_per_gpu_hour: float
    as_of: str
    """When the price was seen, ``YYYY-MM``."""
    source: str
    """Where it was seen, or ``override`` / ``config`` for a user's own price."""
    description: str = ""
    mem_gib: float | None = None
    """Device memory of the model, GB as sold (for right-sizing: does a run fit on it)."""


DEFAULT_PRICES: tuple[Price, ...] = (
    Price(gpu="H200", mem_gib=141, usd_per_gpu_hour=4.50, as_of="2026-09", description="H200 141GB",
          source="RunPod 3.59-4.59, Nebius 4.50"),
    Price(gpu="H100", mem_gib=80, usd_per_gpu_hour=3.85, as_of="2026-09", description="H100 SXM 80GB",
          source="RunPod 2.69-3.49, Lambda 4.29, Nebius 3.85; AWS p5 6.88/GPU (2026-11)"),
    Price(gpu="A100-80GB", mem_gib=80, usd_per_gpu_hour=2.00, as_of="2026", description="A100 80GB",
          source="RunPod 1.39-1.59, Modal 2.50; AWS p4de 3.43/GPU (2026-11)"),
    Price(gpu="A100-40GB", mem_gib=40, usd_per_gpu_hour=1.99, as_of="2026-09", description="A100 40GB",
          source="Lambda 1.99; AWS p4d 2.74/GPU (2026-11)"),
    Price(gpu="L40S", mem_gib=48, usd_per_gpu_hour=1.55, as_of="2026-09", description="L40S 48GB",
          source="RunPod 0.79-1.09, Nebius 1.55"),
    Price(gpu="L4", mem_gib=24, usd_per_gpu_hour=0.80, as_of="2026", description="L4 24GB",
          source="AWS g6.xlarge 0.805, Modal 0.80"),
    Price(gpu="A10G", mem_gib=24, usd_per_gpu_hour=1.01, as_of="2026", description="A10G 24GB",
          source="AWS g5.xlarge 1.006"),
    Price(gpu="T4", mem_gib=16, usd_per_gpu_hour=0.53, as_of="2026", description="T4 16GB",
          source="AWS g4dn.xlarge 0.526"),
    Price(gpu="V100", mem_gib=16, usd_per_gpu_hour=3.06, as_of="older", description="V100 16GB",
          source="AWS p3.2xlarge 3.06"),
)

# Ordered: the first pattern that matches the upper-cased name wins (H200 before H100, the
# 80GB A100 before the plain one).
_MODEL_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"H200", "H200"),
    (r"H100", "H100"),
    (r"A100.*80\s*G", "A100-80GB"),
    (r"A100", "A100-40GB"),
    (r"L40S", "L40S"),
    (r"(^|[^A-Z0-9])L4($|[^A-Z0-9])", "L4"),
    (r"A10G", "A10G"),
    (r"(^|[^A-Z0-9])T4($|[^A-Z0-9])", "T4"),
    (r"V100", "V100"),
)


def canonical_gpu(name: str) -> str | None:
    """The price-table key for a GPU model name (NVML's or a user's), or None if unknown.

    >>> canonical_gpu("NVIDIA A100-SXM4-80GB")
    'A100-80GB'
    """
    upper = name.strip().upper()
    for pattern, key in _MODEL_PATTERNS:
        if re.search(pattern, upper):
            return key
    return None


class PriceTable:
    """The default prices with a user's overrides on top."""

    def __init__(
        self,
        overrides: Mapping[str, float] | None = None,
        *,
        override_source: str = "config",
        base: Iterable[Price] = DEFAULT_PRICES,
    ) -> None:
        self._rows: dict[str, Price] = {p.gpu: p for p in base}
        self._own: list[tuple[re.Pattern[str], str]] = []
        """Models the table does not know, priced by the user (B200, MI300X…): matched to a
        name (NVML's ``NVIDIA B200``) as a whole word, the longest first."""
        for name, usd in (overrides or {}).items():
            if not usd >= 0:
                raise ValueError(f"price for {name!r} must be a number >= 0, got {usd!r}")
            key = canonical_gpu(name)
            if key is None:  # any model can carry a price
                key = " ".join(name.split())
                if not key:
                    raise UnknownGpu(f"empty GPU model name in price overrides; known: {self.known()}")
                words = r"\s*".join(re.escape(w) for w in key.upper().split())
                self._own.append((re.compile(rf"(^|[^A-Z0-9]){words}($|[^A-Z0-9])"), key))
                self._own.sort(key=lambda pk: -len(pk[1]))
            known = self._rows.get(key)
            self._rows[key] = Price(gpu=key, usd_per_gpu_hour=float(usd), as_of="user",
                                    source=override_source,
                                    description=known.description if known else key,
                                    mem_gib=known.mem_gib if known else None)

    def known(self) -> str:
        return ", ".join(self._rows)

    def rows(self) -> list[Price]:
        return list(self._rows.values())

    def lookup(self, name: str) -> Price | None:
        """The price row for a model name, or None when the model is unknown."""
        upper = name.strip().upper()
        key = next((k for pattern, k in self._own if pattern.search(upper)), None)
        key = key or canonical_gpu(name)
        return self._rows.get(key) if key else None

    def get(self, name: str) -> Price:
        """Like :meth:`lookup`, but an unknown model is an error naming the known ones."""
        row = self.lookup(name)
        if row is None:
            raise UnknownGpu(f"unknown GPU model {name!r}; known: {self.known()}")
        return row


def price_for(model: str, override: float | None = None,
              overrides: Mapping[str, float] | None = None) -> Price | None:
    """The price a run on ``model`` pays: ``override`` (the run's own), else ``overrides`` (the
    config's ``[prices]``) over the table; None, with a warning, when nothing prices the model."""
    if override is not None:
        return Price(gpu=canonical_gpu(model) or model, as_of="run",
                     usd_per_gpu_hour=float(override), source="override")
    try:
        price = PriceTable(overrides).lookup(model)
    except (UnknownGpu, ValueError) as e:
        log.warning("gpu-kpi: ignoring price overrides: %s", e)
        price = PriceTable().lookup(model)
    if price is None:
        log.warning("gpu-kpi: no price for GPU model %r: cost is not computed; set "
                    "price_per_gpu_hour= or [prices] in the config", model)
    return price
