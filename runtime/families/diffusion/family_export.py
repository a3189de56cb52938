"""The diffusion family's export: a diffusers pipeline folder (`pipeline_export`) with
``model_index.json``, ``unet/`` or ``transformer/``, ``scheduler/``, the text side, ``vae/``
when there is one, ``ema_<denoiser>/`` when EMA was on, and ``<denoiser>_lora/`` (the
unmerged PEFT adapter) and ``lora/`` (the adapter in diffusers' format, `lora_export`) for a
LoRA run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..base import FamilyError
from .lora_export import adapter, write_lora
from .pipeline_export import write_pipeline

EXPORT_META = "tuner_diffusion.json"


def export(fam: Any, state_dict, out_dir: Path) -> None:
    """`fam`: the `family.DiffusionFamily` (not imported: it imports this module)."""
    import torch

    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = fam.denoiser_config()
    kind = fam.denoiser_kind()
    sub = "unet" if kind in ("unet", "sdxl") else "transformer"
    lora = fam.settings.model.type == "lora"
    model = fam._fresh_denoiser()
    if lora:
        model = fam._lora(model)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state_dict.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise FamilyError(f"checkpoint does not match the denoiser: missing {list(missing)[:5]}, "
                          f"unexpected {list(unexpected)[:5]}")
    weights = None
    if lora:
        model.save_pretrained(str(out_dir / f"{sub}_lora"))
        weights = adapter(model)
        model = model.merge_and_unload()
    pipeline = write_pipeline(out_dir, model, sub, fam.scheduler(), fam.conditioner(), fam.vae())
    diffusers_lora = weights is not None and write_lora(weights, pipeline, sub, out_dir)
    ema = fam._ema_export
    if ema:
        ema_model = fam._fresh_denoiser()
        base = model.state_dict()
        ema_state = {k: v for k, v in ema.items() if k in base}
        if len(ema_state) == len(base):
            ema_model.load_state_dict(ema_state)
            ema_model.save_pretrained(str(out_dir / f"ema_{sub}"), safe_serialization=True)
    meta = {"denoiser": sub, "class_name": cfg["_class_name"], "kind": kind,
            "resolution": fam.settings.data.resolution, "ema": bool(ema), "pipeline": pipeline,
            "lora": "lora" if diffusers_lora else (f"{sub}_lora" if lora else "")}
    (out_dir / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n")
