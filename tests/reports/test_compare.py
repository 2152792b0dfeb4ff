"""`gpu-kpi compare` and `gpu-kpi gate` through the real CLI, on runs the tracker recorded
(simulated GPU, an injected clock): a benchmark that was input-bound (0.3 s of each 1 s step
waiting for data) until its loader was fixed (0.7 s steps, healthy), then a change that made its
steps 8.6% slower (tokens/s −7.8%); every figure worked out here."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import clirun
import numpy as np
import pytest
from fakes import Clock, copy_store, isolate_user_dirs

from reports.compare import BASELINE_SCHEMA
from tracker.session import track

TOKENS = 4096  # a step's tokens
FLOPS = 4e14  # a step's FLOPs
BF16_PEAK = 989.4e12  # H100 SXM dense bf16
PRICE = 3.85  # H100 $/GPU-hour (the table's)
STEPS = 300
NOW = datetime(2026, 12, 7, 9, 30, tzinfo=UTC)  # what the commands read as now
DAY_S = 86400


def gpu_kpi(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``gpu-kpi ARGS`` at :data:`NOW`."""
    return clirun.gpu_kpi(*args, env=env, now=NOW)


def bench_run(
    url: str, clock: Clock, n: int, *, wait_s: float, compute_s: float, branch: str
) -> str:
    """One tracked run of the benchmark (job key llm-bench); its id."""
    with track(
        name=f"llm-bench-{1000 + n}",
        job_key="llm-bench",
        backend=f"simulated:{'input-bound' if wait_s > 0.1 else 'healthy'}@H100",
        store=url,
        clock=clock,
        threaded=False,
        warmup_steps=0,
        flops_per_step=FLOPS,
        dtype="bf16",
        log_to_python=False,
        print_summary=False,
        links={"git_branch": branch},
    ) as run:
        for _ in range(STEPS):
            clock.t += wait_s
            run.data_ready()
            clock.t += compute_s
            run.step(samples=8, tokens=TOKENS)
            if run.sampler is not None:
                run.sampler.sample()
    clock.t += 3600  # an hour between runs
    assert run.record is not None
    return run.record.id


BEFORE = [0.70, 0.707, 0.693]  # compute seconds of the input-bound runs (0.3 s data wait)
AFTER = [0.70, 0.7035, 0.6965, 0.70, 0.7035]  # the fixed loader's runs, on main


@pytest.fixture(scope="module")
def recorded(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, float, list[str], list[str], float]:
    """The benchmark's runs before and after the loader fix, recorded once for the module: the
    store's URL, the clock's time after them, their ids and the time of the fix."""
    url = f"sqlite:///{tmp_path_factory.mktemp('recorded') / 'runs.db'}"
    clock = Clock()
    clock.t = NOW.timestamp() - 7 * DAY_S  # a week ago: inside the 26 weeks compare reads
    with pytest.MonkeyPatch.context() as mp:
        isolate_user_dirs(mp, tmp_path_factory.mktemp("xdg"))
        before = [
            bench_run(url, clock, i, wait_s=0.3, compute_s=c, branch="main")
            for i, c in enumerate(BEFORE)
        ]
        split = clock.t
        after = [
            bench_run(url, clock, 10 + i, wait_s=0.0, compute_s=c, branch="main")
            for i, c in enumerate(AFTER)
        ]
    return url, clock.t, before, after, split


@pytest.fixture
def store(
    recorded: tuple[str, float, list[str], list[str], float], tmp_path: Path
) -> tuple[str, Clock, list[str], list[str], float]:
    """A copy of the recorded runs' store for the test to add to, and a clock where they
    stopped."""
    template, t, before, after, split = recorded
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    copy_store(template, url)
    return url, Clock(t), list(before), list(after), split


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t))


