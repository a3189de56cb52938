"""Helper of test_estimate_accuracy: run the runtime's trainer on real gloo ranks and record
what each rank holds (`tuner.runtime.memory.rank_state_bytes`) at the end of training.

    python _measure_ranks.py launch BUILD_DIR OUT_DIR   # starts the ranks (torchrun)
    python _measure_ranks.py worker BUILD_DIR OUT_DIR   # one rank (started by launch)

The ranks are the runtime's own: its artefact loader, the environment `accelerate launch`
would set for the compiled YAML (`tuner.runtime.launch.accelerate_env`), and its `Trainer`
unchanged except that `finish` first writes ``rank{N}.json`` with the measured bytes. The
measurement is taken after the last optimizer step, before the trainer's end-of-run
forward passes (FSDP2 leaves the root module's parameters unsharded after a forward).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(build: str, out: str) -> int:
    from tuner.runtime.artefacts import load
    from tuner.runtime.launch import accelerate_env

    arts = load(build)
    nproc = max(1, int(arts.plan.processes_per_machine))
    env = {**os.environ, **accelerate_env(arts), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--nnodes=1",
           f"--master_port={_port()}", "--master_addr=127.0.0.1", __file__, "worker", build, out]
    return subprocess.run(cmd, env=env, timeout=400).returncode


def worker(build: str, out: str) -> int:
    from tuner.runtime.artefacts import load
    from tuner.runtime.memory import rank_state_bytes
    from tuner.runtime.trainer import Trainer

    class MeasuringTrainer(Trainer):
        def finish(self) -> None:
            held = rank_state_bytes(self.model, self.optimizer)
            Path(out).mkdir(parents=True, exist_ok=True)
            Path(out, f"rank{self.rank}.json").write_text(json.dumps(held))
            super().finish()

    MeasuringTrainer(load(build)).train()
    return 0


if __name__ == "__main__":
    mode, build_dir, out_dir = sys.argv[1:4]
    sys.exit(launch(build_dir, out_dir) if mode == "launch" else worker(build_dir, out_dir))
