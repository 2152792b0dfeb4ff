"""The weekly report and the multi-week index as standalone HTML pages (Jinja2).

Python turns the KPIs into plain rows of display strings (``$1,234.56``, ``67.1%``,
``12.3 GPU-h``); the templates in the top-level ``templates/`` folder lay them out. Autoescape
is on and nothing is marked safe: every run name, team, verdict and link is escaped by Jinja2.
Charts arrive as PNG bytes and are embedded as ``data:`` URIs, so a page needs no network, no
file next to it and no JavaScript.
"""

from __future__ import annotations

import base64
import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd

from reports.kpi import Headline, WeekKpis
from reports.weeks import label_of as week_label

TEMPLATES_PACKAGE = "reports.templates"
"""Where an installed wheel carries the templates (mapped from the repo's ``templates/``)."""

BREAKDOWNS = (("team", "Team"), ("project", "Project"), ("user", "User"),
              ("gpu_model", "GPU model"))
MAX_BREAKDOWN_ROWS = 15
MAX_RUN_ROWS = 50
LINK_NAMES = {"wandb": "W&B run", "tensorboard": "TensorBoard"}
CHART_ALT = {
    "trend_utilization": "Utilization per week over the last 12 weeks, with the target line",
    "trend_spend": "Spend in dollars per week over the last 12 weeks",
    "trend_waste": "Recoverable waste and idle dollars per week over the last 12 weeks",
    "util_distribution": "This week's GPU-hours by run utilization bucket",
    "waste_by_team": "This week's recoverable waste in dollars by team",
}
_WEEK_LABEL = re.compile(r"^\d{4}-W\d{2}$")


# -- formatting --------------------------------------------------------------------------------
def _num(value: object) -> float | None:
    """A number, or None for None, NaN, NA and anything that is not a number."""
    if isinstance(value, numbers.Real) and not math.isnan(float(value)):
        return float(value)
    return None


def _missing(value: object) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def fmt_usd(value: object) -> str:
    """``$1,234.56``; ``-$3.00``; ``n/a`` when unknown."""
    v = _num(value)
    if v is None:
        return "n/a"
    return f"-${-v:,.2f}" if v < 0 else f"${v:,.2f}"


def fmt_pct(value: object, digits: int = 1) -> str:
    """``67.1%``; ``n/a`` when unknown."""
    v = _num(value)
    return "n/a" if v is None else f"{v:,.{digits}f}%"


def fmt_hours(value: object) -> str:
    """``12.3 GPU-h`` (two decimals under 1 GPU-hour); ``n/a`` when unknown."""
    v = _num(value)
    if v is None:
        return "n/a"
    return f"{v:,.2f} GPU-h" if 0 < abs(v) < 1 else f"{v:,.1f} GPU-h"


def fmt_gib(value: object) -> str:
    v = _num(value)
    return "n/a" if v is None else f"{v:,.1f} GiB"


def fmt_int(value: object) -> str:
    v = _num(value)
    return "n/a" if v is None else f"{round(v):,}"


def fmt_change(value: object) -> str:
    """Week-over-week change: ``▲ 12.3%``, ``▼ 4.0%``, ``0.0%``; ``n/a`` without a previous
    week (or when it was 0)."""
    v = _num(value)
    if v is None:
        return "n/a"
    if round(v, 1) == 0:
        return "0.0%"
    return f"{'▲' if v > 0 else '▼'} {abs(v):,.1f}%"


def _text(value: object, default: str = "—") -> str:
    return default if _missing(value) or value == "" else str(value)


def _week_dates(label: str) -> str:
    year, week = int(label[:4]), int(label[6:])
    monday, sunday = date.fromisocalendar(year, week, 1), date.fromisocalendar(year, week, 7)
    if monday.year != sunday.year:
        return f"{monday:%-d %b %Y} – {sunday:%-d %b %Y}"
    if monday.month != sunday.month:
        return f"{monday:%-d %b} – {sunday:%-d %b %Y}"
    return f"{monday:%-d}–{sunday:%-d %b %Y}"


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


