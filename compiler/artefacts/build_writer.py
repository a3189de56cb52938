"""The build writer: the artefacts written into the output directory as one unit, replacing or
removing only files a tuner manifest there lists (compiler/artefacts/emit.py renders them)."""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path

from . import cluster
from .emit import MANIFEST_JSON


class NotWrittenByTuner(FileExistsError):
    """An artefact's name is taken in the output directory by a file tuner did not write."""


#: Artefacts a person runs directly (``./launch.sh 1``): the umask's mode for a program
#: (0755 under umask 022); the others get a plain new file's (0644 under 022, 0600 under 077).
EXECUTABLES = (cluster.LAUNCH_SH,)
#: Two compiles into one directory meet here (removed when the compile ends).
COMPILE_LOCK = ".tuner-compile.lock"


def previous_artefacts(out_dir: Path) -> dict[str, str] | None:
    """What tuner wrote into `out_dir` last time: artefact name -> SHA-256, from the
    manifest there. None when there is no manifest or it is not tuner's (unreadable,
    hand-made, another tool's)."""
    from .. import parse
    from ..read import files

    try:
        data = files.load_json(out_dir / MANIFEST_JSON, "manifest")
    except parse.FileError:
        return None
    listed = data.get("artefacts") if isinstance(data, dict) and "manifest_version" in data else None
    if not isinstance(listed, dict):
        return None
    # Plain file names only: a hand-edited manifest must not point the writer elsewhere.
    return {name: sha for name, sha in listed.items()
            if isinstance(name, str) and isinstance(sha, str) and name == Path(name).name and not name.startswith(".")}


def write_atomically(out_dir: Path, files: dict[str, str], remove: tuple[str, ...] = ()) -> None:
    """Write the artefacts as one unit; only ever replace or remove files tuner wrote.

    * A file in the way that the previous manifest does not list (a person's own
      ``deepspeed.json`` in ``--out .``) stops the write before anything is touched:
      `NotWrittenByTuner`.
    * Every file is first written to a temporary name and flushed; a failure there (disk
      full, permissions) removes the temporary files and leaves the previous set as it was.
    * Then each is moved into place (manifest last, so a reader that sees a new manifest sees
      new artefacts). Should a move fail, the moved ones are put back from hard-link backups.
    * `remove` names artefacts of the previous set that this one no longer has; each is
      deleted only when the previous manifest lists it with the content it still has.
    * Two compiles into one directory take turns (a lock in it, `file_lock.hold_lock`): the
      second waits for the first, then reads the manifest the first wrote.
    * Only files this call created are ever removed (temporaries and backups under unique
      names created with ``O_EXCL``); a file of the person's named like one is never touched.
    """
    from ..read.file_lock import LockHeld, hold_lock

    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with hold_lock(out_dir / COMPILE_LOCK, wait_s=120, remove=True):
            _write_locked(out_dir, files, remove)
    except LockHeld as exc:
        raise BlockingIOError(exc.errno, f"another tuner compile is writing {out_dir} ({exc.holder}) and did not "
                              "finish in 120 s; wait for it, or give another --out directory", str(out_dir)) from None


def _write_locked(out_dir: Path, files: dict[str, str], remove: tuple[str, ...]) -> None:
    previous = previous_artefacts(out_dir)
    ours = set(previous or ()) | ({MANIFEST_JSON} if previous is not None else set())
    for name in files:
        target = out_dir / name
        if (target.exists() or target.is_symlink()) and name not in ours:
            raise NotWrittenByTuner(errno.EEXIST, f"{target} exists and was not written by tuner (no tuner manifest "
                                    "there lists it); choose another --out directory or move the file", str(target))
    staged = _stage(out_dir, files)
    _commit(out_dir, staged)
    for name in remove:
        target = out_dir / name
        if previous and name in previous and name not in files and target.is_file() and \
                _file_sha256(target) == previous[name]:
            target.unlink()


def _stage(out_dir: Path, files: dict[str, str]) -> list[tuple[str, Path]]:
    from ..read.files import new_mode

    staged: list[tuple[str, Path]] = []
    try:
        for name, text in files.items():
            fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
            staged.append((name, Path(tmp_name)))  # before writing: a failed write is cleaned up too
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
                os.fchmod(fh.fileno(), new_mode(executable=name in EXECUTABLES))
    except BaseException as exc:
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(out_dir / staged[-1][0]) if staged else str(out_dir)  # name it in the message
        raise
    staged.sort(key=lambda item: item[0] == MANIFEST_JSON)
    return staged


def _commit(out_dir: Path, staged: list[tuple[str, Path]]) -> None:
    backups: dict[str, Path | None] = {}
    try:
        for name, _ in staged:  # hard links keep the previous set restorable (no copy, no space)
            target = out_dir / name
            backups[name] = None
            if target.is_file():
                backups[name] = _backup_link(target)
        done: list[str] = []
        try:
            for name, tmp in staged:
                os.replace(tmp, out_dir / name)
                done.append(name)
        except BaseException:
            for name in done:  # put the previous set back
                backup = backups.get(name)
                if backup is not None:
                    os.replace(backup, out_dir / name)
                else:
                    (out_dir / name).unlink(missing_ok=True)
            raise
    finally:
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
        for backup in backups.values():
            if backup is not None:
                backup.unlink(missing_ok=True)


def _backup_link(target: Path) -> Path | None:
    """A hard link to `target` under a new unique name (``os.link`` never replaces an existing
    name, so no file of the person's is taken); None where hard links are not possible."""
    for _ in range(20):
        link = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.bak.tmp")
        try:
            os.link(target, link)
            return link
        except FileExistsError:
            continue
        except OSError:
            return None  # a file system without hard links: no rollback for this file
    return None


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
