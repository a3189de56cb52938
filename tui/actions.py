"""The wizard's commands behind its keys: saving (settings, draft, save+compile), the tool
screens (DeepSpeed builder, blocks, maintenance, quick start, help), removing the other
strategies' keys, using the detected hardware, and quitting.

`Commands` is a component of `WizardApp` (tui/app.py), as `KeyQueue` and `Leaving` are. It
holds what only the commands need (the quit confirmation) and reaches the app only through
`Host`, the Protocol naming what it uses: the state, the services, notifications, screens,
and the app's edit and step navigation. The app's `action_*` methods, which its bindings
name, call it; a type checker sees both sides.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rich.markup import escape
from textual.notifications import SeverityLevel
from textual.screen import Screen

from ..compiler.keys import paths as K
from .facts import display_path, hardware_suggestions
from .model import SaveRefused, WizardState
from .services import Services


class Host(Protocol):
    """What the commands use of the wizard app."""

    state: WizardState
    services: Services
    last_validation_s: float

    @property
    def screen(self) -> Screen[object]: ...

    def notify(self, message: str, *, title: str = ..., severity: SeverityLevel = ...) -> None: ...

    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], Any] | None = ...) -> object: ...

    def exit(self, result: int | None = ...) -> None: ...

    def apply(self, key: str, value: Any) -> None: ...

    def after_edit(self, reload_values: bool = ...) -> None: ...

    async def show_step(self, step_id: str) -> None: ...

    def focus_first(self) -> None: ...

    def outside_modals(self) -> None: ...

    def announce(self, what: str, title: str) -> None: ...


class Commands:
    """Saving, tool screens and quitting, for one `Host` (see the module docstring)."""

    def __init__(self, app: Host) -> None:
        self.app = app
        self.quit_armed_at: str | None = None
        """The document text when ctrl+q was first pressed: a second ctrl+q quits only if unchanged."""

    def _attempt(self, save: Callable[[], Path], refused: tuple[type[Exception], ...]) -> Path | None:
        """Run one of the state's saves; a refusal is a notification, not a crash (None)."""
        self.app.outside_modals()
        try:
            return save()
        except refused as exc:
            self.app.notify(escape(f"Not saved: {exc}"), severity="error")  # "[model]" is text, not markup
            return None

    def save(self) -> None:
        path = self._attempt(self.app.state.save, (SaveRefused, OSError))
        if path is not None:
            self.app.announce(f"saved {display_path(path)}", "Saved")

    def save_draft(self) -> None:
        state = self.app.state
        path = self._attempt(state.save_draft, (OSError,))
        if path is not None:
            self.app.announce(f"saved draft {display_path(path)}"
                              + (f" ({len(state.errors)} error(s))" if state.errors else "")
                              + f"; {display_path(state.path)} untouched", "Saved")

    def save_compile(self) -> None:
        state = self.app.state
        out = self._attempt(state.save_and_compile, (SaveRefused, OSError))
        if out is not None:
            self.app.announce(f"saved {display_path(state.path)} and compiled -> {display_path(out)}/", "Saved")

    def fix_unknown(self, path: str) -> bool:
        """For an unknown key at `path`: offer to remove or rename it (tui/unknown.py); False
        when `path` is not one."""
        from . import unknown

        found = unknown.find(self.app.state.diagnostics, path)
        if found is None:
            return False

        def done(choice: str | None) -> None:
            if choice is None or found is None:
                return
            try:
                what = unknown.apply(self.app.state, found, choice)
            except unknown.FixRefused as exc:
                self.app.notify(escape(str(exc)), severity="warning")
                return
            self.app.after_edit(reload_values=True)
            self.app.announce(what, "Unknown key")

        self.app.push_screen(unknown.UnknownKeyScreen(found), done)
        return True

    def builder(self) -> None:
        self.app.outside_modals()
        from .builder import DeepSpeedBuilder

        def done(changed: bool | None) -> None:
            self.app.after_edit(reload_values=True)

        self.app.push_screen(DeepSpeedBuilder(self.app.state, self.app.services.templates), done)

    def blocks(self) -> None:
        self.app.outside_modals()
        from .blocks import BlocksModal

        def done(classes: list[str] | None) -> None:
            if classes is not None:
                self.app.apply(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP, classes)
                self.app.after_edit(reload_values=True)

        self.app.push_screen(BlocksModal(self.app.state, self.app.services.blocks), done)

    def maintenance(self) -> None:
        self.app.outside_modals()
        from .maintenance import MaintenanceScreen

        self.app.push_screen(MaintenanceScreen(self.app.state, self.app.services))

    def use_detected(self) -> None:
        self.app.outside_modals()
        edits = hardware_suggestions(self.app.state.hardware)
        if not edits:
            self.app.notify("No detected hardware to use (yet).", severity="warning")
            return
        start = time.perf_counter()
        self.app.state.set_many(edits)
        self.app.last_validation_s = time.perf_counter() - start
        self.app.after_edit(reload_values=True)
        self.app.notify(", ".join(f"{k} = {v}" for k, v in edits.items()), title="Detected values applied")

    def quit(self) -> None:
        state = self.app.state
        text = state.document.text()
        if state.dirty and self.quit_armed_at != text:
            # Armed for exactly this text: an edit after the first ctrl+q asks again.
            self.quit_armed_at = text
            self.app.notify("Unsaved changes: ctrl+s saves; press ctrl+q again to quit without saving.",
                            severity="warning")
            return
        self.app.exit(0)

    def help(self) -> None:
        from .help import HelpScreen

        if isinstance(self.app.screen, HelpScreen):
            self.app.screen.dismiss(None)  # F12 toggles
        else:
            self.app.push_screen(HelpScreen())

    def quickstart(self) -> None:
        self.app.outside_modals()
        from .quickstart import QuickStart

        async def done(edits: dict[str, Any] | None) -> None:
            if edits:
                self.app.state.apply_proposal(edits)
                self.app.after_edit(reload_values=True)
                await self.app.show_step("review")
                self.app.focus_first()

        self.app.push_screen(QuickStart(self.app.state, self.app.services.proposal), done)

    def tidy_strategy(self) -> None:
        self.app.outside_modals()
        removed = self.app.state.tidy_strategy()
        if not removed:
            self.app.notify("Nothing to remove: no keys of other strategies are set.")
            return
        self.app.after_edit(reload_values=True)
        self.app.notify("Removed: " + ", ".join(removed), title="Other strategies' keys")
