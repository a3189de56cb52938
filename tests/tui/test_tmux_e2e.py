"""End to end in a real pseudo-terminal: tmux runs `tuner`, keys are sent with send-keys,
the screen is read with capture-pane, and the saved file is compiled.

tmux comes from Debian's packages (scripts/test.sh installs it up front as root); where it is
missing the test skips, naming the command that installs it. The harness is `tests/tui/tmux.py`;
issue 25's keyboard-only checks are in `test_tmux_keyboard.py`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import yaml
from tuner.compiler.compile import compile_file

from .tmux import Tmux
from .tmux import ensure_tmux as _ensure_tmux
from .tmux import settle_size as _settle_size
from .tmux import start as _start

pytestmark = pytest.mark.tui


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
        assert "tuner wizard ·" not in screen  # the terminal is back to the shell's screen
        # Ctrl+C quits at once (nothing unsaved: no draft), exit 130, and restores the terminal too.
        tmux("new-window", "-t", "wiz", "-c", str(_wizard_env), *env, command.replace("WIZARD-EXIT", "AFTER-CTRL-C"))
        tmux.wait_for("1. Model")
        tmux.keys("C-c")
        screen = tmux.wait_for("AFTER-CTRL-C=130")
        assert "tuner wizard ·" not in screen
    finally:
        tmux("kill-server")
    result = compile_file(_wizard_env / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.items]
    assert result.plan.strategy == "ddp"
    assert yaml.safe_load(result.accelerate_yaml)["num_processes"] == 2
    assert result.settings.training.micro_batch_size == 4


#: A test-only launcher (never shipped): the real `tuner` CLI with one deliberate bug
#: patched in, so that opening the Review step raises.
CRASHING_TUNER = """
import sys
from tuner.tui.review import ReviewPane
def boom(self):
    raise RuntimeError("deliberate test crash")
ReviewPane.sync = boom
from tuner.commands.cli import main
sys.exit(main(["wizard"]))
"""


def test_resizing_repeatedly_down_to_20x6_never_crashes(_wizard_env):
    tmux = Tmux(_ensure_tmux(), f"tuner-resize-{os.getpid()}")
    _start(tmux, _wizard_env, f"{sys.executable} -m tuner; echo WIZARD-EXIT=$?; sleep 60")
    try:
        tmux.wait_for("1. Model")
        tmux.keys("F6")
        tmux.wait_for("6. Review")
        for _ in range(3):
            for w, h in [(30, 8), (20, 6), (45, 10), (21, 7), (120, 40), (20, 6), (80, 24)]:
                tmux("resize-window", "-t", "wiz", "-x", str(w), "-y", str(h))
                time.sleep(0.15)
            _settle_size(tmux, 80, 24)
            screen = tmux.wait_for("F6 Review")  # the form is drawn again, at full size
            assert "WIZARD-EXIT" not in screen and "Traceback" not in screen
        _settle_size(tmux, 30, 8)
        tmux.wait_for("too small")  # below 60x16 the screen says so instead of drawing the form
        _settle_size(tmux, 80, 24)
        tmux.wait_for("F6 Review")
        tmux.keys("C-q", "C-q")  # a new, unsaved file: the second ctrl+q quits
        tmux.wait_for("WIZARD-EXIT=0")
    finally:
        tmux("kill-server")


def test_a_crash_exits_internal_and_leaves_a_recovery_file(_wizard_env):
    tmux = Tmux(_ensure_tmux(), f"tuner-crash-{os.getpid()}")
    script = _wizard_env / "crashing_tuner.py"
    script.write_text(CRASHING_TUNER)
    _start(tmux, _wizard_env, f"{sys.executable} {script}; echo WIZARD-EXIT=$?; sleep 60")
    try:
        tmux.wait_for("1. Model")
        tmux.keys("F5")
        tmux.wait_for("5. Precision and batch")
        tmux.keys("Tab", "Tab", "Tab", "Tab", "7", "7")  # max steps = 77, unsaved
        tmux.wait_for("77")
        tmux.keys("F6")  # the deliberate crash
        screen = tmux.wait_for("WIZARD-EXIT=")
        assert "WIZARD-EXIT=70" in screen, screen
    finally:
        tmux("kill-server")
    recovered = _wizard_env / "settings.recovered.toml"
    assert recovered.exists() and "max_steps = 77" in recovered.read_text()
    assert not (_wizard_env / "settings.toml").exists()


def test_keys_sent_in_one_burst_land_in_their_fields(_wizard_env):
    """The issue's reproduction in a real terminal: `1000` Tab `50` on the batch step, all
    in one send-keys call (no pause between keys), then F4 Tab `15` the same way."""
    tmux = Tmux(_ensure_tmux(), f"tuner-burst-{os.getpid()}")
    _start(tmux, _wizard_env, f"{sys.executable} -m tuner; echo WIZARD-EXIT=$?; sleep 60")
    try:
        tmux.wait_for("1. Model")
        tmux.keys("F5")
        tmux.wait_for("5. Precision and batch")
        tmux.keys("Tab", "Tab", "Tab", "Tab")  # mixed precision -> ... -> max steps
        tmux.wait_for("Optimizer steps to train")
        tmux("send-keys", "-t", "wiz", "1", "0", "0", "0", "Tab", "5", "0", "F4", "Tab", "1", "5")
        tmux.wait_for("4. Checkpoints")
        time.sleep(1.0)
        tmux.keys("C-s")
        tmux.wait_for("saved settings.toml")
        tmux.keys("C-q")
        tmux.wait_for("WIZARD-EXIT=0")
    finally:
        tmux("kill-server")
    result = compile_file(_wizard_env / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.items]
    t = result.settings.training
    assert (t.max_steps, t.warmup_steps, result.settings.checkpoint.every_steps) == (1000, 50, 15)
