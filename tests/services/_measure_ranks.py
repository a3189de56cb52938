"""Helper of test_estimate_accuracy: run the runtime's trainer on real gloo ranks and record
what each rank holds (`tuner.runtime.memory.rank_state_bytes`) at the end of training.

    python _measure_ranks.py launch BUILD_DIR OUT_DIR [BUILD_DIR OUT_DIR ...]
    python _measure_ranks.py worker BUILD_DIR OUT_DIR   # one rank (started by launch)

The ranks are the runtime's own: its artefact loader, the environment `accelerate launch`
would set for the compiled YAML (`tuner.runtime.launch.accelerate_env`), and its `Trainer`,
unchanged, given the tests' trace callback (tests/runtime/trace_callbacks.py), which writes
``rank{N}.json`` with `state_bytes`, measured after the last optimizer step and before the
end-of-run forward passes (FSDP2 leaves the root module's parameters unsharded after a forward).

`launch` starts the ranks itself with the variables torchrun would set (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), several builds one after another from one process,
so the test pays for the launcher's imports once rather than per strategy.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(pairs: list[tuple[str, str]]) -> int:
    from tuner.runtime.artefacts import load
    from tuner.runtime.launch import accelerate_env

    for build, out in pairs:
        arts = load(build)
        nproc = max(1, int(arts.plan.processes_per_machine))
        base = {**os.environ, **accelerate_env(arts), "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(_port()), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
                "GROUP_RANK": "0", "NODE_RANK": "0"}
        procs = [subprocess.Popen([sys.executable, __file__, "worker", build, out],
                                  env={**base, "RANK": str(r), "LOCAL_RANK": str(r)})
                 for r in range(nproc)]
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=300))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                codes.append(-9)
        if any(codes):
            for p in procs:
                if p.poll() is None:
                    p.kill()
            print(f"ranks of {build} failed: exit codes {codes}", file=sys.stderr)
            return 1
    return 0


def worker(build: str, out: str) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.runtime
    from tests.runtime.trace_callbacks import Trace
    from tuner.runtime.artefacts import load
    from tuner.runtime.trainer import Trainer

    # The trace callback records `rank_state_bytes` after the last optimizer step, before
    # the trainer's end-of-run forward passes, in OUT/rank{N}.json.
    Trainer(load(build), callbacks=[Trace(out)]).train()
    return 0


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "launch":
        sys.exit(launch(list(zip(rest[0::2], rest[1::2]))))
    sys.exit(worker(rest[0], rest[1]))
