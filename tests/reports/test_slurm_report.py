"""Slurm's jobs in the weekly report: sacct's output imported with ``gpu-kpi import slurm``,
matched to a tracked run by its job id and to nvidia-smi minutes by node and time, each job's
GPU-hours and dollars in the JSON, the CSV and the HTML worked out by hand."""

from __future__ import annotations

import csv
import email
import email.policy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from clirun import gpu_kpi
from fakes import minutes, run_record

from tracker.store import RunStore

pytestmark = pytest.mark.usefixtures("blank_charts")  # the pages' text, not their charts

TUE = datetime(2026, 11, 24, tzinfo=UTC)  # in 2026-W48
TEN = TUE + timedelta(hours=10)
HEADER = "Cluster|JobID|JobIDRaw|JobName|User|Account|Partition|State|Start|End|AllocTRES|NodeList"


def _sacct_line(
    job: str, name: str, account: str, start: datetime, end: datetime, tres: str, node: str
) -> str:
    t = "%Y-%m-%dT%H:%M:%S"
    return (
        f"gpukpi|{job}|{job}|{name}|ana|{account}|gpu|COMPLETED|{start:{t}}|{end:{t}}|{tres}|{node}"
    )


SACCT = "\n".join(
    [
        HEADER,
        # tracked, busy for its first hour, then nothing sampled it
        _sacct_line(
            "101",
            "=HYPERLINK(1)",
            "nlp",
            TEN,
            TEN + timedelta(hours=2),
            "cpu=8,gres/gpu:h100=2,gres/gpu=2,node=1",
            "n1",
        ),
        # untracked, no telemetry
        _sacct_line(
            "102",
            "<script>alert(1)</script>",
            "nlp",
            TEN,
            TEN + timedelta(hours=1),
            "cpu=8,gres/gpu:h100=2,gres/gpu=2,node=1",
            "n2",
        ),
        # untracked, holding 2 GPUs doing nothing (nvidia-smi of n3 at 0%)
        _sacct_line(
            "103",
            "sleeper",
            "vision",
            TEN,
            TEN + timedelta(minutes=90),
            "gres/gpu:h100=2,gres/gpu=2",
            "n3",
        ),
        # untracked, busy (nvidia-smi of n4 at 90%)
        _sacct_line(
            "104",
            "busy",
            "vision",
            TEN,
            TEN + timedelta(hours=1),
            "gres/gpu:h100=2,gres/gpu=2",
            "n4",
        ),
        # a step and a job that never started: left out
        "gpukpi|104.batch|104.batch|batch||vision||COMPLETED|2026-11-24T10:00:00|2026-11-24T11:00:00|cpu=1|n4",
        "gpukpi|105|105|later|ana|nlp|gpu|CANCELLED by 0|None|2026-11-24T09:00:00||None assigned",
    ]
)


def _fill(store_url: str) -> None:
    runs = [
        run_record("ra", TEN, 1.0, gpus=2, util=80.0, host="n1", links={"slurm": "gpukpi/101"}),
        run_record(
            "smi3",
            TEN - timedelta(hours=1),
            3.0,
            gpus=2,
            util=0.0,
            host="n3.cluster.local",
            source="nvidia-smi",
        ),
        run_record("smi4", TEN, 1.0, gpus=2, util=90.0, host="n4", source="nvidia-smi"),
    ]
    rows = minutes("ra", TEN, 60, 80.0, "a0") + minutes("ra", TEN, 60, 80.0, "a1")
    rows += minutes("smi3", TEN - timedelta(hours=1), 180, 0.0, "c0") + minutes(
        "smi3", TEN - timedelta(hours=1), 180, 0.0, "c1"
    )
    rows += minutes("smi4", TEN, 60, 90.0, "d0") + minutes("smi4", TEN, 60, 90.0, "d1")
    with RunStore(store_url) as store:
        for r in runs:
            store.upsert_run(r.replace(gpu_source="nvml"))
        store.upsert_samples(rows)


