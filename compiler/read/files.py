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
* JSON with ``NaN``/``Infinity`` (not JSON; Python's parser accepts them by default), or
  nested deeper than `MAX_DEPTH` (Python's parsers and everything after them recurse, so a
  hostile file would end in RecursionError).

Pure Python, no torch: the compiler uses it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The largest file tuner reads as configuration (settings, YAML, JSON, config.json).
MAX_BYTES = 16 * 1024 * 1024
#: The largest settings file, DeepSpeed / accelerate config or import source (real ones are
#: kilobytes): what compile reads stays well inside MAX_BYTES once written as artefacts, so
#: what compile accepts `tuner run` reads, and every input is parsed in a few seconds at most.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Deeper nesting than this is refused: real configs nest a handful of levels.
MAX_DEPTH = 64


class FileError(Exception):
    """A file cannot be used; `message` is one complete sentence naming it."""

    def __init__(self, message: str, missing: bool = False, content: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.missing = missing
        """True when the file does not exist (some callers treat that as 'not given')."""
        self.content = content
        """True when the file was read but what it holds is unusable (not UTF-8, bad
        JSON/YAML, too deep); False for I/O problems (missing, unreadable, special, too big)."""


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


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, where: str) -> Any:
    """JSON text -> value; FileError for invalid JSON, NaN/Infinity or too deep nesting."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise FileError(f"{where}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}", content=True) from None
    except ValueError as exc:
        raise FileError(f"{where}: invalid JSON: {exc}", content=True) from None
    except RecursionError:
        raise FileError(f"{where}: nested more than {MAX_DEPTH} levels deep", content=True) from None
    check_depth(value, where)
    if "\\u" in text and (bad := _lone_surrogate(value)) is not None:
        raise FileError(f"{where}: {bad} holds a lone surrogate escape (\\ud800-\\udfff without its pair): not a "
                        "character, and no UTF-8 file can hold it", content=True)
    return value


def _lone_surrogate(value: Any) -> str | None:
    """Where the first string (or key) holding a lone UTF-16 surrogate is, else None: JSON's
    ``\\udc80`` escape decodes to one, which cannot be encoded again."""
    stack: list[tuple[Any, str]] = [(value, "<value>")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str) and not node.isascii():
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return where
        elif isinstance(node, dict):
            stack.extend((k, where) for k in node)
            stack.extend((v, str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, where) for v in node)
    return None


def load_json(path: str | os.PathLike, what: str = "JSON file", max_bytes: int = MAX_BYTES) -> Any:
    return parse_json(read_text(path, what, max_bytes), str(path))


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> value (safe loader); FileError for invalid YAML or too deep nesting."""
    import yaml

    try:
        # libyaml's parser where PyYAML has it: the pure-Python one took ~7 s per MB
        value = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own bound (1000 levels)
            raise FileError(f"{where}: nested more than {MAX_DEPTH} levels deep", content=True) from None
        raise FileError(f"{where}: invalid YAML: {exc}", content=True) from None
    except RecursionError:
        raise FileError(f"{where}: nested more than {MAX_DEPTH} levels deep", content=True) from None
    check_depth(value, where)
    return value


def load_yaml(path: str | os.PathLike, what: str = "YAML file", max_bytes: int = MAX_BYTES) -> Any:
    return parse_yaml(read_text(path, what, max_bytes), str(path))


def nesting_problem(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Why `value` is unsafe to process recursively, or None. Counted without recursion.

    Too deep: more than `limit` levels of dicts/lists. Shared: one dict/list reached twice,
    which only a YAML alias (``*name``) produces; a self-referencing one would recurse
    forever and a chain of them expands exponentially, so configuration files may not.
    """
    stack = [(value, 1)]
    seen: set[int] = set()
    while stack:
        node, level = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if level > limit:
            return f"nested more than {limit} levels deep"
        if id(node) in seen:
            return "reuses a table or list through a YAML alias (*name); write the values out"
        seen.add(id(node))
        stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return None


def check_depth(value: Any, where: str, limit: int = MAX_DEPTH) -> None:
    problem = nesting_problem(value, limit)
    if problem:
        raise FileError(f"{where}: {problem}", content=True)


def non_finite(value: Any, path: str = "") -> str | None:
    """The key path of the first NaN or infinite float inside `value`, else None."""
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return where or "<value>"
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return None


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
