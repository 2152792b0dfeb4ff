"""Peak FLOP/s per GPU model and dtype, with provenance, and MFU's denominator.

MFU = achieved model FLOP/s ÷ (dense peak of the training dtype × GPUs). Every row of
:data:`PEAKS` keeps the vendor's figures as its datasheet or whitepaper prints them, dense and
with 2:4 structured sparsity, per dtype, the clocks they are quoted at, and the document and its
date; ``tests/tracker/test_peaks.py`` holds each row to its cited figure and to the ratios every
row must keep (sparse = 2 × dense, tf32 = bf16 / 2, fp8 = 2 × bf16 on Hopper, Ada and Blackwell,
SMs × FLOPs per clock × clock = the peak).

A model that is not in the table, or a dtype its row lacks, gets no MFU and says so
(:attr:`Denominator.why_none`: ``no peak for A10G``), never a wrong one; an MFU over 100% is a
FLOP-count or peak error and is named, not shown (:func:`judge`).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tracker.prices import canonical_gpu

PEAKS_VERSION = "2026-12"

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
"""The dtypes a peak is kept for (int8 in TOPS). ``fp32`` is the non-tensor (CUDA core) rate
on NVIDIA parts, the matrix-core rate on AMD's."""

MFU_FIELDS = ("mfu", "mfu_peak_tflops", "mfu_dtype", "mfu_dtype_from", "mfu_note", "ofu")
"""The run record's fields of MFU, its denominator and its cross-check: what every surface
that shows a run's MFU carries (:func:`mfu_lines`)."""

TENSOR_DTYPES = ("tf32", "bf16", "fp16", "fp8", "int8")
"""The dtypes structured sparsity doubles."""

DTYPE_FROM = ("trainer", "flag", "assumed")
"""Where a run's dtype came from (:attr:`tracker.record.RunRecord.mfu_dtype_from`): the
trainer's own setting (Lightning's ``precision``, the Trainer's ``bf16``/``fp16``/``tf32``),
the user's ``dtype=``, or assumed (fp32, torch's default, when neither says)."""

ASSUMED_DTYPE = "fp32"


@dataclass(frozen=True, kw_only=True)
class Peak:
    """One GPU model's peaks, as its vendor's document prints them."""

    model: str
    """The price table's key (:func:`tracker.prices.canonical_gpu`)."""
    name: str
    """How the surfaces name it: ``H100 SXM``."""
    dense: Mapping[str, float]
    """Peak TFLOP/s (int8: TOPS) per dtype without sparsity; a dtype the part lacks in
    hardware, or its document does not give, is absent (:attr:`gaps` says which)."""
    sparse: Mapping[str, float] = field(default_factory=dict)
    """With 2:4 structured sparsity (Ampere and newer tensor cores): twice the dense figure.
    Empty where the part has none."""
    sms: int | None = None
    """Streaming multiprocessors (AMD: compute units), where the peak is their arithmetic."""
    tensor_mhz: float | None = None
    """The SM clock the tensor figures are quoted at (MHz): on the SXM and PCIe Hopper parts
    below the maximum boost, the clock NVIDIA sustains under tensor load."""
    boost_mhz: float | None = None
    """The maximum boost clock (NVML's maximum SM clock), which the fp32 figure assumes."""
    source: str
    """The document the figures are from, and what was done to them."""
    dated: str
    """The document's date, ``YYYY-MM`` (the month it was published or last revised)."""
    vendor: str = "NVIDIA"
    ampere_or_newer: bool = True
    """fp32 matmuls may run as tf32 (torch's float32 matmul precision ``high``)."""
    gaps: str = ""
    """Why a dtype is missing, when it is for want of a figure, not of hardware."""

    @property
    def tflops(self) -> dict[str, float]:
        """The dense peaks (MFU's denominator)."""
        return dict(self.dense)


def _sparse(dense: Mapping[str, float], *, only: tuple[str, ...] = TENSOR_DTYPES) -> dict:
    return {d: 2 * v for d, v in dense.items() if d in only}