def test_jobs_in_the_weekly_report_by_hand(store_url: str, tmp_path: Path) -> None:
    _fill(store_url)
    saved = tmp_path / "sacct.txt"
    saved.write_text(SACCT)
    env = {"GPU_KPI_STORE": store_url}
    imp = gpu_kpi("import", "slurm", str(saved), "--account-team", "nlp=NLP", env=env)
    assert imp.returncode == 0, imp.stderr
    assert "imported 4 Slurm job(s) holding 11.0 GPU-h into " in imp.stdout
    # what was left out after the store it went into, not before it
    assert imp.stdout.rstrip().endswith("; left out 1 step row(s), 1 job(s) that never started")
    out = tmp_path / "out"
    rep = gpu_kpi(
        "report",
        "--week",
        "2026-W48",
        "--format",
        "json,csv,html,email",
        "--out",
        str(out),
        env=env,
    )
    assert rep.returncode == 0, rep.stderr
    d = json.loads((out / "2026-W48.json").read_text())["allocations"]
    # allocated: 101 2 GPUs x 2 h, 102 2 x 1 h, 103 2 x 1.5 h, 104 2 x 1 h = 11 GPU-h at $3.85
    # sampled: 101's first hour (2), 103's 1.5 h (3, all under 5%: idle), 104's hour (2)
    assert d["totals"] == pytest.approx(
        {
            "jobs": 4,
            "allocated_gpu_hours": 11.0,
            "sampled_gpu_hours": 7.0,
            "idle_gpu_hours": 3.0,
            "no_samples_gpu_hours": 4.0,
            "allocated_usd": 11 * 3.85,
            "idle_usd": 3 * 3.85,
            "no_samples_usd": 4 * 3.85,
            "unpriced_gpu_hours": 0.0,
        }
    )
    jobs = {j["job_id"]: j for j in d["jobs"]}
    assert [j["job_id"] for j in d["jobs"]] == ["103", "101", "102", "104"]  # most unused $ first
    assert (jobs["101"]["matched"], jobs["101"]["runs"], jobs["101"]["team"]) == (
        "id",
        ["ra"],
        "NLP",
    )
    assert (jobs["103"]["matched"], jobs["103"]["runs"], jobs["103"]["team"]) == (
        "node",
        ["smi3"],
        "vision",
    )
    assert (jobs["102"]["matched"], jobs["102"]["no_samples_usd"]) == ("", pytest.approx(7.70))
    assert jobs["104"]["idle_gpu_hours"] == 0.0 and jobs["104"][
        "sampled_gpu_hours"
    ] == pytest.approx(2.0)
    assert (
        jobs["101"]["start"] == "2026-11-24T10:00:00+00:00" and jobs["101"]["gpu_model"] == "H100"
    )
    # the chargeback split: NLP held 101 (4 GPU-h: its first hour sampled at 80%, the second
    # not) and 102 (2, nothing sampled); vision 103 (3, idle) and 104 (2, busy)
    teams = {t["team"]: t for t in d["by_team"]}
    assert [t["team"] for t in d["by_team"]] == ["NLP", "vision"]  # most allocated $ first
    nlp, vision = teams["NLP"], teams["vision"]
    assert (nlp["jobs"], nlp["allocated_gpu_hours"], nlp["productive_gpu_hours"]) == (
        2,
        pytest.approx(6.0),
        pytest.approx(2.0),
    )
    assert (
        nlp["allocated_usd"],
        nlp["productive_usd"],
        nlp["idle_usd"],
        nlp["no_samples_usd"],
    ) == (
        pytest.approx(6 * 3.85),
        pytest.approx(2 * 3.85),
        0.0,
        pytest.approx(4 * 3.85),
    )
    assert (
        vision["allocated_usd"],
        vision["productive_usd"],
        vision["idle_usd"],
        vision["no_samples_usd"],
    ) == (pytest.approx(5 * 3.85), pytest.approx(2 * 3.85), pytest.approx(3 * 3.85), 0.0)
    # the CSV: the totals and each job, the formula-like name neutralized
    with (out / "2026-W48.csv").open(newline="") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if r["section"] in ("allocations", "allocation_team", "job")
        ]
    got = {(r["section"], r["key"], r["metric"]): r["value"] for r in rows}
    assert float(got[("allocations", "", "idle_usd")]) == pytest.approx(11.55)
    assert got[("job", "gpukpi/101", "name")] == "'=HYPERLINK(1)"
    assert float(got[("job", "gpukpi/103", "idle_gpu_hours")]) == pytest.approx(3.0)
    assert float(got[("allocation_team", "NLP", "no_samples_usd")]) == pytest.approx(15.40)
    # the HTML: the section, its figures, the job's name as text
    html = (out / "2026-W48.html").read_text()
    section = html[html.index('id="allocations"') : html.index('id="causes"')]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section and "<script>alert" not in section
    assert "$42.35" in section and "$11.55" in section and "$15.40" in section
    assert "by job id" in section and "by node and time" in section
    assert "By team: what the allocated GPU-time paid for" in section
    # the email: one line of it, in both parts
    msg = email.message_from_bytes((out / "2026-W48.eml").read_bytes(), policy=email.policy.default)
    text = " ".join(msg.get_body(("plain",)).get_content().split())
    said = (
        "Slurm allocated 11.0 GPU-h ($42.35) to 4 jobs: allocated and idle 3.0 GPU-h ($11.55), "
        "allocated with no samples 4.0 GPU-h ($15.40)."
    )
    assert said in text
    assert (
        "allocated and idle <strong>3.0 GPU-h</strong> ($11.55)"
        in msg.get_body(("html",)).get_content()
    )


