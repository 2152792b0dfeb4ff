"""The Prometheus endpoint, scraped over real HTTP and parsed with prometheus_client's parser,
against figures computed by hand; and the Grafana dashboard against the declared metrics."""

from __future__ import annotations

import json
import re
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fakes import run_record as run
from prometheus_client.parser import text_string_to_metric_families

from reports import kpi as kpis
from reports.service.prom import METRICS, NAMES, KpiExporter, MetricsServer
from tracker.record import MinuteSample, RunRecord

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "grafana" / "gpu-kpi-dashboard.json"

W48 = datetime(2026, 11, 23, tzinfo=UTC)  # Monday of ISO week 2026-W48
W49 = W48 + timedelta(days=7)
NOW = W49 + timedelta(days=3)
H100 = 3.85  # USD per GPU-hour, the runs' price
HOUR = 3600.0  # GPU-seconds per GPU-hour: the endpoint's GPU time is in seconds

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def minutes(run_id: str, start: datetime, utils: list[float], gpu: str) -> list[MinuteSample]:
    return [
        MinuteSample(
            run_id=run_id, minute=start + timedelta(minutes=i), gpu=gpu, covered_s=60.0, util_pct=u
        )
        for i, u in enumerate(utils)
    ]


def week(
    runs: list[RunRecord], samples: list[MinuteSample] | None = None, at: datetime = W48
) -> kpis.WeekKpis:
    return kpis.week_kpis(
        kpis.runs_frame(runs), kpis.samples_frame(samples or []), at, tz=UTC, now=NOW
    )


# W48: team ml runs "a" (10 GPU-h at 90%) and "d" (2 GPUs for 1 h, one busy, one idle: 2 GPU-h
# at 50%, the idle GPU's hour wasted and idle); cv runs "b" (4 GPUs for 1 h at 10%); ops runs
# "c" (2 GPU-h without GPU data: in spend, not in utilization)
W48_RUNS = [
    run("a", W48, 10, util=90.0, team="ml"),
    run("b", W48 + timedelta(days=1), 1, gpus=4, util=10.0, team="cv"),
    run("c", W48 + timedelta(days=2), 2, util=None, team="ops"),
    run("d", W48 + timedelta(days=3), 1, gpus=2, team="ml"),
]
W48_SAMPLES = minutes("d", W48 + timedelta(days=3), [100.0] * 60, gpu="GPU-busy") + minutes(
    "d", W48 + timedelta(days=3), [0.0] * 60, gpu="GPU-idle"
)
CV_WASTE = 4 * H100 * (1 - 10 / 85)
# W49 so far: ml's run "e", 3 GPU-h at 40%
W49_RUNS = [run("e", W49, 3, util=40.0, team="ml")]


@pytest.fixture(scope="module")
def k48() -> kpis.WeekKpis:
    return week(W48_RUNS, W48_SAMPLES)


@pytest.fixture(scope="module")
def k49() -> kpis.WeekKpis:
    return week(W48_RUNS + W49_RUNS, W48_SAMPLES, at=W49)


@pytest.fixture
def served() -> Iterator[tuple[KpiExporter, MetricsServer]]:
    exporter = KpiExporter()
    with exporter.serve(port=0) as server:
        yield exporter, server


