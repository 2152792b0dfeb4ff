"""A MIG instance counted and priced as its share of the physical GPU: the profiles' maths by
hand, and a run tracked on a simulated slice, its minutes and its record."""

from __future__ import annotations

import pytest
from fakes import Clock

from tracker import track
from tracker.gpu import BackendError
from tracker.gpu.simulated import SimulatedBackend
from tracker.record import MinuteSample, RunRecord
from tracker.shares import has_mig, mig_slice, model_of_mig, profiles
from tracker.store import RunStore


@pytest.mark.parametrize(
    ("profile", "model", "compute", "memory"),
    [
        ("1g.10gb", "NVIDIA A100-SXM4-80GB", 1 / 7, 1 / 8),
        ("2g.20gb", "A100-80GB", 2 / 7, 2 / 8),
        ("3g.40gb", "NVIDIA H100 80GB HBM3", 3 / 7, 4 / 8),
        ("4g.40gb", "NVIDIA H100 80GB HBM3", 4 / 7, 4 / 8),
        ("7g.80gb", "NVIDIA H100 80GB HBM3", 1.0, 1.0),
        ("1g.20gb", "NVIDIA H100 80GB HBM3", 1 / 7, 2 / 8),
        ("1g.10gb+me", "NVIDIA H100 80GB HBM3", 1 / 7, 1 / 8),
        ("3g.20gb", "NVIDIA A100-SXM4-40GB", 3 / 7, 4 / 8),
        ("1g.18gb", "NVIDIA H200", 1 / 7, None),  # the name says no memory: compute
        ("1g.6gb", "NVIDIA A30", 1 / 4, 1 / 4),  # A30: 4 compute slices, 24 GB
        ("NVIDIA A100-SXM4-80GB MIG 2g.20gb", "NVIDIA A100-SXM4-80GB", 2 / 7, 2 / 8),
    ],
)
def test_a_profiles_share_of_its_gpu_by_hand(
    profile: str, model: str, compute: float, memory: float | None
) -> None:
    found = mig_slice(profile, model)
    assert found is not None
    assert found.share() == pytest.approx(compute)
    assert found.share("memory") == pytest.approx(compute if memory is None else memory)


def test_the_memory_share_counts_slices_not_nvml_s_rounded_sizes() -> None:
    """NVML's sizes are not the profile's: an H200's 1g.18gb of 141 GB is 1.02 of 8 slices."""
    found = mig_slice("1g.18gb", "NVIDIA H200", 139.8)
    assert found is not None and found.share("memory") == 1 / 8


def test_what_is_no_mig_instance() -> None:
    assert mig_slice("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3") is None
    assert mig_slice("", "H100") is None
    assert has_mig("NVIDIA A100-SXM4-40GB") and has_mig("H200") and not has_mig("NVIDIA L4")
    assert model_of_mig("NVIDIA A100-SXM4-80GB MIG 1g.10gb") == "NVIDIA A100-SXM4-80GB"
    assert profiles([None, mig_slice("3g.40gb", "H100"), mig_slice("1g.10gb", "H100")]) == (
        "1g.10gb,3g.40gb"
    )
    assert profiles([None]) is None


def test_a_simulated_mig_instance_is_its_slice_of_the_gpu() -> None:
    backend = SimulatedBackend.from_spec("healthy@A100-80GB/3g.40gb")
    (info,) = backend.open(0.0)
    assert info.name == "NVIDIA A100-SXM4-80GB MIG 3g.40gb" and info.uuid.startswith("MIG-")
    assert info.mem_total_gib == pytest.approx(40.0)  # 4 of the 80 GiB's 8 memory slices
    (reading,) = backend.read(10.0)
    assert reading.power_w is None and reading.energy_j is None  # none of its own
    with pytest.raises(BackendError, match="no MIG instance 'big' on a simulated A100-80GB"):
        SimulatedBackend.from_spec("healthy@A100-80GB/big")
    with pytest.raises(BackendError, match="on a GPU with MIG"):
        SimulatedBackend.from_spec("healthy@L4/1g.10gb")