def test_compare_before_and_after_the_loader_fix(
    store: tuple[str, Clock, list[str], list[str], float],
) -> None:
    url, clock, before, after, split = store
    a, b = (
        f"llm-bench@{iso(split - 30 * 86400)}..{iso(split)}",
        f"llm-bench@{iso(split)}..{iso(clock.t)}",
    )
    p = gpu_kpi("compare", a, b, "--format", "json", "--store", url)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["a"]["runs"] == before and doc["b"]["runs"] == after
    assert (doc["a"]["verdict"], doc["b"]["verdict"], doc["unit"]) == (
        "input-bound",
        "healthy",
        "1M tokens",
    )
    rows = {r["metric"]: r for r in doc["metrics"]}
    # tokens/s: the mean over runs of TOKENS ÷ (wait + compute)
    tps_a = np.mean([TOKENS / (0.3 + c) for c in BEFORE])
    tps_b = np.mean([TOKENS / c for c in AFTER])
    assert rows["tokens_per_s"]["a"] == pytest.approx(tps_a)
    assert rows["tokens_per_s"]["b"] == pytest.approx(tps_b)
    assert rows["tokens_per_s"]["change_pct"] == pytest.approx(100 * (tps_b / tps_a - 1))
    assert rows["tokens_per_s"]["beyond_noise"] is True and rows["tokens_per_s"]["better"] is True
    assert rows["data_wait_pct"]["a"] == pytest.approx(np.mean([30 / (0.3 + c) for c in BEFORE]))
    assert rows["data_wait_pct"]["b"] == pytest.approx(0.0)
    assert rows["mfu"]["b"] == pytest.approx(np.mean([FLOPS / c / BF16_PEAK for c in AFTER]))
    # $ per 1M tokens: a ratio of sums, each run's GPU-hours at $3.85 over its tokens
    cost_a = sum(STEPS * (0.3 + c) / 3600 * PRICE for c in BEFORE)
    assert rows["usd_per_unit"]["a"] == pytest.approx(cost_a / (3 * STEPS * TOKENS / 1e6))
    assert rows["usd_per_unit"]["better"] is True and rows["usd_per_unit"]["beyond_noise"] is True
    # markdown: a table, the noise said for each row
    md = gpu_kpi("compare", a, b, "--format", "markdown", "--store", url)
    assert md.returncode == 0, md.stderr
    lines = md.stdout.strip().splitlines()
    assert lines[0].startswith("| metric | llm-bench@") and lines[1].startswith("|---|")
    tokens_line = next(line for line in lines if line.startswith("| tokens/s |"))
    assert f"| +{100 * (tps_b / tps_a - 1):.1f}% | beyond noise (95%:" in tokens_line
    assert lines[-2].startswith("| verdict | input-bound | healthy |")
    # MFU's denominator on each side: one peak, the same, so the MFU row compares
    peak = "989 TF/s bf16 dense, H100 SXM"
    assert lines[-1] == f"| MFU's peak | {peak} | {peak} |  |  |"
    assert doc["mfu_peaks"] == {"a": [peak], "b": [peak], "note": None}


def test_mfu_against_different_peaks_is_said() -> None:
    """An A100 run against an H100 run: each MFU a share of another peak."""
    from reports.compare import compare_text, peaks_note
    from reports.kpi.comparison import Side

    def side(label: str, peaks: tuple[str, ...]) -> Side:
        return Side(
            label=label, run_ids=("r",), values={}, cost=np.array([]), verdicts=("healthy",),
            peaks=peaks,
        )  # fmt: skip

    a = side("a100", ("312 TF/s bf16 dense, A100 80GB",))
    b = side("h100", ("989 TF/s bf16 dense, H100 SXM", "66.9 TF/s fp32 dense, H100 SXM"))
    note = peaks_note(a, b)
    assert note == (
        "MFU against different peaks: a100 312 TF/s bf16 dense, A100 80GB, h100 989 TF/s bf16 "
        "dense, H100 SXM; 66.9 TF/s fp32 dense, H100 SXM (compare the throughput)"
    )
    text = compare_text(a, b, [], markdown=False).splitlines()
    assert text[-1] == note
    assert text[-2].split() == [
        "MFU's", "peak", "312", "TF/s", "bf16", "dense,", "A100", "80GB", "989", "TF/s",
        "bf16", "dense,", "H100", "SXM", "(+1", "others)",
    ]  # fmt: skip
    assert peaks_note(a, a) is None and peaks_note(side("x", ()), side("y", ())) is None


