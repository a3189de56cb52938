"""`tuner` / `tuner wizard [settings.toml]`: open the Textual wizard.

Starts without importing torch: hardware and block detection load their modules in
worker threads after the first paint. The terminal is restored by Textual on every exit
path, Ctrl+C included (Ctrl+C is a key binding in the app; a SIGINT that still arrives
is caught here).

Once the app has ended and said so, the process ends at once (`os._exit`, after flushing):
Python's own finalisation, tearing down torch (which hardware detection imports), took 1 to
3 s on a loaded machine, and a closed terminal must end the wizard within 2 s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..compiler.diagnostics import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE


class OpenError(Exception):
    """The settings file cannot be opened for editing."""


def build_app(settings: Path | None):
    """The wizard for `settings` (default ./settings.toml) with the real services."""
    from ..tui.app import WizardApp
    from ..tui.model import WizardState
    from ..tui.services import Services

    path = Path(settings or "settings.toml")
    if path.is_dir():
        path = path / "settings.toml"
    try:
        state = WizardState.open(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise OpenError(f"{path}: error: cannot read: {exc}") from None
    except Exception as exc:  # tomlkit's parse errors: the wizard edits valid TOML only
        raise OpenError(f"{path}: error: not valid TOML ({exc}); `tuner compile {path}` shows where") from None
    return WizardApp(state, Services())


def run(args) -> int:
    try:
        app = build_app(getattr(args, "settings", None))
    except OpenError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    try:
        code = app.run()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except OSError:  # the exit message could not be printed: the terminal has closed (EIO)
        code = app.leaving.code
    end_now(finish(app, code))
    return EXIT_INTERNAL  # not reached


def finish(app, code) -> int:
    """The exit status: a crash (Textual printed the traceback) is EXIT_INTERNAL, never 0,
    and names the file that holds the unsaved edits. An interruption's status is its
    signal's, whatever the teardown raised (tui/leaving.py)."""
    if app.leaving.code is not None:
        return int(app.leaving.code)
    if app.return_code:  # Textual sets 1 when an exception ended the app
        where = app.write_recovery()
        _say("tuner wizard: internal error (the traceback is above). "
             + (f"Your unsaved edits are in {where}." if where else "There were no unsaved edits."))
        return EXIT_INTERNAL
    return int(code or 0)


def _say(text: str) -> None:
    try:
        print(text, file=sys.stderr)
    except OSError:
        pass  # a closed terminal: the status still says what happened


def end_now(code: int) -> None:
    """Flush what was printed and end the process with `code`, skipping the interpreter's
    finalisation (every file the wizard writes was fsynced by `write_atomic`)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal: nothing more can reach it
    os._exit(code)
