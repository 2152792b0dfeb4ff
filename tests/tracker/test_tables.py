"""Prices, peaks and the diagnosis table: pure functions with hand-checked values."""

from __future__ import annotations

import pytest

from tracker.diagnosis import Evidence, diagnose
from tracker.owned import OwnedGpu
from tracker.peaks import denominator, judge, normalize_dtype, peak_tflops
from tracker.prices import (
    DEFAULT_PRICES,
    MODELS,
    PriceTable,
    UnknownGpu,
    canonical_gpu,
    gpu_keys,
    price_for,
)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 80GB HBM2e", "H100-PCIe"),  # the PCIe card's memory
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200-NVL"),
        ("NVIDIA GH200 480GB", "GH200"),  # not H200
        ("NVIDIA H20", "H20"),  # not H200
        ("NVIDIA H800", "H800"),
        ("NVIDIA H800 PCIe", "H800-PCIe"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),  # not B200
        ("NVIDIA B300 SXM6 AC", "B300"),
        ("NVIDIA GB300", "GB300"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA A800-SXM4-80GB", "A800"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),  # not A10G, not A100
        ("NVIDIA A30", "A30"),
        ("NVIDIA A40", "A40"),
        ("NVIDIA A2", "A2"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),  # not L40S, not L4
        ("NVIDIA L20", "L20"),
        ("NVIDIA L4", "L4"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000"),  # not the Ada
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000"),
        ("a100 80gb", "A100-80GB"),
        ("h100 nvl", "H100-NVL"),
        ("H100_NVL", "H100-NVL"),  # GPU_KPI_PRICE_H100_NVL
        ("RTX_6000_ADA", "RTX-6000-Ada"),
        ("NVIDIA RTX A1000", None),  # not an A100
        ("NVIDIA RTX A2000", None),  # not an A2
        ("NVIDIA RTX A4000", "RTX-A4000"),  # not an A40
        ("NVIDIA RTX A6000", "RTX-A6000"),  # not the RTX 6000 Ada
        ("NVIDIA GeForce RTX 4080 SUPER", "RTX-4080"),
        ("NVIDIA TITAN RTX", "TITAN-RTX"),
        ("Tesla V100S-PCIE-32GB", "V100S"),  # not a V100 16GB
        ("Tesla P100-PCIE-16GB", "P100"),
        ("Tesla P40", "P40"),
        ("Tesla K80", "K80"),
        ("Quadro RTX 6000", None),  # Turing: neither RTX 6000 above
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA GeForce GTX 1080 Ti", None),
        ("AMD Instinct MI300X", "MI300X"),
        ("Intel Gaudi 3", "Gaudi3"),
    ],
)
def test_canonical_gpu(name: str, key: str | None) -> None:
    assert canonical_gpu(name) == key


def test_every_key_is_its_own_name() -> None:
    """A recorded run keeps the key (``H100-NVL``): read back, it must name the same model."""
    assert all(canonical_gpu(m.key) == m.key for m in MODELS)
    assert {p.gpu for p in DEFAULT_PRICES} <= {m.key for m in MODELS}
    bases = {m.base for m in MODELS if m.base}
    assert bases <= {m.key for m in MODELS}
    assert gpu_keys("NVIDIA H100 NVL") == ("H100-NVL", "H100")
    assert gpu_keys("NVIDIA H100 80GB HBM3") == ("H100",)
    assert gpu_keys("RTX 4090") == ("RTX-4090",)
    assert gpu_keys("GTX 1080 Ti") == ()


def test_a_model_row_agrees_with_its_price_row() -> None:
    models = {m.key: m for m in MODELS}
    for p in DEFAULT_PRICES:
        assert (models[p.gpu].mem_gib, models[p.gpu].description) == (p.mem_gib, p.description)


