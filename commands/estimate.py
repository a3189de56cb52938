"""`tuner estimate SETTINGS`: memory per GPU and per host, the strategies side by side.

Pure Python except for one case: when the settings target a GPU platform, state no GPU
memory and no saved or injected hardware facts exist, the doctor is asked (imports torch).
Capacities: stated in the settings > injected or saved facts > the doctor > this machine's
RAM (only when this machine is the target platform). Facts that describe another platform
than the target are ignored by the estimate (`tuner.compiler.memory.estimate.capacities`): the
table then says the host RAM is unknown rather than checking the wrong machine's.

The table is the one the compile computed (`CompileResult.estimate`): `tuner estimate`
gathers the compile's inputs, and only when they hold no hardware facts asks the doctor (or
this machine) and compiles those inputs again with the facts it found.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from ..compiler.compile import compile_inputs
from ..compiler.diagnostics import EXIT_INVALID, EXIT_OK, render_text
from .settings_input import gather_or_exit_code


def _facts(settings):
    """Facts for a compile that had none: the doctor's (GPU targets), or this machine's RAM."""
    from ..compiler.read import hardware

    if settings.hardware.platform in ("cuda", "rocm") and not settings.hardware.gpu_memory_gib:
        try:
            from ..runtime.doctor import collect

            facts = collect(probe_ops=False)
            return facts if facts.platform == settings.hardware.platform else None  # not the target
        except ImportError:
            pass
    from ..compiler.read.platform_probe import detect_platform

    total, available = hardware.host_memory_bytes()
    # This machine's RAM says something only when this machine is the target.
    if (settings.hardware.num_machines == 1 and total
            and detect_platform(hardware.local_facts()) == settings.hardware.platform):
        return hardware.HardwareFacts(platform=settings.hardware.platform, host_memory_bytes=total,
                                      host_available_bytes=available, source="this machine")
    return None


def run(args) -> int:
    inputs = gather_or_exit_code(args)
    if isinstance(inputs, int):
        return inputs
    result = compile_inputs(inputs)
    if inputs.facts is None and result.settings is not None:
        facts = _facts(result.settings)
        if facts is not None:
            result = compile_inputs(dataclasses.replace(inputs, facts=facts))
    errors = result.diagnostics.errors
    est = result.estimate
    if result.settings is None or result.plan is None or est is None:
        print(render_text(errors) or "memory estimate unavailable: the settings do not compile", file=sys.stderr)
        return EXIT_INVALID
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
