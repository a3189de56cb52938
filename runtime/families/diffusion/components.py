"""Where a diffusion run's parts come from: the denoiser's config, the scheduler, the frozen
text side and VAE, for a built-in (tiny, built here) or a local diffusers folder.

`Components` is a mixin of `family.DiffusionFamily` (it reads ``self.settings`` and
``self.ctx``). Three kinds of model:

* the built-in stand-ins (``tiny-unet``, ``tiny-dit``): pixel space, one tiny CLIP encoder;
* the real models' pipelines (`real_models`: ``tiny-sdxl``, ``tiny-flux``, ``tiny-sd3``, or a
  folder whose ``model_index.json`` names ``StableDiffusionXLPipeline``, ``FluxPipeline`` or
  ``StableDiffusion3Pipeline``): latent space, the pipeline's own text encoders;
* any other diffusers folder: ``unet/`` or ``transformer/``, ``scheduler/``, optionally one
  CLIP ``text_encoder/`` + ``tokenizer/`` and ``vae/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..base import FamilyError
from . import real_models
from .conditioning import TextConditioner, load_text_conditioner, load_vae
from .denoiser import DEFAULT_BY_FLAVOUR, DENOISER_DIRS, tiny_denoiser_config
from .tuner_pipeline import kind_of


class Components:
    settings: Any
    ctx: Any
    _cond: Any
    _vae: Any
    _scheduler: Any
    _train_scheduler: Any
    loaded: list[str]  # "text" / "vae" each time one is built or loaded (what a cached run never does)

    def _builtin(self) -> str | None:
        path = self.settings.model.path.strip()
        if path == "builtin":
            return DEFAULT_BY_FLAVOUR.get(self.settings.model.flavour.lower(), "tiny-unet")
        if path.startswith("builtin:"):
            return path.split(":", 1)[1].strip() or "tiny-unet"
        return None

    def _folder(self) -> Path:
        d = self.ctx.resolve(self.settings.model.path)
        if not d.is_dir():
            raise FamilyError(f"model.path {d} is not a diffusers folder")
        return d

    def _denoiser_dir(self) -> Path:
        d = self._folder()
        if (d / "config.json").is_file() and not any((d / s).is_dir() for s in DENOISER_DIRS):
            return d  # a bare denoiser folder
        flavour = self.settings.model.flavour.lower()
        order = ("transformer", "unet") if flavour in ("transformer", "dit", "sd3", "flux") else DENOISER_DIRS
        for sub in order:
            if (d / sub / "config.json").is_file():
                return d / sub
        raise FamilyError(f"{d} holds no denoiser (looked for unet/ and transformer/ with a config.json)")

    def pipeline_kind(self) -> str | None:
        """'sdxl', 'flux' or 'sd3' for the real models' pipelines (`real_models`), else None."""
        name = self._builtin()
        if name is not None:
            pipe = real_models.builtin_pipeline(name)
            return real_models.PIPELINES[pipe["class_name"]] if pipe else None
        folder = real_models.folder_pipeline(self._folder())
        return real_models.PIPELINES[folder] if folder else None

    def denoiser_config(self) -> dict[str, Any]:
        name = self._builtin()
        if name is None:
            return json.loads((self._denoiser_dir() / "config.json").read_text())
        pipe = real_models.builtin_pipeline(name)
        if pipe is None:
            return tiny_denoiser_config(name, self.settings.data.resolution)
        from ....compiler.read import builtin_models

        cfg = builtin_models.config_dict(name)  # latent space: the tiny VAE halves each side
        if "sample_size" in cfg:
            cfg["sample_size"] = max(8, self.settings.data.resolution // 2)
        return cfg

    def denoiser_kind(self) -> str:
        """How the denoiser is called (`tuner_pipeline.kind_of`)."""
        cfg = self.denoiser_config()
        return kind_of(cfg["_class_name"], cfg)

    def scheduler(self):
        """The model's scheduler (the one its pipeline samples with)."""
        if self._scheduler is None:
            import diffusers

            name = self._builtin()
            folder = None if name is not None else self._folder() / "scheduler"
            pipe = real_models.builtin_pipeline(name)
            if pipe is not None:
                self._scheduler = real_models.tiny_scheduler(pipe)
            elif folder is not None and (folder / "scheduler_config.json").is_file():
                cfg = json.loads((folder / "scheduler_config.json").read_text())
                cls = getattr(diffusers, cfg.get("_class_name", "DDPMScheduler"), diffusers.DDPMScheduler)
                self._scheduler = cls.from_pretrained(str(folder))
            elif self.denoiser_kind() in ("sd3", "dit", "flux") and name is not None:
                self._scheduler = diffusers.FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
            else:
                self._scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2",
                                                          prediction_type="epsilon", clip_sample=False)
        return self._scheduler

    def train_scheduler(self):
        """The noise schedule of training: flow matching as is; a sampling-only scheduler
        (SDXL's EulerDiscreteScheduler) as the DDPMScheduler of its config, as diffusers'
        training scripts make it."""
        sched = self.scheduler()
        if self._train_scheduler is None or self._train_scheduler[0] is not sched:  # made from this one
            import diffusers

            if "FlowMatch" in type(sched).__name__ or isinstance(sched, diffusers.DDPMScheduler):
                self._train_scheduler = (sched, sched)
            else:
                self._train_scheduler = (sched, diffusers.DDPMScheduler.from_config(sched.config))
        return self._train_scheduler[1]

    def conditioner(self) -> TextConditioner | real_models.PipelineText | None:
        """The frozen text side (None for class-conditional denoisers)."""
        if self.denoiser_kind() == "dit":
            return None
        if self._cond is None:
            kind = self.pipeline_kind()
            name = self._builtin()
            if kind is not None:
                pipe = real_models.builtin_pipeline(name)
                text = real_models.tiny_text(pipe) if pipe else real_models.folder_text(self._folder())
                self._cond = real_models.PipelineText(kind, text)
                self.loaded.append("text")
                return self._cond
            cfg = self.denoiser_config()
            hidden = cfg.get("cross_attention_dim") or cfg.get("joint_attention_dim") or 32
            pooled = cfg.get("pooled_projection_dim") or hidden
            builtin_text = name is not None or not (self._folder() / "text_encoder").is_dir()
            self._cond = load_text_conditioner(None if builtin_text else self._folder(), hidden, pooled)
            self.loaded.append("text")
        return self._cond

    def has_text(self) -> bool:
        return self.denoiser_kind() != "dit"

    def drop_encoders(self) -> None:
        """Forget the VAE and text encoder (after the cache is built: training never needs them)."""
        self._cond = self._vae = None

    def vae(self):
        if self._vae is None:
            pipe = real_models.builtin_pipeline(self._builtin())
            if pipe is not None:
                self._vae = real_models.tiny_vae(pipe)
            elif self._builtin() is None and (self._folder() / "vae").is_dir():
                self._vae = load_vae(self._folder())
            if self._vae is not None:
                self.loaded.append("vae")
        return self._vae

    def _vae_factor(self) -> int:
        """Pixels per latent side (1: pixel space)."""
        if real_models.builtin_pipeline(self._builtin()) is not None:
            return 2
        if self._builtin() is None and (self._folder() / "vae" / "config.json").is_file():
            return real_models.vae_factor(json.loads((self._folder() / "vae" / "config.json").read_text()))
        return 1

    def _multiple(self) -> int:
        """What every bucket side is a multiple of: the VAE's factor times the denoiser's
        (patches, U-Net levels, Flux's 2x2 packing)."""
        cfg = self.denoiser_config()
        mult = cfg.get("patch_size", 1) or 1
        if "block_out_channels" in cfg:
            mult *= 2 ** (len(cfg["block_out_channels"]) - 1)
        if self.denoiser_kind() == "flux":
            mult *= 2
        return max(8, mult * self._vae_factor())

    def pipeline_components(self) -> dict[str, Any]:
        """The text encoders and tokenizers by component name, for the export."""
        cond = self.conditioner()
        if isinstance(cond, real_models.PipelineText):
            return dict(cond.components)
        if cond is None:
            return {}
        return {"text_encoder": cond.encoder, "tokenizer": cond.tokenizer}
