"""Every command once as the docs tell a new user to type it: in a fresh process, no
``--store``, no ``--config``, no ``GPU_KPI_*`` variable, a home folder of its own (the default
store in its data directory, the default config path empty). 1,650 tests once passed while
every ``gpu-kpi import`` into the default store ended in a traceback: each test here reads the
command's output and the default store, never a store it passed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from clirun import home_env

ROOT = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3"
SACCT = "\n".join(
    [
        "Cluster|JobID|JobIDRaw|JobName|User|Account|Partition|State|Start|End|AllocTRES|NodeList",
        "gpukpi|501|501|train|ana|nlp|gpu|COMPLETED|2026-11-24T10:00:00|2026-11-24T12:00:00|"
        "cpu=8,gres/gpu:h100=2,gres/gpu=2,node=1|gpu01",
    ]
)

pytestmark = pytest.mark.slow  # a fresh process per command: the real entry point


def _nvidia_smi_log(path: Path) -> Path:
    """Two H100s for two hours of Tuesday 2026-11-24 (UTC), one at 90%, one at 20%: 4 GPU-h."""
    rows = [
        "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], "
        "memory.total [MiB], power.draw [W]"
    ]
    start = datetime(2026, 11, 24, 10, 0)
    for m in range(121):
        t = start + timedelta(minutes=m)
        for i, util in ((0, 90), (1, 20)):
            rows.append(
                f"{t:%Y/%m/%d %H:%M:%S}.000, {i}, GPU-{i}abc, {H100}, {util} %, 40000 MiB, "
                "81559 MiB, 300.00 W"
            )
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def user(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``gpu-kpi ARGS`` as a user with a home folder of their own types it."""
    home = tmp_path_factory.mktemp("home")
    env = home_env(home) | {"PYTHONPATH": str(ROOT)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "reports.cli", *args],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    run.home = home  # type: ignore[attr-defined]
    return run


def _ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, f"{p.args}: exit {p.returncode}\n{p.stderr}"
    assert "Traceback" not in p.stderr, p.stderr
    return p.stdout


def test_a_new_users_commands_with_the_defaults(
    user: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    home: Path = user.home  # type: ignore[attr-defined]
    log = _nvidia_smi_log(home / "gpus.csv")
    # docs/imports.md: the first example, into the default store
    out = _ok(user("import", "nvidia-smi", str(log), "--price", "2"))
    store = home / ".local" / "share" / "gpu-kpi" / "runs.db"
    assert store.is_file(), sorted(str(p) for p in home.rglob("*"))
    # two GPUs for two hours (a reading covers the minute before it)
    assert f"imported 1 run(s), 4.0 GPU-h, 240 minute rows into sqlite:///{store}" in out
    # the run it wrote, as `runs` lists it
    listed = _ok(user("runs")).splitlines()
    assert listed[0].startswith("started") and len(listed) == 2 and "2xH100" in listed[1]
    # the week's report into ./reports-out, the default
    _ok(user("report", "--week", "2026-W48"))
    page = home / "reports-out" / "2026-W48.html"
    assert page.is_file() and (home / "reports-out" / "index.html").is_file()
    assert "4.0 GPU-h across 1 run cost $8.00" in " ".join(page.read_text().split())
    # prices, chargeback for finance, a mark, the scheduler's side, the service's checks
    assert "H100" in _ok(user("prices"))
    charge = _ok(user("chargeback", "--since", "2026-W48", "--until", "2026-W48"))
    assert charge.splitlines()[0].startswith("week,") and "2026-W48" in charge
    assert "marked 'gpus'" in _ok(user("mark", "gpus", "loader: 8 workers", "--at", "2026-11-23"))
    assert "gpus  loader: 8 workers" in _ok(user("mark", "--list"))
    saved = home / "sacct.txt"
    saved.write_text(SACCT)
    assert "imported 1 Slurm job(s) holding 4.0 GPU-h into " in _ok(
        user("import", "slurm", str(saved))
    )
    note = _ok(user("job", "gpukpi/501", "--no-sacct"))
    assert "Job ID: 501 on gpukpi" in note and "Allocated: 4.0 GPU-h" in note
    check = user("serve", "--check-config")
    assert check.returncode == 0 and check.stdout.startswith("config OK: 0 recipient(s)")
    assert "no [[recipients]]" in check.stderr
    _ok(user("send", "--week", "2026-W48", "--to", "lead@example.com", "--dry-run"))
    assert (home / "reports-out" / "2026-W48.eml").is_file()
    _ok(user("sync"))
    _ok(user("store", "rebuild-rollups"))
    # a command that needs what a new user has not set up says so in one line, exit 2
    budgets = user("budgets")
    assert budgets.returncode == 2 and budgets.stderr.count("\n") == 1
    assert "no budgets: add [[budgets]]" in budgets.stderr
