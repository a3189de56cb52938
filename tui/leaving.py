"""Leaving the wizard by interruption: ctrl+c, SIGINT, SIGTERM, SIGHUP.

Every one ends the app through Textual's own exit, so the terminal is restored (the
alternate screen left, mouse reporting off, the cursor shown) instead of the process dying
with the terminal still in the wizard's modes. Unsaved edits are never lost: they are
written to the draft beside the settings (`settings.draft.toml`; `settings.toml` itself
is never replaced by them), and the message printed after the terminal is restored says
so. The exit status is the shell's for the signal: 130 (ctrl+c, SIGINT), 143 (SIGTERM),
129 (SIGHUP).

Once an interruption has begun, Textual tears the screens down under whatever was under way
(a step's pane still mounting right after F3): an error that teardown raises (`NoMatches` for
a widget already removed) is not a crash. `WizardApp._handle_exception` drops it while
`Leaving.code` is set: no recovery file (the draft is written), and the exit status stays the
signal's (it was 70, "internal error", in 21 of 28 runs with the signal 20-50 ms after a step
switch).
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from ..compiler.diagnostics import EXIT_INTERRUPTED
from .facts import display_path

#: The signals that end the wizard, and their exit status (128 + the signal's number).
SIGNALS: dict[str, int] = {"SIGINT": EXIT_INTERRUPTED, "SIGTERM": 128 + 15, "SIGHUP": 128 + 1}


class Leaving:
    """Installs the signal handlers of one app and ends it, draft written, on interruption."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.installed: list[int] = []
        self.code: int | None = None
        """The exit status once an interruption has begun (None before)."""

    def install(self) -> None:
        """Handle the signals in the app's event loop (a no-op where the loop cannot)."""
        loop = asyncio.get_running_loop()
        for name in SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            try:
                loop.add_signal_handler(signum, self.interrupt, name)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread, or a platform without them
            self.installed.append(signum)

    def uninstall(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        for signum in self.installed:
            loop.remove_signal_handler(signum)
        self.installed.clear()

    def interrupt(self, why: str = "ctrl+c") -> None:
        """End the app now: the draft written when there are unsaved edits, the status for `why`."""
        if self.code is not None:
            return  # already leaving
        code = self.code = SIGNALS.get(why, EXIT_INTERRUPTED)
        state = self.app.state
        if not state.dirty:
            message = f"tuner wizard: interrupted ({why}); there were no unsaved edits."
        else:
            try:
                draft = state.save_draft()
            except OSError as exc:
                where = self.app.write_recovery()
                message = (f"tuner wizard: interrupted ({why}); the draft could not be written ({exc})"
                           + (f"; the unsaved edits are in {display_path(where)}." if where else "."))
            else:
                message = (f"tuner wizard: interrupted ({why}); the unsaved edits are in {display_path(draft)} "
                           f"({display_path(state.path)} untouched).")
        self.uninstall()
        self.app.exit(code, message=message)
