"""`tuner launch BUILD_DIR (SCRIPT | -m MODULE) [ARGS...]`: a person's own training script
on the compiled build's ranks, shaped like ``accelerate launch``.

The script needs no change: on GPUs it runs under accelerate's own launcher with the
compiled YAML; on CPU it runs on real gloo ranks with the environment accelerate derives
from that YAML and the CPU state correction installed before its first `Accelerator`
(runtime/bootstrap.py). Launcher flags (``--machine-rank`` ...) go before the script;
everything after the script (or module) name is the script's own. How the ranks start is
decided by the run plan (runtime/run_plan.py), as for `tuner run` and `tuner check`.
"""

from __future__ import annotations

import sys

from ..compiler.diagnostics import EXIT_USAGE
from .target import module_problem, split_target


def run(args) -> int:
    target = split_target(args)
    if isinstance(target, str):
        print(f"tuner launch: {target}", file=sys.stderr)
        return EXIT_USAGE
    from pathlib import Path

    if target[0] != "-m" and not Path(target[0]).is_file():
        print(f"tuner launch: script not found: {target[0]}", file=sys.stderr)
        return EXIT_USAGE
    if target[0] == "-m" and (problem := module_problem(target[1])):
        print(f"tuner launch: {problem}", file=sys.stderr)
        return EXIT_USAGE

    if getattr(args, "check", False):
        from .check import run_checks

        code = run_checks(args, target, "tuner launch")
        if code:
            return code
    from ..runtime import run_execute
    from ..runtime.artefacts import RunError, load
    from ..runtime.launch import launch
    from ..runtime.run_plan import LAUNCH, Options, make_plan

    try:
        arts = load(args.build_dir)
        with make_plan(arts, Options.of(LAUNCH, args, target)) as plan:
            if plan.refusal:
                print(f"tuner launch: {plan.refusal.message}", file=sys.stderr)
                return plan.refusal.exit_code
            run_execute.show(plan)
            return launch(plan, arts)
    except RunError as exc:
        print(f"tuner launch: {exc.message}", file=sys.stderr)
        return exc.exit_code
