"""The wizard's commands behind its keys: saving (settings, draft, save+compile), the tool
screens (DeepSpeed builder, blocks, maintenance, quick start, help) and quitting.

A mixin of `WizardApp` (tui/app.py), which holds the state, the screen and the step
navigation these commands use (`state`, `services`, `apply`, `_after_edit`, `_show_step`,
`_focus_first`, `_outside_modals`). Textual finds `action_*` methods on any base class, so
the bindings in `WizardApp.BINDINGS` reach them unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.widgets import Static

from .facts import display_path, hardware_suggestions
from .model import SaveRefused


class WizardActions:
    """Saving, tool screens and quitting, for `WizardApp` (see the module docstring)."""

    def _saved(self, what: str) -> None:
        self._refresh_chrome()
        self.query_one("#status", Static).update(what)
        self.notify(what, title="Saved")

    def _attempt(self, save: Callable[[], Path], refused: tuple[type[Exception], ...]) -> Path | None:
        """Run one of the state's saves; a refusal is a notification, not a crash (None)."""
        self._outside_modals()
        try:
            return save()
        except refused as exc:
            self.notify(f"Not saved: {exc}", severity="error")
            return None

    def action_save(self) -> None:
        path = self._attempt(self.state.save, (SaveRefused, OSError))
        if path is not None:
            self._saved(f"saved {display_path(path)}")

    def action_save_draft(self) -> None:
        path = self._attempt(self.state.save_draft, (OSError,))
        if path is not None:
            self._saved(f"saved draft {display_path(path)}"
                        + (f" ({len(self.state.errors)} error(s))" if self.state.errors else "")
                        + f"; {display_path(self.state.path)} untouched")

    def action_save_compile(self) -> None:
        out = self._attempt(self.state.save_and_compile, (SaveRefused, OSError))
        if out is not None:
            self._saved(f"saved {display_path(self.state.path)} and compiled -> {display_path(out)}/")

    def action_builder(self) -> None:
        self._outside_modals()
        from .builder import DeepSpeedBuilder

        def done(changed: bool | None) -> None:
            self._after_edit(reload_values=True)

        self.push_screen(DeepSpeedBuilder(self.state, self.services.templates), done)

    def action_blocks(self) -> None:
        self._outside_modals()
        from .blocks import BlocksModal

        def done(classes: list[str] | None) -> None:
            if classes is not None:
                self.apply("fsdp.transformer_layer_cls_to_wrap", classes)
                self._after_edit(reload_values=True)

        self.push_screen(BlocksModal(self.state, self.services.blocks), done)

    def action_maintenance(self) -> None:
        self._outside_modals()
        from .maintenance import MaintenanceScreen

        self.push_screen(MaintenanceScreen(self.state, self.services))

    def action_use_detected(self) -> None:
        self._outside_modals()
        edits = hardware_suggestions(self.state.hardware)
        if not edits:
            self.notify("No detected hardware to use (yet).", severity="warning")
            return
        start = time.perf_counter()
        self.state.set_many(edits)
        self.last_validation_s = time.perf_counter() - start
        self._after_edit(reload_values=True)
        self.notify(", ".join(f"{k} = {v}" for k, v in edits.items()), title="Detected values applied")

    def action_quit_wizard(self) -> None:
        text = self.state.document.text()
        if self.state.dirty and self._quit_armed_at != text:
            # Armed for exactly this text: an edit after the first ctrl+q asks again.
            self._quit_armed_at = text
            self.notify("Unsaved changes: ctrl+s saves; press ctrl+q again to quit without saving.",
                        severity="warning")
            return
        self.exit(0)

    def action_help(self) -> None:
        from .help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss(None)  # F12 toggles
        else:
            self.push_screen(HelpScreen())

    def action_quickstart(self) -> None:
        self._outside_modals()
        from .quickstart import QuickStart

        async def done(edits: dict[str, Any] | None) -> None:
            if edits:
                self.state.apply_proposal(edits)
                self._after_edit(reload_values=True)
                await self._show_step("review")
                self._focus_first()

        self.push_screen(QuickStart(self.state, self.services.proposal), done)

    def action_tidy_strategy(self) -> None:
        self._outside_modals()
        removed = self.state.tidy_strategy()
        if not removed:
            self.notify("Nothing to remove: no keys of other strategies are set.")
            return
        self._after_edit(reload_values=True)
        self.notify("Removed: " + ", ".join(removed), title="Other strategies' keys")