def _links(value: object) -> list[Link]:
    if not isinstance(value, Mapping):
        return []
    out = []
    for key, target in value.items():
        name = LINK_NAMES.get(str(key), str(key))
        href = safe_http_url(target)
        out.append(Link(text=name, href=href, target="" if href else str(target)))
    # URLs first (W&B before TensorBoard), then paths shown as text
    return sorted(out, key=lambda link: (link.href is None, link.text.lower()))


# -- the report's rows -------------------------------------------------------------------------
def _hours_number(value: object) -> str:
    return fmt_hours(value).removesuffix(" GPU-h")


_CARDS = (
    # field, label, format, which direction is good (+1 up, -1 down, 0 neither)
    ("gpu_hours", "GPU-hours", fmt_hours, 0),
    ("spend_usd", "Spend", fmt_usd, -1),
    ("utilization_pct", "Utilization", fmt_pct, +1),
    ("waste_usd", "Recoverable waste", fmt_usd, -1),
    ("idle_usd", "Idle", fmt_usd, -1),
    ("runs", "Runs", fmt_int, 0),
)


def _cards(k: WeekKpis) -> list[dict[str, str]]:
    h, t = k.headline, k.thresholds
    notes = {
        "gpu_hours": (f"{fmt_hours(h.gpu_hours - h.known_gpu_hours)} without utilization data"
                      if h.gpu_hours - h.known_gpu_hours > 0.005 else "allocated to runs"),
        "spend_usd": (f"excludes {fmt_hours(h.unpriced_gpu_hours)} without a price"
                      if h.unpriced_gpu_hours > 0 else "GPU-hours × price of the model"),
        "utilization_pct": f"{k.basis_label}, weighted by GPU-hours; target {t.target_util_pct:.0f}%",
        "waste_usd": f"cost of running under the {t.target_util_pct:.0f}% target",
        "idle_usd": f"GPU-time under {t.idle_pct:.0f}% for {t.idle_window_min}+ minutes",
        "runs": f"{h.underutilized_runs:,} underutilized (under {t.underutilized_pct:.0f}%)",
    }
    cards = []
    for field, label, fmt, good in _CARDS:
        change = _num(k.change_pct.get(field))
        previous = getattr(k.previous, field) if k.previous is not None else None
        if change is None or round(change, 1) == 0 or good == 0:
            tone = "flat"
        else:
            tone = "good" if (change > 0) == (good > 0) else "bad"
        value = getattr(k.headline, field)
        cards.append({
            "field": field, "label": label,
            "value": _hours_number(value) if field == "gpu_hours" else fmt(value),
            "unit": "GPU-h" if field == "gpu_hours" and _num(value) is not None else "",
            "change": fmt_change(change),
            "tone": tone, "previous": fmt(previous) if k.previous is not None else "none",
            "note": notes[field]})
    return cards


def _breakdown_rows(df: pd.DataFrame, key: str) -> list[dict[str, str]]:
    rows = []
    for r in df.head(MAX_BREAKDOWN_ROWS).to_dict("records"):
        rows.append({"name": _text(r[key], "(none)"), "gpu_hours": fmt_hours(r["gpu_hours"]),
                     "utilization": fmt_pct(r["utilization_pct"]),
                     "spend": fmt_usd(r["spend_usd"]),
                     "waste": fmt_usd(r["waste_usd"]), "idle": fmt_usd(r["idle_usd"]),
                     "runs": fmt_int(r["runs"])})
    return rows


def _gpus(count: object, model: object) -> str:
    model_text = _text(model, "unknown GPU")
    n = _num(count)
    return f"{round(n)} × {model_text}" if n else model_text


