"""Bytes of training state held by THIS rank: parameters, gradients, optimizer state.

`rank_state_bytes(model, optimizer)` is measured, not estimated: it walks the tensors the
rank really holds after `accelerator.prepare` (and, for optimizer state, after a step):

* DDP / single: full parameters and gradients; optimizer state tensors.
* FSDP2: DTensor parameters count their local shard (`to_local()`); same for gradients and
  for the optimizer state created on them.
* FSDP v1: flat parameters hold the local shard already.
* DeepSpeed ZeRO-1/2: parameters are full on every rank; gradients are partitioned from
  stage 2 on (counted as the rank's partition); the inner optimizer's state is on the
  partition. The fp32 master copy of the partition that ZeRO keeps is reported as
  ``master`` (it is not part of ``optimizer``).
* DeepSpeed ZeRO-3: parameters count their local partition (``ds_tensor``).

Offloaded state (CPU offload) still counts: it is held by this rank, in host memory.
"""

from __future__ import annotations

from typing import Any


def _local(t: Any):
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _nbytes(t: Any) -> int:
    t = _local(t)
    return int(t.numel() * t.element_size())


def _engine(model: Any):
    """The DeepSpeed engine behind `model`, or None."""
    try:
        from deepspeed import DeepSpeedEngine
    except Exception:  # deepspeed not installed
        return None
    return model if isinstance(model, DeepSpeedEngine) else None


def _optimizer_state_bytes(opt: Any) -> int:
    total = 0
    for state in getattr(opt, "state", {}).values():
        if isinstance(state, dict):
            for v in state.values():
                if hasattr(v, "numel") and v.dim() > 0:
                    total += _nbytes(v)
    return total


def rank_state_bytes(model: Any, optimizer: Any = None) -> dict[str, int]:
    """{'params', 'grads', 'optimizer', 'master', 'total'} in bytes for this rank.

    `model` is the prepared model (DDP/FSDP module or DeepSpeed engine); `optimizer` the
    prepared optimizer (accelerate's wrapper is unwrapped here). Gradients are counted as
    the buffers this rank holds for its trainable parameters during a step (measured where
    present, else the size they are allocated at).
    """
    inner = getattr(optimizer, "optimizer", optimizer)
    engine = _engine(model)
    out = {"params": 0, "grads": 0, "optimizer": 0, "master": 0}
    if engine is not None:
        stage = engine.zero_optimization_stage()
        zopt = engine.optimizer
        for p in engine.module.parameters():
            ds_tensor = getattr(p, "ds_tensor", None)
            out["params"] += _nbytes(ds_tensor) if ds_tensor is not None else _nbytes(p)
        partitions = getattr(zopt, "single_partition_of_fp32_groups", None) or \
            getattr(zopt, "fp32_partitioned_groups_flat", None) or []
        part_numel = sum(int(t.numel()) for t in partitions)
        out["master"] = sum(_nbytes(t) for t in partitions)
        if stage >= 2 and part_numel:
            out["grads"] = part_numel * 4  # fp32 gradient partition
        else:
            out["grads"] = sum(_nbytes(p) for p in engine.module.parameters() if p.requires_grad)
        out["optimizer"] = _optimizer_state_bytes(getattr(zopt, "optimizer", zopt))
    else:
        for p in model.parameters():
            out["params"] += _nbytes(p)
            if p.requires_grad:
                out["grads"] += _nbytes(p.grad) if p.grad is not None else _nbytes(p)
        if inner is not None:
            out["optimizer"] = _optimizer_state_bytes(inner)
    out["total"] = out["params"] + out["grads"] + out["optimizer"] + out["master"]
    return out
