"""One settings field: label, input, help and diagnostics, all taken from the schema.

The input kind follows the key's JSON-Schema property: an ``enum`` is a `Select` of exactly
its values, a boolean a `Switch`, anything else an `Input` (lists comma-separated). The
row sends `FieldRow.Changed` with the typed value; the screen writes it to the document.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, Switch

from ..compiler.diagnostics import Diagnostic
from .layout import key_info, label, parse_input, render_value


class FieldInput(Input):
    """A text field; a paste of several lines keeps the first and says so (a field holds one line)."""

    def _on_paste(self, event: events.Paste) -> None:
        event.prevent_default()  # Input's own handler keeps the first line, blank or not, without a word
        event.stop()
        lines = [line.strip() for line in event.text.splitlines() if line.strip()]
        if len(lines) > 1:
            self.notify(f"Pasted {len(lines)} lines: a field holds one line, so only the first was kept "
                        f"({lines[0][:40]}).", title="Paste", severity="warning", markup=False)
        if lines:
            if self.selection.is_empty:
                self.insert_text_at_cursor(lines[0])
            else:
                self.replace(lines[0], *self.selection)


def steady_cursors(screen: Screen[Any]) -> None:
    """Stop the cursors of `screen`'s text fields blinking where the app says so (the wizard's
    `cursor_blink = False`, in tests: a blink would make snapshots differ)."""
    if getattr(screen.app, "cursor_blink", True) is False:
        for widget in screen.query(Input):
            widget.cursor_blink = False


def dom_id(key: str) -> str:
    """A widget id for a canonical key (ids may not contain dots)."""
    return key.replace(".", "--")


class FieldRow(Vertical):
    """A schema key as a form row."""

    class Changed(Message):
        """The person changed the value of `key`."""

        def __init__(self, row: FieldRow, key: str, value: Any) -> None:
            super().__init__()
            self.row = row
            self.key = key
            self.value = value

    def __init__(self, key: str, value: Any, *, extra: Any = None, shown: bool = True) -> None:
        super().__init__(id=f"row-{dom_id(key)}", classes="field-row")
        self.key = key
        self.info = key_info(key)
        self._initial = value
        self._extra = extra
        self._shown: tuple[str, ...] = ()
        self.built = shown
        """False while a row hidden when its step was built has no parts yet: they are built
        the first time it shows (`build`), so the fields a step hides cost nothing before then."""
        if not shown:
            self.display = False

    def compose(self) -> ComposeResult:
        if self.built:
            yield from self._parts()

    def _parts(self) -> list[Widget]:
        line = [Label(label(self.key), classes="field-label"), self._make_input(self._initial)]
        if self.info.prop.get("type") == "boolean":
            # The state in words too: a knob's position or colour is lost in a plain
            # capture and under NO_COLOR.
            line.append(Static(_on_off(bool(self._initial)), classes="switch-state", markup=False))
        if self._extra is not None:
            line.append(self._extra)
        # The diagnostics line (hidden while empty) is mounted by show_diagnostics when the key
        # first has one: most rows never do, and every widget built costs the first paint.
        return [Horizontal(*line, classes="field-line"),
                Static(f"{self.key}: {self.info.description}", classes="field-help", markup=False)]

    def build(self, value: Any) -> None:
        """Build the parts of a row created hidden (`shown=False`), showing `value`."""
        if self.built:
            return
        self.built = True
        self._initial = value
        self.mount_all(self._parts())

    def _make_input(self, value: Any):
        wid = f"in-{dom_id(self.key)}"
        if self.info.enum:  # a Select of exactly the schema's choices
            options = [(render_value(v), v) for v in self.info.enum]
            initial = value if value in self.info.enum else Select.NULL
            return Select(options, value=initial, allow_blank=initial is Select.NULL, id=wid, classes="field-input",
                          compact=True)
        if self.info.prop.get("type") == "boolean":
            return Switch(value=bool(value), id=wid, classes="field-input")
        placeholder = "comma-separated" if self.info.prop.get("type") == "array" else render_value(self.info.default)
        # validate_on=(): the field has no validators (the compiler checks values), and Input's
        # validation on each change only adds a "-valid" class no style uses, restyling the widget.
        field = FieldInput(render_value(value), placeholder=placeholder, id=wid, classes="field-input", compact=True,
                           validate_on=())
        if getattr(self.app, "cursor_blink", True) is False:  # steady_cursors, for a row built later
            field.cursor_blink = False
        return field

    @property
    def input(self):
        return self.query_one(f"#in-{dom_id(self.key)}")

    def load(self, value: Any) -> None:
        """Show `value` without sending Changed (it came from the document, not the person)."""
        if not self.built:
            self._initial = value  # what it shows once built
            return
        widget = self.input
        with self.prevent(Input.Changed, Select.Changed, Switch.Changed):
            if isinstance(widget, Select):
                if value in (self.info.enum or []):
                    widget.value = value
            elif isinstance(widget, Switch):
                widget.value = bool(value)
                self.query_one(".switch-state", Static).update(_on_off(bool(value)))
            elif parse_input(self.key, widget.value) != value:
                widget.value = render_value(value)

    def show_diagnostics(self, diags: list[Diagnostic]) -> None:
        if not self.built:
            return  # hidden and without parts: shown when it is built (the sync that builds it calls this)
        lines = tuple(f"{d.severity}: {d.message}" + (f" — {d.fix}" if d.fix else "") for d in diags)
        if lines == self._shown:
            return  # nothing new: skip the re-layout (this runs on every keystroke)
        self._shown = lines
        boxes = self.query(".field-diags")
        if boxes:
            box = boxes.first(Static)
        else:
            box = Static("", classes="field-diags")
            self.mount(box)
        box.update("\n".join(lines))
        box.display = bool(lines)
        self.set_class(any(d.severity == "error" for d in diags), "has-error")
        self.set_class(any(d.severity == "warning" for d in diags), "has-warning")
        box.set_class(any(d.severity == "error" for d in diags), "error")

    def on_descendant_focus(self) -> None:
        self.add_class("-active")  # the full help text shows for the focused field

    def on_descendant_blur(self) -> None:
        self.remove_class("-active")

    def _emit(self, value: Any) -> None:
        self.post_message(self.Changed(self, self.key, value))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._emit(parse_input(self.key, event.value))

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is not Select.NULL:
            self._emit(event.value)

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        self.query_one(".switch-state", Static).update(_on_off(event.value))
        self._emit(event.value)


def _on_off(value: bool) -> str:
    return "on" if value else "off"
