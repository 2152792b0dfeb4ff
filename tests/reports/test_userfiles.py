"""The files a user names (``--out FILE``, ``--write-baseline``, ``--baseline``, the step
summary): a regular file replaced whole, a symlink followed to its target, a device or a FIFO
written in place and never replaced by a file, a FIFO nobody reads or writes refused rather
than waited on, a folder refused in one line."""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

import pytest
from fifos import FifoReader

from reports import userfiles
from reports.errors import UsageError
from reports.userfiles import append_file, check_file, read_file, write_file


@pytest.fixture
def no_rename(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rename is a test failure: what must be written in place is never replaced."""

    def refuse(src: object, dst: object) -> None:
        raise AssertionError(f"renamed {src} over {dst}")

    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.setattr(os, "rename", refuse)


def test_a_new_file_and_a_regular_file_are_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    write_file(out, b"a,b\n", flag="--out")
    assert out.read_bytes() == b"a,b\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~userfiles._umask()
    inode = out.stat().st_ino
    write_file(out, b"c,d\n", flag="--out")
    assert out.read_bytes() == b"c,d\n" and out.stat().st_ino != inode  # renamed over, not edited
    assert [p.name for p in tmp_path.iterdir()] == ["rows.csv"]  # no temporary file left


def test_a_failed_write_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "rows.csv"
    out.write_bytes(b"old\n")

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(UsageError, match=r"^--out .*rows\.csv: No space left on device$"):
        write_file(out, b"new\n", flag="--out")
    assert out.read_bytes() == b"old\n" and [p.name for p in tmp_path.iterdir()] == ["rows.csv"]


def test_a_fifo_with_a_reader_gets_every_byte_and_stays_a_fifo(
    tmp_path: Path, no_rename: None
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    data = b"x" * 300_000  # more than a pipe holds: the writer waits for the reader
    write_file(fifo, data, flag="--out")
    assert reader.result() == data
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.timeout(30)
def test_a_fifo_nobody_reads_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="pipe: a FIFO nobody reads"):
        write_file(fifo, b"rows\n", flag="--out")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(OSError) as e:  # the step summary's own: the caller warns and goes on
        append_file(fifo, b"rows\n")
    assert e.value.errno == errno.ENXIO


def test_dev_null_is_written_in_place_and_stays_a_device(tmp_path: Path, no_rename: None) -> None:
    write_file(Path("/dev/null"), b"rows\n", flag="--out")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    link = tmp_path / "sink"
    link.symlink_to("/dev/null")
    write_file(link, b"rows\n", flag="--out")
    assert link.is_symlink() and os.readlink(link) == "/dev/null"


def test_dev_full_says_the_disk_is_full_in_one_line(no_rename: None) -> None:
    with pytest.raises(UsageError, match=r"^--out /dev/full: No space left on device$"):
        write_file(Path("/dev/full"), b"rows\n", flag="--out")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_symlink_to_a_file_writes_its_target_and_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "2026-W48.csv"
    target.write_bytes(b"old\n")
    (tmp_path / "mid").symlink_to(target.name)  # relative, and a link to a link
    link = tmp_path / "latest.csv"
    link.symlink_to("mid")
    write_file(link, b"new\n", flag="--out")
    assert target.read_bytes() == b"new\n"
    assert os.readlink(link) == "mid" and os.readlink(tmp_path / "mid") == target.name


def test_what_cannot_be_written_is_one_line_and_untouched(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    nothing = tmp_path / "dangling"
    nothing.symlink_to(tmp_path / "missing.csv")
    to_folder = tmp_path / "to-folder"
    to_folder.symlink_to(folder)
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    cases = {
        folder: "folder: is a folder (name a file)",
        nothing: "dangling: a symlink to nothing",
        to_folder: "to-folder: a symlink to a folder",
        loop: "loop: too many levels of symlinks",
        tmp_path / "no" / "out.csv": "out.csv: no folder",
    }
    for path, said in cases.items():
        with pytest.raises(UsageError, match=re.escape(said)):
            check_file(path, flag="--out")
        with pytest.raises(UsageError) as e:
            write_file(path, b"rows\n", flag="--out")
        assert str(e.value).startswith(f"--out {path}: ") and "\n" not in str(e.value)
    assert not (tmp_path / "missing.csv").exists() and not list(folder.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dangling",
        "folder",
        "loop",
        "to-folder",
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root")
def test_a_link_planted_in_a_shared_folder_is_not_followed(tmp_path: Path) -> None:
    """``/tmp`` as root: a link another user left where our output goes is not written
    through, whatever ``fs.protected_symlinks`` says."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    precious = tmp_path / "shadow"
    precious.write_bytes(b"root's\n")
    planted = shared / "report.csv"
    planted.symlink_to(precious)
    os.lchown(planted, 4242, 4242)
    with pytest.raises(UsageError, match=r"a symlink in a shared folder .* that user 4242 owns"):
        write_file(planted, b"rows\n", flag="--out")
    assert precious.read_bytes() == b"root's\n" and planted.is_symlink()
    os.lchown(planted, 0, 0)  # our own link there is followed
    write_file(planted, b"rows\n", flag="--out")
    assert precious.read_bytes() == b"rows\n"


@pytest.mark.timeout(30)
def test_only_a_regular_file_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"^--baseline .*pipe: a FIFO, not a regular file$"):
        read_file(fifo, flag="--baseline")
    with pytest.raises(UsageError, match="a folder, not a regular file"):
        read_file(tmp_path, flag="--baseline")
    with pytest.raises(UsageError, match="a character device, not a regular file"):
        read_file(Path("/dev/zero"), flag="--baseline")
    (tmp_path / "base.json").write_bytes(b"{}")
    (tmp_path / "link.json").symlink_to("base.json")
    assert read_file(tmp_path / "link.json", flag="--baseline") == b"{}"
