"""Display strings for every format: money, percentages, hours, changes, week dates, and links
that are only ever http(s). ``—`` stands for a figure that is not known."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction
from urllib.parse import urlsplit

import pandas as pd

from reports.kpi.budgets import BudgetLine
from reports.rows import parsed_links

LINK_NAMES = {"wandb": "W&B run", "tensorboard": "TensorBoard"}


# -- formatting --------------------------------------------------------------------------------
def as_number(value: object) -> float | None:
    """A number, or None for None, NaN, NA and anything that is not a number."""
    if isinstance(value, numbers.Real) and not math.isnan(float(value)):
        return float(value)
    return None


def missing(value: object) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def fmt_usd(value: object) -> str:
    """``$1,234.56``; ``-$3.00``; ``n/a`` when unknown."""
    v = as_number(value)
    if v is None:
        return "n/a"
    return f"-${-v:,.2f}" if v < 0 else f"${v:,.2f}"


def fmt_unit_usd(value: object) -> str:
    """A unit cost with three significant digits however small: ``$0.00412``, ``$0.0410``,
    ``$1.25``, ``$1,234.57`` (``$0.00 per 1k samples`` says nothing); ``n/a`` when unknown."""
    v = as_number(value)
    if v is None:
        return "n/a"
    if v == 0 or abs(v) >= 1:
        return fmt_usd(v)
    digits = max(2, 2 - math.floor(math.log10(abs(v))))
    return f"-${-v:.{digits}f}" if v < 0 else f"${v:.{digits}f}"


def fmt_pct(value: object, digits: int = 1) -> str:
    """``67.1%``; ``n/a`` when unknown."""
    v = as_number(value)
    return "n/a" if v is None else f"{v:,.{digits}f}%"


def fmt_hours(value: object) -> str:
    """``12.3 GPU-h`` (two decimals under 1 GPU-hour); ``n/a`` when unknown."""
    v = as_number(value)
    if v is None:
        return "n/a"
    return f"{v:,.2f} GPU-h" if 0 < abs(v) < 1 else f"{v:,.1f} GPU-h"


def fmt_gib(value: object) -> str:
    v = as_number(value)
    return "n/a" if v is None else f"{v:,.1f} GiB"


def fmt_kg(value: object) -> str:
    """kg with 3 significant figures under 100 (``4.80 kg``), whole kg above, t from 10 t."""
    v = as_number(value)
    if v is None:
        return "—"
    if abs(v) >= 10_000:
        return f"{v / 1000:,.1f} t"
    if abs(v) >= 100:
        return f"{v:,.0f} kg"
    return f"{v:.1f} kg" if abs(v) >= 10 else f"{v:.2f} kg" if abs(v) >= 1 else f"{v:.3g} kg"


def fmt_gpus(value: object) -> str:
    """A count of GPUs held: ``2``, or a share where an allocation held MIG instances
    (``3/7``, ``1 3/7``); ``n/a`` when unknown."""
    v = as_number(value)
    if v is None:
        return "n/a"
    if v == int(v):
        return f"{int(v):,}"
    share = Fraction(v).limit_denominator(56)
    whole, part = divmod(share, 1)
    return f"{whole} {part}" if whole else f"{part}"


def fmt_int(value: object) -> str:
    v = as_number(value)
    return "n/a" if v is None else f"{round(v):,}"


def fmt_change(value: object) -> str:
    """Week-over-week change: ``▲ 12.3%``, ``▼ 4.0%``, ``0.0%``; ``n/a`` without a previous
    week (or when it was 0)."""
    return _arrow(value, "%")


def fmt_change_pp(value: object) -> str:
    """A change of a percentage, in percentage points: ``▲ 2.1 pp``, ``▼ 0.5 pp``, ``0.0 pp``
    (65% → 64.5% is ``▼ 0.5 pp``, not a relative ``▼ 0.8%``); ``n/a`` without a previous week."""
    return _arrow(value, " pp")


def _arrow(value: object, unit: str) -> str:
    v = as_number(value)
    if v is None:
        return "n/a"
    if round(v, 1) == 0:
        return f"0.0{unit}"
    return f"{'▲' if v > 0 else '▼'} {abs(v):,.1f}{unit}"


def text_or_dash(value: object, default: str = "—") -> str:
    return default if missing(value) or value == "" else str(value)


# -- links -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Link:
    text: str
    href: str | None
    """Only an http(s) URL becomes a link; anything else (a log dir, ``javascript:``) is text."""
    target: str = ""


def safe_http_url(value: object) -> str | None:
    """``value`` when it is an absolute http(s) URL with a host, else None."""
    if not isinstance(value, str):
        return None
    url = value.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url


def links_of(value: object) -> list[Link]:
    """A run's links as the page shows them.

    Args:
        value: A mapping, or a runs frame's text (:func:`reports.rows.links_text`).

    Returns:
        The http(s) URLs as links, then the other targets (paths) as text, each by name;
        none for a value that is neither.
    """
    if isinstance(value, str):
        value = parsed_links(value)
    if not isinstance(value, Mapping):
        return []
    out = []
    for key, target in value.items():
        name = LINK_NAMES.get(str(key), str(key))
        href = safe_http_url(target)
        out.append(Link(text=name, href=href, target="" if href else str(target)))
    # URLs first (W&B before TensorBoard), then paths shown as text
    return sorted(out, key=lambda link: (link.href is None, link.text.lower()))


# -- budgets -----------------------------------------------------------------------------------
def budget_period(b: BudgetLine) -> str:
    """``week 2026-W49``, ``November 2026``, or ``December 2026 to 6 Dec`` (a month so far); the
    line's times are in the report zone."""
    if b.period == "week":
        return f"week {b.label}"
    month = f"{b.start:%B %Y}"
    return month if b.complete else f"{month} to {b.until - timedelta(microseconds=1):%-d %b}"


def budget_row(b: BudgetLine) -> dict[str, str]:
    """A budget line's display strings: period, spend, budget, used, forecast, status and its
    tone (``bad`` over budget, ``warn`` at 80% or on course to exceed, ``good``)."""
    f = b.forecast_pct
    ahead = not b.complete and f is not None and f >= 100.0
    if b.used_pct >= 100.0:
        status, tone = "over budget", "bad"
    elif b.used_pct >= 80.0:
        status, tone = "80% reached" + (", on course to exceed" if ahead else ""), "warn"
    elif ahead:
        status, tone = "on course to exceed", "warn"
    else:
        status, tone = "within budget", "good"
    return {
        "team": b.team,
        "period": budget_period(b),
        "spend": fmt_usd(b.spend_usd),
        "budget": fmt_usd(b.budget_usd),
        "used": fmt_pct(b.used_pct, 0),
        "forecast": (
            "—"
            if b.complete or b.forecast_usd is None
            else f"{fmt_usd(b.forecast_usd)} ({fmt_pct(f, 0)})"
        ),
        "status": status,
        "tone": tone,
        "meter": f"{min(b.used_pct, 100.0):.1f}",
    }
