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
    """The sentence from one run's figures (headroom 1.2, target 85%)."""
    peak = half_peak_tflops(model)
    best = half_peak_tflops(suggested)
    assert peak is not None and best is not None
    return (
        f"{mem:.1f} GiB × 1.2 fits {MEM[suggested]:g} GiB; "
        f"{util:.1f}% of {peak:g} = {util / 100.0 * peak:.0f} TFLOP/s (16-bit) "
        f"fits 85% of its {best:g} = {0.85 * best:.0f}: the same hours"
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
