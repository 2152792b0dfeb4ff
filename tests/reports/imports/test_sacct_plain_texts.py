"""A text column Arrow reads plainly (``read_block``'s ``plain``: sacct's ids and times, whose
cells are mostly each their own) answers as the same column read into a dictionary does, row
by row: each row its own code, every text, digit and pattern read alike."""

from __future__ import annotations

import random

import numpy as np
import pytest
from fakes import examples

from reports.imports import arrow_csv

pytestmark = pytest.mark.skipif(not arrow_csv.available(), reason="needs pyarrow")

CELLS = ["1234", "1234_7", "2026-12-02T10:34:28", "Unknown", "", "ö", "1234.batch", "007"]


def texts(rng: random.Random, n: int, *, width: int | None = None) -> list[str]:
    """``n`` cells, some repeated, some each their own; each ``width`` bytes where given."""
    if width is not None:
        return [str(rng.randint(10 ** (width - 1), 10**width - 1)) for _ in range(n)]
    return [
        rng.choice(CELLS) if rng.random() < 0.5 else str(rng.randint(0, 10**6)) for _ in range(n)
    ]


def by_row(col: arrow_csv.Coded) -> list[str]:
    return [col.values[c] for c in col.codes.tolist()]


@pytest.mark.parametrize("seed", range(examples(20)))
def test_a_plain_column_reads_as_its_dictionary_does(seed: int) -> None:
    rng = random.Random(seed)
    # every other block's cells all 4 bytes: the fixed-width view is taken
    cells = texts(rng, rng.randint(1, 300), width=4 if seed % 2 == 0 else None)
    data = "".join(f"{c}|x\n" for c in cells).encode()
    plain = arrow_csv.read_block(data, ["t", "x"], delimiter="|", plain=["t"])
    coded = arrow_csv.read_block(data, ["t", "x"], delimiter="|")
    assert plain is not None and coded is not None
    assert [n for n, _ in plain] == [n for n, _ in coded]
    for (_, p), (_, d) in zip(plain, coded, strict=True):
        a, b = p["t"], d["t"]
        assert isinstance(a, arrow_csv.Coded) and isinstance(b, arrow_csv.Coded)
        assert np.array_equal(a.codes, np.arange(len(a.codes)))
        assert a.values == by_row(a) == by_row(b)
        assert np.array_equal(a.matches(r"^\d+$"), b.matches(r"^\d+$")[b.codes])
        at = np.flatnonzero(a.matches(r"^\d{1,18}$"))
        assert np.array_equal(a.whole(at), b.whole(b.codes[at]))
        odd = np.flatnonzero(~a.matches(r"^\d+$"))
        assert a.texts(odd) == [a.text(i) for i in odd.tolist()] == [by_row(b)[i] for i in odd]
        fixed = a.fixed(4)
        if all(len(v.encode()) == 4 for v in a.values):
            assert fixed is not None
            assert np.array_equal(fixed, a.chars(np.arange(len(a.codes)), 4))
            assert [bytes(row).decode() for row in fixed] == a.values
        else:
            assert fixed is None
