"""A report request built from the settings (:meth:`reports.request.Request.from_settings`), the
one way the CLI's report, chargeback and budgets commands and the service make one."""

from __future__ import annotations

from datetime import UTC
from zoneinfo import ZoneInfo

from reports.kpi.budgets import Budget
from reports.request import FORMATS, Request
from reports.service.config import ServiceSettings
from reports.service.job import Service
from tracker.carbon import Carbon
from tracker.config import Settings
from tracker.cost import SM_ACTIVE_THRESHOLDS, Thresholds
from tracker.owned import OwnedGpu

SETTINGS = Settings(
    prices={"H100": 2.5},
    owned={
        "A100": OwnedGpu(
            model="A100", purchase_usd=10_000.0, life_years=4.0, power_w=400.0, usd_per_kwh=0.1
        )
    },
    carbon=Carbon(g_per_kwh=100.0),
    thresholds=Thresholds(target_util_pct=80.0),
)


def test_the_configured_prices_owned_gpus_carbon_and_thresholds_go_into_the_request() -> None:
    req = Request.from_settings(SETTINGS, week="2026-W48", tz=UTC)
    assert (req.week, req.tz, req.basis) == ("2026-W48", UTC, "util")
    assert req.prices == {"H100": 2.5} and req.owned == SETTINGS.owned
    assert req.carbon == SETTINGS.carbon
    assert req.thresholds is not None and req.thresholds.target_util_pct == 80.0
    assert (req.formats, req.report_url, tuple(req.budgets)) == (("html", "json", "csv"), None, ())


def test_on_sm_activity_the_configured_utilization_thresholds_do_not_apply() -> None:
    req = Request.from_settings(SETTINGS, week=None, tz=UTC, basis="sm_active")
    assert req.thresholds == SM_ACTIVE_THRESHOLDS


def test_the_service_asks_with_its_report_section_and_every_format() -> None:
    nlp = Budget(team="nlp", usd_per_week=100.0)
    service = ServiceSettings(
        tracker=SETTINGS,
        timezone="Europe/Berlin",
        report_url="https://gpu-kpi.example.com",
        budgets=(nlp,),
    )
    req = Service(service).request("2026-W48")
    assert req == Request.from_settings(
        SETTINGS,
        week="2026-W48",
        tz=ZoneInfo("Europe/Berlin"),
        formats=FORMATS,
        report_url="https://gpu-kpi.example.com",
        budgets=(nlp,),
    )
    assert req.prices == {"H100": 2.5} and req.thresholds == Thresholds(target_util_pct=80.0)
