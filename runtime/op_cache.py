"""DeepSpeed's op cache: what is built, what is being built, and locks no build holds.

DeepSpeed JIT-builds its C++ ops (CPU Adam, the shared-memory collectives, async I/O) on
first use, through ``torch.utils.cpp_extension.load``: minutes, silently. torch serialises a
build with a `FileBaton` (torch/utils/file_baton.py): the builder creates
``TORCH_EXTENSIONS_DIR/NAME/lock`` with ``O_CREAT | O_EXCL`` and keeps it open for the
whole build; everyone else polls ``os.path.exists(lock)`` and waits, forever, with no
message. A build that was killed leaves the file behind, and every later run on the machine
waits at 0% CPU.

A live build holds the lock file open, so a lock that no process on this machine has open
(``/proc/PID/fd``), and that is still there, unchanged, half a second later (a finishing
build closes the file just before it removes it), is stale: tuner names it with the fix
(remove it) before any rank starts (`refuse_stale`), and on every rank before DeepSpeed
would wait on it (`announce_builds`). tuner never removes it itself: on a file system
shared between machines, a build on another machine holds it invisibly.

`announce_builds` also says, on each machine's first rank, which op is being built and how
long it took. `summary` is `tuner doctor`'s line.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .artefacts import RunError

LOCK = "lock"
#: How long a lock without a holder must stay unchanged to count as stale.
SETTLE_S = 0.5


def extensions_roots() -> list[Path]:
    """Where torch builds extensions: ``TORCH_EXTENSIONS_DIR``, else torch's default
    (``~/.cache/torch_extensions/pyXY_ACCEL``, torch.utils.cpp_extension's
    `_get_build_directory`: every ACCEL of this Python; found without importing torch)."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return [Path(env)]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torch_extensions"
    tag = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_"
    try:
        return sorted(p for p in cache.iterdir() if p.name.startswith(tag) and p.is_dir())
    except OSError:
        return []


def extensions_root() -> Path:
    """The folder a build on this machine uses (torch's choice; imports torch when
    ``TORCH_EXTENSIONS_DIR`` is unset)."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return Path(env)
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory("x", verbose=False)).parent


@dataclass
class OpState:
    name: str
    built: bool
    lock: Path | None = None
    holders: list[int] = field(default_factory=list)
    age_s: float = 0.0

    @property
    def stale(self) -> bool:
        return self.lock is not None and not self.holders


def lock_holders(lock: Path) -> list[int]:
    """The processes on this machine that have `lock` open (a torch FileBaton's builder)."""
    try:
        st = lock.stat()
    except OSError:
        return []
    found = []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                fst = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino):
                found.append(int(pid))
                break
    return found


def op_state(folder: Path) -> OpState:
    lock = folder / LOCK
    built = any(p.suffix == ".so" for p in folder.glob(f"{folder.name}*.so"))
    try:
        st = lock.stat()
    except OSError:
        return OpState(folder.name, built)
    holders = lock_holders(lock)
    if not holders:  # closed by a build that is removing it now? look again once it settled
        time.sleep(SETTLE_S)
        try:
            again = lock.stat()
        except OSError:
            return OpState(folder.name, built)
        if (again.st_ino, again.st_mtime_ns) != (st.st_ino, st.st_mtime_ns):
            return op_state(folder)
        holders = lock_holders(lock)
    return OpState(folder.name, built, lock, holders, max(0.0, time.time() - st.st_mtime))


def cache_state(root: Path | None = None) -> list[OpState]:
    folders: list[Path] = []
    for r in [root] if root is not None else extensions_roots():
        try:
            folders += sorted(p for p in r.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            pass
    return [op_state(f) for f in folders]


def _age(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600} h {s % 3600 // 60} min" if s >= 3600 else f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def stale_message(state: OpState) -> str:
    return (f"DeepSpeed's build lock {state.lock} is held by no process on this machine (a build of the "
            f"{state.name} op was stopped {_age(state.age_s)} ago and left it); every DeepSpeed run here would "
            f"wait on it forever. If no build of {state.name} runs on another machine sharing this folder, "
            f"remove it (rm {state.lock}) and run again: the op is rebuilt (minutes)")


def refuse_stale(root: Path | None = None) -> None:
    """Before any rank starts: a stale build lock is refused, named with its fix; a build in
    progress is announced (the ranks will wait for it)."""
    states = cache_state(root)
    stale = [s for s in states if s.stale]
    if stale:
        raise RunError("; ".join(stale_message(s) for s in stale))
    for s in states:
        if s.lock is not None:
            print(f"DeepSpeed op {s.name} is being built by process {', '.join(map(str, s.holders))} (for "
                  f"{_age(s.age_s)}); this run's ranks wait for it", file=sys.stderr, flush=True)


def summary(root: Path | None = None) -> str:
    """One line for `tuner doctor`: the cache's folder, what is built, being built, stale."""
    root = root if root is not None else extensions_root()
    states = cache_state(root)
    built = [s.name for s in states if s.built and s.lock is None]
    building = [f"{s.name} (process {', '.join(map(str, s.holders))}, {_age(s.age_s)})" for s in states
                if s.lock is not None and not s.stale]
    stale = [f"{s.name}: stale lock {s.lock} (rm it)" for s in states if s.stale]
    parts = [f"built: {', '.join(built) or 'nothing yet (first use builds, minutes each)'}"]
    if building:
        parts.append(f"building now: {', '.join(building)}")
    if stale:
        parts.append(f"STALE: {'; '.join(stale)}")
    return f"DeepSpeed op cache {root}: {'; '.join(parts)}"


def announce_builds() -> None:
    """On a rank: wrap DeepSpeed's `OpBuilder.jit_load` so that a build says what it builds
    and how long it took (local rank 0), and a stale lock is refused instead of waited on."""
    from deepspeed.ops.op_builder.builder import OpBuilder

    original = OpBuilder.jit_load
    if getattr(original, "_tuner_announced", False):
        return
    rank, first = os.environ.get("RANK", "0"), os.environ.get("LOCAL_RANK", "0") == "0"

    def jit_load(self, verbose=True):
        folder = extensions_root() / self.name
        state = op_state(folder)
        if state.stale:
            raise RunError(stale_message(state))
        building = first and (state.lock is not None or not state.built)
        if building:
            what = (f"waits for DeepSpeed's build of the {self.name} op (process "
                    f"{', '.join(map(str, state.holders))})" if state.lock is not None else
                    f"builds DeepSpeed's {self.name} op in {folder} (first use here: minutes, silent)")
            print(f"rank {rank}: {what}", file=sys.stderr, flush=True)
        start = time.monotonic()
        module = original(self, verbose=False)
        if building:
            print(f"rank {rank}: DeepSpeed's {self.name} op is ready ({time.monotonic() - start:.1f} s)",
                  file=sys.stderr, flush=True)
        return module

    jit_load._tuner_announced = True  # type: ignore[attr-defined]
    OpBuilder.jit_load = jit_load
