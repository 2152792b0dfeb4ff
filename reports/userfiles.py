"""The files a user names on the command line, whatever the path turns out to be: written
(``chargeback --out FILE``, ``gate --write-baseline FILE``, ``send --dry-run``'s ``.eml``),
appended to (``$GITHUB_STEP_SUMMARY``) and read (``gate --baseline FILE``).

Writing (:func:`write_file`), by what the path is when the data is ready:

- nothing, or a regular file: written whole or not at all, a temporary file beside it renamed
  over it (``os.replace``), readable as ``open`` makes a file (0666 less the umask);
- a symlink: followed, link by link. To a regular file, the target is replaced as above (the
  link stays, ``latest.csv -> 2026-W48.csv`` gets the new rows); to a device or a FIFO, written
  through as below. Followed rather than refused because ``/dev/stdout`` is a symlink (to
  ``/proc/self/fd/1``). Refused in one line: a link to nothing (a file made where a link
  points is a file its owner did not ask for), and a link in a sticky, world-writable folder
  (``/tmp``) owned by neither us nor the folder's owner, which Linux's
  ``fs.protected_symlinks`` refuses too: the old trap of a link planted in ``/tmp`` for root to
  write through. The rule is ours as well because the kernel's may be off and a link's target
  is renamed over by its name, in user space, where the kernel does not look;
- a character or block device, a FIFO (``/dev/null``, a terminal, ``/dev/stdout`` on a
  pipe): written in place, opened without creating or renaming anything, so ``/dev/null``
  stays a device even as root. A FIFO nobody reads is refused in one line, not waited on;
- a folder: refused in one line.

Appending (:func:`append_file`) and reading (:func:`read_file`) never wait on a FIFO either: a
FIFO nobody reads cannot be appended to, and a file to read must be a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from reports.errors import UsageError

_MAX_LINKS = 40  # what Linux follows before ELOOP


def _what(mode: int) -> str:
    """What a non-regular file is, in a few words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _shared_link(link: Path, flag: str) -> None:
    """Refuse the symlink ``link`` where ``fs.protected_symlinks`` would: in a sticky,
    world-writable folder, owned by neither this process's user nor the folder's owner."""
    folder = os.stat(link.parent)
    shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
    owner = os.lstat(link).st_uid
    if shared and owner not in (os.geteuid(), folder.st_uid):
        raise UsageError(
            f"{flag} {link}: a symlink in a shared folder ({link.parent}) that user {owner} "
            "owns: not followed (name its target)"
        )


def _final(path: Path, flag: str) -> Path:
    """Where the symlink ``path`` leads, each link checked by :func:`_shared_link`; the path of
    a regular file's last link's target (``/dev/stdout`` ends at ``/proc/self/fd/1``)."""
    for _ in range(_MAX_LINKS):
        _shared_link(path, flag)
        target = os.readlink(path)
        if path.parts[:2] == ("/", "proc") and not os.path.isabs(target):
            return path  # /proc/PID/fd/N of a pipe or socket: "pipe:[42]" is no path
        path = path.parent / target
        if not path.is_symlink():
            return path
    raise UsageError(f"{flag} {path}: too many levels of symlinks")


def _plan(path: Path, flag: str) -> tuple[Path, int | None]:
    """Where ``path``'s data goes and what is there: (the path to write, its mode, None when
    nothing is). A folder, a link to nothing or a shared link is a :class:`UsageError`."""
    try:
        here = os.lstat(path)
    except FileNotFoundError:
        return path, None
    if not stat.S_ISLNK(here.st_mode):
        if stat.S_ISDIR(here.st_mode):
            raise UsageError(f"{flag} {path}: is a folder (name a file)")
        return path, here.st_mode
    final = _final(path, flag)
    try:
        there = os.stat(path)  # the kernel's own walk, magic links and all
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: a symlink to nothing ({final})") from None
    if stat.S_ISDIR(there.st_mode):
        raise UsageError(f"{flag} {path}: a symlink to a folder (name a file)")
    if stat.S_ISREG(there.st_mode):
        named = os.stat(final)
        if (named.st_dev, named.st_ino) != (there.st_dev, there.st_ino):
            raise UsageError(f"{flag} {path}: its target changed while it was followed")
        return final, there.st_mode
    return path, there.st_mode  # a device or a FIFO: the kernel follows the link when opening


