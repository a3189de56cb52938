"""The fast tier cannot hold a test that starts ranks or a terminal (tests/tiers.py): a rank
started by an unmarked test refuses to run in the fast tier and the test fails naming the fix;
in a full run the test is named at the end and its launches counted. The probes run in their
own pytest (`-p tests.tiers`, the suite's hooks) on a rank made by hand: a process with RANK and
LOCAL_RANK set, as torch's launchers start one."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.harness import REPO

PROBE = '''
import os, subprocess, sys
import pytest

def _rank():
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}
    return subprocess.run([sys.executable, "-m", "json.tool", "--help"], env=env, capture_output=True, text=True)

def test_unmarked_rank():
    p = _rank()
    assert p.returncode == 0, p.stderr

@pytest.mark.slow
def test_marked_rank():
    assert _rank().returncode == 0

def test_unmarked_terminal():
    from tests.tui.tmux import Tmux
    Tmux("tmux", "never-started")
'''


def _pytest(tmp_path, *args: str, fast: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNER_TEST_", "PYTEST_"))}
    env.update(PYTHONPATH=str(REPO), **({"TUNER_TEST_FAST": "1"} if fast else {}))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.tiers", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py"), *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_an_unmarked_test_that_starts_ranks_fails_in_the_fast_tier(tmp_path):
    p = _pytest(tmp_path, "-k", "rank", "-m", "not slow and not terminal", fast=True)
    out = p.stdout + p.stderr
    assert "1 failed, 2 deselected" in out, out
    assert "test_unmarked_rank starts ranks but runs in the fast tier" in out and "mark it `slow`" in out, out


def test_a_full_run_counts_launches_names_unmarked_tests_and_fails_an_unmarked_terminal(tmp_path):
    """One full run of the three probes: the ranks' launches counted, the unmarked rank test
    named (not the marked one), the unmarked terminal test failed naming its mark."""
    p = _pytest(tmp_path, fast=False)
    out = p.stdout + p.stderr
    assert "1 failed, 2 passed" in out, out
    assert "rank launches: 2 (2 rank processes) in 1 files" in out, out
    assert "1 tests started ranks without the `slow` mark" in out and "::test_unmarked_rank" in out, out
    assert "::test_marked_rank" not in out.split("without the `slow` mark")[1], out
    assert "drives a terminal (tmux) but is not marked `terminal`" in out, out
    assert "FAILED test_probe.py::test_unmarked_terminal" in out, out
