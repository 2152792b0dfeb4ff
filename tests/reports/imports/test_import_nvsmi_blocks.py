"""The common nvidia-smi log read by Arrow a block at a time gives, GPU by GPU and reading by
reading, what pandas' whole-file read gives, with blocks of a few hundred bytes so readings
meet every block edge; what neither takes goes the exact way, wherever in the file it is; and
memory holds the readings' numbers, not the file."""

from __future__ import annotations

import dataclasses
import math
import random
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from fakes import examples, traced_peak

from reports.errors import ImportFailed
from reports.imports import arrow_csv, nvsmi_fast
from reports.imports.nvsmi import read_nvsmi
from reports.imports.nvsmi_fast import Series, parse

pytestmark = pytest.mark.skipif(not arrow_csv.available(), reason="needs pyarrow")

T0 = datetime(2026, 11, 29, 23, 59, 30)


def log(rng: random.Random, *, units: bool, gpus: int = 3, rows: int = 120) -> str:
    """A log of ``gpus`` GPUs (a few coming and going), ``[N/A]`` cells now and then, power
    a later column over power.draw (both: the later one wins, as in the exact path)."""
    cols = ["timestamp", "index", "uuid", "name", "utilization.gpu [%]", "memory.used [MiB]"]
    cols += ["memory.total [MiB]", "power.draw [W]", "clocks.sm [MHz]", "power.draw.instant [W]"]
    out = [", ".join(c if units else c.split(" [")[0] for c in cols)]
    t = T0

    def u(v: str, unit: str) -> str:
        return v if not units or v.startswith("[") else f"{v} {unit}"

    for _ in range(rows):
        t += timedelta(milliseconds=rng.choice([1000, 1000, 1500, 30_000, 400_000]))
        for g in range(gpus):
            if rng.random() < 0.1:
                continue
            na = rng.random() < 0.05
            out.append(
                f"{t:%Y/%m/%d %H:%M:%S}.{t.microsecond // 1000:03d}, {g}, GPU-{g}-x, "
                f"NVIDIA H100 80GB HBM3, {u('[N/A]' if na else str(rng.randint(0, 100)), '%')}, "
                f"{u(str(rng.randint(0, 81559)), 'MiB')}, {u('81559', 'MiB')}, "
                f"{u(f'{rng.uniform(50, 700):.2f}', 'W')}, {u(str(rng.randint(210, 1980)), 'MHz')}, "
                f"{u('[Not Supported]' if na else f'{rng.uniform(50, 700):.2f}', 'W')}"
            )
    return "\n".join(out) + "\n"


def by_pandas(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Series] | None:
    with monkeypatch.context() as m:
        m.setattr(arrow_csv, "available", lambda: False)
        return parse(path)


def equal(a: list[Series], b: list[Series]) -> None:
    assert [s.info for s in a] == [s.info for s in b]
    for x, y in zip(a, b, strict=True):
        assert x.first == y.first
        assert x.t.tolist() == y.t.tolist()  # the same floats
        assert x.lines.tolist() == y.lines.tolist()
        assert x.fields.keys() == y.fields.keys()
        for f in x.fields:
            np.testing.assert_array_equal(x.fields[f], y.fields[f])


@pytest.mark.parametrize("seed", range(examples(40)))
def test_blocks_read_what_the_whole_file_read_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "gpu.csv"
    path.write_text(log(rng, units=seed % 2 == 0))
    monkeypatch.setattr(nvsmi_fast, "BLOCK_BYTES", rng.choice([200, 333, 4096, 16 << 20]))
    got, whole = parse(path), by_pandas(path, monkeypatch)
    assert got is not None and whole is not None
    equal(got, whole)


def agree(path: Path) -> None:
    """The default read (Arrow's blocks where it takes the log) gives the exact path's runs
    and minutes, or its error."""
    try:
        exact = read_nvsmi([path], fast=False)
    except ImportFailed as e:
        with pytest.raises(ImportFailed) as got:
            read_nvsmi([path])
        assert str(got.value) == str(e)
        return
    fast = read_nvsmi([path])
    assert len(fast.records) == len(exact.records)
    for a, b in zip(fast.records, exact.records, strict=True):
        for f in dataclasses.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(x, float) and isinstance(y, float):
                assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9), f.name
            else:
                assert x == y, f.name
    key = lambda s: (s.run_id, s.gpu, s.minute)  # noqa: E731
    assert sorted(map(key, fast.samples)) == sorted(map(key, exact.samples))


