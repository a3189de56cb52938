"""Diagnostics: problems collected as rows, reported all at once.

The compiler never raises on bad settings. Every stage appends `Diagnostic` rows to a
`Diagnostics` collector and carries on, so one run reports every problem (the way
harlequin and torchtune collect config errors). Only I/O and usage errors stop early.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "note"]

#: Exit codes of every `tuner` command, defined here once (the README's table lists them).
EXIT_OK = 0
"""Success (warnings allowed)."""
EXIT_INVALID = 1
"""The settings (or an imported config) are invalid: the diagnostics say what to fix."""
EXIT_RANK_FAILED = 1
"""`tuner run` / `tuner launch`: a rank failed (or the rendezvous did); the message names it."""
EXIT_USAGE = 2
"""A usage or I/O error: bad arguments, a missing or unreadable file, a full or read-only disk,
a refused output directory, a run already using the output directory, a rank's user error."""
EXIT_INTERNAL = 70
"""A bug in tuner (EX_SOFTWARE): one line says so and names the file holding the traceback."""
EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C (SIGINT), 128 + 2 as a shell reports it."""
EXIT_BROKEN_PIPE = 141
"""The reader of the output went away (``tuner ... | head``), 128 + SIGPIPE as a shell reports it."""
EXIT_TERMINATED = 143
"""Stopped by SIGTERM, 128 + 15."""


@dataclass(frozen=True)
class Diagnostic:
    """One problem (or remark) about the settings."""

    severity: Severity
    key: str
    """Dotted key path in the canonical layout, e.g. ``fsdp.version``; '' for the file."""
    message: str
    fix: str = ""
    """What the person should do; empty when the message says it already."""
    file: str = ""
    line: int | None = None
    column: int | None = None

    def location(self) -> str:
        where = self.file or "<settings>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where

    def format(self) -> str:
        key = f" [{printable(self.key, keep_newlines=False)}]" if self.key else ""
        text = f"{printable(self.location(), keep_newlines=False)}: {self.severity}{key}: {printable(self.message)}"
        if self.fix:
            text += f"\n    fix: {printable(self.fix)}"
        return text


#: Control characters (C0 but newline, DEL, C1) and the bidirectional overrides: a value's
#: escape sequence must not reach the terminal raw (recolour, retitle or rewrite the screen); a lone
#: surrogate (a file name's undecodable byte) cannot be written to a UTF-8 terminal at all.
_RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str, keep_newlines: bool = True) -> str:
    """`text` for a terminal: control characters from values escaped (``\\x1b``, ``\\n``)."""
    out = _RAW.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return out if keep_newlines else out.replace("\n", "\\n")


@dataclass
class Diagnostics:
    """An ordered collector of diagnostics for one compile."""

    file: str = ""
    items: list[Diagnostic] = field(default_factory=list)
    locate: Callable[[str], tuple[int | None, int | None]] | None = None
    """Maps a key path to (line, column) in the source file, when the file is known."""

    def add(self, severity: Severity, key: str, message: str, fix: str = "") -> None:
        line = column = None
        if self.locate is not None and key:
            line, column = self.locate(key)
        self.items.append(Diagnostic(severity, key, message, fix, self.file, line, column))

    def error(self, key: str, message: str, fix: str = "") -> None:
        self.add("error", key, message, fix)

    def warning(self, key: str, message: str, fix: str = "") -> None:
        self.add("warning", key, message, fix)

    def note(self, key: str, message: str, fix: str = "") -> None:
        self.add("note", key, message, fix)

    def extend(self, items: Iterable[Diagnostic]) -> None:
        self.items.extend(items)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def for_key(self, key: str) -> list[Diagnostic]:
        return [d for d in self.items if d.key == key or d.key.startswith(key + ".")]


def render_text(items: Iterable[Diagnostic]) -> str:
    items = list(items)
    lines = [d.format() for d in items]
    counts = {s: sum(1 for d in items if d.severity == s) for s in ("error", "warning", "note")}
    lines.append(
        f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['note']} note(s)"
    )
    return "\n".join(lines)


def render_json(items: Iterable[Diagnostic], **extra) -> str:
    payload = {"diagnostics": [asdict(d) for d in items], **extra}
    return json.dumps(payload, indent=2, sort_keys=True)
