"""One settings field: label, input, help and diagnostics, all taken from the schema.

The input kind follows the key's JSON-Schema property: an ``enum`` is a `Select` of exactly
its values, a boolean a `Switch`, anything else an `Input` (lists comma-separated). The
row sends `FieldRow.Changed` with the typed value; the screen writes it to the document.

A row shows what it is given (`WizardState.shown`: for a value the compile rejected, the
file's own value) and sends Changed only for what the person changes: a widget's echo of
the value it was built or loaded with is not an edit, so a rejected value is never replaced
by anything the person did not choose. A value a Select or a Switch cannot show (not among
the choices, not true or false) leaves the Select blank with "(invalid: VALUE)" as its
prompt and the Switch off with "invalid: VALUE" beside it; the row's diagnostics line gives
the compile's message.
"""

from __future__ import annotations

import json
from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.markup import escape
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
        self._showing: Any = None
        """What the input shows as the row last set it or the person last changed it (its text, a
        Select's choice or Select.NULL, a Switch's bool): a Changed carrying it is an echo."""
        self._blank_ok = False
        """The Select was built blank (for a value outside its choices), so it can be blank again."""
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
            state = Static("", classes="switch-state", markup=False)
            _show_switch_state(state, self._initial)
            line.append(state)
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
            self._showing = value if self._is_choice(value) else Select.NULL
            self._blank_ok = self._showing is Select.NULL
            # Blank only for a value outside the choices (a rejected one): its prompt names it.
            return Select(options, value=self._showing, allow_blank=self._showing is Select.NULL,
                          prompt=escape(f"(invalid: {_quoted(value)})") if self._showing is Select.NULL else "Select",
                          id=wid, classes="field-input", compact=True)
        if self.info.prop.get("type") == "boolean":
            self._showing = value is True  # a rejected non-boolean shows off, and "invalid: ..." beside it
            return Switch(value=self._showing, id=wid, classes="field-input")
        placeholder = "comma-separated" if self.info.prop.get("type") == "array" else render_value(self.info.default)
        self._showing = render_value(value)
        # validate_on=(): the field has no validators (the compiler checks values), and Input's
        # validation on each change only adds a "-valid" class no style uses, restyling the widget.
        field = FieldInput(self._showing, placeholder=placeholder, id=wid, classes="field-input", compact=True,
                           validate_on=())
        if getattr(self.app, "cursor_blink", True) is False:  # steady_cursors, for a row built later
            field.cursor_blink = False
        return field

    def _is_choice(self, value: Any) -> bool:
        """`value` is one of the Select's choices (`True` is not the choice `1`)."""
        return any(value == choice and type(value) is type(choice) for choice in self.info.enum or ())

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
                if self._is_choice(value):
                    widget.value = self._showing = value
                elif self._blank_ok:
                    widget.prompt = escape(f"(invalid: {_quoted(value)})")
                    widget.value = self._showing = Select.NULL
                else:  # a Select built without a blank cannot show it: build it again
                    self.call_later(self._rebuild_input, value)
            elif isinstance(widget, Switch):
                widget.value = self._showing = value is True
                _show_switch_state(self.query_one(".switch-state", Static), value)
            elif parse_input(self.key, widget.value) != value:
                widget.value = self._showing = render_value(value)

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

    async def _rebuild_input(self, value: Any) -> None:
        """Replace the input by one built for `value` (a Select without a blank, for a value
        outside its choices: the one change `load` cannot make in place)."""
        old = self.input
        line = old.parent
        await old.remove()
        if line is not None:
            await line.mount(self._make_input(value), after=0)  # after the label

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if event.value == self._showing:
            return  # the text the row set, echoed as the input mounts: not the person's edit
        self._showing = event.value
        self._emit(parse_input(self.key, event.value))

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.value == self._showing:
            return  # the choice the row set, echoed as the Select mounts
        if event.value is Select.NULL:
            # The blank (a Select built for a rejected value) picked after a choice: the file holds
            # that choice, so the Select shows it again.
            with self.prevent(Select.Changed):
                event.select.value = self._showing
            return
        self._showing = event.value
        if self._blank_ok:
            event.select.prompt = "Select"  # the rejected value it named is no longer the file's
        self._emit(event.value)

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        if event.value == self._showing:
            return
        self._showing = event.value
        _show_switch_state(self.query_one(".switch-state", Static), event.value)
        self._emit(event.value)


def _quoted(value: Any) -> str:
    """A value as the compiler's messages quote it (`"fp7"`, `3`, `[1]`), cut to fit a field."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 30 else text[:27] + "..."


def _show_switch_state(state: Static, value: Any) -> None:
    """A Switch's state in words beside it: on, off, or the rejected value it cannot show."""
    valid = isinstance(value, bool)
    state.update(("on" if value else "off") if valid else f"invalid: {_quoted(value)}")
    state.set_class(not valid, "invalid")  # wider than on/off (wizard.tcss)


def shown_within(widget, container) -> bool:
    """True when neither `widget` nor any parent up to `container` has display: none."""
    node = widget
    while node is not None and node is not container:
        if not node.display:
            return False
        node = node.parent
    return True
