"""The Review step: every diagnostic, the memory estimate, and the artefacts as written.

Selecting a diagnostic (Enter) sends `ReviewPane.Jump` with its key; the app moves to the
step that shows that key and focuses the field. The previews are the compiler's exact
output text: the same bytes `tuner compile` writes.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import ScrollableContainer, VerticalScroll
from textual.message import Message
from textual.widgets import Label, OptionList, Static, TabbedContent, TabPane
from textual.widgets.option_list import Option

from .facts import display_path
from .model import WizardState


class DiagnosticList(OptionList):
    """The diagnostics list; measures nothing at width 0 (a terminal shrunk mid-layout made
    rich's wrapping divide by zero: `range() arg 3 must not be zero`)."""

    def get_content_height(self, container, viewport, width: int) -> int:
        return super().get_content_height(container, viewport, width) if width > 0 else 1


class ReviewPane(VerticalScroll):
    """Diagnostics, estimate and artefact previews."""

    class Jump(Message):
        """Go to the field for `key`."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, state: WizardState, estimate=None) -> None:
        super().__init__(id="step-review", classes="step-pane")
        self.state = state
        self._estimate = estimate
        self._keys: list[str] = []

    def compose(self) -> ComposeResult:
        yield Label("6. Review", classes="step-title")
        yield Static("", id="review-summary")
        yield Label("Diagnostics (Enter jumps to the field)", classes="field-label")
        yield DiagnosticList(id="diagnostics")
        yield Label("Memory per GPU", classes="field-label")
        with ScrollableContainer(id="estimate-box", classes="panel"):  # the table is wide: scroll sideways
            yield Static("", id="estimate", markup=False)
        with TabbedContent(id="previews"):
            with TabPane("accelerate.yaml", id="tab-yaml"):
                yield Static("", id="preview-yaml", markup=False)
            with TabPane("deepspeed.json", id="tab-json"):
                yield Static("", id="preview-json", markup=False)

    def on_mount(self) -> None:
        self.sync()

    def sync(self) -> None:
        state = self.state
        result = state.result
        errors = len(state.errors)
        warnings = sum(1 for d in state.diagnostics if d.severity == "warning")
        plan = result.plan
        strategy = plan.strategy if plan else "?"
        verdict = "ready to save" if result.ok else f"{errors} error(s): save refused (ctrl+r saves a draft)"
        self.query_one("#review-summary", Static).update(
            f"Strategy: [b]{strategy}[/b] · {errors} error(s), {warnings} warning(s) · {verdict}\n"
            f"{state.lr_schedule()}\n"
            f"Artefacts go to {display_path(state.path.parent / 'build')}/")
        options = self.query_one("#diagnostics", OptionList)
        highlighted = options.highlighted
        options.clear_options()
        self._keys = []
        order = {"error": 0, "warning": 1, "note": 2}
        for d in sorted(state.diagnostics, key=lambda d: order[d.severity]):
            mark = {"error": "✗", "warning": "!", "note": "·"}[d.severity]
            key = d.key or "(file)"
            text = f"{mark} {d.severity} [{key}] {d.message}"
            if d.fix:
                text += f"\n    fix: {d.fix}"
            options.add_option(Option(Text(text)))  # plain text: "[key]" is not markup
            self._keys.append(d.key)
        if not self._keys:
            options.add_option(Option("no diagnostics", disabled=True))
        if self._keys:
            # Always a highlighted entry, so Enter jumps without moving the list first.
            options.highlighted = highlighted if highlighted is not None and highlighted < len(self._keys) else 0
        est = self._estimate(state.document.text(), state.path) if self._estimate else None
        self.query_one("#estimate", Static).update(
            est if est else "The memory estimator is not available in this tuner yet (tuner.compiler.memory.estimate).")
        self.query_one("#preview-yaml", Static).update(
            result.accelerate_yaml or "(not written: fix the errors above)")
        self.query_one("#preview-json", Static).update(
            result.deepspeed_json or ("(not written: fix the errors above)" if plan and plan.uses_deepspeed
                                      else "(DeepSpeed is off: no deepspeed.json)"))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option_index < len(self._keys):
            self.post_message(self.Jump(self._keys[event.option_index]))
