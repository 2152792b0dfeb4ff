"""The config file's value parsers and its error collector: each parser takes a raw value (TOML
or a variable's text) and returns it parsed, or raises ValueError with the reason; the key is
added by the caller (:class:`Errors`). :mod:`tracker.config` declares the keys."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "GPU_KPI_"


class ConfigError(ValueError):
    """A setting is wrong; the message names its key."""


# -- parsers: each takes a raw value (TOML or a variable's text) and returns it parsed, or raises
# ValueError with the reason; the key is added by the caller
Parser = Callable[[object], Any]


def shown(value: object) -> str:
    """``value`` as an error shows it: ``repr``, but a number of many digits by its size and
    long text cut (a 300-digit integer is a typo, not something to print)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"a {len(str(abs(value)))}-digit number"
    out = repr(value)
    return out if len(out) <= 60 else out[:57] + "..."


def text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {shown(value)}")
    if "\x00" in value:
        # a NUL in a path ended the run's tracking in os.stat (ValueError: embedded null byte);
        # other control characters are a name's own (shown escaped wherever names are shown)
        raise ValueError(f"expected text without a NUL character, got {shown(value)}")
    return value.strip()


def number(low: float, high: float | None = None) -> Parser:
    """A finite number in [low, high]."""
    bounds = f"between {low:g} and {high:g}" if high is not None else f">= {low:g}"

    def parse(value: object) -> float:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {shown(value)}")
        try:
            x = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {shown(value)}") from None
        except OverflowError:  # a TOML integer past any float
            raise ValueError(f"expected a number {bounds}, got {shown(value)}") from None
        if not math.isfinite(x):
            raise ValueError(f"expected a finite number {bounds}, got {shown(value)}")
        if not (x >= low and (high is None or x <= high)):
            raise ValueError(f"expected a number {bounds}, got {shown(value)}")
        return x

    return parse


def cadence(value: object) -> float:
    """Seconds between live logs, >= 0; ``inf``: never on a timer (the framework callbacks log at
    the trainer's own steps and pass it)."""
    if isinstance(value, float) and value == math.inf:
        return value
    return float(number(0)(value))


def whole(low: int, high: int | None = None) -> Parser:
    as_number = number(low, high)

    def parse(value: object) -> int:
        x = as_number(value)
        if x != int(x):
            raise ValueError(f"expected a whole number, got {shown(value)}")
        return int(x)

    return parse


def flag(value: object) -> bool:
    """On or off: a TOML boolean, or a variable's ``true``/``false`` (``1``/``0``, ``yes``/
    ``no``, ``on``/``off``, any case)."""
    if isinstance(value, bool):
        return value
    words = {
        "true": True,
        "1": True,
        "yes": True,
        "on": True,
        "false": False,
        "0": False,
        "no": False,
        "off": False,
    }
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    raise ValueError(f"expected true or false, got {value!r}")


def choice(options: tuple[str, ...]) -> Parser:
    def parse(value: object) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return str(value)

    return parse


@dataclass(frozen=True)
class Key:
    parse: Parser
    env: str | None = None
    """``GPU_KPI_<env>`` overrides the file's value."""


Sections = Mapping[str, Mapping[str, Key]]
"""Section name (``""``: the top level) → key → :class:`Key`."""


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """`` (did you mean 'smtp'?)`` for a misspelt name, else ``""``."""

    close = difflib.get_close_matches(name, sorted(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Errors:
    """Collects every error as one ``key: reason`` line."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def parse(self, key: str, parser: Parser, value: object) -> Any:
        try:
            return parser(value)
        except ValueError as e:
            self.items.append(f"{key}: {e}")
            return None

    def unknown(self, key: str, name: str, valid: Iterable[str]) -> None:
        """``key: unknown setting``, with the closest valid name when one is close."""
        self.items.append(f"{key}: unknown setting{did_you_mean(name, valid)}")

    def raise_any(self) -> None:
        if self.items:
            raise ConfigError("; ".join(self.items))
