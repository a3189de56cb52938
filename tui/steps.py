"""The wizard's step panes: one scrollable form per step, all kept mounted.

A pane renders `WizardState`: which rows are visible, their values and diagnostics. It
never decides anything itself; `StepPane.sync` is called after every validation.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Collapsible, Footer, Label, Select, Static

from ..compiler.keys import paths as K
from ..compiler.plan.strategy import StrategyChoice, strategy_choice
from .facts import describe_hardware
from .fields import FieldRow, dom_id, steady_cursors
from .layout import STEP_IDS, STEPS, STRATEGIES, advanced_keys
from .model import WizardState

_INTRO = {
    "model": "What is trained: the model family, where its weights come from, full or LoRA.",
    "hardware": "Where it runs. Detected facts are shown; the settings say what the run targets.",
    "sharding": "How the model is spread over the ranks.",
    "checkpoints": "Saving, resuming and exporting.",
    "precision": "Mixed precision and the batch arithmetic.",
}


class StepPane(VerticalScroll):
    """The form of one step."""

    class StrategyChanged(Message):
        def __init__(self, strategy: StrategyChoice) -> None:
            super().__init__()
            self.strategy = strategy

    def __init__(self, step_id: str, state: WizardState) -> None:
        super().__init__(id=f"step-{step_id}", classes="step-pane")
        self.step_id = step_id
        self.state = state
        self.step = STEPS[STEP_IDS.index(step_id)]

    def compose(self) -> ComposeResult:
        n = STEP_IDS.index(self.step_id) + 1
        yield Label(f"{n}. {self.step.title}", classes="step-title")
        yield Static(_INTRO.get(self.step_id, ""), classes="step-intro")
        if self.step_id == "model":
            yield Static("New file? [b]F10[/b]: quick start — model, GPUs, memory, machines; the wizard "
                         "proposes the strategy that fits and lands on Review.", id="quick-hint", classes="panel")
        if self.step_id == "hardware":
            yield Static("Detected: detecting…", id="hw-facts", classes="panel", markup=False)
            yield Button("Use detected values (ctrl+y)", id="hw-apply", classes="inline-button", compact=True)
        if self.step_id == "sharding":
            yield Label("Strategy", classes="field-label")
            yield Select([(text, key) for key, text in STRATEGIES.items()], value=self.state.strategy,
                         allow_blank=False, id="in-strategy", compact=True)
            yield Static("", id="strategy-diags", classes="field-diags", markup=False)
            yield Static("", id="strategy-strays", classes="panel", markup=False)
            yield Button("DeepSpeed builder… (F7)", id="open-builder", classes="inline-button", compact=True)
        if self.step_id == "precision":
            yield Static("", id="global-batch", classes="panel")
        for key in self.step.keys:
            extra = None
            if key == K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP:
                extra = Button("Detect blocks (F8)", id="open-blocks", classes="inline-button", compact=True)
            yield FieldRow(key, self.state.shown(key), extra=extra, shown=self.state.visible(key))
            if key == K.TRAINING_LR_SCHEDULER:
                yield Static("", id="lr-schedule", classes="field-note", markup=False)
        advanced = advanced_keys(self.step_id)
        if advanced:
            # Every other schema key of this step's sections (derived from the schema).
            yield AdvancedPart(self.step_id, advanced, self.state)

    def on_mount(self) -> None:
        self.sync()

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "in-strategy":
            event.stop()
            if event.value != self.state.strategy:  # not the echo of mounting; ctrl+t repairs a mixed file
                self.post_message(self.StrategyChanged(strategy_choice(str(event.value))))

    def row(self, key: str) -> FieldRow | None:
        hits = self.query(f"#row-{dom_id(key)}")
        return hits.first() if hits else None  # type: ignore[return-value]

    async def find_row(self, key: str) -> FieldRow | None:
        """The row of `key`, building the Advanced part first when `key` is one of its fields."""
        for box in self.query(AdvancedPart):
            if key in box.keys:
                await box.build()
        return self.row(key)

    def sync(self, reload_values: bool = False) -> None:
        """Show the state: visibility, diagnostics, and (when asked) values."""
        state = self.state
        for row in self.query(FieldRow):
            shown = state.visible(row.key)
            if shown and not row.built:
                row.build(state.shown(row.key))  # hidden until now: its parts are built on first showing
            elif reload_values:
                row.load(state.shown(row.key))
            row.display = shown
            row.show_diagnostics(state.diagnostics_for(row.key))
        for box in self.query(AdvancedPart):  # the Advanced part: only what applies now
            count = sum(1 for key in box.keys if state.visible(key))  # its rows, built or not yet
            box.display = bool(count)
            box.title = f"Advanced ({count} more settings)"
        if self.step_id == "sharding":
            select = self.query_one("#in-strategy", Select)
            if select.value != state.strategy:
                with self.prevent(Select.Changed):
                    select.value = state.strategy
            diags = [d for d in state.diagnostics_for(K.FSDP_ENABLED) + state.diagnostics_for(K.DEEPSPEED_ENABLED)]
            note = self.query_one("#strategy-diags", Static)
            note.update("\n".join(f"{d.severity}: {d.message}" for d in diags))
            note.display = bool(diags)
            note.set_class(any(d.severity == "error" for d in diags), "error")
            self.query_one("#open-builder").display = state.strategy == "deepspeed"
            strays = state.stray_strategy_keys()
            note = self.query_one("#strategy-strays", Static)
            note.display = bool(strays)
            note.update(f"Set for another strategy, unused under {STRATEGIES[state.strategy]}: {', '.join(strays)}.\n"
                       "They stay in the file until removed: ctrl+t removes them." if strays else "")
        if self.step_id == "precision":
            total, formula = state.global_batch
            self.query_one("#global-batch", Static).update(f"Global batch: {total}  ({formula})")
            self.query_one("#lr-schedule", Static).update(state.lr_schedule())
        if self.step_id == "hardware":
            self.show_hardware()

    def show_hardware(self) -> None:
        lines = describe_hardware(self.state.hardware)
        self.query_one("#hw-facts", Static).update("Detected: " + "\n".join(lines))
        self.query_one("#hw-apply").display = self.state.hardware is not None and not isinstance(
            self.state.hardware, Exception)


class AdvancedPart(Collapsible):
    """A step's "Advanced" part, closed at start. Its rows are built the first time it opens:
    while closed it shows only its title, and building its rows (more than half of the first
    step's widgets) made the first paint slower for fields nobody sees there."""

    def __init__(self, step_id: str, keys: tuple[str, ...], state: WizardState) -> None:
        super().__init__(title=f"Advanced ({len(keys)} more settings)", collapsed=True, id=f"advanced-{step_id}")
        self.keys = keys
        self.state = state
        self.built = False

    async def build(self) -> None:
        """Mount the rows (once), showing the state as it is now."""
        if self.built:
            return
        self.built = True
        await self.query_one(Collapsible.Contents).mount_all(
            FieldRow(key, self.state.shown(key), shown=self.state.visible(key)) for key in self.keys)
        steady_cursors(self.screen)
        pane = next((node for node in self.ancestors if isinstance(node, StepPane)), None)
        if pane is not None:
            pane.sync()

    # Textual calls this, then Collapsible's own handler of the message (which opens the part), and
    # awaits each: the rows are there in the frame that shows the part open. Async where
    # Collapsible's is not, hence the ignore.
    async def _on_collapsible_title_toggle(self, event: Message) -> None:  # type: ignore[override]
        if self.collapsed:
            await self.build()

    async def _on_collapsible_expanded(self, event: Collapsible.Expanded) -> None:
        if event.collapsible is self:  # opened by code (`collapsed = False`), not by its title
            await self.build()


class StepList(Static):
    """The left column: the steps, the current one marked, error counts per step."""

    def render_steps(self, state: WizardState) -> None:
        lines = []
        for i, step in enumerate(STEPS):
            errs = len(state.step_errors(step.id)) if step.id != "review" else len(state.errors)
            mark = "▶" if i == state.step else " "
            badge = f" ✗{errs}" if errs else ""
            lines.append(f"{mark} F{i + 1} {step.title}{badge}")
        self.update("\n".join(lines))


class ActionBar(Horizontal):
    """Back / Next buttons under the form (the same as ctrl+p / ctrl+n)."""

    def compose(self) -> ComposeResult:
        yield Button("◀ Back (ctrl+p)", id="back", compact=True)
        yield Button("Next (ctrl+n) ▶", id="next", variant="primary", compact=True)
        yield Button("Save (ctrl+s)", id="save", compact=True)


class KeyFooter(Footer):
    """Textual's footer, rebuilt only when the keys it shows change. Textual's rebuilds it on
    every focus change (every Tab), and rebuilding it was the largest part of handling a key."""

    _shown: tuple = ()

    def bindings_changed(self, screen) -> None:
        try:
            shown = tuple((key, b.description, enabled, b.action) for key, (_, b, enabled, _tip)
                          in screen.active_bindings.items() if b.show)
        except Exception:  # noqa: BLE001 - a screen going away: let Textual's footer decide
            shown = ()
        if shown and shown == self._shown and self.children:
            self._bindings_ready = True
            return
        self._shown = shown
        super().bindings_changed(screen)
