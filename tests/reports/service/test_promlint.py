"""``promtool check metrics`` on the live ``/metrics``: its lint rules (promlint, in
prometheus/client_golang ``prometheus/testutil/promlint/validations``) re-implemented here, so
the check runs without promtool, and held to promlint's own test cases; promtool itself too
when it is on PATH (Debian's ``prometheus`` package ships it). Plus one rule promlint leaves to
the naming page (prometheus.io/docs/practices/naming): a percentage is a ratio 0-1.

Issue 10 renamed what these flag: ``*_gpu_hours`` → ``*_gpu_seconds`` (promlint: 'use base unit
"seconds" instead of "hours"') and ``*_utilization_percent`` → ``*_utilization_ratio``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_prom import W48_RUNS, W48_SAMPLES, W49, W49_RUNS, week

from reports.service.prom import METRICS, KpiExporter

DASHBOARD = Path(__file__).resolve().parents[3] / "grafana" / "gpu-kpi-dashboard.json"

# validations/units.go: unit → its base unit; the prefixes; the discouraged abbreviations
UNITS = {
    u: u
    for u in (
        "amperes",
        "bytes",
        "celsius",
        "grams",
        "joules",
        "kelvin",
        "meters",
        "metres",
        "seconds",
        "volts",
    )
} | {
    "minutes": "seconds",
    "hours": "seconds",
    "days": "seconds",
    "weeks": "seconds",
    "kelvins": "kelvin",
    "fahrenheit": "celsius",
    "rankine": "celsius",
    "inches": "meters",
    "yards": "meters",
    "miles": "meters",
    "bits": "bytes",
    "calories": "joules",
    "pounds": "grams",
    "ounces": "grams",
}
PREFIXES = (
    "pico",
    "nano",
    "micro",
    "milli",
    "centi",
    "deci",
    "deca",
    "hecto",
    "kilo",
    "kibi",
    "mega",
    "mibi",
    "giga",
    "gibi",
    "tera",
    "tebi",
    "peta",
    "pebi",
)
ABBREVIATIONS = ("s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
OWN_LABEL = {"histogram": "le", "summary": "quantile"}


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str | None = None
    metrics: list[tuple[tuple[str, str], ...]] = field(default_factory=list)
    """Each series' labels, as promlint's MetricFamily has them (a histogram's buckets, sum and
    count are one series when their labels but ``le`` agree)."""


def parse(text: str) -> list[Family]:
    """The text exposition format (0.0.4), as far as the lint rules look at it."""
    families: dict[str, Family] = {}
    for line in text.splitlines():
        if m := re.fullmatch(r"# (HELP|TYPE) (\S+) ?(.*)", line):
            fam = families.setdefault(m[2], Family(m[2]))
            if m[1] == "HELP":
                fam.help = m[3] or None
            else:
                fam.type = m[3]
            continue
        if not line or line.startswith("#"):
            continue
        name, labels = re.fullmatch(r"([^{\s]+)(?:\{(.*)\})?\s+\S+(?:\s+\S+)?", line).groups()  # type: ignore[union-attr]
        fam = next(
            (
                f
                for f in families.values()
                if name == f.name or name in [f.name + s for s in SUFFIXES.get(f.type, ())]
            ),
            None,
        )
        fam = fam or families.setdefault(name, Family(name))
        pairs = tuple(
            sorted(
                (k, v)
                for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels or "")
                if k != OWN_LABEL.get(fam.type)
            )
        )
        if fam.type not in SUFFIXES or pairs not in fam.metrics:
            fam.metrics.append(pairs)
    return list(families.values())


def metric_units(name: str) -> tuple[str, str] | None:
    for part in name.split("_"):
        if part in UNITS:
            return part, UNITS[part]
        for p in PREFIXES:
            if part.startswith(p) and part[len(p) :] in UNITS:
                return part, UNITS[part[len(p) :]]
    return None


def promlint(f: Family) -> list[str]:
    """promlint's default validations, in its order (validation.go)."""
    out = []
    if f.help is None:  # LintHelp
        out.append("no help text")
    if (found := metric_units(f.name)) and found[0] != found[1]:  # LintMetricUnits
        out.append(f'use base unit "{found[1]}" instead of "{found[0]}"')
    total = f.name.endswith("_total")  # LintCounter
    if f.type == "counter" and not total:
        out.append('counter metrics should have "_total" suffix')
    elif f.type not in ("untyped", "counter") and total:
        out.append('non-counter metrics should not have "_total" suffix')
    if f.type != "untyped":  # LintHistogramSummaryReserved
        if f.type != "histogram" and f.name.endswith("_bucket"):
            out.append('non-histogram metrics should not have "_bucket" suffix')
        for s in ("_count", "_sum"):
            if f.type not in SUFFIXES and f.name.endswith(s):
                out.append(f'non-histogram and non-summary metrics should not have "{s}" suffix')
        for labels in f.metrics:
            for k, _ in labels:
                if k == "le" and f.type != "histogram":
                    out.append('non-histogram metrics should not have "le" label')
                if k == "quantile" and f.type != "summary":
                    out.append('non-summary metrics should not have "quantile" label')
    lower = f.name.lower()
    if f.type != "untyped" and (f"_{f.type}_" in lower or lower.endswith(f"_{f.type}")):
        out.append(f"metric name should not include type '{f.type}'")  # LintMetricTypeInName
    if ":" in f.name:  # LintReservedChars
        out.append("metric names should not contain ':'")
    camel = re.compile(r"[a-z][A-Z]")  # LintCamelCase
    if camel.search(f.name):
        out.append("metric names should be written in 'snake_case' not 'camelCase'")
    out += [
        "label names should be written in 'snake_case' not 'camelCase'"
        for labels in f.metrics
        for k, _ in labels
        if camel.search(k)
    ]
    out += [
        "metric names should not contain abbreviated units"  # LintUnitAbbreviations
        for a in ABBREVIATIONS
        if f"_{a}_" in lower or lower.endswith(f"_{a}")
    ]
    out += ["metric not unique" for i, m in enumerate(f.metrics) if m in f.metrics[i + 1 :]]
    return out


