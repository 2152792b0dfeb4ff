"""The gpu-kpi command line: real stores, one-line errors; in this process, and in a real
subprocess or shell where the process is what is tested (the demo, its printed commands,
what the CLI imports)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from clirun import gpu_kpi, gpu_kpi_process, python_c

from tracker.record import RunRecord
from tracker.store import RunStore


def in_shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``command`` as a user types it, in a shell started with only ``env``."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def one_line_error(p: subprocess.CompletedProcess[str], text: str) -> None:
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-kpi: error: "), p.stderr
    assert text in lines[0]
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_demo_writes_runs_and_lists_them(tmp_path: Path) -> None:
    p = gpu_kpi_process("demo", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    db = tmp_path / ".gpu-kpi-demo" / "runs.db"
    assert db.exists()
    lines = p.stdout.splitlines()
    assert lines[0].split()[:4] == ["started", "name", "team", "project"]
    # cells two spaces apart (a cell may hold one: a start time, an MFU with its peak)
    table = {cells[1]: cells for cells in (re.split(r"\s{2,}", line) for line in lines[1:6])}
    # 8 x H100 for 3 h at $3.85 = 24 GPU-h, $92.40, 92% utilization, no waste; its GPUs held
    # below their clocks 10 s of every minute (the simulated thermal slowdown): throttled.
    # MFU against the bf16 peak it trained in
    assert table["llama-8b-sft"][-7:] == [
        "24.00", "92", "34% of 989 TF/s bf16", "92.40", "0.00", "finished", "throttled"
    ]  # fmt: skip
    # 4 x A100-80GB for 2 h, owned (the demo's config): 15000 / (4 x 8766) + 0.5 x 0.10 x 1.3
    # = $0.4928/GPU-h, $3.94; 60% util: waste 3.94 x (1 - 60/85) = $1.16, as in the report
    assert table["resnet50-heavy-aug"][-7:] == [
        "8.00", "60", "n/a", "3.94", "1.16", "finished", "input-bound"
    ]  # fmt: skip
    # a plain fp32 run on an H200: its MFU against the fp32 peak it was told
    assert table["vit-l-fp32"][7] == "19% of 66.9 TF/s fp32"
    assert table["notebook-jlee"][-1] == "idle"
    assert table["bert-sweep-17"][-1] == "small-batch"
    assert table["vit-l-fp32"][-1] == "low-efficiency"
    assert "DataLoader workers" in p.stdout
    # the demo ends with the week's report, written where it says
    report_line = next(line for line in lines if line.startswith("the weekly report of "))
    html = Path(report_line.rsplit(": ", 1)[1])
    assert html.parent == tmp_path / ".gpu-kpi-demo" / "reports" and html.exists()
    assert "GPU efficiency report" in html.read_text()
    assert (html.parent / "index.html").exists()
    assert (html.with_suffix(".json")).exists() and (html.with_suffix(".csv")).exists()
    # the demo cluster's Slurm jobs: each run's job held its GPUs 12 minutes before tracking
    # began (llama: 8 x 3.2 h = 25.6 GPU-h, 24 sampled, 1.6 with none); interactive-debug held
    # 4 H100 for 5 h with nothing measuring it: 20 GPU-h, $77.00
    import json

    alloc = json.loads(html.with_suffix(".json").read_text())["allocations"]
    jobs = {j["shown_id"]: j for j in alloc["jobs"]}
    llama, debug = jobs["7001"], jobs["7006"]
    assert (llama["matched"], llama["allocated_gpu_hours"]) == ("id", pytest.approx(25.6))
    assert llama["no_samples_gpu_hours"] == pytest.approx(1.6)
    assert (debug["matched"], debug["no_samples_usd"]) == ("", pytest.approx(20 * 3.85))
    # the week's ledger: the jobs' GPU-time no sample measured is paid, so it is in the
    # headline's spend (beside the waste, not in it), named at the top of the page and in the
    # demo's own lines; its 12-minute head starts and interactive-debug: $85.72
    head = json.loads(html.with_suffix(".json").read_text())["headline"]
    unmeasured = sum(j["no_samples_usd"] for j in alloc["jobs"])
    assert head["unmeasured_usd"] == pytest.approx(unmeasured)
    assert round(unmeasured, 2) == 85.72 and head["jobs"] == 6
    assert round(head["spend_usd"] - unmeasured, 2) == 1512.26  # the runs' own, as before
    assert "$85.72 paid for GPU-time no sample measured" in html.read_text()
    assert "the most: interactive-debug, ana · nlp, $77.00" in html.read_text()
    beside = "  paid beside the waste: not measured $85.72 · throttled $15.40 · nobody held $"
    assert beside in p.stdout  # llama-8b-sft's 4 GPU-h the machine held below its clocks
    # capacity nobody held has one dollar figure on the page: the ledger's, at the top; the
    # Slurm section gives the nodes' hours no job held, never a second owned-GPU price of them
    page = html.read_text()
    # the first screen says who: right under the headline, the largest dollars to act on,
    # interactive-debug's $77.00 first; then by team and the runs to fix, before the trends
    # the page links the week before and the index, both in the archive beside it
    prev = re.search(r'<a href="(\d{4}-W\d\d\.html)" rel="prev">', page)
    assert prev is not None and (html.parent / prev[1]).is_file()
    assert '<a href="index.html">all weeks</a>' in page and (html.parent / "index.html").is_file()
    ids = re.findall(r'<section id="([^"]+)"', page)
    assert ids[:6] == ["headline", "fix-first", "week-more", "breakdowns", "runs", "trends"]
    # the glance's cards and the causes, then who: the savings, capacity, unit cost, energy and
    # owning lines come after the largest dollars, so those stay on a laptop's first screen
    assert page.index('id="top-causes"') < page.index('id="fix-first"') < page.index('id="what-if"')
    first = json.loads(html.with_suffix(".json").read_text())["fix_first"]
    assert (first[0]["run_id"], first[0]["usd"], first[0]["cause"]) == (
        "slurm:demo/7006",
        pytest.approx(77.0),
        "not measured",
    )
    assert [i["usd"] for i in first] == sorted((i["usd"] for i in first), reverse=True)
    assert '<strong>$77.00</strong> <span class="name">interactive-debug</span>' in page
    free = f"${head['unallocated_usd']:,.2f} for the"
    assert page.count(free) == 1 and page.count("of owned GPUs") == 1
    (nodes,) = alloc["capacity"]
    assert (nodes["nodes"], nodes["gpus"], nodes["capacity_gpu_hours"]) == (6, 20, 20 * 168)
    # useful: the simulated GPUs report SM activity; the nodes' figure is their jobs' SM
    # activity weighted by the GPU-hours that have it (every demo job is on the demo's nodes)
    sm_hours = sum(j["sm_known_gpu_hours"] for j in alloc["jobs"])
    sm_used = sum(
        j["sm_active_pct"] * j["sm_known_gpu_hours"] for j in alloc["jobs"] if j["sm_active_pct"]
    )
    assert nodes["sm_known_gpu_hours"] == pytest.approx(sm_hours) and sm_hours > 20
    assert nodes["sm_active_pct"] == pytest.approx(sm_used / sm_hours)
    assert "→ busy → useful</h3>" in html.read_text()
    # where the waste went: each run's idle time held idle, the rest its verdict's; the causes'
    # cents add up to the week's waste
    doc = json.loads(html.with_suffix(".json").read_text())
    causes = {c["cause"]: c for c in doc["waste_by_cause"]}
    assert sum(c["cents"] for c in causes.values()) == round(doc["headline"]["waste_usd"] * 100)
    assert "notebook-jlee" in [t["name"] for t in causes["idle"]["top"]]
    assert [t["name"] for t in causes["input-bound"]["top"]] == ["resnet50-heavy-aug"]
    assert "bert-sweep-17" in [t["name"] for t in causes["small-batch"]["top"]]
    assert "where the waste went</h2>" in html.read_text()
    from email import message_from_bytes, policy

    mail = message_from_bytes(html.with_suffix(".eml").read_bytes(), policy=policy.default)
    text = next(p for p in mail.walk() if p.get_content_type() == "text/plain").get_content()
    top = max(causes.values(), key=lambda c: c["cents"])
    assert f"Where the waste went: {top['label']} ${top['cents'] / 100:,.2f}" in " ".join(
        text.split()
    )
    # a recurring job with a fix: resnet-sweep's loader, marked on the Monday two weeks before
    # the demo's; its 9 runs before and 3 after priced at the owned A100's $0.4928/GPU-h,
    # worked out here from the store's runs
    (fix,) = [c for c in doc["savings"] if c["job_key"] == "resnet-sweep"]
    assert (fix["how"], fix["note"], fix["unit"]) == (
        "mark",
        "loader: 8 workers, pin_memory",
        "1k samples",
    )
    assert (fix["runs_before"], fix["runs_after"]) == (9, 3)
    assert (fix["verdict_before"], fix["verdict_after"]) == ("input-bound", "healthy")
    mark = datetime.fromisoformat(fix["at"])
    rate = 15000 / (4 * 8766) + 0.5 * 0.10 * 1.3
    with RunStore(f"sqlite:///{db}") as store:
        sweeps = [r for r in store.list_runs() if r.name.startswith("resnet-sweep-")]
    before = [r for r in sweeps if r.started_at < mark]
    after = [r for r in sweeps if r.started_at >= mark]
    assert (len(before), len(after)) == (9, 3)

    def per_1k(runs: list[RunRecord]) -> float:
        return sum(r.gpu_hours * rate for r in runs) / sum((r.samples or 0) / 1000 for r in runs)

    assert fix["usd_per_unit_before"] == pytest.approx(per_1k(before))
    assert fix["usd_per_unit_after"] == pytest.approx(per_1k(after))
    saved = per_1k(before) * sum((r.samples or 0) / 1000 for r in after) - sum(
        r.gpu_hours * rate for r in after
    )
    assert fix["usd_to_date"] == pytest.approx(saved) and saved > 0
    assert fix["usd_per_week"] == pytest.approx(saved / 3)  # three weeks since the mark
    assert fix["change_pct"] < -25  # 58% → 88% utilization: each sample a third cheaper
    assert f"resnet-sweep: input-bound → healthy since {fix['week']}" in html.read_text()
    assert "What fixes saved:" in " ".join(text.split())
    # the capacity what-if: the top runs' waste in GPU-hours at their prices, ÷ 168 hours
    wasteful = sorted(
        (r for r in doc["runs"] if (r["waste_usd"] or 0) > 0 and (r["spend_usd"] or 0) > 0),
        key=lambda r: -r["waste_usd"],
    )[:10]
    returned = sum(r["waste_usd"] / r["spend_usd"] * r["gpu_hours"] for r in wasteful)
    what = doc["capacity_what_if"]
    assert what["runs"] == len(wasteful) and what["gpu_hours"] == pytest.approx(returned)
    assert what["gpus"] == pytest.approx(returned / 168)
    assert (what["owned_model"], what["purchase_usd"]) == (
        "A100-80GB",
        pytest.approx(returned / 168 * 15000),
    )
    assert "Capacity what-if: fixing the top" in " ".join(text.split())
    # the demo's budgets: vision over its $150 week (its week's spend, as the report has it);
    # nlp's month, the one the week ends in (how far into it depends on today's date)
    week = json.loads(html.with_suffix(".json").read_text())
    *nlp, vision = week["budgets"]  # nlp: the month before too when the week began in it
    vision_spend = next(t["spend_usd"] for t in week["by_team"] if t["team"] == "vision")
    assert (vision["team"], vision["label"], vision["level"]) == ("vision", html.stem, 100)
    assert vision["spend_usd"] == pytest.approx(vision_spend) and vision_spend > 150
    sunday = datetime.fromisoformat(week["week_end"]) - timedelta(days=1)
    assert [(b["team"], b["period"], b["budget_usd"]) for b in nlp][-1] == ("nlp", "month", 6000)
    assert (nlp[-1]["label"], nlp[-1]["until"]) == (f"{sunday:%Y-%m}", week["week_end"])
    # all 12 weeks of the history, each with its page and email, the index listing them all
    weeks = sorted(p.stem for p in html.parent.glob("*-W*.json"))
    assert len(weeks) == 12 and weeks[-1] == html.stem
    assert all(
        (html.parent / f"{w}.eml").exists() and (html.parent / f"{w}.html").exists() for w in weeks
    )
    index = (html.parent / "index.html").read_text()
    assert all(f'href="{w}.html"' in index for w in weeks)
    assert "every week so far (12 written now, each a page, an email, JSON and CSV): " in p.stdout

    # the commands it prints reproduce its figures from a fresh shell: the report of the week
    # (budgets included) and the runs at the report's prices
    again_lines = lines[
        lines.index(next(x for x in lines if x.startswith("the demo's config"))) + 1 :
    ]
    report_cmd = next(x.strip() for x in again_lines if " report --config " in x)
    runs_cmd = next(x.strip() for x in again_lines if " runs --config " in x)
    fresh = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    redo = in_shell(report_cmd, tmp_path, fresh)
    assert redo.returncode == 0, redo.stderr
    assert json.loads(html.with_suffix(".json").read_text())["headline"] == week["headline"]
    assert json.loads(html.with_suffix(".json").read_text())["budgets"] == week["budgets"]
    shown = in_shell(runs_cmd, tmp_path, fresh)
    assert shown.returncode == 0, shown.stderr
    row = next(x.split() for x in shown.stdout.splitlines() if "resnet50-heavy-aug" in x)
    assert row[-4:-2] == ["3.94", "1.16"]
    # the README's compare and gate, as written, on the demo's store: the loader fix beyond the
    # noise, and the newest run passing the gate against the two before it
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    cmds = [
        x
        for x in readme.splitlines()
        if x.startswith(("gpu-kpi compare --config", "gpu-kpi gate --config"))
    ]
    assert len(cmds) == 2
    path = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    compared, gated = (in_shell(c, tmp_path, path) for c in cmds)
    assert compared.returncode == 0, compared.stderr
    cost_row = next(x for x in compared.stdout.splitlines() if x.startswith("$ per 1k samples"))
    assert f"{fix['change_pct']:.1f}%".replace("-", "−") in cost_row and "beyond noise" in cost_row
    assert compared.stdout.splitlines()[-1].split()[1:] == ["input-bound", "healthy"]
    assert gated.returncode == 0 and "### gpu-kpi gate: resnet-sweep passes" in gated.stdout

    listed = gpu_kpi("runs", "--store", f"sqlite:///{db}", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    everything = json.loads(listed.stdout)
    runs = {r["name"]: r for r in everything if "demo" in r["tags"]}
    assert len(runs) == 5
    # and the fleet's history: 6 recurring jobs over the 12 weeks up to the demo's week
    assert sum("demo-history" in r["tags"] for r in everything) == 6 * 12
    # a second demo replaces its runs rather than adding copies to the week
    again = gpu_kpi_process("demo", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    relisted = json.loads(gpu_kpi("runs", "--store", f"sqlite:///{db}", "--format", "json").stdout)
    assert len(relisted) == len(everything)
    assert runs["notebook-jlee"]["idle_usd"] == pytest.approx(1.20)
    assert runs["llama-8b-sft"]["tags"] == ["demo"]
    assert runs["llama-8b-sft"]["gpu_source"] == "simulated"


def test_prices_table_and_one_model() -> None:
    p = gpu_kpi("prices", "--gpu", "NVIDIA A100-SXM4-80GB", "--format", "json")
    assert p.returncode == 0, p.stderr
    (row,) = json.loads(p.stdout)
    assert row["gpu"] == "A100-80GB" and row["usd_per_gpu_hour"] == 2.00
    assert "RunPod" in row["source"]
    env_override = gpu_kpi("prices", "--gpu", "H100", env={"GPU_KPI_PRICE_H100": "2.25"})
    assert "2.25" in env_override.stdout


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("prices", "--gpu", "B300"), "unknown GPU model 'B300'"),
        (("runs", "--week", "2026-W54"), "week '2026-W54' does not exist"),
        (("runs", "--week", "last week"), "bad week 'last week'"),
        (
            ("runs", "--week", "2026-W10", "--tz", "Mars/Olympus"),
            "unknown time zone 'Mars/Olympus'",
        ),
        (("runs", "--store", "postgresql://kpi:hunter2@127.0.0.1:1/db"), "kpi:***@127.0.0.1:1"),
        (("runs", "--store", "mysql://x/y"), "mysql"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], text: str) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    p = gpu_kpi(
        *args, env={"GPU_KPI_STORE": f"sqlite:///{tmp_path}/s.db", "GPU_KPI_CONFIG": str(empty)}
    )
    one_line_error(p, text)
    assert "hunter2" not in p.stderr


def test_bad_config_file_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[thresholds]\ntarget_util_pct = 'high'\n")
    one_line_error(gpu_kpi("prices", "--config", str(cfg)), "target_util_pct: expected")
    one_line_error(
        gpu_kpi("prices", "--config", str(tmp_path / "missing.toml")),
        "missing.toml: No such file or directory",
    )


def test_help_everywhere_and_no_heavy_imports() -> None:
    for sub in ("runs", "prices", "sync", "demo", "report"):
        p = gpu_kpi(sub, "--help")
        assert p.returncode == 0 and "usage: gpu-kpi " + sub in p.stdout
    code = (
        "import sys, runpy; sys.argv=['gpu-kpi','--help']\n"
        "try:\n    runpy.run_module('reports.cli', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "heavy = [m for m in ('torch','lightning','transformers','pandas','wandb',"
        "'sqlalchemy','pynvml','jinja2','apscheduler') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    p = python_c(code)
    assert "HEAVY []" in p.stdout


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--week", "2026-W54"], "week '2026-W54' does not exist: 2026 has 53 ISO weeks"),
        (["--format", "pdf"], "unknown format pdf: use a comma-separated list of"),
        (["--tz", "Nowhere/City"], "unknown time zone 'Nowhere/City'"),
    ],
)
def test_a_bad_report_flag_is_answered_before_anything_heavy_loads(
    args: list[str], error: str
) -> None:
    """A typo in a flag is answered at once: no pandas, SQLAlchemy or matplotlib loaded."""
    code = (
        "import sys\nfrom reports.cli import main\n"
        f"code = main(['report', *{args!r}])\n"
        "heavy = [m for m in ('pandas', 'sqlalchemy', 'matplotlib') if m in sys.modules]\n"
        "print('EXIT', code, 'HEAVY', heavy)"
    )
    p = python_c(code)
    assert "EXIT 2 HEAVY []" in p.stdout, p.stdout + p.stderr
    assert p.stderr.startswith(f"gpu-kpi: error: {error}") and p.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (["prices", "--gpu", "H100", "--format", "json"], 0, '"gpu": "H100"'),
        (["prices", "--gpu", "B300"], 2, "gpu-kpi: error: unknown GPU model 'B300'"),
    ],
)
def test_the_program_exits_with_main_s_status_its_objects_frozen(
    args: list[str], status: int, says: str
) -> None:
    # the installed command is entry(): main's status, every object alive frozen out of the
    # collector before the interpreter's teardown (checked by an exit handler, which runs
    # after entry() and before the teardown)
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="gpu-kpi")
    assert script.value == "reports.cli:entry"
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('FROZEN', gc.get_freeze_count(), len(gc.get_objects()),"
        " file=sys.stderr))\n"
        f"sys.argv = ['gpu-kpi', *{args!r}]\n"
        "from reports.cli import entry\n"
        "entry()\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert p.returncode == status, p.stderr
    assert says in p.stdout + p.stderr
    frozen, unfrozen = map(int, re.findall(r"FROZEN (\d+) (\d+)", p.stderr)[0])
    assert frozen > 10_000 and unfrozen < frozen / 100, p.stderr


def test_a_command_reads_the_now_main_is_given(tmp_path: Path) -> None:
    """``main(now=...)`` is the time a command reads as now (one reading of the clock when not
    given): a mark made without ``--at`` is dated with it; a naive time is refused."""
    from datetime import UTC

    import reports.cli

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    RunStore(url).close()
    now = datetime(2026, 12, 7, 9, 30, tzinfo=UTC)
    assert (
        gpu_kpi("mark", "llm-bench", "loader: 8 workers", "--store", url, now=now).returncode == 0
    )
    listed = gpu_kpi("mark", "--list", "--store", url)
    assert listed.stdout == "2026-12-07 09:30 UTC  llm-bench  loader: 8 workers\n"
    with pytest.raises(ValueError, match="timezone-aware"):
        reports.cli.main(["mark", "--list", "--store", url], now=datetime(2026, 12, 7))