def test_every_default_price_has_a_source_and_date() -> None:
    assert len(DEFAULT_PRICES) == 23
    assert all(p.source and p.as_of and p.usd_per_gpu_hour > 0 for p in DEFAULT_PRICES)
    # the GPUs real logs are full of are priced (issue 23): workstation, GeForce, older parts
    for name in (
        "NVIDIA RTX A6000",
        "NVIDIA RTX 6000 Ada Generation",
        "NVIDIA RTX A5000",
        "NVIDIA RTX A4000",
        "NVIDIA L40",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA GeForce RTX 4080",
        "NVIDIA GeForce RTX 3090",
        "NVIDIA GeForce RTX 3080",
        "NVIDIA TITAN RTX",
        "Tesla V100S-PCIE-32GB",
        "Tesla P100-PCIE-16GB",
        "Tesla P40",
        "Tesla K80",
        "Tesla T4",
    ):
        assert PriceTable().get(name).usd_per_gpu_hour > 0, name
    assert PriceTable().get("NVIDIA H200").usd_per_gpu_hour == 4.50


def test_overrides_and_unknown_models() -> None:
    table = PriceTable({"h100": 2.49})
    row = table.get("NVIDIA H100 80GB HBM3")
    assert (row.usd_per_gpu_hour, row.source) == (2.49, "config")
    assert table.get("T4").usd_per_gpu_hour == 0.53
    with pytest.raises(UnknownGpu, match="unknown GPU model 'GTX 1080'; known: H200, H100"):
        table.get("GTX 1080")
    with pytest.raises(ValueError, match="must be a number >= 0"):
        PriceTable({"B300": -9.0})


def test_any_model_can_carry_a_price() -> None:
    """Issue 11: models the table does not know are priced by name and matched to NVML's names
    as whole words, the longest name first."""
    table = PriceTable(
        {"B200": 5.5, "GB200": 6.25, "MI300X": 3.2, "RTX 6000 Ada": 1.1, "Gaudi 3": 1.2}
    )
    assert table.get("NVIDIA B200").usd_per_gpu_hour == 5.5
    assert table.get("NVIDIA GB200").usd_per_gpu_hour == 6.25  # not B200's
    assert table.get("AMD Instinct MI300X").usd_per_gpu_hour == 3.2
    assert table.get("Intel Gaudi 3").usd_per_gpu_hour == 1.2
    assert table.get("NVIDIA RTX 6000 Ada Generation").usd_per_gpu_hour == 1.1
    assert table.lookup("NVIDIA RTX PRO 6000 Blackwell Server Edition") is None
    # a known model priced by the user takes its memory from the model table
    assert table.get("b200").source == "config" and table.get("B200").mem_gib == 180
    assert table.get("MI300X").mem_gib == 192  # now a model of the table (a peak, no price)
    assert PriceTable({"H100": 2}).lookup("AMD Instinct MI300X") is None
    # a known model's own row comes before a user's name that is a word of it
    turing = PriceTable({"RTX 6000": 0.9, "RTX 6000 Ada": 1.1})
    assert turing.get("NVIDIA RTX 6000 Ada Generation").usd_per_gpu_hour == 1.1
    assert turing.get("Quadro RTX 6000").usd_per_gpu_hour == 0.9
    with pytest.raises(UnknownGpu, match="'B2000'"):
        table.get("B2000")
    assert PriceTable().lookup("NVIDIA B200") is None  # not in the shipped table
    with pytest.raises(UnknownGpu, match=r"'NVIDIA B200' \(the B200 has no price"):
        PriceTable().get("NVIDIA B200")


def test_a_variant_has_its_own_price_or_its_base_models() -> None:
    """Issue 11: ``[prices] "H100 NVL"`` prices the NVL only, not the SXM H100; a variant without
    a price of its own pays its base model's, the default or the user's."""
    nvl = PriceTable({"H100 NVL": 3.0})
    assert nvl.get("NVIDIA H100 NVL").usd_per_gpu_hour == 3.0
    assert nvl.get("NVIDIA H100 NVL").mem_gib == 94
    assert nvl.get("NVIDIA H100 80GB HBM3").usd_per_gpu_hour == 3.85
    assert nvl.get("NVIDIA H100 PCIe").usd_per_gpu_hour == 3.85
    assert nvl.get("H100-NVL").usd_per_gpu_hour == 3.0  # a recorded run's key
    base = PriceTable({"H100": 2.0})
    assert base.get("NVIDIA H100 NVL").usd_per_gpu_hour == 2.0
    assert base.get("NVIDIA H100 PCIe").gpu == "H100"
    assert PriceTable().get("NVIDIA H100 NVL").usd_per_gpu_hour == 3.85
    assert PriceTable().get("NVIDIA H200 NVL").usd_per_gpu_hour == 4.50
    assert PriceTable({"H800": 2.2}).get("NVIDIA H800 PCIe").usd_per_gpu_hour == 2.2
    assert PriceTable().lookup("NVIDIA H800") is None  # not a variant of the H100
    assert PriceTable().lookup("NVIDIA GH200 480GB") is None  # nor the GH200 of the H200


