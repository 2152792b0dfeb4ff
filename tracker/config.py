"""Settings, and the one parser of the config file: defaults, then one TOML file, then
``GPU_KPI_*`` environment variables, then arguments. Read when a run starts, never at import.

Every key is declared once, in a table of :class:`Key` (its parser and its variable); the
service (:mod:`reports.service.config`) adds its own sections to the same machinery. Every
error is one line naming its key (``tracker.interval_s: expected a number >= 0.01, got 'x'``),
and all of a file's errors are reported together.

```toml
store = "postgresql://gpu_kpi@db.internal/gpu_kpi"   # password: PGPASSWORD or ~/.pgpass
gpu = "nvml"

[tracker]
interval_s = 1.0
log_every_s = 30
warmup_steps = 3
alert_window_s = 600
print_summary = true   # the run's summary printed when it ends (global rank 0)
alert_webhook_file = "/etc/gpu-kpi/alert-webhook"   # or the variable GPU_KPI_ALERT_WEBHOOK
job_key = "resnet-nightly"   # the recurring job these runs are (GPU_KPI_JOB_KEY; track(job_key=) wins)

[thresholds]
target_util_pct = 85
alert_util_pct = 70
underutilized_pct = 50
idle_pct = 5
idle_window_min = 30

[gpus]
mig_share = "compute"   # a MIG instance is its compute slices of 7 (or "memory": of 8)
idle_split = "even"     # a time-sliced GPU's idle time: evenly between holders (or "work")

[prices]          # USD per GPU-hour
H100 = 2.49

[owned.H100]      # an owned fleet, per GPU: priced at its amortized cost, compared with renting
purchase_usd = 30000
life_years = 4
power_w = 700     # average, with the GPU's share of the host
usd_per_kwh = 0.12
pue = 1.3
gpus = 64

[carbon]
g_per_kwh = 400   # grid intensity, g CO2e/kWh
pue = 1.2         # facility energy ÷ GPU energy
[carbon.hosts]    # host glob = g CO2e/kWh; the first match wins
"dgx-eu-*" = 56
```
"""

from __future__ import annotations

import dataclasses
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracker.carbon import Carbon
from tracker.cost import Thresholds
from tracker.owned import OwnedGpu
from tracker.parsers import (
    ENV_PREFIX,
    ConfigError,
    Errors,
    Key,
    Parser,
    Sections,
    cadence,
    choice,
    did_you_mean,
    flag,
    number,
    text,
    whole,
)
from tracker.shares import IDLE_SPLITS, SHARE_BASES
from tracker.text import one_line

__all__ = [
    "ENV_PREFIX",
    "FILE_SECTIONS",
    "SETTING_KEYS",
    "TRACKER_SECTIONS",
    "ConfigError",
    "Errors",
    "Key",
    "Parser",
    "Sections",
    "Settings",
    "cadence",
    "checked_argument",
    "choice",
    "config_path",
    "did_you_mean",
    "flag",
    "load_settings",
    "number",
    "read_capped",
    "read_prices",
    "read_secret",
    "read_sections",
    "read_settings",
    "read_toml",
    "read_tracker",
    "secret_file",
    "settings_from",
    "text",
    "whole",
]

_THRESHOLD_KEYS = frozenset(f.name for f in dataclasses.fields(Thresholds))


