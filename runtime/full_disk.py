"""A full disk named: torch's checkpoint writer says only "file write failed", losing the errno."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def full_disk_named(where: Path) -> Iterator[None]:
    """Inside it, a full disk is raised as an OSError naming `where` (`no_space`); any other
    error as it is."""
    try:
        yield
    except Exception as exc:
        full = no_space(exc, where)
        if full is None or full is exc:
            raise
        raise full from exc


def no_space(exc: BaseException, where: Path) -> OSError | None:
    """A full disk met by a library's writer, as an OSError naming `where`; None for any other
    failure. The one helper of the trainer's saves (`full_disk_named`: the worker reports it as
    one line, exit 2) and of the export (`export.write_export`), because the libraries lose the
    errno: torch's checkpoint writer says only "file write failed", safetensors' only "I/O
    error: No space left on device (os error 28)" (a SafetensorError). Known by the errno, by
    those words, or, when the words are lost, by less than 1 MiB left where it was writing."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return exc if exc.filename else OSError(exc.errno, exc.strerror, str(where))
    text = str(exc)
    if "No space left" in text or "os error 28" in text or "Disk quota exceeded" in text:
        return OSError(errno.ENOSPC, "No space left on device", str(where))
    try:
        free = os.statvfs(where if where.exists() else where.parent)
    except OSError:
        return None
    if free.f_bavail * free.f_frsize < (1 << 20):
        return OSError(errno.ENOSPC, "No space left on device", str(where))
    return None
