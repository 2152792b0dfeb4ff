"""sacct's parsable output read a block at a time by Arrow's C reader gives what the line-by-line
reader gives, row for row, on random outputs that hold everything the line reader is hardened
against: names with the delimiter, line breaks, ``\\r`` and NUL in them, blank and short lines,
lines over the limit, bad times and counts, steps, pending arrays, ``-p``, other delimiters,
epoch times, text that is no UTF-8; with blocks of a few hundred bytes, so rows meet every block
edge."""

from __future__ import annotations

import io
import random
from datetime import UTC, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from fakes import examples, traced_peak

from reports.imports import arrow_csv, slurm
from reports.imports.slurm import SacctRead, read_sacct, read_sacct_stream

pytestmark = pytest.mark.skipif(not arrow_csv.available(), reason="needs pyarrow")

FIELDS = ["Cluster", "JobID", "JobIDRaw", "User", "Account", "Partition", "State"]
TIMES = ["Start", "End"]
TAIL = ["ElapsedRaw", "AllocTRES", "NodeList"]


def header(rng: random.Random) -> list[str]:
    """A --format: this import's (JobName last), sacct-X.txt's (JobName amid the fields, and
    fields it does not read), none, with Submit or AllocGRES."""
    names = [*FIELDS, *TIMES, *TAIL]
    if rng.random() < 0.3:
        names.insert(8, "Submit")
    if rng.random() < 0.2:
        names[names.index("AllocTRES")] = "AllocGRES"
    shape = rng.random()
    if shape < 0.5:
        names.append("JobName")
    elif shape < 0.8:
        names.insert(3, "JobName")
        names.append("ExitCode")
    if rng.random() < 0.2:
        names.remove("Cluster")
    return names


def cell(rng: random.Random, name: str, d: str, job: int) -> str:
    """A cell as sacct writes it, or (now and then) one that is not."""
    r = rng.random()
    if name == "JobID":
        return rng.choice(
            [str(job)] * 6
            + [f"{job}_{rng.randrange(9)}", f"{job}_[1-3]", f"{job}+0", f"{job}.batch"]
            + [f"{job}.0", f" {job} ", "", f"{job}_x", "١٢", f"{job}.extern"]
        )
    if name == "JobIDRaw":
        return rng.choice([str(job), str(job), "", f" {job}", f"{job}.batch"])
    if name in ("Start", "End", "Submit"):
        return rng.choice(
            ["2026-12-02T10:34:28", "2026-12-02T11:00:00", "2026-12-02T10:34:28"] * 3
            + ["1764671668", "1764675268", "Unknown", "None", "", "N/A", "yesterday"]
            + ["2026-02-30T00:00:00", "2026-12-02T10:34:28+02:00", "99999999999999"]
            + ["0000-01-01T00:00:00", " 2026-12-02T10:34:28", "2026-12-02T24:00:00"]
        )
    if name == "ElapsedRaw":
        if r < 0.01:  # a running job's start + this is no time: both readers name the row
            return "99999999999999999"
        return rng.choice(["20", "3600", "0", "", " 7", "x", "1800"])
    if name in ("AllocTRES", "AllocGRES"):
        if name == "AllocGRES":
            return rng.choice(["gpu:2", "gpu:tesla:4", "", "gpu:x", "gpu:a100:1(IDX:0)"])
        return rng.choice(
            ["billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,mem=500M,node=1"] * 3
            + ["cpu=4,mem=8G", "", " ", "gres/gpu=one", "gres/gpu= 2", "gres/gpu:a100=4"]
        )
    if name == "NodeList":
        return rng.choice(["gpu01", "gpu[01-02]", "None assigned", "", "(null)", "vm"])
    if name == "State":
        return rng.choice(["COMPLETED", "CANCELLED by 0", "RUNNING", "PENDING", "FAILED"])
    if name == "JobName":
        if r < 0.6:
            return f"train-{job % 7}"
        odd = [f"a{d}b", "a\nb", f"x{d}\n{d}y\n\nz", "a\rb", "nul\x00x", "é🚀", "a\r\nb", " "]
        return rng.choice([*odd, f"a{d}b\n", "\n", f"{d}{d}", "\ufffd", "long" * 40, f"{d}x"])
    return rng.choice(["nlp", "vision", "gpu", "ann", " bob ", "", "c1"])


def output(rng: random.Random, d: str) -> tuple[str, str | None]:
    """sacct's output (and the delimiter to give, or None: found in the header)."""
    names = header(rng)
    trailing = d if rng.random() < 0.15 else ""
    lines = [d.join(names) + trailing]
    for job in range(1000, 1000 + rng.randint(0, 60)):
        r = rng.random()
        if r < 0.04:
            lines.append(rng.choice(["", " ", "\t", "x", d * 3, "\r"]))
            continue
        cells = [cell(rng, n, d, job) for n in names]
        if r < 0.07:
            cells = cells[: rng.randrange(len(cells))]  # too few fields
        elif r < 0.09:
            cells.append("extra")
        line = d.join(cells) + trailing
        if rng.random() < 0.03:
            line += "x" * 400  # over the limit the test sets
        lines.append(line + ("\r" if rng.random() < 0.05 else ""))
    text = "\n".join(lines) + rng.choice(["\n", "", "\n\n"])
    if rng.random() < 0.1:
        text = rng.choice(["\ufeff", "\n\n", " \n"]) + text
    return text, rng.choice([d, None]) if d.startswith("|") and len(d) > 2 else None


