"""Right-sizing's assumption text, made once per (memory, utilization, peak, suggestion) and
shared by the runs that have them (:func:`reports.kpi.rightsizing.rightsizing`), against the
sentence written from each run's own figures."""

from __future__ import annotations

import pandas as pd
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.kpi.rightsizing import half_peak_tflops, rightsizing
from tracker.prices import PriceTable

TABLE = PriceTable({})
MEM = {p.gpu: float(p.mem_gib) for p in TABLE.rows() if p.mem_gib}
PRICE = {p.gpu: p.usd_per_gpu_hour for p in TABLE.rows()}


def _sentence(mem: float, util: float, model: str, suggested: str) -> str:
    """The sentence from one run's figures (headroom 1.2, target 85%): a smaller model's
    memory and peak, or a slice of its own GPU's (``H100 MIG 1g.10gb``: 0.95 GiB per GB,
    its compute slices of 7 of the peak)."""
    peak = half_peak_tflops(model)
    assert peak is not None
    gpu, _, profile = suggested.partition(" MIG ")
    if profile:
        slices, gb = int(profile.split("g.")[0]), float(profile.split("g.")[1].rstrip("gb"))
        fits, words, best = 0.95 * gb, f"{slices}/7 of {peak:g}", peak * slices / 7
        assert gpu == model
    else:
        fits, best_peak = MEM[suggested], half_peak_tflops(suggested)
        assert best_peak is not None
        words, best = f"{best_peak:g}", best_peak
    return (
        f"{mem:.1f} GiB × 1.2 fits {fits:g} GiB; "
        f"{util:.1f}% of {peak:g} = {util / 100.0 * peak:.0f} TFLOP/s (16-bit) "
        f"fits 85% of its {words} = {0.85 * best:.0f}: the same hours"
    )


def _runs(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    n = len(rows)
    return pd.DataFrame(
        {
            "run_id": [f"r{i}" for i in range(n)],
            "name": [f"job-{i}" for i in range(n)],
            "team": ["nlp"] * n,
            "gpu_model": [m for m, _, _ in rows],
            "utilization_pct": [u for _, u, _ in rows],
            "mem_peak_gib": [g for _, _, g in rows],
            "gpu_hours": [2.0] * n,
            "spend_usd": [2.0 * PRICE[m] for m, _, _ in rows],
            "idle_usd": [0.0] * n,
            "priced": [True] * n,
            "verdict": ["input-bound"] * n,
        }
    )


@settings(max_examples=examples(200), deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["H100", "H200", "A100-80GB", "L40S"]),
            # ties at .x5 (a .1f rounds the binary value), a -0.0, repeats
            st.sampled_from([-0.0, 0.0, 0.05, 0.15, 0.25, 1.25, 12.35, 12.349999999, 19.95, 20.0]),
            st.sampled_from([-0.0, 0.0, 0.05, 4.45, 4.449999999, 12.0, 19.95, 30.0]),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_each_runs_assumption_is_the_sentence_of_its_own_figures(
    rows: list[tuple[str, float, float]],
) -> None:
    runs = _runs(rows)
    out = rightsizing(runs, TABLE)
    assert len(out) == len(runs)  # every run is light enough for a smaller card here
    for r in out.itertuples():
        i = int(str(r.run_id)[1:])
        model, util, mem = rows[i]
        assert r.assumption == _sentence(mem, util, model, str(r.suggested_gpu)), r.run_id


def test_a_negative_zero_reads_as_it_is_written() -> None:
    """-0.0 and 0.0 are equal numbers but not equal text: each run keeps its own."""
    out = rightsizing(_runs([("H100", -0.0, 12.0), ("H100", 0.0, 12.0)]), TABLE)
    texts = dict(zip(out["run_id"], out["assumption"], strict=True))
    assert texts["r0"].split("; ")[1].startswith("-0.0% of 989.4 = -0 TFLOP/s")
    assert texts["r1"].split("; ")[1].startswith("0.0% of 989.4 = 0 TFLOP/s")
