"""`tuner doctor [SETTINGS]`: GPUs, platform, memory, disk, DeepSpeed ops, versions.

The facts are saved in the cache directory so that `tuner compile` on this machine uses
them (platform rules, memory fit) without importing torch.
"""

from __future__ import annotations

import sys

from ..compiler.diagnostics import EXIT_OK, EXIT_USAGE
from ..compiler.keys import paths as K
from ..compiler.read import hardware


def run(args) -> int:
    from ..runtime.doctor import collect, op_cache_line, paths_from_settings

    paths = {K.OUTPUT_DIR: "output"}
    if args.settings is not None:
        from ..compiler.compile import compile_file
        from ..compiler.read.source import SourceError

        try:
            result = compile_file(args.settings)
        except SourceError as exc:
            print(f"{args.settings}: error: {exc.message}", file=sys.stderr)
            return EXIT_USAGE
        if result.settings is not None:
            paths = paths_from_settings(result.settings, args.settings.resolve().parent)
    facts = collect(paths)
    try:
        hardware.save(facts)
    except OSError as exc:
        facts.warnings.append(f"could not save the facts for the compiler: {exc}")
    print(facts.to_json() if args.json else facts.report())
    if not args.json:
        print(op_cache_line())
    return EXIT_OK
