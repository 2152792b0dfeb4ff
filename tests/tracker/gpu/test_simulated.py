"""The simulated backend: exact, hand-computable readings."""

from __future__ import annotations

import pytest

from tracker.gpu import BackendError, open_backend
from tracker.gpu.simulated import PROFILES, SimulatedBackend


def test_input_bound_profile_is_sixty_percent_with_bursts() -> None:
    p = PROFILES["input-bound"]
    assert p.period_s == 10.0
    assert p.mean_util_pct == 60.0
    # 25 s = two full periods (2 x 600 %.s) + the first 5 s of a busy burst (500 %.s)
    assert p.util_integral(25.0) == pytest.approx(1700.0)
    assert p.util_at(3.0) == 100.0
    assert p.util_at(7.0) == 0.0


def test_reading_is_the_mean_since_the_previous_reading() -> None:
    b = SimulatedBackend("input-bound", model="H100", count=2)
    infos = b.open(1000.0)
    assert [g.index for g in infos] == [0, 1]
    assert infos[0].uuid != infos[1].uuid and infos[0].uuid.startswith("GPU-")
    assert infos[0].name == "NVIDIA H100 80GB HBM3"
    first = b.read(1000.0)  # at start: the instantaneous value (a busy burst)
    assert first[0].util_pct == 100.0
    r = b.read(1008.0)  # (0, 8]: 6 s busy + 2 s idle
    assert r[0].util_pct == pytest.approx(75.0)
    assert r[0].power_w == pytest.approx(70 + 630 * 0.75)
    # energy counter = offset + idle 70 W x 8 s + 630 W x (600 %.s / 100)
    assert r[0].energy_j - first[0].energy_j == pytest.approx(70 * 8 + 630 * 6)
    assert r[0].sm_active_pct == pytest.approx(75.0 * 0.8)


def test_pre_hopper_models_have_no_gpm_metrics() -> None:
    b = SimulatedBackend("healthy", model="A100-80GB")
    b.open(0.0)
    (r,) = b.read(1.0)
    assert r.util_pct == 92.0
    assert r.sm_active_pct is None and r.tensor_active_pct is None
    assert r.mem_total_gib == pytest.approx(80.0)


def test_spec_parsing() -> None:
    b = open_backend("simulated:small-batch@L4:3")
    assert isinstance(b, SimulatedBackend)
    assert (b.profile.name, b.gpu.name, b.count) == ("small-batch", "NVIDIA L4", 3)
    default = open_backend("simulated:")
    assert isinstance(default, SimulatedBackend)
    assert (default.profile.name, default.gpu.name, default.count) == (
        "healthy",
        "NVIDIA H100 80GB HBM3",
        1,
    )


def test_env_var_picks_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_KPI_GPU", "simulated:idle@T4")
    b = open_backend()
    assert isinstance(b, SimulatedBackend) and b.profile.name == "idle"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("simulated:busy", "unknown simulated profile 'busy'"),
        ("simulated:healthy@B300", "unknown simulated GPU model 'B300'"),
        ("simulated:healthy@H100:x", "bad GPU count 'x'"),
        ("simulated:healthy@H100:0", "count must be >= 1"),
        ("cuda", "unknown GPU backend 'cuda'"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(BackendError, match=message):
        open_backend(spec)


def test_the_throttled_profile_counts_its_ten_seconds_a_minute_and_drops_the_clock() -> None:
    b = SimulatedBackend("throttled", model="H100", count=1)
    b.open(1000.0)
    first = b.read(1000.0)[0]
    assert first.sm_clock_mhz == pytest.approx(1980 * 0.7)  # held down from 0 to 10 s
    later = b.read(1000.0 + 150.0)[0]  # 2.5 minutes: 10 + 10 + 10 s held
    assert later.throttle_ns is not None and first.throttle_ns is not None
    assert (later.throttle_ns - first.throttle_ns) / 1e9 == pytest.approx(30.0)
    assert later.sm_clock_mhz == 1980.0  # 30 s into its minute: at its clocks


def test_the_gpu_lost_profile_leaves_its_last_gpu_out_after_two_minutes() -> None:
    b = SimulatedBackend("gpu-lost", model="H100", count=2)
    infos = b.open(0.0)
    assert len(b.read(119.0)) == 2
    assert [r.uuid for r in b.read(120.0)] == [infos[0].uuid]
