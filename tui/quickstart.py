"""Quick start (F10): four answers, the strategies that fit, one key to accept one.

Model (a local directory with config.json, or ``builtin:NAME``), GPUs per machine, GPU
memory and machines. Below them, every strategy the memory estimator says fits the stated
GPU memory (`estimate_view.proposal`), cheapest first, each with its per-GPU figure; the
cheapest is proposed (highlighted), Up / Down pick another. Enter (or ctrl+o) applies the
highlighted one with bf16 and sharded checkpoints and the wizard lands on Review, always
for what the fields hold when Enter is read (a pasted path then Enter uses the path);
Escape goes back with nothing changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ..compiler.keys import paths as K
from .fields import FieldInput, steady_cursors
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
        # The fields are one-line text: Up / Down are free to pick the strategy.
        Binding("up", "pick(-1)", "Previous strategy", priority=True),
        Binding("down", "pick(1)", "Next strategy", priority=True),
    ]

    def __init__(self, state: WizardState, propose: Callable[[str, Any], dict[str, Any]]) -> None:
        super().__init__(id="quickstart")
        self.state = state
        self.propose = propose
        self.current: dict[str, Any] = {"edits": {}, "why": "", "options": []}
        self.base_edits: dict[str, Any] = {}
        self.picked: str | None = None
        """The strategy chosen with Up / Down (None: the proposal, the cheapest that fits)."""

    def compose(self) -> ComposeResult:
        initial = self._initial()
        with Vertical(id="quickstart-box", classes="modal-box"):
            yield Label("Quick start  [dim]Enter accepts · esc: the full wizard[/]", classes="step-title")
            yield Static("bf16, sharded checkpoints, CUDA. Everything stays editable on the steps.",
                         classes="step-intro")
            for wid, text, hint in _FIELDS:
                with Horizontal(classes="field-line"):
                    yield Label(text, classes="field-label")
                    yield FieldInput(initial[wid], placeholder=hint, id=wid, classes="field-input", compact=True)
            yield Static("", id="qs-proposal", classes="panel", markup=False)
            yield OptionList(id="qs-strategies", compact=True)

    def _initial(self) -> dict[str, str]:
        """The boxes' first text: what the settings file holds (a value the compile rejected as
        written, not the default it fell back to). GPUs per machine is derived from two keys: blank
        when the machine count cannot divide it."""
        shown = self.state.shown
        procs, machines = shown(K.HARDWARE_NUM_PROCESSES), shown(K.HARDWARE_NUM_MACHINES)
        if _whole(procs) and _whole(machines):
            gpus = str(max(1, procs // machines))
        else:
            gpus = "" if _whole(procs) else str(procs)
        memory = shown(K.HARDWARE_GPU_MEMORY_GIB)
        initial = {"qs-model": str(shown(K.MODEL_PATH)), "qs-gpus": gpus,
                   "qs-memory": str(memory if memory not in (None, 0) else 80), "qs-machines": str(machines)}
        if initial["qs-gpus"] == "1" and not self.state.existed:
            initial["qs-gpus"] = "8"
        return initial

    def on_mount(self) -> None:
        steady_cursors(self)
        self.query_one("#qs-strategies", OptionList).can_focus = False  # Up / Down drive it from the fields
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
            self.current = {"edits": {}, "why": "", "options": []}
            self._show_options()
            box.update("Fill in all four: model, GPUs per machine (a whole number), GPU memory in GiB, machines.")
            return
        self.base_edits = {
            K.MODEL_PATH: model, K.HARDWARE_PLATFORM: "cuda", K.HARDWARE_NUM_PROCESSES: gpus * machines,
            K.HARDWARE_NUM_MACHINES: machines, K.HARDWARE_GPU_MEMORY_GIB: int(memory) if memory.is_integer() else memory,
            K.TRAINING_MIXED_PRECISION: "bf16", K.CHECKPOINT_STATE_DICT_TYPE: "sharded",
        }
        trial = WizardState(self.state.path, self.state.document.text())
        trial.apply_proposal(self.base_edits)
        self.current = self.propose(trial.document.text(), self.state.path)
        self._show_options()
        self._show_choice(gpus * machines, machines)

    def _options(self) -> list[dict[str, Any]]:
        return self.current.get("options") or ([self.current] if self.current.get("name") else [])

    def _choice(self) -> dict[str, Any] | None:
        options = self._options()
        return next((o for o in options if o["name"] == self.picked), options[0] if options else None)

    def _show_options(self) -> None:
        strategies = self.query_one("#qs-strategies", OptionList)
        options = self._options()
        strategies.clear_options()
        strategies.add_options([Option(f"{o['label'][:26]:<26} {o['per_gpu'] / 1024**3:6.1f} GiB per GPU"
                                       + ("  (proposed)" if i == 0 else ""), id=o["name"])
                                for i, o in enumerate(options)])
        strategies.display = bool(options)
        choice = self._choice()
        if choice is not None:
            strategies.highlighted = options.index(choice)

    def _show_choice(self, ranks: int, machines: int) -> None:
        box = self.query_one("#qs-proposal", Static)
        choice = self._choice()
        if choice is None:
            box.update(f"No proposal: {self.current['why']}")
            return
        head = "Proposed" if choice is self._options()[0] else "Chosen"
        box.update(f"{head}: {choice['label']} — {choice['why']}\n{ranks} ranks on {machines} machine(s). "
                   f"Up/Down: the {len(self._options())} strategies that fit. Enter accepts and opens Review.")

    def action_pick(self, step: int) -> None:
        options = self._options()
        choice = self._choice()
        if choice is None:
            return
        index = min(max(options.index(choice) + step, 0), len(options) - 1)
        self.picked = options[index]["name"]
        self.query_one("#qs-strategies", OptionList).highlighted = index
        self._show_choice(self.base_edits[K.HARDWARE_NUM_PROCESSES], self.base_edits[K.HARDWARE_NUM_MACHINES])

    def action_accept(self) -> None:
        self.refresh_proposal()  # for what the fields hold now, whatever messages are still on their way
        choice = self._choice()
        if choice is None or not choice.get("edits"):
            self.notify("No proposal to accept yet: " + (self.current.get("why") or "fill in the four fields"),
                        severity="warning")
            return
        self.dismiss({**self.base_edits, **choice["edits"]})

    def action_cancel(self) -> None:
        self.dismiss(None)


def _whole(value: Any) -> bool:
    """A positive whole number (not a bool, which is an int to Python)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
