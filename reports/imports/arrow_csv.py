"""Delimited text read by Arrow's C CSV reader (``pyarrow.csv``), for the vectorized nvidia-smi
and sacct reads: the one module of the imports that imports pyarrow. A block of whole lines
becomes batches of columns: a text column as each row's code into its distinct texts (each
distinct text made a Python string once, and only when asked for; a column of mostly distinct
texts read plainly, each row its own code), a number column as float64 with NaN for a missing
cell.

The reader is told every column and reads nothing it is not told: one delimiter of one byte,
no quoting, no escapes, no blank line passed over. Whatever it cannot read that way (a row of
another length, a number that is none, text that is no UTF-8) makes :func:`read_block` answer
None, and its caller reads those lines its own way.

pyarrow is optional (the ``parquet`` extra): :func:`available` says whether it is installed;
where it is not, each import reads its own way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import cache, cached_property
from typing import Any

import numpy as np


@cache
def available() -> bool:
    """Whether pyarrow is installed; asked once. (The report's modules ask
    :func:`reports.kpi.arrow_text.available`; the imports ask here: that package imports
    pandas, which reading sacct or nvidia-smi text does not need.)"""
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


class Coded:
    """A column of text: each row's code (:attr:`codes`, int32) into its distinct texts. A
    column read plainly (:func:`read_block`'s ``plain``) is its own texts: row ``i``'s code is
    ``i``, whether or not its text is another row's too."""

    def __init__(self, array: Any) -> None:
        import pyarrow as pa

        if pa.types.is_dictionary(array.type):
            self._texts = array.dictionary
            self.codes: np.ndarray = _plain(array.indices, np.int32)
        else:  # a plain string array
            self._texts = array
            self.codes = np.arange(len(array), dtype=np.int32)

    @cached_property
    def values(self) -> list[str]:
        """The distinct texts, as Python strings, in code order."""
        values: list[str] = self._texts.to_pylist()
        return values

    def text(self, code: int) -> str:
        """The text of one code, without making every text a Python string."""
        if "values" in self.__dict__:
            return self.values[code]
        text: str = self._texts[code].as_py()
        return text

    def texts(self, at: np.ndarray) -> list[str]:
        """The texts of the codes ``at``, as Python strings, without making every text one."""
        if "values" in self.__dict__:
            return [self.values[i] for i in at.tolist()]
        texts: list[str] = self._take(at).to_pylist()
        return texts

    def fixed(self, width: int) -> np.ndarray | None:
        """Every distinct text's bytes, one a row (``(len(values), width)`` uint8), where each
        is ``width`` bytes long; else None."""
        offsets = self._offsets()
        if len(offsets) < 2 or not (np.diff(offsets) == width).all():
            return None
        data = np.frombuffer(self._texts.buffers()[2], dtype=np.uint8)
        return data[offsets[0] : offsets[-1]].reshape(-1, width)  # no copy

    def raw(self) -> tuple[np.ndarray, np.ndarray]:
        """Every distinct text's bytes: their offsets (one more than the texts, into the
        data) and the UTF-8 data itself, as uint8 (no copy)."""
        data = self._texts.buffers()[2]
        bytes_ = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        return self._offsets(), bytes_

    def chars(self, at: np.ndarray, width: int) -> np.ndarray:
        """The bytes of the distinct texts ``at`` (codes), each ``width`` bytes long, one a
        row: ``(len(at), width)`` uint8."""
        data = np.frombuffer(self._texts.buffers()[2], dtype=np.uint8)
        return data[self._offsets()[at][:, None] + np.arange(width)]

    def whole(self, at: np.ndarray) -> np.ndarray:
        """The distinct texts ``at`` (codes), each written in ASCII digits (at most 18), as
        int64."""
        import pyarrow as pa
        import pyarrow.compute as pc

        return _plain(pc.cast(self._take(at), pa.int64()), np.int64)

    def _take(self, at: np.ndarray) -> Any:
        """The texts of the codes ``at``, as an Arrow array."""
        import pyarrow as pa

        at = np.ascontiguousarray(at, dtype=np.int64)
        index = pa.Array.from_buffers(pa.int64(), len(at), [None, pa.py_buffer(at)])
        return self._texts.take(index)  # (pa.array() of numpy imports pandas)

    def _offsets(self) -> np.ndarray:
        d = self._texts
        return np.frombuffer(d.buffers()[1], dtype=np.int32)[d.offset : d.offset + len(d) + 1]

    def matches(self, pattern: str) -> np.ndarray:
        """Whether each distinct text matches ``pattern`` (RE2 syntax: ``\\d`` is ASCII
        digits only), as bools in code order."""
        import pyarrow.compute as pc

        found = pc.match_substring_regex(self._texts, pattern)
        bits = np.frombuffer(found.buffers()[1], dtype=np.uint8)
        n, at = len(found), found.offset
        return np.unpackbits(bits, bitorder="little")[at : at + n].astype(bool)


Batch = dict[str, Coded | np.ndarray]
"""A batch's columns by name: text as :class:`Coded`, numbers as float64 (NaN: missing)."""


def read_block(
    data: bytes | bytearray | memoryview,
    names: Sequence[str],
    *,
    delimiter: str = ",",
    numbers: Mapping[str, str] | None = None,
    missing: Collection[str] = (),
    keep: Collection[str] | None = None,
    plain: Collection[str] = (),
    threads: bool = True,
) -> list[tuple[int, Batch]] | None:
    """The rows of ``data`` in batches of columns, in order, each with its number of rows.

    Args:
        data: Whole lines, each ended by ``\\n`` (the last may not be), no header.
        names: Every column, in the order of the cells.
        delimiter: The one byte between cells (no quoting, no escapes).
        numbers: The columns of numbers, each with the text written after each number:
            ``""`` for none (a cell is a number, blanks around it allowed); else a cell is a
            blank, the number and that text (``" %"``: `` 49 %``). The other columns are text.
        missing: Cells that hold no number (``" [N/A]"``): NaN in a number column.
        keep: The columns to return (default all).
        plain: Text columns whose cells are mostly each their own (ids, times): read as
            plain strings, each row its own code, not into a dictionary (Arrow's hashing of
            every cell to find the distinct ones costs more than it saves there).
        threads: Whether Arrow parses with a thread per CPU (not where processes side by
            side already share the CPUs). Without, the block is parsed as one batch: each
            column's checks and conversions here then run once, not once a MiB.

    Returns:
        ``(rows, columns)`` per batch; None where a row has another number of cells, a
        blank line in a block with a number column (Arrow reads a blank line as a row of
        empty cells: of text columns alone, a row like any other), a number column's cell
        is neither a number (with its text) nor
        ``missing``, a text column's cell is ``missing``, or a text column's bytes are no UTF-8.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    numbers = numbers or {}
    keep = list(names if keep is None else keep)
    coded = pa.dictionary(pa.int32(), pa.string())
    types = {n: pa.string() if n in plain else coded for n in keep if n not in numbers}
    types.update({n: pa.float64() if not unit else pa.string() for n, unit in numbers.items()})
    try:
        table = pcsv.read_csv(
            pa.py_buffer(data),
            read_options=pcsv.ReadOptions(
                column_names=list(names), use_threads=threads, block_size=_block_size(data, threads)
            ),
            parse_options=pcsv.ParseOptions(
                delimiter=delimiter, quote_char=False, ignore_empty_lines=False
            ),
            convert_options=pcsv.ConvertOptions(
                column_types=types,
                include_columns=keep,
                null_values=list(missing),
                strings_can_be_null=bool(missing),
            ),
        )
    except (pa.ArrowException, ValueError):
        return None
    out: list[tuple[int, Batch]] = []
    for batch in table.to_batches():
        columns: Batch = {}
        for name in keep:
            array = batch.column(name)
            if array.null_count and name not in numbers:
                return None  # a missing cell where text is read
            if name not in numbers:
                columns[name] = Coded(array)
                continue
            if unit := numbers[name]:  # missing cells are null: passed over
                written = pc.and_(pc.starts_with(array, " "), pc.ends_with(array, unit))
                if not pc.all(written, min_count=0).as_py():
                    return None
                number = pc.binary_slice(array.cast(pa.binary()), 1, -len(unit))
                try:  # bytes: no UTF-8 to decode, and a number is ASCII
                    array = pc.cast(number, pa.float64())
                except (pa.ArrowException, ValueError):
                    return None
            if pc.any(pc.is_nan(array)).as_py():
                return None  # a cell reading "nan": NaN is a missing value here
            columns[name] = _floats(array)
        out.append((batch.num_rows, columns))
    return out


def _block_size(data: bytes | bytearray | memoryview, threads: bool) -> int:
    """The bytes Arrow parses a batch at a time: where threads parse batches side by side, a
    batch for each of Arrow's threads (at least its default, 1 MiB; a line more, for the last
    one's end), else the whole block in one. Batches are not made smaller than the threads
    need: each one costs its columns' checks and conversions here again, and Arrow its own
    work a batch (a 16 MiB block in 1 MiB batches on 2 CPUs: 10% more CPU than in 2)."""
    size = memoryview(data).nbytes
    if threads:
        import pyarrow as pa

        return max(-(-size // max(1, pa.cpu_count())) + (1 << 16), 1 << 20)
    return max(size + 1, 1 << 20)


def _plain(array: Any, dtype: type[np.generic]) -> np.ndarray:
    """A fixed-width Arrow array's values as numpy, read from its buffer without a copy
    (Arrow's own ``to_numpy`` imports pandas to ask whether it is there)."""
    size = np.dtype(dtype).itemsize
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=size * array.offset
    )


def _floats(array: Any) -> np.ndarray:
    """A float64 Arrow array as numpy, NaN where it is null."""
    values = _plain(array, np.float64)
    if not array.null_count:
        return values
    bits = np.frombuffer(array.buffers()[0], dtype=np.uint8)
    valid = np.unpackbits(bits, bitorder="little")[array.offset : array.offset + len(array)]
    return np.where(valid.astype(bool), values, np.nan)
