"""Hostile and careless input to the command line: each case is one line on stderr, exit 2,
and nothing created or half-written. The report's own bad data (runs, archive files, CSV cells)
is tested beside the report; the service's faults beside the service."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from clirun import ROOT, gpu_kpi
from fakes import copy_store, examples, run_record
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import one_line_error

from reports.cli import main, printable
from reports.weeks import WeekError, parse_week, shift_week, week_bounds
from tracker.config import ConfigError, read_toml
from tracker.store import SCHEMA_VERSION, RunStore, StoreError

MONDAY = datetime(2026, 11, 23, tzinfo=UTC)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, out: str, err: str, text: str) -> None:
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-kpi: error: "), err
    assert text in lines[0], err


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-config.toml"
    empty.write_text("")
    monkeypatch.setenv("GPU_KPI_CONFIG", str(empty))
    monkeypatch.delenv("GPU_KPI_STORE", raising=False)


@pytest.fixture(scope="module")
def one_run_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store of one run, made once for the module."""
    url = f"sqlite:///{tmp_path_factory.mktemp('one-run') / 'runs.db'}"
    with RunStore(url) as s:
        s.upsert_run(run_record("r1", MONDAY, 2.0))
    return url


@pytest.fixture
def store_url(one_run_store: str, tmp_path: Path) -> str:
    """A copy of the one-run store, the test's own."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    copy_store(one_run_store, url)
    return url


# -- weeks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("week", ["0000-W01", "9999-W52", "1600-W10", "1969-W30"])
@pytest.mark.parametrize("command", ["runs", "report"])
def test_weeks_out_of_range(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, store_url: str, week: str, command: str
) -> None:
    extra = ("--out", str(tmp_path / "out")) if command == "report" else ()
    assert_one_line(
        *run_cli(capsys, command, "--week", week, "--store", store_url, *extra),
        "out of range: years 1970–9998",
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("week", ["2026-W48 x", "２０２６-W48", "2026-W4", "2026-w48", "-2026-W48"])
def test_week_spellings_refused(week: str) -> None:
    with pytest.raises(WeekError, match="bad week"):
        parse_week(week)


@given(st.text(max_size=12) | st.from_regex(r"[0-9]{4}-W[0-9]{2}", fullmatch=True))
@settings(max_examples=examples(300), deadline=None)
def test_any_week_text_is_a_week_or_a_week_error(text: str) -> None:
    try:
        year, week = parse_week(text)
    except WeekError as e:
        assert "\n" not in str(e)
        return
    start, end = week_bounds(year, week)
    # the report reads the next week and 12 weeks back: both representable
    assert shift_week(start, UTC, 1) == end
    assert shift_week(start, UTC, -12) < start


# -- the store --------------------------------------------------------------------------------------
def test_read_only_commands_do_not_create_a_missing_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'nowhere' / 'runs.db'}"
    assert_one_line(*run_cli(capsys, "runs", "--store", url), "no run store at")
    assert_one_line(
        *run_cli(
            capsys, "report", "--store", url, "--week", "2026-W48", "--out", str(tmp_path / "out")
        ),
        "no run store at",
    )
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "out").exists()


def _damaged(tmp_path: Path, store_url: str, how: str) -> Path:
    good = Path(store_url.removeprefix("sqlite:///"))
    data = good.read_bytes()
    bad = tmp_path / f"{how}.db"
    if how == "text":
        bad.write_text("run,util\nr1,50\n")
    elif how == "truncated":
        bad.write_bytes(data[:100])
    else:  # every page after the first two overwritten
        bad.write_bytes(data[:8192] + bytes(len(data) - 8192))
    return bad


@pytest.mark.parametrize("how", ["text", "truncated", "zeroed"])
def test_a_store_that_is_not_a_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, store_url: str, how: str
) -> None:
    bad = _damaged(tmp_path, store_url, how)
    before = bad.read_bytes()
    for args in (("runs",), ("report", "--week", "2026-W48", "--out", str(tmp_path / "o"))):
        code, out, err = run_cli(capsys, *args, "--store", f"sqlite:///{bad}")
        assert_one_line(code, out, err, f"run store sqlite:///{bad}: ")
        assert "malformed" in err or "not a database" in err or "no such table" in err
    assert bad.read_bytes() == before
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("0", "bad schema version '0'"),
        ("-3", "bad schema version '-3'"),
        ("two", "bad schema version 'two'"),
        (None, "a meta table without a schema version"),
    ],
)
def test_bad_schema_versions(store_url: str, value: str | None, text: str) -> None:
    path = store_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        if value is None:
            db.execute("DELETE FROM meta")
        else:
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (value,))
    with pytest.raises(StoreError, match=text):
        RunStore(store_url)


def test_tables_without_a_meta_table(store_url: str) -> None:
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
        db.execute("DROP TABLE meta")
    with pytest.raises(StoreError, match="tables but no meta table"):
        RunStore(store_url)
    # and nothing was created in its place
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "meta" not in names


def test_a_database_without_our_tables(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (x TEXT)")
    url = f"sqlite:///{path}"
    with pytest.raises(StoreError, match="is empty: nothing has been tracked"):
        RunStore(url, create=False)
    with RunStore(url) as s:  # a tracker may start a store in a shared database
        assert s.schema_version() == SCHEMA_VERSION


# -- output folders ---------------------------------------------------------------------------------
def test_demo_dir_that_is_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("mine")
    assert_one_line(
        *run_cli(capsys, "demo", "--dir", str(target)),
        f"--dir {target}: exists and is not a folder",
    )
    assert target.read_text() == "mine"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_demo_dir_read_only(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    assert_one_line(*run_cli(capsys, "demo", "--dir", str(ro / "demo")), "cannot create it")


def test_demo_never_prints_a_store_password(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run_cli(
        capsys,
        "demo",
        "--dir",
        str(tmp_path / "d"),
        "--store",
        "postgresql://kpi:s3cret-pw@127.0.0.1:1/db",
    )
    assert code == 2 and "kpi:***@127.0.0.1:1" in err
    assert "s3cret-pw" not in out + err


# -- the config file -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "text"),
    [
        (b'[tracker]\nname = "\xff\xfe"\n', "not UTF-8 text (byte 0xff at offset 18)"),
        (b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
        (b"a = " + b"{x = " * 5000 + b"}" * 5000 + b"\n", "nested too deeply"),
        (b"[smpt]\nhost = 'mail'\n", "smpt: unknown setting (did you mean 'smtp'?)"),
        (
            b"[[recipient]]\nto = 'a@example.com'\n",
            "recipient: unknown setting (did you mean 'recipients'?)",
        ),
        (
            b"[thresholds]\ntarget_util = 80\n",
            "thresholds.target_util: unknown setting (did you mean 'target_util_pct'?)",
        ),
        (b"[tracker]\ninterval_s = 0\n", "tracker.interval_s: expected a number >= 0.01, got 0"),
        (
            b"[thresholds]\ntarget_util_pct = inf\n",
            "expected a finite number between 1 and 100, got inf",
        ),
        (b"[thresholds]\nidle_window_min = -5\n", "expected a number between 1 and 10080, got -5"),
    ],
)
@pytest.mark.parametrize("command", [("report", "--week", "2026-W48"), ("serve", "--check-config")])
def test_config_files_that_are_wrong(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    store_url: str,
    content: bytes,
    text: str,
    command: tuple[str, ...],
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(content)
    code, out, err = run_cli(
        capsys,
        *command,
        "--config",
        str(cfg),
        "--store",
        store_url,
        *(("--out", str(tmp_path / "o")) if command[0] == "report" else ()),
    )
    assert code == 2 and out == "" and text in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_the_recipient_key_suggestion(tmp_path: Path) -> None:
    from reports.service.config import read_service_settings

    cfg = tmp_path / "c.toml"
    cfg.write_text("[[recipients]]\nto = 'a@example.com'\nreprot = 'team'\n")
    _, errors = read_service_settings(cfg, env={})
    assert errors == ["recipients[0].reprot: unknown setting (did you mean 'report'?)"]


def test_every_service_section_is_a_known_file_section() -> None:
    from reports.service.config import SERVICE_SECTIONS
    from tracker.config import FILE_SECTIONS

    assert set(SERVICE_SECTIONS) <= FILE_SECTIONS


@given(st.binary(max_size=200))
@settings(max_examples=examples(300), deadline=None)
def test_any_bytes_are_a_config_or_a_config_error(data: bytes) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".toml") as f:
        f.write(data)
        f.flush()
        try:
            read_toml(Path(f.name))
        except ConfigError as e:
            assert "\n" not in str(e)


# -- printing ----------------------------------------------------------------------------------------
def test_control_characters_in_names_are_not_printed_raw(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as s:
        s.upsert_run(
            run_record("r1", MONDAY, 1.0, name="\x1b[2J\x1b]0;pwned\x07ok\rfake", team="nlp\x9b31m")
        )
    code, out, _ = run_cli(capsys, "runs", "--store", url)
    assert code == 0
    assert not any(c in out for c in "\x1b\x07\r\x9b")
    assert "\\x1b[2J\\x1b]0;pwned\\x07ok\\x0dfake" in out and "nlp\\x9b31m" in out


@given(st.text())
def test_printable_keeps_printable_text(text: str) -> None:
    shown = printable(text)
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) < 0xA0 for c in shown)
    if all(c.isprintable() for c in text):
        assert shown == text


def test_runs_into_a_closed_pipe(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as s:
        for i in range(1500):  # > 64 KiB of table: the pipe fills
            s.upsert_run(run_record(f"run-{i:04d}", MONDAY, 1.0, team="nlp", project="p"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [sys.executable, "-m", "reports.cli", "runs", "--store", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline().split()[:2] == [b"started", b"name"]
    p.stdout.close()  # `| head -1`
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141
    assert err == ""


def core_only(
    *args: str, missing: tuple[str, ...] = ("pandas",)
) -> subprocess.CompletedProcess[str]:
    """``gpu-kpi ARGS`` in a fresh process where ``missing`` cannot be imported, as in
    ``pip install gpu-kpi`` without ``[reports]``."""
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({list(missing)!r})); "
        f"from reports.cli import main; sys.exit(main({list(args)!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def test_a_core_only_install_names_the_extra(tmp_path: Path, store_url: str) -> None:
    p = core_only(
        "report", "--store", store_url, "--week", "2026-W48", "--out", str(tmp_path / "o")
    )
    # the packages themselves: gpu-kpi is on no index, "gpu-kpi[reports]" installs nothing
    one_line_error(
        p, "'report' needs the reports extra (pandas is not installed): pip install 'pandas>=2.1'"
    )
    assert "gpu-kpi[" not in p.stderr


def test_runs_lists_a_store_without_the_reports_extra(tmp_path: Path) -> None:
    """``gpu-kpi runs`` needs no pandas or numpy (the wheel's core-only smoke runs it): marking
    stale runs crashed, once moved into reports.gputime, pulled both in and made it a "needs
    the reports extra" error."""
    from fakes import run_record

    from tracker.store import RunStore

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as s:
        s.upsert_run(run_record("a", datetime(2026, 11, 24, 10, tzinfo=UTC), 1))
    p = core_only("runs", "--store", url, "--tz", "UTC", missing=("pandas", "numpy"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[1].startswith("2026-11-24 10:00")


def test_a_bad_week_via_the_entry_point(tmp_path: Path, store_url: str) -> None:
    one_line_error(
        gpu_kpi(
            "report",
            "--week",
            "9999-W52",
            "--store",
            store_url,
            "--out",
            str(tmp_path / "o"),
            env={"GPU_KPI_CONFIG": os.devnull},
        ),
        "out of range",
    )


def test_send_dry_run_out_that_is_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, store_url: str
) -> None:
    target = tmp_path / "out"
    target.write_text("mine")
    assert_one_line(
        *run_cli(
            capsys,
            "send",
            "--week",
            "2026-W48",
            "--to",
            "a@example.com",
            "--dry-run",
            "--out",
            str(target),
            "--store",
            store_url,
        ),
        f"--out {target}: exists and is not a folder",
    )
    assert target.read_text() == "mine"


def test_runs_csv_neutralizes_formulas(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import csv
    import io

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as s:
        s.upsert_run(
            run_record(
                "r1",
                MONDAY,
                1.0,
                name='=HYPERLINK("http://evil","x")',
                team="+cmd|' /C calc'!A0",
                project="@SUM(A1)",
            )
        )
    code, out, _ = run_cli(capsys, "runs", "--store", url, "--format", "csv")
    assert code == 0
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert row["name"] == '\'=HYPERLINK("http://evil","x")'
    assert row["team"] == "'+cmd|' /C calc'!A0" and row["project"] == "'@SUM(A1)"
    assert row["gpu_hours"] == "1.0" and row["util_pct"] == "50.0"  # numbers stay numbers


@pytest.mark.parametrize("tz", ["Europe", "A" * 300, "../../etc/passwd", "UTC\x00"])
def test_time_zones_that_are_not_zones(
    capsys: pytest.CaptureFixture[str], store_url: str, tz: str
) -> None:
    assert_one_line(
        *run_cli(capsys, "runs", "--store", store_url, "--week", "2026-W48", "--tz", tz),
        "unknown time zone",
    )


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@127.0.0.1:1/db?password=Sup3rSecret",
        "postgresql://u@127.0.0.1:1/db?sslmode=disable&password=Sup3rSecret&bogus=1",
    ],
)
def test_a_password_parameter_is_masked(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, err = run_cli(capsys, "runs", "--store", url)
    assert_one_line(code, out, err, "password=***")
    assert "Sup3rSecret" not in out + err


def test_output_to_a_full_disk(tmp_path: Path, store_url: str) -> None:
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-m", "reports.cli", "runs", "--store", store_url],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["gpu-kpi: error: No space left on device"]


def test_send_never_creates_a_missing_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'nowhere' / 'runs.db'}"
    assert_one_line(
        *run_cli(
            capsys,
            "send",
            "--week",
            "2026-W48",
            "--to",
            "a@example.com",
            "--dry-run",
            "--out",
            str(tmp_path / "out"),
            "--store",
            url,
        ),
        "no run store at",
    )
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "out").exists()