def test_the_chargeback_charges_what_each_team_held(store_url: str, tmp_path: Path) -> None:
    """``gpu-kpi chargeback``: beside the runs' rows, each team's allocated dollars split into
    productive, allocated-idle and allocated with no samples, on its row of the GPU model with
    no project; the columns add up to the report's totals."""
    _fill(store_url)
    saved = tmp_path / "sacct.txt"
    saved.write_text(SACCT)
    env = {"GPU_KPI_STORE": store_url}
    assert (
        gpu_kpi("import", "slurm", str(saved), "--account-team", "nlp=NLP", env=env).returncode == 0
    )
    out = tmp_path / "cb.csv"
    done = gpu_kpi(
        "chargeback", "--since", "2026-W48", "--until", "2026-W48", "--out", str(out), env=env
    )
    assert done.returncode == 0, done.stderr
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    by = {(r["team"], r["project"], r["gpu_model"]): r for r in rows}
    nlp, vision = by[("NLP", "", "H100")], by[("vision", "", "H100")]
    split = ("allocated_usd", "productive_usd", "allocated_idle_usd", "allocated_no_data_usd")
    assert [float(nlp[c]) for c in split] == pytest.approx([23.10, 7.70, 0.0, 15.40])
    assert [float(vision[c]) for c in split] == pytest.approx([19.25, 7.70, 11.55, 0.0])
    # no run of NLP names no project: the row's GPU-hours and spend are its job's unsampled
    # time (the week's ledger: 4 GPU-h x $3.85 no sample measured), charged, not a run
    assert (nlp["runs"], nlp["gpu_hours"], nlp["spend_usd"]) == ("0", "4.0", "15.4")
    assert sum(float(r["allocated_usd"]) for r in rows) == pytest.approx(42.35)
    assert sum(float(r["allocated_gpu_hours"]) for r in rows) == pytest.approx(11.0)


