"""The wizard's keys, in one table: the app's bindings, the help screen (`?`/F12) and
`tuner wizard --help` all read it. Plain Python (the CLI imports it without Textual).
"""

from __future__ import annotations

#: (key as Textual names it, key as a person reads it, what it does). Order = help order.
KEYS: tuple[tuple[str, str, str], ...] = (
    ("f1..f6", "F1 … F6", "go to step 1 … 6 (Model, Hardware, Sharding, Checkpoints, Precision, Review)"),
    ("ctrl+n", "ctrl+n", "next step (refused while the step has errors)"),
    ("ctrl+p", "ctrl+p", "previous step"),
    ("tab", "Tab / shift+Tab", "next / previous field"),
    ("ctrl+s", "ctrl+s", "save settings.toml (refused while there are errors)"),
    ("ctrl+r", "ctrl+r", "save a draft beside it (settings.draft.toml), even with errors"),
    ("ctrl+g", "ctrl+g", "save and compile (writes build/ beside the settings)"),
    ("ctrl+t", "ctrl+t", "remove the keys of the strategies not chosen (Sharding)"),
    ("enter", "Enter", "on an \"Advanced\" title: show / hide the step's advanced settings"),
    ("f7", "F7", "DeepSpeed builder (ctrl+o apply, esc cancel, ctrl+t / ctrl+l save / load a template)"),
    ("f8", "F8", "block detection (space select, ctrl+o apply, F5 refresh)"),
    ("f9", "F9", "settings: cache maintenance"),
    ("ctrl+y", "ctrl+y", "use the detected hardware values"),
    ("f10", "F10", "quick start (model, GPUs, memory, machines -> the strategies that fit; Up/Down picks one)"),
    ("f12", "? / F12", "this help: every key, and every settings key searchable"),
    ("ctrl+q", "ctrl+q", "quit (asks again when there are unsaved edits)"),
    ("ctrl+c", "ctrl+c", "quit at once, exit 130; unsaved edits are written to settings.draft.toml"),
)


def keys_text() -> str:
    """The key table as plain text (for `tuner wizard --help`)."""
    width = max(len(k[1]) for k in KEYS)
    return "keys:\n" + "\n".join(f"  {shown:<{width}}  {what}" for _, shown, what in KEYS)