ODD_LATER = {
    "crlf": lambda line: line + "\r",
    "quote": lambda line: line.replace("GPU-1-x", '"GPU-1-x"'),
    "header-again": lambda line: (
        "timestamp, index, uuid, name, utilization.gpu [%], "
        "memory.used [MiB], memory.total [MiB], power.draw [W], clocks.sm [MHz], "
        "power.draw.instant [W]\n" + line
    ),
    "long-line": lambda line: line.replace("NVIDIA H100", "N" * 70_000),
    "nan-cell": lambda line: line.replace(", 81559 MiB,", ", nan MiB,"),
    "name-missing": lambda line: line.replace("NVIDIA H100 80GB HBM3", "[N/A]"),
    "uuid-blank": lambda line: line.replace("GPU-1-x,", "GPU-1-x ,"),
    "index-float": lambda line: line.replace(", 1, GPU-1-x", ", 1.0, GPU-1-x"),
    "unit-missing": lambda line: line.replace(" %,", ","),
    "blank-line": lambda line: line + "\n",
    "bad-date": lambda line: line.replace(line[:10], "2026/02/30"),
    "no-utf8": lambda line: line.replace("NVIDIA", "NVIDI\udcff"),
}


@pytest.mark.parametrize("odd", sorted(ODD_LATER))
def test_what_a_late_block_holds_that_no_fast_read_takes_goes_the_exact_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str
) -> None:
    """One line far into the file (in the fifth block of 300 bytes) is odd: the whole file
    goes the exact way (parse says None), with the exact path's runs or its error."""
    text = log(random.Random(7), units=True, gpus=2, rows=40).split("\n")
    at = next(i for i, line in enumerate(text) if i > 12 and "GPU-1-x" in line)
    text[at] = ODD_LATER[odd](text[at])
    path = tmp_path / "gpu.csv"
    path.write_bytes("\n".join(text).encode("utf-8", "surrogateescape"))
    monkeypatch.setattr(nvsmi_fast, "BLOCK_BYTES", 300)
    taken = parse(path)
    if odd == "uuid-blank":  # the exact path strips the uuid: the same GPU, read here too
        assert taken is not None and len(taken) == 2
    else:
        assert taken is None
    agree(path)


def test_a_log_with_a_bom_and_no_last_line_break(tmp_path: Path) -> None:
    text = log(random.Random(3), units=False, gpus=2, rows=20)
    path = tmp_path / "gpu.csv"
    path.write_bytes(b"\xef\xbb\xbf" + text.rstrip("\n").encode())
    got = parse(path)
    assert got is not None and sum(len(s.t) for s in got) == text.count("\n") - 1
    agree(path)


def _parse_in_blocks(path: Path) -> int:
    """The readings of the log at ``path`` read in blocks of 256 KiB."""
    nvsmi_fast.BLOCK_BYTES = 256 << 10
    got = parse(path)
    return -1 if got is None else sum(len(s.t) for s in got)


def test_memory_holds_the_readings_numbers_not_the_log(tmp_path: Path) -> None:
    """A log of 8 GPUs × 6,000 readings (5.0 MB, 44,000 rows) read in blocks of 256 KiB: the
    read's peak (numpy's arrays counted) is each reading's numbers, a time, a GPU and 5 fields
    (52 bytes of a 114-byte row), and a block: 3.2 MB here, where the whole-file read takes
    17.5 MB (the file, blanked in place, and pandas' frame)."""
    path = tmp_path / "gpu.csv"
    path.write_text(log(random.Random(5), units=True, gpus=8, rows=6_000))
    small = tmp_path / "small.csv"
    small.write_text(log(random.Random(5), units=True, gpus=8, rows=3))
    size = path.stat().st_size
    peak, readings = traced_peak(_parse_in_blocks, path, warm=(small,))
    assert readings > 40_000
    assert peak < size * 0.8, (peak, size)


def test_the_median_step_is_statistics_median_to_the_bit() -> None:
    """The gap rule's median interval, found by a partial sort, is the float
    :func:`statistics.median` gives: the middle step, or (an even count) the two middle ones'
    sum over 2; on 2,000 random series of odd and even lengths, sub-microsecond steps among
    them."""
    import statistics
    from types import SimpleNamespace

    from reports.imports.nvsmi_minutes import median_step

    rng = random.Random(11)
    for _ in range(2_000):
        steps = [rng.choice([1.0, 0.5, 1e-7, rng.random(), rng.uniform(0, 1e6)]) for _ in range(60)]
        t = 1.764e9 + np.cumsum(steps[: rng.randint(1, 60)])
        series = SimpleNamespace(t=t)
        expected = statistics.median(np.diff(t).tolist()) if len(t) > 1 else 0.0
        assert median_step(series) == expected  # type: ignore[arg-type]


def test_the_block_read_leaves_pandas_unimported(tmp_path: Path) -> None:
    """pyarrow imports pandas (0.6 s here) for its own conversions of Python objects and to
    numpy; the read asks for none of them: a reading process does not pay for it."""
    import subprocess
    import sys

    path = tmp_path / "gpu.csv"
    path.write_text(log(random.Random(2), units=True, gpus=2, rows=5))
    code = (
        "import sys; from pathlib import Path; from reports.imports.nvsmi_fast import parse;"
        f"assert parse(Path({str(path)!r})); print('pandas' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