def same(fast: SacctRead, slow: SacctRead, where: str) -> None:
    assert fast == slow, where
    # the same objects too, to the time zone of each time (== on datetimes is an instant's)
    assert repr(fast.jobs) == repr(slow.jobs), where
    assert repr(fast.latest) == repr(slow.latest), where


def both(monkeypatch: pytest.MonkeyPatch, read: object) -> tuple[object, object]:
    """``read()`` with Arrow's blocks, then a line at a time; an error is the result."""

    def run() -> object:
        try:
            return read()  # type: ignore[operator]
        except Exception as e:
            return (type(e), str(e))

    fast = run()
    with monkeypatch.context() as m:
        m.setattr(arrow_csv, "available", lambda: False)
        slow = run()
    return fast, slow


@pytest.mark.parametrize("seed", range(examples(300)))
def test_blocks_read_what_lines_read(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(slurm, "MAX_LINE_BYTES", 400)
    monkeypatch.setattr(slurm, "BLOCK_BYTES", rng.choice([64, 200, 333, 1024, 1 << 18]))
    d = rng.choice(["|"] * 4 + ["|#", ";", "::", "|5f3a9c0d2e4b6a18|", "¦", "\t"])
    text, given = output(rng, d)
    tz = rng.choice([UTC, ZoneInfo("Europe/Berlin"), timezone(timedelta(hours=-5))])
    fast, slow = both(monkeypatch, lambda: read_sacct(text, tz=tz, delimiter=given))
    if isinstance(slow, SacctRead):
        assert isinstance(fast, SacctRead), fast
        same(fast, slow, f"seed {seed}")
    else:
        assert fast == slow
    data = text.encode()
    if rng.random() < 0.3:  # bytes that are no UTF-8: replaced, as the line reader does
        at = rng.randrange(len(data) + 1)
        data = data[:at] + rng.choice([b"\xff", b"\xc3", b"\xe2\x82"]) + data[at:]
    fast, slow = both(monkeypatch, lambda: read_sacct_stream(io.BytesIO(data), tz=tz))
    if isinstance(slow, SacctRead):
        assert isinstance(fast, SacctRead), fast
        same(fast, slow, f"seed {seed} (stream)")
    else:
        assert fast == slow


@pytest.mark.parametrize("seed", range(examples(200)))
def test_blocks_of_plain_rows_read_whole_read_what_lines_read(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Outputs whose blocks are mostly all plain rows (each then given to Arrow whole, its
    lines not looked at first): a blank line (Arrow's row of blank fields), a row of another
    number of fields, a name going on past a line break or a ``\\r`` now and then, anywhere
    in a block, are read as the line reader reads them."""
    rng = random.Random(seed)
    monkeypatch.setattr(slurm, "MAX_LINE_BYTES", 400)
    monkeypatch.setattr(slurm, "BLOCK_BYTES", rng.choice([64, 200, 333, 1024, 1 << 18]))
    monkeypatch.setattr(slurm, "_WINDOW", rng.choice([16, 64, 1 << 18]))
    d = rng.choice(["|", "|", "|#", "|5f3a9c0d2e4b6a18|"])
    names = slurm.FORMAT.split(",")
    lines = [d.join(names)]
    for job in range(1000, 1000 + rng.randrange(1, 60)):
        cells = [cell(rng, name, d, job) if rng.random() < 0.1 else "" for name in names]
        cells = [
            c or plain
            for c, plain in zip(
                cells,
                [
                    "gpukpi",
                    str(job),
                    str(job),
                    "ann",
                    "nlp",
                    "gpu",
                    "COMPLETED",
                    "2026-12-02T10:00:00",
                    "2026-12-02T11:00:00",
                    "3600",
                    "cpu=1,gres/gpu=2",
                    "gpu01",
                    f"train-{job}",
                ],
                strict=True,
            )
        ]
        r = rng.random()
        if r < 0.04:
            lines.append("")
        elif r < 0.06:
            cells.append("extra")
        elif r < 0.08:
            cells[-1] += "\nrest"
        elif r < 0.09:
            cells[-1] += "\r"
        lines.append(d.join(cells))
    text = "\n".join(lines) + rng.choice(["\n", "", "\n\n"])
    tz = rng.choice([UTC, ZoneInfo("Europe/Berlin")])
    fast, slow = both(monkeypatch, lambda: read_sacct(text, tz=tz))
    assert isinstance(slow, SacctRead) and isinstance(fast, SacctRead), (fast, slow)
    same(fast, slow, f"seed {seed}")
    fast, slow = both(monkeypatch, lambda: read_sacct_stream(io.BytesIO(text.encode()), tz=tz))
    assert isinstance(slow, SacctRead) and isinstance(fast, SacctRead), (fast, slow)
    same(fast, slow, f"seed {seed} (stream)")


def test_a_name_that_goes_on_past_a_block_edge_is_one_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """JobName last: the row's line ends a block, the rest of its name starts the next; the
    name is whole (``a`` + line break + ``b``) and the next job is read as its own."""
    text = (
        "JobID|Start|End|AllocTRES|NodeList|JobName\n"
        "1|2026-12-02T10:00:00|2026-12-02T11:00:00|gres/gpu=2|n1|a\n"
        "b\n"
        "2|2026-12-02T10:00:00|2026-12-02T10:30:00|gres/gpu=1|n2|c\n"
    )
    first = len(text.split("\n", 2)[1]) + 1  # the block ends with job 1's line
    monkeypatch.setattr(slurm, "BLOCK_BYTES", first)
    got = read_sacct(text, tz=UTC)
    assert [(j.job_id, j.name, j.gpus) for j in got.jobs] == [("1", "a\nb", 2), ("2", "c", 1)]
    assert got.unreadable == []


def test_a_lone_surrogate_in_a_name_comes_back_as_it_was() -> None:
    """A str may hold what no UTF-8 does: its line goes the line reader's way, the name kept."""
    text = (
        "JobID|Start|End|AllocTRES|NodeList|JobName\n"
        "1|2026-12-02T10:00:00|2026-12-02T11:00:00|gres/gpu=2|n1|bad\udcff\n"
        "2|2026-12-02T10:00:00|2026-12-02T10:30:00|gres/gpu=1|n2|good\n"
    )
    got = read_sacct(text, tz=UTC)
    assert [j.name for j in got.jobs] == ["bad\udcff", "good"]


def _steps_output(steps: int) -> bytes:
    """sacct's output of one job among ``steps`` steps."""
    t0, t1 = "2026-12-02T10:00:00", "2026-12-02T11:00:00"
    lines = ["JobID|JobIDRaw|JobName|Start|End|AllocTRES|NodeList"]
    lines += [f"7|7|x|{t0}|{t1}|gres/gpu=2|n"]
    lines += [f"7.{s}|7.{s}|py|{t0}|{t1}|cpu=1|n" for s in range(steps)]
    return ("\n".join(lines) + "\n").encode()


def _read_steps(data: bytes) -> tuple[int, int]:
    slurm.BLOCK_BYTES = 256 << 10  # (in a process of its own) a fifth of the larger output
    got = read_sacct_stream(io.BytesIO(data), tz=UTC)
    return len(got.jobs), got.steps


def test_memory_holds_the_jobs_not_the_output() -> None:
    """Steps around one job, 20,000 then 80,000 of them (1.3 and 5.3 MB), read in blocks of
    256 KiB: the read's peak is the blocks' (a few :data:`reports.imports.slurm.BLOCK_BYTES`),
    the same for four times the output (see also test_slurm_sacct's
    test_saved_output_is_read_a_line_at_a_time)."""
    warm = (_steps_output(3),)  # imports done before measuring
    small, got = traced_peak(_read_steps, _steps_output(20_000), warm=warm)
    assert got == (1, 20_000)
    data = _steps_output(80_000)
    large, got = traced_peak(_read_steps, data, warm=warm)
    assert got == (1, 80_000)
    assert large < small * 1.25 and large < len(data) / 2, (small, large, len(data))


def test_a_block_holding_every_stand_in_byte_is_read_a_line_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delimiter of two characters is read by Arrow as one byte the block does not hold; a
    name holding each such byte leaves none, and its block is read line by line, the same."""
    odd = slurm._STAND_INS.decode("ascii")
    text = (
        "JobID|#Start|#End|#AllocTRES|#NodeList|#JobName\n"
        f"1|#2026-12-02T10:00:00|#2026-12-02T11:00:00|#gres/gpu=2|#n1|#a{odd}b\n"
        "2|#2026-12-02T10:00:00|#2026-12-02T10:30:00|#gres/gpu=1|#n2|#c\n"
    )
    fast, slow = both(monkeypatch, lambda: read_sacct(text, tz=UTC))
    assert isinstance(fast, SacctRead) and isinstance(slow, SacctRead)
    same(fast, slow, "stand-ins")
    assert [(j.job_id, j.name) for j in fast.jobs] == [("1", f"a{odd}b"), ("2", "c")]


def test_the_block_read_leaves_pandas_unimported() -> None:
    """pyarrow imports pandas (0.6 s here) for its own conversions of Python objects and to
    numpy; the read asks for none of them, so `gpu-kpi import slurm` does not pay for it."""
    import subprocess
    import sys

    code = (
        "import sys; from datetime import UTC; from reports.imports.slurm import read_sacct;"
        "t = 'JobID|Start|End|ElapsedRaw|AllocTRES|NodeList\\n"
        "1|1764671668|2026-12-02T10:34:48|20|gres/gpu=2|n1\\n';"
        "assert len(read_sacct(t, tz=UTC).jobs) == 1; print('pandas' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