def test_two_single_runs_say_their_noise_is_unknown(
    store: tuple[str, Clock, list[str], list[str], float],
) -> None:
    url, _, before, after, _ = store
    p = gpu_kpi("compare", before[0], after[0], "--store", url)
    assert p.returncode == 0, p.stderr
    tokens = next(line for line in p.stdout.splitlines() if line.startswith("tokens/s"))
    assert "noise unknown (1 and 1 runs with it; 3 a side for a band)" in tokens
    bad = gpu_kpi("compare", "no-such-run", after[0], "--store", url)
    assert bad.returncode == 2 and "'no-such-run': no run with that id" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def gate(url: str, summary: Path, *args: str) -> tuple[int, str, str]:
    p = gpu_kpi(
        "gate",
        "--job-key",
        "llm-bench",
        "--store",
        url,
        *args,
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    return p.returncode, p.stdout, p.stderr


def test_the_gate_fails_a_slower_run_and_passes_one_within_the_noise(
    store: tuple[str, Clock, list[str], list[str], float], tmp_path: Path
) -> None:
    url, clock, _, _, _ = store
    # a pull request whose steps take 0.76 s: 8.6% slower, tokens/s -7.9%
    bench_run(url, clock, 20, wait_s=0.0, compute_s=0.76, branch="pr-7")
    summary = tmp_path / "summary.md"
    rc, out, err = gate(
        url, summary, "--last", "5", "--write-baseline", str(tmp_path / "base.json")
    )
    assert rc == 1, out + err
    # the baseline: the last 5 runs on main before it, the fixed loader's
    tps = np.array([TOKENS / c for c in AFTER])
    mean, sd = tps.mean(), tps.std(ddof=1)
    noise = 100 * 2.776 * sd * np.sqrt(1 + 1 / 5) / mean  # t(0.975, 4 df) = 2.776
    change = 100 * (TOKENS / 0.76 / mean - 1)
    assert -8 < change < -7.5
    line = f"- −{abs(change):.1f}% tokens/s (noise ±{noise:.1f}%): fails the 5% gate"
    assert line in out.splitlines()
    assert out.splitlines()[0] == "### gpu-kpi gate: llm-bench fails"
    assert "| tokens/s | " + f"{mean:,.0f} | {TOKENS / 0.76:,.0f} |" in out
    assert "| baseline (5 runs on main) |" in out
    assert summary.read_text().strip() == out.strip()  # the step summary has the same Markdown
    # $ per 1M tokens rose as much as the steps: 8.6% (a cost: higher is worse)
    cost_line = next(line for line in out.splitlines() if line.startswith("| $ per 1M tokens |"))
    assert "| fails |" in cost_line
    base = json.loads((tmp_path / "base.json").read_text())
    assert base["schema"] == BASELINE_SCHEMA and base["metrics"]["tokens_per_s"]["runs"] == 5
    assert base["written_at"] == "2026-12-07T09:30:00+00:00"  # the command's now, not the clock's
    assert base["metrics"]["tokens_per_s"]["mean"] == pytest.approx(mean)
    # the same against the file, JSON out
    rc, out, err = gate(url, summary, "--baseline", str(tmp_path / "base.json"), "--format", "json")
    doc = json.loads(out)
    assert rc == 1 and doc["passes"] is False
    tokens = next(x for x in doc["lines"] if x["metric"] == "tokens_per_s")
    assert tokens["noise_pct"] == pytest.approx(noise, rel=1e-3) and tokens["fails"] is True
    # a run 1% slower passes: within the 5% gate
    bench_run(url, clock, 21, wait_s=0.0, compute_s=0.707, branch="pr-8")
    rc, out, err = gate(url, summary, "--last", "5")
    assert rc == 0, out + err
    assert out.splitlines()[0] == "### gpu-kpi gate: llm-bench passes"


def test_the_gate_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    clock = Clock()
    clock.t = NOW.timestamp() - DAY_S
    bench_run(url, clock, 0, wait_s=0.0, compute_s=0.7, branch="pr-1")
    summary = tmp_path / "summary.md"
    for args, said in [
        ((), "no baseline: no earlier finished run of 'llm-bench' on branch 'main'"),
        (("--baseline", str(tmp_path / "missing.json")), "--baseline"),
        (("--threshold", "-1"), "--threshold -1.0: a percentage from 0"),
    ]:
        rc, _out, err = gate(url, summary, *args)
        assert rc == 2 and said in err, (args, err)
        assert len(err.strip().splitlines()) == 1
    (tmp_path / "foreign.json").write_text('{"schema": "something else"}')
    rc, _, err = gate(url, summary, "--baseline", str(tmp_path / "foreign.json"))
    assert rc == 2 and "not a gpu-kpi baseline" in err
    # the attacks' own: JSON nested 100,000 deep (a RecursionError traceback), a mean of 1e400
    # (infinite once read), fields of the wrong type: each one line
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)

    def baseline(mean: str, sd: str, runs: str) -> str:
        metric = f'"samples_per_s": {{"mean": {mean}, "sd": {sd}, "runs": {runs}}}'
        head = f'"schema": "{BASELINE_SCHEMA}", "job_key": "llm-bench", "unit": "1k samples"'
        return f'{{{head}, "metrics": {{{metric}}}}}'

    (tmp_path / "huge.json").write_text(baseline("1e400", "1", "3"))
    (tmp_path / "types.json").write_text(baseline('"x"', "[1]", '"3"'))
    for name in ("deep.json", "huge.json", "types.json"):
        rc, _, err = gate(url, summary, "--baseline", str(tmp_path / name))
        assert rc == 2 and len(err.strip().splitlines()) == 1, (name, err)
        assert "Traceback" not in err and f"--baseline {tmp_path / name}: " in err, err
    assert not summary.exists()


