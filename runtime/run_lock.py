"""One run per output directory: a lock that dies with the run.

Two `tuner run` into the same output directory would interleave their metrics and mix
their checkpoints. `acquire_run_lock` takes an exclusive ``fcntl.flock`` on
``OUTPUT/.tuner-run.lock`` for as long as the run lasts. The kernel drops a flock when the
process holding it exits, however it exits (kill -9 included), so a dead run never leaves
the directory locked; the file itself stays, and only says who held it last.

Taking the lock is also the first write into the output directory, so an output directory
that cannot be created or written is refused here, before any rank starts.

No torch import: `tuner run` checks this before it starts anything heavy.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from pathlib import Path
from typing import Iterator

from .artefacts import RunError

LOCK_FILE = ".tuner-run.lock"


@contextlib.contextmanager
def acquire_run_lock(output_dir: str | os.PathLike, machine_rank: int | None = None) -> Iterator[Path]:
    """Hold the output directory's run lock for the duration of the ``with`` block.

    `machine_rank`: for a job of several machines, each machine's launcher takes its own
    lock (``.tuner-run.machine1.lock``): the machines of one job may share the directory
    (a shared filesystem, or machines simulated on one host), two launchers of the same
    machine may not.

    Raises RunError (exit 2) when another live run holds it, or when the directory cannot
    be created or written (read-only, not a directory, no space).
    """
    import fcntl

    output_dir = Path(output_dir)
    path = output_dir / (LOCK_FILE if machine_rank is None else f".tuner-run.machine{machine_rank}.lock")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise RunError(_unwritable(output_dir, exc)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunError(_unwritable(output_dir, exc)) from None
            raise RunError(f"another tuner run is using {output_dir} ({_holder(fd)}); wait for it to finish, "
                           "stop it, or set output.dir to another directory") from None
        _record_holder(fd, output_dir)
        yield path
    finally:
        os.close(fd)  # releases the lock (the kernel does the same if this process dies)


def _record_holder(fd: int, output_dir: Path) -> None:
    """Write who holds the lock (for the refusal message of a second run); a failed write
    (a full disk) is refused like an unwritable directory."""
    info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode("utf-8"), 0)
        os.fsync(fd)
    except OSError as exc:
        raise RunError(_unwritable(output_dir, exc)) from None


def _holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return f"pid {int(data['pid'])} on {data['host']}, started {data['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its holder is unknown"


def _unwritable(output_dir: Path, exc: OSError) -> str:
    from tuner.compiler.files import describe_os_error

    return (f"output directory {output_dir} is not usable: {describe_os_error(exc)}; "
            "fix its permissions or free space, or set output.dir to a writable directory")
