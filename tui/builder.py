"""The DeepSpeed builder: ZeRO stage, offload, optimizer, scheduler, accumulation and
clipping, with the JSON preview the compiler would write, and reusable templates.

The builder edits the settings' builder keys (``deepspeed.*``), never a JSON of its own:
the preview is `compile_text`'s DeepSpeed JSON, so what is shown is what is written.
Cancel (Escape) restores the settings as they were when the builder opened.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from ..compiler.keys import paths as K
from .document import SettingsDocument
from .fields import FieldRow, steady_cursors
from .layout import BUILDER_KEYS
from .model import WizardState
from .services import Templates


class DeepSpeedBuilder(ModalScreen[bool]):
    """Build the DeepSpeed configuration; dismisses True when applied."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+o", "done", "Apply", priority=True),
        Binding("ctrl+t", "save_template", "Save template", priority=True),
        Binding("ctrl+l", "load_template", "Load template", priority=True),
    ]

    def __init__(self, state: WizardState, templates: Templates) -> None:
        super().__init__(id="builder")
        self.state = state
        self.templates = templates
        self._snapshot = state.document.text()
        self._saved_text = state.saved_text

    def compose(self) -> ComposeResult:
        with Vertical(id="builder-box", classes="modal-box"):
            yield Label("DeepSpeed builder  [dim]ctrl+o apply · esc cancel · ctrl+t/ctrl+l templates[/]",
                        classes="step-title")
            with Horizontal(id="builder-body"):
                with VerticalScroll(id="builder-form"):
                    for key in BUILDER_KEYS:
                        yield FieldRow(key, self.state.shown(key))
                    yield Label("Templates", classes="field-label")
                    with Horizontal(classes="field-line"):
                        yield Input(placeholder="template name", id="template-name", classes="field-input", compact=True)
                        yield Button("Save (ctrl+t)", id="template-save", classes="inline-button", compact=True)
                    with Horizontal(classes="field-line"):
                        yield Select(self._template_options(), id="template-pick", prompt="saved templates",
                                     classes="field-input", compact=True)
                        yield Button("Load (ctrl+l)", id="template-load", classes="inline-button", compact=True)
                with VerticalScroll(id="builder-preview"):
                    yield Static("", id="builder-diags", classes="field-diags")
                    yield Static("", id="builder-json", markup=False)
            with Horizontal(classes="modal-actions"):
                yield Button("Apply (ctrl+o)", id="builder-done", variant="primary", compact=True)
                yield Button("Cancel (esc)", id="builder-cancel", compact=True)

    def _template_options(self) -> list[tuple[str, str]]:
        return [(n, n) for n in self.templates.names()]

    def on_mount(self) -> None:
        steady_cursors(self)
        if self.state.strategy != "deepspeed":
            self.state.set_strategy("deepspeed")
        self.sync(reload_values=True)
        first = self.query(FieldRow).first().input
        self.set_focus(first, scroll_visible=False)  # keys typed right after F7 land in the ZeRO stage

    def sync(self, reload_values: bool = False) -> None:
        for row in self.query(FieldRow):
            row.display = row.key != K.DEEPSPEED_NVME_PATH or self.state.visible(row.key)
            if reload_values:
                row.load(self.state.shown(row.key))
            row.show_diagnostics(self.state.diagnostics_for(row.key))
        errors = [d for d in self.state.errors]
        box = self.query_one("#builder-diags", Static)
        box.update("\n".join(f"error [{d.key}]: {d.message}" for d in errors))
        box.display = bool(errors)
        box.set_class(bool(errors), "error")
        self.query_one("#builder-json", Static).update(
            self.state.result.deepspeed_json or "(no JSON until the errors are fixed)")

    def on_field_row_changed(self, event: FieldRow.Changed) -> None:
        event.stop()
        if self.state.set(event.key, event.value):
            self.sync()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        handler = {"builder-done": self.action_done, "builder-cancel": self.action_cancel,
                   "template-save": self.action_save_template,
                   "template-load": self.action_load_template}.get(event.button.id or "")
        if handler:
            handler()

    def action_done(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.state.document = SettingsDocument(self._snapshot)
        self.state.saved_text = self._saved_text
        self.state.validate()
        self.dismiss(False)

    def action_save_template(self) -> None:
        name = self.query_one("#template-name", Input).value.strip()
        if not name:
            self.notify("Type a template name first.", severity="warning")
            self.query_one("#template-name", Input).focus()
            return
        values = {key: self.state.value(key) for key in BUILDER_KEYS}
        path = self.templates.save(name, values)
        self.query_one("#template-pick", Select).set_options(self._template_options())
        self.notify(f"template saved: {path}", title="DeepSpeed builder")

    def action_load_template(self) -> None:
        pick = self.query_one("#template-pick", Select)
        if pick.value is Select.NULL:
            names = self.templates.names()
            if not names:
                self.notify("No saved templates yet.", severity="warning")
                return
            pick.value = names[0]
        values = self.templates.load(str(pick.value))
        self.state.set_many({k: v for k, v in values.items() if k in BUILDER_KEYS})
        self.sync(reload_values=True)
        self.notify(f"template {pick.value!s} loaded", title="DeepSpeed builder")
