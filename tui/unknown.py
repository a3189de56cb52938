"""A key the compiler does not know, fixed in the wizard: removed, or renamed to what the
compiler suggests ("did you mean model.family?"), the person's comments kept.

The compiler refuses a file with an unknown key, so no save could succeed until the file was
edited by hand. On Review, Enter on an "unknown key" diagnostic opens `UnknownKeyScreen`:
one button per suggestion ("Rename to model.family"), "Remove it", "Cancel".

The edit is made on the file's text, on the line the compiler named: only the key's name
changes (a rename) or its line goes (a remove), so every comment, blank line and other key
stays where the person put it. A suggestion in another section is written there (the old
line removed). Plain Python above `UnknownKeyScreen`; the screen only offers the choices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tomlkit
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from ..compiler.diagnostics import Diagnostic
from ..compiler.keys.schema import index
from .document import SettingsDocument

_UNKNOWN = re.compile(r"unknown key '(?P<word>[^']+)' (?:in \[(?P<section>[^\]]+)\]|at top level)(?:: (?P<new>\S+) replaced it)?")
_PART = r'(?:[A-Za-z0-9_-]+|"[^"]*"|\'[^\']*\')'
_KEY_AT_START = re.compile(rf"^(?P<lead>\s*)(?P<key>{_PART}(?:\s*\.\s*{_PART})*)(?P<eq>\s*=)")


@dataclass(frozen=True)
class UnknownKey:
    """One unknown key of the file: its path, the line it is on, the keys it may have meant."""

    path: str
    word: str
    section: str | None
    line: int | None
    suggestions: tuple[str, ...]


def unknown_key(d: Diagnostic) -> UnknownKey | None:
    """The unknown key a diagnostic reports (None for any other diagnostic)."""
    m = _UNKNOWN.match(d.message)
    if m is None or not d.key:
        return None
    idx = index()
    word, section = m["word"], m["section"]
    if m["new"]:
        hints = [m["new"]]
    else:
        hints = idx.suggest(word, section) or idx.suggest(word)
    canonical = tuple(dict.fromkeys(idx.aliases.get(h, h) for h in hints if h in idx.keys or h in idx.aliases))
    return UnknownKey(d.key, word, section, d.line, canonical)


def _last_part(key_text: str) -> str:
    parts = re.findall(_PART, key_text)
    return parts[-1].strip("\"'") if parts else ""


def _key_line(text: str, unknown: UnknownKey) -> int | None:
    """The 0-based line that writes `unknown` (the compiler's line, checked), else None."""
    lines = text.splitlines()
    candidates = [unknown.line - 1] if unknown.line else []
    candidates += range(len(lines))
    for i in candidates:
        if 0 <= i < len(lines):
            m = _KEY_AT_START.match(lines[i])
            if m and _last_part(m["key"]) == unknown.word:
                return i
    return None


class FixRefused(Exception):
    """The fix cannot be made (said why, for a notification)."""


def remove(document: SettingsDocument, unknown: UnknownKey) -> SettingsDocument:
    """The document without the unknown key's line (comments on other lines kept)."""
    text = document.text()
    i = _key_line(text, unknown)
    if i is None:
        raise FixRefused(f"{unknown.path}: its line was not found; remove it in the file")
    lines = text.splitlines(keepends=True)
    return _checked("".join(lines[:i] + lines[i + 1:]), unknown)


def rename(document: SettingsDocument, unknown: UnknownKey, new_key: str) -> SettingsDocument:
    """The document with the unknown key renamed to `new_key` (a canonical key), value kept."""
    info = index().keys[new_key]
    if document.is_written(new_key):
        raise FixRefused(f"{new_key} is already set in the file; remove {unknown.path} instead")
    text = document.text()
    i = _key_line(text, unknown)
    if i is None:
        raise FixRefused(f"{unknown.path}: its line was not found; rename it in the file")
    if unknown.section == info.section:
        lines = text.splitlines(keepends=True)
        m = _KEY_AT_START.match(lines[i])
        assert m is not None  # _key_line matched it
        key = m["key"]
        parts = list(re.finditer(_PART, key))
        start, end = parts[-1].span()
        lines[i] = lines[i][:m.start("key")] + key[:start] + info.name + key[end:] + lines[i][m.end("key"):]
        return _checked("".join(lines), unknown, new_key)
    value = tomlkit.parse(text)
    for part in unknown.path.split("."):
        value = value[part]
    fixed = remove(document, unknown)
    fixed.set(new_key, value.unwrap() if hasattr(value, "unwrap") else value)
    return _checked(fixed.text(), unknown, new_key)


def _checked(text: str, unknown: UnknownKey, new_key: str | None = None) -> SettingsDocument:
    """`text` as a document if it parses, no longer has the unknown key (and has `new_key`);
    else FixRefused (a value written over several lines, say)."""
    try:
        document = SettingsDocument(text)
    except Exception:  # noqa: BLE001 - tomlkit's parse errors
        raise FixRefused(f"{unknown.path}: its value spans several lines; edit it in the file") from None
    plain = document.plain()
    node: object = plain
    for part in unknown.path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is not None or (new_key is not None and not document.is_written(new_key)):
        raise FixRefused(f"{unknown.path}: the fix did not apply cleanly; edit it in the file")
    return document


def apply(state, unknown: UnknownKey, choice: str) -> str:
    """Make the person's `choice` ("remove" or a key) on `state`'s document; what was done."""
    if choice == "remove":
        state.document = remove(state.document, unknown)
        done = f"removed {unknown.path}"
    else:
        state.document = rename(state.document, unknown, choice)
        done = f"renamed {unknown.path} to {choice}"
    state.validate()
    return done


def find(diagnostics: list[Diagnostic], path: str) -> UnknownKey | None:
    """The unknown key at `path` among `diagnostics`, if one is."""
    for d in diagnostics:
        if d.key == path and (u := unknown_key(d)) is not None:
            return u
    return None


class UnknownKeyScreen(ModalScreen[str | None]):
    """Remove or rename one unknown key; dismisses with "remove", a key to rename to, or None."""

    BINDINGS = [Binding("escape", "dismiss_none", "Cancel")]

    def __init__(self, unknown: UnknownKey) -> None:
        super().__init__()
        self.unknown = unknown

    def compose(self) -> ComposeResult:
        u = self.unknown
        where = f"in [{u.section}]" if u.section else "at top level"
        with Vertical(id="unknown-box", classes="modal-box"):
            yield Label(f"Unknown key {u.word!r} {where} ({u.path}): tuner compile refuses the file until it "
                        "is removed or renamed. Comments in the file are kept.", id="unknown-what", markup=False)
            for i, key in enumerate(u.suggestions):
                yield Button(f"Rename to {key}", id=f"unknown-rename-{i}", variant="primary" if i == 0 else "default",
                             compact=True)
            yield Button("Remove it", id="unknown-remove", compact=True)
            yield Button("Cancel (esc)", id="unknown-cancel", compact=True)

    def on_mount(self) -> None:
        self.query(Button).first().focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        name = event.button.id or ""
        if name == "unknown-remove":
            self.dismiss("remove")
        elif name.startswith("unknown-rename-"):
            self.dismiss(self.unknown.suggestions[int(name.rsplit("-", 1)[1])])
        else:
            self.dismiss(None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
