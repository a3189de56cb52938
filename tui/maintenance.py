"""Settings: cache maintenance (the seed's WebUI Preferences -> Cache Maintenance).

Clear the block-detection cache and the DeepSpeed offload cache. Each action is confirmed
by a toast and by the status line on this screen, so the result is visible without logs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from ..compiler.keys import paths as K
from .model import WizardState
from .services import Services, ServiceUnavailable


def _describe(outcome: Any) -> str:
    if outcome is None:
        return "done"
    if isinstance(outcome, bool):
        return "done" if outcome else "nothing to clear"
    if isinstance(outcome, int):
        return f"{outcome} entr{'y' if outcome == 1 else 'ies'} removed"
    if isinstance(outcome, (list, tuple, set)):
        return f"{len(outcome)} removed"
    return str(outcome)


class MaintenanceScreen(ModalScreen[None]):
    """Settings screen with the two cache-maintenance actions."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("f5", "clear_detection", "Clear detection cache", priority=True),
        Binding("f6", "clear_offload", "Clear offload cache", priority=True),
    ]

    def __init__(self, state: WizardState, services: Services) -> None:
        super().__init__(id="maintenance")
        self.state = state
        self.services = services

    def offload_path(self) -> str:
        text = str(self.state.value(K.DEEPSPEED_NVME_PATH) or "")
        if not text:
            return ""
        path = Path(text).expanduser()
        return str(path if path.is_absolute() else self.state.path.parent / path)

    def compose(self) -> ComposeResult:
        with Vertical(id="maintenance-box", classes="modal-box"):
            yield Label("Settings · Cache maintenance  [dim]esc closes[/]", classes="step-title")
            yield Static("Clear the block-detection cache after switching checkpoints or updating "
                         "weights. Clear the DeepSpeed offload cache to remove stale NVMe swap directories.",
                         classes="step-intro")
            with Horizontal(classes="modal-actions"):
                yield Button("Clear detection cache (F5)", id="clear-detection", compact=True)
                yield Button("Clear offload cache (F6)", id="clear-offload", compact=True)
            yield Static(f"Offload path: {self.offload_path() or '(none set: deepspeed.nvme_path)'}",
                         id="offload-path", markup=False)
            yield Label("Status", classes="field-label")
            yield Static("No maintenance run yet.", id="maintenance-status", markup=False)
            with Horizontal(classes="modal-actions"):
                yield Button("Close (esc)", id="maintenance-close", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        handler = {"clear-detection": self.action_clear_detection, "clear-offload": self.action_clear_offload,
                   "maintenance-close": self.action_close}.get(event.button.id or "")
        if handler:
            handler()

    def _report(self, what: str, fn, *args) -> None:
        status = self.query_one("#maintenance-status", Static)
        severity: SeverityLevel
        try:
            outcome = fn(*args)
        except ServiceUnavailable as exc:
            text, severity = f"{what}: unavailable: {exc}", "warning"
        except Exception as exc:  # an OS error while deleting: show it, keep the wizard
            text, severity = f"{what}: failed: {exc}", "error"
        else:
            text, severity = f"{what} cleared: {_describe(outcome)}", "information"
        status.update(text)
        self.notify(text, title="Maintenance", severity=severity)

    def action_clear_detection(self) -> None:
        self._report("Detection cache", self.services.clear_detection_cache)

    def action_clear_offload(self) -> None:
        path = self.offload_path()
        if not path:
            text = "Offload cache: no NVMe offload path in these settings (deepspeed.nvme_path)"
            self.query_one("#maintenance-status", Static).update(text)
            self.notify(text, title="Maintenance", severity="warning")
            return
        self._report(f"Offload cache ({path})", self.services.clear_offload_cache, path)

    def action_close(self) -> None:
        self.dismiss(None)