def test_the_baseline_is_the_runs_since_the_last_mark_and_finished(
    store: tuple[str, Clock, list[str], list[str], float], tmp_path: Path
) -> None:
    """With the loader fix marked, the default --last 10 takes the 5 runs since it, not the 3
    input-bound ones before: the slower run fails. A failed run is neither candidate nor
    baseline."""
    url, clock, _, _, split = store
    from datetime import UTC, datetime

    from reports.data.marks import add_mark
    from tracker.store import RunStore

    with RunStore(url) as s:
        add_mark(
            s,
            "llm-bench",
            "loader: 8 workers",
            at=datetime.fromtimestamp(split, UTC),
            now=NOW,
        )
    bench_run(url, clock, 20, wait_s=0.0, compute_s=0.76, branch="pr-7")
    with (
        pytest.raises(RuntimeError),
        track(
            name="llm-bench-1099",
            job_key="llm-bench",
            backend="simulated:healthy@H100",
            store=url,
            clock=clock,
            threaded=False,
            log_to_python=False,
            print_summary=False,
        ) as run,
    ):
        clock.t += 60
        run.step(samples=8, tokens=TOKENS)
        raise RuntimeError("out of memory")
    rc, out, err = gate(url, tmp_path / "s.md")
    assert rc == 1, out + err
    assert "| baseline (5 runs on main, since the mark of " in out
    assert "Run " in out and "llm-bench-1099" not in out


def test_bad_gate_input_is_one_line_and_exit_2(
    store: tuple[str, Clock, list[str], list[str], float], tmp_path: Path
) -> None:
    url, clock, _, _, _ = store
    bench_run(url, clock, 20, wait_s=0.0, compute_s=0.76, branch="pr-7")
    summary = tmp_path / "s.md"
    files = {
        "list": {"schema": BASELINE_SCHEMA, "metrics": [1, 2]},
        "nan": f'{{"schema": "{BASELINE_SCHEMA}", "metrics": {{"tokens_per_s": '
        '{"mean": 5800, "sd": NaN, "runs": 5}}}',
        "negative": {
            "schema": BASELINE_SCHEMA,
            "metrics": {"tokens_per_s": {"mean": 5800, "sd": -40, "runs": 5}},
        },
        "bool": {
            "schema": BASELINE_SCHEMA,
            "metrics": {"tokens_per_s": {"mean": 5800, "sd": 1, "runs": True}},
        },
        "other": {
            "schema": BASELINE_SCHEMA,
            "job_key": "someone-else",
            "metrics": {"tokens_per_s": {"mean": 5800, "sd": 1, "runs": 5}},
        },
    }
    for name, doc in files.items():
        path = tmp_path / f"{name}.json"
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        rc, _out, err = gate(url, summary, "--baseline", str(path))
        assert rc == 2 and "--baseline" in err and "Traceback" not in err, (name, err)
        assert len(err.strip().splitlines()) == 1, (name, err)
    for args, said in [
        (("--last", "-7"), "--last -7: a number of runs from 1"),
        (("--last", "0"), "--last 0"),
        (("--write-baseline", str(tmp_path / "no" / "such" / "dir.json")), "--write-baseline"),
    ]:
        rc, _out, err = gate(url, summary, *args)
        assert rc == 2 and said in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not list((tmp_path / "no").glob("*")) if (tmp_path / "no").exists() else True
    assert not summary.exists()


