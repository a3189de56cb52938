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

from .. import parse
from . import files

# Both patterns are matched against one line and have no nested or overlapping repeats,
# so a match costs time linear in the line's length (a long line in a multi-line string
# once took seconds with an ambiguous pattern).
_HEADER = re.compile(r"\[\[?([^\]]*)\]\]?[ \t]*(?:#.*)?")
_PART = r"""(?:"[^"]*"|'[^']*'|[A-Za-z0-9_\-]+)"""
_KEY = re.compile(rf"[ \t]*({_PART}(?:[ \t]*\.[ \t]*{_PART})*)[ \t]*=")
_TOML_POS = re.compile(r"\(at line (\d+), column (\d+)\)")


def _split_dotted(text: str) -> list[str]:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_\-]+)', text)
    return [a or b or c for a, b, c in parts]


@dataclass
class KeyLocator:
    """Maps dotted key paths (as written in the file) to (line, column)."""

    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    deepest: int = 0
    """The most parts of any key path seen (table header + dotted key)."""

    @classmethod
    def scan(cls, text: str) -> KeyLocator:
        loc = cls()
        table: list[str] = []
        open_quote = ""  # the delimiter of a multi-line string being read, if any
        for lineno, line in enumerate(text.splitlines(), start=1):
            if open_quote:  # inside a multi-line string: no keys here
                if line.count(open_quote) % 2:
                    open_quote = ""
                continue
            for quote in ('"""', "'''"):
                if line.count(quote) % 2:  # this line opens a multi-line string
                    open_quote = quote
            header = _HEADER.fullmatch(line.strip())
            if header:
                table = _split_dotted(header.group(1).strip())
                loc.deepest = max(loc.deepest, len(table))
                loc.positions.setdefault(".".join(table), (lineno, line.index("[") + 1))
                continue
            key = _KEY.match(line)
            if key:
                parts = table + _split_dotted(key.group(1))
                loc.deepest = max(loc.deepest, len(parts))
                path = ".".join(parts)
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


#: Settings files larger than this are refused (real ones are a few kilobytes).
MAX_SETTINGS_BYTES = files.MAX_CONFIG_BYTES


def read_settings(path: Path) -> Source:
    """Read and parse a settings file; SourceError (``io`` set when it cannot be read)."""
    try:
        text = files.read_text(path, "settings file", MAX_SETTINGS_BYTES)
    except parse.FileError as exc:
        raise SourceError(exc.message, io=not exc.content) from None
    return parse_settings_text(text, path)


def parse_settings_text(text: str, path: Path | None = None) -> Source:
    locator = KeyLocator.scan(text)  # linear; first, because it also bounds tomllib's work:
    # tomllib resolves a dotted key from the root once per part, quadratic in its length.
    if locator.deepest > parse.MAX_DEPTH:
        raise SourceError(f"invalid settings: a key nested more than {parse.MAX_DEPTH} levels deep")
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
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise SourceError(f"invalid settings: nested more than {parse.MAX_DEPTH} levels deep") from None
    problem = parse.nesting_problem(data)  # dotted keys nest without recursion in the parser
    if problem:
        raise SourceError(f"invalid settings: {problem}")
    return Source(path, data, locator, text)
