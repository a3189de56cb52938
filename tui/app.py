"""The wizard application: steps in a ContentSwitcher, live validation, saving.

The app takes everything from its constructor (the `WizardState` and the `Services`), so
tests build it directly with fakes. Hardware detection imports torch, so it runs in a
worker thread after the first paint.

The commands behind the keys (saving, the tool screens, quitting) are `tui/actions.py`'s
`Commands`, a component the `action_*` methods below call.

Keys: `tui/keys.py` holds the table (the help screen and `tuner wizard --help` show it).
Every key acts on the screen and field the keys before it produced: `keyqueue.KeyQueue`
hands the App the next key only once the previous one has settled.

A crash never loses edits silently: unsaved text goes to a recovery file beside the
settings (`WizardApp.recovery_path`), and `tuner wizard` exits with EXIT_INTERNAL.
"""

from __future__ import annotations

import inspect
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import events
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Collapsible, ContentSwitcher, Static

from ..compiler.keys import paths as K
from ..compiler.read.files import write_atomic
from .actions import Commands
from .driver import guarded
from .facts import display_path
from .fields import FieldRow, shown_within, steady_cursors
from .keyqueue import KeyQueue, TypedKey
from .layout import STEP_IDS, STEPS, canonical_key, step_of
from .leaving import Leaving
from .model import WizardState
from .services import Services
from .steps import ActionBar, KeyFooter, StepList, StepPane
from .too_small import TooSmall

if TYPE_CHECKING:
    from .review import ReviewPane


