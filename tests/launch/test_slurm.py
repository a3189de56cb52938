"""Slurm, for real: a two-node cluster on this host (scripts/slurm-local.sh: slurmctld and two
slurmd, node1 and node2 at 127.0.0.1) runs the compiled CPU batch script with
``sbatch --wait``: one launcher per node through srun, machine 0 from ``scontrol show
hostnames``, machine ranks from $SLURM_NODEID, a world of 4 (two ranks per node: the one test
of more than one rank per machine in a multi-machine world) that trains and checkpoints.

Skipped where Slurm is not installed (scripts/test.sh installs it as root) or the user is not
root; the cluster is stopped afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launch_helpers import env, write_settings
from tests import harness
from tests.debian import install_command

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
SLURM_DIR = "/var/lib/tuner-slurm"


@pytest.fixture(scope="module")
def slurm():
    if os.geteuid() != 0:
        pytest.skip("a local Slurm cluster needs root (its daemons run as root)")
    absent = [c for c in ("slurmctld", "slurmd", "sbatch", "munged")
              if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]
    if absent:  # slurm-local.sh would install them; a test installs nothing
        pytest.skip(f"Slurm is not installed (no {', '.join(absent)}); {install_command('slurm-wlm', 'munge')}")
    up = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=1800)
    assert up.returncode == 0, up.stdout + up.stderr
    yield {"SLURM_CONF": f"{SLURM_DIR}/slurm.conf"}
    subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=60)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sbatch_runs_a_world_of_four_on_two_nodes(tmp_path, slurm):
    settings = write_settings(tmp_path, {
        "hardware": {"platform": "cpu", "num_processes": 4, "num_machines": 2,  # machine 0: from Slurm
                     "main_process_port": _port()},
        "cluster": {"type": "slurm", "job_name": "tuner-test", "time": "00:10:00"},
        "model": {"path": "builtin:micro-llama"}, "data": {"seq_len": 32},
        "training": {"micro_batch_size": 2, "max_steps": 2, "log_every": 1},
        "checkpoint": {"every_steps": 2, "export": False}, "output": {"dir": str(tmp_path / "out")},
    })
    c = harness.tuner('compile', str(settings), '-q', timeout=120)
    assert c.returncode == 0, c.stderr
    batch = tmp_path / "build" / "slurm.sbatch"
    log = tmp_path / "job.out"
    job_env = env({**slurm, "TUNER_PYTHON": sys.executable})
    try:
        p = subprocess.run(["sbatch", "--wait", f"--output={log}", "--parsable", str(batch)], cwd=tmp_path,
                           capture_output=True, text=True, env=job_env, timeout=600)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", "--name=tuner-test"], env=job_env, timeout=30)
        raise
    text = log.read_text() if log.is_file() else ""
    assert p.returncode == 0, p.stdout + p.stderr + text[-5000:]
    meta = json.loads((tmp_path / "out" / "checkpoints" / "step-2" / "tuner_checkpoint.json").read_text())
    assert meta["world_size"] == 4
    steps = [json.loads(x).get("step") for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert max(s for s in steps if s is not None) == 2
    assert "Traceback" not in text


MEET = """\
import os, sys, time
from pathlib import Path
import torch
from accelerate import Accelerator
acc = Accelerator()
t = acc.reduce(torch.ones(1), reduction="sum")
out = Path(sys.argv[1])
job = os.environ["SLURM_JOB_ID"]
if acc.is_main_process:
    (out / f"started-{job}").write_text(os.environ.get("TUNER_MAIN_PORT", ""))
    deadline = time.time() + 240  # both jobs are up at once: each waits for the other
    while len(list(out.glob("started-*"))) < 2 and time.time() < deadline:
        time.sleep(0.5)
acc.wait_for_everyone()
(out / f"done-{job}-{acc.process_index}-{int(t.item())}").write_text("")
"""


def test_two_jobs_of_one_build_at_once_both_finish(tmp_path, slurm):
    """issue 23 item 11: the settings name no port, so each job derives its own from
    $SLURM_JOB_ID; the two jobs run at once (each waits for the other) on the same two nodes,
    and both finish. A fixed port made the second job's rendezvous fail."""
    settings = write_settings(tmp_path, {
        "hardware": {"platform": "cpu", "num_processes": 2, "num_machines": 2},
        "cluster": {"type": "slurm", "job_name": "tuner-twice", "time": "00:10:00"},
    })
    c = harness.tuner('compile', str(settings), '-q', timeout=120)
    assert c.returncode == 0, c.stderr
    script = tmp_path / "meet.py"
    script.write_text(MEET)
    out = tmp_path / "out"
    out.mkdir()
    job_env = env({**slurm, "TUNER_PYTHON": sys.executable})
    jobs = [subprocess.Popen(["sbatch", "--wait", f"--output={tmp_path}/job{i}.out", str(tmp_path / "build" /
                                                                                          "slurm.sbatch"),
                              str(script), str(out)], cwd=tmp_path, env=job_env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for i in range(2)]
    try:
        results = [(j.wait(timeout=500), j.stdout.read()) for j in jobs]
    finally:
        for j in jobs:
            if j.poll() is None:
                subprocess.run(["scancel", "--name=tuner-twice"], env=job_env, timeout=30)
                j.kill()
    logs = "".join((tmp_path / f"job{i}.out").read_text() for i in range(2) if (tmp_path / f"job{i}.out").exists())
    assert all(rc == 0 for rc, _ in results), str(results) + logs[-5000:]
    ports = {p.read_text() for p in out.glob("started-*")}
    assert len(ports) == 2, ports  # one port per job
    assert len(list(out.glob("done-*-2"))) == 4, sorted(p.name for p in out.iterdir())  # 2 jobs x 2 ranks