def test_an_owned_model_pays_its_amortized_rate(caplog: pytest.LogCaptureFixture) -> None:
    """$20,000 over 2 y = $1.1408/GPU-h + 0.5 kW × $0.2/kWh = $0.1/GPU-h: $1.2408. The owned
    row beats ``[prices]`` (as in the weekly report) and prices the model's variants, as a
    base model's row does, unless ``[prices]`` prices the variant itself (then it is rented);
    the run's own price beats both."""
    owned = {
        "H100": OwnedGpu(
            model="H100", purchase_usd=20_000, life_years=2, power_w=500, usd_per_kwh=0.2
        )
    }
    rate = 20_000 / (2 * 8766) + 0.1
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "h100"):
        p = price_for(name, None, {"H100": 9.0, "H100 NVL": 3.0}, owned=owned)
        assert p is not None and (p.gpu, p.source) == ("H100", "owned (amortized)")
        assert p.usd_per_gpu_hour == pytest.approx(rate)
    nvl = price_for("NVIDIA H100 NVL", None, {"H100": 9.0, "H100 NVL": 3.0}, owned=owned)
    assert nvl is not None and (nvl.gpu, nvl.usd_per_gpu_hour, nvl.source) == (
        "H100-NVL",
        3.0,
        "config",
    )
    a100 = price_for("NVIDIA A100-SXM4-80GB", owned=owned)
    assert a100 is not None and a100.usd_per_gpu_hour == 2.00  # not owned: rented
    run = price_for("NVIDIA H100 80GB HBM3", 1.5, owned=owned)
    assert run is not None and (run.usd_per_gpu_hour, run.source) == (1.5, "override")
    broken = {
        "H100": OwnedGpu(model="H100", purchase_usd=1, life_years=0, power_w=1, usd_per_kwh=1)
    }
    fallback = price_for("NVIDIA H100 80GB HBM3", owned=broken)
    assert fallback is not None and fallback.usd_per_gpu_hour == 3.85
    assert any("ignoring [owned]" in m for m in caplog.messages)


def test_peaks_and_mfu() -> None:
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA A100-SXM4-40GB", "32-true", matmul_precision="highest") == 19.5
    assert peak_tflops("NVIDIA A100-SXM4-40GB", "fp32", matmul_precision="high") == 156.0
    assert peak_tflops("Tesla V100-SXM2-16GB", "fp32", matmul_precision="high") == 15.7
    assert peak_tflops("Tesla T4", "bf16") is None  # no bf16 in hardware
    assert peak_tflops("NVIDIA L20", "bf16") is None  # no published peak: no MFU
    h100 = denominator("NVIDIA H100 80GB HBM3", "bf16")
    assert judge(400e12, h100, 1)[0] == pytest.approx(400 / 989.4)
    assert judge(400e12, h100, 2)[0] == pytest.approx(200 / 989.4)
    assert judge(400e12, denominator("NVIDIA L20", "bf16"), 1)[0] is None
    assert normalize_dtype("torch.bfloat16") == "bf16"
    assert normalize_dtype("16-mixed") == "fp16"
    with pytest.raises(ValueError, match="unknown training dtype 'int4'"):
        normalize_dtype("int4")


HOUR = 3600.0


