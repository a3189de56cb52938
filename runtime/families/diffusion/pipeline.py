"""Sampling images around a trained denoiser (validation), as a diffusers pipeline."""

from __future__ import annotations

import json
from pathlib import Path

from .tuner_pipeline import sample, to_pil


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
            images = sample(self.denoiser, self.kind, self.scheduler, self.conditioner, self.vae, prompts, labels,
                            height, width, num_inference_steps, seed, self._execution_device)
            return images if output_type == "pt" else to_pil(images)

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
    for i, (img, prompt) in enumerate(zip(images, prompts, strict=False)):
        safe = "".join(c if c.isalnum() else "_" for c in prompt)[:48]
        img.save(folder / f"{i:02d}_{safe}.png")
    (folder / "prompts.json").write_text(json.dumps(prompts, indent=2) + "\n")
    grid_image(images, scale=scale).save(folder / "grid.png")


def make_pipeline(denoiser, scheduler, conditioner=None, vae=None, kind: str = "unet"):
    return _pipeline_class()(denoiser, scheduler, conditioner, vae, kind)
