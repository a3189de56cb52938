"""Locks that tuner keeps in a person's directories, opened so that they cannot be turned
against the person's files.

`hold_lock` takes a ``fcntl.flock`` on a small file (``OUT/.tuner-run.lock``,
``BUILD/.tuner-compile.lock``, ``EXPORT/.tuner-export.lock``). The kernel drops a flock
when its process dies (kill -9 included), so no lock outlives its holder. The file is
opened with ``O_NOFOLLOW`` and checked with ``fstat`` before anything is written into it:

* a symbolic link in its place is refused (following it would truncate whatever it points
  at), and so is anything that is not a regular file;
* a regular file with another hard link is refused (writing the holder's record into it
  would change the other name's contents);
* a file that holds something other than tuner's holder record (a person's file that
  happens to bear the name) is refused, never truncated.

``remove=True`` removes the file when the lock is released, but only a file that holds
tuner's record (a process that creates the file, with ``O_CREAT | O_EXCL``, writes one into
it at once; an empty file of the person's at that name is locked, never removed). A process
that opened a file its holder then removed notices (the name no longer leads to its inode)
and starts over, so two holders never lock two different files of one name.

Every refusal is an `OSError` whose ``strerror`` is one sentence naming the file: the
writers' existing handling of I/O errors reports it (exit 2, no traceback). Pure Python.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from .files import new_mode

#: How long a holder's record may be (it is one small JSON line).
_RECORD_MAX = 4096
#: Records are padded to this length and written in place (never truncated first), so a
#: process reading the file while its holder writes never sees it empty or half-replaced.
_RECORD_PAD = 512


class LockHeld(BlockingIOError):
    """Another live process holds the lock; `holder` says who, as far as it is known."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(errno.EWOULDBLOCK, f"{path} is held by another tuner process ({holder})", str(path))
        self.holder = holder


class LockRefused(OSError):
    """The lock's name is taken by something tuner must not write into."""


def _open(path: Path) -> tuple[int, bool]:
    """(fd, created): the lock file, created when absent; never through a symbolic link."""
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    for _ in range(100):
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, new_mode())
        except FileExistsError:
            pass
        else:
            try:
                write_holder(fd)  # the file is tuner's from its first byte
            except OSError as exc:  # a full disk: remove what this call created, name the path
                os.unlink(path)
                os.close(fd)
                if exc.filename is None:
                    exc.filename = str(path)
                raise
            return fd, True
        try:
            return os.open(path, flags), False
        except FileNotFoundError:
            continue  # removed between the two calls by a holder releasing it: create it anew
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LockRefused(errno.ELOOP, f"{path} is a symbolic link; tuner does not follow it for its lock "
                                  "file: remove the link (tuner recreates the file)", str(path)) from None
            raise
    raise LockRefused(errno.EAGAIN, f"{path} keeps appearing and disappearing; another process is racing "
                      "for it", str(path))


def _check(fd: int, path: Path, created: bool) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise LockRefused(errno.EEXIST, f"{path} is not a regular file; tuner keeps its lock there: move it away",
                          str(path))
    if info.st_nlink > 1:  # 0: removed since it was opened (a holder releasing it): hold_lock looks again
        raise LockRefused(errno.EEXIST, f"{path} has {info.st_nlink} hard links; tuner writes into its lock file "
                          "and will not change another name's contents: remove it (tuner recreates it)", str(path))
    if not created and info.st_size and not _is_record(fd):
        raise LockRefused(errno.EEXIST, f"{path} holds data that is not tuner's lock record; tuner will not "
                          "overwrite it: move it away", str(path))


def _is_record(fd: int) -> bool:
    for _ in range(5):  # a torn read while the holder writes its record: look again
        if holder_record(fd) is not None:
            return True
        time.sleep(0.01)
    return False


def _still_named(path: Path, fd: int) -> bool:
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


@contextlib.contextmanager
def hold_lock(path: str | os.PathLike, shared: bool = False, wait_s: float = 0.0,
              remove: bool = False) -> Iterator[int]:
    """Hold a flock on `path` (exclusive, or `shared`) for the ``with`` block; yields its fd.

    Waits up to `wait_s` seconds for a holder to finish, then raises `LockHeld`.
    `LockRefused` when the name is a link, not a regular file, or a person's file."""
    import fcntl

    path = Path(path)
    deadline = time.monotonic() + wait_s
    while True:
        fd, created = _open(path)
        try:
            _check(fd, path, created)
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            busy = exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) and not isinstance(exc, LockRefused)
            holder = describe_holder(fd) if busy else ""
            if created and not busy:
                with contextlib.suppress(FileNotFoundError):  # already removed by a holder releasing it
                    os.unlink(path)
            os.close(fd)
            if not busy:
                raise
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise LockHeld(path, holder) from None
        if _still_named(path, fd):
            if remove and not shared:
                with contextlib.suppress(OSError):  # a full disk: the lock holds without its record
                    write_holder(fd)
            break
        os.close(fd)  # its holder removed it while releasing: lock the file that now bears the name
    try:
        yield fd
    finally:
        ours = created or (holder_record(fd) or {}).get("tool") == "tuner"
        if remove and ours and _still_named(path, fd):
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.close(fd)


def write_holder(fd: int, **extra: object) -> None:
    """Record who holds the lock (for the message a second process gets)."""
    info = {"tool": "tuner", "pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), **extra}
    data = json.dumps(info).encode("utf-8")
    data = data.ljust(max(_RECORD_PAD, len(data)) - 1) + b"\n"
    os.pwrite(fd, data, 0)
    if os.fstat(fd).st_size > len(data):  # an older, longer record (an earlier tuner's)
        os.ftruncate(fd, len(data))
    os.fsync(fd)


def holder_record(fd: int) -> dict | None:
    """The holder's record in the lock file, or None when it holds anything else."""
    try:
        raw = os.pread(fd, _RECORD_MAX + 1, 0)
        data = json.loads(raw.decode("utf-8")) if len(raw) <= _RECORD_MAX else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "pid" in data else None


def describe_holder(fd: int) -> str:
    data = holder_record(fd)
    try:
        return f"pid {int(data['pid'])} on {data['host']}, started {data['started']}"  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return "its holder is unknown"