@pytest.mark.parametrize(
    ("evidence", "verdict", "severity"),
    [
        (Evidence(util_pct=2.0, duration_s=HOUR), "idle", "critical"),
        # near 0% is held idle however short, never "raise the batch size"
        (Evidence(util_pct=2.0, duration_s=600.0), "idle", "warning"),
        (Evidence(util_pct=0.0, duration_s=600.0, mem_used_pct=3.0), "idle", "warning"),
        # unknown memory is not small memory: an 83%-busy GPU without memory.total
        (Evidence(util_pct=83.0, duration_s=HOUR), "below-target", "warning"),
        (Evidence(util_pct=40.0, duration_s=HOUR, step_time_ms=20.0), "below-target", "critical"),
        (Evidence(util_pct=60.0, duration_s=HOUR, mem_used_pct=75.0), "below-target", "warning"),
        # small kernels shown by few SMs active on a busy GPU
        (Evidence(util_pct=60.0, duration_s=HOUR, sm_active_pct=20.0), "small-batch", "warning"),
        # one of two GPUs at 0% all run: imbalanced, not 46% below target
        (
            Evidence(util_pct=45.5, duration_s=HOUR, gpu_count=2, idle_gpus=1, mem_used_pct=9.0),
            "imbalanced",
            "critical",
        ),
        (Evidence(util_pct=60.0, duration_s=HOUR, data_wait_pct=12.0), "input-bound", "warning"),
        (Evidence(util_pct=60.0, duration_s=HOUR, data_wait_pct=25.0), "input-bound", "critical"),
        (Evidence(util_pct=None, duration_s=HOUR, data_wait_pct=25.0), "input-bound", "critical"),
        (Evidence(util_pct=None, duration_s=HOUR), "unknown", "unknown"),
        (Evidence(util_pct=None, duration_s=HOUR, device="cpu"), "unknown", "unknown"),
        (
            Evidence(
                util_pct=60.0, duration_s=HOUR, gpu_count=8, rank_spread_pct=35.0, mem_used_pct=80.0
            ),
            "communication-bound",
            "warning",
        ),
        (
            Evidence(util_pct=35.0, duration_s=HOUR, mem_used_pct=8.0, step_time_ms=20.0),
            "small-batch",
            "critical",
        ),
        (Evidence(util_pct=95.0, duration_s=HOUR, sm_active_pct=28.0), "low-efficiency", "warning"),
        (
            Evidence(util_pct=95.0, duration_s=HOUR, sm_active_pct=70.0, mfu=0.08),
            "low-efficiency",
            "warning",
        ),
        (Evidence(util_pct=92.0, duration_s=HOUR, sm_active_pct=74.0, mfu=0.4), "healthy", "ok"),
        (
            Evidence(util_pct=75.0, duration_s=HOUR, mem_used_pct=80.0, step_time_ms=900.0),
            "below-target",
            "warning",
        ),
    ],
)
def test_diagnosis_table(evidence: Evidence, verdict: str, severity: str) -> None:
    d = diagnose(evidence)
    assert (d.verdict, d.severity) == (verdict, severity)
    assert bool(d.advice) == (verdict != "healthy")
    assert "batch size" not in d.advice or verdict == "small-batch"


def test_the_reasons_say_what_is_unknown_and_what_is_held() -> None:
    """An H100 pair for 2 h at $3.85: $15.40, half of it on the idle GPU."""
    d = diagnose(
        Evidence(util_pct=45.5, duration_s=2 * HOUR, gpu_count=2, idle_gpus=1, cost_usd=15.40)
    )
    assert d.reason == "1 of 2 GPUs idle most of the run (under 5%): $7.70 of GPU time held idle"
    assert "Request only the GPUs it uses" in d.advice
    assert diagnose(Evidence(util_pct=83.0, duration_s=HOUR)).reason == (
        "utilization 83% (target 85%); memory use and SM activity not measured"
    )
    assert diagnose(Evidence(util_pct=0.0, duration_s=600.0)).reason == (
        "utilization 0%, held idle for 10 min (shorter than the 30-min idle window)"
    )


def test_a_run_that_chose_the_cpu_is_told_so() -> None:
    from tracker.diagnosis import diagnose

    cpu = diagnose(Evidence(util_pct=None, duration_s=HOUR, device="cpu"))
    assert cpu.reason == "trained on the CPU: no GPU to judge"
    assert 'accelerator="gpu"' in cpu.advice and "nvidia-ml-py" not in cpu.advice
    # without the device known, no GPU data is a missing NVML
    assert "nvidia-ml-py" in diagnose(Evidence(util_pct=None, duration_s=HOUR)).advice
