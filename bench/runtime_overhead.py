"""Steps/s of `tuner run` against a minimal hand-written accelerate loop, same artefacts.

    python bench/runtime_overhead.py [--steps 60] [--strategy ddp|fsdp2]

Both sides: the same compiled build directory, the same two gloo ranks started the same way
(torch's elastic launcher with the environment `accelerate launch` derives from the YAML),
the same model (builtin small-llama), data, micro batch and AdamW. The hand loop is
accelerate's canonical `prepare` + forward / backward / step / zero_grad, nothing else.
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
import time
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


def hand_loop(build_dir: str, steps: int, result: str) -> None:
    """One rank of the minimal accelerate loop (run under the elastic launcher)."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader

    from tuner.runtime import cpu_shim
    from tuner.runtime.artefacts import load
    from tuner.runtime.families import get_family
    from tuner.runtime.families.base import FamilyContext

    arts = load(build_dir)
    acc = Accelerator()
    cpu_shim.correct_state(acc, arts.plan.strategy)  # FSDP on CPU needs the same correction
    set_seed(arts.settings.training.seed)
    fam = get_family("causal_lm")(FamilyContext(arts.settings, arts.base_dir))
    model = fam.prepare_model(fam.build_model())
    train, _ = fam.build_datasets()
    loader = DataLoader(train, batch_size=arts.settings.training.micro_batch_size, shuffle=True, drop_last=True,
                        collate_fn=fam.collate)
    opt = torch.optim.AdamW(model.parameters(), lr=arts.settings.training.learning_rate)
    model, opt, loader = acc.prepare(model, opt, loader)
    model.train()
    times, step = [], 0
    while step < steps:
        for batch in loader:
            loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
            acc.backward(loss)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            times.append(time.perf_counter())
            if step >= steps:
                break
    if acc.is_main_process:
        Path(result).write_text(json.dumps(times))
    acc.wait_for_everyone()


def rate(times: list[float]) -> float:
    t = times[WARMUP - 1:]
    return (len(t) - 1) / (t[-1] - t[0])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--strategy", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--_hand", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a._hand:
        hand_loop(a._hand[0], int(a._hand[1]), a._hand[2])
        return
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

        # The hand loop, launched exactly like tuner's ranks.
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        from tuner.runtime.artefacts import load
        from tuner.runtime.launch import _free_port, accelerate_env

        arts = load(d / "build")
        os.environ.update(accelerate_env(arts))
        os.environ["OMP_NUM_THREADS"] = "1"
        cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, run_id="bench", rdzv_backend="c10d",
                           rdzv_endpoint=f"127.0.0.1:{_free_port(29511)}", max_restarts=0, monitor_interval=0.5,
                           start_method="spawn")
        result = d / "hand.json"
        elastic_launch(cfg, sys.executable)(str(Path(__file__).resolve()), "--_hand", str(d / "build"),
                                            str(a.steps), str(result))
        hand_rate = rate(json.loads(result.read_text()))
    print(f"strategy {a.strategy}, 2 gloo ranks, builtin:small-llama, {a.steps} steps (first {WARMUP} excluded)")
    print(f"tuner run:        {tuner_rate:.2f} steps/s")
    print(f"hand-written loop: {hand_rate:.2f} steps/s")
    print(f"ratio tuner/hand: {tuner_rate / hand_rate:.3f}  (target >= 0.95)")


if __name__ == "__main__":
    main()
