"""Failures end the run cleanly: a run killed mid-save, then resumed and stopped by SIGTERM.

(A dead rank ending the run within the launcher's bound: the `sigkill` fault of
tests/reliability/processes/test_rank_faults_that_end.py, an FSDP2 run.)
(A refused resume: tests/runtime/test_runtime_units.py, in process; the
FSDP2 full-state-dict resume that was here: test_portable_resume_matrix.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from runtime_helpers import merged, to_toml, write_data

from tests import harness
from tests.runtime.trace_callbacks import SLOW_SAVE

pytestmark = pytest.mark.slow


def _start(d: Path, settings: dict, *args: str, env: dict | None = None) -> subprocess.Popen:
    d.mkdir(parents=True, exist_ok=True)
    write_data(d)
    (d / "settings.toml").write_text(to_toml(settings))
    return harness.start("run", str(d / "settings.toml"), *args, cwd=d, env=env, stderr=subprocess.STDOUT,
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


def test_a_run_killed_mid_save_resumes_from_the_last_checkpoint_and_a_sigterm_stops_it_quietly(runtime_tmp):
    """A run killed (SIGKILL to every process) while it writes checkpoint step-6 keeps step-3 as
    `latest`, resumes from it (the partial save replaced), and that resumed run, sent SIGTERM (a
    scheduler's or `kill`'s, to the launcher only) once it has published a checkpoint, stops
    quietly: one "interrupted" line naming the last complete checkpoint, exit 143, no traceback,
    no rank left. (Ctrl-C to the whole group and SIGTERM to `tuner launch`:
    tests/launch/test_signals.py.)"""
    import psutil

    d = runtime_tmp / "kill-save"
    settings = merged(training={"max_steps": 400, "validation_every": 0, "log_every": 1},
                      checkpoint={"every_steps": 3}, fsdp={"enabled": True, "version": 2})
    slow = {"TUNER_TEST_SAVE_DELAY_S": "5"}
    proc = _start(d, settings, "--callback", SLOW_SAVE, env=slow)
    ck = d / "out" / "checkpoints"
    # step-3 completes (5 s pause, then published); kill while step-6 is being written.
    _wait_for(lambda: (ck / ".tmp-step-6").is_dir(), 600, proc)  # progress, not a bound: a loaded machine is slow
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert (ck / "latest").read_text().strip() == "step-3"
    assert not (ck / "step-6").exists()
    resumed = harness.start("run", str(d / "settings.toml"), "--resume", "latest", "--callback", SLOW_SAVE, cwd=d,
                            env=slow, start_new_session=True)
    try:
        _wait_for(lambda: (ck / "latest").read_text().strip() != "step-3", 600, resumed)
        assert not [p for p in ck.iterdir() if p.name.startswith(".tmp")], "partial save cleaned up"
        ranks = [c.pid for c in psutil.Process(resumed.pid).children(recursive=True)]
        resumed.send_signal(signal.SIGTERM)
        out, err = resumed.communicate(timeout=60)
    finally:
        if resumed.poll() is None:
            os.killpg(resumed.pid, signal.SIGKILL)
    assert "resumed from" in out + err and "step-3 at step 3" in out + err, (out + err)[-3000:]
    assert resumed.returncode == 128 + signal.SIGTERM, (resumed.returncode, err[-4000:])
    assert "Traceback" not in err and "Traceback" not in out, err[-4000:]
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1 and "interrupted (SIGTERM)" in lines[0], err[-3000:]
    named = Path(lines[0].split("last complete checkpoint: ", 1)[1].split(" ", 1)[0])
    assert named.parent.resolve() == ck.resolve() and named.name != "step-3", lines[0]
    assert (named / "tuner_checkpoint.json").is_file() and f"--resume {named}" in lines[0], lines[0]
    time.sleep(1)
    assert not [p for p in ranks if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
