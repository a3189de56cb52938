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
    """A full disk as an OSError naming `where` (torch's writer says only "file write failed",
    losing the errno): the worker reports it as one line, exit 2. None when space is left."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return exc if exc.filename else OSError(exc.errno, exc.strerror, str(where))
    try:
        free = os.statvfs(where if where.exists() else where.parent)
    except OSError:
        return None
    if "No space left" in str(exc) or free.f_bavail * free.f_frsize < (1 << 20):
        return OSError(errno.ENOSPC, "No space left on device", str(where))
    return None


