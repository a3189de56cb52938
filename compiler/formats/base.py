"""What every format reader gets and produces (`load`: a source file parsed and made TOML-shaped),
and the errors `tuner import` reports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..diagnostics import EXIT_INVALID, EXIT_USAGE


class ImportError_(Exception):
    """A source cannot be read (exit 2: an I/O or parse problem)."""

    exit_code = EXIT_USAGE


class ImportRefused(ImportError_):
    """A source was read but tuner will not import it: an unrecognised format, or a choice
    tuner has no equivalent for (exit 1, like invalid settings). Nothing is written."""

    exit_code = EXIT_INVALID


@dataclass
class Imported:
    values: dict[str, Any] = field(default_factory=dict)
    """Canonical settings paths (``fsdp.version``) -> value."""
    remarks: list[str] = field(default_factory=list)
    unmodelled: dict[str, Any] = field(default_factory=dict)
    """Keys about distributed training that tuner does not model (kept through accelerate.base
    or listed in the written file)."""
    not_distributed: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Source file -> its keys that are not about distributed training (data, captions,
    validation...): listed in one note, not imported."""
    sources: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    finish: list[Callable[[Imported], None]] = field(default_factory=list)
    """Run once every source is read: a reader's choice that depends on the other files
    (SimpleTuner's value clipping is its default only without DeepSpeed, which an accelerate
    YAML given after it may turn on)."""

    def set(self, path: str, value: Any, source: str) -> None:
        if path in self.values and self.values[path] != value:
            self.remarks.append(f"{path}: {self.values[path]!r} replaced by {value!r} from {source}")
        self.values[path] = value

    def default(self, path: str, value: Any, source: str, why: str) -> None:
        """Set a value the source leaves unset, to what its own tool would use (with a remark)."""
        if path not in self.values:
            self.values[path] = value
            self.remarks.append(f"{source}: {why}")


def load(path: Path) -> Any:
    """A source file parsed by its suffix (.yaml/.yml, .toml, otherwise JSON), read through
    the safe reader (a regular, size-capped, UTF-8 file; JSON without NaN; bounded nesting)
    and made TOML-shaped: every key a string, JSON nulls and YAML ``~`` dropped (TOML has no
    null: an unset value)."""
    from .. import parse
    from ..read import files

    try:
        text = files.read_text(path, "import source", files.MAX_CONFIG_BYTES)
        if path.suffix in (".yaml", ".yml"):
            data = parse.parse_yaml(text, str(path))
        elif path.suffix == ".toml":
            import tomllib

            try:
                data = tomllib.loads(text)
            except RecursionError:
                raise parse.FileError(f"{path}: nested more than {parse.MAX_DEPTH} levels deep") from None
            parse.check_depth(data, str(path))
        else:
            data = parse.parse_json(text, str(path))
    except parse.FileError as exc:
        raise ImportError_(f"{path} does not parse: {exc.message}" if exc.content else exc.message) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise ImportError_(f"{path} does not parse: {exc}") from None
    _check_counts(data, path)
    return _toml_shaped(data, path)


#: Import sources are configs of a few hundred values; tomlkit, which writes the settings file,
#: takes time quadratic in a list's length, so larger ones are refused before any is written.
MAX_IMPORT_VALUES = 10_000


MAX_IMPORT_LIST = 1_000


def _check_counts(data: Any, path: Path) -> None:
    count, stack = 0, [data]
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_IMPORT_VALUES:
            raise ImportError_(f"{path} holds more than {MAX_IMPORT_VALUES:,} values, the limit for an import "
                               "source (real configs hold a few hundred)")
        if isinstance(node, list):
            if len(node) > MAX_IMPORT_LIST:
                raise ImportError_(f"{path} has a list of {len(node):,} items; the limit for an import source "
                                   f"is {MAX_IMPORT_LIST:,}")
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())


def _toml_shaped(value: Any, path: Path, where: str = "") -> Any:
    """Nulls dropped; a key that is not a string (YAML reads ``1:``, ``on:`` or ``null:`` as
    a number, a boolean or None) is refused, naming where it is."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                place = f" in {where}" if where else " at top level"
                raise ImportError_(f"{path}: key {key!r}{place} is not a string; quote it (\"{key}\": ...)")
            if item is not None:
                out[key] = _toml_shaped(item, path, f"{where}.{key}" if where else key)
        return out
    if isinstance(value, list):
        return [_toml_shaped(item, path, where) for item in value if item is not None]
    return value
