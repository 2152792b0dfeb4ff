"""Prices, peaks and the diagnosis table: pure functions with hand-checked values."""

from __future__ import annotations

import pytest

from tracker.diagnosis import Evidence, diagnose
from tracker.peaks import normalize_dtype, peak_tflops
from tracker.prices import DEFAULT_PRICES, PriceTable, UnknownGpu, canonical_gpu
from tracker.throughput import mfu


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10G", "A10G"),
    ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-16GB", "V100"),
    ("a100 80gb", "A100-80GB"),
    ("NVIDIA L40", None),  # not L4, not L40S
    ("NVIDIA GeForce RTX 4090", None),
])
def test_canonical_gpu(name: str, key: str | None) -> None:
    assert canonical_gpu(name) == key


def test_every_default_price_has_a_source_and_date() -> None:
    assert len(DEFAULT_PRICES) == 9
    assert all(p.source and p.as_of and p.usd_per_gpu_hour > 0 for p in DEFAULT_PRICES)
    assert PriceTable().get("NVIDIA H200").usd_per_gpu_hour == 4.50


def test_overrides_and_unknown_models() -> None:
    table = PriceTable({"h100": 2.49})
    row = table.get("NVIDIA H100 80GB HBM3")
    assert (row.usd_per_gpu_hour, row.source) == (2.49, "config")
    assert table.get("T4").usd_per_gpu_hour == 0.53
    with pytest.raises(UnknownGpu, match="unknown GPU model 'RTX 4090'; known: H200, H100"):
        table.get("RTX 4090")
    with pytest.raises(ValueError, match="must be a number >= 0"):
        PriceTable({"B300": -9.0})


def test_any_model_can_carry_a_price() -> None:
    """Issue 11: models the table does not know are priced by name and matched to NVML's names
    as whole words, the longest name first."""
    table = PriceTable({"B200": 5.5, "GB200": 6.25, "MI300X": 3.2, "RTX 6000 Ada": 1.1})
    assert table.get("NVIDIA B200").usd_per_gpu_hour == 5.5
    assert table.get("NVIDIA GB200").usd_per_gpu_hour == 6.25  # not B200's: a whole word
    assert table.get("AMD Instinct MI300X").usd_per_gpu_hour == 3.2
    assert table.get("NVIDIA RTX 6000 Ada Generation").usd_per_gpu_hour == 1.1
    assert table.get("b200").source == "config" and table.get("B200").mem_gib is None
    with pytest.raises(UnknownGpu, match="'B2000'"):
        table.get("B2000")
    assert PriceTable().lookup("NVIDIA B200") is None  # not in the shipped table


def test_peaks_and_mfu() -> None:
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA A100-SXM4-40GB", "32-true", matmul_precision="highest") == 19.5
    assert peak_tflops("NVIDIA A100-SXM4-40GB", "fp32", matmul_precision="high") == 156.0
    assert peak_tflops("Tesla V100-SXM2-16GB", "fp32", matmul_precision="high") == 15.7
    assert peak_tflops("Tesla T4", "bf16") is None  # no bf16 in hardware
    assert peak_tflops("NVIDIA A10G", "bf16") is None  # no published peak: no MFU
    assert mfu(400e12, 989.4, 1) == pytest.approx(400 / 989.4)
    assert mfu(400e12, 989.4, 2) == pytest.approx(200 / 989.4)
    assert mfu(400e12, None, 1) is None
    assert normalize_dtype("torch.bfloat16") == "bf16"
    assert normalize_dtype("16-mixed") == "fp16"
    with pytest.raises(ValueError, match="unknown training dtype 'int4'"):
        normalize_dtype("int4")


HOUR = 3600.0


@pytest.mark.parametrize(("evidence", "verdict", "severity"), [
    (Evidence(util_pct=2.0, duration_s=HOUR), "idle", "critical"),
    (Evidence(util_pct=2.0, duration_s=600.0), "small-batch", "critical"),
    (Evidence(util_pct=60.0, duration_s=HOUR, data_wait_pct=12.0), "input-bound", "warning"),
    (Evidence(util_pct=60.0, duration_s=HOUR, data_wait_pct=25.0), "input-bound", "critical"),
    (Evidence(util_pct=None, duration_s=HOUR, data_wait_pct=25.0), "input-bound", "critical"),
    (Evidence(util_pct=None, duration_s=HOUR), "unknown", "unknown"),
    (Evidence(util_pct=60.0, duration_s=HOUR, gpu_count=8, rank_spread_pct=35.0,
              mem_used_pct=80.0), "communication-bound", "warning"),
    (Evidence(util_pct=35.0, duration_s=HOUR, mem_used_pct=8.0, step_time_ms=20.0),
     "small-batch", "critical"),
    (Evidence(util_pct=95.0, duration_s=HOUR, sm_active_pct=28.0), "low-efficiency", "warning"),
    (Evidence(util_pct=95.0, duration_s=HOUR, sm_active_pct=70.0, mfu=0.08),
     "low-efficiency", "warning"),
    (Evidence(util_pct=92.0, duration_s=HOUR, sm_active_pct=74.0, mfu=0.4), "healthy", "ok"),
    (Evidence(util_pct=75.0, duration_s=HOUR, mem_used_pct=80.0, step_time_ms=900.0),
     "below-target", "warning"),
])
def test_diagnosis_table(evidence: Evidence, verdict: str, severity: str) -> None:
    d = diagnose(evidence)
    assert (d.verdict, d.severity) == (verdict, severity)
    assert bool(d.advice) == (verdict != "healthy")