def naming(f: Family) -> list[str]:
    """The naming page's base units that promlint does not check: Percent → ratio (0-1)."""
    if re.search(r"_(percent|percentage|pct)(_|$)", f.name):
        return ['use a ratio (0-1, suffix "_ratio"), not a percentage']
    return []


def lint(text: str) -> list[tuple[str, str]]:
    """(metric, problem), sorted as promlint sorts them."""
    return sorted((f.name, p) for f in parse(text) for p in promlint(f) + naming(f))


def family(name: str, type: str, line: str | None = None, help: str = "Test metric.") -> str:
    return f"# HELP {name} {help}\n# TYPE {name} {type}\n{line or name + ' 10'}\n"


# (exposition, promlint's problems): cases of promlint_test.go
PROMLINT_CASES = [
    ("# TYPE go_goroutines gauge\ngo_goroutines 24\n", ["no help text"]),
    ("# HELP go_goroutines\n# TYPE go_goroutines gauge\ngo_goroutines 24\n", ["no help text"]),
    (family("go_goroutines", "gauge", help="Number of goroutines that currently exist."), []),
    (family("x_seconds", "untyped"), []),
    (family("x_hours", "untyped"), ['use base unit "seconds" instead of "hours"']),
    (family("x_milliamperes", "untyped"), ['use base unit "amperes" instead of "milliamperes"']),
    (family("x_gigabytes", "untyped"), ['use base unit "bytes" instead of "gigabytes"']),
    (family("x_microseconds", "untyped"), ['use base unit "seconds" instead of "microseconds"']),
    (family("x_bytes", "counter"), ['counter metrics should have "_total" suffix']),
    (family("x_bytes_total", "gauge"), ['non-counter metrics should not have "_total" suffix']),
    (family("x_bytes_total", "untyped"), []),
    (family("x_bytes_bucket", "gauge"), ['non-histogram metrics should not have "_bucket" suffix']),
    (
        family("x_bytes_count", "gauge"),
        ['non-histogram and non-summary metrics should not have "_count" suffix'],
    ),
    (
        family("x_bytes", "gauge", 'x_bytes{le="1"} 10'),
        ['non-histogram metrics should not have "le" label'],
    ),
    (
        family("x_bytes", "gauge", 'x_bytes{quantile="1"} 10'),
        ['non-summary metrics should not have "quantile" label'],
    ),
    (
        family("instance_memory_limit_bytes_gauge", "gauge"),
        ["metric name should not include type 'gauge'"],
    ),
    (
        family("http_requests_counter", "counter"),
        [
            'counter metrics should have "_total" suffix',
            "metric name should not include type 'counter'",
        ],
    ),
    (family("request_duration::_seconds", "gauge"), ["metric names should not contain ':'"]),
    (
        family("requestDuration_seconds", "gauge"),
        ["metric names should be written in 'snake_case' not 'camelCase'"],
    ),
    (
        family("request_duration_seconds", "gauge", 'request_duration_seconds{httpService="f"} 1'),
        ["label names should be written in 'snake_case' not 'camelCase'"],
    ),
    *[
        (family(n, "gauge"), ["metric names should not contain abbreviated units"])
        for n in (
            "instance_memory_limit_kb",
            "instance_memory_limit_MB",
            "request_duration_ms",
            "request_sec_duration",
            "request_duration_h",
            "request_duration_d",
        )
    ],
    (family("x_bytes", "gauge", 'x_bytes{a="1"} 1\nx_bytes{a="1"} 2'), ["metric not unique"]),
]


