"""Exporting a saved checkpoint as a full model that ``from_pretrained`` loads.

Works in one process, without ranks: the checkpoint's own `tuner_checkpoint.json` carries
the run's manifest (family, model, strategy), so nothing else is needed.

* DeepSpeed (any ZeRO stage): DeepSpeed's ``zero_to_fp32`` merges the partitions.
* FSDP sharded (DCP folder ``pytorch_model_fsdp_0/``): read with
  ``torch.distributed.checkpoint`` into one state dict (no process group needed).
* FSDP full (``pytorch_model_fsdp.bin``) and DDP (``model.safetensors``): already full.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from . import checkpoint as ckpt
from .artefacts import RunError


def full_state_dict(path: Path, meta: ckpt.CheckpointMeta) -> dict:
    import torch

    if meta.strategy.startswith("zero"):
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        return dict(get_fp32_state_dict_from_zero_checkpoint(str(path)))
    dcp_dir = path / "pytorch_model_fsdp_0"
    if dcp_dir.is_dir():
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "full.pt"
            dcp_to_torch_save(str(dcp_dir), str(target))
            state = torch.load(target, map_location="cpu", weights_only=True)
        return state.get("model", state)
    for name in ("pytorch_model_fsdp.bin", "pytorch_model_fsdp_0.bin"):
        if (path / name).is_file():
            return torch.load(path / name, map_location="cpu", weights_only=True)
    st = path / "model.safetensors"
    if st.is_file():
        from safetensors.torch import load_file

        return load_file(str(st))
    binf = path / "pytorch_model.bin"
    if binf.is_file():
        return torch.load(binf, map_location="cpu", weights_only=True)
    raise RunError(f"{path} holds no model state tuner can read (strategy {meta.strategy})")


def export_checkpoint(path: Path, out_dir: Path) -> Path:
    from tuner.compiler.settings import Settings

    from .families import get_family
    from .families.base import FamilyContext
    from .trainer import plain_model_init

    path = Path(path)
    if not path.is_dir():
        raise RunError(f"checkpoint not found: {path}")
    if path.name == ckpt.LATEST or (path / ckpt.LATEST).is_file() and not (path / ckpt.META).is_file():
        found = ckpt.latest_checkpoint(path if path.is_dir() else path.parent)
        if found is None:
            raise RunError(f"no complete checkpoint in {path}")
        path = found
    meta = ckpt.read_meta(path)
    manifest = meta.manifest or {}
    if "settings" not in manifest:
        raise RunError(f"{path / ckpt.META} carries no run manifest; cannot tell which model it holds")
    settings = Settings.from_dict(manifest["settings"])
    # The trainer records the project directory beside the manifest (whose settings_file is
    # relative to the build directory, which a checkpoint does not know).
    base_dir = Path(manifest["project_dir"]) if manifest.get("project_dir") else path.resolve().parent
    fam = get_family(meta.family)(FamilyContext(settings=settings, base_dir=base_dir, seed=settings.training.seed))
    state = full_state_dict(path, meta)
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with plain_model_init():
        fam.export(state, tmp)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    return out_dir
