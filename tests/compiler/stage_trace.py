"""Which compile stage each function call belongs to, recorded with `sys.setprofile`.

A stage is a group of compiler modules (`STAGES`); every other compiler module is a library
(schema, diagnostics, settings, files, the estimator, ...) whose calls count for the stage
that made them, and so are the methods of the values the stages hand on: the accessors of
the gathered inputs (`CompileInputs.read`, `.model`, `.disk`, `FileRead.text`: they look up
what `gather` read, they read nothing), the plan's and the frozen settings'.
`compiler/compile.py` is the driver that calls the stages in turn.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import tuner.compiler

COMPILER = Path(tuner.compiler.__file__).parent

#: Stage -> its modules (file stems anywhere under compiler/), in pipeline order.
STAGES: dict[str, tuple[str, ...]] = {
    "gather": ("gather",),
    "normalise": ("normalise",),
    "rules": ("rules", "rules_runtime", "deepspeed_config", "deepspeed_offload", "deepspeed_rules"),
    "facts": ("model_facts",),
    "emit": ("emit", "cluster"),
}
ORDER = list(STAGES)
_STAGE_OF = {stem: stage for stage, stems in STAGES.items() for stem in stems}
#: Functions of a stage module that belong to the values it hands on (library, not a stage).
ACCESSORS = ("CompileInputs.", "FileRead.", "ModelFacts.", "DiskFacts.", "model_key", "Normalised.", "Plan.",
             "Checked.", "_frozen_class.<locals>.", "_refuse")


def stage_of(code: Any) -> str | None:
    """The stage of a code object; None for library code and code outside the compiler."""
    path = Path(code.co_filename)
    if COMPILER not in path.parents:
        return None
    if getattr(code, "co_qualname", code.co_name).startswith(ACCESSORS):
        return None
    return _STAGE_OF.get(path.stem)


@dataclass
class Trace:
    """Stage entries: a call into a stage from outside it (the driver, or another stage)."""

    entries: list[tuple[str, str, str]] = field(default_factory=list)
    """(caller's stage or 'driver', entered stage, function's qualified name), in order."""
    calls: dict[str, int] = field(default_factory=dict)
    """Qualified name -> how many times it was called (every compiler function)."""

    def sequence(self) -> list[str]:
        """The entered stages with consecutive repeats collapsed."""
        out: list[str] = []
        for _, stage, _ in self.entries:
            if not out or out[-1] != stage:
                out.append(stage)
        return out


def trace(fn: Callable[[], Any]) -> tuple[Any, Trace]:
    """Run `fn` and record the stage entries it makes."""
    t = Trace()
    stack: list[str] = ["driver"]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if COMPILER in Path(code.co_filename).parents:
                name = f"{Path(code.co_filename).stem}.{getattr(code, 'co_qualname', code.co_name)}"
                t.calls[name] = t.calls.get(name, 0) + 1
            stage = stage_of(code)
            if stage is not None and stage != stack[-1]:
                t.entries.append((stack[-1], stage, f"{Path(code.co_filename).stem}.{code.co_qualname}"))
            stack.append(stage or stack[-1])
        elif event == "return":
            if len(stack) > 1:
                stack.pop()

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(old)
    return result, t
