"""The denoiser: built-in configurations, how each class is called, and its training target."""

from __future__ import annotations

from typing import Any

from ....compiler.read import builtin_models
from ..base import FamilyError
from .objectives import Objective, flow_sigmas, offset_noise, snr_weights

#: Subfolder names a diffusers pipeline folder uses for the denoiser.
DENOISER_DIRS = ("unet", "transformer")

#: `model.path = "builtin"` picks by flavour, from the one registry (compiler/read/builtin_models.py).
DEFAULT_BY_FLAVOUR = {**builtin_models.DEFAULT_BY_DIFFUSION_FLAVOUR, "": builtin_models.DEFAULT_BY_FAMILY["diffusion"]}




def tiny_denoiser_config(name: str, resolution: int) -> dict[str, Any]:
    """A built-in config in pixel space (3 channels) at ``data.resolution``."""
    entry = builtin_models.TINY_CONFIGS.get(name)
    if entry is None or entry["family"] != "diffusion":
        choices = [n for n, e in builtin_models.TINY_CONFIGS.items() if e["family"] == "diffusion"]
        raise FamilyError(f"unknown built-in diffusion model {name!r}: {', '.join(choices)}")
    cfg = builtin_models.config_dict(name)
    cfg["in_channels"] = cfg["out_channels"] = 3  # pixel space: no VAE to build or train
    cfg["sample_size"] = resolution
    if "pos_embed_max_size" in cfg:
        cfg["pos_embed_max_size"] = max(cfg["pos_embed_max_size"], 2 * resolution // cfg.get("patch_size", 2))
    return cfg


def is_flow_matching(scheduler) -> bool:
    return "FlowMatch" in type(scheduler).__name__


def noisy_inputs(scheduler, x0, generator=None, obj: Objective | None = None):
    """(model input, timesteps, target, per-image loss weights or None) for clean samples
    `x0`, as the scheduler says: noise (epsilon), v-prediction or sample targets for
    DDPM-style schedulers; the velocity ``noise - x0`` for flow matching. `obj`: the
    objective settings (`objectives`: shift, timestep sampling, min-SNR-γ, noise offset)."""
    import torch

    obj = obj or Objective()
    n = x0.shape[0]
    noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
    noise = offset_noise(obj, noise, generator)
    if is_flow_matching(scheduler):
        sigma = flow_sigmas(obj, n, tuple(x0.shape[-2:]), generator).to(x0.device, x0.dtype)
        s = sigma.view(-1, *([1] * (x0.dim() - 1)))
        noisy = (1.0 - s) * x0 + s * noise
        return noisy, sigma * scheduler.config.num_train_timesteps, noise - x0, None
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
    return noisy, t, target, snr_weights(obj, scheduler, t, pred)