@dataclass(frozen=True, kw_only=True)
class Settings:
    store: str | None = None
    """Run store URL (``sqlite:///path.db`` or ``postgresql://…``); None = the local default."""
    gpu: str | None = None
    """GPU backend spec: ``nvml``, ``simulated:PROFILE[@MODEL][:N]``, ``replay:PATH.csv``."""
    interval_s: float = 1.0
    """GPU sampling interval."""
    log_every_s: float = 30.0
    """Live metrics cadence of the plain-loop API (the callbacks follow the trainer's)."""
    warmup_steps: int = 3
    """Steps left out of throughput and step-time figures."""
    alert_window_s: float = 600.0
    """How long utilization stays under ``alert_util_pct`` before the one alert."""
    print_summary: bool = True
    """Print the run's summary when it ends (global rank 0): GPU-hours, utilization, cost,
    waste, verdict, advice, and where the run is stored."""
    job_key: str | None = None
    """The recurring job the runs are one of (``track(job_key=)`` wins): ``resnet-nightly``."""
    alert_webhook_file: str | None = None
    """A file holding the chat webhook URL the run's alerts go to (``alert_webhook``)."""
    alert_webhook: str | None = field(default=None, repr=False)
    """The webhook URL (Slack, Teams, or JSON): ``$GPU_KPI_ALERT_WEBHOOK``, else the first line
    of ``alert_webhook_file``. A secret: never in the file itself, argv or a log."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    """Target, alert, underutilized and idle thresholds (``[thresholds]``)."""
    prices: Mapping[str, float] = field(default_factory=dict)
    """Price overrides, USD per GPU-hour, by GPU model."""
    owned: Mapping[str, OwnedGpu] = field(default_factory=dict)
    """Owned GPU models by model (``[owned.<MODEL>]``), priced at their amortized cost."""
    carbon: Carbon = field(default_factory=Carbon)
    """Grid carbon intensity and PUE for CO2e (``[carbon]``)."""
    mig_share: str = "compute"
    """What a MIG instance's share of its GPU is counted by (``[gpus] mig_share``): its
    compute slices (of 7) or its memory slices (of 8); :mod:`tracker.shares`."""
    idle_split: str = "even"
    """How a time-sliced GPU's idle time is split between its holders (``[gpus]
    idle_split``): evenly, or by their work (:func:`tracker.shares.time_sliced`)."""
    gres_models: Mapping[str, str] = field(default_factory=dict)
    """Slurm gres types → the price table's model (``[slurm] gres_models``), for sites whose
    type names say no size (``a100``): what ``gpu-kpi import slurm`` records."""

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (None values ignored); threshold names (``target_util_pct``…)
        change :attr:`thresholds`."""
        changes = {k: v for k, v in changes.items() if v is not None}
        limits = {k: changes.pop(k) for k in list(changes) if k in _THRESHOLD_KEYS}
        if limits:
            changes["thresholds"] = dataclasses.replace(self.thresholds, **limits)
        return dataclasses.replace(self, **changes)


def read_sections(
    data: Mapping[str, Any], sections: Sections, env: Mapping[str, str], errors: Errors
) -> dict[str, dict[str, Any]]:
    """The parsed values of ``sections`` in a TOML document, each overridden by its variable.
    A key a section does not declare is an error (at the top level only other sections' names
    are allowed: the file is shared). A value in error is left out, keeping its default."""
    out: dict[str, dict[str, Any]] = {}
    for name, keys in sections.items():
        table = data if not name else data.get(name, {})
        if not isinstance(table, Mapping):
            errors.items.append(f"{name}: expected a table")
            table = {}
        if not name:
            for k in table:
                if k not in keys and k not in FILE_SECTIONS:
                    errors.unknown(k, k, {*keys, *FILE_SECTIONS})
        values = {k: v for k, v in table.items() if name or k in keys}
        from_env = {
            k: ENV_PREFIX + key.env
            for k, key in keys.items()
            if key.env and env.get(ENV_PREFIX + key.env)
        }
        values.update({k: env[var] for k, var in from_env.items()})
        parsed: dict[str, Any] = {}
        for k, value in values.items():
            qualified = f"{name}.{k}" if name else k
            if k in from_env:
                qualified += f" (from {from_env[k]})"
            if k not in keys:
                errors.unknown(qualified, k, keys)
            elif (v := errors.parse(qualified, keys[k].parse, value)) is not None:
                parsed[k] = v
        out[name] = parsed
    return out


def _pct(low: float = 0.0) -> Parser:
    return number(low, 100.0)


TRACKER_SECTIONS: Sections = {
    "": {"store": Key(text, "STORE"), "gpu": Key(text, "GPU")},
    "tracker": {
        "interval_s": Key(number(0.01), "INTERVAL_S"),
        "log_every_s": Key(cadence, "LOG_EVERY_S"),
        "warmup_steps": Key(whole(0), "WARMUP_STEPS"),
        "alert_window_s": Key(number(0), "ALERT_WINDOW_S"),
        "print_summary": Key(flag, "PRINT_SUMMARY"),
        "alert_webhook_file": Key(text, "ALERT_WEBHOOK_FILE"),
        "job_key": Key(text, "JOB_KEY"),
    },
    "thresholds": {
        "target_util_pct": Key(_pct(1.0), "TARGET_UTIL_PCT"),
        "alert_util_pct": Key(_pct(), "ALERT_UTIL_PCT"),
        "underutilized_pct": Key(_pct(), "UNDERUTILIZED_PCT"),
        "underutilized_min_gpu_hours": Key(number(0), "UNDERUTILIZED_MIN_GPU_HOURS"),
        "idle_pct": Key(_pct(), "IDLE_PCT"),
        "idle_window_min": Key(whole(1, 7 * 24 * 60), "IDLE_WINDOW_MIN"),
    },
    "gpus": {
        "mig_share": Key(choice(SHARE_BASES), "MIG_SHARE"),
        "idle_split": Key(choice(IDLE_SPLITS), "IDLE_SPLIT"),
    },
}
"""The tracker's keys; the file's other sections belong to the reports side."""

