"""The weekly report and the multi-week index as standalone HTML pages (Jinja2).

Python turns the KPIs into plain rows of display strings (``$1,234.56``, ``67.1%``,
``12.3 GPU-h``); the templates in the top-level ``templates/`` folder lay them out. Autoescape
is on and nothing is marked safe: every run name, team, verdict and link is escaped by Jinja2.
Charts arrive as PNG bytes and are embedded as ``data:`` URIs, so a page needs no network, no
file next to it and no JavaScript.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from reports.kpi import WeekKpis, fix_order
from reports.kpi.weekly import unpriced_groups
from reports.render.fmt import (
    as_number,
    fmt_change,
    fmt_change_pp,
    fmt_gib,
    fmt_hours,
    fmt_int,
    fmt_kg,
    fmt_pct,
    fmt_unit_usd,
    fmt_usd,
    links_of,
    missing,
    safe_http_url,
    text_or_dash,
)
from reports.rows import none_priced
from reports.weeks import label_of as week_label
from reports.weeks import week_dates
from tracker.cost import weighted_util_pct
from tracker.extras import install_hint
from tracker.peaks import mfu_lines
from tracker.shares import EVEN, MEASURED
from tracker.text import one_line

TEMPLATES_PACKAGE = "reports.templates"
"""Where an installed wheel carries the templates (mapped from the repo's ``templates/``)."""

BREAKDOWNS = (
    ("team", "Team"),
    ("project", "Project"),
    ("user", "User"),
    ("gpu_model", "GPU model"),
    ("source", "Source"),
)
MAX_BREAKDOWN_ROWS = 15
MAX_RUN_ROWS = 50
CHART_ALT = {
    "trend_utilization": "Utilization per week over the last 12 weeks, with the target line",
    "trend_spend": "Spend in dollars per week over the last 12 weeks",
    "trend_waste": "Recoverable waste and idle dollars per week over the last 12 weeks",
    "util_distribution": "This week's GPU-hours by run utilization bucket",
    "waste_by_team": "This week's recoverable waste in dollars by team",
}


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


PRICE_HINT = "set a price: [prices] in the config, or --price when importing"
"""Where a price comes from, for GPU-time without one."""


def unpriced(k: WeekKpis) -> str:
    """``34.0 GPU-h of RTX A6000 unpriced``: the week's GPU-time without a price, by model;
    empty when every hour has one."""
    h = k.headline
    if h.unpriced_gpu_hours <= 0:
        return ""
    runs = k.runs
    models = (
        sorted({str(m) for m in runs.loc[~runs["priced"].astype(bool), "gpu_model"].dropna()})
        if len(runs) and "priced" in runs
        else []
    )
    of = f" of {', '.join(models)}" if models else ""
    return f"{fmt_hours(h.unpriced_gpu_hours)}{of} unpriced"


def _cards(k: WeekKpis) -> list[dict[str, str]]:
    h, t = k.headline, k.thresholds
    none_priced = h.none_priced
    notes = {
        "gpu_hours": (
            f"{fmt_hours(h.gpu_hours - h.known_gpu_hours)} without utilization data"
            if h.gpu_hours - h.known_gpu_hours > 0.005
            else "allocated to runs"
        ),
        "spend_usd": (
            f"{unpriced(k)}: {PRICE_HINT}"
            if none_priced
            else f"excludes {unpriced(k)}: {PRICE_HINT}"
            if h.unpriced_gpu_hours > 0
            else "GPU-hours × price of the model" + ("; owned: amortized" if k.rent_vs_own else "")
        ),
        "utilization_pct": f"{k.basis_label}, weighted by GPU-hours; target {t.target_util_pct:.0f}%",
        "waste_usd": (
            "not known without a price"
            if none_priced
            else f"of which idle {fmt_usd(h.idle_usd)}; the rest: running under the "
            f"{t.target_util_pct:.0f}% target"
        ),
        "idle_usd": (
            f"part of waste: GPU-time under {t.idle_pct:.0f}% for {t.idle_window_min}+ minutes"
        ),
        "runs": f"{h.underutilized_runs:,} underutilized (under {t.underutilized_pct:.0f}%)",
    }
    cards = []
    for field, label, fmt, good in _CARDS:
        change = as_number(k.change_pct.get(field))
        previous = getattr(k.previous, field) if k.previous is not None else None
        if field == "utilization_pct":  # a share changes in points, as a manager reads it
            change = _points(getattr(k.headline, field), previous)
        if change is None or round(change, 1) == 0 or good == 0:
            tone = "flat"
        else:
            tone = "good" if (change > 0) == (good > 0) else "bad"
        value = getattr(k.headline, field)
        shown = _hours_number(value) if field == "gpu_hours" else fmt(value)
        if none_priced and field in ("spend_usd", "waste_usd", "idle_usd"):
            shown, change, tone = "n/a", None, "flat"  # unpriced is not free: never $0.00
        cards.append(
            {
                "field": field,
                "label": label,
                "value": shown,
                "unit": "GPU-h" if field == "gpu_hours" and as_number(value) is not None else "",
                "change": fmt_change_pp(change)
                if field == "utilization_pct"
                else fmt_change(change),
                "tone": tone,
                "previous": fmt(previous) if k.previous is not None else "none",
                "note": notes[field],
            }
        )
    return cards


def _points(now: object, before: object) -> float | None:
    a, b = as_number(now), as_number(before)
    return None if a is None or b is None else a - b


def _breakdown_rows(df: pd.DataFrame, key: str, runs: pd.DataFrame) -> list[dict[str, str]]:
    rows = []
    unknown = unpriced_groups(runs, key)
    for r in df.head(MAX_BREAKDOWN_ROWS).to_dict("records"):
        usd = (lambda _v: "n/a") if str(r[key]) in unknown else fmt_usd
        rows.append(
            {
                "name": text_or_dash(r[key], "(none)"),
                "gpu_hours": fmt_hours(r["gpu_hours"]),
                "utilization": fmt_pct(r["utilization_pct"]),
                "spend": usd(r["spend_usd"]),
                "waste": usd(r["waste_usd"]),
                "idle": usd(r["idle_usd"]),
                "co2e": fmt_kg(r.get("co2e_kg")),
                "runs": fmt_int(r["runs"]),
            }
        )
    return rows


def _energy(k: WeekKpis) -> str:
    """``Energy 412 kWh · 198 kg CO2e (480 g/kWh, PUE 1.0), from runs with 75% of the
    GPU-hours``; empty when no run measured its energy."""
    h, c = k.headline, k.carbon
    if missing(h.energy_kwh) or missing(h.co2e_kg):
        return ""
    grid = f"{c.g_per_kwh:g} g/kWh" + (" or per host" if c.hosts else "")
    pue = f"{c.pue:.1f}" if round(c.pue, 1) == c.pue else f"{c.pue:g}"
    text = f"Energy {fmt_int(h.energy_kwh)} kWh · {fmt_kg(h.co2e_kg)} CO2e ({grid}, PUE {pue})"
    if h.gpu_hours > 0 and h.energy_gpu_hours < h.gpu_hours - 0.005:
        text += (
            f", from the runs with {fmt_pct(100 * h.energy_gpu_hours / h.gpu_hours, 0)} "
            "of the GPU-hours that measured it"
        )
    return text


def _rent_vs_own(k: WeekKpis) -> list[dict[str, str]]:
    return [
        {"sentence": r.sentence(), "basis": r.basis, "cheaper": r.cheaper} for r in k.rent_vs_own
    ]


def _gpus(count: object, model: object, mig: object = None, split: object = None) -> str:
    """The GPUs a run held: ``2 × H100``; a MIG instance's profile (``1 × A100-80GB MIG
    1g.10gb``: its GPU-hours its share of the GPU); a GPU shared in time, and how its share
    was had (evenly where no per-process figure measured it)."""
    model_text = text_or_dash(model, "unknown GPU")
    if not missing(mig) and mig:
        model_text += f" MIG {text_or_dash(mig)}"
    n = as_number(count)
    text = f"{round(n)} × {model_text}" if n else model_text
    if split == MEASURED:
        text += ", time-sliced (its measured share)"
    elif split == EVEN:
        text += ", time-sliced (split evenly: no per-process figure measured its share)"
    return text


def _run_rows(df: pd.DataFrame, slow: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    rows = []
    df = df.head(MAX_RUN_ROWS)
    machine = _machine_sentences(df, slow)
    for r, says in zip(df.to_dict("records"), machine, strict=True):
        started = r.get("started_at")
        rows.append(
            {
                "name": text_or_dash(r["name"], text_or_dash(r.get("run_id"))),
                "team": text_or_dash(r["team"]),
                "project": text_or_dash(r["project"]),
                "user": text_or_dash(r["user"]),
                "gpus": _gpus(
                    r["gpu_count"], r["gpu_model"], r.get("mig_profile"), r.get("gpu_split")
                ),
                "started": "" if missing(started) else f"{pd.Timestamp(started):%Y-%m-%d %H:%M}",
                "gpu_hours": fmt_hours(r["gpu_hours"]),
                "utilization": fmt_pct(r["utilization_pct"]),
                "spend": fmt_usd(r["spend_usd"]) if r.get("priced", True) else "n/a",
                "waste": _waste_cell(r),
                "verdict": text_or_dash(r["verdict"]),
                "advice": text_or_dash(r["advice"], ""),
                "machine": says,
                "mfu": mfu_lines(r),
                "links": links_of(r["links"]),
            }
        )
    return rows


def _machine_sentences(df: pd.DataFrame, slow: pd.DataFrame | None) -> list[str]:
    """Each row's machine share in a sentence, as the ledger counts it (its throttled and slow
    node GPU-hours and dollars: :func:`tracker.machine.machine_words`); empty where it has
    none worth naming."""
    from reports.kpi.jobkeys import job_keys
    from tracker.machine import SHOWN_FROM_SHARE, machine_words, throttled_words

    slower: dict[tuple[str, str], float] = {}
    if slow is not None and len(slow):
        slower = {
            (str(k), str(h)): float(p)
            for k, h, p in zip(slow["job_key"], slow["host"], slow["slowdown_pct"], strict=True)
        }
    out = []
    keys = job_keys(df["name"], df["links"]).tolist() if slower and len(df) else [""] * len(df)
    for r, key in zip(df.to_dict("records"), keys, strict=True):
        held = as_number(r.get("gpu_hours")) or 0.0
        throttled = as_number(r.get("throttled_hours")) or 0.0
        lost = as_number(r.get("slow_node_hours")) or 0.0
        parts = []
        named = held > 0 and throttled >= SHOWN_FROM_SHARE * held
        if named:
            gpus = int(as_number(r.get("gpu_count")) or 1)
            parts.append(throttled_words(throttled, gpus, r.get("throttle_source")))
        pct = slower.get((key, str(r.get("host"))))
        if lost > 0 and pct is not None:
            parts.append(f"node {text_or_dash(r.get('host'))} {pct:.0f}% slower than its siblings")
        else:
            lost = 0.0
        if not parts:
            out.append("")
            continue
        usd = None
        if r.get("priced", True):
            usd = (as_number(r.get("slow_node_usd")) or 0.0) if lost else 0.0
            usd += (as_number(r.get("throttled_usd")) or 0.0) if named else 0.0
        share = ((throttled if named else 0.0) + lost) / held
        out.append(machine_words(share, usd, parts, what="run"))
    return out


def _waste_cell(r: Mapping[str, Any]) -> str:
    """A run's recoverable waste, and beside it its dollars no sample measured, of failed work
    and of re-done work (the machine's are said under its verdict)."""
    if not r.get("priced", True):
        return "n/a"
    text = fmt_usd(r["waste_usd"])
    for column, what in (
        ("unmeasured_usd", "not measured"),
        ("failed_usd", "failed work"),
        ("redone_usd", "re-done"),
    ):
        usd = as_number(r.get(column))
        if usd is not None and usd >= 0.005:
            text += f" + {fmt_usd(usd)} {what}"
    return text


def _rightsizing_rows(k: WeekKpis) -> list[dict[str, str]]:
    if k.rightsizing.empty:
        return []
    shown = k.rightsizing.head(MAX_RUN_ROWS)
    totals = {}
    if "mem_total_gib" in k.runs:  # of the runs shown (a week may hold a million)
        of = k.runs[k.runs["run_id"].isin(shown["run_id"])]
        totals = dict(zip(of["run_id"], of["mem_total_gib"], strict=True))
    rows = []
    for r in shown.to_dict("records"):
        total = totals.get(r["run_id"])
        peak = fmt_gib(r["mem_peak_gib"])
        rows.append(
            {
                "name": text_or_dash(r["name"], text_or_dash(r["run_id"])),
                "team": text_or_dash(r["team"]),
                "current": text_or_dash(r["gpu_model"], "unknown GPU"),
                "memory": peak if missing(total) else f"{peak} of {fmt_gib(total)}",
                "utilization": fmt_pct(r["utilization_pct"]),
                "suggested": text_or_dash(r["suggested_gpu"]),
                "saving": fmt_usd(r["saving_usd"]),
                "assumption": text_or_dash(r.get("assumption"), ""),
            }
        )
    return rows


def _trend_totals(k: WeekKpis) -> dict[str, str]:
    """The trend's weeks taken together: sums, and utilization weighted by GPU-hours."""
    t = k.trend
    if t.empty:
        return {}
    known = t["known_gpu_hours"].astype(float)
    util = t["utilization_pct"].astype(float)
    used = float((util.fillna(0.0) * known).sum())  # Σ util × known GPU-hours
    spend, waste = float(t["spend_usd"].sum()), float(t["waste_usd"].sum())
    hours = float(t["gpu_hours"].sum())
    unknown = none_priced(hours, float(t["unpriced_gpu_hours"].sum()))

    def usd(value: float) -> str:
        return "n/a" if unknown else fmt_usd(value)  # unpriced is not free

    return {
        "weeks": str(len(t)),
        "gpu_hours": fmt_hours(hours),
        "spend": usd(spend),
        "waste": usd(waste),
        "waste_share": fmt_pct(100.0 * waste / spend if spend > 0 else None),
        "idle": usd(float(t["idle_usd"].sum())),
        "utilization": fmt_pct(weighted_util_pct(used, float(known.sum()))),
        "runs": fmt_int(int(t["runs"].sum())),
        "first": week_label(t["week"].iloc[0]),
        "last": week_label(t["week"].iloc[-1]),
    }


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _charts(charts: Mapping[str, bytes]) -> dict[str, dict[str, str]]:
    return {
        name: {"src": _data_uri(png), "alt": CHART_ALT.get(name, name.replace("_", " "))}
        for name, png in charts.items()
    }


def dates_of(k: WeekKpis) -> str:
    """The week's dates (``Mon 23 Nov – Sun 29 Nov 2026``), and for a week under way the time
    its figures run to (``so far, to Tue 14:02``)."""
    dates = week_dates(week_label(k.week))
    return f"{dates} · so far, to {k.so_far:%a %H:%M}" if k.so_far else dates


def _lede(k: WeekKpis) -> str:
    h = k.headline
    if h.gpu_hours <= 0:
        hint = f" {k.hint[0].upper()}{k.hint[1:]}." if k.hint else ""
        return "No GPU time was recorded this week." + hint
    util = (
        "utilization unknown"
        if h.utilization_pct is None
        else f"{fmt_pct(h.utilization_pct)} {k.basis_label}"
    )
    across = f"{h.runs:,} run{'s' if h.runs != 1 else ''}"
    jobs = f"{h.jobs:,} scheduler job{'s' if h.jobs != 1 else ''}"
    if h.jobs:
        across = f"{across} and {jobs}" if h.runs else jobs
    if h.none_priced:
        return (
            f"{fmt_hours(h.gpu_hours)} across {across} at {util}. Cost and waste: n/a — "
            f"{unpriced(k)}: {PRICE_HINT}."
        )
    text = (
        f"{fmt_hours(h.gpu_hours)} across {across} cost {fmt_usd(h.spend_usd)} at "
        f"{util}. {fmt_usd(h.waste_usd)} of it was recoverable waste"
    )
    if h.idle_usd > 0:
        text += f", of which {fmt_usd(h.idle_usd)} paid for idle GPUs"
    for _, hours, usd, column, what in _BESIDE:
        if beside := _paid_for(k, getattr(h, hours), getattr(h, usd), column, what):
            text += f"; {beside}"
    if h.unpriced_gpu_hours > 0:
        text += f". Not counted: {unpriced(k)} ({PRICE_HINT})"
    free = _unallocated(k)
    if free:
        text += f". {free[0].upper()}{free[1:]}"
    return text + "."


LEDE_NAME_CHARS = 60
"""A name in the lede is cut to this many characters (one line)."""


_BESIDE: tuple[tuple[str, str, str, str, str], ...] = (
    # the name "beside the waste" gives it, the headline's GPU-hours and dollars, the rows'
    # dollars, and what the lede says was paid for
    (
        "not measured",
        "unmeasured_gpu_hours",
        "unmeasured_usd",
        "unmeasured_usd",
        "GPU-time no sample measured",
    ),
    (
        "failed work",
        "failed_gpu_hours",
        "failed_usd",
        "failed_usd",
        "runs and jobs that failed or crashed",
    ),
    (
        "re-done work",
        "redone_gpu_hours",
        "redone_usd",
        "redone_usd",
        "steps run twice after a resume from a checkpoint",
    ),
    (
        "throttled",
        "throttled_gpu_hours",
        "throttled_usd",
        "throttled_usd",
        "GPU-time the machine held below its clocks for power or thermal reasons",
    ),
    (
        "slow nodes",
        "slow_node_gpu_hours",
        "slow_node_usd",
        "slow_node_usd",
        "GPU-time lost to slow nodes",
    ),
)
"""The ledger's buckets paid and in no cause of waste, as the lede and "beside the waste" name
them (:data:`reports.kpi.ledger.BESIDE_WASTE_USD`): ``$85.72 paid for GPU-time no sample
measured (23.2 GPU-h; the most: interactive-debug, ana · nlp, $77.00)``."""


def _paid_for(k: WeekKpis, hours: float, usd: float, column: str, what: str) -> str:
    """A lede's clause of GPU-time paid beside the waste: its dollars (or hours, unpriced) and
    the row of ``column`` with the most; empty under 0.005 GPU-hours."""
    if hours < 0.005:
        return ""
    shown = fmt_hours(hours)
    paid = usd >= 0.005
    text = f"{fmt_usd(usd)} paid for {what} ({shown}" if paid else f"{shown} of {what} (unpriced"
    rows = k.runs
    if len(rows) and column in rows:
        each = pd.to_numeric(rows[column], errors="coerce")
        if each.notna().any() and float(each.max()) >= 0.005:
            r = rows.loc[each.idxmax()]
            owner = " · ".join(
                one_line(text_or_dash(r[c]), LEDE_NAME_CHARS)
                for c in ("user", "team")
                if not missing(r[c])
            )
            owner = f", {owner}" if owner else ""
            name = one_line(text_or_dash(r["name"]), LEDE_NAME_CHARS)
            text += f"; the most: {name}{owner}, {fmt_usd(each.max())}"
    return text + ")"


def _unallocated(k: WeekKpis) -> str:
    """``capacity nobody held: 573.0 GPU-h of owned GPUs, $281.75 (not in the spend)`` (and
    the listed nodes' GPU-hours, which have no price); empty when no capacity is known or all
    of it was held."""
    h = k.headline
    if h.unallocated_gpu_hours is None or h.unallocated_gpu_hours < 0.005:
        return ""
    text = f"capacity nobody held: {fmt_hours(h.unallocated_gpu_hours)}"
    owned = h.unallocated_gpu_hours - h.unallocated_unpriced_gpu_hours
    listed = h.unallocated_unpriced_gpu_hours >= 0.005
    if h.unallocated_usd is not None and h.unallocated_usd >= 0.005:
        if listed:
            text += (
                f", {fmt_usd(h.unallocated_usd)} for the {fmt_hours(owned)} of owned GPUs and "
                f"{fmt_hours(h.unallocated_unpriced_gpu_hours)} of nodes without a price"
            )
        else:
            text += f" of owned GPUs, {fmt_usd(h.unallocated_usd)}"
        text += " (not in the spend)"
    elif listed:
        text += " of listed nodes (no price)"
    return text


def beside_waste(k: WeekKpis) -> str:
    """What was paid and is in no cause of waste (:data:`_BESIDE`: not measured, failed and
    re-done work, the machine's throttled time and slow nodes) and capacity nobody held, in
    dollars (GPU-hours where unpriced); empty when none."""
    h = k.headline
    parts = []
    for what, hours_field, usd_field, _, _ in _BESIDE:
        held, paid = getattr(h, hours_field), getattr(h, usd_field)
        if held >= 0.005:
            parts.append(f"{what} " + (fmt_usd(paid) if paid >= 0.005 else fmt_hours(held)))
    if h.unallocated_gpu_hours is not None and h.unallocated_gpu_hours >= 0.005:
        usd = h.unallocated_usd is not None and h.unallocated_usd >= 0.005
        parts.append(
            "capacity nobody held "
            + (fmt_usd(h.unallocated_usd) if usd else fmt_hours(h.unallocated_gpu_hours))
        )
    return " and ".join(parts)


def _skipped(k: WeekKpis) -> dict[str, Any]:
    """What the figures leave out (:class:`reports.kpi.Skipped`), as display strings."""
    s = k.skipped
    return {
        "summary": s.summary(),
        "runs": [
            {"name": text_or_dash(r.name, r.run_id), "run_id": r.run_id, "reason": r.reason}
            for r in s.runs
        ],
        "samples": [
            {
                "name": text_or_dash(b.name, b.run_id),
                "run_id": b.run_id,
                "rows": fmt_int(b.rows),
                "reason": b.reason,
            }
            for b in s.samples
        ],
    }


def report_context(
    k: WeekKpis,
    charts: Mapping[str, bytes],
    *,
    title: str,
    report_url: str | None,
    generated_at: datetime | None,
) -> dict[str, Any]:
    """Everything the report template shows, as display strings."""
    h, t = k.headline, k.thresholds
    label = week_label(k.week)
    # runs_to_fix(k, first=MAX_RUN_ROWS), with the count of them all: the rows shown taken,
    # not every run to fix copied
    order = fix_order(k)
    under_rows = _run_rows(k.runs.iloc[order[:MAX_RUN_ROWS]].reset_index(drop=True), k.slow_nodes)
    causes = _causes(k)
    return {
        "title": title,
        "week": label + (" so far" if k.so_far else ""),
        "dates": dates_of(k),
        "basis_label": k.basis_label,
        "lede": _lede(k),
        "generated_at": (
            generated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if generated_at else ""
        ),
        "report_url": safe_http_url(report_url) or "",
        "cards": _cards(k),
        # a week under way is compared with the week before at the same point (pro rata)
        "previous_label": "last week to this point" if k.so_far else "last week",
        "unit_costs": [
            f"{fmt_unit_usd(v)} {unit}"
            for v, unit in (
                (h.usd_per_1k_samples, "per 1k samples"),
                (h.usd_per_1m_tokens, "per 1M tokens"),
            )
            if not missing(v)
        ],
        "charts": _charts(charts),
        "totals": _trend_totals(k),
        "underutilized": {
            "share": fmt_pct(h.underutilized_gpu_hours_pct),
            "runs": f"{h.underutilized_runs:,}",
            "hours": fmt_hours(
                sum(float(x) for x in k.underutilized["gpu_hours"]) if len(k.underutilized) else 0.0
            ),
            "waste": "n/a"
            if h.none_priced
            else fmt_usd(
                sum(float(x) for x in k.underutilized["waste_usd"]) if len(k.underutilized) else 0.0
            ),
            "share_value": f"{min(h.underutilized_gpu_hours_pct or 0.0, 100.0):.1f}",
        },
        "breakdowns": [
            {
                "key": key,
                "title": name,
                "rows": _breakdown_rows(k.by.get(key, pd.DataFrame()), key, k.runs),
                "more": max(len(k.by.get(key, ())) - MAX_BREAKDOWN_ROWS, 0),
            }
            for key, name in BREAKDOWNS
        ],
        "runs": under_rows,
        "runs_to_fix": len(order),
        "more_runs": max(len(order) - MAX_RUN_ROWS, 0),
        "rightsizing": _rightsizing_rows(k),
        "energy": _energy(k),
        "rent_vs_own": _rent_vs_own(k),
        # a week under way has part of its GPU-hours: no what-if from it
        "what_if": k.what_if.sentence() if k.what_if is not None and not k.so_far else "",
        "more_rightsizing": max(len(k.rightsizing) - MAX_RUN_ROWS, 0),
        "thresholds": {
            "target": fmt_pct(t.target_util_pct, 0),
            "underutilized": fmt_pct(t.underutilized_pct, 0),
            "min_hours": fmt_hours(t.underutilized_min_gpu_hours),
            "idle": fmt_pct(t.idle_pct, 0),
            "idle_window": str(t.idle_window_min),
        },
        "unpriced": fmt_hours(h.unpriced_gpu_hours) if h.unpriced_gpu_hours > 0 else "",
        "skipped": _skipped(k),
        "sections": sections(k, "html"),
        "causes": causes,
        "summary_lines": [
            {"id": i, "label": label, "text": text}
            for part in k.parts.values()
            for i, label, text in part.summary()
        ],
        "top_causes": " · ".join(f"{c['label']} {c['usd']}" for c in causes[:3]),
        "beside_waste": beside_waste(k),
    }


def sections(k: WeekKpis, fmt: str, *, brief: bool = False) -> list[dict[str, Any]]:
    """Every section of the week that is a unit (:attr:`WeekKpis.parts`, in their order),
    with its partial of format ``fmt`` (``html``, ``email.html``, ``email.txt``) and its view
    (None: it shows nothing; the templates keep its place, so a page reads the same whichever
    sections show)."""
    return [
        {
            "name": name,
            "place": part.place,
            "template": f"_{name}.{fmt}.j2",
            "view": part.view(brief=brief),
        }
        for name, part in k.parts.items()
    ]


def _causes(k: WeekKpis) -> list[dict[str, Any]]:
    """The week's waste by cause (:attr:`reports.kpi.weekly.WeekKpis.causes`), for its bars."""
    lines = k.causes
    total = sum(c.cents for c in lines)
    most = max((c.cents for c in lines), default=0)
    return [
        {
            "label": c.label,
            "usd": fmt_usd(c.cents / 100),
            "share": fmt_pct(100.0 * c.cents / total if total else None, 0),
            "width": f"{100.0 * c.cents / most:.1f}" if most else "0",
            "inferred": fmt_usd(c.inferred_usd) if c.inferred_usd >= 0.005 else "",
            "runs": f"{c.runs:,} run{'s' if c.runs != 1 else ''}",
            "top": ", ".join(f"{text_or_dash(name)} ({fmt_usd(usd)})" for name, usd in c.top),
            "fix": c.fix,
        }
        for c in lines
    ]


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
    return Path(__file__).resolve().parents[2] / "templates"


@functools.cache
def environment(*, autoescape: bool = True) -> Any:
    """The Jinja2 environment: undefined names an error, templates from the installed
    ``reports.templates`` package, else from the source tree's ``templates/``. One per process
    (Jinja2 compiles each template once into its cache; rendering is thread-safe).

    Args:
        autoescape: False for the plain-text parts of emails, which must not be HTML-escaped.
    """
    try:
        import jinja2
    except ImportError as e:  # pragma: no cover - the [reports] extra is missing
        raise ImportError(f"the HTML report needs Jinja2: {install_hint('reports')}") from e

    loader = jinja2.ChoiceLoader(
        [jinja2.FunctionLoader(_load_resource), jinja2.FileSystemLoader(source_templates_dir())]
    )
    return jinja2.Environment(
        loader=loader,
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_html(
    k: WeekKpis,
    charts: Mapping[str, bytes],
    *,
    title: str = "GPU efficiency report",
    report_url: str | None = None,
    generated_at: datetime | None = None,
    fleet_url: str | None = None,
) -> str:
    """The week's report as one standalone HTML page: headline cards with week-over-week
    change, the trend charts (``charts``, PNG bytes by name, from :func:`reports.render.charts.charts`;
    missing ones are left out), spend and waste by team, project, user and GPU model, the
    underutilized runs with their verdicts and links, right-sizing, and the definitions.
    ``report_url`` (http(s)) is shown as the report's permanent address; ``generated_at`` is
    printed in the footer when given (left out otherwise, so the page is reproducible).
    ``fleet_url``: on a team's page, the whole fleet's report, linked in the footer."""
    context = report_context(
        k, charts, title=title, report_url=report_url, generated_at=generated_at
    )
    context["fleet_url"] = safe_http_url(fleet_url) or ""
    # the archive's neighbours, side by side in its folder (a team's page has its own folder)
    before = week_label(k.week - pd.Timedelta(days=7))  # a week start, give or take an hour
    context["nav"] = (
        {"previous": {"week": before, "href": f"{before}.html"}, "index": "index.html"}
        if fleet_url is None
        else None
    )
    return str(environment().get_template("report.html.j2").render(**context))