def test_an_empty_file_is_left_as_it_is(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "runs.db"
    empty.write_bytes(b"")
    assert_one_line(*run_cli(capsys, "runs", "--store", f"sqlite:///{empty}"), "is empty")
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == [
        "empty-config.toml",
        "runs.db",
    ]


def test_runs_lists_what_it_can_and_names_what_it_cannot(
    capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    with RunStore(store_url) as s:
        s.upsert_run(run_record("r2", MONDAY, 1.0, name="text-util"))
        s.upsert_run(run_record("r3", MONDAY, 1.0, name="bytes-team"))
        s.upsert_run(run_record("r4", MONDAY, 1.0, name="bad-tags"))
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE runs SET util_pct = 'abc', gpu_hours = 'x' WHERE id = 'r2'")
        db.execute("UPDATE runs SET team = X'6e6c700a' WHERE id = 'r3'")
        db.execute("UPDATE runs SET tags = '{' WHERE id = 'r4'")
    for fmt in ("table", "json", "csv"):
        code, out, err = run_cli(capsys, "runs", "--store", store_url, "--format", fmt)
        assert code == 0, err
        assert "text-util" in out and "bytes-team" in out and "bad-tags" not in out
        assert (
            err.startswith("gpu-kpi: 1 run(s) could not be read: r4 (") and "Traceback" not in err
        )


@pytest.mark.parametrize(
    ("args", "prog", "text"),
    [
        (("report", "--basis", "foo"), "gpu-kpi report", "argument --basis: invalid choice: 'foo'"),
        ((), "gpu-kpi", "the following arguments are required: COMMAND"),
        (("runs", "--bogus"), "gpu-kpi", "unrecognized arguments: --bogus"),
        (("import", "slurm", "--since"), "gpu-kpi import", "argument --since: expected one"),
    ],
)
def test_argparse_usage_errors_are_one_line(args: tuple[str, ...], prog: str, text: str) -> None:
    # through the real process: argparse printed its usage block before the error
    p = gpu_kpi(*args)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), p.stderr
    assert text in lines[0] and lines[0].endswith(f"(see {prog} --help)")
