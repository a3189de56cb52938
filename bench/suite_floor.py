"""The CPU time below which the whole suite cannot go on its present design, against issue 38's
budget (the whole suite in 15 minutes on 2 cores: 1,800 CPU-seconds), measured in one run.

    python bench/suite_floor.py [--ops] [--launches 40] [--fast-cpu-s 480] [--json]

Measured here, each as the CPU seconds (user + sys) of the command and every process it waited for:

* one `tuner run` of a tiny DDP build (tiny-llama, 2 steps, no export) on 1 rank and on 2 ranks:
  the launcher's imports, compile check and data check, the rendezvous, each rank's imports and
  model build; what every rank-starting test pays at least once;
* with ``--ops``: DeepSpeed's CPU ops (`scripts/build_ops.py`) built into a fresh private
  extensions folder, what a fresh clone pays before any DeepSpeed rank (minutes; without the flag
  the figure is left out of the floor and said so).

Not measured here: the fast tier (`scripts/test.sh --fast`: every test that starts no rank and no
terminal, collection included), given as ``--fast-cpu-s`` (its worker-seconds from a run of it).
The floor = ops + fast tier + LAUNCHES x the 1-rank launch, LAUNCHES being the rank launches the
issues' own checks need (each strategy once, each other entry point once, the twelve faults, the
racing runs, the resumes across world sizes and strategies, the families: at least 40, counted
in docs/benchmarks.md). Prints each figure and the floor's ratio to the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_CPU_S = 15 * 60 * 2
SETTINGS = """[model]
path = "builtin:tiny-llama"
[hardware]
platform = "cpu"
num_processes = {ranks}
[training]
micro_batch_size = 2
max_steps = 2
[checkpoint]
export = false
[output]
dir = "out"
"""


def children_cpu(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds of `cmd` and everything it waited for, wall seconds); fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def launch_cpu(ranks: int, tmp: Path) -> tuple[float, float]:
    d = tmp / f"r{ranks}"
    d.mkdir()
    (d / "settings.toml").write_text(SETTINGS.format(ranks=ranks))
    children_cpu([sys.executable, "-m", "tuner", "compile", "settings.toml", "--out", "build"], d)
    return children_cpu([sys.executable, "-m", "tuner", "run", "build"], d)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", action="store_true", help="also build DeepSpeed's ops into a fresh folder")
    p.add_argument("--launches", type=int, default=40)
    p.add_argument("--fast-cpu-s", type=float, default=480.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")  # every command's
    figures: dict[str, float | None] = {"load_average_1min": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (1, 2):
            figures[f"launch_{ranks}_rank_cpu_s"], figures[f"launch_{ranks}_rank_wall_s"] = launch_cpu(ranks, Path(tmp))
        figures["ops_cpu_s"] = figures["ops_wall_s"] = None
        if a.ops:
            ext = Path(tmp) / "torch_extensions"
            figures["ops_cpu_s"], figures["ops_wall_s"] = children_cpu(
                [sys.executable, str(REPO / "scripts" / "build_ops.py")], REPO, {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext)})
    one = float(figures["launch_1_rank_cpu_s"] or 0)
    floor = (figures["ops_cpu_s"] or 0) + a.fast_cpu_s + a.launches * one
    figures.update(fast_tier_cpu_s=a.fast_cpu_s, launches=a.launches, floor_cpu_s=floor, budget_cpu_s=BUDGET_CPU_S,
                   floor_over_budget=floor / BUDGET_CPU_S)
    if a.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"load average (1 min) at the start: {figures['load_average_1min']:.2f}")
    for ranks in (1, 2):
        print(f"tuner run, {ranks} rank(s): {figures[f'launch_{ranks}_rank_cpu_s']:.1f} CPU-s "
              f"({figures[f'launch_{ranks}_rank_wall_s']:.1f} s wall)")
    ops = figures["ops_cpu_s"]
    print(f"DeepSpeed's ops from a fresh folder: {ops:.0f} CPU-s ({figures['ops_wall_s']:.0f} s wall)" if ops is not None
          else "DeepSpeed's ops: not built (--ops): left out of the floor")
    print(f"fast tier (given): {a.fast_cpu_s:.0f} CPU-s; rank launches the checks need: {a.launches}")
    print(f"floor: {floor:.0f} CPU-s; budget (15 min x 2 cores): {BUDGET_CPU_S} CPU-s; "
          f"floor / budget = {floor / BUDGET_CPU_S:.2f}")


if __name__ == "__main__":
    main()
