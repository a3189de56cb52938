"""`tuner estimate SETTINGS`: memory per GPU and per host, the strategies side by side.

Pure Python except for one case: when the settings target a GPU platform, state no GPU
memory and no saved or injected hardware facts exist, the doctor is asked (imports torch).
Capacities: stated in the settings > injected or saved facts > the doctor > this machine's
RAM (only when this machine is the target platform). Facts that describe another platform
than the target are ignored by the estimate (`tuner.compiler.estimate.capacities`): the
table then says the host RAM is unknown rather than checking the wrong machine's.
"""

from __future__ import annotations

import json
import sys

from tuner.compiler import EXIT_INVALID, EXIT_OK, EXIT_USAGE, SourceError, compile_file
from tuner.compiler.diagnostics import render_text


def _facts(settings):
    from tuner.compiler import hardware

    try:
        facts = hardware.local_facts()
    except (OSError, ValueError) as exc:
        print(f"warning: {exc}", file=sys.stderr)
        facts = None
    if facts is not None:
        return facts
    if settings.hardware.platform in ("cuda", "rocm") and not settings.hardware.gpu_memory_gib:
        try:
            from tuner.runtime.doctor import collect

            facts = collect(probe_ops=False)
            return facts if facts.platform == settings.hardware.platform else None  # not the target
        except ImportError:
            pass
    from tuner.compiler.platform_probe import detect_platform

    total, available = hardware.host_memory_bytes()
    # This machine's RAM says something only when this machine is the target.
    if settings.hardware.num_machines == 1 and total and detect_platform() == settings.hardware.platform:
        return hardware.HardwareFacts(platform=settings.hardware.platform, host_memory_bytes=total,
                                      host_available_bytes=available, source="this machine")
    return None


def run(args) -> int:
    from tuner.compiler.estimate import for_result

    try:
        result = compile_file(args.settings, args.overrides)
    except SourceError as exc:
        print(f"{args.settings}: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if exc.io else EXIT_INVALID
    errors = result.diagnostics.errors
    if result.settings is None or result.plan is None:
        print(render_text(errors), file=sys.stderr)
        return EXIT_INVALID
    est = for_result(result, _facts(result.settings), args.settings.resolve().parent)
    if args.json:
        payload = est.to_dict()
        payload["strategy"] = result.plan.strategy
        payload["errors"] = [d.format() for d in errors]
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        if errors:
            print(render_text(errors), file=sys.stderr)
        print(est.table())
    return EXIT_INVALID if errors else EXIT_OK
