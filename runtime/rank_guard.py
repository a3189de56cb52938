"""What every rank does first, whoever started it (tuner's trainer or a person's script).

* `orphan_watchdog`: exit when the launcher that started this rank is gone, so no rank
  lingers when its launcher is killed (SIGKILL included).
* `quiet_signals`: SIGINT/SIGTERM end the rank at once with 128 + the signal number and
  no traceback. The launcher forwards Ctrl-C and stops the ranks with SIGTERM; a Python
  KeyboardInterrupt inside a collective would otherwise print a torch traceback per rank.
  Checkpoints stay whole: tuner writes them to a temporary folder and renames it only
  when every rank is done (runtime/checkpoint.py).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from ..compiler.diagnostics import EXIT_INTERNAL

#: A rank whose launcher is gone exits with tuner's internal-error status (70).
ORPHAN_EXIT = EXIT_INTERNAL


def orphan_watchdog(poll_s: float = 2.0) -> None:
    """Exit when the launcher that started this rank is gone (never linger as an orphan)."""
    parent = os.getppid()
    try:  # Linux: the kernel kills this rank when its launcher dies (no polling delay)
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(ORPHAN_EXIT)
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(ORPHAN_EXIT)

    threading.Thread(target=watch, name="tuner-orphan-watchdog", daemon=True).start()


def _leave(signum: int, _frame) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(128 + signum)


def quiet_signals() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _leave)


def install() -> None:
    orphan_watchdog()
    quiet_signals()
