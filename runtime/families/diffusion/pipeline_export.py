"""The export as a diffusers pipeline folder: ``model_index.json`` and one folder per
component, so that ``DiffusionPipeline.from_pretrained(folder)`` loads it.

* A U-Net with a VAE and a CLIP text encoder: diffusers' ``StableDiffusionPipeline``
  (no safety checker).
* A DiT with a VAE: diffusers' ``DiTPipeline``.
* The real models (`real_models`: SDXL, Flux, SD3, built-in or from a folder):
  ``StableDiffusionXLPipeline``, ``FluxPipeline``, ``StableDiffusion3Pipeline``, with every
  text encoder and tokenizer the run used.
* Anything else (the built-in pixel-space models, SD3-style transformers with one text
  encoder): `tuner_pipeline.TunerPipeline`, whose source is written beside
  ``model_index.json`` as ``tuner_pipeline.py`` (load with ``trust_remote_code=True``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from . import tuner_pipeline
from .real_models import PIPELINES, PipelineText

CUSTOM_FILE = "tuner_pipeline"


def pipeline_name(class_name: str, conditioner, vae) -> str:
    """The diffusers pipeline class an export of this denoiser loads as."""
    if isinstance(conditioner, PipelineText) and vae is not None:
        return next(name for name, kind in PIPELINES.items() if kind == conditioner.kind)
    encoder = type(conditioner.encoder).__name__ if conditioner is not None else ""
    if class_name == "UNet2DConditionModel" and vae is not None and encoder == "CLIPTextModel":
        return "StableDiffusionPipeline"
    if class_name == "DiTTransformer2DModel" and vae is not None:
        return "DiTPipeline"
    return "TunerPipeline"


def write_pipeline(out_dir: Path, denoiser, sub: str, scheduler, conditioner, vae) -> str:
    """Save the pipeline around `denoiser` (a plain diffusers model) into `out_dir`; returns
    the pipeline class name."""
    import diffusers

    name = pipeline_name(type(denoiser).__name__, conditioner, vae)
    text: dict[str, Any] = {}
    if isinstance(conditioner, PipelineText):
        text = dict(conditioner.components)
    elif conditioner is not None:
        text = {"text_encoder": conditioner.encoder, "tokenizer": conditioner.tokenizer}
    if name in PIPELINES:
        extra = {"add_watermarker": False} if name == "StableDiffusionXLPipeline" else {}
        pipe = getattr(diffusers, name)(vae=vae, scheduler=scheduler, **{sub: denoiser}, **text, **extra)
    elif name == "StableDiffusionPipeline":
        pipe = diffusers.StableDiffusionPipeline(vae=vae, unet=denoiser, scheduler=scheduler, safety_checker=None,
                                                 feature_extractor=None, requires_safety_checker=False, **text)
    elif name == "DiTPipeline":
        pipe = diffusers.DiTPipeline(transformer=denoiser, vae=vae, scheduler=scheduler)
    else:
        pipe = tuner_pipeline.TunerPipeline(scheduler=scheduler, vae=vae, **{sub: denoiser}, **text)
    pipe.save_pretrained(str(out_dir), safe_serialization=True)
    if name == "TunerPipeline":
        shutil.copyfile(tuner_pipeline.__file__, out_dir / f"{CUSTOM_FILE}.py")
        index = out_dir / "model_index.json"
        data = json.loads(index.read_text())
        data["_class_name"] = [CUSTOM_FILE, "TunerPipeline"]
        index.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return name
