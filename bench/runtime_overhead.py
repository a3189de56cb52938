"""Steps/s of `tuner run` against a minimal hand-written accelerate loop, same artefacts.

    python bench/runtime_overhead.py [--steps 60] [--strategy ddp|fsdp2]

Both sides: the same compiled build directory, the same two gloo ranks started the same way
(torch's elastic launcher with the environment `accelerate launch` derives from the YAML),
the same model (builtin small-llama), data, micro batch and AdamW. The hand loop is
bench/plain_loop.py: accelerate's canonical `prepare` + forward / backward / step /
zero_grad, nothing else (bench/gpu_acceptance.py uses the same loop).
Steps/s is measured on rank 0 over the steps after the first 5 (warm-up excluded).
Prints both rates and their ratio (target >= 0.95).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WARMUP = 5
SETTINGS = """[model]
path = "builtin:small-llama"
[hardware]
platform = "cpu"
num_processes = 2
[data]
seq_len = 64
[training]
micro_batch_size = 2
max_steps = {steps}
optimizer = "adamw"
learning_rate = 1e-3
max_grad_norm = 0.0
validation_every = 0
[checkpoint]
export = false
{extra}
[output]
dir = "out"
"""


def rate(times: list[float]) -> float:
    t = times[WARMUP - 1:]
    return (len(t) - 1) / (t[-1] - t[0])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--strategy", choices=("ddp", "fsdp2"), default="ddp")
    a = p.parse_args()
    extra = "[fsdp]\nenabled = true\nversion = 2\n" if a.strategy == "fsdp2" else ""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "settings.toml").write_text(SETTINGS.format(steps=a.steps, extra=extra))
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        r = subprocess.run([sys.executable, "-m", "tuner", "run", str(d / "settings.toml")], cwd=d, env=env,
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"tuner run failed:\n{r.stderr[-3000:]}")
        rows = [json.loads(x) for x in (d / "out" / "metrics.jsonl").read_text().splitlines()]
        tuner_rate = rate([row["time"] for row in rows if "loss" in row])

        # The hand loop (bench/plain_loop.py), launched exactly like tuner's ranks.
        result = d / "hand.json"
        r = subprocess.run([sys.executable, str(Path(__file__).with_name("plain_loop.py")), "--launch",
                            str(d / "build"), "--steps", str(a.steps), "--warmup", str(WARMUP), "--result",
                            str(result)], cwd=d, env=env, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"hand loop failed:\n{r.stderr[-3000:]}")
        hand = json.loads(result.read_text())
        hand_rate = (hand["steps"] - hand["warmup"]) / hand["seconds"]
    print(f"strategy {a.strategy}, 2 gloo ranks, builtin:small-llama, {a.steps} steps (first {WARMUP} excluded)")
    print(f"tuner run:        {tuner_rate:.2f} steps/s")
    print(f"hand-written loop: {hand_rate:.2f} steps/s")
    print(f"ratio tuner/hand: {tuner_rate / hand_rate:.3f}  (target >= 0.95)")


if __name__ == "__main__":
    main()
