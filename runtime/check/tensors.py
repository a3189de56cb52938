"""What the rehearsal's observer reads off tensors, models and optimizers (observer.py):
local shards, batch fingerprints, how a prepared model holds its parameters, checksums."""

from __future__ import annotations

import hashlib
from typing import Any


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def fingerprint(value) -> tuple[str, int] | None:
    import torch

    tensors = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            tensors.append(v)
        elif isinstance(v, dict):
            for k in sorted(v, key=str):
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(value)
    if not tensors:
        return None
    h = hashlib.sha1()
    for t in tensors:
        h.update(local(t).detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16], int(tensors[0].shape[0]) if tensors[0].dim() else 1


def model_facts(model) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    full = local = trainable = trainable_local = 0
    for p in model.parameters():
        if hasattr(p, "to_local"):
            kind, n, k = "DTensor", p.numel(), p.to_local().numel()
        elif hasattr(p, "ds_numel"):
            kind, n, k = "ZeRO-3", int(p.ds_numel), int(p.ds_tensor.numel())
        elif getattr(p, "_is_flat_param", False) or type(p).__name__ == "FlatParameter":
            size = getattr(p, "_unpadded_unsharded_size", None)
            kind, n, k = "FlatParameter", int(size.numel()) if size is not None else p.numel(), p.numel()
        else:
            kind, n, k = "Tensor", p.numel(), p.numel()
        kinds[kind] = kinds.get(kind, 0) + 1
        full, local = full + n, local + k
        if p.requires_grad:
            trainable, trainable_local = trainable + n, trainable_local + k
    return {"kinds": kinds, "numel": full, "local_numel": local, "trainable": trainable,
            "trainable_local": trainable_local, "type": type(model).__name__,
            "dtypes": sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})}


def params(opt):
    return [p for g in opt.param_groups for p in g["params"]]


def checksum(params) -> list[float]:
    out = []
    for p in params:
        t = local(p).detach().double()
        out += [float(t.sum()), float((t * t).sum())]
    return out