FILE_SECTIONS = frozenset(
    {
        *TRACKER_SECTIONS,
        "prices",
        "report",
        "service",
        "smtp",
        "recipients",
        "budgets",
        "owned",
        "carbon",
        "slurm",
    }
    - {""}
)
"""Every section the file may have, the reports side's too (the file is shared): any other
top-level name is a misspelling (``[smpt]``, ``[[recipient]]``) and an error with the closest
name, not a silently ignored table. ``tests/test_layers.py`` checks that the service declares
no section missing here."""

price = number(0, 10_000)
"""USD per GPU-hour: finite, 0 to $10,000 (no GPU-hour costs more; a bigger figure is a typo
that would overflow a week's sums)."""


def read_prices(
    data: Mapping[str, Any], env: Mapping[str, str], errors: Errors
) -> dict[str, float]:
    """``[prices]`` (GPU model = USD per GPU-hour), then ``GPU_KPI_PRICE_<MODEL>``, model by model."""
    table = data.get("prices", {})
    if not isinstance(table, Mapping):
        errors.items.append("prices: expected a table of GPU model = USD per GPU-hour")
        table = {}
    out: dict[str, float] = {}
    for key, value in [
        *((f"prices.{k}", v) for k, v in table.items()),
        *((k, v) for k, v in env.items() if k.startswith(ENV_PREFIX + "PRICE_")),
    ]:
        model = key.removeprefix("prices.").removeprefix(ENV_PREFIX + "PRICE_")
        if not model.strip() or not model.isprintable():
            # every price lookup would stumble on it: the report failed, the tracker dropped
            # every override
            errors.items.append(f"{key!r}: a GPU model's name, printable and not empty (H100)")
            continue
        usd = errors.parse(key, price, value)
        if usd is not None:
            out[model] = usd
    return out


OWNED_KEYS: Mapping[str, Key] = {
    "purchase_usd": Key(number(0, 1e7)),
    "life_years": Key(number(0.1, 100)),
    "power_w": Key(number(0, 100_000)),
    "usd_per_kwh": Key(number(0, 100)),
    "pue": Key(number(1, 10)),
    "gpus": Key(whole(1, 10_000_000)),
    "rent_usd_per_gpu_hour": Key(price),
    "overhead_usd_per_year": Key(number(0, 1e7)),
}
"""``[owned.<MODEL>]``'s keys (see :class:`tracker.owned.OwnedGpu`); no variables."""
_OWNED_REQUIRED = {
    "purchase_usd": "the price paid per GPU",
    "life_years": "the service life",
    "power_w": "the average draw per GPU",
    "usd_per_kwh": "the electricity price",
}


def read_owned(data: Mapping[str, Any], errors: Errors) -> dict[str, OwnedGpu]:
    """``[owned.<MODEL>]``, one table per owned GPU model. A fleet is described in the file
    only: no environment variables. A model with a key missing or in error is left out."""
    tables = data.get("owned", {})
    if not isinstance(tables, Mapping):
        errors.items.append("owned: expected a table per GPU model ([owned.H100])")
        return {}
    out: dict[str, OwnedGpu] = {}
    for model, table in tables.items():
        name = f"owned.{model}"
        found = read_sections({name: table}, {name: OWNED_KEYS}, {}, errors)[name]
        errors.items += [
            f"{name}.{k}: missing ({what})"
            for k, what in _OWNED_REQUIRED.items()
            if isinstance(table, Mapping) and k not in table
        ]
        if set(_OWNED_REQUIRED) <= set(found):
            out[model] = OwnedGpu(model=model, **found)
    from tracker.prices import canonical_gpu

    seen: dict[str, str] = {}
    for model in out:
        key = canonical_gpu(model) or " ".join(model.upper().split())
        if key in seen:
            errors.items.append(
                f"owned.{model}: the same GPU model ({key}) as "
                f"owned.{seen[key]}: describe each owned model once"
            )
        seen.setdefault(key, model)
    return out


