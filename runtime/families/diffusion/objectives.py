"""The training objectives SimpleTuner's users set (``training.*``; SimpleTuner's flag names
are the keys' aliases): flow-matching shift, fixed or resolution-dependent; timestep
sampling; min-SNR-γ loss weights for ε / v prediction; noise offset.

* Shift (``flow_shift``, SimpleTuner's ``flow_schedule_shift``): a sampled sigma ``s``
  becomes ``shift·s / (1 + (shift − 1)·s)`` (SD3's and Flux's time shift), more training at
  high noise for ``shift > 1``.
* Resolution-dependent shift (``flow_auto_shift``, ``flow_schedule_auto_shift``): ``shift =
  exp(mu)``, ``mu`` linear in the latent's token count from 0.5 at 256 tokens to 1.15 at
  4096 (diffusers' ``calculate_shift``, Flux's defaults), so a larger bucket trains noisier.
* Timestep sampling (``timestep_sampling``, ``flow_timestep_sampling``): ``uniform``, or
  ``logit_normal`` (``sigmoid(N(logit_mean, logit_std))``, SD3's choice) for flow matching.
* Min-SNR-γ (``snr_gamma``): per-image weights ``min(SNR, γ)/SNR`` (ε), ``min(SNR, γ)/(SNR + 1)``
  (v); flow matching has no such SNR weighting and the compiler refuses the key there.
* Noise offset (``noise_offset``): ``noise += offset · N(0, 1)`` per image and channel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ....compiler.keys.choices import TimestepSampling

#: diffusers' ``calculate_shift`` defaults (Flux's scheduler config).
BASE_SEQ, MAX_SEQ, BASE_SHIFT, MAX_SHIFT = 256, 4096, 0.5, 1.15


@dataclass(frozen=True)
class Objective:
    shift: float = 1.0
    auto_shift: bool = False
    sampling: TimestepSampling = "uniform"
    logit_mean: float = 0.0
    logit_std: float = 1.0
    snr_gamma: float = 0.0
    noise_offset: float = 0.0
    patch: int = 1

    @classmethod
    def from_settings(cls, t: Any, patch: int = 1) -> Objective:
        return cls(t.flow_shift, t.flow_auto_shift, t.timestep_sampling, t.logit_mean, t.logit_std, t.snr_gamma,
                   t.noise_offset, patch)

    def shift_for(self, latent_hw: tuple[int, int]) -> float:
        if not self.auto_shift:
            return self.shift
        tokens = (latent_hw[0] // self.patch) * (latent_hw[1] // self.patch)
        m = (MAX_SHIFT - BASE_SHIFT) / (MAX_SEQ - BASE_SEQ)
        return math.exp(BASE_SHIFT + m * (tokens - BASE_SEQ))


def flow_sigmas(obj: Objective, n: int, latent_hw: tuple[int, int], generator=None):
    """``n`` training sigmas in (0, 1): sampled, then shifted."""
    import torch

    if obj.sampling == "logit_normal":
        sigma = torch.sigmoid(obj.logit_mean + obj.logit_std * torch.randn(n, generator=generator))
    else:
        sigma = torch.rand(n, generator=generator)
    shift = obj.shift_for(latent_hw)
    return shift * sigma / (1 + (shift - 1) * sigma)


def offset_noise(obj: Objective, noise, generator=None):
    import torch

    if not obj.noise_offset:
        return noise
    n, c = noise.shape[:2]
    extra = torch.randn((n, c) + (1,) * (noise.dim() - 2), generator=generator, dtype=noise.dtype)
    return noise + obj.noise_offset * extra.to(noise.device)


def snr_weights(obj: Objective, scheduler, t, prediction: str):
    """Min-SNR-γ weights of timesteps `t` (None when off)."""
    if not obj.snr_gamma:
        return None
    import torch

    ac = scheduler.alphas_cumprod.to(t.device)[t].float()
    snr = ac / (1 - ac)
    clipped = torch.clamp(snr, max=obj.snr_gamma)
    if prediction == "v_prediction":
        return clipped / (snr + 1)
    if prediction == "sample":
        return clipped
    return clipped / snr
