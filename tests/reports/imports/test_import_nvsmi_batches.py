"""A block Arrow parses without threads (a reading process of several side by side) comes back
as one batch, not one a MiB, and reads as the threads' batches do: a log of several MiB gives
pandas' whole-file read either way."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from test_import_nvsmi_blocks import by_pandas, equal, log

from reports.imports import arrow_csv, nvsmi_fast
from reports.imports.nvsmi_fast import parse

pytestmark = pytest.mark.skipif(not arrow_csv.available(), reason="needs pyarrow")


def test_a_block_without_threads_is_one_batch() -> None:
    lines = [
        f"2026/11/29 23:59:{i % 60:02d}.000, {i % 8}, GPU-{i % 8}, {i % 101} %"
        for i in range(90_000)
    ]
    data = ("\n".join(lines) + "\n").encode()
    assert len(data) > 2 << 20
    names = ["timestamp", "index", "uuid", "utilization.gpu"]
    units = {"utilization.gpu": " %"}
    one = arrow_csv.read_block(data, names, numbers=units, threads=False)
    many = arrow_csv.read_block(data, names, numbers=units, threads=True)
    assert one is not None and many is not None
    assert len(one) == 1 and len(many) > 1
    assert one[0][0] == sum(n for n, _ in many) == len(lines)
    util = np.concatenate([c["utilization.gpu"] for _, c in many])
    assert np.array_equal(one[0][1]["utilization.gpu"], util)
    uuid = one[0][1]["uuid"]
    assert isinstance(uuid, arrow_csv.Coded)
    rows = [uuid.values[c] for c in uuid.codes.tolist()]
    assert rows == [f" GPU-{i % 8}" for i in range(len(lines))]


@pytest.mark.parametrize("threads", [True, False])
def test_a_log_of_several_mib_reads_alike_with_or_without_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: bool
) -> None:
    path = tmp_path / "gpu.csv"
    path.write_text(log(random.Random(3), units=True, gpus=4, rows=6000))
    assert path.stat().st_size > 2 << 20
    monkeypatch.setattr(nvsmi_fast, "THREADS", threads)
    got, whole = parse(path), by_pandas(path, monkeypatch)
    assert got is not None and whole is not None
    equal(got, whole)
