"""Dense peak FLOP/s per GPU model and training dtype, and MFU.

MFU = achieved model FLOP/s ÷ (dense peak of the training dtype × GPUs). Peaks are NVIDIA's
datasheet figures without structured sparsity (the datasheets' "with sparsity" numbers halved).
A model that is not in the table gets no MFU at all rather than a wrong one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

PEAKS_VERSION = "2026-11"

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True, kw_only=True)
class Peak:
    model: str
    tflops: dict[str, float]
    """Dense peak TFLOP/s per dtype; a dtype the GPU lacks in hardware is absent."""
    ampere_or_newer: bool
    source: str


_HOPPER = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}
_A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}

PEAKS: dict[str, Peak] = {
    p.model: p
    for p in (
        Peak(model="H200", tflops=_HOPPER, ampere_or_newer=True,
             source="NVIDIA H200 Tensor Core GPU datasheet (SXM), sparse figures / 2"),
        Peak(model="H100", tflops=_HOPPER, ampere_or_newer=True,
             source="NVIDIA H100 Tensor Core GPU datasheet (SXM5), sparse figures / 2"),
        Peak(model="H100-PCIe",
             tflops={"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0},
             ampere_or_newer=True,
             source="NVIDIA H100 Tensor Core GPU datasheet (PCIe), sparse figures / 2"),
        Peak(model="H100-NVL",
             tflops={"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
             ampere_or_newer=True,
             source="NVIDIA H100 Tensor Core GPU datasheet (NVL), sparse figures / 2"),
        Peak(model="A100-80GB", tflops=_A100, ampere_or_newer=True,
             source="NVIDIA A100 Tensor Core GPU datasheet, dense"),
        Peak(model="A100-40GB", tflops=_A100, ampere_or_newer=True,
             source="NVIDIA A100 Tensor Core GPU datasheet, dense"),
        Peak(model="L40S",
             tflops={"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
             ampere_or_newer=True, source="NVIDIA L40S datasheet, sparse figures / 2"),
        Peak(model="L4",
             tflops={"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
             ampere_or_newer=True, source="NVIDIA L4 datasheet, sparse figures / 2"),
        Peak(model="T4", tflops={"fp32": 8.1, "fp16": 65.0}, ampere_or_newer=False,
             source="NVIDIA T4 datasheet"),
        Peak(model="V100", tflops={"fp32": 15.7, "fp16": 125.0}, ampere_or_newer=False,
             source="NVIDIA V100 datasheet (SXM2)"),
    )
}
# A10G (AWS) is left out on purpose: NVIDIA publishes no datasheet peak for it.


def peak_key(gpu_name: str) -> str | None:
    """The peak-table key for a GPU model name; PCIe and NVL H100s have lower peaks than SXM."""
    from tracker.prices import canonical_gpu

    key = canonical_gpu(gpu_name)
    upper = gpu_name.upper()
    if key == "H100" and "PCIE" in upper:
        return "H100-PCIe"
    if key == "H100" and "NVL" in upper:
        return "H100-NVL"
    return key if key in PEAKS else None


def normalize_dtype(dtype: str) -> str:
    """Map framework spellings to a peak-table dtype: ``bf16-mixed`` → bf16, ``16-mixed`` →
    fp16, ``32-true``/``float32`` → fp32."""
    d = dtype.strip().lower().replace("torch.", "")
    if "bf16" in d or "bfloat16" in d:
        return "bf16"
    if "fp8" in d or "float8" in d:
        return "fp8"
    if d in ("16", "16-mixed", "16-true", "fp16", "float16", "half"):
        return "fp16"
    if d in ("32", "32-true", "fp32", "float32", "float"):
        return "fp32"
    if d == "tf32":
        return "tf32"
    raise ValueError(f"unknown training dtype {dtype!r}; use one of {', '.join(DTYPES)}")


def _matmul_precision() -> str:
    """torch's float32 matmul precision, without importing torch when the user has not."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "highest"
    try:
        return str(torch.get_float32_matmul_precision())
    except Exception:  # pragma: no cover - exotic torch builds
        return "highest"


def peak_tflops(gpu_name: str, dtype: str, *, matmul_precision: str | None = None) -> float | None:
    """Dense peak TFLOP/s of one GPU for ``dtype``, or None when unknown.

    fp32 counts as tf32 on Ampere and newer unless torch's float32 matmul precision is
    ``highest`` (torch's default).
    """
    key = peak_key(gpu_name)
    if key is None:
        return None
    peak = PEAKS[key]
    d = normalize_dtype(dtype)
    precision = matmul_precision or _matmul_precision()
    if d == "fp32" and peak.ampere_or_newer and precision in ("high", "medium"):
        d = "tf32"
    return peak.tflops.get(d)
