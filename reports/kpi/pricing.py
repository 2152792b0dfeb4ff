"""Each run's price per GPU-hour as the report prices it: the report's overrides, else the
price the run recorded, else the built-in table (:func:`tracker.prices.reported_price`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tracker.owned import OwnedGpu
from tracker.prices import PriceTable, reported_price


def run_prices(
    runs: pd.DataFrame, prices: PriceTable, owned: Mapping[str, OwnedGpu] | None = None
) -> tuple[pd.Series, pd.Series]:
    """Each run's price per GPU-hour (:func:`tracker.prices.reported_price`) and the owned
    model pricing it (None: rented).

    Args:
        runs: Runs (``gpu_model``, ``price_per_gpu_hour``, ``price_source``).
        prices: The price table with the report's overrides.
        owned: The owned models (``[owned.<MODEL>]``).

    Returns:
        The price in USD per GPU-hour (NaN: unpriced) and the owned model (None: rented), each
        by ``runs``' index.
    """

    known: dict[tuple[Any, ...], tuple[float | None, str | None]] = {}

    def price_of(model: Any, price: Any, source: Any) -> tuple[float | None, str | None]:
        # a fleet has few distinct (model, price, source), a week up to a million runs; a
        # missing value is None in the key (NaN is not equal to itself)
        key = tuple(None if pd.isna(v) else v for v in (model, price, source))
        if key not in known:
            m, p, src = key
            known[key] = reported_price(
                m, None if p is None else float(p), src, prices.overrides, owned
            )
        return known[key]

    columns = (
        runs["gpu_model"],
        runs["price_per_gpu_hour"].astype(float),
        runs["price_source"],
    )
    # each distinct (model, price, source) priced once, its runs given its price by position:
    # each column's values numbered (Arrow's text by Arrow, no Python object per run), the
    # numbers of the columns so far made one, numbered again (never past the distinct keys)
    group = np.zeros(len(runs), dtype=np.int64)
    for column in columns:
        codes, uniques = pd.factorize(column, use_na_sentinel=False)
        group = pd.factorize(group * len(uniques) + codes)[0]
    _, first = np.unique(group, return_index=True)
    priced = [price_of(*(column.iat[i] for column in columns)) for i in first]
    price = pd.Series(
        np.array([np.nan if u is None else u for u, _ in priced], dtype=float)[group],
        index=runs.index,
        dtype=float,
    )
    owners = np.empty(len(priced), dtype=object)
    for i, (_, owner) in enumerate(priced):
        owners[i] = owner  # one by one: numpy would unpack a tuple
    owned_gpu = pd.Series(owners[group], index=runs.index, dtype=object)
    return price, owned_gpu
