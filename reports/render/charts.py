"""The weekly report's charts as small PNGs: the only module that imports matplotlib.

Figures are drawn on matplotlib's Agg canvas directly (``Figure`` + ``FigureCanvasAgg``, no
``pyplot``), so nothing global is switched: no backend selection, no open-figure registry.
Each PNG is reduced to a small palette (flat colours, no dithering) and carries no metadata,
so the same KPIs give the same bytes and all five charts together stay around 25 KB.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from reports.kpi import WeekKpis
from reports.weeks import label_of
from tracker.extras import install_hint

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH_PX, HEIGHT_PX, DPI = 640, 260, 100
PALETTE_STEPS = 4
"""Blends of each colour into white kept in the PNG palette, for anti-aliased edges and text."""

# The report's colours (templates/report.html.j2 uses the same).
BLUE, BLUE_LIGHT = "#2563eb", "#93b4f5"
ORANGE, RED, GREY, INK, GRID = "#ea7a12", "#c0262d", "#9ca3af", "#1f2937", "#e5e7eb"

CHART_NAMES = (
    "trend_utilization",
    "trend_spend",
    "trend_waste",
    "util_distribution",
    "waste_by_team",
)
BUCKETS = tuple(f"{lo}–{lo + 10}" for lo in range(0, 100, 10))
"""Utilization buckets of :func:`utilization_buckets`, % (the last one includes 100)."""
MAX_TEAMS = 10

_RC: dict[Any, Any] = {  # keys: matplotlib rcParams
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.edgecolor": GREY,
    "axes.labelcolor": INK,
    "text.color": INK,
    "xtick.color": INK,
    "ytick.color": INK,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.color": GRID,
    "grid.linewidth": 0.8,
    "axes.axisbelow": True,
    "legend.frameon": False,
    "legend.fontsize": 8,
}


def _short_label(ts: pd.Timestamp) -> str:
    """``W48`` for the week starting at ``ts``."""
    return label_of(ts)[-3:]


def utilization_buckets(runs: pd.DataFrame) -> dict[str, float]:
    """GPU-hours of the week's runs by their utilization, in 10 % buckets (``0–10`` …
    ``90–100``; below 0 the first, from 100 and infinite the last), plus ``unknown`` for runs
    without a utilization value; a run without a number of hours adds none."""
    out = dict.fromkeys((*BUCKETS, "unknown"), 0.0)
    if runs.empty:
        return out
    # by column (a week may hold a million runs): below 0 the first bucket, 100 the last
    util = runs["utilization_pct"].astype(float)
    hours = runs["gpu_hours"].astype(float)
    bucket = (util.clip(0.0, 100.0) // 10).clip(upper=9.0)  # NaN: no bucket
    for b, total in hours.groupby(bucket).sum().items():
        out[BUCKETS[int(b)]] = float(total)
    out["unknown"] = float(hours[util.isna()].sum())
    return out


def _escape(text: str) -> str:
    """Text shown as is: a ``$`` pair in a team name must not start mathtext."""
    return text.replace("$", r"\$")


def _usd(value: float) -> str:
    """A dollar amount on a chart: cents under $10 (``$0.42``), whole dollars, then k and M."""
    if abs(value) >= 1e6:
        return _escape(f"${value / 1e6:,.1f}M")
    if abs(value) >= 1e4:
        return _escape(f"${value / 1e3:,.0f}k")
    if abs(value) >= 1e3:
        return _escape(f"${value / 1e3:,.1f}k")
    if abs(value) < 10 and value != 0:
        return _escape(f"${value:,.2f}")
    return _escape(f"${value:,.0f}")


def usd_tick(value: float, ticks: Sequence[float]) -> str:
    """A tick label on a dollar axis whose ticks are ``ticks``: one unit for the axis ($, k or
    M, by its largest tick) and as many decimals as the ticks need to read exactly, so small
    amounts stay distinct (``$0.25 $0.50 $0.75``, never ``$0 $0 $1``)."""
    top = max((abs(t) for t in ticks), default=abs(value))
    scale, unit = (1e6, "M") if top >= 1e6 else (1e3, "k") if top >= 1e4 else (1.0, "")
    if value == 0:
        return _escape("$0")
    scaled = [t / scale for t in ticks] or [value / scale]
    decimals = next(
        (
            d
            for d in range(4)
            if all(abs(round(t, d) - t) <= 1e-9 * max(1.0, abs(t)) for t in scaled)
        ),
        2,
    )
    if decimals == 1 and not unit:
        decimals = 2  # cents: $0.50, not $0.5
    return _escape(f"${value / scale:,.{decimals}f}{unit}")


def _usd_axis(axis: Any) -> None:
    """Dollar tick labels on ``axis`` (:func:`usd_tick`, knowing every tick of the axis)."""
    from matplotlib.ticker import Formatter

    class UsdTicks(Formatter):
        def format_ticks(self, values: Sequence[float]) -> list[str]:
            return [usd_tick(v, values) for v in values]

        def __call__(self, x: float, pos: int | None = None) -> str:
            return usd_tick(x, [x])

    axis.set_major_formatter(UsdTicks())


def _palette() -> list[int]:
    """White, the chart colours and their blends into white, and a grey ramp for text: every
    pixel maps to the nearest, so the colours stay exact and the PNG stays small."""
    rgb = [
        tuple(int(c[i : i + 2], 16) for i in (1, 3, 5))
        for c in (INK, BLUE, BLUE_LIGHT, ORANGE, RED, GREY, GRID)
    ]
    colors = [(255, 255, 255)]
    for r, g, b in rgb:
        for step in range(PALETTE_STEPS):
            f = step / PALETTE_STEPS  # 0: the colour itself
            colors.append(
                (round(r + (255 - r) * f), round(g + (255 - g) * f), round(b + (255 - b) * f))
            )
    colors += [(v, v, v) for v in (64, 96, 128, 160, 192, 224)]
    return [v for c in colors for v in c]


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgba = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba())
    palette = Image.new("P", (1, 1))
    palette.putpalette(_palette())
    small = rgba.convert("RGB").quantize(palette=palette, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    small.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def _figure() -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, facecolor="white")
    ax = fig.add_subplot()
    return fig, ax


def _no_data(ax: Axes, text: str = "no GPU time this week") -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color=GREY)
    ax.set_xticks([])
    ax.set_yticks([])


def _weeks_axis(ax: Axes, weeks: Sequence[pd.Timestamp]) -> list[int]:
    x = list(range(len(weeks)))
    ax.set_xticks(x, [_short_label(w) for w in weeks])
    ax.set_xlim(-0.6, len(weeks) - 0.4)
    return x


def _trend_utilization(k: WeekKpis, ax: Axes) -> None:
    from matplotlib.ticker import FuncFormatter

    t = k.trend
    x = _weeks_axis(ax, list(t["week"]))
    util = [float("nan") if v is None or pd.isna(v) else float(v) for v in t["utilization_pct"]]
    target = k.thresholds.target_util_pct
    ax.axhline(target, color=ORANGE, linewidth=1.2, linestyle=(0, (4, 3)))
    ax.text(x[0] - 0.5, target + 2, f"target {target:.0f}%", color=ORANGE, fontsize=8, va="bottom")
    ax.plot(x, util, color=BLUE, linewidth=2, marker="o", markersize=4, antialiased=True)
    if util and not math.isnan(util[-1]):
        ax.annotate(
            f"{util[-1]:.1f}%",
            (x[-1], util[-1]),
            textcoords="offset points",
            xytext=(0, -13 if util[-1] > 90 else 7),
            ha="center",
            fontsize=8,
            fontweight="bold",
            color=BLUE,
        )
    ax.set_ylim(0, 100)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.0f}%"))
    ax.set_title(f"Utilization ({k.basis_label}), % of GPU-hours — last {len(x)} weeks")


def _trend_spend(k: WeekKpis, ax: Axes) -> None:

    t = k.trend
    x = _weeks_axis(ax, list(t["week"]))
    spend = [float(v) for v in t["spend_usd"]]
    colors = [BLUE_LIGHT] * (len(x) - 1) + [BLUE]
    ax.bar(x, spend, color=colors, width=0.7)
    if spend:
        ax.annotate(
            _usd(spend[-1]),
            (x[-1], spend[-1]),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=8,
            fontweight="bold",
            color=BLUE,
        )
    ax.set_ylim(0, max([*spend, 1.0]) * 1.15)
    _usd_axis(ax.yaxis)
    ax.set_title(_escape(f"Spend, $ per week — last {len(x)} weeks"))


def _trend_waste(k: WeekKpis, ax: Axes) -> None:

    t = k.trend
    x = _weeks_axis(ax, list(t["week"]))
    waste = [float(v) for v in t["waste_usd"]]
    idle = [float(v) for v in t["idle_usd"]]
    ax.bar([i - 0.19 for i in x], waste, width=0.38, color=ORANGE, label="recoverable waste")
    ax.bar([i + 0.19 for i in x], idle, width=0.38, color=RED, label="of which idle")
    ax.set_ylim(0, max([*waste, *idle, 1.0]) * 1.15)
    _usd_axis(ax.yaxis)
    ax.legend(loc="upper left", ncols=2)
    ax.set_title(_escape(f"Recoverable waste and idle, $ per week — last {len(x)} weeks"))


def _util_distribution(k: WeekKpis, ax: Axes) -> None:
    buckets = utilization_buckets(k.runs)
    labels = list(buckets)
    hours = list(buckets.values())
    under = k.thresholds.underutilized_pct
    colors = [
        GREY if b == "unknown" else ORANGE if int(b.split("–")[0]) < under else BLUE for b in labels
    ]
    x = list(range(len(labels)))
    ax.bar(x, hours, color=colors, width=0.75)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_xlabel(f"run utilization this week, % ({k.basis_label})", fontsize=8)
    for i, h in zip(x, hours, strict=True):
        if h > 0:
            ax.annotate(
                f"{h:,.0f}" if h >= 10 else f"{h:.1f}",
                (i, h),
                textcoords="offset points",
                xytext=(0, 2),
                ha="center",
                fontsize=7,
            )
    ax.set_ylim(0, max([*hours, 1.0]) * 1.18)
    ax.set_title(f"GPU-hours by run utilization, GPU-h (orange: under {under:.0f}%)")


def _waste_by_team(k: WeekKpis, ax: Axes) -> None:

    ax.set_title(_escape("Recoverable waste by team, $ this week"))
    teams = k.by.get("team", pd.DataFrame())
    if teams.empty:
        _no_data(ax)
        return
    top = teams.sort_values("waste_usd", ascending=False).head(MAX_TEAMS)
    names = [str(n) if len(str(n)) <= 24 else str(n)[:23] + "…" for n in top["team"]]
    waste = [float(v) for v in top["waste_usd"]]
    y = list(range(len(names)))
    ax.barh(y, waste, color=ORANGE, height=0.65)
    ax.set_yticks(y, names)
    for label in ax.get_yticklabels():
        label.set_parse_math(False)  # a team's name is shown exactly as written
    ax.invert_yaxis()
    ax.grid(axis="x", color=GRID)
    ax.grid(axis="y", visible=False)
    _usd_axis(ax.xaxis)
    top_value = max([*waste, 1.0])
    ax.set_xlim(0, top_value * 1.18)
    for i, w in zip(y, waste, strict=True):
        ax.text(
            w + top_value * 0.01,
            i,
            _usd(w) if w >= 1e3 else _escape(f"${w:,.2f}"),
            va="center",
            fontsize=8,
        )
    if len(teams) > MAX_TEAMS:
        ax.set_title(
            _escape(f"Recoverable waste by team, $ this week (top {MAX_TEAMS} of {len(teams)})")
        )


_DRAW: dict[str, Callable[[WeekKpis, Any], None]] = {
    "trend_utilization": _trend_utilization,
    "trend_spend": _trend_spend,
    "trend_waste": _trend_waste,
    "util_distribution": _util_distribution,
    "waste_by_team": _waste_by_team,
}


def charts(k: WeekKpis) -> dict[str, bytes]:
    """The report's charts as PNG bytes (640×260 px), keyed by :data:`CHART_NAMES`:
    ``trend_utilization`` (12-week utilization %, with the target line), ``trend_spend``
    (12-week spend $), ``trend_waste`` (12-week recoverable waste $ and idle $),
    ``util_distribution`` (the week's GPU-hours by run utilization bucket, "unknown" for runs
    without a value) and ``waste_by_team`` (the week's recoverable waste $ per team)."""
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - the [reports] extra is missing
        raise ImportError(f"charts need matplotlib: {install_hint('reports')}") from e

    out: dict[str, bytes] = {}
    with matplotlib.rc_context(_RC):
        for name in CHART_NAMES:
            fig, ax = _figure()
            _DRAW[name](k, ax)
            fig.tight_layout(pad=0.6)
            out[name] = _png(fig)
    return out
