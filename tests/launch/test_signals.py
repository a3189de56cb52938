"""Ctrl-C and SIGTERM during a real `tuner run`: one "interrupted" line naming the last
complete checkpoint, exit 130/143 (128 + the signal), no traceback from any rank, and no
rank left behind. The same launcher serves `tuner launch` (runtime/launch.py). (SIGTERM to
`tuner run`'s launcher alone: tests/runtime/test_failures.py's killed-mid-save run, once resumed.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch_helpers import CPU2, PLAIN, compile_build, env, write_settings

pytestmark = pytest.mark.slow

RUN = {"model": {"path": "builtin:micro-llama"}, "data": {"seq_len": 32},
       "training": {"micro_batch_size": 2, "max_steps": 400, "log_every": 1},
       "checkpoint": {"every_steps": 2, "keep_last": 2, "export": False}, "output": {"dir": "out"}}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_to_the_run_stops_it_quietly(tmp_path):
    """What a terminal's Ctrl-C does: SIGINT reaches every process of the run."""
    import psutil

    settings = write_settings(tmp_path, CPU2, RUN)
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(settings)], cwd=tmp_path, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    latest = tmp_path / "out" / "checkpoints" / "latest"
    deadline = time.monotonic() + 300
    while not latest.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert latest.is_file(), proc.communicate(timeout=60) if proc.poll() is not None else "no checkpoint in 300 s"
    ranks = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    sig = signal.SIGINT
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (proc.returncode, err[-4000:])
    assert "Traceback" not in err and "Traceback" not in out, err[-4000:]
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1, err[-3000:]
    assert f"interrupted ({signal.Signals(sig).name})" in lines[0]
    named = Path(lines[0].split("last complete checkpoint: ", 1)[1].split(" ", 1)[0])
    assert named.parent.resolve() == (tmp_path / "out" / "checkpoints").resolve()
    assert (named / "tuner_checkpoint.json").is_file()
    assert f"--resume {named}" in lines[0]
    time.sleep(1)
    assert not [p for p in ranks if _alive(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_sigterm_to_tuner_launch_stops_a_users_script_quietly(tmp_path):
    """The same launcher under `tuner launch`: the person's script is stopped on every rank
    without a traceback, exit 143, no checkpoint claimed (tuner does not know the script's)."""
    build = compile_build(tmp_path, CPU2, {"fsdp": {"enabled": True, "auto_wrap_policy": "none"}})
    started = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "launch", str(build), str(PLAIN), "--out",
                             str(tmp_path / "r"), "--steps", "100000", "--started", str(started)], cwd=tmp_path,
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 200
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.3)
    assert started.exists(), proc.communicate(timeout=60) if proc.poll() is not None else "no step in 200 s"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err and "Traceback" not in out, err[-4000:]
    assert [ln for ln in err.splitlines() if "interrupted" in ln] == ["tuner launch: interrupted (SIGTERM)"]
