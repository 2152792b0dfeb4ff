"""``gpu-kpi prices``: the rate the reports charge each GPU model with the config in force, and
where it comes from. The rate is :func:`tracker.prices.reported_price`'s (an owned model's
amortized rate, else the config's ``[prices]``, else the built-in table), never derived here, so
the list and the reports cannot disagree (the owned variant rule of
:func:`tracker.prices.owned_row` included)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Literal

from reports.cli_support import printable
from tracker.owned import OwnedGpu, amortize
from tracker.prices import OWNED_SOURCE, PriceTable, owned_table, reported_price

CONFIG_SOURCE = "config [prices]"
"""The source shown for a price set in ``[prices]`` (or ``GPU_KPI_PRICE_<MODEL>``)."""


@dataclass(frozen=True, kw_only=True)
class PriceLine:
    """One model's rate in force, USD per GPU-hour, and where it comes from."""

    gpu: str
    usd_per_gpu_hour: float
    as_of: str
    source: str
    """The table row's source, :data:`CONFIG_SOURCE`, or how the owned rate is made."""
    priced_by: Literal["owned", "config", "table"]


def price_lines(
    prices: Mapping[str, float], owned: Mapping[str, OwnedGpu], gpu: str | None = None
) -> list[PriceLine]:
    """Every priced model (the table's rows, ``[prices]``'s, then owned models the table has no
    row for), or the one model ``gpu`` names; :class:`tracker.prices.UnknownGpu` when nothing
    prices it."""
    table = PriceTable(prices)
    # the price-table key of each owned model, as owned_table names its row
    by_key = {owned_table({name: o}).rows()[0].gpu: o for name, o in owned.items()}
    if gpu is not None:
        names = [gpu]
    else:
        names = [p.gpu for p in table.rows()]
        names += [k for k in by_key if k not in names]
    return [_line(name, table, prices, owned, by_key) for name in names]


def _line(
    name: str,
    table: PriceTable,
    prices: Mapping[str, float],
    owned: Mapping[str, OwnedGpu],
    by_key: Mapping[str, OwnedGpu],
) -> PriceLine:
    usd, owner = reported_price(name, None, None, prices, owned)
    if owner is not None and usd is not None:
        # "owned: $15,000 over 4 y + … = $0.493/GPU-h", named as the runs name the source
        how = amortize(by_key[owner]).label().removeprefix("owned: ")
        return PriceLine(
            gpu=owner,
            usd_per_gpu_hour=usd,
            as_of="user",
            source=f"{OWNED_SOURCE}: {how}",
            priced_by="owned",
        )
    row = table.get(name)  # nothing prices it: UnknownGpu, one line
    mine = row.source == "config"
    return PriceLine(
        gpu=row.gpu,
        usd_per_gpu_hour=row.usd_per_gpu_hour if usd is None else usd,
        as_of=row.as_of,
        source=CONFIG_SOURCE if mine else row.source,
        priced_by="config" if mine else "table",
    )


def format_price_lines(lines: list[PriceLine], fmt: str) -> str:
    """``table`` (gpu, usd/gpu-h, as_of, source; a user's text with control characters shown
    as ``\\xNN``) or ``json`` (those and ``priced_by``)."""
    if fmt == "json":
        return json.dumps([asdict(p) for p in lines], indent=2)
    width = max(len(p.gpu) for p in lines)
    out = [f"{'gpu'.ljust(width)}  usd/gpu-h  as_of    source"]
    out += [
        printable(f"{p.gpu.ljust(width)}  {p.usd_per_gpu_hour:9.2f}  {p.as_of:<7}  {p.source}")
        for p in lines
    ]
    return "\n".join(out)