def test_a_notebook_on_a_1g_slice_is_billed_a_seventh_of_the_gpu(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two hours on a 1g.10gb of an A100 80GB ($2.00 per GPU-hour): 2 h × 1/7 = 0.2857
    GPU-hours, $0.5714; input-bound at 60% (target 85%): waste $0.5714 × (1 − 60/85) =
    $0.1681. Each full minute row covers 60/7 = 8.571 s of the GPU's time."""
    clock = Clock()
    with track(
        name="notebook",
        backend="simulated:input-bound@A100-80GB/1g.10gb",
        store=store_url,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        log_to_python=False,
    ) as run:
        for _ in range(7200):
            clock.t += 1.0
            run.step(samples=8)
            run.sampler.sample()  # type: ignore[union-attr]
    r = run.record
    assert r is not None
    assert (r.gpu_model, r.gpu_count, r.mig_profile) == ("A100-80GB", 1, "1g.10gb")
    assert r.gpu_hours == pytest.approx(2 / 7)
    assert r.cost_usd == pytest.approx(2 * 2.00 / 7)
    assert r.waste_usd == pytest.approx(2 * 2.00 / 7 * (1 - 60 / 85))
    assert r.util_pct == pytest.approx(60.0)
    assert r.mem_total_gib == pytest.approx(10.0)
    with RunStore(store_url) as store:
        assert store.get_run(r.id) == r
        rows = store.samples(run_ids=[r.id])
    assert len(rows) == 120
    assert all(row.covered_s == pytest.approx(60 / 7) for row in rows)
    assert sum(row.covered_s for row in rows) / 3600 == pytest.approx(2 / 7, rel=1e-4)
    out = capsys.readouterr().out
    assert "1x A100-80GB MIG 1g.10gb (1/7 of a GPU), 0.29 GPU-h (120 min)" in out
    assert "cost $0.57" in out


def an_hour(backend: str, minutes: list[MinuteSample] | None = None) -> RunRecord:
    """An hour of readings a second on ``backend``, stored nowhere: its record (its minute
    rows into ``minutes``)."""
    clock = Clock()
    with track(
        name="hour",
        backend=backend,
        store=False,
        clock=clock,
        threaded=False,
        log_to_python=False,
    ) as run:
        if minutes is not None:
            run.sampler.on_minute = minutes.extend  # type: ignore[union-attr]
        for _ in range(3600):
            clock.t += 1.0
            run.sampler.sample()  # type: ignore[union-attr]
    assert run.record is not None
    return run.record


def test_a_site_that_charges_by_memory_bills_a_1g_20gb_two_eighths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``[gpus] mig_share = "memory"`` (here its variable): an hour on an H100's 1g.20gb is
    2 of 8 memory slices, 0.25 GPU-hours, $0.9625 at $3.85."""
    monkeypatch.setenv("GPU_KPI_MIG_SHARE", "memory")
    r = an_hour("simulated:healthy@H100/1g.20gb")
    assert r.mig_profile == "1g.20gb"
    assert r.gpu_hours == pytest.approx(0.25)
    assert r.cost_usd == pytest.approx(0.25 * 3.85)


def test_a_time_sliced_gpu_is_held_by_this_process_s_measured_share(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An hour on an H100 shared with one other process, busy 60%, 70% of the work this
    one's: it holds 0.6 × 0.7 of the busy time and half the idle time, 0.42 + 0.2 = 0.62 of the
    GPU (0.62 GPU-h, $2.387 at $3.85), busy 0.42 ÷ 0.62 = 67.7% of its share; split measured.
    Each full minute row covers 60 × 0.62 = 37.2 s."""
    minutes: list[MinuteSample] = []
    r = an_hour("simulated:time-sliced@H100", minutes)
    assert r.gpu_split == "measured" and r.mig_profile is None
    assert r.gpu_hours == pytest.approx(0.62)
    assert r.cost_usd == pytest.approx(0.62 * 3.85)
    assert r.util_pct == pytest.approx(100 * 0.42 / 0.62)
    assert len(minutes) == 60 and all(m.covered_s == pytest.approx(37.2) for m in minutes)
    assert all(m.util_pct == pytest.approx(100 * 0.42 / 0.62) for m in minutes)
    out = capsys.readouterr().out
    assert "1x H100 time-sliced (62% of it, measured), 0.62 GPU-h (60 min)" in out
    assert "utilization 68% · cost $2.39" in out


def test_idle_split_by_work_bills_the_measured_share_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[gpus] idle_split = "work"``: the same hour split 70/30 whatever the idle time, at
    the GPU's 60%: 0.7 GPU-h, $2.695."""
    monkeypatch.setenv("GPU_KPI_IDLE_SPLIT", "work")
    r = an_hour("simulated:time-sliced@H100")
    assert r.gpu_hours == pytest.approx(0.7)
    assert r.cost_usd == pytest.approx(0.7 * 3.85)
    assert r.util_pct == pytest.approx(60.0)


def test_a_hostile_profile_label_keeps_only_the_profile() -> None:
    """A label is anyone's text: only the profile that matched is kept."""
    found = mig_slice("1g.10gb</td><script>alert(1)</script>\n", "NVIDIA H100 80GB HBM3")
    assert found is not None and found.profile == "1g.10gb"
    assert mig_slice("99999g.1gb", "H100") is None
    plus = mig_slice("1g.10gb+me", "H100")
    assert plus is not None and plus.profile == "1g.10gb+me"
