"""Frames the KPIs read, built from the store's records and rows, and the basis they are judged on.

Utilization has a basis: ``util`` (NVML utilization, the share of time a kernel ran) or
``sm_active`` (GPM SM activity, Hopper+). Figures of one basis are never mixed with the other;
GPU-time without a value on the chosen basis is "unknown", never idle.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from reports.kpi import arrow_text
from reports.kpi.checks import PCT_RANGE
from reports.rows import TIME_DTYPE, links_text
from tracker.record import MinuteSample, RunRecord

BASES = {"util": ("util_pct", "NVML utilization"), "sm_active": ("sm_active_pct", "SM activity")}

GT_COLUMNS = [
    "run_id",
    "gpu",
    "week",
    "gpu_hours",
    "known_hours",
    "used_hours",
    "idle_hours",
    "idle_used_hours",
]
"""One row per (run, GPU, week): hours allocated, hours with a utilization value, Σ util × hours
(as a fraction, so used/known is the utilization), hours in idle stretches and Σ util × hours
over them (so the utilization of the rest is known: waste counts idle hours in full). Summary-only runs
have one row per week with ``gpu = "*"`` standing for all their GPUs."""


# -- frames from records ----------------------------------------------------------------------
def runs_frame(runs: Iterable[RunRecord]) -> pd.DataFrame:
    """The runs as a frame.

    Args:
        runs: The records.

    Returns:
        A column per :class:`RunRecord` field, a row per record: times UTC, ``links`` as
        :func:`reports.rows.links_text` writes them.
    """
    rows = [r.as_dict() for r in runs]
    for row in rows:
        row["links"] = links_text(row["links"] or {})
    df = pd.DataFrame(rows, columns=list(RunRecord.__dataclass_fields__))
    for col in ("started_at", "ended_at", "heartbeat_at"):
        df[col] = pd.to_datetime(df[col], utc=True).astype(TIME_DTYPE)
    return df


def samples_frame(samples: Iterable[MinuteSample]) -> pd.DataFrame:
    df = pd.DataFrame(
        [s.__dict__ for s in samples], columns=list(MinuteSample.__dataclass_fields__)
    )
    df["minute"] = pd.to_datetime(df["minute"], utc=True)
    return df


SAMPLE_COLUMNS = ("run_id", "minute", "gpu", "covered_s", "util_pct", "sm_active_pct")
"""The sample columns the KPIs read (of the two utilization columns, the basis's is enough)."""


def sample_columns(basis: str) -> tuple[str, ...]:
    """The sample columns the KPIs of ``basis`` read."""
    return ("run_id", "minute", "gpu", "covered_s", BASES[basis][0])


class SampleFrameBuilder:
    """Collects chunks of raw sample rows (:data:`SAMPLE_COLUMNS`, as
    :meth:`reports.data.scans.SampleScans.scan_samples` hands them) into one frame, keeping ids
    as categories so that ten million rows fit in a few hundred MB.

    As the store's totals do (:mod:`reports.kpi.checks`): a utilization that is text,
    non-finite or outside 0–100 becomes unknown (NaN); a row whose minute is no time or whose
    ``covered_s`` is not a number is left out.

    Args:
        columns: The columns of the rows, in their order.
        runs: Only the rows of these runs are kept (None: all).
    """

    def __init__(
        self, columns: Sequence[str] = SAMPLE_COLUMNS, *, runs: Collection[str] | None = None
    ) -> None:
        self.columns = tuple(columns)
        self._parts: list[pd.DataFrame] = []
        self._runs = None if runs is None else list(runs)

    def __call__(self, chunk: Sequence[tuple[object, ...]]) -> None:
        df = pd.DataFrame.from_records(chunk, columns=list(self.columns))
        for col in ("run_id", "gpu"):
            if col in df:
                df[col] = df[col].astype("category")
        keep = pd.Series(True, index=df.index)
        if self._runs is not None:  # a category's test: once per distinct run in the chunk
            keep &= df["run_id"].isin(self._runs)
        if "minute" in df:
            if len(df) and isinstance(df["minute"].iloc[0], str):  # SQLite: naive UTC text
                df["minute"] = pd.to_datetime(
                    df["minute"], format="ISO8601", utc=True, errors="coerce"
                )
            else:
                df["minute"] = pd.to_datetime(df["minute"], utc=True, errors="coerce")
            keep &= df["minute"].notna()  # text that is no time: the row is left out
        if "covered_s" in df:
            df["covered_s"] = pd.to_numeric(df["covered_s"], errors="coerce")
            keep &= df["covered_s"].notna()
        for col in ("util_pct", "sm_active_pct"):
            if col in df:  # text, non-finite or out of range: unknown, as the store's totals
                value = pd.to_numeric(df[col], errors="coerce").astype(float)
                df[col] = value.where(value.between(*PCT_RANGE))
        self._parts.append(df if keep.all() else df[keep])

    def frame(self) -> pd.DataFrame:
        if not self._parts:
            return pd.DataFrame({c: pd.Series(dtype="float64") for c in self.columns})
        out = {}
        for col in self.columns:
            values = [p[col] for p in self._parts]
            if col in ("run_id", "gpu"):
                out[col] = pd.Series(union_categoricals(values))
            else:
                out[col] = pd.concat(values, ignore_index=True)
        self._parts = []
        return pd.DataFrame(out)


# -- GPU time from the store's totals ---------------------------------------------------------
TOTALS_COLUMNS = [
    "run_id",
    "gpu",
    "bucket",
    "minutes",
    "covered_s",
    "known_s",
    "value_s",
    "first_low",
    "last_low",
    "dropped",
    "bad_values",
    "bad_minutes",
]
"""The fields of :class:`reports.data.samples.SampleTotals`: one row per (run, GPU, week)."""


def is_in(column: pd.Series, values: Iterable[object]) -> np.ndarray:
    """``column.isin(values)`` as a boolean array, at the same cost whether pandas keeps text
    in Python objects or in Arrow arrays: text on both sides by Arrow's ``is_in``
    (:func:`reports.kpi.arrow_text.text_in`, with pyarrow installed); else Arrow-held text by
    one factorization of both (pandas' Arrow ``isin`` makes a pyarrow scalar of each value
    looked for: over a million run ids, seconds), anything else by pandas itself.

    Args:
        column: The values to test (run ids, say).
        values: What to look for: a Series, a list or a set.

    Returns:
        For each row of ``column``, whether its value is among ``values`` (a missing value
        when a missing value is).
    """
    listed = (
        values if isinstance(values, pd.Series | pd.Index | np.ndarray | list) else list(values)
    )
    found = arrow_text.text_in(column, listed)
    if found is not None:
        return found
    if getattr(column.dtype, "storage", None) != "pyarrow":
        return column.isin(listed).to_numpy()
    wanted = pd.Series(listed, dtype=None if isinstance(listed, pd.Series | pd.Index) else object)
    codes, _ = pd.factorize(pd.concat([column, wanted], ignore_index=True))
    n = len(column)
    found = np.zeros(int(codes.max(initial=-1)) + 2, dtype=bool)  # the last slot: missing (-1)
    found[codes[n:]] = True
    return found[codes[:n]]


def positions_in(values: pd.Series, among: pd.Series) -> np.ndarray:
    """For each of ``values``, its position in ``among`` (whose values are unique: not
    checked, a key twice is found at one of its places), -1 where it is not there:
    :meth:`pandas.Index.get_indexer` at the cost of one hash table of ``among`` probed by
    Arrow where both are text (:func:`reports.kpi.arrow_text.text_positions`: 101,000 run ids
    in 8 ms), else one factorization of both (26 ms); a missing value is found where
    ``among`` holds one (None and NaN alike).

    Args:
        values: The keys to look up (run ids of GPU-time rows, say).
        among: The unique keys (the runs' ids), in their order.

    Returns:
        Each value's position in ``among`` (int64), -1 where it is not there.
    """
    found = arrow_text.text_positions(values, among)
    if found is not None:
        return found
    n = len(among)
    codes, _ = pd.factorize(pd.concat([among, values], ignore_index=True))
    at = np.full(int(codes.max(initial=-1)) + 2, -1, dtype=np.int64)  # last slot: missing
    at[codes[:n]] = np.arange(n)
    return at[codes[n:]]


def sorted_codes(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Each value's place among the distinct values sorted (as :func:`pandas.factorize` with
    ``sort=True``: -1 where missing), and those values as objects; text is sorted by Arrow
    (by code point, as Python compares it), not one Python comparison at a time.

    Args:
        values: Text keys (run ids, say).

    Returns:
        Each value's code (int64: its place among the sorted distinct values; -1 missing) and
        the distinct values sorted, as objects.
    """
    codes, uniques = pd.factorize(values)
    distinct = np.asarray(uniques, dtype=object)
    if not len(distinct):
        return codes, distinct
    order = arrow_text.text_order(distinct)
    if order is None:  # not text alone, or no pyarrow: sorted as pandas sorts them
        codes, uniques = pd.factorize(values, sort=True)
        return codes, np.asarray(uniques, dtype=object)
    rank = _ranks(order)
    if values.dtype == object:
        # the column's own objects, not a second Python string per value: a row of each
        # (any one: they are equal)
        found = np.flatnonzero(codes >= 0)
        row = np.empty(len(distinct), dtype=np.int64)
        row[codes[found]] = found
        distinct = values.to_numpy()[row]
    return np.where(codes >= 0, rank[codes], -1), distinct[order]


def sorted_codes_at(
    values: pd.Series, at: np.ndarray, among: pd.Series
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sorted_codes` of ``values`` whose places in ``among`` are known (``at``, from
    :func:`positions_in`): the keys ``among`` sorted once, a value's code its key's rank there,
    no hash of the values (101,000 run ids: 4 ms against 13). A code of a key no value holds
    is unused; its place in the values returned holds None.

    Args:
        values: Text keys (the run ids of GPU-time rows, say).
        at: Each value's position in ``among``; where one is -1 (or a key is missing),
            :func:`sorted_codes` of the values themselves.
        among: The unique keys (the runs' ids).

    Returns:
        As :func:`sorted_codes`.
    """
    if not len(values) or (at < 0).any():
        return sorted_codes(values)
    order = arrow_text.text_order(among)
    if order is None:  # not text alone, a key missing, or no pyarrow
        return sorted_codes(values)
    distinct = np.full(len(among), None, dtype=object)
    distinct[at] = values.to_numpy(dtype=object)  # the column's own objects
    return _ranks(order)[at], distinct[order]


def _ranks(order: np.ndarray) -> np.ndarray:
    """Each position's place in the sorted order ``order`` (its inverse permutation)."""
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def shared_objects(column: pd.Series) -> np.ndarray:
    """``column.to_numpy(dtype=object)`` with one Python object per distinct value (a million
    rows of a few GPUs or teams: a few strings, not a million).

    Args:
        column: Any column.

    Returns:
        Its values as objects; a missing value as ``to_numpy(dtype=object)`` gives it.
    """
    try:
        codes, uniques = pd.factorize(column)  # missing: -1
    except TypeError:  # a value that cannot be hashed (a list: not from the store)
        return column.to_numpy(dtype=object)
    out = np.empty(len(codes), dtype=object)
    found = codes >= 0
    out[found] = np.asarray(uniques, dtype=object)[codes[found]]
    if not found.all():
        out[~found] = column[~found].to_numpy(dtype=object)
    return out


MOVE_FROM = 500_000
"""Rows from which :func:`sorted_moving` moves a column at a time: below, a frame's copy is
small, and one ``sort_values`` of 30 columns costs a twentieth of taking out each (pandas
rebuilds its blocks at each ``pop``: ~0.6 ms a column however few the rows) at 100 rows,
two thirds at 100,000."""


def sorted_moving(rows: pd.DataFrame, keys: list[str], *, ascending: bool = True) -> pd.DataFrame:
    """``rows.sort_values(keys, ascending=ascending, ignore_index=True)``, made a column at a
    time from :data:`MOVE_FROM` rows: each column is taken out of ``rows`` (which is left with
    none) and freed once sorted, so that a million rows are not held twice.

    Args:
        rows: The rows to sort; emptied from :data:`MOVE_FROM` rows (not to be used again).
        keys: The columns to sort by, the first first.
        ascending: The order of every key.

    Returns:
        The rows sorted (ties as listed), indexed from 0: the frame ``sort_values`` makes.
    """
    if len(rows) < MOVE_FROM:
        return rows.sort_values(keys, ascending=ascending, ignore_index=True)
    # the order sort_values takes (it depends on the keys alone), as positions
    order = rows[keys].reset_index(drop=True).sort_values(keys, ascending=ascending).index
    out = pd.DataFrame(index=pd.RangeIndex(len(rows)))
    for name in list(rows.columns):
        out[name] = rows.pop(name).take(order.to_numpy()).set_axis(out.index)
    return out


def hand_back_freed() -> None:
    """Give the pages of the C heap that freed arrays left back to the system (glibc's
    ``malloc_trim``; nothing with another C library): after a step that made and dropped
    frames of a million rows, the process would otherwise keep their memory as its own
    while the next step grows in the gaps between what is still held (a week of a million
    runs: a twentieth of the report's peak memory). A few milliseconds at most."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError, TypeError):  # no glibc (TypeError: Windows' CDLL(None))
        pass
