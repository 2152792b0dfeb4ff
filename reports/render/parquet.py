"""The week's runs as Parquet (``gpu-kpi report --format parquet``): one row per run, a typed
column per field, for BI tools and notebooks (DuckDB, pandas, Spark, Power BI) that read
Parquet and not long-form CSV.

``<week>.parquet`` holds every run of the week (the CSV's ``run`` section, wide): ``week``
(``2026-W48``), ``basis`` (``util`` | ``sm_active``), ``run_id`` and the run fields of the CSV
(:data:`reports.render.exports.RUN_FIELDS` but ``links``), text as ``string``, ``gpu_count``
as ``int64`` and every figure as ``double``; an unknown value, or a figure that is not finite,
is null (as the CSV leaves it empty): so are the dollars (``spend_usd``, ``waste_usd``,
``idle_usd``) of a run whose GPU model has no price, which are unknown, not $0. Text is
written as it is, not neutralized: Parquet is typed data, never run as a spreadsheet formula.
The file's key-value metadata holds ``gpu_kpi.schema`` (:data:`SCHEMA`), ``gpu_kpi.week``,
``gpu_kpi.basis`` and ``gpu_kpi.headline`` (the week's headline, as in the JSON). Written a row
group of :data:`ROW_GROUP` runs at a time, compressed with zstd: a week of a million runs is
never held as one table.

Needs pyarrow (:func:`tracker.extras.install_hint` says how); asked for without it, the report stops
before computing anything (:func:`reports.request.parse_formats`).
"""

from __future__ import annotations

import math
import re
from typing import IO, Any

import pandas as pd

from reports.kpi.checks import as_text
from reports.render.exports import RUN_FIELDS, RunsExport, priced_runs, to_json

SCHEMA = "gpu-kpi.week-runs/1"
ROW_GROUP = 100_000
"""Runs per row group: a group's columns are made, written and dropped before the next."""

_FIELDS = ("week", "basis", *(f for f in RUN_FIELDS if f != "links"))
_INTEGER = frozenset({"gpu_count"})
_FIGURES = frozenset(
    f for f in _FIELDS if f.endswith(("_hours", "_pct", "_usd", "_kwh", "_kg", "_tflops"))
) | {"mfu", "ofu"}
"""The figures, by the unit in their names: doubles."""
_TEXT = frozenset(_FIELDS) - _INTEGER - _FIGURES


class ParquetExport(RunsExport):
    """The week's runs as a Parquet file (see the module docstring), written as it is made.

    Args:
        d: The week's document (:func:`reports.render.exports.to_dict`): its week, basis and
            headline.
        runs: The week's runs (:attr:`reports.kpi.WeekKpis.runs`): every one is written.
    """

    def write_to(self, f: IO[bytes]) -> None:
        """Write the file to ``f`` (binary), a row group at a time.

        Args:
            f: An open binary file; it stays open.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema(
            [(name, _type(pa, name)) for name in _FIELDS],
            metadata={
                "gpu_kpi.schema": SCHEMA,
                "gpu_kpi.week": str(self.d["week"]),
                "gpu_kpi.basis": str(self.d["basis"]),
                "gpu_kpi.headline": to_json(self.d["headline"]),
            },
        )
        with pq.ParquetWriter(f, schema, compression="zstd") as w:
            n = len(self.runs)
            for lo in range(0, max(n, 1), ROW_GROUP):
                part = priced_runs(self.runs.iloc[lo : lo + ROW_GROUP])  # unpriced: null $
                columns = [self._column(pa, name, part) for name in _FIELDS]
                w.write_table(pa.Table.from_arrays(columns, schema=schema))
                if not n:
                    break

    def _column(self, pa: Any, name: str, part: pd.DataFrame) -> Any:
        """One field of ``part``'s runs as an Arrow array of the field's type."""
        n = len(part)
        if name in ("week", "basis"):
            return pa.array([str(self.d[name])] * n, type=pa.string())
        if name not in part.columns:
            return pa.nulls(n, type=_type(pa, name))
        col = part[name]
        if name in _TEXT:
            held = isinstance(col.dtype, pd.StringDtype)
            if held or (
                col.dtype == object and pd.api.types.infer_dtype(col) in ("string", "empty")
            ):  # text or missing (None, NaN, pd.NA): null
                try:
                    if held:  # Arrow's own text as it is (pandas' Arrow storage: no copy)
                        return pa.array(col.array, type=pa.string())
                    return pa.array(col.to_numpy(dtype=object), pa.string(), from_pandas=True)
                except (UnicodeError, pa.ArrowException):
                    pass  # a lone surrogate: each value as _text makes it
            return pa.array([_text(v) for v in col.to_numpy(dtype=object).tolist()], pa.string())
        numbers = pd.to_numeric(col, errors="coerce").astype(float)
        numbers = numbers.where(numbers.abs() != math.inf)  # missing or not finite: null
        if name in _INTEGER:
            figures = pa.array(numbers.to_numpy(), pa.float64(), from_pandas=True)
            try:
                return figures.cast(pa.int64())  # whole numbers in range: as int() makes them
            except pa.ArrowException:
                pass  # a fraction (int() drops it) or past int64: value by value
            return pa.array(
                [None if math.isnan(v) else int(v) for v in numbers.tolist()], pa.int64()
            )
        return pa.array(numbers.to_numpy(), pa.float64(), from_pandas=True)


def _type(pa: Any, name: str) -> Any:
    if name in _TEXT:
        return pa.string()
    return pa.int64() if name in _INTEGER else pa.float64()


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: object) -> str | None:
    """A text cell: the value as it is, None for a missing one (None, NaN, ``pd.NA``), and
    anything else as :func:`reports.kpi.checks.as_text` writes it (bytes decoded)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)  # a lone surrogate: no UTF-8 holds it
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return as_text(value)