def _run_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for r in df.head(MAX_RUN_ROWS).to_dict("records"):
        started = r.get("started_at")
        rows.append({
            "name": _text(r["name"], _text(r.get("run_id"))), "team": _text(r["team"]),
            "project": _text(r["project"]), "user": _text(r["user"]),
            "gpus": _gpus(r["gpu_count"], r["gpu_model"]),
            "started": "" if _missing(started) else f"{pd.Timestamp(started):%Y-%m-%d %H:%M}",
            "gpu_hours": fmt_hours(r["gpu_hours"]), "utilization": fmt_pct(r["utilization_pct"]),
            "spend": fmt_usd(r["spend_usd"]), "waste": fmt_usd(r["waste_usd"]),
            "verdict": _text(r["verdict"]), "advice": _text(r["advice"], ""),
            "links": _links(r["links"])})
    return rows


def _rightsizing_rows(k: WeekKpis) -> list[dict[str, str]]:
    if k.rightsizing.empty:
        return []
    totals = (k.runs.set_index("run_id")["mem_total_gib"].to_dict()
              if "mem_total_gib" in k.runs else {})
    rows = []
    for r in k.rightsizing.head(MAX_RUN_ROWS).to_dict("records"):
        total = totals.get(r["run_id"])
        peak = fmt_gib(r["mem_peak_gib"])
        rows.append({"name": _text(r["name"], _text(r["run_id"])), "team": _text(r["team"]),
                     "current": _text(r["gpu_model"], "unknown GPU"),
                     "memory": peak if _missing(total) else f"{peak} of {fmt_gib(total)}",
                     "utilization": fmt_pct(r["utilization_pct"]),
                     "suggested": _text(r["suggested_gpu"]), "saving": fmt_usd(r["saving_usd"])})
    return rows


def _trend_totals(k: WeekKpis) -> dict[str, str]:
    """The trend's weeks taken together: sums, and utilization weighted by GPU-hours."""
    t = k.trend
    if t.empty:
        return {}
    known = t["known_gpu_hours"].astype(float)
    util = t["utilization_pct"].astype(float)
    used = float((util.fillna(0.0) * known).sum())
    spend, waste = float(t["spend_usd"].sum()), float(t["waste_usd"].sum())
    return {"weeks": str(len(t)), "gpu_hours": fmt_hours(float(t["gpu_hours"].sum())),
            "spend": fmt_usd(spend), "waste": fmt_usd(waste),
            "waste_share": fmt_pct(100.0 * waste / spend if spend > 0 else None),
            "idle": fmt_usd(float(t["idle_usd"].sum())),
            "utilization": fmt_pct(used / float(known.sum()) if known.sum() > 0 else None),
            "runs": fmt_int(int(t["runs"].sum())),
            "first": week_label(t["week"].iloc[0]), "last": week_label(t["week"].iloc[-1])}


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _charts(charts: Mapping[str, bytes]) -> dict[str, dict[str, str]]:
    return {name: {"src": _data_uri(png), "alt": CHART_ALT.get(name, name.replace("_", " "))}
            for name, png in charts.items()}


def _lede(k: WeekKpis) -> str:
    h = k.headline
    if h.gpu_hours <= 0:
        return "No GPU time was recorded this week."
    util = ("utilization unknown" if h.utilization_pct is None
            else f"{fmt_pct(h.utilization_pct)} {k.basis_label}")
    text = (f"{fmt_hours(h.gpu_hours)} across {h.runs:,} runs cost {fmt_usd(h.spend_usd)} at "
            f"{util}. {fmt_usd(h.waste_usd)} of it was recoverable waste")
    if h.idle_usd > 0:
        text += f" and {fmt_usd(h.idle_usd)} paid for idle GPUs"
    return text + "."


