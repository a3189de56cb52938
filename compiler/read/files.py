"""Reading the files a person points tuner at: one safe reader for every command; and
`write_atomic`, the one way tuner writes a file a person keeps (see there).

Settings, an accelerate base YAML, a DeepSpeed JSON, a model's ``config.json``, an import
source, hardware facts, a manifest: all of them come through here, so every command refuses
the same hostile inputs the same way, with one sentence naming the file:

* not a regular file (a FIFO would block forever, ``/dev/zero`` would read until memory
  runs out, a directory is a typo): opened with ``O_NONBLOCK`` and checked with ``fstat``
  before a byte is read;
* larger than a cap (settings and configs are kilobytes; `MAX_BYTES` is generous);
* not UTF-8;
* what `compiler/parse.py` refuses in the text (NaN in JSON, too deep nesting, ...).

Pure Python, no torch: the compiler uses it.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..parse import FileError, parse_json, parse_yaml

#: The largest file tuner reads as configuration (settings, YAML, JSON, config.json).
MAX_BYTES = 16 * 1024 * 1024
#: The largest settings file, DeepSpeed / accelerate config or import source (real ones are
#: kilobytes): what compile reads stays well inside MAX_BYTES once written as artefacts, so
#: what compile accepts `tuner run` reads, and every input is parsed in a few seconds at most.
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def read_bytes(path: str | os.PathLike, what: str = "file", max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; FileError otherwise."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not block; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileError(f"{what} not found: {path}", missing=True) from None
    except IsADirectoryError:
        raise FileError(f"{what} {path} is a directory, not a file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise FileError(f"cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileError(f"{what} {path} is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise FileError(f"{what} {path} is not a regular file ({_kind(info.st_mode)}); "
                            "tuner reads configuration from plain files only")
        if info.st_size > max_bytes:
            raise FileError(f"{what} {path} is {info.st_size:,} bytes; the limit is {max_bytes:,}")
        chunks, total = [], 0
        while True:  # read to the end, but never past the cap (a file may grow while read)
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise FileError(f"{what} {path} is larger than the limit of {max_bytes:,} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise FileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, what: str = "file", max_bytes: int = MAX_BYTES) -> str:
    """`read_bytes` decoded as UTF-8 (a leading BOM is dropped)."""
    raw = read_bytes(path, what, max_bytes)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileError(f"{what} {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8",
                        content=True) from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def load_json(path: str | os.PathLike, what: str = "JSON file", max_bytes: int = MAX_BYTES) -> Any:
    return parse_json(read_text(path, what, max_bytes), str(path))


def load_yaml(path: str | os.PathLike, what: str = "YAML file", max_bytes: int = MAX_BYTES) -> Any:
    return parse_yaml(read_text(path, what, max_bytes), str(path))


def describe_os_error(exc: OSError) -> str:
    """One sentence for an I/O failure, naming the file (ENOSPC says "No space left on ...")."""
    where = exc.filename if exc.filename is not None else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"No space left on device: {where or 'the output'}; free space there or write elsewhere"
    reason = exc.strerror or str(exc) or type(exc).__name__
    if where and str(where) not in reason:
        return f"{reason}: {where}"
    return reason


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` so that a reader sees the old file or the new one, never a
    half-written one, and a failure leaves no temporary file behind.

    The text goes to a temporary file in the same directory (so the rename stays on one
    file system), is flushed to disk (fsync: a crash right after cannot leave an empty file
    in its place), then renamed over `path`. The new file keeps an existing file's
    permission bits; a new one gets what a plain ``open()`` would give (0o666 less the
    umask), not mkstemp's private 0o600. Line endings are written as they are in `text`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = new_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def give_new_file_modes(folder: str | os.PathLike) -> None:
    """Give every file and folder below `folder` (not `folder` itself, no symbolic link) the
    mode a new one gets under the umask (0o644/0o755 under 022): libraries that write through
    a private temporary file and rename it (safetensors) leave 0o600 behind, which a teammate
    or a serving job under another user cannot read. An executable keeps its x bits."""
    for p in Path(folder).rglob("*"):
        if p.is_symlink():
            continue
        info = p.stat()
        mode = new_mode(executable=stat.S_ISDIR(info.st_mode) or bool(info.st_mode & 0o111))
        if stat.S_IMODE(info.st_mode) != mode and (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            os.chmod(p, mode)


def new_mode(executable: bool = False) -> int:
    """The mode a new file gets from a plain ``open()`` (0o666, or 0o777 for a program) under
    the process's umask: 0o644/0o755 under 022, 0o600/0o700 under 077."""
    return (0o777 if executable else 0o666) & ~_umask()


def _umask() -> int:
    """The process's umask, read without setting it (os.umask sets it, which would race
    with other threads creating files); 0o022 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


@dataclass(frozen=True)
class FileRead:
    """One file the settings name: its resolved path, and its text or why it has none."""

    path: Path
    content: str | None = None
    error: FileError | None = None

    def text(self) -> str:
        """The file's text; raises the `FileError` that reading it met."""
        if self.error is not None:
            raise self.error
        return self.content or ""


def resolve(text: str, base_dir: Path | None) -> Path:
    """A path from the settings: ``~`` expanded, a relative one joined to the project directory."""
    path = Path(os.path.expanduser(text))  # ~nosuchuser stays as written (normalise names the key)
    if not path.is_absolute() and not text.startswith("~") and base_dir is not None:
        path = base_dir / path
    return path


def read_file(text: str, base_dir: Path | None, what: str) -> FileRead:
    path = resolve(text, base_dir)
    try:
        return FileRead(path, read_text(path, what, MAX_CONFIG_BYTES))
    except FileError as exc:
        return FileRead(path, error=exc)
