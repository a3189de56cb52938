"""Reading a settings file for a command that compiles it (`tuner estimate`, `tuner data`)."""

from __future__ import annotations

import sys

from ..compiler.diagnostics import EXIT_INVALID, EXIT_USAGE
from ..compiler.gather import CompileInputs, gather
from ..compiler.read.source import SourceError, read_settings


def gather_or_exit_code(args) -> CompileInputs | int:
    """`gather` of `args.settings` with `args.overrides`; an unreadable or unparsable file is
    printed as one line and answered with its exit code (2 for I/O, 1 for invalid)."""
    try:
        return gather(read_settings(args.settings), args.overrides)
    except SourceError as exc:
        print(f"{args.settings}: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if exc.io else EXIT_INVALID
