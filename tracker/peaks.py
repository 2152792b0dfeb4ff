"""Dense peak FLOP/s per GPU model and training dtype, and MFU.

MFU = achieved model FLOP/s ÷ (dense peak of the training dtype × GPUs). Peaks are NVIDIA's
datasheet figures without structured sparsity (the datasheets' "with sparsity" numbers halved).
A model that is not in the table gets no MFU at all rather than a wrong one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from tracker.prices import canonical_gpu

PEAKS_VERSION = "2026-12"

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True, kw_only=True)
class Peak:
    model: str
    tflops: dict[str, float]
    """Dense peak TFLOP/s per dtype; a dtype the GPU lacks in hardware is absent."""
    ampere_or_newer: bool
    source: str


_HOPPER = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}
_HOPPER_PCIE = {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}
_HOPPER_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}
_A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
# Per GPU. The Blackwell datasheets quote tensor figures with sparsity only. TF32 on HGX is
# the 8-GPU total halved (18 PFLOPS / 8 / 2 = 1,125, half the 16-bit rate as on every tensor
# core since Ampere); the per-GPU column rounds the same figure to "2.2 PFLOPS" sparse.
_HGX_BLACKWELL = {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0}
_GRACE_BLACKWELL = {"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0}

PEAKS: dict[str, Peak] = {
    p.model: p
    for p in (
        Peak(
            model="B200",
            tflops=_HGX_BLACKWELL,
            ampere_or_newer=True,
            source="NVIDIA HGX B200 datasheet, per GPU (1,000 W): sparse tensor figures / 2 "
            "(TF32 from the 8-GPU total), FP32 as quoted",
        ),
        Peak(
            model="B300",
            tflops=_HGX_BLACKWELL,
            ampere_or_newer=True,
            source="NVIDIA HGX B300 datasheet, 8-GPU totals / 8: sparse tensor figures / 2, "
            "FP32 as quoted (the B200's figures but for FP4, INT8 and FP64)",
        ),
        Peak(
            model="GB200",
            tflops=_GRACE_BLACKWELL,
            ampere_or_newer=True,
            source="NVIDIA GB200 NVL72 datasheet, per-GPU column (up to 1,200 W): sparse "
            "tensor figures / 2, FP32 as quoted (rack: 5,760 TFLOPS / 72)",
        ),
        Peak(
            model="GB300",
            tflops=_GRACE_BLACKWELL,
            ampere_or_newer=True,
            source="NVIDIA GB300 NVL72 datasheet, per GPU (rack figures / 72): sparse "
            "tensor figures / 2, FP32 as quoted (GB200's figures but for FP4, INT8, FP64)",
        ),
        Peak(
            model="H200",
            tflops=_HOPPER,
            ampere_or_newer=True,
            source="NVIDIA H200 Tensor Core GPU datasheet (SXM), sparse figures / 2",
        ),
        Peak(
            model="H200-NVL",
            tflops=_HOPPER_NVL,
            ampere_or_newer=True,
            source="NVIDIA H200 Tensor Core GPU datasheet (NVL), sparse figures / 2",
        ),
        Peak(
            model="GH200",
            tflops=_HOPPER,
            ampere_or_newer=True,
            source="NVIDIA GH200 Grace Hopper Superchip datasheet (its H100 GPU), sparse "
            "figures / 2",
        ),
        Peak(
            model="H100",
            tflops=_HOPPER,
            ampere_or_newer=True,
            source="NVIDIA H100 Tensor Core GPU datasheet (SXM5), sparse figures / 2",
        ),
        Peak(
            model="H100-PCIe",
            tflops=_HOPPER_PCIE,
            ampere_or_newer=True,
            source="NVIDIA H100 Tensor Core GPU datasheet (PCIe), sparse figures / 2",
        ),
        Peak(
            model="H100-NVL",
            tflops=_HOPPER_NVL,
            ampere_or_newer=True,
            source="NVIDIA H100 Tensor Core GPU datasheet (NVL), sparse figures / 2",
        ),
        # the export parts cut NVLink and FP64, not the tensor or FP32 rates
        Peak(
            model="H800",
            tflops=_HOPPER,
            ampere_or_newer=True,
            source="NVIDIA H800 datasheet (SXM5): the H100 SXM5 figures, sparse / 2",
        ),
        Peak(
            model="H800-PCIe",
            tflops=_HOPPER_PCIE,
            ampere_or_newer=True,
            source="NVIDIA H800 PCIe datasheet: the H100 PCIe figures, sparse / 2",
        ),
        Peak(
            model="H20",
            tflops={"fp32": 44.0, "tf32": 74.0, "bf16": 148.0, "fp16": 148.0, "fp8": 296.0},
            ampere_or_newer=True,
            source="NVIDIA H20 datasheet, dense as quoted (no sparse figures halved)",
        ),
        Peak(
            model="A100-80GB",
            tflops=_A100,
            ampere_or_newer=True,
            source="NVIDIA A100 Tensor Core GPU datasheet, dense",
        ),
        Peak(
            model="A100-40GB",
            tflops=_A100,
            ampere_or_newer=True,
            source="NVIDIA A100 Tensor Core GPU datasheet, dense",
        ),
        Peak(
            model="A800",
            tflops=_A100,
            ampere_or_newer=True,
            source="NVIDIA A800 datasheet: the A100 figures, dense",
        ),
        Peak(
            model="A10",
            tflops={"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
            ampere_or_newer=True,
            source="NVIDIA A10 datasheet, dense column",
        ),
        Peak(
            model="A30",
            tflops={"fp32": 10.3, "tf32": 82.0, "bf16": 165.0, "fp16": 165.0},
            ampere_or_newer=True,
            source="NVIDIA A30 datasheet, dense column",
        ),
        Peak(
            model="A40",
            tflops={"fp32": 37.4, "tf32": 74.8, "bf16": 149.7, "fp16": 149.7},
            ampere_or_newer=True,
            source="NVIDIA A40 datasheet, dense column",
        ),
        Peak(
            model="A2",
            tflops={"fp32": 4.5, "tf32": 9.0, "bf16": 18.0, "fp16": 18.0},
            ampere_or_newer=True,
            source="NVIDIA A2 datasheet, dense column",
        ),
        Peak(
            model="L40S",
            tflops={"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
            ampere_or_newer=True,
            source="NVIDIA L40S datasheet, sparse figures / 2",
        ),
        # half the L40S's tensor rates on the same AD102: the L40 datasheet says so
        Peak(
            model="L40",
            tflops={"fp32": 90.5, "tf32": 90.5, "bf16": 181.05, "fp16": 181.05, "fp8": 362.0},
            ampere_or_newer=True,
            source="NVIDIA L40 datasheet, dense column",
        ),
        Peak(
            model="L4",
            tflops={"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
            ampere_or_newer=True,
            source="NVIDIA L4 datasheet, sparse figures / 2",
        ),
        Peak(
            model="T4",
            tflops={"fp32": 8.1, "fp16": 65.0},
            ampere_or_newer=False,
            source="NVIDIA T4 datasheet",
        ),
        Peak(
            model="V100",
            tflops={"fp32": 15.7, "fp16": 125.0},
            ampere_or_newer=False,
            source="NVIDIA V100 datasheet (SXM2)",
        ),
        Peak(
            model="V100S",
            tflops={"fp32": 16.4, "fp16": 130.0},
            ampere_or_newer=False,
            source="NVIDIA V100S datasheet (PCIe)",
        ),
        Peak(
            model="RTX-A6000",
            tflops={"fp32": 38.7, "bf16": 154.8, "fp16": 154.8},
            ampere_or_newer=True,
            source="NVIDIA RTX A6000 datasheet: tensor 309.7 TFLOPS with sparsity / 2",
        ),
        Peak(
            model="RTX-A5000",
            tflops={"fp32": 27.8, "bf16": 111.1, "fp16": 111.1},
            ampere_or_newer=True,
            source="NVIDIA RTX A5000 datasheet: tensor 222.2 TFLOPS with sparsity / 2",
        ),
        Peak(
            model="RTX-A4000",
            tflops={"fp32": 19.2, "bf16": 76.7, "fp16": 76.7},
            ampere_or_newer=True,
            source="NVIDIA RTX A4000 datasheet: tensor 153.4 TFLOPS with sparsity / 2",
        ),
        # GeForce: the 16-bit tensor rate with FP32 accumulate (what mixed precision uses), half
        # the FP16-accumulate figure the marketing quotes
        Peak(
            model="RTX-4090",
            tflops={"fp32": 82.6, "bf16": 165.2, "fp16": 165.2},
            ampere_or_newer=True,
            source="NVIDIA Ada Lovelace architecture whitepaper, RTX 4090: FP16/BF16 tensor "
            "with FP32 accumulate, dense",
        ),
        Peak(
            model="RTX-4080",
            tflops={"fp32": 48.7, "bf16": 97.5, "fp16": 97.5},
            ampere_or_newer=True,
            source="NVIDIA Ada Lovelace architecture whitepaper, RTX 4080: FP16/BF16 tensor "
            "with FP32 accumulate, dense",
        ),
        Peak(
            model="RTX-3090",
            tflops={"fp32": 35.6, "bf16": 71.0, "fp16": 71.0},
            ampere_or_newer=True,
            source="NVIDIA Ampere GA102 whitepaper, RTX 3090: FP16/BF16 tensor with FP32 "
            "accumulate, dense",
        ),
        Peak(
            model="RTX-3080",
            tflops={"fp32": 29.8, "bf16": 59.5, "fp16": 59.5},
            ampere_or_newer=True,
            source="NVIDIA Ampere GA102 whitepaper, RTX 3080: FP16/BF16 tensor with FP32 "
            "accumulate, dense",
        ),
        Peak(
            model="TITAN-RTX",
            tflops={"fp32": 16.3, "fp16": 130.5},
            ampere_or_newer=False,
            source="NVIDIA Turing TU102 whitepaper, TITAN RTX: FP16 tensor with FP32 accumulate",
        ),
        Peak(
            model="P40",
            tflops={"fp32": 11.8},
            ampere_or_newer=False,
            source="NVIDIA Tesla P40 datasheet (no fast FP16)",
        ),
        Peak(
            model="K80",
            tflops={"fp32": 4.37},
            ampere_or_newer=False,
            source="NVIDIA Tesla K80 datasheet: 8.73 TFLOPS FP32 at boost per board of two GPUs",
        ),
    )
}
# Left out on purpose, so that they get no MFU rather than a wrong one (their names are still
# recognised and can be priced):
# - A10G (AWS): NVIDIA publishes no datasheet peak for it.
# - L20: no public NVIDIA datasheet (a China-market part).
# - RTX 6000 Ada Generation: its datasheet quotes one tensor figure, 1,457 TFLOPS FP8 with
#   sparsity; whether 16-bit with FP32 accumulate runs at half that rate (as on the L40, the
#   same AD102 configuration at 181 TFLOPS bf16) or at the full 364 is not stated.
# - RTX PRO 6000 Blackwell (Server and Workstation Editions): the datasheet quotes FP4 only.
# - Tesla P100: its PCIe (9.3 FP32, 18.7 FP16) and SXM2 (10.6, 21.2) parts share one name
#   pattern, and a PCIe peak would overstate an SXM2 run's MFU.


def peak_key(gpu_name: str) -> str | None:
    """The peak-table key for a GPU model name or a table key (``NVIDIA H100 NVL`` and
    ``H100-NVL`` → ``H100-NVL``), or None without a peak. A variant is never given its base
    model's peak: PCIe and NVL parts run lower clocks than SXM."""
    key = canonical_gpu(gpu_name)
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
