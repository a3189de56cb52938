"""tuner's environment knobs for a run, read in this one place when they are used (never at
import, so a test or a wrapper that sets one after importing tuner still gets it).

| variable | default | what it bounds |
|---|---|---|
| ``TUNER_HANG_S`` | 25 | a stopped rank, or ranks doing different things, before the hang watch stops the run |
| ``TUNER_PG_TIMEOUT`` | 300 | a collective, before the process group gives up |
| ``TUNER_RDZV_TIMEOUT`` | 300 | machine 0's wait for the other machines at the rendezvous |

A value that is not a positive number is refused naming the variable, not met with a traceback.
"""

from __future__ import annotations

import os

from .artefacts import RunError

DEFAULTS = {"TUNER_HANG_S": 25.0, "TUNER_PG_TIMEOUT": 300.0, "TUNER_RDZV_TIMEOUT": 300.0}


def seconds(name: str) -> float:
    """The knob `name` in seconds: the environment's value now, else its default."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return DEFAULTS[name]
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise RunError(f"${name} = {raw!r} is not a positive number of seconds (default {DEFAULTS[name]:g}); "
                       f"set it to one, or unset it")
    return value


def check() -> None:
    """Refuse any knob set to something that is not a number of seconds (before ranks start)."""
    for name in DEFAULTS:
        seconds(name)


def hang_s() -> float:
    return seconds("TUNER_HANG_S")


def pg_timeout_s() -> float:
    return seconds("TUNER_PG_TIMEOUT")


def rdzv_timeout_s() -> int:
    return int(seconds("TUNER_RDZV_TIMEOUT"))
