"""Help (`?` or F12): every key of the wizard, and a searchable reference of every
settings key, taken from the schema (name, type, default, choices, description, aliases,
and the step that edits it)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from ..compiler.keys.schema import index
from .fields import FieldInput, steady_cursors
from .keys import KEYS
from .layout import STEPS, STRATEGY_KEYS, render_value, step_of


def reference(query: str = "") -> list[str]:
    """One entry per schema key whose text contains every word of `query`."""
    words = query.lower().split()
    titles = {s.id: s.title for s in STEPS}
    out = []
    for key, info in index().keys.items():
        where = "Sharding: strategy" if key in STRATEGY_KEYS else titles[step_of(key)]
        kind = info.prop.get("type")
        choices = f" one of {', '.join(render_value(v) for v in info.enum)}" if info.enum else ""
        aliases = f" (also: {', '.join(info.aliases)})" if info.aliases else ""
        entry = (f"{key}{aliases} · {kind}{choices} · default {render_value(info.default) or '(empty)'}"
                 f" · step: {where}\n    {info.description}")
        if all(w in entry.lower() for w in words):
            out.append(entry)
    return out


class HelpScreen(ModalScreen[None]):
    """Keys and the settings reference; type to search, Escape closes."""

    BINDINGS = [Binding("escape,f12", "close", "Close", priority=True)]

    def compose(self) -> ComposeResult:
        width = max(len(k[1]) for k in KEYS)
        with Vertical(id="help-box", classes="modal-box"):
            yield Label("Help  [dim]type to search the settings · esc closes[/]", classes="step-title")
            with VerticalScroll(id="help-scroll"):
                yield Static("\n".join(f"{shown:<{width}}  {what}" for _, shown, what in KEYS), id="help-keys",
                             markup=False)
                yield Label("Settings reference (from the schema)", classes="field-label")
                yield FieldInput(placeholder="search: a key, a word of its description", id="help-search",
                                 compact=True)
                yield Static("", id="help-reference", markup=False)

    def on_mount(self) -> None:
        steady_cursors(self)
        self.set_focus(self.query_one("#help-search", Input), scroll_visible=False)
        self._show("")

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._show(event.value)

    def _show(self, query: str) -> None:
        hits = reference(query)
        self.query_one("#help-reference", Static).update(
            f"{len(hits)} of {len(index().keys)} keys\n\n" + "\n".join(hits) if hits else f"no key matches {query!r}")

    def action_close(self) -> None:
        self.dismiss(None)