@pytest.mark.parametrize(("text", "problems"), PROMLINT_CASES)
def test_the_rules_give_promlints_answers_on_its_own_cases(text: str, problems: list[str]) -> None:
    assert [p for _, p in lint(text)] == sorted(problems)


def test_the_names_before_issue_10_fail_the_rules() -> None:
    old = "".join(
        family(n, "gauge")
        for n in (
            "gpu_kpi_week_gpu_hours",
            "gpu_kpi_team_gpu_hours",
            "gpu_kpi_week_to_date_gpu_hours",
            "gpu_kpi_week_utilization_percent",
        )
    )
    assert lint(old) == [
        ("gpu_kpi_team_gpu_hours", 'use base unit "seconds" instead of "hours"'),
        ("gpu_kpi_week_gpu_hours", 'use base unit "seconds" instead of "hours"'),
        ("gpu_kpi_week_to_date_gpu_hours", 'use base unit "seconds" instead of "hours"'),
        (
            "gpu_kpi_week_utilization_percent",
            'use a ratio (0-1, suffix "_ratio"), not a percentage',
        ),
    ]


@pytest.fixture(scope="module")
def exposition() -> str:
    """Every series the endpoint can show, scraped as Prometheus would."""
    import dataclasses
    import urllib.request

    from reports.kpi import AllocationWeek, JobLine
    from reports.kpi.allocations import CapacityLine
    from reports.kpi.savings import Change
    from reports.sections.savings import Savings

    job = JobLine(
        source="slurm", cluster="c", job_id="7", shown_id="7", name="j", user="u", account="a",
        team="a", partition="gpu", state="COMPLETED", start=datetime(2026, 11, 24, tzinfo=UTC),
        end=datetime(2026, 11, 24, 2, tzinfo=UTC), gpus=2, gpu_model="H100", matched="node",
        runs=("r",), allocated_gpu_hours=4.0, sampled_gpu_hours=3.0, idle_gpu_hours=1.0,
        no_samples_gpu_hours=1.0, price_per_gpu_hour=3.85,
    )  # fmt: skip
    nodes = CapacityLine(
        source="slurm", cluster="c", nodes=1, gpus=8, capacity_gpu_hours=1344.0,
        allocated_gpu_hours=4.0, sampled_gpu_hours=3.0, busy_gpu_hours=2.0, known_gpu_hours=3.0,
        util_pct=40.0, unallocated_gpu_hours=1340.0, unallocated_owned_usd=None,
    )  # fmt: skip
    fix = Change(
        job_key="resnet-nightly", team="vision", at=datetime(2026, 11, 2, tzinfo=UTC),
        week="2026-W45", how="mark", note="loader", unit="1k samples", runs_before=6,
        runs_after=6, usd_per_unit_before=0.2, usd_per_unit_after=0.12, change_pct=-40.0,
        low_pct=-48.0, high_pct=-31.0, verdict_before="input-bound", verdict_after="healthy",
        weeks_since=4.0, usd_to_date=192.0, usd_per_week=48.0,
    )  # fmt: skip
    history = dataclasses.replace(
        week(W48_RUNS, W48_SAMPLES),
        allocations=AllocationWeek(jobs=(job,), capacity=(nodes,)),
        # the full report's: the refresh's two-week read has none
        parts={Savings.name: Savings(changes=(fix,))},
    )
    latest = week(W48_RUNS, W48_SAMPLES)
    # owned capacity nobody held, as [owned.<MODEL>] gpus gives it: its series shows
    held = dataclasses.replace(latest.headline, unallocated_gpu_hours=100.0, unallocated_usd=49.0)
    exporter = KpiExporter()
    exporter.update(
        dataclasses.replace(latest, headline=held),
        week_to_date=week(W48_RUNS + W49_RUNS, W48_SAMPLES, at=W49),
        history=history,
    )
    exporter.count_email("summary", "sent")
    exporter.report_built("2026-W48", datetime(2026, 11, 30, 8, tzinfo=UTC))
    with exporter.serve(port=0) as server, urllib.request.urlopen(server.url, timeout=5) as r:
        return str(r.read().decode())


