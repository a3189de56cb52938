"""Resume across backends: a checkpoint's training state as full tensors by parameter name.

DDP, FSDP2 and ZeRO save their model and optimizer state in different layouts, but all of
them name the same parameters the same way (the unwrapped model's names). This module reads
any of them into that one portable form, with the libraries' own readers:

* ZeRO 1-3: DeepSpeed's universal checkpoint (`checkpoint_convert.py`, ``ds_to_universal``),
  one folder per parameter name: ``fp32``, ``exp_avg``, ``exp_avg_sq``, ``step``;
* FSDP2 sharded: torch.distributed.checkpoint's folders, read whole without a process group
  (``dcp_to_torch_save``); FSDP2 full: accelerate's full state dicts, already by name;
* DDP: ``model.safetensors`` and torch's ``optimizer.bin`` (state by parameter index, in the
  optimizer's order, which is the family's trainable parameters in model order);

and loads it into a DDP or FSDP2 run with torch's own state-dict API
(``set_model_state_dict`` / ``set_optimizer_state_dict`` with full state dicts by name, which
shard each tensor for FSDP2), or into a ZeRO 1-3 run (with or without CPU offload) with
DeepSpeed's per-parameter API (``safe_set_full_fp32_param`` / ``safe_set_full_optimizer_state``).
The LR schedule's state comes with it; the data position is the trainer's as for any resume.
Each rank reads the whole state once while loading.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from . import checkpoint as ckpt
from .artefacts import RunError

Moments = dict[str, dict[str, Any]]


def read(path: Path, meta: ckpt.CheckpointMeta, names: list[str]) -> tuple[dict, Moments, dict | None]:
    """(weights by name, optimizer state by name, scheduler state or None) of a checkpoint."""
    import torch

    sched_file = path / "scheduler.bin"
    sched = torch.load(sched_file, map_location="cpu", weights_only=False) if sched_file.is_file() else None
    if meta.strategy.is_deepspeed:
        model, moments, ds_sched = _read_universal(path / "pytorch_model", names)
        return model, moments, sched if sched is not None else ds_sched
    if (path / "pytorch_model_fsdp_0").is_dir():
        model = _dcp(path / "pytorch_model_fsdp_0").get("model", {})
        optim = _dcp(path / "optimizer_0").get("optimizer", {})
    else:
        from .export import full_state_dict

        model = full_state_dict(path, meta)
        optim = torch.load(path / "optimizer.bin", map_location="cpu", weights_only=False)
    state = optim.get("state", {})
    if state and all(isinstance(k, int) for k in state):  # torch's own optimizer state: by index
        state = {names[k]: v for k, v in state.items() if k < len(names)}
    return model, state, sched


def _dcp(folder: Path) -> dict:
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(str(folder), str(Path(tmp) / "full.pt"))
        return torch.load(Path(tmp) / "full.pt", map_location="cpu", weights_only=False)


def _read_universal(folder: Path, names: list[str]) -> tuple[dict, Moments, dict | None]:
    import torch

    zero = folder / "zero"
    if not zero.is_dir():
        raise RunError(f"{folder} is not a DeepSpeed universal checkpoint (no zero/ folder)")
    model: dict[str, Any] = {}
    moments: Moments = {}
    for name in names:
        d = zero / name
        if not d.is_dir():
            raise RunError(f"the universal checkpoint {folder} has no parameter {name!r}; it was written for "
                           f"another model")
        model[name] = torch.load(d / "fp32.pt", map_location="cpu", weights_only=False)["param"]
        entry: dict[str, Any] = {}
        for key in ("exp_avg", "exp_avg_sq"):
            if (d / f"{key}.pt").is_file():
                entry[key] = torch.load(d / f"{key}.pt", map_location="cpu", weights_only=False)["param"]
        if (d / "step.pt").is_file():
            entry["step"] = torch.tensor(float(torch.load(d / "step.pt", map_location="cpu", weights_only=False)))
        moments[name] = entry
    sched = None
    for states in sorted(folder.glob("mp_rank_*_model_states.pt"))[:1]:
        sched = torch.load(states, map_location="cpu", weights_only=False).get("lr_scheduler")
    return model, moments, sched


def load_into(model, optimizer, scheduler, unwrapped, path: Path, meta: ckpt.CheckpointMeta) -> None:
    """Load `path`'s state into a prepared DDP or FSDP2 `model` and its (accelerate) optimizer."""
    import torch
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    names = [n for n, p in unwrapped.named_parameters() if p.requires_grad]
    weights, moments, sched = read(path, meta, names)
    full = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, {k: v.float() for k, v in weights.items()}, options=full)
    inner = getattr(optimizer, "optimizer", optimizer)
    groups = get_optimizer_state_dict(model, inner, options=full)["param_groups"]
    state = {}
    for name, entry in moments.items():
        if "exp_avg" not in entry:
            continue
        step = entry.get("step", torch.tensor(float(meta.step)))
        state[name] = {"exp_avg": entry["exp_avg"].float(), "exp_avg_sq": entry["exp_avg_sq"].float(),
                       "step": torch.as_tensor(step, dtype=torch.float32)}
    missing = sorted(set(names) - set(state))
    if missing:
        raise RunError(f"checkpoint {path} holds no optimizer state for {', '.join(missing[:3])}"
                       f"{' ...' if len(missing) > 3 else ''}; it cannot be carried to this run")
    set_optimizer_state_dict(model, inner, {"state": state, "param_groups": groups}, options=full)
    if sched is None:
        raise RunError(f"checkpoint {path} holds no LR schedule state (scheduler.bin); it cannot be carried")
    scheduler.load_state_dict(sched)
    # The groups above carry this fresh run's first LR (0 in a warmup); the schedule's state
    # says where it stood, and the next optimizer step must use that (as the saved groups do).
    for group, lr in zip(inner.param_groups, scheduler.get_last_lr(), strict=True):
        group["lr"] = lr


