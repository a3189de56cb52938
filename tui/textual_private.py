"""Every private Textual name tuner's wizard uses, and the Textual versions it was checked on.

Textual offers no public way to do what these do (hold a burst's redraw, see whether a
widget's queue is empty, lay a screen out now, keep the edits when a handler raises).
A new Textual may rename or drop any of them: `tests/tui/test_textual_private.py` fails,
naming the name, when the installed Textual lacks one or is not a version listed here (check
each use, then add the version). New private uses go here first.
"""

from __future__ import annotations

#: The Textual releases (major.minor) these names were checked on.
CHECKED_VERSIONS = ("8.2",)

#: (module, class, attribute) -> where tuner uses it.
PRIVATE_NAMES: dict[tuple[str, str, str], str] = {
    ("textual.app", "App", "_begin_batch"): "tui/keyqueue.py: one redraw per burst",
    ("textual.app", "App", "_end_batch"): "tui/keyqueue.py: one redraw per burst",
    ("textual.app", "App", "_batch_count"): "tui/keyqueue.py: redraw only outside a batch",
    ("textual.app", "App", "_exit"): "tui/app.py: keys typed while quitting go nowhere",
    ("textual.app", "App", "_handle_exception"): "tui/app.py: recovery file; errors of a teardown after a signal",
    ("textual.message_pump", "MessagePump", "_message_queue"): "tui/keyqueue.py: has a key settled",
    ("textual.widget", "Widget", "_layout_required"): "tui/keyqueue.py: lay out before Tab",
    ("textual.widget", "Widget", "_check_refresh"): "tui/keyqueue.py: lay out before Tab",
    ("textual.screen", "Screen", "_refresh_layout"): "tui/keyqueue.py: lay out before Tab",
    ("textual.widgets", "Footer", "_bindings_ready"): "tui/steps.py: KeyFooter keeps its keys when unchanged",
    ("textual.widgets", "Collapsible", "_on_collapsible_title_toggle"):
        "tui/steps.py: AdvancedPart builds its rows before it opens (overrides the handler)",
    ("textual.widgets", "Input", "_on_paste"): "tui/fields.py: FieldInput says a multi-line paste kept one line",
}


def missing() -> list[str]:
    """The names the installed Textual lacks (instance attributes are looked up on an instance
    where the class does not define them)."""
    import importlib

    absent = []
    for (module, cls, attr), _where in PRIVATE_NAMES.items():
        klass = getattr(importlib.import_module(module), cls)
        if not hasattr(klass, attr) and attr not in _instance_attributes(klass):
            absent.append(f"{module}.{cls}.{attr}")
    return absent


def _instance_attributes(klass) -> set[str]:
    """Names assigned as `self.NAME` in the class's (and its bases') source."""
    import inspect
    import re

    names: set[str] = set()
    for base in klass.__mro__:
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        names.update(re.findall(r"self\.(_\w+)\s*(?::[^=]+)?=", source))
    return names
