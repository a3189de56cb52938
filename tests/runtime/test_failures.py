"""Failures end the run cleanly: a dead rank, a run killed mid-save.

(A refused resume: tests/runtime/test_runtime_units.py, in process; the
FSDP2 full-state-dict resume that was here: test_portable_resume_matrix.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime_helpers import assert_ok, merged, to_toml, tuner_env, tuner_run, write_data

from tests.runtime.trace_callbacks import SLOW_SAVE

pytestmark = pytest.mark.slow

#: Bound from killing a rank to `tuner run` exiting (the launcher's DEATH_BOUND_S).
DEATH_BOUND_S = 31


def _workers(root_pid: int) -> dict[int, int]:
    """rank -> pid of the worker processes under `root_pid`."""
    import psutil

    out = {}
    for child in psutil.Process(root_pid).children(recursive=True):
        try:
            if "tuner.runtime.worker" in " ".join(child.cmdline()):
                out[int(child.environ().get("RANK", -1))] = child.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def _start(d: Path, settings: dict, *args: str, env: dict | None = None) -> subprocess.Popen:
    d.mkdir(parents=True, exist_ok=True)
    write_data(d)
    (d / "settings.toml").write_text(to_toml(settings))
    return subprocess.Popen([sys.executable, "-m", "tuner", "run", str(d / "settings.toml"), *args], cwd=d,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=tuner_env(env),
                            start_new_session=True)


def _wait_for(cond, timeout: float, proc: subprocess.Popen) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        if proc.poll() is not None:
            pytest.fail(f"run ended early: {proc.stdout.read()[-4000:]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail("timed out waiting for the run")


def test_killing_one_rank_ends_the_run(runtime_tmp):
    d = runtime_tmp / "kill-rank"
    proc = _start(d, merged(training={"max_steps": 100000, "validation_every": 0}, checkpoint={"every_steps": 0},
                            fsdp={"enabled": True, "version": 2}))
    metrics = d / "out" / "metrics.jsonl"
    _wait_for(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 3, 120, proc)
    workers = _workers(proc.pid)
    assert set(workers) == {0, 1}
    os.kill(workers[1], signal.SIGKILL)
    t0 = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=DEATH_BOUND_S + 30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert "rank 1 failed" in out, out[-3000:]
    assert elapsed < DEATH_BOUND_S, f"took {elapsed:.1f}s to stop"


def test_kill_during_save_keeps_previous_checkpoint(runtime_tmp):
    d = runtime_tmp / "kill-save"
    settings = merged(training={"max_steps": 10, "validation_every": 0}, checkpoint={"every_steps": 3},
                      fsdp={"enabled": True, "version": 2})
    proc = _start(d, settings, "--callback", SLOW_SAVE, env={"TUNER_TEST_SAVE_DELAY_S": "5"})
    ck = d / "out" / "checkpoints"
    # step-3 completes (5 s pause, then published); kill while step-6 is being written.
    _wait_for(lambda: (ck / ".tmp-step-6").is_dir(), 180, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert (ck / "latest").read_text().strip() == "step-3"
    assert not (ck / "step-6").exists()
    resumed = tuner_run(d, settings, "--resume", "latest", trace=False)
    assert_ok(resumed)
    assert "resumed from" in resumed.output and "step-3 at step 3" in resumed.output, resumed.output[-3000:]
    assert (ck / "latest").read_text().strip() == "step-9"
    assert not [p for p in ck.iterdir() if p.name.startswith(".tmp")], "partial save cleaned up"
