"""The speed guard's judgement (``bench/smoke.py``, run by ``make test``): a step fails at twice
its kept ratio to DuckDB, a step of a few milliseconds not on noise, and every step it times
is a function the report has."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402

KEPT = {"reference_cpu_s": 0.2, "ratios": {step: 10.0 for step, _ in smoke.STEPS}}


def run(**steps: float) -> dict:
    """A measurement with the reference at 0.1 s CPU here (a machine twice as fast as the
    baseline's): every step at its kept ratio (1.0 s) but those given."""
    times = {step: 1.0 for step, _ in smoke.STEPS}
    times.update({k.replace("_", " "): v for k, v in steps.items()})
    return {"reference_cpu_s": 0.1, "steps": times, "max_rel_diff": 0.0}


def test_a_step_at_its_kept_ratio_passes_and_at_three_times_fails() -> None:
    lines, ok = smoke.verdict(run(), KEPT)
    assert ok and sum(line.endswith(" ok") for line in lines) == len(smoke.STEPS) + 1
    lines, ok = smoke.verdict(run(waste_by_cause=3.0), KEPT)
    (bad,) = [line for line in lines if "FAIL" in line]
    assert not ok
    assert bad.split()[:4] == ["waste", "by", "cause", "3.000"]
    assert bad.endswith("FAIL: 3.0x its kept time")
    # just under twice its kept time: noise, not a regression
    assert smoke.verdict(run(waste_by_cause=1.99), KEPT)[1]


def test_a_tiny_step_is_judged_by_its_slack_not_its_ratio() -> None:
    kept = {"reference_cpu_s": 0.1, "ratios": {**KEPT["ratios"], "json": 0.05}}  # 5 ms
    assert smoke.verdict(run(json=0.005 + smoke.SLACK_S - 0.01), kept)[1]  # 30x, 0.14 s
    assert not smoke.verdict(run(json=0.005 + smoke.SLACK_S + 0.01), kept)[1]


def test_figures_that_disagree_with_duckdb_fail_and_a_step_not_called_fails() -> None:
    m = run()
    m["max_rel_diff"] = 1e-3
    lines, ok = smoke.verdict(m, KEPT)
    assert not ok and lines[-1].endswith("FAIL (> 1e-06)")
    del m["steps"]["csv"]
    m["max_rel_diff"] = 0.0
    lines, ok = smoke.verdict(m, KEPT)
    assert not ok and any(line.startswith("csv") and "not called" in line for line in lines)


@pytest.mark.parametrize("target", [t for _, t in smoke.STEPS])
def test_every_step_is_a_function_of_the_report(target: str) -> None:
    _, _, f = smoke._resolve(target)
    assert callable(f)


def test_the_kept_baseline_has_every_step() -> None:
    import json

    kept = json.loads(smoke.BASELINE.read_text())
    assert set(kept["ratios"]) == {step for step, _ in smoke.STEPS}
    assert kept["reference_cpu_s"] > 0


def test_the_docs_show_the_kept_baseline() -> None:
    import json

    from bench.docs_block import read_block

    kept = json.loads(smoke.BASELINE.read_text())
    assert read_block("bench/smoke.py") == smoke.docs_table(kept)


def test_the_docs_table_of_the_report_at_scale_is_the_bench_s_own_output() -> None:
    """docs/benchmarks.md's table of the report at scale is what ``bench/report_scale.py
    --docs`` wrote: its command, its columns, a row per case and its verdicts."""
    from bench import report_scale
    from bench.docs_block import read_block

    block = read_block("bench/report_scale.py").splitlines()
    assert block[0].startswith("`bench/report_scale.py ") and "--docs" in block[0]
    assert block[2] == "| " + " | ".join(report_scale.COLUMNS) + " |"
    rows = [line for line in block[4:] if line.startswith("| ")]
    assert rows and all(line.count("|") == len(report_scale.COLUMNS) + 1 for line in rows)
    verdicts = block[block.index("```text") + 1 : block.index("```")]
    assert verdicts and all(v.split()[0] in ("PASS", "FAIL", "n/a") for v in verdicts)