GRID = number(0, 10_000)
"""g CO2e/kWh: the dirtiest grids are ~1,000."""
CARBON_SECTION: Sections = {
    "carbon": {"g_per_kwh": Key(GRID, "CARBON_G_PER_KWH"), "pue": Key(number(1, 10), "CARBON_PUE")}
}
"""``[carbon]``'s scalar keys; its ``hosts`` table is read by :func:`read_carbon`."""


def read_carbon(data: Mapping[str, Any], env: Mapping[str, str], errors: Errors) -> Carbon:
    """``[carbon]`` (``GPU_KPI_CARBON_G_PER_KWH`` and ``_PUE`` override it), and
    ``[carbon.hosts]``: host glob = g CO2e/kWh, in file order, from the file only."""
    table = data.get("carbon", {})
    hosts = table.get("hosts", {}) if isinstance(table, Mapping) else {}
    scalars = (
        {k: v for k, v in table.items() if k != "hosts"} if isinstance(table, Mapping) else table
    )
    found = read_sections({"carbon": scalars}, CARBON_SECTION, env, errors)["carbon"]
    if not isinstance(hosts, Mapping):
        errors.items.append("carbon.hosts: expected a table of host pattern = g CO2e/kWh")
        hosts = {}
    pairs = [
        (pattern, g)
        for pattern, v in hosts.items()
        if (g := errors.parse(f"carbon.hosts.{pattern}", GRID, v)) is not None
    ]
    return Carbon(**found, hosts=tuple(pairs))


def read_gres_models(data: Mapping[str, Any], errors: Errors) -> dict[str, str]:
    """``[slurm] gres_models = { a100 = "A100-80GB" }``: each gres type and the GPU model it
    stands for, a model the price table knows (from the file only: no variables)."""
    from tracker.prices import canonical_gpu

    table = data.get("slurm", {})
    if not isinstance(table, Mapping):
        errors.items.append("slurm: expected a table ([slurm] gres_models = { a100 = ... })")
        return {}
    for k in table:
        if k != "gres_models":
            errors.unknown(f"slurm.{k}", k, {"gres_models"})
    models = table.get("gres_models", {})
    if not isinstance(models, Mapping):
        errors.items.append('slurm.gres_models: expected a table of gres type = "GPU model"')
        return {}
    out: dict[str, str] = {}
    for kind, model in models.items():
        where = f"slurm.gres_models.{kind}"
        if not isinstance(model, str) or canonical_gpu(model) is None:
            errors.items.append(
                f"{where}: {model!r} is no GPU model the price table knows (A100-80GB, H100…)"
            )
            continue
        out[str(kind)] = model
    return out


def read_tracker(data: Mapping[str, Any], env: Mapping[str, str], errors: Errors) -> Settings:
    """The tracker's settings in a parsed TOML document, each overridden by its variable."""
    found = read_sections(data, TRACKER_SECTIONS, env, errors)
    webhook = env.get(ENV_PREFIX + "ALERT_WEBHOOK", "").strip() or None
    if webhook is None and (path := found["tracker"].get("alert_webhook_file")):
        webhook = read_secret("tracker.alert_webhook_file", path, errors)
    return Settings(
        **found[""],
        **found["tracker"],
        **found["gpus"],
        alert_webhook=webhook,
        thresholds=Thresholds(**found["thresholds"]),
        prices=read_prices(data, env, errors),
        owned=read_owned(data, errors),
        carbon=read_carbon(data, env, errors),
        gres_models=read_gres_models(data, errors),
    )


SETTING_KEYS = {k: key.parse for keys in TRACKER_SECTIONS.values() for k, key in keys.items()}
"""The tracker's settings by name, with their parsers."""
_ARGUMENTS = {
    "price_per_gpu_hour": price,
    "flops_per_step": number(0),
    "nodes": whole(1),
    **SETTING_KEYS,
}


def checked_argument(name: str, value: Any) -> Any:
    """A caller's argument (``track(price_per_gpu_hour=…)``, a setting) parsed as the config
    file's value is (a price as ``[prices]``…); a bad one costs a warning and None, its default
    (the price table, the config's value), not the run."""
    try:
        return None if value is None else _ARGUMENTS[name](value)
    except ValueError as e:
        import logging

        logging.getLogger("gpu_kpi").warning(
            "gpu-kpi: ignoring %s: %s; using its default instead", name, e
        )
        return None


