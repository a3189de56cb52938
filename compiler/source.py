"""Reading settings files: TOML text -> plain dict, plus where each key was written.

`tomllib` parses (fast, stdlib). It does not report key positions, so `KeyLocator` scans
the text once for table headers and ``key =`` lines; that is enough to point a diagnostic
at the line a person has to edit.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:"[^"]*"|'[^']*'|[A-Za-z0-9_\-]+)(?:\s*\.\s*(?:"[^"]*"|'[^']*'|[A-Za-z0-9_\-]+))*)\s*=""")
_TOML_POS = re.compile(r"\(at line (\d+), column (\d+)\)")


def _split_dotted(text: str) -> list[str]:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_\-]+)', text)
    return [a or b or c for a, b, c in parts]


@dataclass
class KeyLocator:
    """Maps dotted key paths (as written in the file) to (line, column)."""

    positions: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def scan(cls, text: str) -> "KeyLocator":
        loc = cls()
        table: list[str] = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            header = _HEADER.match(line)
            if header:
                table = _split_dotted(header.group(1))
                loc.positions.setdefault(".".join(table), (lineno, line.index("[") + 1))
                continue
            key = _KEY.match(line)
            if key:
                path = ".".join(table + _split_dotted(key.group(1)))
                column = len(line) - len(line.lstrip()) + 1
                loc.positions.setdefault(path, (lineno, column))
        return loc

    def find(self, path: str) -> tuple[int | None, int | None]:
        """Position of `path`, or of its nearest written parent."""
        parts = path.split(".")
        while parts:
            hit = self.positions.get(".".join(parts))
            if hit:
                return hit
            parts.pop()
        return None, None


@dataclass
class Source:
    path: Path | None
    data: dict[str, Any]
    locator: KeyLocator
    text: str = ""


class SourceError(Exception):
    """The file cannot be read or is not TOML; carries a position when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None, io: bool = False):
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.io = io


def read_settings(path: Path) -> Source:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SourceError(f"settings file not found: {path}", io=True) from None
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}", io=True) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    return parse_settings_text(text, path)


def parse_settings_text(text: str, path: Path | None = None) -> Source:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        pos = _TOML_POS.search(message)
        line = column = None
        if pos:
            line, column = int(pos.group(1)), int(pos.group(2))
            message = _TOML_POS.sub("", message).strip()
        raise SourceError(f"invalid TOML: {message}", line, column) from None
    return Source(path, data, KeyLocator.scan(text), text)
