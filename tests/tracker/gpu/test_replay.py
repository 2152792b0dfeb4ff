"""The replay backend plays nvidia-smi CSV logs (with and without units, [N/A] cells)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker.gpu import BackendError, open_backend
from tracker.gpu.replay import ReplayBackend

WITH_UNITS = """\
timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]
2026/11/23 10:00:00.000, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 90 %, 40960 MiB, 81559 MiB, 600.00 W
2026/11/23 10:00:00.000, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 10 %, 1024 MiB, 81559 MiB, [N/A]
2026/11/23 10:00:01.000, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 70 %, 40960 MiB, 81559 MiB, 500.00 W
2026/11/23 10:00:01.000, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 30 %, 2048 MiB, 81559 MiB, [N/A]
2026/11/23 10:00:02.000, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 50 %, 40960 MiB, 81559 MiB, 400.00 W
2026/11/23 10:00:02.000, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 50 %, 4096 MiB, 81559 MiB, [N/A]
"""

NOUNITS = """\
timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]
2026/11/23 10:00:00.000, 0, GPU-cccc, NVIDIA A100-SXM4-80GB, 20, 1024, 81920, 100.5
2026/11/23 10:00:01.000, 0, GPU-cccc, NVIDIA A100-SXM4-80GB, [N/A], 2048, 81920, 110.5
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gpu.csv"
    p.write_text(text)
    return p


def test_with_units_two_gpus(tmp_path: Path) -> None:
    b = open_backend(f"replay:{write(tmp_path, WITH_UNITS)}")
    assert isinstance(b, ReplayBackend)
    infos = b.open(500.0)
    assert [(g.index, g.uuid) for g in infos] == [(0, "GPU-aaaa"), (1, "GPU-bbbb")]
    assert infos[0].mem_total_gib == pytest.approx(81559 / 1024)
    start = b.read(500.0)
    assert [r.util_pct for r in start] == [90.0, 10.0]
    assert start[1].power_w is None  # [N/A] is missing, not zero
    later = b.read(502.0)  # rows at t=1 and t=2 fell in (0, 2]
    assert later[0].util_pct == pytest.approx(60.0)
    assert later[0].power_w == pytest.approx(450.0)
    assert later[1].util_pct == pytest.approx(40.0)
    assert later[1].mem_used_gib == pytest.approx(4.0)  # the peak of the window


def test_nounits_and_missing_utilization(tmp_path: Path) -> None:
    b = ReplayBackend(write(tmp_path, NOUNITS))
    (info,) = b.open(0.0)
    assert info.name == "NVIDIA A100-SXM4-80GB"
    (first,) = b.read(0.0)
    assert first.util_pct == 20.0
    (r,) = b.read(1.0)
    assert r.util_pct is None
    assert r.power_w == pytest.approx(110.5)
    assert r.mem_used_gib == pytest.approx(2.0)


def test_log_repeats_after_its_end(tmp_path: Path) -> None:
    b = ReplayBackend(write(tmp_path, WITH_UNITS))
    b.open(0.0)
    b.read(0.0)
    b.read(2.0)
    # period = 3 s (last row at 2 s + one 1 s step): 3.0 wraps to the first row again
    (g0, _) = b.read(3.0)
    assert g0.util_pct == pytest.approx(90.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty nvidia-smi log"),
        ("a,b,c\n1,2,3\n", ":1: not an nvidia-smi --format=csv log"),
        (
            "timestamp, index, utilization.gpu [%]\n2026/11/23 10:00:00, 0, 5 %\n"
            "2026/11/23 10:00:01, 0, lots\n",
            ":3: bad utilization.gpu value 'lots' \\(a number in %\\)",
        ),
        ("timestamp, index, utilization.gpu [%]\nyesterday, 0, 5 %\n", ":2: bad timestamp"),
        ("timestamp, index, utilization.gpu [%]\n2026/11/23 10:00:00, 0\n", ":2: expected 3 cells"),
        ("timestamp, index, utilization.gpu [%]\n", "header but no rows"),
    ],
)
def test_malformed_logs_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    b = ReplayBackend(write(tmp_path, text))
    with pytest.raises(BackendError, match=message):
        b.open(0.0)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match=r"cannot read .*nope.csv: No such file"):
        ReplayBackend(tmp_path / "nope.csv").open(0.0)
