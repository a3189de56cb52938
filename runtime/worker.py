"""Entry point of one rank: ``python -m tuner.runtime.worker BUILD_DIR [--plan FILE] [--max-steps N]
[--callback MODULE:NAME]...``.

Started by `tuner.runtime.launch` (torch's elastic launcher on CPU, `accelerate launch`
on GPUs), never by hand. ``--plan`` names the ranks' part of the run plan (runtime/run_plan.py:
what to resume, the step count, the callbacks), decided once before any rank started; the rank
reads it and decides none of it again. Without one the rank starts fresh. A user error
prints one line (on rank 0) and exits 2; anything else is a crash with a traceback, which
the launcher reports with the rank's number. A module of your own can call `main(argv, callbacks=[...])` to run the trainer with
callback objects (runtime/callbacks.py); ``--callback`` names them for `tuner run`.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from dataclasses import replace

from ..compiler.diagnostics import EXIT_OK, EXIT_USAGE


def _shutdown() -> None:
    """Leave after a successful run without C++ teardown races.

    DeepSpeed's CPU comm op and gloo threads can abort the interpreter's final teardown
    ("terminate called without an active exception"), turning a finished run into a
    SIGABRT. Everything is written and synchronised at this point, so flush and exit.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None, callbacks: list | None = None) -> int:
    p = argparse.ArgumentParser(prog="tuner.runtime.worker")
    p.add_argument("build_dir")
    p.add_argument("--plan", default=None, metavar="FILE")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--callback", action="append", default=[], metavar="MODULE:NAME")
    args = p.parse_args(argv)
    from . import rank_guard

    rank_guard.install()  # exit with the launcher; no traceback on SIGINT/SIGTERM

    from .artefacts import RunError, load
    from .families import FamilyError

    rank = os.environ.get("RANK", "0")
    try:
        arts = load(args.build_dir)
        if arts.plan.uses_deepspeed:  # say what DeepSpeed builds; refuse a stale build lock
            from .op_cache import announce_builds

            announce_builds()
        from . import callbacks as cbs
        from .check.observer import redirect_output, rehearsal  # `tuner check` only
        from .run_plan import RankPlan, read_rank_plan
        from .trainer import Trainer

        plan = read_rank_plan(args.plan) if args.plan else RankPlan()
        if args.max_steps is not None or args.callback:  # a rank started by hand
            plan = replace(plan, max_steps=plan.max_steps if args.max_steps is None else args.max_steps,
                           callbacks=(*plan.callbacks, *args.callback))
        arts = redirect_output(arts)  # `tuner check`: under the check's temporary folder
        rank_guard.watch(arts.output_dir)  # what this rank does, for the launcher's hang watch
        given = [rank_guard.PhaseCallback(), *(callbacks or []), *(cb for spec in plan.callbacks for cb in cbs.load(spec))]
        with rehearsal():
            Trainer(arts, plan=plan, callbacks=given).train()
        _shutdown()
    except (RunError, FamilyError) as exc:
        first_here = os.environ.get("LOCAL_RANK", rank) == "0"
        rank_guard.failed(str(exc), said=first_here)  # another rank's own error (its data): the launcher says it
        if first_here:  # once per machine: each launcher's log says why
            print(f"tuner run: {exc}", file=sys.stderr, flush=True)
        # Give rank 0 time to print before the launcher tears the others down.
        return getattr(exc, "exit_code", 2)
    except Exception as exc:
        # A full disk mid-run (metrics, a checkpoint, the export) is not a crash: say so on
        # the rank that hit it, naming where. torch and safetensors wrap the OSError.
        full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT) or \
            "No space left on device" in str(exc)
        if not full:
            raise
        where = getattr(exc, "filename", None) or (str(arts.output_dir) if "arts" in locals() else args.build_dir)
        line = (f"rank {rank}: No space left on device writing {where}; free space there or set output.dir to a "
                "larger disk, then resume with --resume latest")
        rank_guard.failed(line, said=True)
        print(f"tuner run: {line}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