def report_context(k: WeekKpis, charts: Mapping[str, bytes], *, title: str,
                   report_url: str | None, generated_at: datetime | None) -> dict[str, Any]:
    """Everything the report template shows, as display strings."""
    h, t = k.headline, k.thresholds
    label = week_label(k.week)
    under_rows = _run_rows(k.underutilized)
    return {
        "title": title, "week": label, "dates": _week_dates(label),
        "basis_label": k.basis_label, "lede": _lede(k),
        "generated_at": (generated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
                         if generated_at else ""),
        "report_url": safe_http_url(report_url) or "",
        "cards": _cards(k),
        "unit_costs": [f"{fmt_usd(v)} {unit}" for v, unit in (
            (h.usd_per_1k_samples, "per 1k samples"), (h.usd_per_1m_tokens, "per 1M tokens"))
            if not _missing(v)],
        "charts": _charts(charts), "totals": _trend_totals(k),
        "underutilized": {
            "share": fmt_pct(h.underutilized_gpu_hours_pct), "runs": f"{h.underutilized_runs:,}",
            "hours": fmt_hours(sum(float(x) for x in k.underutilized["gpu_hours"])
                               if len(k.underutilized) else 0.0),
            "waste": fmt_usd(sum(float(x) for x in k.underutilized["waste_usd"])
                             if len(k.underutilized) else 0.0),
            "share_value": f"{min(h.underutilized_gpu_hours_pct or 0.0, 100.0):.1f}"},
        "breakdowns": [{"key": key, "title": name,
                        "rows": _breakdown_rows(k.by.get(key, pd.DataFrame()), key),
                        "more": max(len(k.by.get(key, ())) - MAX_BREAKDOWN_ROWS, 0)}
                       for key, name in BREAKDOWNS],
        "runs": under_rows, "more_runs": max(len(k.underutilized) - MAX_RUN_ROWS, 0),
        "rightsizing": _rightsizing_rows(k),
        "more_rightsizing": max(len(k.rightsizing) - MAX_RUN_ROWS, 0),
        "thresholds": {"target": fmt_pct(t.target_util_pct, 0),
                       "underutilized": fmt_pct(t.underutilized_pct, 0),
                       "min_hours": fmt_hours(t.underutilized_min_gpu_hours),
                       "idle": fmt_pct(t.idle_pct, 0), "idle_window": str(t.idle_window_min)},
        "unpriced": fmt_hours(h.unpriced_gpu_hours) if h.unpriced_gpu_hours > 0 else "",
    }


# -- templates ---------------------------------------------------------------------------------
def _load_resource(name: str) -> str | None:
    """A template from the installed package ``reports.templates`` (a wheel), if there."""
    from importlib import resources

    try:
        files = resources.files(TEMPLATES_PACKAGE)
    except ModuleNotFoundError:
        return None
    entry = files.joinpath(name)
    return entry.read_text(encoding="utf-8") if entry.is_file() else None


def source_templates_dir() -> Path:
    """The repo's ``templates/`` next to the ``reports`` package (a source checkout)."""
    import reports

    return Path(reports.__file__).resolve().parent.parent / "templates"


def environment() -> Any:
    """The Jinja2 environment: autoescape on, undefined names an error, templates from the
    installed ``reports.templates`` package, else from the source tree's ``templates/``."""
    try:
        import jinja2
    except ImportError as e:  # pragma: no cover - the [reports] extra is missing
        raise ImportError("the HTML report needs Jinja2: pip install 'gpu-kpi[reports]'") from e

    loader = jinja2.ChoiceLoader([jinja2.FunctionLoader(_load_resource),
                                  jinja2.FileSystemLoader(source_templates_dir())])
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def render_html(k: WeekKpis, charts: Mapping[str, bytes], *, title: str = "GPU efficiency report",
                report_url: str | None = None, generated_at: datetime | None = None) -> str:
    """The week's report as one standalone HTML page: headline cards with week-over-week
    change, the trend charts (``charts``, PNG bytes by name, from :func:`reports.render.charts.charts`;
    missing ones are left out), spend and waste by team, project, user and GPU model, the
    underutilized runs with their verdicts and links, right-sizing, and the definitions.
    ``report_url`` (http(s)) is shown as the report's permanent address; ``generated_at`` is
    printed in the footer when given (left out otherwise, so the page is reproducible)."""
    context = report_context(k, charts, title=title, report_url=report_url,
                             generated_at=generated_at)
    return str(environment().get_template("report.html.j2").render(**context))


# -- the multi-week index ----------------------------------------------------------------------
SPARK_W, SPARK_H, SPARK_PAD = 300, 48, 4


