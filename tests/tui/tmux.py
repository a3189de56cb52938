"""The real-terminal harness: `tuner` in a private tmux server, keys sent with send-keys
(one at a time, or a whole burst in one call), the screen read with capture-pane.

The status line names what has focus (a settings key, "strategy", an "Advanced" title), so
a test walks to a field with Tab alone, as a person reading the screen would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.debian import require_package
from tests.tiers import require_mark


def ensure_tmux() -> str:
    require_package("tmux", lambda: shutil.which("tmux") is not None, "the terminal test drives tmux")
    return shutil.which("tmux") or "tmux"


class Tmux:
    """One private tmux server (its own socket), so nothing else's sessions are touched."""

    def __init__(self, tmux: str, socket: str, target: str = "wiz") -> None:
        require_mark("terminal", "drives a terminal (tmux)")
        self.base = [tmux, "-L", socket]
        self.target = target
        self._next_key_at = 0.0  # keys(): the earliest moment the next key may go

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=30).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", self.target)

    def _send(self, *args: str) -> None:
        """send-keys, no sooner than the pace of the last typed key allows (a read of the
        screen in between needs no pause: only the next key must not overtake a focus change)."""
        wait = self._next_key_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self("send-keys", "-t", self.target, *args)

    def keys(self, *keys: str, pace: float = 0.4) -> None:
        """One key at a time, as typed: a focus change must land before the next key (each key
        is followed by `pace` seconds before any other key is sent, by this call or the next)."""
        for key in keys:
            self._send(key)
            self._next_key_at = time.monotonic() + pace

    def burst(self, *keys: str) -> None:
        """Every key in one send-keys call: no pause at all between them."""
        self._send(*keys)

    def text(self, text: str) -> None:
        """Literal text in one call (what a terminal sends for an unbracketed paste)."""
        self._send("-l", text)

    def display(self, fmt: str) -> str:
        return self("display-message", "-p", "-t", self.target, fmt).strip()

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} did not appear; the screen was:\n{screen}")

    def status(self) -> str:
        """The wizard's status line ("<strategy> · N error(s) · M warning(s) · <focus>")."""
        lines = [line for line in self.screen().splitlines() if " error(s) · " in line]
        return lines[-1].strip() if lines else ""

    def where(self) -> str:
        parts = self.status().split(" · ")
        return parts[3].strip() if len(parts) > 3 else ""

    def focus(self, key: str, max_tabs: int = 150) -> None:
        """Tab until `key` has focus, opening each closed "Advanced" part on the way (Enter)."""
        seen: list[str] = []
        for _ in range(max_tabs):
            where = self.where()
            seen.append(where)
            if where == key:
                return
            if where.startswith("Advanced") and where.endswith("(Enter opens)"):
                self.burst("Enter")
                self.wait_for("▼ Advanced", timeout=30)  # a person sees it open before the next key
            self.burst("Tab")
            self._changed_from(where)  # never a second Tab before the first one shows
        raise AssertionError(f"Tab never reached {key} (went {' > '.join(seen[:40])}); the screen was:\n"
                             f"{self.screen()}")

    def wait_until_focus(self, key: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.where() != key:
            if time.monotonic() > deadline:
                raise AssertionError(f"{key} never got focus:\n{self.screen()}")
            time.sleep(0.05)

    def _changed_from(self, where: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.where() == where:
            if time.monotonic() > deadline:
                raise AssertionError(f"Tab did not move the focus from {where!r}:\n{self.screen()}")
            time.sleep(0.05)

    def kill(self) -> None:
        self("kill-server")

    def wizard_pid(self) -> int:
        """The wizard's process: the pane's shell's child."""
        shell = self.display("#{pane_pid}")
        for _ in range(100):
            out = subprocess.run(["pgrep", "-P", shell], capture_output=True, text=True).stdout.split()
            if out:
                return int(out[0])
            time.sleep(0.05)
        raise AssertionError("the wizard's process was not found")


def running(pid: int) -> bool:
    """True while `pid` exists and has not exited (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def seconds_to_exit(pid: int, limit: float) -> float | None:
    """How long `pid` took to exit, polled every 10 ms; None if still running after `limit` s."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if not running(pid):
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def tuner_command(cwd: Path, args: str = "", tag: str = "WIZARD-EXIT") -> str:
    """The wizard, then its exit status printed, then a pause so the pane can be read."""
    return f"env -u COLUMNS -u LINES {sys.executable} -m tuner {args}; echo {tag}=$?; sleep 120"


def start(tmux: Tmux, cwd: Path, command: str, size: tuple[int, int] = (80, 24)) -> None:
    env = ["-e", "TUNER_PLATFORM=cpu", "-e", f"HOME={os.environ['HOME']}"]
    # pytest's environment may carry COLUMNS/LINES, which would pin the app's idea of the size.
    if not command.startswith("env -u"):
        command = f"env -u COLUMNS -u LINES {command}"
    tmux("new-session", "-d", "-s", tmux.target, "-x", str(size[0]), "-y", str(size[1]), "-c", str(cwd), *env, command)
    tmux("set-option", "-t", tmux.target, "window-size", "manual")  # resize-window sets the size, not a client


def settle_size(tmux: Tmux, w: int, h: int) -> None:
    """Resize until tmux reports the size (rapid resize-window calls can be coalesced)."""
    for _ in range(20):
        tmux("resize-window", "-t", tmux.target, "-x", str(w), "-y", str(h))
        time.sleep(0.3)
        if tmux.display("#{window_width}x#{window_height}") == f"{w}x{h}":
            return
    raise AssertionError(f"tmux did not resize to {w}x{h}")
