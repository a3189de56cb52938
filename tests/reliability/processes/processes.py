"""The processes of a test's run, found by the folder their command lines name (the run's
launchers and ranks): what is left after the run (orphans) and when each rank exited."""

from __future__ import annotations

import os
import time
from pathlib import Path


def matching(marker: str) -> dict[int, str]:
    """pid -> command line of every process (but this one) whose command line names `marker`."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and int(pid) != os.getpid():
            found[int(pid)] = cmd
    return found


def leftovers(marker: str) -> list[str]:
    """Processes whose command line names `marker` (the run's folder): its launchers and ranks."""
    return [f"{pid}: {cmd[:200]}" for pid, cmd in matching(marker).items()]


def rank_of(pid: int) -> str | None:
    """A rank's RANK (from its environment), or None for another process."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return item[5:].decode()
    return None


class RankClock:
    """Polled while a run goes on: the last moment each rank (`tuner.runtime.worker` process)
    was seen alive, by its RANK (and pid: the ranks of two runs in one folder stay apart)."""

    def __init__(self, marker: str) -> None:
        self.marker, self.last_seen, self.rank = marker, {}, {}

    def poll(self) -> None:
        now = time.time()
        for pid, cmd in matching(self.marker).items():
            if "tuner.runtime.worker" not in cmd:
                continue
            if self.rank.get(pid) is None:
                self.rank[pid] = rank_of(pid)
            if self.rank[pid] is not None:  # read before its environment was (or after it is gone)
                self.last_seen[pid] = now

    def exits(self, since: float) -> dict[str, float]:
        """'rank R' -> seconds from `since` to when the rank was last seen (the latest, per rank)."""
        out: dict[str, float] = {}
        for pid, seen in self.last_seen.items():
            name = f"rank {self.rank.get(pid)}"
            out[name] = max(out.get(name, 0.0), round(seen - since, 1))
        return dict(sorted(out.items()))
