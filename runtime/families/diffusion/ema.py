"""EMA of the trainable parameters, sharded like the model (one shadow per local shard)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..base import FamilyError


def local_shard(p):
    """The part of a parameter this rank holds: FSDP2 DTensor shard, ZeRO-3 partition, or all."""
    if hasattr(p, "ds_tensor") and getattr(p, "ds_tensor", None) is not None and hasattr(p, "ds_numel"):
        return p.ds_tensor
    if hasattr(p, "to_local"):
        return p.to_local()
    return p.data


def is_sharded(p) -> bool:
    return hasattr(p, "to_local") or (getattr(p, "ds_tensor", None) is not None and hasattr(p, "ds_numel"))


class EMA:
    """Exponential moving average of parameters, one shadow per LOCAL shard.

    The seed keeps EMA off the Accelerator (so ZeRO does not touch it) and on the CPU by
    default. Shadows are fp32 copies of what this rank holds, so under FSDP2 / ZeRO-3 the
    EMA is sharded exactly like the model and costs 1/world of the full copy per rank.
    Decay warms up as diffusers' EMAModel does: ``min(decay, (1 + n) / (10 + n))``.
    """

    def __init__(self, named_params: Iterable[tuple[str, Any]], decay: float = 0.999, device: str = "cpu") -> None:
        import torch

        self.decay = float(decay)
        self.device = torch.device(device)
        self.names: list[str] = []
        self.params: list[Any] = []
        self.shadows: list[Any] = []
        for name, p in named_params:
            self.names.append(name)
            self.params.append(p)
            self.shadows.append(local_shard(p).detach().to(self.device, torch.float32, copy=True))
        self.num_updates = 0
        self.sharded = any(is_sharded(p) for p in self.params)

    def current_decay(self) -> float:
        n = self.num_updates
        return min(self.decay, (1 + n) / (10 + n))

    def update(self) -> None:
        import torch

        d = self.current_decay()
        with torch.no_grad():
            for p, s in zip(self.params, self.shadows, strict=False):
                s.mul_(d).add_(local_shard(p).detach().to(s.device, torch.float32), alpha=1.0 - d)
        self.num_updates += 1

    # -- persistence -------------------------------------------------------------------
    def save(self, folder: Path, rank: int, world_size: int) -> None:
        """Write this rank's shadows (all ranks when sharded; rank 0 otherwise) + ema.json."""
        from safetensors.torch import save_file

        folder = Path(folder) / "ema"
        folder.mkdir(parents=True, exist_ok=True)
        if self.sharded or rank == 0:
            tensors = {n: s.contiguous() for n, s in zip(self.names, self.shadows, strict=False)}
            save_file(tensors, str(folder / f"rank{rank if self.sharded else 0}.safetensors"))
        if rank == 0:
            meta = {"decay": self.decay, "num_updates": self.num_updates, "sharded": self.sharded,
                    "world_size": world_size, "parameters": len(self.names)}
            (folder / "ema.json").write_text(json.dumps(meta, indent=2) + "\n")

    def load(self, folder: Path, rank: int, world_size: int) -> None:
        from safetensors.torch import load_file

        folder = Path(folder) / "ema"
        meta_file = folder / "ema.json"
        if not meta_file.is_file():
            raise FamilyError(f"checkpoint {folder.parent} has no EMA state (training.ema was off when it was "
                              "written); turn training.ema off to resume it, or start a new run")
        meta = json.loads(meta_file.read_text())
        if meta["sharded"] != self.sharded:
            raise FamilyError(f"the EMA in {folder.parent} was saved {'sharded' if meta['sharded'] else 'whole'} "
                              f"over {meta['world_size']} rank(s); this run holds it "
                              f"{'sharded' if self.sharded else 'whole'} over {world_size}")
        if self.sharded and meta["world_size"] != world_size:  # another world size: re-cut each shadow
            tensors = self._resharded(folder, int(meta["world_size"]), rank, world_size)
        else:
            tensors = load_file(str(folder / f"rank{rank if self.sharded else 0}.safetensors"))
        for i, name in enumerate(self.names):
            if name not in tensors or tensors[name].shape != self.shadows[i].shape:
                raise FamilyError(f"EMA state in {folder} does not match the model at {name!r}")
            self.shadows[i] = tensors[name].to(self.device)
        self.decay = float(meta["decay"])
        self.num_updates = int(meta["num_updates"])

    def _resharded(self, folder: Path, saved_world: int, rank: int, world_size: int) -> dict[str, Any]:
        """This rank's shadows cut from the shards `saved_world` ranks saved: each full shadow
        joined in rank order (FSDP2's dim-0 chunks; ZeRO-3's padded flat partitions), then cut
        the way this run shards the parameter."""
        import torch
        from safetensors.torch import load_file

        parts = [load_file(str(folder / f"rank{r}.safetensors")) for r in range(saved_world)]
        out = {}
        for name, p in zip(self.names, self.params, strict=False):
            if name not in parts[0]:
                continue
            if hasattr(p, "to_local"):
                from torch.distributed.tensor import distribute_tensor

                full = torch.cat([part[name] for part in parts])
                out[name] = distribute_tensor(full.to(p.to_local().device), p.device_mesh, p.placements,
                                              src_data_rank=None).to_local()
            else:  # ZeRO-3: flat, padded to world x partition
                flat = torch.cat([part[name].flatten() for part in parts])[: p.ds_numel]
                n = p.ds_tensor.numel()
                flat = torch.nn.functional.pad(flat, (0, max(0, n * world_size - flat.numel())))
                out[name] = flat[rank * n:(rank + 1) * n].clone()
        return out

    def full_state(self) -> dict[str, Any]:
        """Full (unsharded) CPU tensors, gathered across ranks. Collective: call on every rank."""
        import torch

        out = {}
        for name, p, s in zip(self.names, self.params, self.shadows, strict=False):
            if hasattr(p, "to_local"):
                from torch.distributed.tensor import DTensor

                local = s.to(p.to_local().device, p.dtype)
                dt = DTensor.from_local(local, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                out[name] = dt.full_tensor().detach().cpu().float()
            elif getattr(p, "ds_tensor", None) is not None and hasattr(p, "ds_numel"):
                import torch.distributed as dist

                part = s.to(p.ds_tensor.device)
                parts = [torch.empty_like(part) for _ in range(dist.get_world_size())]
                dist.all_gather(parts, part.contiguous())
                out[name] = torch.cat(parts)[: p.ds_numel].view(p.ds_shape).cpu().float()
            else:
                out[name] = s.detach().cpu().float()
        return out
