"""JSON and CSV exports of a week's KPIs for dashboards and BI tools.

Field names are stable and documented here; the schema id changes when they do.

JSON (``<week>.json``): ``generator`` (``gpu-kpi``: the archive index reads only files with it,
or older ones with the ``schema``), ``schema`` (``gpu-kpi.week/1``), ``week`` (``2026-W48``),
``week_start``/``week_end`` (ISO 8601, the report time zone), ``time_zone``, ``basis`` (``util``
| ``sm_active``) and ``basis_label``, ``thresholds``, ``headline`` and ``previous``
(:data:`HEADLINE_FIELDS`), ``change_pct`` (week-over-week, %), ``by_team``, ``by_project``,
``by_user``, ``by_gpu_model``, ``by_source`` (where the runs came from: ``tracker``,
``nvidia-smi``…) (:data:`GROUP_FIELDS` plus the group's name), ``runs`` (:data:`RUN_FIELDS`; the
:data:`MAX_JSON_RUNS` with the most recoverable waste, ``runs_count`` of them in the week,
``runs_left_out`` only in the CSV), ``underutilized`` (run ids, as many at most),
``rightsizing`` (the as many largest savings; ``rightsizing_count`` in all) and ``trend`` (one
headline per week, oldest first), ``excluded`` (runs left out of every figure: ``run_id``,
``name``, ``reason``) and ``excluded_count``, ``bad_samples`` (sample rows left out or read as
unknown, per run and reason: ``run_id``, ``name``, ``rows``, ``reason``) and
``bad_sample_rows``, and ``skipped`` (the one-line summary of both, ``""`` when none),
``budgets`` (each team's spend against its ``[[budgets]]``: ``team``, ``period`` (``week`` |
``month``), ``label`` (``2026-W49`` | ``2026-12``), ``start``/``end``/``until`` (the spend is
counted to ``until``), ``complete``, ``spend_usd``, ``budget_usd``, ``used_pct``,
``forecast_usd`` and ``forecast_pct`` (the period's end at the rate so far; null before a day
has passed), ``level`` (80, 100 or null), ``runs`` (the largest spends: ``name``,
``spend_usd``)), ``waste_by_cause`` (:data:`CAUSE_FIELDS`, ``top`` runs and ``fix``),
``recurring_jobs`` (:data:`RECURRING_FIELDS`), ``savings`` (:data:`SAVING_FIELDS`: each change
to a recurring job, before and after, in dollars) and ``savings_by_team`` (``team``,
``usd_per_week``, ``usd_to_date``, ``changes``), ``ledger`` (bucket → ``gpu_hours``, ``usd``:
capacity nobody held where known, not measured, failed work, held idle, busy below target,
useful;
:func:`reports.kpi.ledger.ledger_totals`), ``capacity_what_if`` (null for a week under way or
with no recoverable waste: ``runs``, ``gpu_hours``, ``gpus``, ``hours``, ``used_gpus``,
``growth_pct_month``, ``trend_weeks``, ``months``, ``owned_model``, ``purchase_usd``,
``sentence``: :mod:`reports.kpi.whatif`), ``allocations`` (null when no Slurm job or Kubernetes
pod was ever imported; else ``totals`` (:data:`reports.sections.scheduler.ALLOCATION_TOTALS`),
``jobs_count``, ``jobs`` (:data:`reports.sections.scheduler.JOB_FIELDS`, the
:data:`MAX_JSON_RUNS` with the most idle and unsampled dollars), ``by_team``
(:data:`reports.sections.scheduler.TEAM_ALLOCATION_FIELDS`: each team's allocated spend split
into productive, allocated-idle and allocated with no samples), ``capacity``
(:data:`reports.sections.scheduler.CAPACITY_FIELDS`, per scheduler and cluster whose nodes' GPUs
were imported) and ``skipped``: the week's jobs and pods against the samples that say what their
GPUs did, :mod:`reports.kpi.allocations`). Unknown values are ``null``: among them the dollars
(``spend_usd``, ``waste_usd``, ``idle_usd``, the headline's ``unmeasured_usd``,
``failed_usd``, ``redone_usd``, ``throttled_usd`` and ``slow_node_usd``;
:data:`USD_FIELDS`) no price covers: of a run whose GPU model has no price, of a ``by_*`` group
whose runs all lack one (a group with a priced run has the priced runs' sum), and of a
``headline``, ``previous`` or ``trend`` week none of whose GPU-time is priced (its
``change_pct`` of them too); unpriced is unknown, never $0. So is a figure past a float's range
(a sum of absurd but finite stored figures); bytes are written as text (UTF-8, a bad byte
replaced) and a value of a type no field should have as its ``str``: writing the JSON never
fails on a value.

CSV (``<week>.csv``): the same figures in long form, one value per line:
``week,basis,section,key,metric,value`` where ``section`` is ``headline``, ``team``,
``project``, ``user``, ``gpu_model``, ``run``, ``trend``, ``waste_cause`` (key the cause),
``recurring_job`` (key the job key), ``saving`` (key ``JOBKEY@AT``), ``saving_team`` (key the
team), ``ledger`` (key the bucket), ``capacity_what_if`` (key empty), ``excluded`` (metrics
``name`` and ``reason``), ``bad_samples`` (``name``, ``rows``, ``reason``), ``budget`` (metrics
``<label>:<field>`` of :data:`reports.sections.budgets.BUDGET_FIELDS`, e.g.
``2026-12:forecast_usd``; ``complete`` 1 or 0), ``allocations`` (key empty,
:data:`reports.sections.scheduler.ALLOCATION_TOTALS`), ``allocation_team`` (key the team,
:data:`reports.sections.scheduler.TEAM_ALLOCATION_FIELDS`), ``capacity`` (key
``SOURCE/CLUSTER``, :data:`reports.sections.scheduler.CAPACITY_FIELDS`) or ``job`` (the JSON's
jobs, key ``CLUSTER/JOBID``, :data:`reports.sections.scheduler.JOB_FIELDS` but ``runs``);
``key`` the group, run id, week, (budget) team or job. Lines end in CRLF (RFC 4180). A text cell
that a spreadsheet would run as a formula is prefixed with ``'``
(:mod:`reports.render.csvsafe`); numbers are written as numbers, and an unknown value (the
unpriced dollars above) as an empty cell."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from collections.abc import Mapping
from datetime import tzinfo
from typing import IO, Any

import pandas as pd

from reports.kpi import HEADLINE_FIELDS, Headline, WeekKpis
from reports.kpi.checks import as_text
from reports.kpi.ledger import BESIDE_WASTE_USD, ledger_totals
from reports.kpi.weekly import unpriced_groups
from reports.render.csvsafe import FORMULA_START, QUOTED, safe_cell, safe_row
from reports.render.csvsafe import writer as csv_writer
from reports.rows import Part, none_priced, parsed_links
from reports.weeks import label_of
from tracker.cost import Thresholds
from tracker.peaks import MFU_FIELDS

SCHEMA = "gpu-kpi.week/1"
GENERATOR = "gpu-kpi"
GROUPS = ("team", "project", "user", "gpu_model", "source")
GROUP_FIELDS = (
    "gpu_hours",
    "utilization_pct",
    "spend_usd",
    "waste_usd",
    "idle_usd",
    "co2e_kg",
    "runs",
)
RUN_FIELDS = (
    "run_id",
    "kind",
    "name",
    "team",
    "project",
    "user",
    "gpu_model",
    "gpu_count",
    "mig_profile",
    "gpu_split",
    "gpu_hours",
    "utilization_pct",
    "spend_usd",
    "waste_usd",
    "idle_usd",
    "unmeasured_usd",
    "failed_usd",
    "redone_hours",
    "redone_usd",
    "throttled_hours",
    "throttled_usd",
    "throttle_source",
    "slow_node_hours",
    "slow_node_usd",
    "energy_kwh",
    "co2e_kg",
    *MFU_FIELDS,
    "verdict",
    "advice",
    "status",
    "links",
)
USD_FIELDS = ("spend_usd", "waste_usd", "idle_usd", *BESIDE_WASTE_USD)
"""The dollars no price may stand for: null in the JSON (an empty CSV cell, a Parquet null)
for a run whose GPU model has no price (``priced`` false), a breakdown group whose runs are
all unpriced, and a headline (or trend week) none of whose GPU-time is priced. Unpriced is
unknown, never $0; a group or week with some priced runs has the sum of those (as the HTML).
Each where the row has it (``unmeasured_usd``, ``failed_usd``, ``redone_usd``,
``throttled_usd``, ``slow_node_usd``: the headline's)."""
RIGHTSIZING_FIELDS = (
    "run_id",
    "name",
    "team",
    "gpu_model",
    "utilization_pct",
    "mem_peak_gib",
    "suggested_gpu",
    "saving_usd",
    "assumption",
)


def plain(value: Any) -> Any:
    """JSON-safe: NaN/NA/±inf → None, numpy scalars → Python, timestamps → ISO strings, bytes
    → text (UTF-8, a bad byte replaced)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return as_text(value)
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # NaN: unknown; ±inf (a sum past float's range): JSON has no such number
    return value


DEFINITIONS = {
    "spend_usd": "GPU-hours x the price per GPU-hour of each GPU model",
    "waste_usd": "recoverable waste, per run and GPU: idle_usd in full, plus the cost of the "
    "rest x max(0, 1 - utilization of the rest / target_pct)",
    "co2e_kg": "GPU energy_kwh x carbon.pue x the grid's g CO2e/kWh / 1000, over the runs "
    "that measured energy (energy_gpu_hours of the GPU-hours)",
    "idle_usd": "part of waste_usd: the cost of GPU-minutes under idle_pct inside an "
    "idle_window_min-minute stretch averaging under it",
}
"""What the JSON's money fields mean (the report's definitions footer says the same)."""


MAX_JSON_RUNS = 1_000
"""Runs the week's document (and so the JSON file) lists, the most recoverable waste first (a
week of a million runs made a 685 MB file); ``runs_count`` says how many the week had,
``runs_left_out`` how many only the CSV lists."""
CAUSE_FIELDS = ("cause", "label", "waste_usd", "inferred_usd", "cents", "runs")
"""The week's waste by cause (:class:`reports.kpi.causes.CauseLine`): the cause's key and name,
its dollars, of them inferred from an import's utilization pattern, in whole cents (they add up
to the week's), the runs with waste in it."""