def test_the_endpoint_passes_the_rules(exposition: str) -> None:
    assert {f.name for f in parse(exposition)} == {m.name for m in METRICS}  # all were linted
    assert lint(exposition) == []


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not on PATH (apt-get install prometheus); the re-implemented rules ran",
)
def test_promtool_check_metrics_passes(exposition: str) -> None:
    def check(text: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["promtool", "check", "metrics"],
            input=text,
            text=True,
            capture_output=True,
            timeout=60,
            check=False,
        )

    ok = check(exposition)
    assert (ok.returncode, ok.stdout + ok.stderr) == (0, "")
    old = check(family("gpu_kpi_week_gpu_hours", "gauge"))  # and promtool agrees with the rules
    assert old.returncode != 0
    assert (
        'gpu_kpi_week_gpu_hours use base unit "seconds" instead of "hours"'
        in old.stdout + old.stderr
    )


def test_the_dashboard_shows_the_base_units_as_people_read_them() -> None:
    """GPU time comes in GPU-seconds and is shown in GPU-hours (÷ 3600), GPU-seconds over
    GPU-seconds (the allocation rate) in percent; a utilization ratio is shown with Grafana's
    0-1 percent unit, its thresholds 0.5 and 0.85 (not 50 and 85)."""
    dash = json.loads(DASHBOARD.read_text())
    shown = [
        p for row in dash["panels"] for p in [row, *row.get("panels", [])] if p["type"] != "row"
    ]
    ratio = gpu_s = rates = 0
    for p in shown:
        exprs = [t["expr"] for t in p["targets"]]
        defaults = p["fieldConfig"]["defaults"]
        for e in exprs:
            if "_gpu_seconds" in e and " / on (" in e:  # GPU-seconds over GPU-seconds: a rate
                rates += 1
                assert defaults["unit"] == "percentunit", p["title"]
            elif "_gpu_seconds" in e:
                gpu_s += 1
                assert e.endswith(" / 3600"), e
        if p["type"] != "table" and any("_utilization_ratio" in e for e in exprs):
            ratio += 1
            assert defaults["unit"] == "percentunit", p["title"]
            steps = [s["value"] for s in defaults["thresholds"]["steps"]]
            assert steps == [None, 0.5, 0.85], p["title"]
            assert defaults.get("max", 1) == 1, p["title"]
    units = {
        o["matcher"]["options"]: o["properties"][0]["value"]
        for p in shown
        if p["type"] == "table"
        for o in p["fieldConfig"]["overrides"]
    }
    assert units["Utilization"] == "percentunit" and units["GPU-hours"] == "suffix: GPU-h"
    # the scheduler row: three in GPU-hours; the capacity row: two, and the allocation rate
    assert (gpu_s, ratio, rates) == (9, 5, 1)