def test_a_job_without_samples_by_its_steps_average(store_url: str, tmp_path: Path) -> None:
    """sacct saved without -X, with the steps' TRESUsageInAve (a site gathering GPU
    accounting): job 102, which no sample covers, is counted at its steps' average, 3% (idle
    under the 5% rule), labelled so; 101's steps say 50%, but its samples win."""
    _fill(store_url)
    lines = SACCT.splitlines()
    tres = (
        "cpu=00:52:45,energy=0,fs/disk=2048,gres/gpumem={mem},gres/gpuutil={util},mem=1.2M,"
        "pages=0,vmem=100K"
    )
    step = "gpukpi|{id}|{id}|batch||nlp||COMPLETED|2026-11-24T10:00:00|2026-11-24T11:00:00|cpu=1|n2|{s}|{t}"
    saved = tmp_path / "sacct-steps.txt"
    saved.write_text(
        "\n".join(
            [
                lines[0] + "|ElapsedRaw|TRESUsageInAve",
                *(line + "||" for line in lines[1:]),
                step.format(id="102.batch", s=3600, t=tres.format(mem="812M", util=3)),
                step.format(id="102.extern", s=3600, t="cpu=00:00:00,energy=0,mem=0"),
                step.format(id="101.batch", s=7200, t=tres.format(mem="40G", util=50)),
            ]
        )
    )
    env = {"GPU_KPI_STORE": store_url}
    assert gpu_kpi("import", "slurm", str(saved), env=env).returncode == 0
    out = tmp_path / "out"
    rep = gpu_kpi(
        "report", "--week", "2026-W48", "--format", "json,html", "--out", str(out), env=env
    )
    assert rep.returncode == 0, rep.stderr
    d = json.loads((out / "2026-W48.json").read_text())["allocations"]
    jobs = {j["job_id"]: j for j in d["jobs"]}
    j102, j101 = jobs["102"], jobs["101"]
    assert (j102["matched"], j102["util_pct"]) == ("sacct", pytest.approx(3.0))
    assert (j102["sampled_gpu_hours"], j102["idle_gpu_hours"], j102["no_samples_gpu_hours"]) == (
        pytest.approx(2.0),
        pytest.approx(2.0),
        0.0,
    )
    assert (j101["matched"], j101["util_pct"]) == ("id", pytest.approx(80.0))
    # the totals: 7 + 2 sampled, 3 + 2 idle, 4 - 2 with nothing
    assert (
        d["totals"]["sampled_gpu_hours"],
        d["totals"]["idle_gpu_hours"],
        d["totals"]["no_samples_gpu_hours"],
    ) == pytest.approx((9.0, 5.0, 2.0))
    assert "sacct&#39;s step average" in (out / "2026-W48.html").read_text()
    note = gpu_kpi("job", "102", "--no-sacct", env=env)
    assert note.returncode == 0, note.stderr
    assert "GPU efficiency: 3.0%" in note.stdout
    assert "the average of its steps' TRESUsageInAve gres/gpuutil" in note.stdout


def test_a_store_without_imports_has_no_section(store_url: str, tmp_path: Path) -> None:
    _fill(store_url)
    out = tmp_path / "out"
    rep = gpu_kpi(
        "report",
        "--week",
        "2026-W48",
        "--format",
        "json,html",
        "--out",
        str(out),
        env={"GPU_KPI_STORE": store_url},
    )
    assert rep.returncode == 0, rep.stderr
    assert json.loads((out / "2026-W48.json").read_text())["allocations"] is None
    assert 'id="allocations"' not in (out / "2026-W48.html").read_text()


def test_a_week_without_jobs_says_none_held_gpus(store_url: str, tmp_path: Path) -> None:
    # jobs were imported (2026-W48), but not in the week reported (W47, its runs alone): the
    # section is there and says so, its totals zero; no figure of the week has a job in it
    _fill(store_url)
    earlier = TEN - timedelta(days=7)
    with RunStore(store_url) as store:
        store.upsert_run(
            run_record("next", earlier, 1.0, gpus=2, util=50.0).replace(gpu_source="nvml")
        )
        store.upsert_samples(
            minutes("next", earlier, 60, 50.0, "e0") + minutes("next", earlier, 60, 50.0, "e1")
        )
    saved = tmp_path / "sacct.txt"
    saved.write_text(SACCT)
    env = {"GPU_KPI_STORE": store_url}
    assert gpu_kpi("import", "slurm", str(saved), env=env).returncode == 0
    out = tmp_path / "out"
    rep = gpu_kpi(
        "report", "--week", "2026-W47", "--format", "json,html", "--out", str(out), env=env
    )
    assert rep.returncode == 0, rep.stderr
    week = json.loads((out / "2026-W47.json").read_text())
    assert week["allocations"]["jobs"] == [] and week["allocations"]["totals"]["jobs"] == 0
    assert week["headline"]["jobs"] == 0 and week["headline"]["gpu_hours"] == pytest.approx(2.0)
    html = (out / "2026-W47.html").read_text()
    assert 'id="allocations"' in html and "No job or pod held GPUs this week." in html


def test_bad_imports_are_one_line_and_write_nothing(store_url: str, tmp_path: Path) -> None:
    env = {"GPU_KPI_STORE": store_url}
    _fill(store_url)
    bad = tmp_path / "bad.txt"
    bad.write_text("not|sacct\n1|2\n")
    for args in (
        ("import", "slurm", str(bad)),
        ("import", "slurm", str(tmp_path / "missing.txt")),
        ("import", "slurm", "--account-team", "nlp"),
        ("import", "slurm", "--since", "2026-11-30", "--until", "2026-11-23"),
        ("import", "slurm", str(bad), "--since", "2026-11-23"),
        ("import", "slurm", "--price", "3"),
        ("import", "nvidia-smi"),
    ):
        p = gpu_kpi(*args, env=env)
        assert p.returncode != 0 and p.stdout == "", args
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, (
            args,
            p.stderr,
        )
    with RunStore(store_url) as store:
        from reports.data.allocations import has_allocations

        assert not has_allocations(store)


