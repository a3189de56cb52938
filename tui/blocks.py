"""Block detection, opened beside the wrap-classes field (the seed's "Detect Blocks").

A table of the model's module classes, a checkbox per class, total parameters and
occurrences, `_no_split_modules` as badges; Apply Selection fills
``fsdp.transformer_layer_cls_to_wrap``, Refresh Detection bypasses the cache. Detection
builds the model on the meta device (it imports torch), so it runs in a worker thread. When
the detection service is not installed the modal says so; it never invents classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Label, Static

from ..compiler.keys import paths as K
from ..compiler.read.block_cache import human_count
from .fields import steady_cursors
from .model import WizardState
from .services import ServiceUnavailable


def parse_detection(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], list[str], bool]:
    """(classes, no_split_modules, suggestions, from_cache) from block detection's result,
    `DetectionResult.to_dict()` (tuner.compiler.read.block_cache), read by its own field names."""
    classes = [{"name": c["name"], "params": int(c["parameters"]), "occurrences": int(c["occurrences"]),
                "paths": list(c.get("sample_paths") or [])} for c in data.get("classes") or []]
    return (classes, list(data.get("no_split_modules") or []), list(data.get("suggested") or []),
            bool(data.get("cached")))


def summary(data: dict[str, Any]) -> str:
    """``LlamaForCausalLM (transformers), 1.2M parameters`` where the result says so."""
    parts = []
    if data.get("model_class"):
        parts.append(str(data["model_class"]) + (f" ({data['library']})" if data.get("library") else ""))
    if data.get("total_parameters"):
        parts.append(f"{human_count(int(data['total_parameters']), digits=1)} parameters")
    return ", ".join(parts)


class BlocksModal(ModalScreen[list[str] | None]):
    """Pick FSDP wrap classes from the detected module classes."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("space", "toggle_row", "Select", show=True),
        Binding("ctrl+o", "apply", "Apply selection", priority=True),
        Binding("f5", "refresh", "Refresh detection", priority=True),
    ]

    def __init__(self, state: WizardState, detect: Callable[..., dict[str, Any]]) -> None:
        super().__init__(id="blocks")
        self.state = state
        self.detect = detect
        self.selected: set[str] = set(state.value(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP))
        self.names: list[str] = []

    def compose(self) -> ComposeResult:
        v = self.state.values
        with Vertical(id="blocks-box", classes="modal-box"):
            yield Label("Block detection  [dim]space select · ctrl+o apply · F5 refresh · esc cancel[/]",
                        classes="step-title")
            yield Static(f"Model: {v[K.MODEL_PATH]} · family {v[K.MODEL_FAMILY]}"
                         + (f" · flavour {v[K.MODEL_FLAVOUR]}" if v[K.MODEL_FLAVOUR] else ""), markup=False)
            yield Static("detecting…", id="blocks-status", markup=False)
            yield Static("", id="blocks-badges")
            table: DataTable[Text] = DataTable(id="blocks-table", cursor_type="row", zebra_stripes=True)
            table.add_columns("Select", "Class", "Total params", "Occurrences", "Sample path")
            yield table
            with Horizontal(classes="modal-actions"):
                yield Button("Apply Selection (ctrl+o)", id="blocks-apply", variant="primary", compact=True)
                yield Button("Refresh Detection (F5)", id="blocks-refresh", compact=True)
                yield Button("Cancel (esc)", id="blocks-cancel", compact=True)

    def on_mount(self) -> None:
        steady_cursors(self)
        self.run_detection(refresh=False)

    @work(thread=True, exclusive=True, group="blocks")
    def run_detection(self, refresh: bool) -> None:
        v = self.state.values
        try:
            data: Any = self.detect(v[K.MODEL_PATH], v[K.MODEL_FAMILY], v[K.MODEL_FLAVOUR], refresh)
        except ServiceUnavailable as exc:
            data = exc
        except Exception as exc:  # the detector's own error is the message to show
            data = RuntimeError(f"detection failed: {exc}")
        self.app.call_from_thread(self._show, data)

    def _show(self, data: Any) -> None:
        status = self.query_one("#blocks-status", Static)
        table = self.query_one("#blocks-table", DataTable)
        table.clear()
        self.names = []
        if isinstance(data, Exception):
            status.update(f"Block detection unavailable: {data}" if isinstance(data, ServiceUnavailable) else str(data))
            status.add_class("error")
            return
        status.remove_class("error")
        classes, no_split, suggestions, cached = parse_detection(data)
        if not self.selected:
            self.selected = set(suggestions)
        about = summary(data)
        status.update((f"{about} · " if about else "") + f"{len(classes)} module classes"
                      + (" (cached; F5 refreshes)" if cached else "")
                      + (f" · suggested: {', '.join(suggestions)}" if suggestions else ""))
        self.query_one("#blocks-badges", Static).update(
            "_no_split_modules: " + " ".join(f"[reverse] {n} [/]" for n in no_split) if no_split
            else "_no_split_modules: (none declared)")
        for c in sorted(classes, key=lambda c: -c["params"]):
            self.names.append(c["name"])
            table.add_row(self._mark(c["name"]), c["name"], human_count(c["params"], digits=1), str(c["occurrences"]),
                          c["paths"][0] if c["paths"] else "", key=c["name"])
        table.focus()

    def _mark(self, name: str) -> Text:
        # A Text, not a str: DataTable reads strings as markup, and "[x]" is a (empty) tag.
        return Text("[x]" if name in self.selected else "[ ]")

    def action_toggle_row(self) -> None:
        table = self.query_one("#blocks-table", DataTable)
        if not self.names or table.cursor_row is None:
            return
        name = self.names[table.cursor_row]
        self.selected ^= {name}
        table.update_cell(name, table.ordered_columns[0].key, self._mark(name))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_toggle_row()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        handler = {"blocks-apply": self.action_apply, "blocks-refresh": self.action_refresh,
                   "blocks-cancel": self.action_cancel}.get(event.button.id or "")
        if handler:
            handler()

    def action_apply(self) -> None:
        if not self.names:
            self.notify("Nothing detected to apply.", severity="warning")
            return
        self.dismiss([n for n in self.names if n in self.selected])

    def action_refresh(self) -> None:
        self.query_one("#blocks-status", Static).update("detecting (cache bypassed)…")
        self.run_detection(refresh=True)

    def action_cancel(self) -> None:
        self.dismiss(None)