class WizardApp(App[int]):
    """`tuner` / `tuner wizard`: from hardware to a saved, compiling settings.toml."""

    CSS_PATH = "wizard.tcss"
    AUTO_FOCUS = None  # the first field is focused right after the first paint (cheaper to paint)
    TITLE = "tuner"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        *[Binding(f"f{i + 1}", f"goto('{s.id}')", s.title, show=False, priority=True) for i, s in enumerate(STEPS)],
        Binding("tab", "focus_next", "Next field", show=False, priority=True),
        Binding("shift+tab", "focus_previous", "Previous field", show=False, priority=True),
        Binding("ctrl+n", "next", "Next", priority=True),
        Binding("ctrl+p", "back", "Back", priority=True),
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("ctrl+r", "save_draft", "Draft", show=False, priority=True),
        Binding("ctrl+g", "save_compile", "Save+compile", show=False, priority=True),
        Binding("ctrl+t", "tidy_strategy", "Remove other strategy's keys", show=False, priority=True),
        Binding("f7", "builder", "DeepSpeed", show=False, priority=True),
        Binding("f8", "blocks", "Blocks", show=False, priority=True),
        Binding("f9", "maintenance", "Settings", show=False, priority=True),
        Binding("f10", "quickstart", "Quick start", priority=True),
        Binding("f12", "help", "Help", priority=True),
        Binding("question_mark", "help", "Help", show=False),  # only where no text field takes the "?"
        Binding("ctrl+y", "use_detected", "Use detected", show=False, priority=True),
        Binding("ctrl+q", "quit_wizard", "Quit", priority=True),
        Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True),
    ]

    def __init__(self, state: WizardState, services: Services | None = None, detect_hardware: bool = True,
                 cursor_blink: bool = True) -> None:
        super().__init__()
        self.state = state
        self.cursor_blink = cursor_blink
        """False in tests: a blinking cursor would make snapshots differ."""
        self.services = services or Services()
        self._detect_hardware = detect_hardware and self.services.hardware is not None
        self.recovery_path: Path | None = None
        self.last_validation_s = 0.0
        self.first_paint_at: float | None = None
        self.keys = KeyQueue(self)
        self.leaving = Leaving(self)
        self.commands = Commands(self)
        self.too_small = TooSmall(self, self.focus_first)
        self.where = ""
        """What has focus, in the status line (a key, "strategy", "Advanced…"): which field a key edits."""

    def get_driver_class(self):
        """The platform's driver, resumed by SIGCONT only after a suspension (tui/driver.py)."""
        return guarded(super().get_driver_class())

    async def on_event(self, event: events.Event) -> None:
        if KeyQueue.wants(event) and not self.keys.releasing(event):
            self.keys.offer(event)  # after the keys before it have settled (see tui/keyqueue.py)
            return
        await super().on_event(event)

    async def on_typed_key(self, message: TypedKey) -> None:
        try:
            if self.screen_stack and not self._exit:  # keys typed while quitting go nowhere
                await self.on_event(message.event)
        finally:
            if not message.done.done():
                message.done.set_result(None)

    # -- layout -----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static("", id="topbar")
        yield Static("", id="too-small")
        with Horizontal(id="body"):
            yield StepList(id="steps")
            with Vertical(id="main"):
                # Only the current step is built at start (first paint stays fast); the
                # others are mounted on first visit and then kept, so Back keeps everything.
                with ContentSwitcher(initial=f"step-{STEP_IDS[self.state.step]}", id="switcher"):
                    yield self._make_pane(STEP_IDS[self.state.step])
                yield ActionBar(id="actions")
        yield Static("", id="status")
        yield KeyFooter()

    def _make_pane(self, step_id: str):
        if step_id == "review":
            from .review import ReviewPane  # on first visit: Review's widgets are not needed before

            return ReviewPane(self.state, self.services.estimate)
        return StepPane(step_id, self.state)

    def on_mount(self) -> None:
        self.leaving.install()  # SIGTERM / SIGHUP / SIGINT end through Textual: the terminal is restored
        steady_cursors(self.screen)
        self.watch(self.screen, "focused", self._show_where)
        self.refresh_chrome()
        self.focus_first()  # now, so that keys typed before the first paint land in a field
        self.call_after_refresh(self._painted)

    def on_resize(self, event: events.Resize) -> None:
        self.too_small.resized(event.size.width, event.size.height)

    def action_interrupt(self) -> None:
        self.leaving.interrupt("ctrl+c")

    # -- crashes ----------------------------------------------------------------------

    def _handle_exception(self, error: Exception) -> None:
        """Keep unsaved edits in a recovery file before Textual exits with the traceback.

        While an interruption ends the app, an error from the screens torn down under work
        still under way is dropped (tui/leaving.py): the draft is written, and the exit
        status is the signal's."""
        if self.leaving.code is not None:
            return
        self.write_recovery()
        super()._handle_exception(error)

    def write_recovery(self) -> Path | None:
        """Write the unsaved text beside the settings; never over the settings file itself."""
        if self.recovery_path is not None or not self.state.dirty:
            return self.recovery_path
        path = self.state.path.with_name(self.state.path.stem + ".recovered.toml")
        try:
            write_atomic(path, self.state.document.text())
        except Exception:  # noqa: BLE001 - never let saving the edits hide the crash itself
            return None
        self.recovery_path = path
        return path

    def _painted(self) -> None:
        self.first_paint_at = time.perf_counter()
        if self.screen_stack[0].focused is None:
            self.focus_first()
        if self._detect_hardware:
            # A daemon thread, not a Textual worker: the exit never waits for it (a worker is
            # joined when the app's loop closes, and importing torch takes seconds).
            threading.Thread(target=self._collect_hardware, name="tuner-hardware", daemon=True).start()

    def _collect_hardware(self) -> None:
        detect = self.services.hardware
        if detect is None:
            return
        try:
            facts: Any = detect()
        except Exception as exc:  # shown on the Hardware step, never a crash
            facts = exc
        try:
            self.call_from_thread(self._hardware_ready, facts)
        except RuntimeError:
            pass  # the app ended while detecting: nobody to tell

    def _hardware_ready(self, facts: Any) -> None:
        self.state.hardware = facts
        for pane in self.query("#step-hardware").results(StepPane):
            pane.show_hardware()
        if self.state.bf16_default(facts):
            self.apply(K.TRAINING_MIXED_PRECISION, "bf16")
            self.notify("Mixed precision bf16: this machine's GPUs support it (Precision step to change).",
                        title="New file default")

    # -- state -> screen --------------------------------------------------------------

    def _show_where(self, widget: Any) -> None:
        row = next((w for w in (widget.ancestors_with_self if widget is not None else ()) if isinstance(w, FieldRow)), None)
        if isinstance(widget, Button):
            self.where = str(widget.label)
        elif row is not None:
            self.where = row.key
        elif widget is not None and widget.id == "in-strategy":
            self.where = "strategy"
        elif widget is not None and isinstance(widget.parent, Collapsible):
            self.where = f"{widget.parent.title} (Enter {'opens' if widget.parent.collapsed else 'closes'})"
        else:
            self.where = ""
        self.refresh_chrome()

    def refresh_chrome(self) -> None:
        state = self.state
        dirty = " [b]●[/b] unsaved" if state.dirty else ""
        self.query_one("#topbar", Static).update(f"[b]tuner[/b] wizard · {display_path(state.path)}{dirty}")
        self.query_one("#steps", StepList).render_steps(state)
        errors = len(state.errors)
        warnings = sum(1 for d in state.diagnostics if d.severity == "warning")
        strategy = state.result.plan.strategy if state.result.plan else "?"
        where = f" · {self.where}" if self.where else ""
        self.query_one("#status", Static).update(f"{strategy} · {errors} error(s) · {warnings} warning(s){where}")
        self.query_one("#back", Button).disabled = state.step == 0
        self.query_one("#next", Button).disabled = state.step == len(STEPS) - 1

    def after_edit(self, reload_values: bool = False) -> None:
        for pane in self.query(StepPane):
            pane.sync(reload_values)
        if STEP_IDS[self.state.step] == "review":
            from .review import ReviewPane

            for review in self.query(ReviewPane):
                review.sync()
        self.refresh_chrome()

    def apply(self, key: str, value: Any) -> None:
        """Set one canonical key and re-validate (the path every edit takes)."""
        start = time.perf_counter()
        changed = self.state.set(key, value)
        self.last_validation_s = time.perf_counter() - start
        if changed:
            self.after_edit()

    def on_field_row_changed(self, event: FieldRow.Changed) -> None:
        self.apply(event.key, event.value)

    def on_step_pane_strategy_changed(self, event: StepPane.StrategyChanged) -> None:
        start = time.perf_counter()
        carried = self.state.values[K.FSDP_ACTIVATION_CHECKPOINTING]
        if self.state.set_strategy(event.strategy):
            self.last_validation_s = time.perf_counter() - start
            self.after_edit()
            strays = self.state.stray_strategy_keys()
            if strays:
                self.notify(f"Kept in the file, unused now: {', '.join(strays)}. ctrl+t removes them.",
                            title="Other strategy's keys", severity="warning")
            if carried and not self.state.values[K.FSDP_ACTIVATION_CHECKPOINTING]:
                self.notify("FSDP activation checkpointing carried over to training.gradient_checkpointing "
                            "(the same thing, for every strategy).", title="Activation checkpointing")

    async def on_review_pane_jump(self, event: ReviewPane.Jump) -> None:
        if not self.commands.fix_unknown(event.key):  # an unknown key: remove or rename it
            await self.jump_to(event.key)

    async def jump_to(self, key: str) -> None:
        step_id = step_of(key)
        await self.show_step(step_id)
        canonical = canonical_key(key)
        pane = self.query_one(f"#step-{step_id}")
        if isinstance(pane, StepPane) and canonical:
            row = await pane.find_row(canonical)
            if row is not None:
                for box in row.ancestors:
                    if isinstance(box, Collapsible):
                        box.collapsed = False  # an advanced field: open its part of the step
            if row is not None and row.display:
                row.screen.set_focus(row.input, scroll_visible=False)
                self.call_after_refresh(pane.scroll_to_widget, row, animate=False)
                return
        if key:
            self.notify(f"{key}: not a field on this step; edit it in the file or the DeepSpeed builder (F7)")

    async def show_step(self, step_id: str) -> None:
        self.state.goto(step_id)
        switcher = self.query_one("#switcher", ContentSwitcher)
        if not switcher.query_children(f"#step-{step_id}"):
            await switcher.mount(self._make_pane(step_id))
            steady_cursors(self.screen)
        elif step_id == "review":
            from .review import ReviewPane

            self.query_one(ReviewPane).sync()
        switcher.current = f"step-{step_id}"
        self.refresh_chrome()

    # -- actions ----------------------------------------------------------------------

    def outside_modals(self) -> None:
        """The wizard's keys belong to the main screen; in a modal they fall through to it."""
        if isinstance(self.screen, ModalScreen):
            raise SkipAction()

    async def action_goto(self, step_id: str) -> None:
        self.outside_modals()
        await self.show_step(step_id)
        self.focus_first()

    def focus_first(self) -> None:
        pane = self.query_one("#switcher", ContentSwitcher).visible_content
        if pane is None:
            return
        for widget in pane.query("Input, Select, Switch, OptionList"):
            if widget.focusable and shown_within(widget, pane):
                # At once (Widget.focus defers it behind keys already queued). No scrolling:
                # the first field is at the top, and a new pane has no layout to scroll by.
                widget.screen.set_focus(widget, scroll_visible=False)  # its own screen, even under a modal
                return

    async def action_next(self) -> None:
        self.outside_modals()
        ok, why = self.state.advance()
        if not ok:
            self.notify(why, severity="warning")
            return
        await self.show_step(STEP_IDS[self.state.step])
        self.focus_first()

    async def action_back(self) -> None:
        self.outside_modals()
        if self.state.back():
            await self.show_step(STEP_IDS[self.state.step])
            self.focus_first()

    # -- the commands behind the keys: tui/actions.py --------------------------------

    def announce(self, what: str, title: str) -> None:
        """Say `what` on the status line (until the next focus change or edit) and in a notification."""
        self.refresh_chrome()
        self.query_one("#status", Static).update(what)
        self.notify(what, title=title)

    def action_save(self) -> None:
        self.commands.save()

    def action_save_draft(self) -> None:
        self.commands.save_draft()

    def action_save_compile(self) -> None:
        self.commands.save_compile()

    def action_tidy_strategy(self) -> None:
        self.commands.tidy_strategy()

    def action_use_detected(self) -> None:
        self.commands.use_detected()

    def action_quit_wizard(self) -> None:
        self.commands.quit()

    def action_builder(self) -> None:
        self.commands.builder()

    def action_blocks(self) -> None:
        self.commands.blocks()

    def action_maintenance(self) -> None:
        self.commands.maintenance()

    def action_quickstart(self) -> None:
        self.commands.quickstart()

    def action_help(self) -> None:
        self.commands.help()

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {"next": self.action_next, "back": self.action_back, "save": self.action_save,
                   "open-builder": self.action_builder, "open-blocks": self.action_blocks,
                   "hw-apply": self.action_use_detected}
        handler = actions.get(event.button.id or "")
        if handler is not None:
            event.stop()
            result = handler()
            if inspect.isawaitable(result):
                await result

