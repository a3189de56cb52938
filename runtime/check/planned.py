"""The rehearsal's checks against what the settings plan in numbers: per-rank model state vs
the estimate (`memory`) and the learning rate of each step vs the settings' schedule
(`schedule`). Both run for tuner's own trainer, and for a script when it trains what the
settings describe (the estimate's model; a scheduler starting at the settings' learning rate):
anything else is the script's own choice and is skipped, with the reason.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...compiler.keys.choices import LrScheduler
from .findings import Finding, fault, ok, skipped

if TYPE_CHECKING:
    from ..artefacts import Artefacts


def schedule(arts: Artefacts, runs, own_trainer: bool) -> list[Finding]:
    """The learning rate of each rehearsed step is the settings' schedule: tuner's own trainer,
    and a script whose optimizer starts at the settings' learning rate under a torch LR
    scheduler (``initial_lr`` in its param groups: the script means the settings' schedule)."""
    t = arts.settings.training
    r, run = next(iter(runs.items()))
    if arts.plan.uses_deepspeed or t.max_steps <= 0 or not run["lr"]:
        return [skipped("lr", "all", "schedule not compared (DeepSpeed's scheduler, or an epoch-based run)")]
    if not own_trainer:
        base = (run.get("optimizer") or {}).get("initial_lr")
        if base is None or abs(base - t.learning_rate) > 1e-6 * t.learning_rate:
            return [skipped("lr", "all", "schedule not compared: the script's optimizer starts at "
                            f"{'no LR scheduler' if base is None else f'lr {base:.3g}'}, not a scheduler at the "
                            f"settings' learning_rate {t.learning_rate:.3g}")]
    want = planned_lrs(t.lr_scheduler, t.learning_rate, t.warmup_steps, t.max_steps, len(run["lr"]), t)
    if not _same(run["lr"], want):
        cause, fix = _cause(arts, run["lr"])
        return [fault("lr", "all", f"steps at lr {[float(f'{x:.4g}') for x in run['lr']]}; the settings' "
                      f"{t.lr_scheduler} schedule (warmup {t.warmup_steps}, {t.max_steps} steps) gives "
                      f"{[float(f'{x:.4g}') for x in want]}: {cause}", fix)]
    return [ok("lr", "all", f"follows the {t.lr_scheduler} schedule: " + ", ".join(f"{x:.3g}" for x in run["lr"]))]


def _same(got: list[float], want: list[float]) -> bool:
    return all(abs(a - b) <= 1e-9 + 1e-6 * abs(b) for a, b in zip(got, want, strict=True))


def _cause(arts: Artefacts, got: list[float]) -> tuple[str, str]:
    """Why the script's lr differs from the settings' schedule: the speed at which its scheduler
    runs through the schedule (settings steps per optimizer step), or one step ahead."""
    t, world = arts.settings.training, arts.plan.world_size
    accum = t.gradient_accumulation_steps
    n = len(got)
    if t.lr_scheduler in FORMULAS:
        if _same(got, planned_lrs(t.lr_scheduler, t.learning_rate, t.warmup_steps, t.max_steps, n + 1, t)[1:]):
            return ("the scheduler steps before the optimizer (scheduler.step() comes first), so every step runs at "
                    "the next step's lr", "call scheduler.step() after optimizer.step()")
        # r scheduler steps per optimizer step (from any start), or a schedule 1/r as long
        for r in dict.fromkeys(x for x in (world, accum, world * accum, 2, 3, 4, 8, 16) if x > 1):
            every = planned_lrs(t.lr_scheduler, t.learning_rate, t.warmup_steps, t.max_steps, n * r + r, t)
            if any(_same(got, every[o::r][:n]) for o in range(r)):
                return _speed_cause(r, world, accum)
        for k in (2, 3, 4, 8, 16):
            if _same(got, planned_lrs(t.lr_scheduler, t.learning_rate, t.warmup_steps * k, t.max_steps * k, n, t)):
                return _speed_cause(1 / k, world, accum)
    return ("the script's scheduler does not follow the settings' schedule",
            "build the scheduler from the settings' lr_scheduler, warmup_steps and max_steps, and step it once per "
            "optimizer step")


def _speed_cause(r: float, world: int, accum: int) -> tuple[str, str]:
    if r == world and r > 1:
        return (f"the scheduler steps once per process ({world} times per optimizer step: accelerate's prepared "
                "scheduler steps num_processes times unless its lengths count them)",
                "multiply num_warmup_steps and num_training_steps by accelerator.num_processes when you pass the "
                "scheduler to accelerator.prepare (as diffusers' scripts do), or do not prepare it")
    if r == accum and r > 1:
        return (f"the scheduler steps once per micro-batch ({accum} per optimizer step; "
                "training.gradient_accumulation_steps)",
                "step the scheduler only when accelerator.sync_gradients (after a real optimizer step), or pass it "
                "to accelerator.prepare, which does")
    if r == world * accum:
        return (f"the scheduler steps once per process and micro-batch ({world} x {accum} per optimizer step)",
                "step the scheduler once per optimizer step: prepared, with its lengths x accelerator.num_processes, "
                "and not per micro-batch")
    if r < 1:
        return (f"the schedule runs {1 / r:g}x slower: its lengths were computed for {1 / r:g}x the steps (a world "
                f"of {world / r:g} processes, or another run's batch or data); this plan runs {world} processes",
                "compute num_training_steps and num_warmup_steps from this run (training.max_steps, warmup_steps, "
                "accelerator.num_processes), not a world size written into the script or kept from an earlier run")
    return (f"the schedule runs {r:g}x faster: its lengths were computed for {r:g}x fewer steps (a world of "
            f"{world / r:g} processes, or another run's batch or data); this plan runs {world} processes",
            "compute num_training_steps and num_warmup_steps from this run (training.max_steps, warmup_steps, "
            "accelerator.num_processes), not a world size written into the script or kept from an earlier run")


#: Schedules computed here as transformers' `get_scheduler` lambdas compute them: importing
#: transformers in the launcher to judge 3 steps took 30-70 s under load (docs/benchmarks.md).
FORMULAS = ("constant", "constant_with_warmup", "linear", "cosine")


def planned_lrs(kind: LrScheduler, lr: float, warmup: int, total: int, n: int, training: Any = None) -> list[float]:
    """The learning rate of optimizer steps 1..n under the settings' schedule
    (runtime/optim.py: `lr_schedule`, tuner's "constant" warms up when warmup_steps is set;
    ``training`` gives polynomial its lr_end and lr_power)."""
    if kind not in FORMULAS:  # the rarer schedules: transformers' own code
        return _lrs_from_transformers(kind, lr, warmup, total, n, training)
    total = max(1, total)
    out = []
    for step in range(n):  # the scheduler's count when step + 1 runs
        if kind == "constant" and not warmup:
            factor = 1.0
        elif step < warmup:
            factor = step / max(1, warmup)
        elif kind in ("constant", "constant_with_warmup"):
            factor = 1.0
        elif kind == "linear":
            factor = max(0.0, (total - step) / max(1, total - warmup))
        else:  # cosine, half a cycle
            progress = (step - warmup) / max(1, total - warmup)
            factor = max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
        out.append(lr * factor)
    return out


def _lrs_from_transformers(kind: LrScheduler, lr: float, warmup: int, total: int, n: int, training: Any = None) -> list[float]:
    import torch

    from ..optim import lr_schedule

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = lr_schedule(kind, opt, warmup, total, training)
    out = []
    for _ in range(n):
        out.append(float(opt.param_groups[0]["lr"]))
        opt.step()
        sched.step()
    return out


def memory(arts: Artefacts, runs, own_trainer: bool) -> list[Finding]:
    """Per-rank model state vs the estimate: tuner's own trainer, and a script that trains the
    settings' model (the same parameter count as the estimate's model)."""
    from ...compiler.memory.estimate import estimate

    est = estimate(arts.settings, arts.plan, None, base_dir=arts.base_dir, ds_config=arts.deepspeed_config())
    if est is None or est.chosen is None:
        return [skipped("memory", "all", "no estimate for this model")]
    if not own_trainer:
        m = next(iter(runs.values())).get("model") or {}
        want_n = est.model.parameters if est.model else 0
        if not m or m.get("numel") != want_n:
            return [skipped("memory", "all", f"not compared: the script's model has {m.get('numel', 0):,} "
                            f"parameters, the settings' model {want_n:,}")]
    want = sum(est.chosen.rank_state(k) for k in ("params", "grads", "optimizer", "master"))
    out = []
    for r, run in runs.items():
        got = (run.get("state_bytes") or {}).get("total")
        if not got:
            continue
        if abs(got - want) > 0.10 * want:
            out.append(fault("memory", f"rank {r}", f"holds {got / 2**20:.2f} MiB of model state; the estimate says "
                             f"{want / 2**20:.2f} MiB", "check the sharding above; if it is right, report the "
                             "estimate's error (tuner estimate)"))
    return out or [ok("memory", "all", f"within 10% of the estimate ({want / 2**20:.2f} MiB per rank)")]
