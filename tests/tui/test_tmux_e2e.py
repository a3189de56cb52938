"""End to end in a real pseudo-terminal: tmux runs `tuner`, keys are sent with send-keys,
the screen is read with capture-pane, and the saved file is compiled.

tmux comes from Debian's packages; the test installs it when missing (apt-get) and skips,
saying why, only when that is impossible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tuner.compiler import compile_file

pytestmark = pytest.mark.tui


def _ensure_tmux() -> str:
    found = shutil.which("tmux")
    if found:
        return found
    if not shutil.which("apt-get") or os.geteuid() != 0:
        pytest.skip("tmux is not installed and cannot be installed here (needs apt-get as root)")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "tmux"]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode != 0 and cmd[1] == "install":
            pytest.skip(f"tmux is not installed and apt-get could not install it: {done.stderr.strip()[-300:]}")
    found = shutil.which("tmux")
    if not found:
        pytest.skip("tmux is not installed and apt-get did not provide it")
    return found


class Tmux:
    """One private tmux server (its own socket), so nothing else's sessions are touched."""

    def __init__(self, tmux: str, socket: str) -> None:
        self.base = [tmux, "-L", socket]

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=30).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "wiz")

    def keys(self, *keys: str) -> None:
        """One key at a time, as typed: a focus change must land before the next key."""
        for key in keys:
            self("send-keys", "-t", "wiz", key)
            time.sleep(0.4)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} did not appear; the screen was:\n{screen}")


def test_tuner_in_tmux_makes_choices_and_saves(_wizard_env):
    tmux = Tmux(_ensure_tmux(), f"tuner-test-{os.getpid()}")
    tuner = Path(sys.executable).parent / "tuner"
    command = f"{tuner if tuner.exists() else sys.executable + ' -m tuner'}; echo WIZARD-EXIT=$?; sleep 60"
    env = ["-e", "TUNER_PLATFORM=cpu", "-e", f"HOME={os.environ['HOME']}"]
    tmux("new-session", "-d", "-s", "wiz", "-x", "80", "-y", "24", "-c", str(_wizard_env), *env, command)
    try:
        tmux.wait_for("1. Model")
        tmux.keys("F2")
        tmux.wait_for("2. Hardware")
        tmux.keys("Tab")  # platform -> number of processes; its full help shows once it has focus
        tmux.wait_for("machines (GPUs, or CPU")
        tmux.keys("2")  # the text is selected on focus: typing replaces it
        tmux.wait_for("Num processes           2")
        tmux.keys("F3")
        tmux.wait_for("3. Sharding")
        tmux.keys("Enter")  # open the strategy list (FSDP2 highlighted)
        tmux.wait_for("DeepSpeed ZeRO")
        tmux.keys("Up", "Enter")  # DDP
        tmux.wait_for("ddp ·")
        tmux.keys("F5")
        tmux.wait_for("5. Precision and batch")
        tmux.keys("Tab")  # mixed precision -> micro batch size
        tmux.wait_for("forward pass.")
        tmux.keys("4")
        tmux.wait_for("Micro batch size        4")
        tmux.wait_for("Global batch: 8")
        tmux.keys("C-s")
        tmux.wait_for("saved settings.toml")
        tmux.keys("C-q")
        screen = tmux.wait_for("WIZARD-EXIT=0")
        assert "tuner wizard" not in screen  # the terminal is back to the shell's screen
        # Ctrl+C quits at once and restores the terminal too.
        tmux("new-window", "-t", "wiz", "-c", str(_wizard_env), *env, command.replace("WIZARD-EXIT", "AFTER-CTRL-C"))
        tmux.wait_for("1. Model")
        tmux.keys("C-c")
        screen = tmux.wait_for("AFTER-CTRL-C=0")
        assert "tuner wizard" not in screen
    finally:
        tmux("kill-server")
    result = compile_file(_wizard_env / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.items]
    assert result.plan.strategy == "ddp"
    assert yaml.safe_load(result.accelerate_yaml)["num_processes"] == 2
    assert result.settings.training.micro_batch_size == 4
