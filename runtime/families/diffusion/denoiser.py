"""The denoiser: built-in configurations, how each class is called, and its training target."""

from __future__ import annotations

from typing import Any

from ..base import FamilyError

#: Subfolder names a diffusers pipeline folder uses for the denoiser.
DENOISER_DIRS = ("unet", "transformer")

#: Built-ins this family trains, beside the shared registry (tiny_configs): a text-
#: conditioned transformer with flow matching (SD3 architecture).
TINY_SD3 = {
    "_class_name": "SD3Transformer2DModel", "sample_size": 32, "patch_size": 2, "in_channels": 3,
    "out_channels": 3, "num_layers": 2, "attention_head_dim": 16, "num_attention_heads": 2,
    "joint_attention_dim": 32, "caption_projection_dim": 32, "pooled_projection_dim": 32,
    "pos_embed_max_size": 32,
}
#: Fallback shapes when the shared registry is absent (same as its entries).
_FALLBACK = {
    "tiny-unet": {"_class_name": "UNet2DConditionModel", "sample_size": 16, "in_channels": 4, "out_channels": 4,
                  "block_out_channels": [32, 64], "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
                  "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"], "layers_per_block": 1,
                  "cross_attention_dim": 32, "attention_head_dim": 8, "norm_num_groups": 8},
    "tiny-dit": {"_class_name": "DiTTransformer2DModel", "num_attention_heads": 2, "attention_head_dim": 16,
                 "in_channels": 4, "out_channels": 4, "num_layers": 2, "sample_size": 16, "patch_size": 2,
                 "num_embeds_ada_norm": 10, "norm_num_groups": 8},
}
DEFAULT_BY_FLAVOUR = {"unet": "tiny-unet", "transformer": "tiny-dit", "dit": "tiny-dit", "sd3": "tiny-sd3", "": "tiny-unet"}




def kind_of(class_name: str) -> str:
    """How a denoiser is called: 'unet', 'sd3' (text + pooled) or 'dit' (class labels)."""
    if "UNet" in class_name:
        return "unet"
    if class_name.startswith("SD3") or "Flux" in class_name:
        return "sd3"
    if class_name.startswith("DiT"):
        return "dit"
    return "unet"


def tiny_denoiser_config(name: str, resolution: int) -> dict[str, Any]:
    """A built-in config in pixel space (3 channels) at ``data.resolution``."""
    if name == "tiny-sd3":
        cfg = dict(TINY_SD3)
    else:
        try:
            from tuner.compiler import builtin_models as tiny_configs

            cfg = tiny_configs.config_dict(name)
        except (ImportError, KeyError):
            if name not in _FALLBACK:
                raise FamilyError(f"unknown built-in diffusion model {name!r}: tiny-unet, tiny-dit or tiny-sd3") from None
            cfg = dict(_FALLBACK[name])
        if cfg.get("_class_name", "").startswith(("UNet", "DiT", "SD3")) is False:
            raise FamilyError(f"builtin:{name} is not a diffusion denoiser")
    cfg["in_channels"] = cfg["out_channels"] = 3  # pixel space: no VAE to build or train
    cfg["sample_size"] = resolution
    if "pos_embed_max_size" in cfg:
        cfg["pos_embed_max_size"] = max(cfg["pos_embed_max_size"], 2 * resolution // cfg.get("patch_size", 2))
    return cfg


def denoise(model, kind: str, x, t, cond: dict[str, Any]):
    """One denoiser call in the form its class expects; returns the prediction tensor."""
    if kind == "unet":
        out = model(x, t, encoder_hidden_states=cond["hidden"])
    elif kind == "sd3":
        out = model(hidden_states=x, encoder_hidden_states=cond["hidden"], pooled_projections=cond["pooled"],
                    timestep=t)
    else:
        out = model(x, timestep=t, class_labels=cond["labels"])
    return out.sample if hasattr(out, "sample") else out[0]


def is_flow_matching(scheduler) -> bool:
    return "FlowMatch" in type(scheduler).__name__


def noisy_inputs(scheduler, x0, generator=None):
    """(model input, timesteps, target) for clean samples `x0`, as the scheduler says:
    noise (epsilon), v-prediction or sample targets for DDPM-style schedulers; the
    velocity ``noise - x0`` for flow matching."""
    import torch

    n = x0.shape[0]
    noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
    if is_flow_matching(scheduler):
        sigma = torch.rand(n, generator=generator).to(x0.device, x0.dtype)
        s = sigma.view(-1, *([1] * (x0.dim() - 1)))
        noisy = (1.0 - s) * x0 + s * noise
        return noisy, sigma * scheduler.config.num_train_timesteps, noise - x0
    t = torch.randint(0, scheduler.config.num_train_timesteps, (n,), generator=generator).to(x0.device)
    noisy = scheduler.add_noise(x0, noise, t)
    pred = scheduler.config.prediction_type
    if pred == "epsilon":
        target = noise
    elif pred == "v_prediction":
        target = scheduler.get_velocity(x0, noise, t)
    elif pred == "sample":
        target = x0
    else:
        raise FamilyError(f"unsupported prediction_type {pred!r} in the scheduler config")
    return noisy, t, target
