"""Issue 37, items 1 and 2, in a real terminal (tmux): the wizard leaves as promised at the
edges an SSH session lives with.

1. The terminal closes right after an edit (`tmux kill-session`, or SIGHUP + SIGCONT, what
   the kernel sends on a hangup): the process ends within 2 s every time, the draft written
   with the edit. A lone SIGCONT (Textual's driver restarted application mode on it, leaving
   an input thread that kept the process alive forever: tui/driver.py) changes nothing.
2. SIGTERM, SIGINT or SIGHUP at random moments around a step switch: 143 / 130 / 129 every
   time, never 70, no recovery file, no "internal error" line.

Each repetition starts a fresh wizard (about a second idle, a few on a loaded machine) and
waits for the screen to show each state, never for a fixed time, so load makes it slower,
not flaky; the 2 s bound is measured from the hangup to the process's exit.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from .tmux import Tmux, ensure_tmux, running, seconds_to_exit, start, tuner_command

pytestmark = pytest.mark.tui

CLOSES = 20
SIGNALS = 30
EXIT_WITHIN_S = 2.0


@pytest.fixture
def tmux(request):
    pane = Tmux(ensure_tmux(), f"tuner-leave-{os.getpid()}-{request.node.name[:16]}")
    # A session that outlives every wizard's: killing the last session would stop the server,
    # and the next new-session could race its shutdown.
    pane("new-session", "-d", "-s", "keep", "sleep 3600")
    yield pane
    pane.kill()


def _open(tmux: Tmux, work: Path) -> int:
    """A fresh wizard on a new file in `work`, in a new session; its pid once it has drawn."""
    tmux("kill-session", "-t", tmux.target)
    for stale in work.iterdir():
        stale.unlink()
    start(tmux, work, tuner_command(work).replace("sleep 120", "sleep 30"))
    if tmux.display("#{session_name}") != tmux.target:  # not started (tmux busy): once more
        start(tmux, work, tuner_command(work).replace("sleep 120", "sleep 30"))
    tmux.wait_for("1. Model", timeout=120)
    return tmux.wizard_pid()


def _edit(tmux: Tmux, value: str) -> None:
    """Tab to model.flavour and type `value`; return once the screen shows it."""
    tmux.burst("Tab")
    tmux.wait_until_focus("model.flavour")
    tmux.text(value)
    tmux.wait_for(f"Flavour                 {value}")


def test_closing_the_terminal_right_after_an_edit_ends_the_wizard(tmux, _wizard_env):
    slow: list[str] = []
    times: list[float] = []
    for run in range(CLOSES):
        pid = _open(tmux, _wizard_env)
        value = f"v{run}"
        _edit(tmux, value)
        how = "kill-session" if run % 2 == 0 else "SIGHUP+SIGCONT"
        if how == "kill-session":
            tmux("kill-session", "-t", tmux.target)
        else:
            os.kill(pid, signal.SIGHUP)
            os.kill(pid, signal.SIGCONT)
        took = seconds_to_exit(pid, limit=10)
        if took is None:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"run {run} ({how}): the wizard was still running 10 s after the terminal closed")
        times.append(took)
        if took > EXIT_WITHIN_S:
            slow.append(f"run {run} ({how}): {took:.2f} s")
        draft = _wizard_env / "settings.draft.toml"
        assert draft.exists(), f"run {run} ({how}): no draft"
        assert f'flavour = "{value}"' in draft.read_text(), f"run {run} ({how}): the edit is not in the draft"
    print(f"closed {CLOSES} times: exits in {min(times):.2f}-{max(times):.2f} s")
    assert not slow, f"exits slower than {EXIT_WITHIN_S} s: {slow}"


def test_a_lone_sigcont_leaves_the_wizard_working_and_quitting(tmux, _wizard_env):
    for run in range(3):
        pid = _open(tmux, _wizard_env)
        os.kill(pid, signal.SIGCONT)  # no suspension before it: nothing must restart
        _edit(tmux, f"c{run}")  # the keyboard still works (one input thread)
        tmux.burst("C-c")
        took = seconds_to_exit(pid, limit=10)
        if took is None:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"run {run}: still running 10 s after ctrl+c that followed a SIGCONT")
        assert "WIZARD-EXIT=130" in tmux.wait_for("WIZARD-EXIT="), tmux.screen()
        assert took <= EXIT_WITHIN_S, f"run {run}: {took:.2f} s"


def test_signals_around_a_step_switch_exit_with_the_signals_status(tmux, _wizard_env):
    rng = random.Random(37)
    expected = {"SIGTERM": 143, "SIGINT": 130, "SIGHUP": 129}
    names = list(expected)
    failures: list[str] = []
    for run in range(SIGNALS):
        name = names[run % 3]
        pid = _open(tmux, _wizard_env)
        step = rng.choice(["F2", "F3", "F4", "F5", "F6"])
        delay = rng.uniform(-0.01, 0.08)  # just before the switch, or 0-80 ms after it
        if delay < 0:
            os.kill(pid, getattr(signal, name))
            tmux.burst(step)
        else:
            tmux.burst(step)
            time.sleep(delay)  # the moment under test, not a wait for a state
            os.kill(pid, getattr(signal, name))
        screen = tmux.wait_for("WIZARD-EXIT=", timeout=60)
        status = screen.split("WIZARD-EXIT=", 1)[1].split()[0]
        files = sorted(p.name for p in _wizard_env.iterdir())
        what = f"run {run}: {name} {delay * 1000:+.0f} ms around {step}"
        if status != str(expected[name]):
            failures.append(f"{what}: exit {status}")
        if files != ["settings.draft.toml"]:
            failures.append(f"{what}: files {files}")
        if "internal error" in screen or "traceback" in screen:
            failures.append(f"{what}: said {screen.strip()[:300]!r}")
        assert not running(pid)
    assert not failures, "\n".join(failures)