def test_rows_that_are_no_job_are_skipped_and_named(store_url: str, tmp_path: Path) -> None:
    _fill(store_url)
    saved = tmp_path / "sacct.txt"
    t0 = TEN.strftime("%Y-%m-%dT%H:%M:%S")
    t1 = (TEN + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    saved.write_text(
        "\n".join(
            [
                HEADER,
                f"gpukpi|201|201|ok|ana|nlp|gpu|COMPLETED|{t0}|{t1}|gres/gpu=1|n1",
                f"gpukpi|202|202|backwards|ana|nlp|gpu|COMPLETED|{t1}|{t0}|gres/gpu=1|n1",
                f"gpukpi|203|203|nodes|ana|nlp|gpu|COMPLETED|{t0}|{t1}|gres/gpu=1|n[1-",
                f"gpukpi|204|204|huge|ana|nlp|gpu|COMPLETED|{t0}|{t1}|gres/gpu=99999999|n1",
            ]
        )
    )
    p = gpu_kpi("import", "slurm", str(saved), env={"GPU_KPI_STORE": store_url})
    assert p.returncode == 0, p.stderr
    assert "imported 1 Slurm job(s)" in p.stdout
    skipped = [line for line in p.stdout.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 3
    assert "job 202: ends (2026-11-24T10:00:00+00:00) before it starts" in skipped[0]
    assert "job 203: node list 'n[1-': a bracket that does not close" in skipped[1]
    assert "job 204: 99999999 GPUs: not from 0 to 1,000,000" in skipped[2]


def test_the_weeks_slurm_gauges(store_url: str, tmp_path: Path) -> None:
    from reports.build import compute
    from reports.request import Request
    from reports.service.prom import kpi_samples

    _fill(store_url)
    saved = tmp_path / "sacct.txt"
    saved.write_text(SACCT)
    assert gpu_kpi("import", "slurm", str(saved), env={"GPU_KPI_STORE": store_url}).returncode == 0
    c = compute(store_url, Request(week="2026-W48", tz=UTC), now=datetime(2026, 12, 2, tzinfo=UTC))
    s = kpi_samples(c.kpis, None, c.kpis)
    week = ("2026-W48", "util", "slurm")
    got = {name: dict(s[name])[week] for name in s if name.startswith("gpu_kpi_week_scheduler_")}
    assert got == pytest.approx(
        {
            "gpu_kpi_week_scheduler_allocated_gpu_seconds": 11 * 3600,
            "gpu_kpi_week_scheduler_idle_gpu_seconds": 3 * 3600,
            "gpu_kpi_week_scheduler_unsampled_gpu_seconds": 4 * 3600,
            "gpu_kpi_week_scheduler_idle_usd": 3 * 3.85,
            "gpu_kpi_week_scheduler_unsampled_usd": 4 * 3.85,
        }
    )


def test_a_sites_first_day_jobs_alone_into_the_default_store(tmp_path: Path) -> None:
    """As a new user types it, no --store and no config: sacct's output imported into the
    default store, then the week's report of those jobs alone (no telemetry yet): 4 jobs, 11
    GPU-h of H100 at $3.85, every second of it paid and not measured."""
    saved = tmp_path / "sacct.txt"
    saved.write_text(SACCT)
    imp = gpu_kpi("import", "slurm", str(saved), cwd=tmp_path)
    assert imp.returncode == 0, imp.stderr
    assert "imported 4 Slurm job(s) holding 11.0 GPU-h" in imp.stdout
    assert "into sqlite:///" in imp.stdout and "runs.db" in imp.stdout
    rep = gpu_kpi("report", "--week", "2026-W48", "--format", "json", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    head = json.loads((tmp_path / "reports-out" / "2026-W48.json").read_text())["headline"]
    assert (head["runs"], head["jobs"]) == (0, 4)
    assert head["gpu_hours"] == pytest.approx(11.0)
    assert head["spend_usd"] == pytest.approx(11 * 3.85)
    assert head["unmeasured_usd"] == pytest.approx(11 * 3.85)