def sparkline(values: Sequence[object]) -> dict[str, Any]:
    """An inline SVG sparkline's geometry: polyline point lists (a gap where a value is
    missing), the last point, and the range, for a ``SPARK_W`` × ``SPARK_H`` box."""
    nums = [_num(v) for v in values]
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
    return {"width": SPARK_W, "height": SPARK_H,
            "lines": [" ".join(s) for s in segments if len(s) > 1],
            "dots": [] if last is None else [{"x": f"{last[0]:.1f}", "y": f"{last[1]:.1f}"}]}


INDEX_FIELDS = ("label", "gpu_hours", "spend_usd", "utilization_pct", "waste_usd", "idle_usd",
                "runs")


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


def index_context(weeks: Iterable[Mapping[str, Any]], *, title: str,
                  generated_at: datetime | None) -> dict[str, Any]:
    rows = []
    for w in weeks:
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
        return [_num(w[field]) for _, w in rows]

    def latest(field: str, fmt: Any) -> str:
        return fmt(rows[-1][1][field]) if rows else "n/a"

    def span(field: str, fmt: Any) -> str:
        known = [v for v in series(field) if v is not None]
        return f"low {fmt(min(known))} · high {fmt(max(known))}" if known else "no data"

    sparks = [
        {"title": "Utilization", "value": latest("utilization_pct", fmt_pct),
         "range": span("utilization_pct", fmt_pct), "css": "util",
         **sparkline(series("utilization_pct"))},
        {"title": "Spend", "value": latest("spend_usd", fmt_usd),
         "range": span("spend_usd", fmt_usd), "css": "spend", **sparkline(series("spend_usd"))},
        {"title": "Recoverable waste", "value": latest("waste_usd", fmt_usd),
         "range": span("waste_usd", fmt_usd), "css": "waste", **sparkline(series("waste_usd"))},
    ]
    bases = sorted({str(w["basis_label"]) for _, w in rows if w.get("basis_label")})
    table = [{"label": label, "href": _index_href(w, label), "dates": _week_dates(label),
              "gpu_hours": fmt_hours(w["gpu_hours"]), "spend": fmt_usd(w["spend_usd"]),
              "utilization": fmt_pct(w["utilization_pct"]), "waste": fmt_usd(w["waste_usd"]),
              "idle": fmt_usd(w["idle_usd"]), "runs": fmt_int(w["runs"])}
             for label, w in reversed(rows)]
    return {"title": title, "weeks": table, "sparks": sparks,
            "first": rows[0][0] if rows else "", "last": rows[-1][0] if rows else "",
            "basis": " / ".join(bases),
            "generated_at": (generated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
                             if generated_at else "")}


def index_row(k: WeekKpis) -> dict[str, Any]:
    """The index's row for one week's KPIs (what :func:`render_index` takes)."""
    h: Headline = k.headline
    return {"label": week_label(k.week), "gpu_hours": h.gpu_hours, "spend_usd": h.spend_usd,
            "utilization_pct": h.utilization_pct, "waste_usd": h.waste_usd,
            "idle_usd": h.idle_usd, "runs": h.runs, "basis_label": k.basis_label}


def render_index(weeks: list[dict[str, Any]], *, title: str = "GPU efficiency — all weeks",
                 generated_at: datetime | None = None) -> str:
    """The multi-week management dashboard: one row per archived week, newest first, linking
    ``<label>.html`` (or the row's ``href``: relative or http(s)), with sparklines of
    utilization, spend and recoverable waste, oldest to newest.

    Each week is a dict with ``label`` (``2026-W48``), ``gpu_hours``, ``spend_usd``,
    ``utilization_pct`` (None when unknown), ``waste_usd``, ``idle_usd``, ``runs``, and
    optionally ``href`` and ``basis_label`` — :func:`index_row` makes one from a week's KPIs."""
    context = index_context(weeks, title=title, generated_at=generated_at)
    return str(environment().get_template("index.html.j2").render(**context))
