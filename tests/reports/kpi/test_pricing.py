"""Each run's price as the report charges it (:func:`reports.kpi.pricing.run_prices`): the
distinct (model, price, source) keys are priced once and given back to their runs by position,
so each run's price must be :func:`tracker.prices.reported_price` of its own row, worked out
here one row at a time, and by hand for a few."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reports.kpi.pricing import run_prices
from tracker.owned import OwnedGpu
from tracker.prices import PriceTable, reported_price

OWNED = {
    "A100-80GB": OwnedGpu(
        model="A100-80GB", purchase_usd=15_000.0, life_years=4.0, power_w=400.0, usd_per_kwh=0.10
    )
}


def _runs(text: str | None) -> pd.DataFrame:
    """Runs of every kind of key: a model with and without a price of its own, an override,
    the same model at two prices, no model, a model that is no text, one owned."""
    frame = pd.DataFrame(
        {
            "gpu_model": [
                "H100",
                None,
                "A100-80GB",
                "H100",
                7,
                "H100",
                "H100",
                "L4",
                "H100",
                "L4",
                "A100-80GB",
                "A100-80GB",
            ],
            "price_per_gpu_hour": [
                None,
                2.0,
                np.nan,
                3.0,
                1.0,
                None,
                3.0,
                None,
                2.5,
                0.5,
                5.0,
                5.0,
            ],
            "price_source": [
                "override",
                None,
                None,
                "override",
                None,
                None,
                "table",
                None,
                "override",
                None,
                "override",
                None,
            ],
        }
    )
    if text is not None:  # the models as the Arrow read gives them (the 7 made "7")
        frame["gpu_model"] = (
            frame["gpu_model"].map(lambda m: m if m is None else str(m)).astype(text)
        )
    return frame


@pytest.mark.parametrize("text", [None, "str"])
def test_each_run_is_priced_by_its_own_row(text: str | None) -> None:
    runs = _runs(text)
    table = PriceTable({"L4": 0.9})
    price, owner = run_prices(runs, table, OWNED)
    for i, (model, given, source) in enumerate(runs.itertuples(index=False)):
        want_price, want_owner = reported_price(
            None if pd.isna(model) else model,
            None if pd.isna(given) else float(given),
            None if pd.isna(source) else source,
            table.overrides,
            OWNED,
        )
        assert price.iat[i] == pytest.approx(
            np.nan if want_price is None else want_price, nan_ok=True
        )
        assert owner.iat[i] == want_owner
    # by hand: the override, the run's own price, the config's [prices], the owned rate
    assert price.iat[3] == 3.0  # H100 at its own override
    assert price.iat[8] == 2.5  # the same model, another override
    assert price.iat[6] == 3.0  # a price it ran with (not an override): kept, no table
    assert price.iat[7] == 0.9  # L4 without a price: the config's [prices]
    assert price.iat[9] == 0.5  # L4 with the price it ran with: that one
    assert price.iat[1] == 2.0  # no model: the price it ran with
    assert price.iat[2] > 0  # owned: the amortized rate

    assert owner.iat[2] == "A100-80GB" and owner.iat[0] is None
    # an owned model's run at its own override pays that, the same run without it the
    # owned rate
    assert (price.iat[10], owner.iat[10]) == (5.0, None)
    assert owner.iat[11] == "A100-80GB" and price.iat[11] == price.iat[2] != 5.0
    assert list(price.index) == list(runs.index)


def test_no_runs_no_prices() -> None:
    price, owner = run_prices(_runs(None).iloc[:0], PriceTable({}))
    assert len(price) == 0 and len(owner) == 0 and price.dtype == float