def test_a_key_with_markdown_and_an_at_sign_is_literal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    clock = Clock()
    clock.t = NOW.timestamp() - DAY_S
    key = "a|b <img src=x onerror=alert(1)> [l](http://e.x) user@host"
    for n, c in enumerate([0.7, 0.7035, 0.6965, 0.76]):
        with track(
            name=f"x-{n}",
            job_key=key,
            backend="simulated:healthy@H100",
            store=url,
            clock=clock,
            threaded=False,
            warmup_steps=0,
            log_to_python=False,
            print_summary=False,
            links={"git_branch": "main"},
        ) as run:
            for _ in range(50):
                clock.t += c
                run.step(samples=8, tokens=TOKENS)
        clock.t += 3600
    summary = tmp_path / "s.md"
    p = gpu_kpi("gate", "--job-key", key, "--store", url, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert p.returncode == 1, p.stderr
    head = p.stdout.splitlines()[0]
    assert "<img" not in p.stdout and "[l](" not in p.stdout  # no HTML, no link
    assert head == (
        "### gpu-kpi gate: a\\|b &lt;img src=x onerror=alert(1)&gt; \\[l\\](http://e.x) "
        "user@host fails"
    )
    assert all(line.count(" | ") <= 5 for line in p.stdout.splitlines() if line.startswith("|"))
    # the key, @ and all, is a side of compare
    both = gpu_kpi("compare", key, key, "--store", url, "--format", "json")
    assert both.returncode == 0, both.stderr
    assert json.loads(both.stdout)["a"]["runs"] == json.loads(both.stdout)["b"]["runs"]
    # and its Markdown table escapes the key as the gate does (it escaped only "|": the image,
    # the link and the HTML went through)
    table = gpu_kpi("compare", key, key, "--store", url, "--format", "markdown")
    assert table.returncode == 0, table.stderr
    assert "<img" not in table.stdout and "[l](" not in table.stdout
    assert table.stdout.splitlines()[0].startswith(
        "| metric | a\\|b &lt;img src=x onerror=alert(1)&gt; \\[l\\](http://e.x) user@host (4 runs) |"
    )


def test_compare_takes_its_unit_by_the_reports_rule() -> None:
    """The unit the runs holding 90% of a side's priced cost counted, as the ledger takes it:
    a run that crashed before counting tokens (5% of the cost) leaves the sides priced per 1M
    tokens, on the runs that counted them; at 20% of the cost they fall back to GPU-hours."""
    from datetime import UTC, datetime

    from fakes import run_record

    from reports.kpi import runs_frame
    from reports.kpi.comparison import Side, common_unit, side_of

    t = datetime(2026, 11, 2, tzinfo=UTC)

    def side(lost_hours: float) -> Side:
        counted = run_record("counted", t, 19.0, tokens=10**9, price=1.0)
        crashed = run_record("crashed", t, lost_hours, tokens=None, price=1.0)
        return side_of("s", runs_frame([counted, crashed]), prices={})

    a = side(1.0)  # 1 of 20 GPU-hours without tokens: 5%
    assert common_unit(a, a)[0] == "1M tokens"
    b = side(4.75)  # 4.75 of 23.75: 20%
    assert common_unit(a, b)[0] == "busy GPU-hour"


@pytest.mark.timeout(120)
def test_the_gate_never_waits_on_a_fifo_and_writes_through_links(
    store: tuple[str, Clock, list[str], list[str], float], tmp_path: Path
) -> None:
    """A FIFO as ``--baseline`` (nobody writes it) is refused in one line; one as
    ``$GITHUB_STEP_SUMMARY`` that nobody reads is skipped with a warning, and one with a reader
    gets the Markdown; ``--write-baseline`` through a symlink writes its target."""
    import os
    import stat

    from fifos import FifoReader

    url, clock, _, _, _ = store
    bench_run(url, clock, 20, wait_s=0.0, compute_s=0.76, branch="pr-7")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rc, out, err = gate(url, tmp_path / "s.md", "--baseline", str(fifo))
    assert (rc, out) == (2, "")
    assert err == f"gpu-kpi: error: --baseline {fifo}: a FIFO, not a regular file\n"
    kept = tmp_path / "base-2026-11.json"
    kept.write_text("{}")
    link = tmp_path / "base.json"
    link.symlink_to(kept.name)
    rc, out, err = gate(url, fifo, "--last", "5", "--write-baseline", str(link))
    assert rc == 1 and out.startswith("### gpu-kpi gate: llm-bench fails"), err
    assert err == (
        f"gpu-kpi: GITHUB_STEP_SUMMARY not written: {fifo}: a FIFO nobody reads (skipped)\n"
    )
    assert link.is_symlink() and json.loads(kept.read_text())["schema"] == BASELINE_SCHEMA
    reader = FifoReader(fifo)
    rc, out, _ = gate(url, fifo, "--baseline", str(link))
    assert rc == 1 and reader.result() == (out.strip() + "\n\n").encode()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
