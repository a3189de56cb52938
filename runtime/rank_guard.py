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

import json
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


# --- what each rank is doing: the launcher's hang watch reads it (runtime/hang_watch.py) -------
#: Where each rank reports, in the run's output folder: ``rank-R.json`` (what it does, since when,
#: a heartbeat every `BEAT_S`) and ``rank-R.stack`` (its Python stacks, written on SIGUSR1).
RANKS_DIR = ".tuner-ranks"
BEAT_S = 1.0
_state: dict = {}
_paths: list = []  # the report and its temporary name
_lock = threading.Lock()


def doing(what: str) -> None:
    """Say what this rank is doing now ("training step 5", "validation at step 4"): named
    when the run stops, and compared across ranks by the launcher's hang watch."""
    if _state:
        _state.update(what=what, since=time.time())
        _write_state()


def failed(message: str, said: bool) -> None:
    """Record the person's error that stops this rank (its data, the build, a full disk), and whether
    this rank printed it: the launcher says the ones no rank printed (`hang_watch.unsaid_errors`),
    and takes the run's end for the person's error, not a crash, whichever rank it notices first."""
    if _state:
        _state.update(error=message, error_said=said)
        _write_state()


def _write_state() -> None:
    with _lock:
        try:
            _paths[1].write_text(json.dumps({**_state, "beat": time.time()}), encoding="utf-8")
            os.replace(_paths[1], _paths[0])
        except (OSError, IndexError):
            pass  # a full disk: the watch then sees no heartbeat, the rank's own error says why


def watch(output_dir: str | os.PathLike, what: str = "starting") -> None:
    """Report this rank's state into OUTPUT/.tuner-ranks/ and dump its Python stacks there on
    SIGUSR1 (`faulthandler`, all threads: works while the main thread is blocked in a collective)."""
    import faulthandler
    import socket
    from pathlib import Path

    folder = Path(output_dir) / RANKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    rank = os.environ.get("RANK", "0")
    _state.update(rank=int(rank), local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                  machine=int(os.environ.get("GROUP_RANK", os.environ.get("MACHINE_RANK", "0")) or 0),
                  host=socket.gethostname(), pid=os.getpid(), what=what, since=time.time())
    stack = open(folder / f"rank-{rank}.stack", "w", encoding="utf-8")  # noqa: SIM115 - held for the signal
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    _paths[:] = [folder / f"rank-{rank}.json", folder / f".rank-{rank}.json.tmp"]

    def beat() -> None:
        while True:
            _write_state()
            time.sleep(BEAT_S)

    threading.Thread(target=beat, name="tuner-rank-heartbeat", daemon=True).start()


class PhaseCallback:
    """The trainer's events as what the rank is doing (runtime/callbacks.py's interface)."""

    def on_batch_start(self, trainer, batch) -> None:
        doing(f"training step {trainer.step + 1}")

    def on_save(self, trainer, partial_dir) -> None:
        doing(f"saving checkpoint step-{trainer.step}")

    def on_train_end(self, trainer) -> None:
        doing("finishing (final validation and export)")