def load_state(trainer: Any, path: Path, meta: ckpt.CheckpointMeta) -> str:
    """Load checkpoint `path` into the trainer's prepared model, optimizer and schedule: the
    strategy's own loader (accelerate's ``load_state``; DeepSpeed's universal loader for a
    converted ZeRO checkpoint), or, from another backend, the portable form. Returns a line
    saying how it was carried ('' for the strategy's own)."""
    from .resume_rules import carried_across

    acc = trainer.acc
    if carried_across(meta, trainer.strategy, trainer._state_dict_type()) and trainer.strategy.is_deepspeed:
        load_into_zero(trainer.model, trainer.scheduler, path, meta)
        trainer.fam.load_state(path, acc)
        return (f"carried {meta.strategy} ({meta.state_dict_type}) -> {trainer.strategy}: model, Adam moments, step "
                f"count and LR schedule by parameter name (DeepSpeed's safe_set_full_* API)")
    if carried_across(meta, trainer.strategy, trainer._state_dict_type()):
        load_into(trainer.model, trainer.optimizer, trainer.scheduler, acc.unwrap_model(trainer.model), path, meta)
        trainer.fam.load_state(path, acc)
        return (f"carried {meta.strategy} ({meta.state_dict_type}) -> {trainer.strategy}: model, Adam moments, step "
                f"count and LR schedule by parameter name")
    if meta.state_dict_type == "universal":  # checkpoint_convert.py: re-partitioned by DeepSpeed on load
        for engine in acc._models:
            engine._config.load_universal_checkpoint = True
    acc.load_state(str(path))
    trainer.fam.load_state(path, acc)
    return ""


def load_into_zero(engine, scheduler, path: Path, meta: ckpt.CheckpointMeta) -> None:
    """Load `path`'s state into a prepared ZeRO 1-3 engine with DeepSpeed's own per-parameter
    API (``safe_set_full_fp32_param`` / ``safe_set_full_optimizer_state``: each rank keeps its
    partition, through the hp-fragment mappings ZeRO-1/2 and the partitions ZeRO-3 keep), then
    the module's weights from the fp32 partitions, as DeepSpeed's universal loader does, and
    the step count of each partition's Adam state."""
    import torch
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

    named = [(n, p) for n, p in engine.module.named_parameters() if p.requires_grad]
    weights, moments, sched = read(path, meta, [n for n, _ in named])
    zero = engine.optimizer
    stage3 = hasattr(zero, "fp32_partitioned_groups_flat")
    flats = zero.fp32_partitioned_groups_flat if stage3 else zero.single_partition_of_fp32_groups
    _init_adam_state(zero.optimizer, flats)
    if not stage3:  # ZeRO-1/2 link each parameter's Adam fragments after the first step
        zero._lazy_init_hp_params_optimizer_state()
    for name, p in named:
        entry = moments.get(name, {})
        if "exp_avg" not in entry:
            raise RunError(f"checkpoint {path} holds no optimizer state for {name}; it cannot be carried")
        safe_set_full_fp32_param(p, weights[name].float())
        safe_set_full_optimizer_state(p, entry["exp_avg"].float(), "exp_avg")
        safe_set_full_optimizer_state(p, entry["exp_avg_sq"].float(), "exp_avg_sq")
    step = moments[named[0][0]].get("step", torch.tensor(float(meta.step)))
    for fp32 in flats:  # a tensor for torch's Adam, an int for DeepSpeed's CPU Adam (offload)
        held = zero.optimizer.state[fp32].get("step")
        zero.optimizer.state[fp32]["step"] = (int(step) if held is not None and not torch.is_tensor(held)
                                              else torch.as_tensor(step, dtype=torch.float32).clone())
    if stage3:
        for i, fp32 in enumerate(flats):
            if sum(fp32.size()) > 0:
                zero.fp16_partitioned_groups_flat[i].data.copy_(fp32.data)
    else:
        zero.update_lp_params()  # each rank's fp32 partition into the module, gathered on all ranks
    if sched is None:
        raise RunError(f"checkpoint {path} holds no LR schedule state (scheduler.bin); it cannot be carried")
    scheduler.load_state_dict(sched)
    for group, lr in zip(zero.optimizer.param_groups, scheduler.get_last_lr(), strict=False):
        group["lr"] = lr


def _init_adam_state(optimizer, flats: list) -> None:
    """Create Adam's state for DeepSpeed's fp32 partitions before the first step (it is made
    lazily): one step with zero gradients at LR 0, as torch's ``_init_optim_state`` does."""
    import torch

    if all("exp_avg" in optimizer.state.get(f, {}) for f in flats if f.numel()):
        return
    lrs = [g["lr"] for g in optimizer.param_groups]
    held = [g["params"] for g in optimizer.param_groups]  # ZeRO-3 lends its partitions only for a step
    for i, g in enumerate(optimizer.param_groups):
        g["lr"], g["params"] = 0.0, [f for f in flats if f.numel()] if i == 0 else []
    grads = [f.grad for f in flats]  # ZeRO-1/2 with CPU offload keep a gradient buffer there
    for f in flats:
        f.grad = torch.zeros_like(f)
    optimizer.step()
    for f, grad in zip(flats, grads, strict=True):
        f.grad = grad
    for g, lr, params in zip(optimizer.param_groups, lrs, held, strict=True):
        g["lr"], g["params"] = lr, params
