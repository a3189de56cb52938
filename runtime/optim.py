"""The optimizer and LR schedule of a run, from the settings and the compiled deepspeed.json.

DeepSpeed builds the optimizer itself when deepspeed.json names one (accelerate's
`DummyOptim` pattern), and for ZeRO-Offload with no block tuner run adds one to accelerate's
in-memory config (`offload_optimizer_block`), so DeepSpeed builds its CPU Adam with the engine;
otherwise it is torch's (or lion / prodigy from their packages).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from typing import Any

import torch

from ..compiler.keys.choices import LrScheduler

#: training.optimizer values tuner runs from another package: name -> (module, class, pip name).
PACKAGED = {"lion": ("lion_pytorch", "Lion", "lion-pytorch"), "prodigy": ("prodigyopt", "Prodigy", "prodigyopt")}


def missing_optimizer_package(name: str) -> str | None:
    """Why `tuner run` cannot build optimizer `name` here (its package is not installed), or None."""
    if name in PACKAGED and importlib.util.find_spec(PACKAGED[name][0]) is None:
        return (f"training.optimizer = {name!r} needs the {PACKAGED[name][2]} package, which is not installed: "
                f"pip install {PACKAGED[name][2]} (or choose adamw, adam or sgd)")
    return None


def lr_schedule(kind: LrScheduler, optimizer, warmup: int, total: int, training: Any = None):
    """The settings' LR schedule, built by transformers (`get_scheduler`: constant, linear,
    cosine, polynomial, constant_with_warmup, ...). tuner's "constant" has always warmed up
    first when warmup_steps is set: that is transformers' "constant_with_warmup". The polynomial
    schedule takes training.lr_end and training.lr_power (transformers' lr_end and power)."""
    from transformers import get_scheduler

    if kind == "constant" and warmup:
        kind = "constant_with_warmup"
    extra = None
    if kind == "polynomial" and training is not None:
        extra = {"lr_end": training.lr_end, "power": training.lr_power}
    return get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=max(1, total),
                         scheduler_specific_kwargs=extra)


#: Devices with torch's fused Adam/AdamW kernels (torch.optim's ``fused=True``).
FUSED_DEVICES = ("cuda", "cpu", "xpu", "mps")


def fused_kwargs(params: list) -> dict[str, bool]:
    """``{"fused": True}`` where every parameter is a float tensor on a device with torch's
    fused Adam kernel: one kernel per dtype and device instead of a Python loop over the
    tensors (transformers' default optimizer is the same, ``adamw_torch_fused``). FSDP2's
    DTensor parameters and DeepSpeed's flat partitions take it too."""
    ok = bool(params) and all(isinstance(p, torch.Tensor) and p.is_floating_point()
                              and p.device.type in FUSED_DEVICES for p in params)
    return {"fused": True} if ok else {}


def offload_optimizer_block(ds_cfg: dict, training: Any) -> dict | None:
    """ZeRO-Offload with no optimizer block in deepspeed.json: the block tuner run adds to
    accelerate's in-memory DeepSpeed config, so that DeepSpeed builds its CPU Adam with the engine
    (its state and the DummyScheduler schedule resume with the engine's checkpoint). The compiled
    JSON stays without it, so a plain script's torch AdamW works too (accelerate swaps it)."""
    offload = str(((ds_cfg.get("zero_optimization") or {}).get("offload_optimizer") or {})
                  .get("device", "none")) != "none"
    if "optimizer" in ds_cfg or not offload or training.optimizer not in ("adamw", "adam"):
        return None
    return {"type": "Adam" if training.optimizer == "adam" else "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}


def optimizer_and_scheduler(params: list, training: Any, ds_cfg: dict, total_steps: int, world: int):
    """(optimizer, scheduler) for `params` under the settings' ``[training]`` table."""
    from accelerate.utils import DummyOptim, DummyScheduler

    t = training
    warmup = t.warmup_steps or math.ceil(getattr(t, "warmup_ratio", 0.0) * total_steps)
    # deepspeed.json names an optimizer only when the settings (or the imported file) ask for
    # one: then accelerate's DummyOptim pattern, and accelerate fills the block's "auto"
    # lr / weight_decay from it.
    offload = str(((ds_cfg.get("zero_optimization") or {}).get("offload_optimizer") or {})
                  .get("device", "none")) != "none"
    if "optimizer" in ds_cfg:
        opt = DummyOptim(params, lr=t.learning_rate, weight_decay=t.weight_decay)
    elif offload:  # ZeRO-Offload, no block and none added: DeepSpeed's CPU Adam as a client optimizer
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        opt = DeepSpeedCPUAdam(params, lr=t.learning_rate, weight_decay=t.weight_decay,
                               adamw_mode=t.optimizer != "adam")
    elif t.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=t.learning_rate, weight_decay=t.weight_decay)
    elif t.optimizer == "adam":
        opt = torch.optim.Adam(params, lr=t.learning_rate, weight_decay=t.weight_decay, **fused_kwargs(params))
    elif t.optimizer in PACKAGED:
        problem = missing_optimizer_package(t.optimizer)
        if problem:
            raise RuntimeError(problem)
        module, cls, _ = PACKAGED[t.optimizer]
        opt = getattr(importlib.import_module(module), cls)(params, lr=t.learning_rate, weight_decay=t.weight_decay)
    else:
        opt = torch.optim.AdamW(params, lr=t.learning_rate, weight_decay=t.weight_decay, **fused_kwargs(params))
    if "scheduler" in ds_cfg:
        # The JSON's scheduler wins (compile said so). accelerate divides total_num_steps
        # by the number of processes (it expects a count over the unsharded data).
        sched = DummyScheduler(opt, total_num_steps=total_steps * world, warmup_num_steps=warmup)
    elif isinstance(opt, DummyOptim):
        # DeepSpeed builds the optimizer; it calls this with it to build the schedule.
        sched = DummyScheduler(opt, lr_scheduler_callable=lambda o: lr_schedule(
            t.lr_scheduler, o, warmup, total_steps, t))
    else:
        sched = lr_schedule(t.lr_scheduler, opt, warmup, total_steps, t)
    return opt, sched
