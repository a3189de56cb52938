"""The minimal hand-written accelerate loop on a tuner build directory: the baseline that
bench/runtime_overhead.py and bench/gpu_acceptance.py compare `tuner run` with.

    accelerate launch --config_file BUILD/accelerate.yaml bench/plain_loop.py BUILD [--steps N] [--warmup W] [--result FILE]
    tuner launch BUILD bench/plain_loop.py BUILD [--steps N] [--warmup W] [--result FILE]
    python bench/plain_loop.py --launch BUILD [...]   # start its ranks the way `tuner run` starts its own

The loop is accelerate's canonical `prepare` + forward / backward / step / zero_grad and
nothing else, on the same model, data, micro batch and optimizer as the build's settings
(DeepSpeed configs that name an optimizer and a scheduler get accelerate's `DummyOptim` /
`DummyScheduler`, as accelerate requires). Rank 0 writes `--result`: the seconds from the
end of step `--warmup` to the end of the last step (the GPU synchronised at both ends
only), tokens per step, and the peak `torch.cuda.max_memory_allocated` of rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def loop(build_dir: str, steps: int, warmup: int, result: str) -> None:
    """One rank of the loop (started by a launcher)."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DummyOptim, DummyScheduler, set_seed
    from torch.utils.data import DataLoader
    from tuner.runtime import cpu_shim
    from tuner.runtime.artefacts import load
    from tuner.runtime.data_sources.driver import rank_data
    from tuner.runtime.families import get_family
    from tuner.runtime.families.base import FamilyContext

    arts = load(build_dir)
    s = arts.settings
    acc = Accelerator()
    cpu_shim.correct_state(acc, arts.plan.strategy)  # FSDP / DeepSpeed on CPU need the same correction
    set_seed(s.training.seed)
    fam = get_family(s.model.family)(FamilyContext(s, arts.base_dir, seed=s.training.seed,
                                                   rank=acc.process_index, world_size=acc.num_processes))
    model = fam.prepare_model(fam.build_model())
    data = rank_data(fam)
    loader = DataLoader(data.train, batch_size=s.training.micro_batch_size, shuffle=True, drop_last=True,
                        collate_fn=data.collate)
    ds_cfg = arts.deepspeed_config()
    params = [p for p in model.parameters() if p.requires_grad]
    if "optimizer" in ds_cfg:
        opt = DummyOptim(params, lr=s.training.learning_rate)
    else:
        opt = torch.optim.AdamW(params, lr=s.training.learning_rate)
    objs = [model, opt, loader]
    if "scheduler" in ds_cfg:
        objs.append(DummyScheduler(opt, total_num_steps=steps, warmup_num_steps=s.training.warmup_steps))
    model, opt, loader, *sched = acc.prepare(*objs)
    model.train()
    step, tokens_per_step = 0, 0
    _sync()
    t_warm = time.perf_counter()  # replaced at the end of step `warmup`
    while step < steps:
        for batch in loader:
            loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
            acc.backward(loss)
            opt.step()
            for sc in sched:
                sc.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            tokens_per_step = int(batch["input_ids"].numel()) * acc.num_processes
            if step == warmup:
                _sync()
                t_warm = time.perf_counter()
            if step >= steps:
                break
    _sync()
    seconds = time.perf_counter() - t_warm
    if acc.is_main_process and result:
        peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
        Path(result).write_text(json.dumps({
            "steps": steps, "warmup": warmup, "seconds": seconds, "tokens_per_step": tokens_per_step,
            "world": acc.num_processes, "distributed_type": acc.distributed_type.name,
            "cuda_max_memory_allocated": peak}))
    acc.wait_for_everyone()
    acc.end_training()


def launch(build_dir: str, rank_args: list[str]) -> int:
    """Start every rank of this script the way `tuner run` starts its own workers
    (tuner.runtime.launch): `accelerate launch --config_file` on GPUs, torch's elastic
    launcher with the environment accelerate derives from the YAML on CPU."""
    from tuner.runtime.artefacts import load
    from tuner.runtime.launch import use_gpu_launcher
    from tuner.runtime.launch_env import accelerate_env, free_port

    arts = load(build_dir)
    script = str(Path(__file__).resolve())
    if use_gpu_launcher(arts):
        return subprocess.call([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                                str(arts.accelerate_yaml), script, *rank_args])
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    nproc = max(1, int(arts.plan.processes_per_machine))
    env = accelerate_env(arts)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    os.environ.update(env)
    cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id="plain-loop", rdzv_backend="c10d",
                       rdzv_endpoint=f"127.0.0.1:{free_port(29511)}", max_restarts=0, monitor_interval=0.5,
                       start_method="spawn")
    elastic_launch(cfg, sys.executable)(script, *rank_args)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="plain_loop.py", description=__doc__.split("\n\n")[0])
    p.add_argument("build_dir")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5, help="steps not timed")
    p.add_argument("--result", default="", help="JSON file rank 0 writes")
    p.add_argument("--launch", action="store_true", help="start the ranks (instead of being one)")
    a = p.parse_args(argv)
    if not 0 <= a.warmup < a.steps:
        p.error("--warmup must be at least 0 and below --steps")
    if a.launch:
        return launch(a.build_dir, [a.build_dir, "--steps", str(a.steps), "--warmup", str(a.warmup),
                                    "--result", a.result])
    loop(a.build_dir, a.steps, a.warmup, a.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
