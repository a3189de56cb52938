"""Quick start (F10): four answers, a proposed strategy, one key to accept it.

Model (a local directory with config.json, or ``builtin:NAME``), GPUs per machine, GPU
memory and machines. The proposal is the memory estimator's cheapest strategy that fits
the stated GPU memory (`estimate_view.proposal`), with its per-GPU figure. Enter (or
ctrl+o) applies it with bf16 and sharded checkpoints and the wizard lands on Review;
Escape goes back with nothing changed.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from .fields import FieldInput
from .model import WizardState

_FIELDS = (
    ("qs-model", "Model", "a local directory with config.json, or builtin:NAME"),
    ("qs-gpus", "GPUs per machine", "8"),
    ("qs-memory", "GPU memory (GiB)", "80"),
    ("qs-machines", "Machines", "1"),
)


class QuickStart(ModalScreen[dict[str, Any] | None]):
    """The quick path: dismisses with the edits to apply (None: cancelled)."""

    BINDINGS = [
        Binding("enter", "accept", "Accept", priority=True),
        Binding("ctrl+o", "accept", "Accept", priority=True),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, state: WizardState, propose: Callable[[str, Any], dict[str, Any]]) -> None:
        super().__init__(id="quickstart")
        self.state = state
        self.propose = propose
        self.current: dict[str, Any] = {"edits": {}, "why": ""}
        self.base_edits: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        v = self.state.values
        initial = {"qs-model": v["model.path"], "qs-gpus": str(max(1, v["hardware.num_processes"] // max(1, v["hardware.num_machines"]))),
                   "qs-memory": str(v["hardware.gpu_memory_gib"] or 80), "qs-machines": str(v["hardware.num_machines"])}
        if initial["qs-gpus"] == "1" and not self.state.existed:
            initial["qs-gpus"] = "8"
        with Vertical(id="quickstart-box", classes="modal-box"):
            yield Label("Quick start  [dim]Enter accepts · esc: the full wizard[/]", classes="step-title")
            yield Static("bf16, sharded checkpoints, CUDA. Everything stays editable on the steps.",
                         classes="step-intro")
            for wid, text, hint in _FIELDS:
                with Horizontal(classes="field-line"):
                    yield Label(text, classes="field-label")
                    yield FieldInput(initial[wid], placeholder=hint, id=wid, classes="field-input", compact=True)
            yield Static("", id="qs-proposal", classes="panel", markup=False)

    def on_mount(self) -> None:
        self.app.steady_cursors(self)  # type: ignore[attr-defined]
        self.set_focus(self.query_one("#qs-model", Input), scroll_visible=False)
        self.refresh_proposal()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.refresh_proposal()

    def _int(self, wid: str) -> int | None:
        text = self.query_one(f"#{wid}", Input).value.strip()
        return int(text) if re.fullmatch(r"\d+", text) and int(text) > 0 else None

    def refresh_proposal(self) -> None:
        model = self.query_one("#qs-model", Input).value.strip()
        gpus, machines = self._int("qs-gpus"), self._int("qs-machines")
        memory_text = self.query_one("#qs-memory", Input).value.strip()
        try:
            memory = float(memory_text)
        except ValueError:
            memory = 0.0
        box = self.query_one("#qs-proposal", Static)
        if not model or gpus is None or machines is None or memory <= 0:
            self.current = {"edits": {}, "why": ""}
            box.update("Fill in all four: model, GPUs per machine (a whole number), GPU memory in GiB, machines.")
            return
        self.base_edits = {
            "model.path": model, "hardware.platform": "cuda", "hardware.num_processes": gpus * machines,
            "hardware.num_machines": machines, "hardware.gpu_memory_gib": int(memory) if memory.is_integer() else memory,
            "training.mixed_precision": "bf16", "checkpoint.state_dict_type": "sharded",
        }
        trial = WizardState(self.state.path, self.state.document.text())
        trial.apply_proposal(self.base_edits)
        self.current = self.propose(trial.document.text(), self.state.path)
        if self.current.get("name"):
            box.update(f"Proposed: {self.current['label']} — {self.current['why']}\n"
                       f"{gpus * machines} ranks on {machines} machine(s). Enter accepts and opens Review.")
        else:
            box.update(f"No proposal: {self.current['why']}")

    def action_accept(self) -> None:
        if not self.current.get("edits"):
            self.notify("No proposal to accept yet: " + (self.current.get("why") or "fill in the four fields"),
                        severity="warning")
            return
        self.dismiss({**self.base_edits, **self.current["edits"]})

    def action_cancel(self) -> None:
        self.dismiss(None)
