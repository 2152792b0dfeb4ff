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

KEPT = {
    "reference_cpu_s": 0.2,
    "ratios": {step: 10.0 for step, _ in smoke.STEPS},
    "import_reference_cpu_s": 2.0,
    "import_ratios": {step: 1.5 for step, _ in smoke.IMPORT_STEPS},
}


def run(**steps: float) -> dict:
    """A measurement with the references at half the baseline's CPU here (a machine twice as
    fast): the report's 0.1 s, every report step at its kept ratio (1.0 s), the import's
    reference 1.0 s and every import step at its kept ratio (1.5 s), but those given."""
    given = {k.replace("_", " "): v for k, v in steps.items()}
    times = {step: given.get(step, 1.0) for step, _ in smoke.STEPS}
    imported = {step: given.get(step, 1.5) for step, _ in smoke.IMPORT_STEPS}
    return {
        "reference_cpu_s": 0.1,
        "steps": times,
        "max_rel_diff": 0.0,
        "import": {"reference_cpu_s": 1.0, "steps": imported, "max_rel_diff": 0.0},
    }


def test_a_step_at_its_kept_ratio_passes_and_at_three_times_fails() -> None:
    lines, ok = smoke.verdict(run(), KEPT)
    judged = len(smoke.STEPS) + len(smoke.IMPORT_STEPS) + 2  # and the two agreements
    assert ok and sum(line.endswith(" ok") for line in lines) == judged
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
    (headline,) = [line for line in lines if line.startswith("headline vs DuckDB")]
    assert not ok and headline.endswith("FAIL (> 1e-06)")
    del m["steps"]["csv"]
    m["max_rel_diff"] = 0.0
    lines, ok = smoke.verdict(m, KEPT)
    assert not ok and any(line.startswith("csv") and "not called" in line for line in lines)


def test_an_import_step_is_judged_against_the_import_s_own_reference() -> None:
    """The import's reference here is 1.0 s, its steps kept at 1.5x it: the read at 2.9 s is
    1.93x its kept 1.5 s (passes), at 3.1 s 2.07x (fails); the report's reference (0.1 s)
    does not enter into it (at 3.1 s that would be 31x)."""
    assert smoke.verdict(run(**{"nvidia-smi read": 2.9}), KEPT)[1]
    lines, ok = smoke.verdict(run(**{"nvidia-smi read": 3.1}), KEPT)
    (bad,) = [line for line in lines if "FAIL" in line]
    assert not ok and bad.startswith("nvidia-smi read") and bad.endswith("FAIL: 2.1x its kept time")


def test_import_sums_that_disagree_with_duckdb_or_no_import_fail() -> None:
    m = run()
    m["import"]["max_rel_diff"] = 1e-3
    lines, ok = smoke.verdict(m, KEPT)
    assert not ok and lines[-1].startswith("minute sums vs DuckDB") and "FAIL" in lines[-1]
    del m["import"]
    lines, ok = smoke.verdict(m, KEPT)
    missing = [line.split()[:2] for line in lines if line.endswith("not called")]
    assert not ok and len(missing) == len(smoke.IMPORT_STEPS)


@pytest.mark.parametrize("target", [t for _, t in (*smoke.STEPS, *smoke.IMPORT_STEPS)])
def test_every_step_is_a_function_of_the_report(target: str) -> None:
    _, _, f = smoke._resolve(target)
    assert callable(f)


def test_the_kept_baseline_has_every_step() -> None:
    import json

    kept = json.loads(smoke.BASELINE.read_text())
    assert set(kept["ratios"]) == {step for step, _ in smoke.STEPS}
    assert set(kept["import_ratios"]) == {step for step, _ in smoke.IMPORT_STEPS}
    assert kept["reference_cpu_s"] > 0 and kept["import_reference_cpu_s"] > 0


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


def test_steps_the_report_runs_side_by_side_are_timed_in_turn() -> None:
    """The runs and the rollups' sums run on two threads in a report; timed, they run in turn
    on the caller's thread (a process's CPU clock would give each the other's work), a failure
    raised where the pool's would be, and the pool is back after."""
    from concurrent.futures import ThreadPoolExecutor

    from reports import gputime

    callers: list[str] = []

    def where() -> str:
        import threading

        callers.append(threading.current_thread().name)
        return "done"

    with smoke.timed_steps(smoke.STEPS, {}):
        assert gputime.ThreadPoolExecutor is smoke.InTurn
        with gputime.ThreadPoolExecutor(1) as pool:
            assert pool.submit(where).result() == "done"
            failed = pool.submit(lambda: 1 / 0)
            assert list(pool.map(lambda x: x * 2, [1, 2])) == [2, 4]
        with pytest.raises(ZeroDivisionError):
            failed.result()
    assert callers == ["MainThread"]
    assert gputime.ThreadPoolExecutor is ThreadPoolExecutor


def test_the_per_process_query_guard_passes_and_fails_when_asked_every_reading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench/process_query.py`` (run by ``make test``): 60 s of readings at 1 s ask a shared
    GPU's processes 6 times per GPU (every 10 s); asked at every reading (a planted fault: the
    cadence gone), 60 times, and the guard fails."""
    from bench import process_query

    monkeypatch.setattr(sys, "argv", ["process_query.py", "--seconds", "60", "--rounds", "1"])
    assert process_query.main() == 0
    out = capsys.readouterr().out
    assert "6 per-process reads per GPU (every 10 s)" in out and out.rstrip().endswith("PASS")
    monkeypatch.setattr("tracker.gpu.nvml.PROC_EVERY_S", 0.0)
    assert process_query.main() == 1
    assert "60 per-process reads per GPU" in capsys.readouterr().out
