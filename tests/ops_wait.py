"""Waiting for DeepSpeed's ops while scripts/test.sh builds them beside the first tests.

A fresh checkout has no DeepSpeed op built. scripts/test.sh then starts scripts/build_ops.py
in the background (its pid in $TUNER_OPS_BUILD_PID, the ops it has finished, one per line, in
$TUNER_OPS_PROGRESS, its output in $TUNER_OPS_LOG) and runs the tests that start no rank first.
A test about to start ranks calls `wait_for_ops()` (tests/harness.py does, for `tuner run`,
`launch`, `check`): it returns at once when no build is running or the ops it needs are built;
otherwise it says what it waits for, on the terminal and in the test's output, and waits.
The shared-memory collectives (every DeepSpeed rank) and CPU Adam are built first; async I/O,
most of a fresh build's time, is needed by the NVMe tests only (`nvme=True`).
"""

from __future__ import annotations

import os
import sys
import time

CORE = ("deepspeed_shm_comm", "cpu_adam")
NVME = ("pin_memory", "async_io")
#: the most a test waits (a build that takes longer: the test goes on, and DeepSpeed says what it builds);
#: below pyproject.toml's pytest `timeout`, which ends a test that hangs
LIMIT_S = 1500.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie (exited, not yet reaped by test.sh) has finished
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def finished(progress: str) -> set[str]:
    try:
        with open(progress, encoding="utf-8") as fh:
            return {line.strip() for line in fh if line.strip()}
    except OSError:
        return set()


def _say(text: str) -> None:
    print(text, flush=True)  # in the test's captured output
    try:
        sys.__stderr__.write(f"\n[tests] {text}\n")  # and on the terminal (xdist workers' stderr is the terminal's)
        sys.__stderr__.flush()
    except (AttributeError, OSError, ValueError):
        pass


def wait_for_ops(nvme: bool = False) -> float:
    """Seconds waited for the background build of the ops a DeepSpeed rank needs (0 when none runs)."""
    pid, progress = os.environ.get("TUNER_OPS_BUILD_PID"), os.environ.get("TUNER_OPS_PROGRESS")
    if not pid or not progress:
        return 0.0
    need = set(CORE + (NVME if nvme else ()))
    started, said = time.monotonic(), False
    while time.monotonic() - started < LIMIT_S:
        done = finished(progress)
        if "all" in done or need <= done or not _alive(int(pid)):
            break
        if not said:
            _say(f"waiting for DeepSpeed's ops ({', '.join(sorted(need - done))}), built in the background by "
                 f"scripts/build_ops.py (pid {pid}, log {os.environ.get('TUNER_OPS_LOG', '?')})")
            said = True
        time.sleep(2)
    waited = time.monotonic() - started
    if said:
        _say(f"DeepSpeed's ops: waited {waited:.0f} s")
    return waited