SECRET_MAX_BYTES = 64 << 10
"""The largest file a secret is read from: a password or a URL is far shorter."""


def read_capped(key: str, path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Args:
        key: The setting that names the file, for the error.
        path: The file (``~`` expanded).
        limit: The most bytes it may hold.

    Raises:
        ConfigError: Naming ``key`` and the file, never its content: it cannot be opened, is
            not a regular file (a FIFO would wait for a writer forever, ``/dev/zero`` never
            end: opened without blocking and checked before a byte is read) or is larger.
    """
    shown = Path(path).expanduser()
    try:
        fd = os.open(shown, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ConfigError(f"{key}: {shown} is not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(limit + 1)
        finally:
            os.close(fd)
    except OSError as e:
        raise ConfigError(f"{key}: cannot read {shown}: {e.strerror or e}") from None
    if len(data) > limit:
        raise ConfigError(f"{key}: {shown} is larger than {limit:,} bytes")
    return data


def secret_file(key: str, path: str | Path) -> str:
    """A secret from a file (a password, a webhook URL): its text less the trailing line end.

    Args:
        key: The setting that names the file, for the error.
        path: The file (``~`` expanded): regular, UTF-8, at most :data:`SECRET_MAX_BYTES`.

    Raises:
        ConfigError: Naming ``key`` and the file, never its content (see :func:`read_capped`).
    """
    data = read_capped(key, path, SECRET_MAX_BYTES)
    try:
        return data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ConfigError(f"{key}: {Path(path).expanduser()} is not UTF-8 text") from None


def read_secret(key: str, path: str, errors: Errors) -> str | None:
    """The first line of the file ``path`` (a secret: a password, a webhook URL); an error
    naming ``key`` and the file, never its content, when it cannot be read or is empty."""
    try:
        line = secret_file(key, path).split("\n", 1)[0].strip()
    except ConfigError as e:
        errors.items.append(str(e))
        return None
    if not line:
        errors.items.append(f"{key}: {path} is empty")
        return None
    return line


def config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """``$GPU_KPI_CONFIG``, else ``<user config dir>/gpu-kpi/config.toml`` if it exists."""
    env = os.environ if env is None else env
    if env.get(ENV_PREFIX + "CONFIG"):
        return Path(env[ENV_PREFIX + "CONFIG"])
    from tracker.paths import config_dir

    default = config_dir() / "config.toml"
    return default if default.exists() else None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path}: {one_line(str(e))}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"config file {path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} "
            f"at offset {e.start})"
        ) from None
    except RecursionError:
        raise ConfigError(f"config file {path}: nested too deeply") from None
    except MemoryError:
        raise ConfigError(f"config file {path}: too large") from None


def load_settings(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None, **overrides: Any
) -> Settings:
    """Defaults < TOML file < environment < ``overrides`` (None values are ignored)."""
    env = os.environ if env is None else env
    file = Path(path) if path is not None else config_path(env)
    return settings_from(read_toml(file) if file is not None else {}, env, **overrides)


def read_settings(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> Settings:
    """The tracker's settings for a training run, which a config error must not stop or
    misdirect: every valid value is used and each bad one (a misspelt section of the shared file
    too) keeps its default, with one warning; a file that cannot be read at all means the
    defaults and the environment."""
    import logging

    env = os.environ if env is None else env
    file = Path(path) if path is not None else config_path(env)
    errors = Errors()
    try:
        data = read_toml(file) if file is not None else {}
    except ConfigError as e:
        errors.items.append(str(e))
        data = {}
    settings = read_tracker(data, env, errors)
    if errors.items:
        logging.getLogger("gpu_kpi").warning(
            "gpu-kpi: config: %s; using the other settings", "; ".join(errors.items)
        )
    return settings


def settings_from(data: Mapping[str, Any], env: Mapping[str, str], **overrides: Any) -> Settings:
    """The tracker's settings from a parsed TOML document: its values < ``env`` < ``overrides``
    (None values are ignored); :class:`ConfigError` with every error when any is wrong."""
    errors = Errors()
    settings = read_tracker(data, env, errors)
    errors.raise_any()
    return settings.replace(**overrides)
