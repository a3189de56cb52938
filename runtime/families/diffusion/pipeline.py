"""Sampling images around a trained denoiser (validation), as a diffusers pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .denoiser import denoise


def _pipeline_class():
    from diffusers import DiffusionPipeline

    class TunerDiffusionPipeline(DiffusionPipeline):
        """Text- (or class-) to-image sampling around any denoiser tuner trains.

        Pixel space when ``vae`` is None, latent space otherwise. The denoiser may be the
        trained, sharded module itself (FSDP2 all-gathers in its forward and, with
        reshard-after-forward on, frees the gathered weights after each call).
        """

        def __init__(self, denoiser, scheduler, conditioner=None, vae=None, kind: str = "unet") -> None:
            super().__init__()
            # Registered by attribute, not `register_modules`: the denoiser may be a
            # dynamically created FSDP class, and nothing here is saved through the pipeline.
            self.denoiser, self.scheduler, self.conditioner, self.vae, self.kind = denoiser, scheduler, conditioner, vae, kind

        @property
        def _execution_device(self):
            return next(self.denoiser.parameters()).device

        def __call__(self, prompts: list[str], labels: list[int] | None = None, height: int = 32, width: int = 32,
                     num_inference_steps: int = 12, seed: int = 0, output_type: str = "pil"):
            import torch

            device = self._execution_device
            n = len(prompts)
            cond: dict[str, Any] = {"labels": torch.tensor(labels or [0] * n, device=device)}
            if self.conditioner is not None:
                cond["hidden"], cond["pooled"] = self.conditioner(prompts, device)
            channels, factor = 3, 1
            if self.vae is not None:
                channels = self.vae.config.latent_channels
                factor = 2 ** (len(self.vae.config.block_out_channels) - 1)
            gen = torch.Generator("cpu").manual_seed(seed)
            x = torch.randn((n, channels, height // factor, width // factor), generator=gen).to(device)
            self.scheduler.set_timesteps(num_inference_steps, device=device)
            x = x * getattr(self.scheduler, "init_noise_sigma", 1.0)
            for t in self.scheduler.timesteps:
                inp = self.scheduler.scale_model_input(x, t) if hasattr(self.scheduler, "scale_model_input") else x
                tt = t.expand(n).to(device)
                with torch.no_grad():
                    pred = denoise(self.denoiser, self.kind, inp, tt, cond)
                x = self.scheduler.step(pred.float(), t, x, return_dict=False)[0]
            if self.vae is not None:
                with torch.no_grad():
                    x = self.vae.decode(x / self.vae.config.scaling_factor).sample
            images = ((x.float().clamp(-1, 1) + 1) / 2).cpu()
            if output_type == "pt":
                return images
            from PIL import Image

            arr = (images.permute(0, 2, 3, 1).numpy() * 255).round().astype("uint8")
            return [Image.fromarray(a) for a in arr]

    return TunerDiffusionPipeline


def grid_image(images: list, scale: int = 1):
    """The images side by side, enlarged without smoothing (for a person to look at)."""
    from PIL import Image

    w, h = images[0].size
    grid = Image.new("RGB", (w * scale * len(images), h * scale))
    for i, im in enumerate(images):
        grid.paste(im.resize((w * scale, h * scale), Image.NEAREST), (i * w * scale, 0))
    return grid


def save_images(images: list, prompts: list[str], folder: Path, scale: int = 1) -> None:
    """One PNG per prompt (named after it), ``prompts.json`` and an enlarged ``grid.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (img, prompt) in enumerate(zip(images, prompts)):
        safe = "".join(c if c.isalnum() else "_" for c in prompt)[:48]
        img.save(folder / f"{i:02d}_{safe}.png")
    (folder / "prompts.json").write_text(json.dumps(prompts, indent=2) + "\n")
    grid_image(images, scale=scale).save(folder / "grid.png")


def make_pipeline(denoiser, scheduler, conditioner=None, vae=None, kind: str = "unet"):
    return _pipeline_class()(denoiser, scheduler, conditioner, vae, kind)