def check_file(path: Path, *, flag: str) -> None:
    """Check, before any work, that :func:`write_file` can write ``path``: not a folder, not a
    symlink to nothing or a shared one, in a folder that exists. Nothing is written or opened.

    Args:
        path: The file the user named.
        flag: The option that named it (``--out``), for the message.

    Raises:
        UsageError: It cannot be written (one line).
    """
    try:
        target, mode = _plan(path, flag)
        if mode is None and not target.parent.is_dir():
            raise UsageError(f"{flag} {path}: no folder {target.parent}")
    except OSError as e:
        raise UsageError(f"{flag} {path}: {e.strerror or e}") from None


def write_file(path: Path, data: bytes, *, flag: str) -> None:
    """Write ``data`` to the file the user named (see the module docstring for what each kind
    of path gets).

    Args:
        path: The file the user named.
        data: The content.
        flag: The option that named it (``--out``, ``--write-baseline``), for the message.

    Raises:
        UsageError: It cannot be written (one line naming ``flag`` and ``path``); a regular
            file is left as it was.
    """
    try:
        target, mode = _plan(path, flag)
        if mode is None or stat.S_ISREG(mode):
            _replace(target, data)
        else:
            _write_in_place(path, data, mode, flag)
    except OSError as e:
        raise UsageError(f"{flag} {path}: {e.strerror or e}") from None


def _replace(path: Path, data: bytes) -> None:
    """``path`` replaced with ``data`` whole or not at all: a temporary file beside it,
    written to the disk, renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # a full disk shows here, before the rename
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide it from the others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_in_place(path: Path, data: bytes, mode: int, flag: str) -> None:
    """``data`` written into the device or FIFO ``path`` as it is: nothing created or renamed;
    a FIFO nobody reads is refused rather than waited on."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO and stat.S_ISFIFO(mode):
            raise UsageError(
                f"{flag} {path}: a FIFO nobody reads (start its reader first)"
            ) from None
        raise
    with open(fd, "wb") as f:
        now = os.fstat(fd).st_mode
        if stat.S_ISREG(now) or stat.S_ISDIR(now):  # swapped since it was looked at
            raise UsageError(f"{flag} {path}: it changed while it was opened; nothing written")
        os.set_blocking(fd, True)  # a reader is there: wait for it to take the data
        f.write(data)


def append_file(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` (made when missing, 0666 less the umask), never waiting on
    a FIFO nobody reads.

    Args:
        path: The file (a regular file, or a FIFO or device written in place).
        data: What to add at its end.

    Raises:
        OSError: It cannot be; ``errno.ENXIO`` for a FIFO nobody reads.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOCTTY | os.O_NONBLOCK
    fd = os.open(path, flags, 0o666)
    with open(fd, "wb") as f:  # O_APPEND: every write at the end
        os.set_blocking(fd, True)
        f.write(data)


def read_file(path: Path, *, flag: str) -> bytes:
    """The content of the regular file ``path`` (a symlink to one will do); anything else (a
    FIFO, a device, a folder) is refused before a byte is read, so nothing waits on a FIFO
    nobody writes.

    Args:
        path: The file the user named.
        flag: The option that named it (``--baseline``), for the message.

    Returns:
        Its bytes.

    Raises:
        UsageError: It cannot be read, or is not a regular file (one line).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise UsageError(f"{flag} {path}: {_what(mode)}, not a regular file")
        with open(fd, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"{flag} {path}: {e.strerror or e}") from None
