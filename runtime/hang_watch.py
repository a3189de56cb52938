"""The launcher's hang watch: a rank-divergent failure ends the run within a bound, never a hang.

A rank that dies ends the run through torch's elastic agent (runtime/launch.py). A rank that
hangs does not: a stopped rank (SIGSTOP), a rank out of data, validation on rank 0 only that
outlasts the others, a collective only some ranks call: the others wait in a collective until
the process-group timeout (300 s by default, 30 minutes in many trainers). So every rank of
`tuner run` reports what it is doing and a heartbeat into ``OUTPUT/.tuner-ranks/``
(`rank_guard.watch` / `rank_guard.doing`), and this thread in the launcher stops the run when

* a rank's heartbeat is older than the bound (the process is stopped or frozen), or
* the ranks have been doing different things for longer than the bound (one validates, saves
  or has finished while the others wait in the next step's collective).

It then has every rank of this machine write its Python stacks (``faulthandler`` on SIGUSR1,
a stopped rank is continued for it), copies them to ``OUTPUT/stacks/``, kills this machine's
ranks, and `launch` prints one message: the machine, the rank, what it was doing, the last
complete checkpoint. Every launcher of a job watches every rank it can see (an output folder
shared by the machines); machines that share no folder fall back on ``TUNER_PG_TIMEOUT``.

The bound is ``TUNER_HANG_S`` seconds (default 25): with the stacks and the elastic agent's stop,
every rank is gone within 60 s of the fault (docs/reliability.md has the figures).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

from . import knobs
from .rank_guard import RANKS_DIR

POLL_S = 1.0


def read_ranks(output_dir: Path, since: float) -> dict[int, dict]:
    """The ranks' reports written since `since` (earlier runs' files are ignored)."""
    found = {}
    for p in (Path(output_dir) / RANKS_DIR).glob("rank-*.json"):
        try:
            rep = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rep, dict) and rep.get("beat", 0) >= since:
            found[int(rep.get("rank", -1))] = rep
    return found


def unsaid_errors(ranks: dict[int, dict]) -> list[str]:
    """The errors ranks recorded (`rank_guard.failed`) that no rank printed: each machine's local
    rank 0 prints its own, so another rank's error is said once here, naming the rank."""
    said = {rep.get("error") for rep in ranks.values() if rep.get("error_said")}
    lines = []
    for rank in sorted(ranks):
        error = ranks[rank].get("error")
        if error and error not in said:
            lines.append(f"rank {rank}: {error}")
            said.add(error)
    return lines


def describe(rep: dict, now: float | None = None) -> str:
    now = now or time.time()
    return (f"rank {rep.get('rank')} on machine {rep.get('machine', 0)} ({rep.get('host', '?')}, pid {rep.get('pid')}) "
            f"was {rep.get('what', '?')} (for {now - rep.get('since', now):.0f} s)")


def culprit(ranks: dict[int, dict], now: float, bound: float) -> str | None:
    """The cause line when the ranks hang, or None."""
    host = socket.gethostname()
    silent = [r for r in ranks.values() if now - r.get("beat", now) > bound  # a rank that exited is the agent's
              and (r.get("host") != host or _alive(r.get("pid")))]
    if silent:
        r = min(silent, key=lambda r: r["rank"])
        return f"{describe(r, now)} and stopped responding (no heartbeat for {now - r['beat']:.0f} s)"
    doings = {r.get("what") for r in ranks.values()}
    if len(doings) < 2:
        return None
    diverged_for = now - max(r.get("since", now) for r in ranks.values())
    if diverged_for <= bound:
        return None
    # the odd one out: a rank not in a training step (validation, a save, finished), else the one
    # whose state is oldest (the rank behind, which the others wait for)
    odd = [min(ranks.values(), key=lambda r: (str(r.get("what", "")).startswith("training step"), r.get("since", now)))]
    others = [r for r in ranks.values() if r not in odd]
    waited = ", ".join(sorted({str(r.get("what")) for r in others}))
    return (f"{describe(odd[0], now)} while rank{'s' if len(others) > 1 else ''} "
            f"{', '.join(str(r['rank']) for r in sorted(others, key=lambda r: r['rank']))} waited ({waited}) "
            f"for {diverged_for:.0f} s")


