"""The "too small" screen: below `MIN_WIDTH` × `MIN_HEIGHT` the wizard says so instead of
drawing the form (the layout cannot be drawn sensibly there, and narrow widths crash rich's
cell chopping). Nothing is lost: when the terminal is large enough again, the field that had
focus has it again (else the step's first), so typed keys land in a field instead of vanishing.

`TooSmall` is a component of `WizardApp` (tui/app.py), which calls `resized` on every resize.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.widget import Widget
from textual.widgets import Static

MIN_WIDTH, MIN_HEIGHT = 60, 16


class TooSmall:
    """Shows "too small" on every screen of one app below the minimum size, and refocuses after."""

    def __init__(self, app: App[Any], focus_first: Callable[[], None]) -> None:
        self.app = app
        self.focus_first = focus_first
        """Focuses the main screen's first field (the app's step navigation knows which)."""
        self._focus_before: dict[int, Widget] = {}

    def resized(self, width: int, height: int) -> None:
        small = width < MIN_WIDTH or height < MIN_HEIGHT
        for screen in self.app.screen_stack:
            if small and screen.focused is not None:
                self._focus_before[id(screen)] = screen.focused  # hiding the form drops focus
            screen.set_class(small, "-too-small")
        if not small:
            self.app.call_after_refresh(self.refocus)
        self.app.screen_stack[0].query_one("#too-small", Static).update(  # the main screen's, under any modal
            f"Terminal {width}×{height} is too small: enlarge it to at least "
            f"{MIN_WIDTH}×{MIN_HEIGHT}. Nothing is lost (ctrl+q quits).")

    def refocus(self) -> None:
        for screen in self.app.screen_stack:
            before = self._focus_before.pop(id(screen), None)
            if screen.focused is not None:
                continue
            if before is not None and before.is_attached and before.focusable:
                screen.set_focus(before, scroll_visible=False)
            elif screen is self.app.screen_stack[0]:
                self.focus_first()
            elif screen.focus_chain:
                screen.set_focus(screen.focus_chain[0], scroll_visible=False)
