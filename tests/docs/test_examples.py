"""Every shell example of README.md and docs/ runs as written (``examples.py`` reads them).

Each page's commands run in order, through the installed ``gpu-kpi`` entry point and ``bash``,
in a sandbox of the page's own: a home folder with the default store holding the demo's data
(the demo of the week 2026-W48, on a fixed clock) and the default config (``[[budgets]]``,
``[owned]``, ``[[recipients]]`` and ``[smtp]``, mailing a local SMTP server), no ``GPU_KPI_*``
variable, and the files the examples name (``job-17.csv``, ``./wandb``, ``./lightning_logs``)
in the working folder. ``sacct`` is the real one of ``tests/slurm-up.sh``'s cluster.

What a user's machine has and the sandbox cannot is swapped: the Prometheus host of the
examples is the test's real Prometheus (holding :func:`_cluster_samples`),
``/etc/gpu-kpi/config.toml`` the sandbox's default config (no test writes ``/etc``), and
``make demo`` runs as ``make -o .venv/.installed demo`` in a folder linking the repository's
Makefile and virtualenv (the venv taken as installed: never pip in a test).
A command must exit 0 (or the status its ``exit`` mark gives) with no traceback; a transcript's
shown output must be what the command prints. A synopsis is checked against the parser: its
subcommand and every flag must exist.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from clirun import home_env
from examples import Command, commands, pages, without_comment

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
"""The demo's clock: its week is 2026-W48, the week the examples name."""
MONDAY = datetime(2026, 11, 23, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
PROMETHEUS = "http://prometheus:9090"
ETC_CONFIG = "/etc/gpu-kpi/config.toml"


def all_commands() -> list[Command]:
    return [c for p in pages(ROOT) for c in commands(p.relative_to(ROOT).as_posix(), p.read_text())]


def _pages_with_examples() -> list[str]:
    return sorted({c.page for c in all_commands() if c.kind == "run"})


# -- the parser's own facts ---------------------------------------------------------------------


def test_a_block_is_read_as_a_shell_reads_it_and_its_marks_apply() -> None:
    page = "\n".join(
        [
            "<!-- docs-test: skip nvidia-smi: needs a GPU -->",
            "<!-- docs-test: exit 1: gpu-kpi gate -->",
            "```sh",
            "nvidia-smi --query-gpu=timestamp \\",
            "    --format=csv > a.csv   # a log",
            "# a comment line",
            "gpu-kpi import nvidia-smi a.csv",
            "gpu-kpi gate --run X",
            "```",
            "",
            "<!-- docs-test: synopsis -->",
            "```bash",
            "gpu-kpi runs [--week W]   # the newest first",
            "             [--team T]",
            "```",
            "```",
            "$ gpu-kpi job 7",
            "Job ID: 7",
            "```",
            "```python",
            "print('not a command')",
            "```",
        ]
    )
    found = commands("p.md", page)
    assert [(c.line, c.kind, c.exit, c.program) for c in found] == [
        (4, "skip", 0, "nvidia-smi"),
        (7, "run", 0, "gpu-kpi"),
        (8, "run", 1, "gpu-kpi"),
        (13, "synopsis", 0, "gpu-kpi"),
        (17, "run", 0, "gpu-kpi"),
    ]
    assert found[0].reason == "needs a GPU"
    assert found[0].text.endswith("> a.csv   # a log")
    assert without_comment(found[3].text) == "gpu-kpi runs [--week W] [--team T]"
    assert found[4].output == ("Job ID: 7",)


@pytest.mark.parametrize(
    ("mark", "message"),
    [
        ("skip nvidia-smi", "unknown docs-test mark"),
        ("sometimes", "unknown docs-test mark"),
        ("skip sacct: no Slurm", "matches no command"),
        ("exit 1: gpu-kpi gate", "matches no command"),
    ],
)
def test_a_mark_that_cannot_be_read_or_matches_nothing_fails(mark: str, message: str) -> None:
    from examples import DocsTestError

    with pytest.raises(DocsTestError, match=message):
        commands("p.md", f"<!-- docs-test: {mark} -->\n```sh\ngpu-kpi runs\n```\n")


def test_every_page_reads_and_every_skip_says_why() -> None:
    found = all_commands()  # raises on a bad mark
    assert all(c.reason for c in found if c.kind == "skip")
    kinds = Counter(c.kind for c in found)
    assert kinds["run"] >= 35, "the docs' runnable examples went missing"
    said = re.search(
        r"today (\d+) commands run, (\d+) synopsis lines checked, (\d+) not run",
        " ".join((ROOT / "docs/tests.md").read_text().split()),
    )
    assert said is not None, "docs/tests.md no longer counts the docs' examples"
    assert tuple(map(int, said.groups())) == (kinds["run"], kinds["synopsis"], kinds["skip"])


# -- synopses against the parser ----------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def synopsis_problems(command: str, root: argparse.ArgumentParser) -> list[str]:
    """What of a synopsis line the parser does not know: its subcommand, or a ``--flag``."""
    words = without_comment(command).split()
    if words[:1] != ["gpu-kpi"]:
        return [f"not a gpu-kpi command: {words[:1]}"]
    parser, rest = root, words[1:]
    while rest and (subs := _subparsers(parser)):
        if rest[0] not in subs:
            return [f"no subcommand {rest[0]!r}"]
        parser, rest = subs[rest[0]], rest[1:]
    positional = [a for a in parser._actions if not a.option_strings]
    if positional and positional[0].choices and rest and rest[0] not in positional[0].choices:
        return [f"no {positional[0].dest} {rest[0]!r}"]
    known = {s for a in parser._actions for s in a.option_strings}
    flags = {f for w in rest for f in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", w)}
    return [f"no option {f}" for f in sorted(flags - known)]


def test_a_synopsis_check_names_what_the_parser_lacks() -> None:
    from reports.cli import build_parser

    parser = build_parser()
    assert synopsis_problems("gpu-kpi runs [--week W] [--tz Z]", parser) == []
    assert synopsis_problems("gpu-kpi runs [--weak W]   # --note in a comment", parser) == [
        "no option --weak"
    ]
    assert synopsis_problems("gpu-kpi import nvidia-smi F [--price USD]", parser) == []
    assert synopsis_problems("gpu-kpi import ganglia F", parser) == ["no source 'ganglia'"]


def test_every_synopsis_names_subcommands_and_options_that_exist() -> None:
    from reports.cli import build_parser

    parser = build_parser()
    bad = [
        f"{c.where}: {problem}"
        for c in all_commands()
        if c.kind == "synopsis"
        for problem in synopsis_problems(c.text, parser)
    ]
    assert bad == []


# -- the sandbox --------------------------------------------------------------------------------


def _gpu_kpi_bin() -> Path:
    found = shutil.which("gpu-kpi", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"no gpu-kpi entry point next to {sys.executable}: pip install -e .")
    return Path(found).parent


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home folder whose default store holds the demo (week 2026-W48) and whose default
    config is the demo's (owned GPUs, budgets) without its ``store`` line."""
    from reports.demo import demo_config, run_demo
    from tracker.paths import config_dir

    home = tmp_path_factory.mktemp("demo-home")
    store = home / ".local" / "share" / "gpu-kpi" / "runs.db"
    store.parent.mkdir(parents=True)
    config = home / ".config" / "gpu-kpi" / "config.toml"
    config.parent.mkdir(parents=True)
    url = f"sqlite:///{store}"
    text = "\n".join(
        line for line in demo_config(url).splitlines() if not line.startswith("store =")
    )
    config.write_text(text + "\n")
    assert config_dir().name == "gpu-kpi"
    run_demo(url, now=NOW, config=str(config))
    return home


def _config(smtp_port: int) -> str:
    """The service's part of the sandbox's config: a local SMTP server and the recipients the
    docs' config example has, with the demo's names."""
    return f"""
[report]
timezone = "UTC"

[smtp]
host = "127.0.0.1"
port = {smtp_port}
security = "none"
sender = "GPU efficiency <gpu-kpi@example.com>"

[[recipients]]
to = "cto@example.com"
report = "summary"

[[recipients]]
to = "nlp-lead@example.com"
report = "team"
team = "nlp"

[[recipients]]
to = "jlee@example.com"
report = "runs"
user = "jlee"
"""


def _nvidia_smi_log(path: Path) -> None:
    """``job-17.csv`` as the docs' nvidia-smi command writes it: two H100s for an hour of
    Monday 2026-11-23, Berlin time, one at 90%, one at 30%."""
    rows = [
        "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], "
        "memory.total [MiB], power.draw [W]"
    ]
    for s in range(0, 3601, 5):
        t = datetime(2026, 11, 23, 10, 0) + timedelta(seconds=s)
        for i, util in ((0, 90), (1, 30)):
            rows.append(
                f"{t:%Y/%m/%d %H:%M:%S}.000, {i}, GPU-{i}17, {H100}, {util} %, "
                "40000 MiB, 81559 MiB, 400.00 W"
            )
    path.write_text("\n".join(rows) + "\n")


def _lightning_logs(folder: Path) -> None:
    """``./lightning_logs/version_0``: a Lightning run's TensorBoard events, 30 minutes of
    ``train/throughput`` and ``train/loss`` every 10 s, written by TensorBoard's own writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder / "version_0"))
    start = MONDAY + timedelta(hours=14)
    for step in range(181):
        wall = (start + timedelta(seconds=10 * step)).timestamp()
        for tag, value in (("train/loss", 1.0 / (step + 1)), ("train/throughput", 900.0)):
            summary = summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]
            )
            writer.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary))
    writer.close()


def _wandb_dir(cwd: Path) -> None:
    """``./wandb``: one finished offline run written by the real ``wandb``, as a run on a
    machine without a GPU writes it."""
    import readers
    import wandb

    env = {"WANDB_SILENT": "true", "WANDB_MODE": "offline", "WANDB_DIR": str(cwd)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run = wandb.init(mode="offline", dir=str(cwd), project="vision", name="resnet-docs")
        for step in range(3):
            run.log({"loss": 1.0 / (step + 1)})
        run.finish()
        readers.read_finished_wandb(cwd)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _cluster_samples() -> list[tuple[str, dict[str, str], float, float]]:
    """What the docs' Prometheus holds: dcgm-exporter's series of two H100s of node gpu-node-1
    and kube-state-metrics' of the pod research/train-0 holding both, Monday 2026-11-23
    10:00–12:00 UTC; GPU 0 at 80%, GPU 1 at 10%."""
    ten, noon = MONDAY + timedelta(hours=10), MONDAY + timedelta(hours=12)
    ksm = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}
    pod = {"namespace": "research", "pod": "train-0", "uid": "uid-train-0"}
    out: list[tuple[str, dict[str, str], float, float]] = []
    t = ten
    while t <= noon:
        ts = t.timestamp()
        for gpu, util in ((0, 80.0), (1, 10.0)):
            labels = {
                "Hostname": "gpu-node-1",
                "gpu": str(gpu),
                "UUID": f"GPU-docs-{gpu}",
                "modelName": H100,
                "namespace": "research",
                "pod": "train-0",
                "container": "main",
            }
            out.append(("DCGM_FI_DEV_GPU_UTIL", labels, util, ts))
            out.append(("DCGM_FI_DEV_FB_USED", labels, 20000.0, ts))
        if int(ts) % 30 == 0:
            base = {**ksm, **pod}
            out += [
                (
                    "kube_pod_container_resource_requests",
                    {**base, "container": "main", "node": "gpu-node-1"}
                    | {"resource": "nvidia_com_gpu", "unit": "integer"},
                    2.0,
                    ts,
                ),
                (
                    "kube_pod_info",
                    {**base, "node": "gpu-node-1", "created_by_kind": "Job"}
                    | {"created_by_name": "train"},
                    1.0,
                    ts,
                ),
                ("kube_pod_labels", {**base, "label_team": "research"}, 1.0, ts),
                *(
                    ("kube_pod_status_phase", {**base, "phase": p}, float(p == "Running"), ts)
                    for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown")
                ),
                (
                    "kube_node_status_capacity",
                    {**ksm, "node": "gpu-node-1", "resource": "nvidia_com_gpu", "unit": "integer"},
                    2.0,
                    ts,
                ),
            ]
        t += timedelta(seconds=15)
    return out


def _needs(page_commands: list[Command], what: str) -> bool:
    texts = [c.text for c in page_commands if c.kind == "run"]
    if what == "prometheus":
        return any(PROMETHEUS in t for t in texts)
    if what == "slurm":
        return any(
            c.startswith("sacct")
            or re.fullmatch(r"gpu-kpi import slurm( --.*)?", c.split("#")[0].strip(), re.S)
            for c in texts
        )
    if what == "demo":
        return any(t.startswith("make demo") for t in texts)
    raise ValueError(what)


def _slurm_up() -> None:
    """The test cluster of ``tests/slurm-up.sh`` answers, else skip (fail in CI)."""
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    marker = "# written by gpu-kpi tests/slurm-up.sh for its tests"
    up = (
        shutil.which("sacct") is not None
        and conf.is_file()
        and conf.read_text(errors="replace").startswith(marker)
    )
    if up:
        p = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], check=False, capture_output=True, text=True
        )
        up = bool(re.search(r"^(idle|mixed|allocated)", p.stdout, re.M))
    if not up:
        reason = "the test Slurm is not up: run tests/slurm-up.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def _page_param(page: str) -> object:
    found = [c for c in all_commands() if c.page == page]
    marks = [pytest.mark.slow, pytest.mark.timeout(900)]
    if _needs(found, "prometheus"):
        marks.append(pytest.mark.prometheus)
    if _needs(found, "slurm"):
        marks.append(pytest.mark.slurm)
    if any("send" in c.text or "serve" in c.text for c in found if c.kind == "run"):
        marks.append(pytest.mark.service)
    return pytest.param(page, marks=marks, id=page)


@pytest.mark.parametrize("page", [_page_param(p) for p in _pages_with_examples()])
def test_the_examples_of_each_page_run_as_written(
    page: str, demo_home: Path, tmp_path: Path
) -> None:
    from smtp_servers import running_server

    found = [c for c in all_commands() if c.page == page]
    home = tmp_path / "home"
    shutil.copytree(demo_home, home)
    with ExitStack() as stack:
        smtp = stack.enter_context(running_server())
        config = home / ".config" / "gpu-kpi" / "config.toml"
        config.write_text(config.read_text() + _config(smtp.port))
        swaps = {ETC_CONFIG: str(config)}
        if _needs(found, "prometheus"):
            from prom_server import running_prometheus

            (tmp_path / "prom").mkdir()
            swaps[PROMETHEUS] = stack.enter_context(
                running_prometheus(tmp_path / "prom", _cluster_samples())
            )
        if _needs(found, "slurm"):
            _slurm_up()
        run = _sandbox(home, swaps)
        failures = [f"{c.where}: {c.text}\n    {why}" for c in found if (why := run(c))]
    assert not failures, f"{len(failures)} example(s) of {page} fail:\n" + "\n".join(failures)


def _sandbox(home: Path, swaps: dict[str, str]) -> Callable[[Command], str]:
    """A runner of a page's commands in ``home`` (also the working folder): it returns what
    is wrong with a command's run, "" when nothing is."""
    env = home_env(home)
    env.update(TZ="UTC", PATH=f"{_gpu_kpi_bin()}{os.pathsep}{env['PATH']}")
    files = {
        "job-17.csv": lambda: _nvidia_smi_log(home / "job-17.csv"),
        "./lightning_logs": lambda: _lightning_logs(home / "lightning_logs"),
        "./wandb": lambda: _wandb_dir(home),
        ".gpu-kpi-demo/": lambda: _demo_folder(home),
    }
    made: set[str] = set()

    def run(c: Command) -> str:
        if c.kind != "run":
            return ""
        text = c.text
        for name, make in files.items():
            if name not in text or name in made:
                continue
            if not re.search(rf">\s*{re.escape(name)}", text):  # not a file the command writes
                make()
            made.add(name)
        for written, swapped in swaps.items():
            text = text.replace(written, swapped)
        if text.startswith("make demo"):
            _make_here(home)
            text = text.replace("make demo", "make -o .venv/.installed demo", 1)
        if text.startswith("export "):
            name, _, value = text.split("#")[0].strip().removeprefix("export ").partition("=")
            env[name] = value
            return ""
        if " serve " in f" {text} " and "--once" not in text and "--check-config" not in text:
            return _until_sigterm(text, home, env)
        p = subprocess.run(
            ["bash", "-o", "pipefail", "-c", text],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if "Traceback" in p.stderr:
            return "a traceback:\n" + p.stderr[-3000:]
        if p.returncode != c.exit:
            return f"exit {p.returncode}, the docs expect {c.exit}: {p.stderr.strip()[-1500:]}"
        if c.output:
            printed = [line.rstrip() for line in p.stdout.rstrip("\n").splitlines()]
            shown = list(c.output)
            if shown[-1:] == ["…"]:  # the transcript stops there: its lines are the first
                shown, printed = shown[:-1], printed[: len(shown) - 1]
            if printed != shown:
                return "prints something else than the docs show:\n" + p.stdout
        return ""

    return run


def _demo_folder(home: Path) -> None:
    """``./.gpu-kpi-demo`` as ``make demo`` leaves it (its store and config), from the sandbox's
    demo data: the pages that use it after the README's ``make demo`` pay for no second demo."""
    from reports.demo import demo_config

    folder = home / ".gpu-kpi-demo"
    if folder.exists():  # the README's `make demo` made it
        return
    folder.mkdir()
    shutil.copy(home / ".local/share/gpu-kpi/runs.db", folder / "runs.db")
    (folder / "gpu-kpi.toml").write_text(demo_config(f"sqlite:///{folder / 'runs.db'}"))


def _make_here(home: Path) -> None:
    """The repository's Makefile and virtualenv as a clone has them, in ``home``."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("`make demo` needs the tests to run in the project's virtualenv")
    for name, target in (
        ("Makefile", ROOT / "Makefile"),
        ("pyproject.toml", ROOT / "pyproject.toml"),
        (".venv", Path(sys.prefix)),
    ):
        if not (home / name).exists():
            (home / name).symlink_to(target)


def _until_sigterm(text: str, home: Path, env: dict[str, str]) -> str:
    """``serve`` runs until SIGTERM: started, stopped once it says when its job runs next;
    it must then exit 0 with no traceback."""
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {text}"],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "next weekly report" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(timeout=120)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "did not stop within 60 s of SIGTERM"
    reader.join(timeout=10)
    out = "".join(lines)
    if "Traceback" in out:
        return "a traceback:\n" + out[-3000:]
    if not ready.is_set():
        return f"never said when it runs next (exit {code}): {out[-1500:]}"
    if code != 0:
        return f"exit {code} after SIGTERM: {out[-1500:]}"
    return ""
