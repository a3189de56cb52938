"""`tuner run TARGET`: train from a build directory (or a settings file, compiled first).

The runtime reads only the compiled artefacts (manifest.json, accelerate.yaml,
deepspeed.json). Given a settings file, this command compiles it (with any ``--set``
overrides) into ``build/`` beside it first, exactly as `tuner compile` would.

What the run does is decided once, before any rank starts, by the run plan
(runtime/run_plan.py: the family, the packages, the resume, the data check, the launcher);
this command shows it, refuses, or carries it out (runtime/run_execute.py). The ranks never
read ``build/`` itself (another run from the same folder may replace it while they start):
they read the run's own copy and the plan beside it, written into the output directory once
the run holds its lock (runtime/run_build.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..compiler.diagnostics import EXIT_USAGE
from .compile_first import compile_settings


def run(args) -> int:
    target: Path = args.target
    overrides = list(getattr(args, "overrides", []) or [])
    if target.is_file():
        compiled: dict[str, str] = {}  # the run keeps what it compiled: build/ may be another run's by then
        built = compile_settings(target, overrides, keep=compiled)
        if isinstance(built, int):
            return built
        from ..runtime.run_build import RUN_FILES

        build_dir, files = built, {n: compiled[n].encode("utf-8") for n in RUN_FILES if n in compiled}
    else:
        if overrides:
            print("tuner run: --set applies to a settings file; this is a build directory "
                  "(recompile it with `tuner compile SETTINGS --set ...`)", file=sys.stderr)
            return EXIT_USAGE
        build_dir, files = target, None
    if getattr(args, "check", False):
        from .check import run_checks

        args.build_dir = build_dir
        code = run_checks(args, None, "tuner run")
        if code:
            return code

    from ..runtime import run_build, run_execute
    from ..runtime.artefacts import RunError
    from ..runtime.run_plan import RUN, Options, make_plan

    try:
        files = run_build.pinned(files if files is not None else run_build.read_build(build_dir), build_dir)
        with run_build.staged(files) as staged:  # checked in a private folder until the run holds its lock
            with make_plan(staged, Options.of(RUN, args, build_hint=str(target))) as plan:
                if plan.refusal:
                    print(f"tuner run: {plan.refusal.message}", file=sys.stderr)
                    return plan.refusal.exit_code
                run_execute.show(plan)
                return run_execute.run(plan, staged, files)
    except RunError as exc:
        print(f"tuner run: {exc.message}", file=sys.stderr)
        return exc.exit_code
