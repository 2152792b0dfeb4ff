"""The multi-week index page (the management dashboard): every archived week with its KPI
trends as inline SVG sparklines, from the rows :func:`reports.archive.read_archive` reads out
of the week JSON files this tool wrote (this module reads no file), and the files it left out
(:class:`LeftOut`), named at the foot of the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from reports.kpi import Headline, WeekKpis
from reports.render.fmt import as_number, fmt_hours, fmt_int, fmt_pct, fmt_usd
from reports.render.html import environment
from reports.weeks import label_of as week_label
from reports.weeks import week_dates

_WEEK_LABEL = re.compile(r"^\d{4}-W\d{2}$")


# -- the archive's weeks -----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class LeftOut:
    """A file that looks like a week archive but is not one of ours."""

    name: str
    reason: str


# -- the multi-week index ----------------------------------------------------------------------
SPARK_W, SPARK_H, SPARK_PAD = 300, 48, 4


def sparkline(values: Sequence[object]) -> dict[str, Any]:
    """An inline SVG sparkline's geometry: polyline point lists (a gap where a value is
    missing), the last point, and the range, for a ``SPARK_W`` × ``SPARK_H`` box."""
    nums = [as_number(v) for v in values]
    known = [v for v in nums if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 1.0)  # low to high, like a sparkline
    span = hi - lo or 1.0
    step = (SPARK_W - 2 * SPARK_PAD) / max(len(values) - 1, 1)
    segments: list[list[str]] = [[]]
    last: tuple[float, float] | None = None
    for i, v in enumerate(nums):
        if v is None:
            if segments[-1]:
                segments.append([])
            continue
        x = SPARK_PAD + i * step if len(values) > 1 else SPARK_W / 2
        y = SPARK_H - SPARK_PAD - (v - lo) / span * (SPARK_H - 2 * SPARK_PAD)
        segments[-1].append(f"{x:.1f},{y:.1f}")
        last = (x, y)
    return {
        "width": SPARK_W,
        "height": SPARK_H,
        "lines": [" ".join(s) for s in segments if len(s) > 1],
        "dots": [] if last is None else [{"x": f"{last[0]:.1f}", "y": f"{last[1]:.1f}"}],
    }


HEADLINE_INDEX_FIELDS = (
    "gpu_hours",
    "spend_usd",
    "utilization_pct",
    "waste_usd",
    "idle_usd",
    "runs",
)
"""The headline figures a week's JSON must hold to be in the index."""
INDEX_FIELDS = ("label", *HEADLINE_INDEX_FIELDS)
"""A week's row of the index."""


def _index_href(week: Mapping[str, Any], label: str) -> str:
    href = week.get("href")
    if href is None:
        return f"{label}.html"
    href = str(href)
    parts = urlsplit(href)
    if parts.scheme.lower() in ("http", "https") and parts.netloc:
        return href
    if not parts.scheme and not parts.netloc and not href.startswith("/"):
        return href  # relative, next to the index
    raise ValueError(f"week {label}: href {href!r} is neither relative nor http(s)")


def index_context(
    weeks: Iterable[Mapping[str, Any]],
    *,
    title: str,
    generated_at: datetime | None,
    left_out: Sequence[LeftOut] = (),
) -> dict[str, Any]:
    rows = []
    under_way = None
    for w in weeks:
        if w.get("so_far"):  # the week under way: a link, no row (its figures are partial)
            under_way = {"label": str(w["label"]), "href": _index_href(w, str(w["label"]))}
            continue
        missing = [f for f in INDEX_FIELDS if f not in w]
        if missing:
            raise ValueError(f"week {w.get('label')!r} lacks {', '.join(missing)}")
        label = str(w["label"])
        if not _WEEK_LABEL.match(label):
            raise ValueError(f"bad week label {label!r}: use YYYY-Www, e.g. 2026-W48")
        rows.append((label, w))
    rows.sort(key=lambda lw: lw[0])
    if len({label for label, _ in rows}) != len(rows):
        raise ValueError("a week is listed twice")

    def series(field: str) -> list[float | None]:
        return [as_number(w[field]) for _, w in rows]

    def latest(field: str, fmt: Any) -> str:
        return fmt(rows[-1][1][field]) if rows else "n/a"

    def span(field: str, fmt: Any) -> str:
        known = [v for v in series(field) if v is not None]
        return f"low {fmt(min(known))} · high {fmt(max(known))}" if known else "no data"

    sparks = [
        {
            "title": "Utilization",
            "value": latest("utilization_pct", fmt_pct),
            "range": span("utilization_pct", fmt_pct),
            "css": "util",
            **sparkline(series("utilization_pct")),
        },
        {
            "title": "Spend",
            "value": latest("spend_usd", fmt_usd),
            "range": span("spend_usd", fmt_usd),
            "css": "spend",
            **sparkline(series("spend_usd")),
        },
        {
            "title": "Recoverable waste",
            "value": latest("waste_usd", fmt_usd),
            "range": span("waste_usd", fmt_usd),
            "css": "waste",
            **sparkline(series("waste_usd")),
        },
    ]
    bases = sorted({str(w["basis_label"]) for _, w in rows if w.get("basis_label")})
    table = [
        {
            "label": label,
            "href": _index_href(w, label),
            "dates": week_dates(label),
            "gpu_hours": fmt_hours(w["gpu_hours"]),
            "spend": fmt_usd(w["spend_usd"]),
            "utilization": fmt_pct(w["utilization_pct"]),
            "waste": fmt_usd(w["waste_usd"]),
            "idle": fmt_usd(w["idle_usd"]),
            "runs": fmt_int(w["runs"]),
        }
        for label, w in reversed(rows)
    ]
    return {
        "title": title,
        "weeks": table,
        "sparks": sparks,
        "first": rows[0][0] if rows else "",
        "last": rows[-1][0] if rows else "",
        "basis": " / ".join(bases),
        "left_out": [{"name": f.name, "reason": f.reason} for f in left_out],
        "under_way": under_way,
        "generated_at": (
            generated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if generated_at else ""
        ),
    }


def index_row(k: WeekKpis) -> dict[str, Any]:
    """The index's row for one week's KPIs (what :func:`render_index` takes)."""
    h: Headline = k.headline
    return {
        "label": week_label(k.week),
        "gpu_hours": h.gpu_hours,
        "spend_usd": h.spend_usd,
        "utilization_pct": h.utilization_pct,
        "waste_usd": h.waste_usd,
        "idle_usd": h.idle_usd,
        "runs": h.runs,
        "basis_label": k.basis_label,
    }


def render_index(
    weeks: list[dict[str, Any]],
    *,
    title: str = "GPU efficiency — all weeks",
    generated_at: datetime | None = None,
    left_out: Sequence[LeftOut] = (),
) -> str:
    """The multi-week management dashboard: one row per archived week, newest first, linking
    ``<label>.html`` (or the row's ``href``: relative or http(s)), with sparklines of
    utilization, spend and recoverable waste, oldest to newest.

    Each week is a dict with ``label`` (``2026-W48``), ``gpu_hours``, ``spend_usd``,
    ``utilization_pct`` (None when unknown), ``waste_usd``, ``idle_usd``, ``runs``, and
    optionally ``href`` and ``basis_label`` — :func:`index_row` makes one from a week's KPIs,
    :func:`reports.archive.read_archive` from the archive. ``left_out``: files of the archive that are not
    ours, counted and named at the foot of the page."""
    context = index_context(weeks, title=title, generated_at=generated_at, left_out=left_out)
    return str(environment().get_template("index.html.j2").render(**context))
