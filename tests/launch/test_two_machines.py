"""Two machines simulated on one host: 2 launchers x 1 gloo rank = a world of 2, meeting at
the compiled main address and port with torch's c10d rendezvous (machine rank from the
flag, and from $SLURM_NODEID as a scheduler sets it). Training's loss falls, a checkpoint
is written and resumed by a second 2-machine run, which checkpoints again; then killing one
machine's launcher ends the other, non-zero, within `LEAVE_BOUND_S`. Two launches in all:
the resumed run is the one that is killed."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from launch_helpers import env, write_settings

from tests import harness

pytestmark = pytest.mark.slow

#: From one machine's launcher dying to the other machine's launcher exiting (seconds).
#: Its ranks see the peers' sockets close (gloo) and fail; the launcher then stops its own
#: ranks (STOP_GRACE_S = 10 at most). Measured here: a few seconds.
LEAVE_BOUND_S = 60


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(d, max_steps: int):
    return write_settings(d, {
        "hardware": {"platform": "cpu", "num_processes": 2, "num_machines": 2,
                     "main_process_ip": "127.0.0.1", "main_process_port": _port()},
        "model": {"path": "builtin:micro-llama"}, "data": {"seq_len": 32},
        "training": {"micro_batch_size": 2, "max_steps": max_steps, "learning_rate": 1e-2, "log_every": 1},
        "checkpoint": {"every_steps": 2, "keep_last": 2, "export": False}, "output": {"dir": "out"},
    })


def _compile(settings) -> None:
    c = harness.tuner('compile', str(settings), '-q', timeout=120)
    assert c.returncode == 0, c.stderr


def _machines(d, *extra: str, how: str = "flag") -> list[subprocess.Popen]:
    procs = []
    for m in (0, 1):
        flag = ["--machine-rank", str(m)] if how == "flag" else []
        extra_env = {} if how == "flag" else {"SLURM_NODEID": str(m)}
        procs.append(subprocess.Popen([sys.executable, "-m", "tuner", "run", str(d / "build"), *flag, *extra],
                                      cwd=d, env=env(extra_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def _wait(procs, timeout: float) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        o, e = p.communicate(timeout=timeout)
        out.append((p.returncode, o + e))
    return out


def _losses(d) -> dict[int, float]:
    rows = [json.loads(x) for x in (d / "out" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r and "step" in r}


def _past_step_4(d) -> bool:
    """A complete checkpoint after step-4 (step-6 or later: with keep_last 2 an idle machine's run
    may have replaced step-6 by the time it is looked for)."""
    return any(p.name.removeprefix("step-").isdigit() and int(p.name.removeprefix("step-")) >= 6
               and (p / "tuner_checkpoint.json").is_file() for p in (d / "out" / "checkpoints").glob("step-*"))


def test_two_machines_train_checkpoint_resume_and_killing_one_ends_the_other(tmp_path):
    _compile(_settings(tmp_path, 4))
    results = _wait(_machines(tmp_path), 400)
    assert [rc for rc, _ in results] == [0, 0], "\n".join(t[-3000:] for _, t in results)
    manifest = json.loads((tmp_path / "out" / "checkpoints" / "step-4" / "tuner_checkpoint.json").read_text())
    assert manifest["world_size"] == 2
    first = _losses(tmp_path)
    assert sorted(first) == list(range(1, 5))
    assert sum(first[s] for s in (3, 4)) < sum(first[s] for s in (1, 2)), first

    # Resume on both machines, the machine rank now from Slurm's variable; no end in sight:
    # once it has trained on and checkpointed again, machine 1's launcher is killed.
    _compile(_settings(tmp_path, 100000))
    m0, m1 = _machines(tmp_path, "--resume", "latest", how="slurm")
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and m0.poll() is None and m1.poll() is None and not _past_step_4(tmp_path):
        time.sleep(0.5)
    if m0.poll() is not None or m1.poll() is not None:  # a launcher ended before the kill: say why
        for p in (m0, m1):
            if p.poll() is None:
                p.kill()
        raise AssertionError("a launcher ended early:\n" + "\n".join(
            f"machine {m}: exit {p.returncode}\n{''.join(p.communicate(timeout=60))[-3000:]}" for m, p in enumerate((m0, m1))))
    assert _past_step_4(tmp_path), "the resumed run wrote no checkpoint after step-4"
    m1.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    o0, e0 = m0.communicate(timeout=LEAVE_BOUND_S + 60)
    took = time.monotonic() - t0
    o1, e1 = m1.communicate(timeout=30)
    assert "step-4" in o0 + e0 + o1 + e1, "the resume did not say which checkpoint it used"
    after = _losses(tmp_path)
    assert 6 in after and after[6] < first[1], after
    assert m0.returncode != 0
    assert took < LEAVE_BOUND_S, f"machine 0 took {took:.1f}s to stop"
    print(f"machine 0 stopped {took:.1f}s after machine 1's launcher was killed")
