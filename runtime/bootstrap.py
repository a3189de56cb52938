"""Entry point of one rank of `tuner launch` on CPU: the person's script, unchanged.

``python -m tuner.runtime.bootstrap BUILD_DIR SCRIPT [ARGS...]`` or
``python -m tuner.runtime.bootstrap BUILD_DIR -m MODULE [ARGS...]``, started by
`tuner.runtime.launch` on every gloo rank (never by hand). Before the script's first line:

1. `rank_guard.install()`: exit with the launcher, and leave quietly on SIGINT/SIGTERM;
2. for DeepSpeed builds, the process group is created through DeepSpeed on gloo (what
   tuner's trainer does; accelerate would otherwise skip DeepSpeed's comm set-up on CPU);
3. `cpu_shim.install(strategy)`: every `Accelerator` the script (or the HF Trainer) builds
   gets the CPU state correction right after its constructor, so it is FSDP/DeepSpeed
   with the true rank and world size, as on GPUs;
4. under `tuner check` only (``$TUNER_CHECK_DIR`` set): the rehearsal's observer
   (runtime/check/observer.py), which records what each rank sees and stops the script
   after a few optimizer steps.

Then the script runs with `runpy` as ``__main__`` with ``sys.argv = [SCRIPT, ARGS...]``,
exactly as ``python SCRIPT ARGS`` would run it (its folder first on ``sys.path``).
Why a bootstrap module and not ``sitecustomize``/``.pth``: nothing is put on the
person's ``PYTHONPATH`` (which they may set themselves, and which child processes such as
dataloader workers would inherit), and a failure to install the shim is reported here
instead of being swallowed by Python's site machinery.
"""

from __future__ import annotations

import os
import runpy
import sys
from datetime import timedelta
from pathlib import Path

from ..compiler.diagnostics import EXIT_USAGE


def _usage() -> int:
    print("usage: python -m tuner.runtime.bootstrap BUILD_DIR (SCRIPT | -m MODULE) [ARGS...]", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or (argv[1] == "-m" and len(argv) < 3):
        return _usage()
    from . import cpu_shim, knobs, rank_guard
    from .artefacts import RunError, load

    rank_guard.install()
    try:
        arts = load(Path(argv[0]))
    except RunError as exc:
        print(f"tuner launch: {exc.message}", file=sys.stderr)
        return exc.exit_code
    strategy = arts.strategy
    import torch

    if not torch.cuda.is_available():
        if strategy.is_deepspeed and not torch.distributed.is_initialized():
            import deepspeed

            timeout = timedelta(seconds=knobs.pg_timeout_s())
            deepspeed.init_distributed(dist_backend="gloo", timeout=timeout, auto_mpi_discovery=False)
        try:
            cpu_shim.install(strategy, arts.plan.distributed_type)
        except RunError as exc:  # an untested accelerate (the launcher checked it too)
            print(f"tuner launch: {exc.message}", file=sys.stderr)
            return exc.exit_code

    from .check.observer import rehearsal  # `tuner check`: a no-op unless $TUNER_CHECK_DIR is set

    code: int | str | None = 0
    try:
        with rehearsal():
            if argv[1] == "-m":
                sys.argv = [argv[2], *argv[3:]]
                runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
            else:
                script = os.path.abspath(argv[1])
                sys.argv = [argv[1], *argv[2:]]
                sys.path[0] = os.path.dirname(script)  # as `python SCRIPT` has it
                runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    return _finish(code)


def _finish(code: int | str | None) -> int:
    """Leave a finished script without C++ teardown races.

    DeepSpeed's CPU comm op and gloo threads can abort the interpreter's final teardown
    ("terminate called without an active exception"), turning a finished run into a
    SIGABRT (the same reason as `worker._shutdown`). The script is done: flush and exit
    with its status.
    """
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if not torch_dist_initialized():
        return int(code or 0)
    os._exit(int(code or 0))


def torch_dist_initialized() -> bool:
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


if __name__ == "__main__":
    sys.exit(main())