# A document's figures as it prints them; dense = the "with sparsity" figure / 2 where only that
# is printed. The dated month is the product's launch, when its datasheet first gave the figures
# (NVIDIA's PDFs carry a revision number, not a date); PEAKS_VERSION is when the table was last
# checked against them.
_H100_SXM = {
    "fp32": 66.9,
    "tf32": 494.7,
    "bf16": 989.4,
    "fp16": 989.4,
    "fp8": 1978.9,
    "int8": 1978.9,
}
_H100_SXM_SPARSE = {"tf32": 989.4, "bf16": 1978.9, "fp16": 1978.9, "fp8": 3957.8, "int8": 3957.8}
_H100_PCIE = {
    "fp32": 51.2,
    "tf32": 378.0,
    "bf16": 756.0,
    "fp16": 756.0,
    "fp8": 1513.0,
    "int8": 1513.0,
}
_H100_PCIE_SPARSE = {"tf32": 756.0, "bf16": 1513.0, "fp16": 1513.0, "fp8": 3026.0, "int8": 3026.0}
_H100_NVL = {
    "fp32": 60.0,
    "tf32": 417.5,
    "bf16": 835.5,
    "fp16": 835.5,
    "fp8": 1670.5,
    "int8": 1670.5,
}
_H100_NVL_SPARSE = {"tf32": 835.0, "bf16": 1671.0, "fp16": 1671.0, "fp8": 3341.0, "int8": 3341.0}
_A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "int8": 624.0}
_A100_SPARSE = {"tf32": 312.0, "bf16": 624.0, "fp16": 624.0, "int8": 1248.0}
# Per GPU. The Blackwell datasheets quote tensor figures with sparsity only. TF32 on HGX is
# the 8-GPU total halved (18 PFLOPS / 8 / 2 = 1,125, half the 16-bit rate as on every tensor
# core since Ampere); the per-GPU column rounds the same figure to "2.2 PFLOPS" sparse.
_HGX_BLACKWELL = {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0}
_HGX_BLACKWELL_SPARSE = {"tf32": 2250.0, "bf16": 4500.0, "fp16": 4500.0, "fp8": 9000.0}
_GRACE_BLACKWELL = {"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0}
_GRACE_BLACKWELL_SPARSE = {"tf32": 2500.0, "bf16": 5000.0, "fp16": 5000.0, "fp8": 10000.0}
_CDNA3 = {
    "fp32": 163.4,
    "tf32": 653.7,
    "bf16": 1307.4,
    "fp16": 1307.4,
    "fp8": 2614.9,
    "int8": 2614.9,
}
_CDNA3_SPARSE = {"tf32": 1307.4, "bf16": 2614.9, "fp16": 2614.9, "fp8": 5229.8, "int8": 5229.8}
_ULTRA_INT8 = (
    "INT8 is cut on Blackwell Ultra (about 0.15 POPS a GPU, no per-GPU datasheet figure): none"
)

PEAKS: dict[str, Peak] = {
    p.model: p
    for p in (
        Peak(
            model="B200",
            name="B200 (HGX, 1,000 W)",
            dense={**_HGX_BLACKWELL, "int8": 4500.0},
            sparse={**_HGX_BLACKWELL_SPARSE, "int8": 9000.0},
            source="NVIDIA Blackwell (HGX B200) datasheet 3384703, per GPU: sparse tensor "
            "figures / 2 (TF32 from the 8-GPU total), FP32 as quoted",
            dated="2024-03",
        ),
        Peak(
            model="B300",
            name="B300 (HGX)",
            dense=_HGX_BLACKWELL,
            sparse=_HGX_BLACKWELL_SPARSE,
            source="NVIDIA HGX B300 datasheet, 8-GPU totals / 8: sparse tensor figures / 2, "
            "FP32 as quoted (the B200's figures but for FP4, INT8 and FP64)",
            dated="2025-03",
            gaps=_ULTRA_INT8,
        ),
        Peak(
            model="GB200",
            name="GB200 (NVL72)",
            dense={**_GRACE_BLACKWELL, "int8": 5000.0},
            sparse={**_GRACE_BLACKWELL_SPARSE, "int8": 10000.0},
            source="NVIDIA GB200 NVL72 datasheet, per-GPU column (up to 1,200 W): sparse "
            "tensor figures / 2, FP32 as quoted (rack: 5,760 TFLOPS / 72)",
            dated="2024-03",
        ),
        Peak(
            model="GB300",
            name="GB300 (NVL72)",
            dense=_GRACE_BLACKWELL,
            sparse=_GRACE_BLACKWELL_SPARSE,
            source="NVIDIA GB300 NVL72 datasheet, per GPU (rack figures / 72): sparse "
            "tensor figures / 2, FP32 as quoted (GB200's figures but for FP4, INT8, FP64)",
            dated="2025-03",
            gaps=_ULTRA_INT8,
        ),
        Peak(
            model="H200",
            name="H200 SXM",
            dense=_H100_SXM,
            sparse=_H100_SXM_SPARSE,
            sms=132,
            tensor_mhz=1830,
            boost_mhz=1980,
            source="NVIDIA H200 Tensor Core GPU datasheet 3002446 (SXM column), sparse figures / 2",
            dated="2023-11",
        ),
        Peak(
            model="H200-NVL",
            name="H200 NVL",
            dense=_H100_NVL,
            sparse=_H100_NVL_SPARSE,
            source="NVIDIA H200 Tensor Core GPU datasheet 3002446 (NVL column), sparse figures / 2",
            dated="2024-11",
        ),
        Peak(
            model="GH200",
            name="GH200 (its H100)",
            dense=_H100_SXM,
            sparse=_H100_SXM_SPARSE,
            source="NVIDIA GH200 Grace Hopper Superchip datasheet (its H100 GPU), sparse "
            "figures / 2",
            dated="2023-05",
        ),
        Peak(
            model="H100",
            name="H100 SXM",
            dense=_H100_SXM,
            sparse=_H100_SXM_SPARSE,
            sms=132,
            tensor_mhz=1830,
            boost_mhz=1980,
            source="NVIDIA H100 Tensor Core GPU datasheet 2430615 (SXM5 column), sparse "
            "figures / 2",
            dated="2022-03",
        ),
        Peak(
            model="H100-PCIe",
            name="H100 PCIe",
            dense=_H100_PCIE,
            sparse=_H100_PCIE_SPARSE,
            sms=114,
            tensor_mhz=1620,
            boost_mhz=1755,
            source="NVIDIA H100 Tensor Core GPU datasheet 2430615 (PCIe column), sparse "
            "figures / 2",
            dated="2022-03",
        ),
        Peak(
            model="H100-NVL",
            name="H100 NVL",
            dense=_H100_NVL,
            sparse=_H100_NVL_SPARSE,
            source="NVIDIA H100 Tensor Core GPU datasheet 2430615 (NVL column), sparse figures / 2",
            dated="2023-03",
        ),
        # the export parts cut NVLink and FP64, not the tensor or FP32 rates
        Peak(
            model="H800",
            name="H800 SXM",
            dense=_H100_SXM,
            sparse=_H100_SXM_SPARSE,
            source="NVIDIA H800 datasheet (SXM5): the H100 SXM5 figures, sparse / 2",
            dated="2023-03",
        ),
        Peak(
            model="H800-PCIe",
            name="H800 PCIe",
            dense=_H100_PCIE,
            sparse=_H100_PCIE_SPARSE,
            source="NVIDIA H800 PCIe datasheet: the H100 PCIe figures, sparse / 2",
            dated="2023-03",
        ),
        Peak(
            model="H20",
            name="H20",
            dense={"fp32": 44.0, "tf32": 74.0, "bf16": 148.0, "fp16": 148.0, "fp8": 296.0},
            source="NVIDIA H20 datasheet, dense as quoted",
            dated="2024-02",
            gaps="the datasheet quotes no sparse figures",
        ),
        Peak(
            model="A100-80GB",
            name="A100 80GB",
            dense=_A100,
            sparse=_A100_SPARSE,
            sms=108,
            tensor_mhz=1410,
            boost_mhz=1410,
            source="NVIDIA A100 Tensor Core GPU datasheet 1758950-r4, dense and sparse "
            "columns (SXM4 and PCIe alike)",
            dated="2020-11",
        ),
        Peak(
            model="A100-40GB",
            name="A100 40GB",
            dense=_A100,
            sparse=_A100_SPARSE,
            sms=108,
            tensor_mhz=1410,
            boost_mhz=1410,
            source="NVIDIA A100 Tensor Core GPU datasheet 1758950-r4, dense and sparse "
            "columns (SXM4 and PCIe alike)",
            dated="2020-05",
        ),
        Peak(
            model="A800",
            name="A800",
            dense=_A100,
            sparse=_A100_SPARSE,
            source="NVIDIA A800 datasheet: the A100 figures, dense and sparse",
            dated="2022-11",
        ),
        # AWS's part: NVIDIA publishes no datasheet. 80 SMs (CUDA's device properties) at
        # 1,710 MHz, GA10x tensor cores at the FP32-accumulate rate of the GeForce parts
        # (512 FLOP per clock per SM); a cuBLAS GEMM measured on one reached 69.5 TFLOP/s in
        # FP16 and BF16 alike (34.7 TF32), which the A10's 125 would not explain.
        Peak(
            model="A10G",
            name="A10G (AWS)",
            dense={"fp32": 35.0, "tf32": 35.0, "bf16": 70.0, "fp16": 70.0},
            sparse={"tf32": 70.0, "bf16": 140.0, "fp16": 140.0},
            sms=80,
            tensor_mhz=1710,
            boost_mhz=1710,
            source="no NVIDIA datasheet: 80 SMs x GA10x FP32-accumulate tensor rate x "
            "1,710 MHz, checked by a measured cuBLAS GEMM (69.5 TFLOP/s)",
            dated="2021-11",
            gaps="INT8: no figure published",
        ),
        Peak(
            model="A10",
            name="A10",
            dense={"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0, "int8": 250.0},
            sparse={"tf32": 125.0, "bf16": 250.0, "fp16": 250.0, "int8": 500.0},
            sms=72,
            tensor_mhz=1695,
            boost_mhz=1695,
            source="NVIDIA A10 datasheet, dense and sparse columns",
            dated="2021-04",
        ),
        Peak(
            model="A30",
            name="A30",
            dense={"fp32": 10.3, "tf32": 82.5, "bf16": 165.0, "fp16": 165.0, "int8": 330.0},
            sparse={"tf32": 165.0, "bf16": 330.0, "fp16": 330.0, "int8": 661.0},
            sms=56,
            tensor_mhz=1440,
            boost_mhz=1440,
            source="NVIDIA A30 datasheet, dense and sparse columns",
            dated="2021-04",
        ),
        Peak(
            model="A40",
            name="A40",
            dense={"fp32": 37.4, "tf32": 74.8, "bf16": 149.7, "fp16": 149.7, "int8": 299.3},
            sparse={"tf32": 149.6, "bf16": 299.4, "fp16": 299.4, "int8": 598.6},
            sms=84,
            tensor_mhz=1740,
            boost_mhz=1740,
            source="NVIDIA A40 datasheet, dense and sparse columns",
            dated="2020-10",
        ),
        Peak(
            model="A2",
            name="A2",
            dense={"fp32": 4.5, "tf32": 9.0, "bf16": 18.0, "fp16": 18.0, "int8": 36.0},
            sparse={"tf32": 18.0, "bf16": 36.0, "fp16": 36.0, "int8": 72.0},
            sms=10,
            tensor_mhz=1770,
            boost_mhz=1770,
            source="NVIDIA A2 datasheet, dense and sparse columns",
            dated="2021-11",
        ),
        Peak(
            model="L40S",
            name="L40S",
            dense={
                "fp32": 91.6,
                "tf32": 183.0,
                "bf16": 362.05,
                "fp16": 362.05,
                "fp8": 733.0,
                "int8": 733.0,
            },
            sparse={"tf32": 366.0, "bf16": 733.0, "fp16": 733.0, "fp8": 1466.0, "int8": 1466.0},
            source="NVIDIA L40S datasheet, dense and sparse columns",
            dated="2023-08",
        ),
        # half the L40S's tensor rates on the same AD102: the L40 datasheet says so
        Peak(
            model="L40",
            name="L40",
            dense={
                "fp32": 90.5,
                "tf32": 90.5,
                "bf16": 181.05,
                "fp16": 181.05,
                "fp8": 362.0,
                "int8": 362.0,
            },
            sparse={"tf32": 181.0, "bf16": 362.1, "fp16": 362.1, "fp8": 724.0, "int8": 724.0},
            source="NVIDIA L40 datasheet, dense and sparse columns",
            dated="2022-09",
        ),
        Peak(
            model="L4",
            name="L4",
            dense={
                "fp32": 30.3,
                "tf32": 60.0,
                "bf16": 121.0,
                "fp16": 121.0,
                "fp8": 242.5,
                "int8": 242.5,
            },
            sparse={"tf32": 120.0, "bf16": 242.0, "fp16": 242.0, "fp8": 485.0, "int8": 485.0},
            sms=58,
            tensor_mhz=2040,
            boost_mhz=2040,
            source="NVIDIA L4 datasheet, sparse figures / 2",
            dated="2023-03",
        ),
        Peak(
            model="T4",
            name="T4",
            dense={"fp32": 8.1, "fp16": 65.0, "int8": 130.0},
            sms=40,
            tensor_mhz=1590,
            boost_mhz=1590,
            source="NVIDIA T4 datasheet 951643 (FP16 with FP32 accumulate)",
            dated="2018-09",
            ampere_or_newer=False,
        ),
        Peak(
            model="V100",
            name="V100 SXM2",
            dense={"fp32": 15.7, "fp16": 125.0},
            sms=80,
            tensor_mhz=1530,
            boost_mhz=1530,
            source="NVIDIA V100 datasheet 1165301-r5 (SXM2 column)",
            dated="2017-05",
            ampere_or_newer=False,
        ),
        Peak(
            model="V100S",
            name="V100S PCIe",
            dense={"fp32": 16.4, "fp16": 130.0},
            source="NVIDIA V100S datasheet (PCIe)",
            dated="2019-11",
            ampere_or_newer=False,
        ),
        Peak(
            model="RTX-A6000",
            name="RTX A6000",
            dense={"fp32": 38.7, "bf16": 154.8, "fp16": 154.8},
            sparse={"bf16": 309.7, "fp16": 309.7},
            sms=84,
            tensor_mhz=1800,
            boost_mhz=1800,
            source="NVIDIA RTX A6000 datasheet 1454980-r9: tensor 309.7 TFLOPS with sparsity / 2",
            dated="2020-10",
            gaps="the datasheet gives one tensor figure (16-bit): no TF32 or INT8",
        ),
        Peak(
            model="RTX-A5000",
            name="RTX A5000",
            dense={"fp32": 27.8, "bf16": 111.1, "fp16": 111.1},
            sparse={"bf16": 222.2, "fp16": 222.2},
            sms=64,
            tensor_mhz=1695,
            boost_mhz=1695,
            source="NVIDIA RTX A5000 datasheet: tensor 222.2 TFLOPS with sparsity / 2",
            dated="2021-04",
            gaps="the datasheet gives one tensor figure (16-bit): no TF32 or INT8",
        ),
        Peak(
            model="RTX-A4000",
            name="RTX A4000",
            dense={"fp32": 19.2, "bf16": 76.7, "fp16": 76.7},
            sparse={"bf16": 153.4, "fp16": 153.4},
            sms=48,
            tensor_mhz=1560,
            boost_mhz=1560,
            source="NVIDIA RTX A4000 datasheet: tensor 153.4 TFLOPS with sparsity / 2",
            dated="2021-04",
            gaps="the datasheet gives one tensor figure (16-bit): no TF32 or INT8",
        ),
        Peak(
            model="RTX-6000-Ada",
            name="RTX 6000 Ada",
            dense={"fp32": 91.1, "fp8": 728.5},
            sparse={"fp8": 1457.0},
            source="NVIDIA RTX 6000 Ada Generation datasheet: FP8 1,457 TFLOPS with "
            "sparsity / 2, FP32 as quoted",
            dated="2022-09",
            gaps="the datasheet quotes FP8 only: whether 16-bit runs at half its rate (as on "
            "the L40, the same AD102) or at the L40S's is not stated",
        ),
        # GeForce: the 16-bit tensor rate with FP32 accumulate (what mixed precision uses), half
        # the FP16-accumulate figure the marketing quotes
        Peak(
            model="RTX-4090",
            name="GeForce RTX 4090",
            dense={"fp32": 82.6, "bf16": 165.2, "fp16": 165.2},
            sparse={"bf16": 330.3, "fp16": 330.3},
            sms=128,
            tensor_mhz=2520,
            boost_mhz=2520,
            source="NVIDIA Ada GPU architecture whitepaper v2.1, RTX 4090: FP16/BF16 tensor "
            "with FP32 accumulate",
            dated="2022-10",
        ),
        Peak(
            model="RTX-4080",
            name="GeForce RTX 4080",
            dense={"fp32": 48.7, "bf16": 97.5, "fp16": 97.5},
            sparse={"bf16": 194.9, "fp16": 194.9},
            sms=76,
            tensor_mhz=2505,
            boost_mhz=2505,
            source="NVIDIA Ada GPU architecture whitepaper v2.1, RTX 4080: FP16/BF16 tensor "
            "with FP32 accumulate",
            dated="2022-11",
        ),
        Peak(
            model="RTX-3090",
            name="GeForce RTX 3090",
            dense={"fp32": 35.6, "bf16": 71.0, "fp16": 71.0},
            sparse={"bf16": 142.0, "fp16": 142.0},
            sms=82,
            tensor_mhz=1695,
            boost_mhz=1695,
            source="NVIDIA Ampere GA102 whitepaper, RTX 3090: FP16/BF16 tensor with FP32 "
            "accumulate",
            dated="2020-09",
        ),
        Peak(
            model="RTX-3080",
            name="GeForce RTX 3080",
            dense={"fp32": 29.8, "bf16": 59.5, "fp16": 59.5},
            sparse={"bf16": 119.0, "fp16": 119.0},
            sms=68,
            tensor_mhz=1710,
            boost_mhz=1710,
            source="NVIDIA Ampere GA102 whitepaper, RTX 3080: FP16/BF16 tensor with FP32 "
            "accumulate",
            dated="2020-09",
        ),
        Peak(
            model="TITAN-RTX",
            name="TITAN RTX",
            dense={"fp32": 16.3, "fp16": 130.5},
            source="NVIDIA Turing TU102 whitepaper, TITAN RTX: FP16 tensor with FP32 accumulate",
            dated="2018-12",
            ampere_or_newer=False,
        ),
        # the price row's P100 is PCIe (a cloud's); the SXM2 part has its own row
        Peak(
            model="P100",
            name="Tesla P100 PCIe",
            dense={"fp32": 9.3, "fp16": 18.7},
            source="NVIDIA Tesla P100 datasheet (PCIe column; FP16 at twice the FP32 rate, no "
            "tensor cores)",
            dated="2016-06",
            ampere_or_newer=False,
        ),
        Peak(
            model="P100-SXM2",
            name="Tesla P100 SXM2",
            dense={"fp32": 10.6, "fp16": 21.2},
            source="NVIDIA Tesla P100 datasheet (SXM2 column)",
            dated="2016-04",
            ampere_or_newer=False,
        ),
        Peak(
            model="P40",
            name="Tesla P40",
            dense={"fp32": 11.8},
            source="NVIDIA Tesla P40 datasheet (no fast FP16)",
            dated="2016-09",
            ampere_or_newer=False,
        ),
        Peak(
            model="K80",
            name="Tesla K80",
            dense={"fp32": 4.37},
            source="NVIDIA Tesla K80 datasheet: 8.73 TFLOPS FP32 at boost per board of two GPUs",
            dated="2014-11",
            ampere_or_newer=False,
        ),
        # Imported runs on other vendors' parts. AMD's figures are per device as torch sees
        # it: an MI250X is two GCDs, each its own device with half the module's figures.
        Peak(
            model="MI300X",
            name="AMD Instinct MI300X",
            dense=_CDNA3,
            sparse=_CDNA3_SPARSE,
            sms=304,
            tensor_mhz=2100,
            boost_mhz=2100,
            source="AMD Instinct MI300X datasheet and ROCm's MI300 peak table (FP32: matrix)",
            dated="2023-12",
            vendor="AMD",
        ),
        Peak(
            model="MI325X",
            name="AMD Instinct MI325X",
            dense=_CDNA3,
            sparse=_CDNA3_SPARSE,
            sms=304,
            tensor_mhz=2100,
            boost_mhz=2100,
            source="AMD Instinct MI325X datasheet: the MI300X's compute (FP32: matrix)",
            dated="2024-10",
            vendor="AMD",
        ),
        Peak(
            model="MI250X",
            name="AMD Instinct MI250X (one GCD)",
            dense={"fp32": 47.9, "bf16": 191.5, "fp16": 191.5, "int8": 191.5},
            sms=110,
            tensor_mhz=1700,
            boost_mhz=1700,
            source="AMD Instinct MI250X datasheet, module figures / 2 (each GCD is a device; "
            "FP32: matrix)",
            dated="2021-11",
            vendor="AMD",
            ampere_or_newer=False,
            gaps="CDNA2 has no TF32, FP8 or structured sparsity",
        ),
        Peak(
            model="Gaudi3",
            name="Intel Gaudi 3",
            dense={"bf16": 1835.0, "fp8": 1835.0},
            source="Intel Gaudi 3 AI accelerator white paper and Hot Chips 2024: MME BF16 and "
            "FP8 1,835 TFLOPS (1,677 at the 1,600 MHz MME clock parts ship with)",
            dated="2024-04",
            vendor="Intel",
            ampere_or_newer=False,
            gaps="no FP32 figure published; FP8 runs at the BF16 rate",
        ),
        Peak(
            model="Gaudi2",
            name="Intel Gaudi 2",
            dense={"bf16": 432.0, "fp8": 865.0},
            source="Intel Gaudi 2 white paper: MME BF16 432, FP8 865 TFLOPS",
            dated="2022-05",
            vendor="Intel",
            ampere_or_newer=False,
            gaps="no FP32 figure published",
        ),
    )
}

NO_PEAK: dict[str, str] = {
    "L20": "NVIDIA publishes no datasheet peak for it (a China-market part)",
    "RTX-PRO-6000": "its datasheet quotes FP4 only",
}
"""Models the tables know that have no peak on purpose, and why (said with ``no peak``)."""


def peak_key(gpu_name: str) -> str | None:
    """The peak-table key for a GPU model name or a table key (``NVIDIA H100 NVL`` and
    ``H100-NVL`` → ``H100-NVL``), or None without a peak. A variant is never given its base
    model's peak: PCIe and NVL parts run lower clocks than SXM."""
    key = canonical_gpu(gpu_name)
    return key if key in PEAKS else None


def normalize_dtype(dtype: str) -> str:
    """Map framework spellings to a peak-table dtype: ``bf16-mixed`` → bf16, ``16-mixed`` →
    fp16, ``32-true``/``float32`` → fp32, ``transformer-engine`` → fp8."""
    d = dtype.strip().lower().replace("torch.", "")
    if "bf16" in d or "bfloat16" in d:
        return "bf16"
    if "fp8" in d or "float8" in d or d.startswith("transformer-engine"):
        return "fp8"
    if d in ("16", "16-mixed", "16-true", "fp16", "float16", "half"):
        return "fp16"
    if d in ("32", "32-true", "fp32", "float32", "float"):
        return "fp32"
    if d in ("tf32", "int8"):
        return d
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


def _peak_dtype(peak: Peak, dtype: str, matmul_precision: str | None) -> str:
    """fp32 counts as tf32 on Ampere and newer unless torch's float32 matmul precision is
    ``highest`` (torch's default)."""
    precision = matmul_precision or _matmul_precision()
    if dtype == "fp32" and peak.ampere_or_newer and precision in ("high", "medium"):
        return "tf32"
    return dtype


def peak_tflops(gpu_name: str, dtype: str, *, matmul_precision: str | None = None) -> float | None:
    """Dense peak TFLOP/s of one GPU for ``dtype``, or None when unknown (:func:`denominator`
    says why)."""
    return denominator(gpu_name, dtype, matmul_precision=matmul_precision).tflops


@dataclass(frozen=True, kw_only=True)
class Denominator:
    """What a run's MFU is measured against: one GPU's dense peak for its dtype, and where
    that dtype came from; or why there is none."""

    model: str
    """The GPU model as the run names it."""
    dtype: str
    """The peak's dtype (``tf32`` for an fp32 run whose matmuls run as tf32)."""
    dtype_from: str = "flag"
    """:data:`DTYPE_FROM`."""
    tflops: float | None = None
    name: str = ""
    """The peak row's name (``H100 SXM``)."""
    why_none: str | None = None
    """Why there is no peak: ``no peak for A10G``, ``no fp8 peak for A100 80GB``…"""

    @property
    def text(self) -> str:
        """``989 TF/s bf16 dense, H100 SXM``; ``dtype assumed`` said where it was."""
        if self.tflops is None:
            return self.why_none or f"no peak for {self.model}"
        return peak_text(self.tflops, self.dtype, self.name or self.model, self.dtype_from)


def tf_s(tflops: float) -> str:
    """A peak in TF/s as the surfaces write it: ``989``, ``1,979``, ``66.9``."""
    return f"{tflops:,.0f}" if tflops >= 100 else f"{tflops:.3g}"


def peak_text(tflops: float, dtype: str, name: str, dtype_from: str | None = None) -> str:
    """``989 TF/s bf16 dense, H100 SXM`` (``, dtype assumed`` when it was)."""
    assumed = ", dtype assumed" if dtype_from == "assumed" else ""
    unit = "TOPS" if dtype == "int8" else "TF/s"
    return f"{tf_s(tflops)} {unit} {dtype} dense, {name}{assumed}"


def denominator(
    gpu_name: str,
    dtype: object | None,
    *,
    dtype_from: str | None = None,
    matmul_precision: str | None = None,
) -> Denominator:
    """The peak a run on ``gpu_name`` in ``dtype`` is measured against.

    Args:
        gpu_name: NVML's name of the run's GPU, or a table key (``H100``).
        dtype: The training dtype in any framework's spelling (``bf16-mixed``, ``32-true``,
            ``torch.float16``); None: fp32 assumed (torch's default), said so.
        dtype_from: Where it came from (:data:`DTYPE_FROM`); None: ``flag`` for a given dtype.
        matmul_precision: torch's float32 matmul precision (None: torch's own, where torch is
            imported): ``high`` or ``medium`` measure an fp32 run against tf32.

    Returns:
        One GPU's dense peak in TF/s (TOPS for int8) with its dtype and name, or why there is
        none (:attr:`Denominator.why_none`).

    >>> denominator("NVIDIA H100 80GB HBM3", "bf16-mixed").text
    '989 TF/s bf16 dense, H100 SXM'
    >>> denominator("NVIDIA A100-SXM4-80GB", "fp8").why_none
    'no fp8 peak for A100 80GB'
    """
    model = gpu_name or "an unknown GPU"
    if dtype is None or str(dtype).strip() == "":
        d, source = ASSUMED_DTYPE, "assumed"
    else:
        source = dtype_from if dtype_from in DTYPE_FROM else "flag"
        try:  # str(): a torch.dtype or Lightning's precision 32 names a dtype too
            d = normalize_dtype(str(dtype))
        except ValueError:
            return Denominator(
                model=model,
                dtype=str(dtype),
                dtype_from=source,
                why_none=f"no peak for dtype {str(dtype)[:40]!r} (the table has "
                f"{', '.join(DTYPES)})",
            )
    key = peak_key(gpu_name) if gpu_name else None
    if key is None:
        known = canonical_gpu(gpu_name) if gpu_name else None
        why = f"no peak for {model}"
        if known in NO_PEAK:
            why += f": {NO_PEAK[known]}"
        return Denominator(model=model, dtype=d, dtype_from=source, why_none=why)
    peak = PEAKS[key]
    d = _peak_dtype(peak, d, matmul_precision)
    tflops = peak.dense.get(d)
    if tflops is None:
        why = f"no {d} peak for {peak.name}"
        if peak.gaps:
            why += f" ({peak.gaps})"
        return Denominator(model=model, dtype=d, dtype_from=source, name=peak.name, why_none=why)
    return Denominator(model=model, dtype=d, dtype_from=source, tflops=tflops, name=peak.name)


TWICE_CAUSES = (
    "FLOPs counted twice: a multiply-add counted as two FLOPs in a count that already doubles "
    "(6 x parameters x tokens counts 2 per multiply-add), activation recomputation counted in "
    "the model FLOPs, or a run on 2:4 sparse weights measured against the dense peak"
)


def judge(
    flops_per_s: float | None,
    den: Denominator | None,
    gpus: float,
    *,
    world_size: int = 1,
) -> tuple[float | None, str | None]:
    """MFU of a model FLOP rate, and what to say instead of it: why there is no peak, or —
    above 100%, which no run reaches — that the FLOP count or the peak is wrong and the likely
    cause. Never a figure over 1.

    Args:
        flops_per_s: The model FLOPs done per second of the steps, all GPUs (None: not counted).
        den: The peak (:func:`denominator`); None: no GPU data, nothing said.
        gpus: Physical GPUs' worth the run held (a MIG slice its share).
        world_size: The run's processes, to name FLOPs given for all of them as one's.

    Returns:
        (MFU as a fraction 0-1, None) where it is a figure; (None, the sentence) where there
        is no peak or the rate is over it; (None, None) where no FLOPs were counted.
    """
    if den is None:
        return None, None
    if den.tflops is None:  # said whether FLOPs were counted or not: never silently no MFU
        return None, den.why_none
    if not flops_per_s or flops_per_s <= 0 or gpus <= 0:
        return None, None
    ratio = flops_per_s / (den.tflops * 1e12 * gpus)
    if ratio <= 1.0:
        return ratio, None
    head = (
        f"no MFU: the model FLOP rate is {ratio:.2f}x the GPUs' peak ({den.text}), a FLOP-count "
        "or peak error; likely "
    )
    if world_size > 1 and ratio / world_size <= 1.0:
        return None, head + (
            f"the FLOPs of all {world_size} processes given as one process's (flops_per_step "
            "is per process)"
        )
    other = _fitting_dtype(flops_per_s, den, gpus) if den.dtype_from != "trainer" else None
    if other and den.dtype_from == "assumed":  # the likeliest when nobody said
        return None, head + other
    cause = (
        TWICE_CAUSES
        if ratio <= 2.1
        else (
            f"a FLOP count {ratio:.0f}x too high: flops_per_step is one step on one process, "
            "forward and backward"
        )
    )
    return None, head + cause + (f"; or {other}" if other else "")


def _fitting_dtype(flops_per_s: float, den: Denominator, gpus: float) -> str | None:
    """``the wrong dtype: ...`` when faster dtypes of the same GPU hold the FLOP rate (each
    named with the MFU it would give)."""
    key = peak_key(den.model)
    if key is None or den.tflops is None:
        return None
    rates: dict[float, list[str]] = {}
    for d, t in PEAKS[key].dense.items():
        if d != "int8" and t > den.tflops:
            rates.setdefault(t, []).append(d)
    fits = [
        f"the {'/'.join(ds)} peak ({tf_s(t)} TF/s) {share:.0%}"
        for t, ds in sorted(rates.items())
        if (share := flops_per_s / (t * 1e12 * gpus)) <= 1.0
    ]
    if not fits:
        return None
    how = "assumed" if den.dtype_from == "assumed" else "given"
    return f"the wrong dtype ({den.dtype} {how}): against " + ", ".join(fits) + " (pass dtype=)"


OFU_GAP = 0.10
"""MFU and OFU further apart than this, relative to OFU, is named on the run."""


def observed(
    tensor_active: float | None, sm_mhz: float | None, peak_mhz: float | None
) -> float | None:
    """Observed FLOPs utilization of one reading.

    Args:
        tensor_active: The fraction of cycles the tensor pipes were active, 0-1 (GPM's
            ``ANY_TENSOR_UTIL`` / 100, DCGM's ``PROF_PIPE_TENSOR_ACTIVE``).
        sm_mhz: The SM clock, MHz.
        peak_mhz: The SM clock the GPU's tensor peak is quoted at, MHz
            (:func:`peak_clock_mhz`).

    Returns:
        A fraction of the peak, 0-1 (a clock over the peak's counts as the peak's); None
        unless all three are known.
    """
    if tensor_active is None or sm_mhz is None or not peak_mhz or tensor_active < 0:
        return None
    return tensor_active * min(sm_mhz / peak_mhz, 1.0)


def ofu_gap(mfu: float | None, ofu: float | None) -> str | None:
    """The sentence a run gets when its model FLOPs and the hardware's observed FLOPs differ
    by more than :data:`OFU_GAP` (relative to OFU), with the likely cause.

    Args:
        mfu: The model FLOPs over the same time as ``ofu`` (the run's), a fraction of the peak.
        ofu: The observed FLOPs utilization (:func:`observed`), a fraction of the peak.

    Returns:
        The sentence; None where they agree or one is unknown.
    """
    if mfu is None or ofu is None or ofu <= 0:
        return None
    gap = (mfu - ofu) / ofu
    if abs(gap) <= OFU_GAP:
        return None
    head = (
        f"model FLOPs ({mfu:.0%} of the peak over the run) {abs(gap):.0%} "
        f"{'under' if gap < 0 else 'over'} the hardware's observed {ofu:.0%} (OFU: tensor "
        "pipes active x SM clock): "
    )
    if gap < 0:
        return head + (
            "the GPU did tensor work the model FLOP count leaves out, likely activation "
            "recomputation (the forward run twice), layers the count misses (attention's "
            "matmuls, the output head), or tensor work in a slower dtype than the peak's"
        )
    return head + (
        "the model FLOP count is likely too high (padding or masked tokens counted, a "
        "multiply-add counted twice), or part of the work ran in a faster dtype than the "
        "peak's (fp8)"
    )


def peak_clock_mhz(gpu_name: str) -> float | None:
    """The SM clock a model's tensor peak is quoted at.

    Args:
        gpu_name: NVML's name of the GPU, or a table key.

    Returns:
        MHz; None where the table does not say (no OFU for it then).
    """
    key = peak_key(gpu_name)
    return PEAKS[key].tensor_mhz if key is not None else None


def mfu_cell(r: Any) -> str:
    """MFU in a table's cell, its peak and dtype beside it: ``41% of 989 TF/s bf16``
    (``, dtype assumed``); ``no peak`` or ``over the peak: an error`` where the run names why
    (its :attr:`mfu_note` in full in the JSON and CSV); ``n/a`` where no FLOPs were counted."""
    mfu, peak, dtype = _get(r, "mfu"), _get(r, "mfu_peak_tflops"), _get(r, "mfu_dtype")
    if mfu is not None:
        if not (peak and dtype):
            return f"{float(mfu):.0%}"
        unit = "TOPS" if dtype == "int8" else "TF/s"
        assumed = ", dtype assumed" if _get(r, "mfu_dtype_from") == "assumed" else ""
        return f"{float(mfu):.0%} of {tf_s(float(peak))} {unit} {dtype}{assumed}"
    note = str(_get(r, "mfu_note") or "")
    if _NO_PEAK.match(note):
        return "no peak"
    if note.startswith("no MFU"):
        return "over the peak: an error"
    return "n/a"


_NO_PEAK = re.compile(r"no (\S+ )?peak for ")
"""How :attr:`Denominator.why_none` begins."""


def _get(r: Any, name: str) -> Any:
    """A field of a run record or of a row (a mapping: a report's frame row), None where it is
    missing or not a number (NaN, pandas' NA)."""
    v = r.get(name) if isinstance(r, Mapping) else getattr(r, name, None)
    if v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__name__ == "NAType":
        return None
    return v


def mfu_denominator(r: Any) -> str | None:
    """A run's MFU denominator as text (``989 TF/s bf16 dense, H100 SXM``), or why there is
    none (``no peak for A10G``); None for a run without GPU data. ``r``: a run record or a
    row of one."""
    peak, dtype = _get(r, "mfu_peak_tflops"), _get(r, "mfu_dtype")
    if peak and dtype:
        key = peak_key(str(_get(r, "gpu_model") or ""))
        name = PEAKS[key].name if key is not None else str(_get(r, "gpu_model") or "")
        return peak_text(float(peak), str(dtype), name, _get(r, "mfu_dtype_from"))
    note = _get(r, "mfu_note")
    return str(note) if note and _NO_PEAK.match(str(note)) else None


def mfu_lines(r: Any) -> list[str]:
    """What a run says of its MFU: ``MFU 41% of 989 TF/s bf16 dense, H100 SXM`` (``· OFU 45%``
    where measured), why there is none, or the error a rate over the peak is; and a gap
    between MFU and OFU with its cause. Empty for a run without GPU data. ``r``: a run record
    or a row of one (the report's)."""
    if _get(r, "gpu_source") == "none" or not _get(r, "gpu_count"):
        return []
    mfu, note, ofu = _get(r, "mfu"), _get(r, "mfu_note"), _get(r, "ofu")
    gap = str(note) if note and mfu is not None else None  # beside a figure: the OFU gap
    ofu_text = f" · OFU {ofu:.0%} (tensor pipes active x SM clock)" if ofu is not None else ""
    if mfu is not None:
        line = f"MFU {float(mfu):.0%}"
        if (denominator := mfu_denominator(r)) is not None:
            line += f" of {denominator}"
    elif note:
        line = str(note) if str(note).startswith("no MFU") else f"MFU: {note}"
    elif _get(r, "mfu_peak_tflops"):
        line = "MFU: n/a, no model FLOPs counted (pass flops_per_step=)"
    else:
        return []
    return [line + ofu_text] + ([gap] if gap else [])


def peaks_markdown() -> str:
    """The table as docs/peaks.md shows it (a test holds the page to it): a row per model,
    dense and with sparsity per dtype, its clocks, document and date."""
    head = ["model", *DTYPES, "SMs @ tensor / boost MHz", "source", "dated"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in PEAKS.values():

        def cell(d: str, p: Peak = p) -> str:
            if d not in p.dense:
                return "–"
            sparse = f" / {tf_s(p.sparse[d])}" if d in p.sparse else ""
            return tf_s(p.dense[d]) + sparse

        clocks = f"{p.sms} @ {p.tensor_mhz:g} / {p.boost_mhz:g}" if p.sms else "–"
        source = p.source + (f". Missing: {p.gaps}" if p.gaps else "")
        row = [f"`{p.model}` {p.name}", *(cell(d) for d in DTYPES), clocks, source, p.dated]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
    return "\n".join(lines)