class HangWatch:
    """Started by the launcher before its ranks; `cause` is set once it stopped them."""

    def __init__(self, output_dir: Path, bound: float | None = None) -> None:
        self.output_dir, self.bound = Path(output_dir), bound if bound is not None else knobs.hang_s()
        self.started = time.time()
        self.cause: str | None = None
        self.stacks: Path | None = None
        self.ranks: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tuner-hang-watch", daemon=True)

    def __enter__(self) -> HangWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            now = time.time()
            self.ranks = read_ranks(self.output_dir, self.started)
            cause = culprit(self.ranks, now, self.bound) if self.ranks else None
            if cause:
                self.cause = cause
                self._stop_ranks()
                return

    def _mine(self) -> list[dict]:
        host = socket.gethostname()
        return [r for r in self.ranks.values() if r.get("host") == host and _alive(r.get("pid"))]

    def _stop_ranks(self) -> None:
        mine = self._mine()
        for r in mine:  # freeze this machine's ranks where they are
            _signal(r["pid"], signal.SIGSTOP)
        for r in mine:  # then each, in turn, writes its stacks and stops again
            dump_stacks(r["pid"], self.output_dir / RANKS_DIR / f"rank-{r['rank']}.stack")
        for r in mine:
            _signal(r["pid"], signal.SIGKILL)
        folder = self.output_dir / "stacks"
        try:
            folder.mkdir(exist_ok=True)
            for r in self.ranks.values():
                src = self.output_dir / RANKS_DIR / f"rank-{r['rank']}.stack"
                if src.is_file() and src.stat().st_size:
                    shutil.copyfile(src, folder / f"rank-{r['rank']}.txt")
            self.stacks = folder
        except OSError:
            self.stacks = None


def dump_stacks(pid: int, stack: Path) -> None:
    """Have the stopped process `pid` write its Python stacks (`rank_guard`'s faulthandler on
    SIGUSR1) into `stack`, and stop it again.

    SIGUSR1 goes to its main thread (`_to_main_thread`): a signal sent to a stopped process
    waits for whichever of its threads runs first after SIGCONT, and while that thread dumped,
    the main one ran on past the frame it was stopped in (a self-stopped rank's saved stack
    showed the step after it; measured 6 of 10 dumps with busy threads beside it).
    Sent to the main thread, the dump runs there before it returns to Python."""
    _to_main_thread(pid, signal.SIGUSR1)
    _signal(pid, signal.SIGCONT)
    _wait_written(stack)
    _signal(pid, signal.SIGSTOP)


def _to_main_thread(pid: int, sig: int) -> None:
    """`sig` to the main thread of `pid` (Linux: its thread id is the pid; glibc's tgkill), else
    to the process."""
    import ctypes

    try:
        tgkill = ctypes.CDLL(None, use_errno=True).tgkill
    except (OSError, AttributeError):
        tgkill = None
    if tgkill is None or tgkill(pid, pid, sig) != 0:
        _signal(pid, sig)


def _wait_written(stack: Path, limit_s: float = 8.0, still_s: float = 1.0) -> None:
    """Until the rank's dump is whole. faulthandler writes the threads newest first, so a whole
    dump ends with the main thread's outermost frame (runpy's ``_run_module_as_main``, or a
    ``<module>`` frame; ``...`` where the stack was deeper than faulthandler prints). Without that
    ending: until it has stopped growing for ``still_s`` (a rank starved of CPU on a loaded
    machine pauses mid-dump: a 0.3 s pause once cut a dump after its first threads)."""
    deadline, size, since = time.monotonic() + limit_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        now = _size(stack)
        if now != size:
            size, since = now, time.monotonic()
        elif size and (_whole(stack) or time.monotonic() - since >= still_s):
            return
        time.sleep(0.02)


def _whole(stack: Path) -> bool:
    try:
        with stack.open("rb") as f:
            f.seek(max(0, _size(stack) - 512))
            lines = f.read().rstrip().splitlines()
    except OSError:
        return False
    last = lines[-1].strip() if lines else b""
    return b"_run_module_as_main" in last or b"in <module>" in last or last == b"..."


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (OSError, TypeError, ValueError):
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def last_doing(output_dir: Path, since: float, rank: int) -> dict | None:
    """What `rank` last reported (for the message when it died)."""
    return read_ranks(output_dir, since).get(rank)
