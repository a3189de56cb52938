"""Bytes of parameters + gradients + optimizer state held by one rank (2 ranks), per strategy.

    python bench/shard_memory.py

Runs `tuner run` for DDP, FSDP2, ZeRO-2 and ZeRO-3 on two gloo ranks (a 4-layer, 256-wide
Llama, AdamW, 3 steps) and reads what rank 0 measured with
`tuner.runtime.memory.rank_state_bytes` after training. Prints each strategy's bytes and the
ratio to DDP's. ZeRO's fp32 master copy of the partition is reported separately ("master"):
it exists because ZeRO keeps its own copy, DDP has none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STRATEGIES = {
    "ddp": "",
    "fsdp2": "[fsdp]\nenabled = true\nversion = 2\n",
    "zero2": "[deepspeed]\nenabled = true\nzero_stage = 2\n",
    "zero3": "[deepspeed]\nenabled = true\nzero_stage = 3\n",
}
BASE = """[model]
path = "builtin:small-llama"
[hardware]
platform = "cpu"
num_processes = 2
[data]
seq_len = 64
[training]
micro_batch_size = 2
max_steps = 3
optimizer = "adamw"
learning_rate = 1e-3
[checkpoint]
export = false
[output]
dir = "out"
"""


def measure(name: str, extra: str, root: Path) -> dict:
    d = root / name
    d.mkdir()
    (d / "settings.toml").write_text(BASE + extra)
    # What each rank holds is recorded by the tests' trainer callback (rank{N}.json), which
    # the ranks import from the repository root.
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "TUNER_TEST_TRACE_DIR": str(d / "trace"), "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    r = subprocess.run([sys.executable, "-m", "tuner", "run", str(d / "settings.toml"), "--callback",
                        "tests.runtime.trace_callbacks:trace"], cwd=d, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{name} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return json.loads((d / "trace" / "rank0.json").read_text())["state_bytes"]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = {name: measure(name, extra, Path(tmp)) for name, extra in STRATEGIES.items()}
    ddp = rows["ddp"]
    ddp_total = ddp["params"] + ddp["grads"] + ddp["optimizer"]
    ddp_og = ddp["grads"] + ddp["optimizer"]
    print(f"{'strategy':8} {'params':>10} {'grads':>10} {'optim':>10} {'master':>10}   "
          f"{'p+g+o/DDP':>9} {'g+o/DDP':>8} {'incl. master/DDP':>16}")
    for name, b in rows.items():
        pgo = b["params"] + b["grads"] + b["optimizer"]
        print(f"{name:8} {b['params']:>10,} {b['grads']:>10,} {b['optimizer']:>10,} {b['master']:>10,}   "
              f"{pgo / ddp_total:>9.3f} {(b['grads'] + b['optimizer']) / ddp_og:>8.3f} "
              f"{(pgo + b['master']) / ddp_total:>16.3f}")
    print("targets: fsdp2 and zero3 p+g+o/DDP <= 0.55; zero2 g+o/DDP <= 0.55")


if __name__ == "__main__":
    main()
