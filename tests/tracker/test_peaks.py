"""Peaks of the current GPUs (issue 11): the datasheet figures, dense, by NVML's names."""

from __future__ import annotations

import pytest

from tracker.peaks import DTYPES, PEAKS, peak_key, peak_tflops
from tracker.prices import MODELS, canonical_gpu


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        # Blackwell: the datasheets' sparse tensor figures halved
        ("NVIDIA B200", "bf16", 2250.0),
        ("NVIDIA B200", "fp16", 2250.0),
        ("NVIDIA B200", "fp8", 4500.0),
        ("NVIDIA B200", "tf32", 1125.0),
        ("NVIDIA B200", "fp32", 75.0),
        ("NVIDIA B300 SXM6 AC", "bf16", 2250.0),
        ("NVIDIA GB200", "bf16", 2500.0),
        ("NVIDIA GB200", "fp8", 5000.0),
        ("NVIDIA GB200", "tf32", 1250.0),
        ("NVIDIA GB200", "fp32", 80.0),
        ("NVIDIA GB300", "bf16", 2500.0),
        # Hopper
        ("NVIDIA H200", "bf16", 989.4),
        ("NVIDIA H200 NVL", "bf16", 835.5),
        ("NVIDIA GH200 480GB", "bf16", 989.4),
        ("NVIDIA H100 NVL", "bf16", 835.5),
        ("NVIDIA H100 80GB HBM2e", "bf16", 756.0),
        ("NVIDIA H800", "bf16", 989.4),
        ("NVIDIA H800", "fp8", 1978.9),
        ("NVIDIA H800 PCIe", "bf16", 756.0),
        ("NVIDIA H20", "bf16", 148.0),
        ("NVIDIA H20", "fp8", 296.0),
        ("NVIDIA H20", "tf32", 74.0),
        ("NVIDIA H20", "fp32", 44.0),
        # Ampere and Ada, datasheets with a dense column
        ("NVIDIA A800-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA A10", "bf16", 125.0),
        ("NVIDIA A10", "tf32", 62.5),
        ("NVIDIA A10", "fp32", 31.2),
        ("NVIDIA A30", "bf16", 165.0),
        ("NVIDIA A30", "tf32", 82.0),
        ("NVIDIA A40", "bf16", 149.7),
        ("NVIDIA A40", "fp32", 37.4),
        ("NVIDIA A2", "fp16", 18.0),
        ("NVIDIA L40", "bf16", 181.05),  # half the L40S's
        ("NVIDIA L40", "fp8", 362.0),
        ("NVIDIA L40S", "bf16", 362.05),
        ("NVIDIA L4", "bf16", 121.0),
    ],
)
def test_dense_peaks(name: str, dtype: str, tflops: float) -> None:
    assert peak_tflops(name, dtype, matmul_precision="highest") == tflops


def test_fp32_counts_as_tf32_unless_the_precision_is_highest() -> None:
    assert peak_tflops("NVIDIA B200", "fp32", matmul_precision="high") == 1125.0
    assert peak_tflops("NVIDIA B200", "32-true", matmul_precision="medium") == 1125.0
    assert peak_tflops("NVIDIA B200", "fp32", matmul_precision="highest") == 75.0
    assert peak_tflops("NVIDIA H20", "fp32", matmul_precision="high") == 74.0
    assert peak_tflops("Tesla V100-SXM2-16GB", "fp32", matmul_precision="high") == 15.7


@pytest.mark.parametrize(
    "name",
    [
        "AMD Instinct MI300X",
        "Intel Gaudi 3",
        "NVIDIA GeForce GTX 1080 Ti",
        "Tesla P100-PCIE-16GB",  # PCIe and SXM2 share the name pattern, not the peak
        "NVIDIA A10G",
        "NVIDIA L20",
        "NVIDIA RTX 6000 Ada Generation",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "NVIDIA RTX A1000",
    ],
)
def test_no_peak_no_mfu(name: str) -> None:
    assert peak_tflops(name, "bf16") is None
    assert peak_key(name) is None


def test_no_fp8_before_hopper_and_ada() -> None:
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp8") is None
    assert peak_tflops("NVIDIA A10", "fp8") is None
    assert peak_tflops("Tesla T4", "bf16") is None


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("H100-NVL", "H100-NVL"),
        ("H100-PCIe", "H100-PCIe"),
        ("H100", "H100"),
        ("A100-80GB", "A100-80GB"),
        ("B200", "B200"),
        ("GB200", "GB200"),
        ("L40", "L40"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("A10G", None),
        ("RTX-6000-Ada", None),
    ],
)
def test_peak_key_of_names_and_table_keys(name: str, key: str | None) -> None:
    """Right-sizing looks up the price table's keys, sessions NVML's names: the same peak."""
    assert peak_key(name) == key


def test_every_peak_is_a_known_model_with_a_source() -> None:
    keys = {m.key for m in MODELS}
    for key, peak in PEAKS.items():
        assert key == peak.model and key in keys and canonical_gpu(key) == key
        assert peak.source.startswith("NVIDIA ")
        assert "datasheet" in peak.source or "whitepaper" in peak.source
        assert set(peak.tflops) <= set(DTYPES) and peak.tflops
        # all dense, none halved twice or not at all: tf32 half the 16-bit rate, fp8 twice it
        t = peak.tflops
        if "tf32" in t:
            assert t["bf16"] == t["fp16"] == pytest.approx(2 * t["tf32"], rel=0.02)
        if "fp8" in t:
            assert t["fp8"] == pytest.approx(2 * t["fp16"], rel=0.02)


def test_a_variant_never_borrows_its_base_models_peak() -> None:
    """A variant runs lower clocks than its base (PCIe, NVL): it has a peak of its own or none."""
    for m in MODELS:
        if m.base in PEAKS:
            assert m.key in PEAKS and PEAKS[m.key].tflops != PEAKS[m.base].tflops, m.key
