"""A LoRA run's adapter in the format the diffusers / ComfyUI world loads:
``OUTPUT_DIR/final/lora/pytorch_lora_weights.safetensors``, written by the exported
pipeline class's own ``save_lora_weights`` (keys ``unet.<module>.lora_A.weight`` /
``transformer.…``, PEFT-style, with the adapter's rank and alpha as metadata), so that
``pipeline.load_lora_weights("OUTPUT_DIR/final/lora")`` on the base model's pipeline applies it.

Only diffusers' own pipelines have ``load_lora_weights`` (Stable Diffusion, SDXL, SD3, Flux);
the built-in pixel-space models export as `TunerPipeline`, which has none: their adapter
stays in PEFT's own form (``<denoiser>_lora/``) and no ``lora/`` folder is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PREFIX = "base_model.model."


def adapter(peft_model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(LoRA weights keyed by the denoiser's module paths, the adapter's config as metadata),
    read before the adapter is merged away."""
    from peft import get_peft_model_state_dict

    state = {k[len(PREFIX):] if k.startswith(PREFIX) else k: v.detach().to("cpu").contiguous().clone()
             for k, v in get_peft_model_state_dict(peft_model).items()}
    cfg = peft_model.peft_config["default"]
    meta = {"r": cfg.r, "lora_alpha": cfg.lora_alpha, "target_modules": sorted(cfg.target_modules),
            "lora_dropout": cfg.lora_dropout, "bias": cfg.bias}
    return state, meta


def write_lora(weights: tuple[dict[str, Any], dict[str, Any]], pipeline: str, sub: str, out_dir: Path) -> bool:
    """Write ``out_dir/lora/`` (`weights` from `adapter`) with the exported pipeline class
    `pipeline`'s ``save_lora_weights``; False when that class has none."""
    import diffusers

    cls = getattr(diffusers, pipeline, None)
    if cls is None or not hasattr(cls, "save_lora_weights"):
        return False
    layers = "unet" if sub == "unet" else "transformer"
    cls.save_lora_weights(str(out_dir / "lora"), **{f"{layers}_lora_layers": weights[0],
                                                    f"{layers}_lora_adapter_metadata": weights[1]})
    return True