def scrape(server: MetricsServer) -> Series:
    """Every sample on the endpoint, by (name, labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
        assert r.status == 200
        text = r.read().decode()
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def value(series: Series, name: str, **labels: str) -> float:
    return series[name, frozenset(labels.items())]


def names(series: Series) -> set[str]:
    return {name for name, _ in series}


def test_the_week_and_its_teams_are_the_hand_computed_figures(
    served: tuple[KpiExporter, MetricsServer], k48: kpis.WeekKpis
) -> None:
    exporter, server = served
    exporter.update(k48)
    s = scrape(server)
    wk = {"week": "2026-W48", "basis": "util"}
    assert value(s, "gpu_kpi_week_gpu_seconds", **wk) == pytest.approx(18 * HOUR)
    assert value(s, "gpu_kpi_week_spend_usd", **wk) == pytest.approx(18 * H100)
    # Σ util × h over the 16 known GPU-hours: 0.9 × 10 + 0.1 × 4 + 0.5 × 2 = 10.4 → 0.65
    assert value(s, "gpu_kpi_week_utilization_ratio", **wk) == pytest.approx(0.65)
    assert value(s, "gpu_kpi_week_waste_usd", **wk) == pytest.approx(CV_WASTE + H100)
    assert value(s, "gpu_kpi_week_idle_usd", **wk) == pytest.approx(H100)
    # by cause: d's idle GPU-hour held idle, b's waste its verdict's; they add up to the waste
    causes = {
        dict(k)["cause"]: v for (n, k), v in s.items() if n == "gpu_kpi_week_waste_by_cause_usd"
    }
    assert causes["idle"] == pytest.approx(H100)
    assert sum(causes.values()) == pytest.approx(CV_WASTE + H100) and len(causes) == 2
    assert value(s, "gpu_kpi_week_runs", **wk) == 4
    assert value(s, "gpu_kpi_week_underutilized_runs", **wk) == 1  # b; d is at 50%, not under

    assert value(s, "gpu_kpi_team_spend_usd", team="ml", **wk) == pytest.approx(12 * H100)
    assert value(s, "gpu_kpi_team_spend_usd", team="cv", **wk) == pytest.approx(4 * H100)
    assert value(s, "gpu_kpi_team_gpu_seconds", team="ops", **wk) == pytest.approx(2 * HOUR)
    assert value(s, "gpu_kpi_team_utilization_ratio", team="ml", **wk) == pytest.approx(
        (0.9 * 10 + 0.5 * 2) / 12
    )
    assert value(s, "gpu_kpi_team_utilization_ratio", team="cv", **wk) == pytest.approx(0.10)
    assert value(s, "gpu_kpi_team_waste_usd", team="cv", **wk) == pytest.approx(CV_WASTE)
    assert value(s, "gpu_kpi_team_waste_usd", team="ml", **wk) == pytest.approx(H100)
    assert value(s, "gpu_kpi_team_idle_usd", team="ml", **wk) == pytest.approx(H100)
    assert value(s, "gpu_kpi_team_idle_usd", team="cv", **wk) == 0.0
    # ops has no GPU data: no utilization series at all, never a 0
    teams_with_util = {
        dict(labels)["team"] for name, labels in s if name == "gpu_kpi_team_utilization_ratio"
    }
    assert teams_with_util == {"ml", "cv"}
    # no week to date given: none exported
    assert not {n for n in names(s) if n.startswith("gpu_kpi_week_to_date_")}


def test_the_week_to_date_is_its_own_week(
    served: tuple[KpiExporter, MetricsServer], k48: kpis.WeekKpis, k49: kpis.WeekKpis
) -> None:
    exporter, server = served
    exporter.update(k48, week_to_date=k49)
    s = scrape(server)
    wtd = {"week": "2026-W49", "basis": "util"}
    assert value(s, "gpu_kpi_week_to_date_gpu_seconds", **wtd) == pytest.approx(3 * HOUR)
    assert value(s, "gpu_kpi_week_to_date_spend_usd", **wtd) == pytest.approx(3 * H100)
    assert value(s, "gpu_kpi_week_to_date_utilization_ratio", **wtd) == pytest.approx(0.40)
    assert value(s, "gpu_kpi_week_to_date_waste_usd", **wtd) == pytest.approx(
        3 * H100 * (1 - 40 / 85)
    )
    assert value(s, "gpu_kpi_week_to_date_idle_usd", **wtd) == 0.0
    # and the complete week is still W48's
    assert value(s, "gpu_kpi_week_spend_usd", week="2026-W48", basis="util") == pytest.approx(
        18 * H100
    )


def test_the_last_12_weeks_are_labelled_by_week(
    served: tuple[KpiExporter, MetricsServer], k48: kpis.WeekKpis
) -> None:
    """A run in W45 (2 GPU-h at 50%) and W48's: W45 to W48 each a series, W46 and W47 a true
    0; none for the weeks before the first run."""
    exporter, server = served
    w45 = run("p", W48 - timedelta(days=21), 2, util=50.0, team="ml")
    history = week([w45, *W48_RUNS], W48_SAMPLES)
    exporter.update(k48, history=history)
    got = scrape(server)
    spend = {
        dict(labels)["week"]: v
        for (name, labels), v in got.items()
        if name == "gpu_kpi_weekly_spend_usd"
    }
    assert spend == {
        "2026-W45": pytest.approx(2 * H100),
        "2026-W46": 0.0,
        "2026-W47": 0.0,
        "2026-W48": pytest.approx(
            value(got, "gpu_kpi_week_spend_usd", week="2026-W48", basis="util")
        ),
    }
    assert value(got, "gpu_kpi_weekly_gpu_seconds", week="2026-W45", basis="util") == pytest.approx(
        2 * HOUR
    )
    assert value(
        got, "gpu_kpi_weekly_utilization_ratio", week="2026-W45", basis="util"
    ) == pytest.approx(0.5)
    # a week without utilization data has no ratio, not 0
    assert (
        "gpu_kpi_weekly_utilization_ratio",
        frozenset({("week", "2026-W46"), ("basis", "util")}),
    ) not in got


def test_an_unknown_utilization_is_left_out_not_zero(
    served: tuple[KpiExporter, MetricsServer],
) -> None:
    exporter, server = served
    blind = week([run("c", W48, 2, util=None, team="ops")])
    assert blind.headline.utilization_pct is None
    exporter.update(blind, week_to_date=blind)
    s = scrape(server)
    assert value(s, "gpu_kpi_week_spend_usd", week="2026-W48", basis="util") == pytest.approx(
        2 * H100
    )
    assert value(s, "gpu_kpi_week_to_date_gpu_seconds", week="2026-W48", basis="util") == (2 * HOUR)
    assert not {n for n in names(s) if n.endswith("_utilization_ratio")}


def test_before_any_update_only_the_service_counters_show(
    served: tuple[KpiExporter, MetricsServer],
) -> None:
    _, server = served
    s = scrape(server)
    assert s == {("gpu_kpi_reports_built_total", frozenset()): 0.0}


def test_counters_count_and_the_last_report_is_timestamped(
    served: tuple[KpiExporter, MetricsServer],
) -> None:
    exporter, server = served
    for outcome in ("sent", "sent", "failed"):
        exporter.count_email("weekly", outcome)
    exporter.count_email("digest", "skipped")
    built = datetime(2026, 11, 30, 8, 0, 12, tzinfo=UTC)
    exporter.report_built("2026-W48", built)
    exporter.report_built("2026-W48", built + timedelta(minutes=5))
    s = scrape(server)
    assert value(s, "gpu_kpi_emails_total", kind="weekly", outcome="sent") == 2
    assert value(s, "gpu_kpi_emails_total", kind="weekly", outcome="failed") == 1
    assert value(s, "gpu_kpi_emails_total", kind="digest", outcome="skipped") == 1
    assert (
        "gpu_kpi_emails_total",
        frozenset({("kind", "weekly"), ("outcome", "skipped")}),
    ) not in s
    assert value(s, "gpu_kpi_reports_built_total") == 2
    assert value(s, "gpu_kpi_last_report_timestamp_seconds", week="2026-W48") == (
        built.timestamp() + 300
    )
    # no update yet: still no KPI series
    assert names(s) == {
        "gpu_kpi_emails_total",
        "gpu_kpi_reports_built_total",
        "gpu_kpi_last_report_timestamp_seconds",
    }


def test_bad_counter_input_is_refused_and_counts_nothing(
    served: tuple[KpiExporter, MetricsServer],
) -> None:
    exporter, server = served
    with pytest.raises(ValueError, match="outcome 'bounced'"):
        exporter.count_email("weekly", "bounced")
    with pytest.raises(ValueError, match="no time zone"):
        exporter.report_built("2026-W48", datetime(2026, 11, 30, 8, 0))
    assert scrape(server) == {("gpu_kpi_reports_built_total", frozenset()): 0.0}


def test_an_update_replaces_the_old_week_entirely(
    served: tuple[KpiExporter, MetricsServer], k48: kpis.WeekKpis, k49: kpis.WeekKpis
) -> None:
    exporter, server = served
    exporter.update(k48, week_to_date=k49)
    assert "2026-W48" in {dict(labels).get("week") for _, labels in scrape(server)}
    exporter.update(k49)
    s = scrape(server)
    weeks = {dict(labels).get("week") for _, labels in s} - {None}
    assert weeks == {"2026-W49"}
    assert value(s, "gpu_kpi_week_spend_usd", week="2026-W49", basis="util") == pytest.approx(
        3 * H100
    )
    assert {dict(labels)["team"] for name, labels in s if name == "gpu_kpi_team_spend_usd"} == {
        "ml"
    }  # cv and ops ran only in W48
    assert not {n for n in names(s) if n.startswith("gpu_kpi_week_to_date_")}


def test_a_scrape_during_updates_sees_one_whole_week(
    served: tuple[KpiExporter, MetricsServer], k48: kpis.WeekKpis, k49: kpis.WeekKpis
) -> None:
    exporter, server = served
    exporter.update(k48)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            exporter.update(k49)
            exporter.update(k48)

    spend = {"2026-W48": 18 * H100, "2026-W49": 3 * H100}
    teams = {"2026-W48": {"ml", "cv", "ops"}, "2026-W49": {"ml"}}
    updater = threading.Thread(target=flip)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so a torn scrape would show
    updater.start()
    try:
        seen = set()
        for _ in range(40):
            s = scrape(server)
            weeks = {dict(labels)["week"] for _, labels in s if "week" in dict(labels)}
            assert len(weeks) == 1, weeks
            (wk,) = weeks
            seen.add(wk)
            assert value(s, "gpu_kpi_week_spend_usd", week=wk, basis="util") == pytest.approx(
                spend[wk]
            )
            assert {
                dict(labels)["team"] for name, labels in s if name == "gpu_kpi_team_spend_usd"
            } == teams[wk]
    finally:
        stop.set()
        updater.join()
        sys.setswitchinterval(switch)
    assert seen <= {"2026-W48", "2026-W49"}


def test_the_server_binds_a_free_port_and_frees_it_on_close() -> None:
    exporter = KpiExporter()
    server = exporter.serve(port=0)
    assert server.host == "127.0.0.1" and server.port > 0
    assert value(scrape(server), "gpu_kpi_reports_built_total") == 0
    server.close()
    server.close()  # twice is harmless
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=2)


def test_two_exporters_keep_their_own_registries(k48: kpis.WeekKpis) -> None:
    one, two = KpiExporter(), KpiExporter()
    one.update(k48)
    two.count_email("weekly", "sent")
    with one.serve(port=0) as a, two.serve(port=0) as b:
        assert a.port != b.port
        sa, sb = scrape(a), scrape(b)
    assert "gpu_kpi_week_spend_usd" in names(sa) and "gpu_kpi_emails_total" not in names(sa)
    assert names(sb) == {"gpu_kpi_emails_total", "gpu_kpi_reports_built_total"}


def test_the_declared_table_matches_prometheus_conventions() -> None:
    assert len(NAMES) == len(METRICS) == 43  # gpu_kpi_week_redone_usd the 43rd
    for m in METRICS:
        assert re.fullmatch(r"gpu_kpi_[a-z0-9_]+", m.name), m.name
        assert m.name.endswith("_total") == (m.type == "counter"), m.name
        assert m.help and m.labels == tuple(sorted(set(m.labels), key=m.labels.index))
        if m.name.endswith(("_usd", "_ratio", "_seconds")) and m.scope != "service":
            assert "week" in m.labels and "basis" in m.labels, m.name


# -- the Grafana dashboard ---------------------------------------------------------------------
def panels(dash: dict[str, object]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for p in dash["panels"]:  # type: ignore[attr-defined]
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def datasources(node: object) -> Iterator[dict[str, str]]:
    """Every ``datasource`` reference in the dashboard, however deep."""
    if isinstance(node, dict):
        for key, v in node.items():
            if key == "datasource":
                assert isinstance(v, dict), f"datasource by name: {v!r}"
                yield v
            else:
                yield from datasources(v)
    elif isinstance(node, list):
        for v in node:
            yield from datasources(v)


def test_the_dashboard_queries_only_declared_metrics_through_the_datasource_variable() -> None:
    dash = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    shown = [p for p in panels(dash) if p["type"] != "row"]
    assert len(shown) >= 10
    assert {p["type"] for p in shown} >= {"stat", "bargauge", "timeseries", "table"}
    exprs = [t["expr"] for p in shown for t in p["targets"]]
    assert all(t["datasource"]["uid"] == "${datasource}" for p in shown for t in p["targets"])
    assert all(p["datasource"]["uid"] == "${datasource}" for p in shown)
    exprs.append(variables["team"]["query"]["query"])
    assert variables["team"]["datasource"]["uid"] == "${datasource}"
    used = {n for e in exprs for n in re.findall(r"\bgpu_kpi_[a-z0-9_]+", e)}
    assert used <= NAMES, used - NAMES
    assert used == NAMES, f"metrics without a panel: {NAMES - used}"  # spend, waste… all shown
    # no hard-wired data source anywhere (the built-in annotations aside): it imports anywhere
    sources = {(d["type"], d["uid"]) for d in datasources(dash)}
    assert sources == {("prometheus", "${datasource}"), ("grafana", "-- Grafana --")}


def test_the_dashboard_panels_do_not_overlap() -> None:
    dash = json.loads(DASHBOARD.read_text())
    cells: dict[tuple[int, int], str] = {}
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids))
    for p in panels(dash):
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[x, y]}"
                cells[x, y] = p["title"]
