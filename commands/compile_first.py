"""A settings file given where a build directory is expected (`tuner run`, `tuner check`):
compile it first, exactly as `tuner compile` would, into ``build/`` beside it."""

from __future__ import annotations

import sys
from pathlib import Path

from ..compiler.diagnostics import EXIT_INVALID, EXIT_USAGE


def compile_settings(settings: Path, overrides: list[str], keep: dict[str, str] | None = None) -> Path | int:
    """The build directory, or the exit code when the compile failed (its diagnostics printed).
    `keep`: receives the artefacts as compiled (name -> text), whoever writes the folder next."""
    from ..compiler.compile import compile_file
    from ..compiler.diagnostics import render_text
    from ..compiler.read.source import SourceError

    try:
        result = compile_file(settings, overrides)
    except SourceError as exc:
        print(f"{settings}: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if exc.io else EXIT_INVALID
    problems = [d for d in result.diagnostics.items if d.severity != "note"]
    if not result.ok:
        print(render_text(problems), file=sys.stderr)
        return EXIT_INVALID
    if problems:
        print(render_text(problems), file=sys.stderr)
    if keep is not None:
        keep.update(result.files)
    try:
        return result.write()
    except OSError as exc:
        from ..compiler.read.files import describe_os_error

        print(f"{result.out_dir}: error: cannot write artefacts: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
