"""What every format reader produces, and the errors `tuner import` reports."""

from __future__ import annotations

from dataclasses import dataclass, field
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

    def set(self, path: str, value: Any, source: str) -> None:
        if path in self.values and self.values[path] != value:
            self.remarks.append(f"{path}: {self.values[path]!r} replaced by {value!r} from {source}")
        self.values[path] = value

    def default(self, path: str, value: Any, source: str, why: str) -> None:
        """Set a value the source leaves unset, to what its own tool would use (with a remark)."""
        if path not in self.values:
            self.values[path] = value
            self.remarks.append(f"{source}: {why}")
