"""`tuner` / `tuner wizard [settings.toml]`: open the Textual wizard.

Starts without importing torch: hardware and block detection load their modules in
worker threads after the first paint. The terminal is restored by Textual on every exit
path, Ctrl+C included (Ctrl+C is a key binding in the app; a SIGINT that still arrives
is caught here).
"""

from __future__ import annotations

import sys
from pathlib import Path

EXIT_USAGE = 2


def run(args) -> int:
    from tuner.tui.app import WizardApp
    from tuner.tui.model import WizardState
    from tuner.tui.services import Services

    path = Path(getattr(args, "settings", None) or "settings.toml")
    if path.is_dir():
        path = path / "settings.toml"
    try:
        state = WizardState.open(path)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{path}: error: cannot read: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # tomlkit's parse errors: the wizard edits valid TOML only
        print(f"{path}: error: not valid TOML ({exc}); `tuner compile {path}` shows where", file=sys.stderr)
        return EXIT_USAGE
    app = WizardApp(state, Services())
    try:
        code = app.run()
    except KeyboardInterrupt:
        return 130
    return int(code or 0)
