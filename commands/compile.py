"""`tuner compile SETTINGS`: validate and write the artefacts, or explain what is wrong."""

from __future__ import annotations

import sys

from ..compiler.compile import compile_file
from ..compiler.diagnostics import EXIT_INVALID, EXIT_OK, EXIT_USAGE, render_json, render_text
from ..compiler.read.files import describe_os_error
from ..compiler.read.source import SourceError


def run(args) -> int:
    try:
        result = compile_file(args.settings, args.overrides, args.out)
    except SourceError as exc:
        if exc.io:
            _report_usage(args, str(args.settings), exc.message)
            return EXIT_USAGE
        from ..compiler.diagnostics import Diagnostic
        diag = Diagnostic("error", "", exc.message, "fix the TOML syntax at this position",
                          str(args.settings), exc.line, exc.column)
        _print(args, [diag], ok=False)
        return EXIT_INVALID

    if not result.ok:
        _print(args, result.diagnostics.items, ok=False)
        return EXIT_INVALID
    try:
        out = result.write()
    except OSError as exc:
        _report_usage(args, str(result.out_dir), f"cannot write artefacts: {describe_os_error(exc)}")
        return EXIT_USAGE
    items = result.diagnostics.items
    plan = result.plan
    assert plan is not None  # a result that compiled has a plan
    if args.quiet:
        items = [d for d in items if d.severity != "note"]
    if not getattr(args, "verify", False):
        _print(args, items, ok=True, out=str(out), files=sorted(result.files), strategy=plan.strategy)
        return EXIT_OK
    from ..runtime.verify import run_in_subprocess

    project = args.settings.resolve().parent
    code, verdict = run_in_subprocess(out, project, plan.uses_deepspeed)
    ok = code == 0
    _print(args, items, ok=True, out=str(out), files=sorted(result.files), strategy=plan.strategy,
           verify={"ok": ok, "output": verdict})
    if args.format != "json":
        print(verdict, file=sys.stdout if ok else sys.stderr)
    if ok:
        return EXIT_OK
    return EXIT_USAGE if code == 2 else EXIT_INVALID


def _print(args, items, ok: bool, **extra) -> None:
    if args.format == "json":
        print(render_json(items, ok=ok, **extra))
        return
    stream = sys.stdout if ok else sys.stderr
    if items:
        print(render_text(items), file=stream)
    if ok:
        files = ", ".join(extra["files"])
        print(f"compiled {extra['strategy']} -> {extra['out']}/ ({files})", file=stream)


def _report_usage(args, where: str, message: str) -> None:
    if args.format == "json":
        print(render_json([], ok=False, error=message))
    else:
        print(f"{where}: error: {message}", file=sys.stderr)
