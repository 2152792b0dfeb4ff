"""The tracker's settings: defaults, then one TOML file, then ``GPU_KPI_*`` environment variables,
then arguments. Read when a run starts, never at import.

```toml
store = "postgresql://gpu_kpi@db.internal/gpu_kpi"   # password: PGPASSWORD or ~/.pgpass
gpu = "nvml"

[tracker]
interval_s = 1.0
log_every_s = 30
warmup_steps = 3
alert_window_s = 600

[thresholds]
target_util_pct = 85
alert_util_pct = 70
underutilized_pct = 50
idle_pct = 5
idle_window_min = 30

[prices]          # USD per GPU-hour
H100 = 2.49
```
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "GPU_KPI_"


class ConfigError(ValueError):
    """A setting is wrong; the message names its key."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    store: str | None = None
    """Run store URL (``sqlite:///path.db`` or ``postgresql://…``); None = the local default."""
    gpu: str | None = None
    """GPU backend spec: ``nvml``, ``simulated:PROFILE[@MODEL][:N]``, ``replay:PATH.csv``."""
    interval_s: float = 1.0
    log_every_s: float = 30.0
    warmup_steps: int = 3
    alert_window_s: float = 600.0
    target_util_pct: float = 85.0
    alert_util_pct: float = 70.0
    underutilized_pct: float = 50.0
    idle_pct: float = 5.0
    idle_window_min: int = 30
    prices: Mapping[str, float] = field(default_factory=dict)
    """Price overrides, USD per GPU-hour, by GPU model."""

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


_SECTIONS = {
    "": ("store", "gpu"),
    "tracker": ("interval_s", "log_every_s", "warmup_steps", "alert_window_s"),
    "thresholds": ("target_util_pct", "alert_util_pct", "underutilized_pct", "idle_pct",
                   "idle_window_min"),
}
_TYPES = {f.name: f.type for f in dataclasses.fields(Settings)}


def _coerce(key: str, value: object) -> object:
    kind = _TYPES[key]
    try:
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            number = float(value)  # type: ignore[arg-type]
            if not number >= 0:  # negative or NaN
                raise ValueError
            return number
        if kind == "int":
            if isinstance(value, bool) or float(value) != int(float(value)):  # type: ignore[arg-type]
                raise ValueError
            return int(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        wanted = "non-negative number" if kind == "float" else "whole number"
        raise ConfigError(f"{key}: expected a {wanted}, got {value!r}") from None
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _price(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{key}: expected a price in USD per GPU-hour, got {value!r}")
    try:
        usd = float(value)
    except ValueError:
        raise ConfigError(f"{key}: expected a price in USD per GPU-hour, got {value!r}") from None
    if not usd >= 0:
        raise ConfigError(f"{key}: a price must be >= 0, got {value!r}")
    return usd


def config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """``$GPU_KPI_CONFIG``, else ``<user config dir>/gpu-kpi/config.toml`` if it exists."""
    env = os.environ if env is None else env
    if env.get(ENV_PREFIX + "CONFIG"):
        return Path(env[ENV_PREFIX + "CONFIG"])
    import platformdirs

    default = Path(platformdirs.user_config_dir("gpu-kpi")) / "config.toml"
    return default if default.exists() else None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path}: {e}") from None


def from_toml(data: Mapping[str, Any]) -> dict[str, Any]:
    """The tracker's settings in a parsed TOML document; sections it does not own are left to
    the reports side."""
    out: dict[str, Any] = {}
    for section, keys in _SECTIONS.items():
        table = data if not section else data.get(section, {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"{section}: expected a table")
        for key, value in table.items():
            name = f"{section}.{key}" if section else key
            if key in keys:
                out[key] = _coerce(key, value)
            elif section:
                raise ConfigError(f"{name}: unknown setting")
    prices = data.get("prices", {})
    if not isinstance(prices, Mapping):
        raise ConfigError("prices: expected a table of GPU model = USD per GPU-hour")
    out["prices"] = {k: _price(f"prices.{k}", v) for k, v in prices.items()}
    return out


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _TYPES.keys() - {"prices"}:
        value = env.get(ENV_PREFIX + key.upper())
        if value:
            out[key] = _coerce(key, value)
    prices = {k[len(ENV_PREFIX + "PRICE_"):]: _price(k, v) for k, v in env.items()
              if k.startswith(ENV_PREFIX + "PRICE_")}
    if prices:
        out["prices"] = prices
    return out


def load_settings(path: str | Path | None = None, *, env: Mapping[str, str] | None = None,
                  **overrides: Any) -> Settings:
    """Defaults < TOML file < environment < ``overrides`` (None values are ignored)."""
    env = os.environ if env is None else env
    file = Path(path) if path is not None else config_path(env)
    return settings_from(read_toml(file) if file is not None else {}, env, **overrides)


def settings_from(data: Mapping[str, Any], env: Mapping[str, str], **overrides: Any) -> Settings:
    """The tracker's settings from a parsed TOML document: its values < ``env`` < ``overrides``
    (None values are ignored); prices merge model by model."""
    merged = from_toml(data)
    from_environment = from_env(env)
    merged["prices"] = {**merged.get("prices", {}), **from_environment.pop("prices", {})}
    merged.update(from_environment)
    return Settings(**merged).replace(**overrides)