def to_json(d: Mapping[str, Any]) -> str:
    """The week's JSON file: the document (:func:`to_dict`: at most :data:`MAX_JSON_RUNS` runs
    and underutilized run ids).

    Args:
        d: The week's document.
    """
    return json.dumps(d, indent=2, ensure_ascii=False, allow_nan=False, default=_last_resort) + "\n"


def _records(frame: pd.DataFrame, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    cols = [f for f in fields if f in frame.columns]
    # a runs frame's links are their JSON text (reports.rows.links_text): an object here
    return [
        {
            k: plain(parsed_links(v) if k == "links" and isinstance(v, str) else v)
            for k, v in row.items()
        }
        for row in frame[cols].to_dict("records")
    ]


def _thresholds(t: Thresholds) -> dict[str, Any]:
    """The JSON's field names (stable since the first release; the config's keys differ)."""
    return {
        "target_pct": t.target_util_pct,
        "underutilized_pct": t.underutilized_pct,
        "underutilized_min_gpu_hours": t.underutilized_min_gpu_hours,
        "idle_pct": t.idle_pct,
        "idle_window_min": t.idle_window_min,
    }


def to_dict(k: WeekKpis, tz: tzinfo) -> dict[str, Any]:
    """The week's document (schema ``gpu-kpi.week/1``): what the JSON file holds, the CSV
    lists and the BI tables store.

    Args:
        k: The week's KPIs.
        tz: The report's time zone (the week's start and end are written in it).
    """
    start = k.week.tz_convert(tz)
    end = (start + pd.Timedelta(days=7, hours=12)).normalize()
    skipped = k.skipped
    return {
        "generator": GENERATOR,
        "schema": SCHEMA,
        "week": label_of(k.week),
        # a week under way: the time its figures run to (a partial week); None: complete
        "partial_to": None if k.so_far is None else k.so_far.isoformat(),
        "week_start": start.isoformat(),
        "week_end": end.isoformat(),
        "time_zone": str(tz),
        "basis": k.basis,
        "basis_label": k.basis_label,
        "thresholds": _thresholds(k.thresholds),
        "definitions": DEFINITIONS,
        "headline": _headline(k.headline),
        "previous": _headline(k.previous) if k.previous else None,
        "change_pct": _change_pct(k),
        **{
            f"by_{g}": _records(known_dollars(k.by[g], k.runs, g), (g, *GROUP_FIELDS))
            for g in GROUPS
        },
        "runs": _records(priced_runs(k.runs.head(MAX_JSON_RUNS)), RUN_FIELDS),
        "runs_count": len(k.runs),
        "runs_left_out": max(len(k.runs) - MAX_JSON_RUNS, 0),
        "underutilized": [str(r) for r in k.underutilized["run_id"].head(MAX_JSON_RUNS)],
        "rightsizing": _records(k.rightsizing.head(MAX_JSON_RUNS), RIGHTSIZING_FIELDS),
        "rightsizing_count": len(k.rightsizing),
        "carbon": {
            "g_per_kwh": k.carbon.g_per_kwh,
            "pue": k.carbon.pue,
            "hosts": [{"pattern": p, "g_per_kwh": g} for p, g in k.carbon.hosts],
        },
        "rent_vs_own": [
            plain({**dataclasses.asdict(r), "sentence": r.sentence()}) for r in k.rent_vs_own
        ],
        "trend": [
            _unknown_usd(
                {"week": label_of(row["week"]), **{f: plain(row[f]) for f in HEADLINE_FIELDS}}
            )
            for row in k.trend.to_dict("records")
        ],
        "excluded": [
            {"run_id": r.run_id, "name": r.name, "reason": r.reason} for r in skipped.runs
        ],
        "excluded_count": len(skipped.runs),
        "bad_samples": [
            {"run_id": b.run_id, "name": b.name, "rows": b.rows, "reason": b.reason}
            for b in skipped.samples
        ],
        "bad_sample_rows": skipped.sample_rows,
        "skipped": skipped.summary(),
        "waste_by_cause": [
            plain(
                {
                    **{f: getattr(c, f) for f in CAUSE_FIELDS},
                    "top": [{"name": name, "waste_usd": usd} for name, usd in c.top],
                    "fix": c.fix,
                }
            )
            for c in k.causes
        ],
        "ledger": _ledger(k),
        "capacity_what_if": None
        if k.what_if is None or k.so_far
        else plain({**dataclasses.asdict(k.what_if), "sentence": k.what_if.sentence()}),
        # the sections' (reports.sections), last, in their order
        **{key: v for part in k.parts.values() for key, v in part.document(tz).items()},
    }


def _headline(h: Headline) -> dict[str, Any]:
    """A headline's figures (:data:`HEADLINE_FIELDS`), its dollars null when none of its
    GPU-time is priced (:attr:`reports.kpi.Headline.none_priced`)."""
    return _unknown_usd(plain(h.__dict__))


def _unknown_usd(head: dict[str, Any]) -> dict[str, Any]:
    """A headline's plain figures with :data:`USD_FIELDS` null when it had GPU-time and none
    of it priced (:func:`reports.kpi.weekly.none_priced`): unpriced is unknown, not $0."""
    hours, unpriced = head.get("gpu_hours"), head.get("unpriced_gpu_hours")
    if (
        isinstance(hours, int | float)
        and isinstance(unpriced, int | float)
        and none_priced(float(hours), float(unpriced))
    ):
        return {**head, **dict.fromkeys((f for f in USD_FIELDS if f in head), None)}
    return head


def _change_pct(k: WeekKpis) -> dict[str, Any]:
    """Week-over-week change, in %; of the dollars null when this week's are unknown (a
    change from unknown, or to it, is no change: the HTML shows none)."""
    change = plain(k.change_pct)
    if k.headline.none_priced or (k.previous is not None and k.previous.none_priced):
        change.update({f: None for f in USD_FIELDS if f in change})
    return change


def priced_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the dollars (:data:`USD_FIELDS`) of each unpriced run (``priced`` false)
    missing: unknown, not $0. A frame without ``priced`` is taken as priced (as the HTML
    takes it); a frame with every run priced is returned as it is.

    Args:
        runs: Runs of the week (:attr:`reports.kpi.WeekKpis.runs`), or a block of them.
    """
    if "priced" not in runs.columns or not len(runs):
        return runs
    unpriced = runs["priced"].eq(False).fillna(False).astype(bool)  # missing: priced (as HTML)
    if not unpriced.any():
        return runs
    return runs.assign(
        **{
            f: pd.to_numeric(runs[f], errors="coerce").astype(float).mask(unpriced)
            for f in USD_FIELDS
            if f in runs.columns
        }
    )


def known_dollars(frame: pd.DataFrame, runs: pd.DataFrame, key: str) -> pd.DataFrame:
    """A breakdown by ``key`` with the dollars (:data:`USD_FIELDS`) of each group whose runs
    are all unpriced missing (:func:`reports.kpi.weekly.unpriced_groups`, as the HTML): a
    group with a priced run keeps the sum of the priced ones.

    Args:
        frame: The breakdown (:attr:`reports.kpi.WeekKpis.by`), a row per group.
        runs: The week's runs, with ``priced`` and ``key``.
        key: The breakdown's key column.
    """
    unknown = unpriced_groups(runs, key)
    if not unknown or key not in frame.columns:
        return frame
    gone = frame[key].astype(object).map(str).isin(unknown)
    return frame.assign(
        **{
            f: pd.to_numeric(frame[f], errors="coerce").astype(float).mask(gone)
            for f in USD_FIELDS
            if f in frame.columns
        }
    )


def rows_of(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as dicts, a missing value (NaN, NaT) as None."""
    if not len(frame):
        return []
    return [
        {c: (None if not isinstance(v, str) and pd.isna(v) else v) for c, v in row.items()}
        for row in frame.astype(object).to_dict("records")
    ]


def _last_resort(value: object) -> Any:
    """What ``json`` cannot write, as :func:`plain` makes it or else as text: a value of a
    type no figure should have must not stop the report."""
    shown = plain(value)
    if shown is not value and isinstance(shown, str | int | float | list | dict | None):
        return shown
    return as_text(value)


def to_csv(
    d: Mapping[str, Any], runs: pd.DataFrame, parts: Mapping[str, Part] | None = None
) -> str:
    """The week's CSV file as text (:class:`CsvExport` writes it to a file without holding it).

    Args:
        d: The week's document (:func:`to_dict`).
        runs: The week's runs (:attr:`reports.kpi.WeekKpis.runs`): every one is listed.
    """
    return bytes(CsvExport(d, runs, parts)).decode()


class RunsExport:
    """A file of the week made from its document and every run, written as it is made
    (:meth:`write_to`; ``bytes()`` of it makes it whole).

    Args:
        d: The week's document (:func:`to_dict`).
        runs: The week's runs (:attr:`reports.kpi.WeekKpis.runs`).
        parts: The week's sections (:attr:`reports.kpi.WeekKpis.parts`), whose rows the CSV
            writes from their values in ``d``.
    """

    def __init__(
        self, d: Mapping[str, Any], runs: pd.DataFrame, parts: Mapping[str, Part] | None = None
    ) -> None:
        self.d, self.runs, self.parts = d, runs, parts or {}

    def __bytes__(self) -> bytes:
        out = io.BytesIO()
        self.write_to(out)
        return out.getvalue()

    def write_to(self, f: IO[bytes]) -> None:
        """Write the file to ``f`` (binary); ``f`` stays open.

        Args:
            f: An open binary file.
        """
        raise NotImplementedError


class CsvExport(RunsExport):
    """The week's CSV file: one row per figure (``week, basis, section, key, metric, value``),
    formula cells neutralized, every run of the week (from its columns: a week of a million
    runs is sixteen million lines, written as they are made).

    Args:
        d: The week's document (:func:`to_dict`).
        runs: The week's runs (:attr:`reports.kpi.WeekKpis.runs`).
    """

    def write_to(self, f: IO[bytes]) -> None:
        """Write the file to ``f`` (binary), UTF-8, a block at a time."""
        text = io.TextIOWrapper(f, encoding="utf-8", newline="", write_through=False)
        try:
            self._write(text, raw=f)
            text.flush()
        finally:
            text.detach()  # ``f`` stays open: it is the caller's

    def _write(self, out: IO[str], *, raw: IO[bytes] | None = None) -> None:
        d = self.d
        w = csv_writer(out)  # formula cells neutralized; a cell with a line break is quoted
        w.writerow(["week", "basis", "section", "key", "metric", "value"])

        def rows(section: str, key: str, values: Mapping[str, Any]) -> None:
            for metric, value in values.items():
                if not isinstance(value, dict | list):
                    w.writerow(
                        [
                            d["week"],
                            d["basis"],
                            section,
                            key,
                            metric,
                            "" if value is None else value,
                        ]
                    )

        if d.get("partial_to") is not None:  # a week under way says so on its first line
            rows("week", "", {"partial_to": d["partial_to"]})
        rows("headline", "", d["headline"])
        for g in GROUPS:
            for row in d[f"by_{g}"]:
                rows(g, row[g], {f: row.get(f) for f in GROUP_FIELDS})
        _run_rows(out, safe_row([d["week"], d["basis"], "run"]), self.runs, raw=raw)
        for row in d["trend"]:
            rows("trend", row["week"], {f: row.get(f) for f in HEADLINE_FIELDS})
        for row in d["excluded"]:
            rows("excluded", row["run_id"], {"name": row["name"], "reason": row["reason"]})
        for row in d["bad_samples"]:
            rows("bad_samples", row["run_id"], {f: row[f] for f in ("name", "rows", "reason")})
        for row in d["waste_by_cause"]:
            rows("waste_cause", row["cause"], {f: row[f] for f in CAUSE_FIELDS[2:]})
        for bucket, row in d["ledger"].items():
            rows("ledger", bucket, row)
        if d["capacity_what_if"] is not None:
            rows("capacity_what_if", "", d["capacity_what_if"])
        for part in self.parts.values():  # the sections' (reports.sections), last
            for section, key, values in part.csv_rows(d):
                rows(section, key, values)


def _ledger(k: WeekKpis) -> dict[str, dict[str, float | None]]:
    """The week's ledger by bucket (:func:`reports.kpi.ledger.ledger_totals`); nothing for a
    week without rows."""
    h = k.headline
    if not len(k.runs):
        return {}
    return plain(ledger_totals(k.runs, h.unallocated_gpu_hours, h.unallocated_usd))


_CSV_ONLY_ELSEWHERE = ("run_id", "links", "mfu_dtype_from", "mfu_note", "ofu")
_CSV_RUN_FIELDS = tuple(f for f in RUN_FIELDS if f not in _CSV_ONLY_ELSEWHERE)
"""A run's metrics in the CSV: ``links`` is an object, the JSON's alone; MFU goes with its
peak and dtype, and where the dtype came from, the note and OFU are the JSON's and the
Parquet file's (a line each for every run of a week would add a tenth to the CSV, whose run
lines are most of its bytes, for figures most runs lack)."""


def _cells(column: pd.Series) -> list[str]:
    """A column of runs as CSV cells, each as :func:`plain` and :func:`safe_cell` make its
    value and :func:`csv.writer` (``excel``) writes it (:func:`_field`): a missing or
    non-finite number empty, text neutralized and quoted where it must be, bytes decoded."""
    if pd.api.types.is_float_dtype(column):
        return [repr(v) if math.isfinite(v) else "" for v in column.astype(float).tolist()]
    if pd.api.types.is_integer_dtype(column) or pd.api.types.is_bool_dtype(column):
        return list(map(str, column.tolist()))
    if isinstance(column.dtype, pd.StringDtype) or (
        column.dtype == object and pd.api.types.infer_dtype(column) in ("string", "empty")
    ):  # text or missing (None, NaN, pd.NA: each an empty cell)
        # each distinct text once (a million runs have a few teams, models and verdicts)
        codes, uniques = pd.factorize(column)  # a missing value: -1, the last cell
        cells = [_text_cell(v) if isinstance(v, str) else "" for v in uniques.tolist()]
        cells.append("")
        return list(map(cells.__getitem__, codes.tolist()))
    # (an object or a list is no CSV value: the JSON has it; a run field never holds one)
    return [
        "" if isinstance(c := safe_cell(plain(v)), dict | list) else _field(c)
        for v in column.astype(object).tolist()
    ]


def _values(column: pd.Series) -> list[Any]:
    """A column of runs as what ``%s`` makes each cell of (:func:`_cells`' text): a number
    as itself (``%s`` of a float is its ``repr``, of an int or a bool its ``str``), a missing
    or non-finite one as ``""``, anything else as its cell."""
    if pd.api.types.is_float_dtype(column):
        numbers = column.astype(float)
        values: list[Any] = numbers.tolist()
        for i in (~numbers.abs().lt(math.inf)).to_numpy().nonzero()[0].tolist():  # NaN, ±inf
            values[i] = ""
        return values
    if pd.api.types.is_integer_dtype(column) or pd.api.types.is_bool_dtype(column):
        return column.tolist()
    return _cells(column)


def _run_rows(
    out: IO[str],
    head: list[Any],
    runs: pd.DataFrame,
    block: int = 50_000,
    *,
    raw: IO[bytes] | None = None,
) -> None:
    """The ``run`` section: a line per run and metric (:data:`_CSV_RUN_FIELDS`), ``block``
    runs at a time, each cell as :func:`csv.writer` (``excel``) writes it (:func:`_field`):
    a block's lines made in Arrow (:func:`reports.render.csv_arrow.run_lines`) where pyarrow
    is installed, else a run's lines one ``%`` of a template holding every constant (the week,
    the section, the metrics, the line ends) with its cells: no line is made by Python code of
    its own (sixteen million lines for a million runs). ``raw``: the binary file under ``out``
    (UTF-8, lines as written), which the Arrow lines go to as they are."""
    from reports.render import csv_arrow

    prefix = ",".join(_field(h) for h in head) + ","
    metrics = ["," + _field(safe_cell(f)) + "," for f in _CSV_RUN_FIELDS]
    if csv_arrow.available():
        fields = list(zip(_CSV_RUN_FIELDS, metrics, strict=True))
        for lo in range(0, len(runs), block):
            part = priced_runs(runs.iloc[lo : lo + block])  # unpriced dollars: empty cells
            text = csv_arrow.run_lines(part, prefix, fields, _values)
            if raw is not None:  # the file's bytes, the text written before them first
                out.flush()
                raw.write(text)
            else:
                out.write(bytes(text).decode())
        return
    key = prefix.replace("%", "%%") + "%s"  # the constants' own % doubled: text, not a field
    template = "".join(key + m.replace("%", "%%") + "%s\r\n" for m in metrics)
    for lo in range(0, len(runs), block):
        part = priced_runs(runs.iloc[lo : lo + block])
        n = len(part)
        keys = _cells(part["run_id"])
        cells: list[list[Any]] = []
        for f in _CSV_RUN_FIELDS:
            cells.append(keys)
            cells.append(_values(part[f]) if f in part.columns else [""] * n)
        out.write("".join(map(template.__mod__, zip(*cells, strict=True))))


def _text_cell(v: str) -> str:
    """A text cell of a line: neutralized (:func:`safe_cell`) and quoted as :func:`_field`."""
    text = "'" + v if v.startswith(FORMULA_START) else v
    return '"' + text.replace('"', '""') + '"' if _QUOTED.search(text) else text


_QUOTED = re.compile(QUOTED)


def _field(value: Any) -> str:
    """One cell of a line of several, as :func:`csv.writer` (``excel``) writes it: nothing for
    None, ``str()`` of a number, text quoted (its quotes doubled) when it holds a comma, a
    quote or a line break; anything else through the csv module itself."""
    kind = type(value)
    if value is None:
        return ""
    if kind is str:
        return '"' + value.replace('"', '""') + '"' if _QUOTED.search(value) else value
    if kind is float or kind is int or kind is bool:
        return str(value)
    line = io.StringIO()
    csv.writer(line, dialect="excel").writerow([value, ""])  # two cells: "" is not quoted
    return line.getvalue()[:-3]
