"""The charts' dollar axes: tick labels that read exactly, for cents as for millions, checked on
the figures drawn from a real store's week."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from fakes import run_record

from reports.build import compute
from reports.render import charts
from reports.request import Request
from tracker.store import RunStore


@pytest.mark.parametrize(
    ("ticks", "labels"),
    [
        ([0, 0.25, 0.5, 0.75, 1.0], ["$0", "$0.25", "$0.50", "$0.75", "$1.00"]),
        ([0, 2.5, 5, 7.5, 10], ["$0", "$2.50", "$5.00", "$7.50", "$10.00"]),
        ([0, 0.1, 0.2, 0.3], ["$0", "$0.10", "$0.20", "$0.30"]),
        ([0, 200, 400, 600, 800, 1000], ["$0", "$200", "$400", "$600", "$800", "$1,000"]),
        ([0, 5000, 10000, 15000], ["$0", "$5k", "$10k", "$15k"]),
        ([0, 12500, 25000], ["$0", "$12.5k", "$25.0k"]),
        ([0, 1e6, 2e6], ["$0", "$1M", "$2M"]),
    ],
)
def test_dollar_ticks_are_distinct_and_exact(ticks: list[float], labels: list[str]) -> None:
    shown = [charts.usd_tick(t, ticks) for t in ticks]
    assert [label.replace("\\$", "$") for label in shown] == labels  # "\$": no mathtext


def test_a_week_of_cents_has_cents_on_its_axes(tmp_path: Path) -> None:
    """One run: 12 minutes on an H100 at $3.85 = $0.77 at 40% → waste 0.77 × (1 − 40/85) =
    $0.41. The spend and waste axes were "$0 $0 $0 $1" before; now every label differs."""
    from matplotlib.figure import Figure

    url = f"sqlite:///{tmp_path}/runs.db"
    with RunStore(url) as store:
        store.upsert_run(run_record("tiny", datetime(2026, 11, 24, 9, tzinfo=UTC), 0.2, util=40.0))
    k = compute(url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 1, tzinfo=UTC)).kpis
    assert k.headline.spend_usd == pytest.approx(0.77)
    assert k.headline.waste_usd == pytest.approx(0.77 * (1 - 40 / 85))
    for draw, axis in (
        (charts._trend_spend, "y"),
        (charts._trend_waste, "y"),
        (charts._waste_by_team, "x"),
    ):
        fig = Figure()
        ax = fig.add_subplot()
        draw(k, ax)
        fig.canvas.draw()
        shown = [t.get_text() for t in getattr(ax, f"get_{axis}ticklabels")() if t.get_text()]
        assert len(shown) >= 3 and len(set(shown)) == len(shown), (draw.__name__, shown)
        assert all("." in label for label in shown if label != "\\$0"), shown
    assert charts._usd(0.77) == "\\$0.77"  # the spend bar's annotation
