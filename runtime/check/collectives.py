"""A collective that only some ranks reach: bounded in the rehearsal, then named.

A collective called on some ranks only (a state-dict gather inside ``if
accelerator.is_main_process:``, a rank-dependent branch) never completes: the ranks wait in
different collectives until the process group gives up, 30 minutes by torch's default. In
the rehearsal (and only there: `tuner launch` leaves a script's process group as it is)

* `bound()` sets torch's *default* process-group timeout to ``TUNER_PG_TIMEOUT`` (300 s),
  so a process group the script or accelerate creates without a timeout of its own gives up
  then (a script that passes its own timeout keeps it);
* `stuck(exc)` reads, from the error a rank ends with, whether it came out of a collective
  (timed out there, or its peer gave up first), and where the rank waited: the script's line
  and the call it made there (the first frame outside the script: ``get_state_dict``,
  ``wait_for_everyone``);
* `judge(facts)` turns a timeout into one ``collectives`` finding naming each rank's line.

Found with peft 0.22, whose ``get_peft_model_state_dict`` gathers FSDP2's DTensor shards
(a collective): the usual "save the adapter on the main process" then waits forever.
"""

from __future__ import annotations

import math
import os
import sysconfig
import traceback
from datetime import timedelta

from .. import knobs
from .findings import Finding, fault, ok

#: Where library code lives: frames under these are not the script's.
_LIBRARY = tuple(os.path.realpath(p) + os.sep for p in {sysconfig.get_paths()[k] for k in ("stdlib", "purelib",
                                                                                           "platlib")})
_TUNER = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..")) + os.sep


def bound() -> None:
    """Make torch's default process-group timeout the rehearsal's bound (TUNER_PG_TIMEOUT)."""
    from torch.distributed import distributed_c10d as c10d

    limit = timedelta(seconds=knobs.pg_timeout_s())
    c10d.default_pg_timeout = limit
    if isinstance(getattr(c10d, "default_pg_nccl_timeout", None), timedelta):
        c10d.default_pg_nccl_timeout = limit
    # DeepSpeed passes its own default (DEEPSPEED_TIMEOUT minutes, 10) when it creates the group
    # on GPUs, read when deepspeed is first imported; on CPU ranks tuner creates it (bootstrap).
    os.environ.setdefault("DEEPSPEED_TIMEOUT", str(max(1, math.ceil(limit.total_seconds() / 60))))


def _library(filename: str) -> bool:
    path = os.path.realpath(filename)
    in_tuner = path.startswith(_TUNER) and not path.startswith(_TUNER + "tests" + os.sep)
    return path.startswith(_LIBRARY) or in_tuner or filename.startswith("<")


def stuck(exc: BaseException) -> dict | None:
    """Where this rank was, if `exc` came out of a collective: {"line", "call", "timeout"}.

    ``timeout`` is whether the collective timed out here; a rank whose peer gave up first
    ends with the peer's closed connection instead, in the collective it waited in."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not any(f"{os.sep}torch{os.sep}distributed{os.sep}" in f.filename for f in frames):
        return None
    line, call = "", ""
    for i, frame in enumerate(frames):
        if not _library(frame.filename) and i + 1 < len(frames):
            line = f"{os.path.basename(frame.filename)}:{frame.lineno}"
            call = frames[i + 1].name
    text = str(exc).lower()
    return {"line": line or "(no line of the script on the stack)", "call": call or frames[-1].name,
            "timeout": "timed out" in text or "timeout" in text}


def judge(facts: dict[int, dict]) -> tuple[list[Finding], set[int]]:
    """The ``collectives`` finding, and the ranks whose error it explains."""
    seen = {r: f["collective"] for r, f in sorted(facts.items()) if f.get("collective")}
    if not any(w["timeout"] for w in seen.values()):
        return [ok("collectives", "all", "no rank waited in a collective the others did not join")], set()
    where = "; ".join(f"rank {r} in {w['call']}() at {w['line']}" for r, w in seen.items())
    others = sorted(set(facts) - set(seen))
    rest = f"; rank(s) {', '.join(map(str, others))} ended elsewhere" if others else ""
    return [fault("collectives", ", ".join(f"rank {r}" for r in seen),
                  f"a collective timed out after {knobs.pg_timeout_s():g} s: the ranks waited in collectives the "
                  f"others never joined: {where}{rest}",
                  "call every collective on every rank: one inside `if accelerator.is_main_process:` (a state-dict "
                  "gather such as accelerate's get_state_dict, or peft's get_peft_model_state_dict under FSDP2 "
                  "since peft 0.22) waits forever; gather on all ranks and write the file on the main process only. "
                  "If a rank legitimately works alone for longer, raise TUNER_PG_TIMEOUT")], set(seen)
