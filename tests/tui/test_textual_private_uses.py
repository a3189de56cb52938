"""Every private Textual name tui/ uses is listed in tui/textual_private.py (whose test checks
it against the installed, pinned Textual): read from the source, so a new use cannot slip by.

A use is an underscore name (not a dunder) that tui/ reads, assigns or defines (a handler it
overrides) on a Textual object: on a class that subclasses a Textual class, the names that
class's Textual bases have; on any other object (`self.app._begin_batch()`), the names any
Textual class tui/ imports has. Names of tuner's own plain classes (`self._pending` in
KeyQueue) are not Textual's."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re

from tuner.tui.textual_private import PRIVATE_NAMES

from tests.packages import REPO

TUI = REPO / "tui"


@functools.cache
def _private_names(klass: type) -> set[str]:
    names = {a for a in dir(klass) if a.startswith("_") and not a.startswith("__")}
    for base in klass.__mro__:
        try:
            names.update(re.findall(r"self\.(_[a-z]\w*)\s*(?::[^=]+)?=", inspect.getsource(base)))
        except (OSError, TypeError):
            pass
    return names


def _textual_imports(tree: ast.Module) -> dict[str, type]:
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "textual":
            module = importlib.import_module(node.module)
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if inspect.isclass(value):
                    out[alias.asname or alias.name] = value
    return out


def uses(source: str) -> set[str]:
    """The private Textual names `source` (a tui module) uses."""
    from textual.app import App
    from textual.message_pump import MessagePump
    from textual.screen import Screen
    from textual.widget import Widget

    tree = ast.parse(source)
    imported = _textual_imports(tree)
    anywhere = set().union(*(_private_names(k) for k in (App, Screen, Widget, MessagePump, *imported.values())))
    found: set[str] = set()
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        bases = [imported[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in imported]
        if isinstance(cls.bases[0] if cls.bases else None, ast.Subscript):  # ModalScreen[...]
            sub = cls.bases[0].value
            bases += [imported[sub.id]] if isinstance(sub, ast.Name) and sub.id in imported else []
        own = set().union(*(_private_names(b) for b in bases)) if bases else set()
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in own:
                found.add(node.name)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                    and node.attr in own:
                found.add(node.attr)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in anywhere and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"):
            found.add(node.attr)
    return found


def test_the_scan_finds_each_kind_of_use():
    src = ("from textual.widgets import Input, Footer\nfrom textual.app import App\n"
           "class F(Input):\n    def _on_paste(self, e): self._pending = 1\n"
           "class K(Footer):\n    def f(self): self._bindings_ready = True\n"
           "class Q:\n    def f(self): self._task = 1; self.app._begin_batch()\n")
    assert uses(src) == {"_on_paste", "_bindings_ready", "_begin_batch"}


def test_every_private_textual_name_tui_uses_is_listed():
    listed = {attr for (_module, _cls, attr) in PRIVATE_NAMES}
    unlisted = {f"{path.relative_to(REPO)}: {name}"
                for path in sorted(TUI.rglob("*.py")) if path.name != "textual_private.py"
                for name in uses(path.read_text(encoding="utf-8")) - listed}
    assert not unlisted, f"private Textual names not listed in tui/textual_private.py: {sorted(unlisted)}"
