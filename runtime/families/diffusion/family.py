"""`DiffusionFamily`: a diffusers denoiser trained on images, as the trainer drives it.

Only the denoiser is "the model": `build_model` returns it, so the trainer prepares,
shards (FSDP) or partitions (ZeRO-3) nothing else. The text encoder and VAE are frozen
attributes of the family (`conditioning`), moved to the batch's device, never wrapped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...data_sources.image_batches import prompts_of
from ..base import Family, FamilyContext, FamilyError
from ..lora import apply_lora
from ..recipes import ImageData
from .conditioning import TextConditioner, load_text_conditioner, load_vae, vae_latents
from .denoiser import DEFAULT_BY_FLAVOUR, DENOISER_DIRS, is_flow_matching, noisy_inputs, tiny_denoiser_config
from .ema import EMA
from .family_export import export
from .objectives import Objective
from .pipeline import make_pipeline, save_images
from .tuner_pipeline import denoise, kind_of

#: Default LoRA targets: the attention projections of diffusers' attention blocks.
DEFAULT_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


class DiffusionFamily(Family):
    name = "diffusion"
    unit = "img"

    def __init__(self, ctx: FamilyContext) -> None:
        super().__init__(ctx)
        self._cond: TextConditioner | None = None
        self._vae = None
        self._scheduler: Any = None
        self.ema: EMA | None = None
        self._ema_export: dict[str, Any] | None = None
        self._evals = 0
        self._denoiser_class = ""
        self.kind = ""
        self.cache: Any = None
        self.encoded = 0  # cache entries this rank encoded before training

    # -- where things come from -----------------------------------------------------
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
        order = ("transformer", "unet") if flavour in ("transformer", "dit", "sd3") else DENOISER_DIRS
        for sub in order:
            if (d / sub / "config.json").is_file():
                return d / sub
        raise FamilyError(f"{d} holds no denoiser (looked for unet/ and transformer/ with a config.json)")

    def denoiser_config(self) -> dict[str, Any]:
        name = self._builtin()
        if name is not None:
            return tiny_denoiser_config(name, self.settings.data.resolution)
        return json.loads((self._denoiser_dir() / "config.json").read_text())

    def scheduler(self):
        if self._scheduler is None:
            import diffusers

            name = self._builtin()
            folder = None if name is not None else self._folder() / "scheduler"
            if folder is not None and (folder / "scheduler_config.json").is_file():
                cfg = json.loads((folder / "scheduler_config.json").read_text())
                cls = getattr(diffusers, cfg.get("_class_name", "DDPMScheduler"), diffusers.DDPMScheduler)
                self._scheduler = cls.from_pretrained(str(folder))
            elif kind_of(self.denoiser_config()["_class_name"]) in ("sd3", "dit") and name is not None:
                self._scheduler = diffusers.FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
            else:
                self._scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2",
                                                          prediction_type="epsilon", clip_sample=False)
        return self._scheduler

    def conditioner(self) -> TextConditioner | None:
        """The frozen text side (None for class-conditional denoisers)."""
        kind = kind_of(self.denoiser_config()["_class_name"])
        if kind == "dit":
            return None
        if self._cond is None:
            cfg = self.denoiser_config()
            hidden = cfg.get("cross_attention_dim") or cfg.get("joint_attention_dim") or 32
            pooled = cfg.get("pooled_projection_dim") or hidden
            builtin_text = self._builtin() is not None or not (self._folder() / "text_encoder").is_dir()
            self._cond = load_text_conditioner(None if builtin_text else self._folder(), hidden, pooled)
        return self._cond

    def has_text(self) -> bool:
        return kind_of(self.denoiser_config()["_class_name"]) != "dit"

    def drop_encoders(self) -> None:
        """Forget the VAE and text encoder (after the cache is built: training never needs them)."""
        self._cond = self._vae = None

    def vae(self):
        if self._vae is None and self._builtin() is None and (self._folder() / "vae").is_dir():
            self._vae = load_vae(self._folder())
        return self._vae

    # -- model ----------------------------------------------------------------------
    def build_model(self, meta: bool = False):
        import diffusers
        import torch

        cfg = self.denoiser_config()
        cls_name = cfg["_class_name"]
        cls = getattr(diffusers, cls_name, None)
        if cls is None:
            raise FamilyError(f"diffusers has no model class {cls_name!r}")
        self._denoiser_class, self.kind = cls_name, kind_of(cls_name)
        self._check_objective()
        if meta:
            with torch.device("meta"):
                return cls.from_config(cfg)
        if self._builtin() is not None:
            return cls.from_config(cfg).to(torch.float32)
        return cls.from_pretrained(str(self._denoiser_dir()), torch_dtype=torch.float32)

    def _check_objective(self) -> None:
        """The compiler's refusals (compiler/plan/rules_runtime.py) for a model folder, whose
        scheduler only the run reads."""
        t = self.settings.training
        flow = is_flow_matching(self.scheduler())
        if flow and t.snr_gamma > 0:
            raise FamilyError("training.snr_gamma: min-SNR-gamma weights epsilon / v-prediction losses; this model's "
                              "scheduler is flow matching, where it does not apply: remove training.snr_gamma")
        if not flow and (t.flow_shift != 1.0 or t.flow_auto_shift or t.timestep_sampling != "uniform"):
            raise FamilyError("training.flow_shift / flow_auto_shift / timestep_sampling shape flow-matching sigmas; "
                              "this model's scheduler is DDPM: remove them")

    def prepare_model(self, model):
        s = self.settings
        if self.kind == "dit" and s.fsdp.enabled and s.fsdp.auto_wrap_policy == "transformer" and (
                "BasicTransformerBlock" in s.fsdp.transformer_layer_cls_to_wrap):
            # DiT's root forward calls transformer_blocks[0].norm1.emb itself (the final
            # AdaLN conditioning), outside the block's forward, where FSDP has not gathered it.
            raise FamilyError("DiTTransformer2DModel cannot have BasicTransformerBlock wrapped by FSDP (its root "
                              "forward calls into the first block); set fsdp.auto_wrap_policy = \"none\"")
        if s.training.gradient_checkpointing and hasattr(model, "enable_gradient_checkpointing"):
            model.enable_gradient_checkpointing()
        if s.model.type == "lora":
            model = self._lora(model)
        return model

    def _lora(self, model):
        return apply_lora(model, self.settings.model, DEFAULT_LORA_TARGETS)

    def wrap_classes(self, model) -> list[str]:
        if self.kind == "dit":
            return []  # see prepare_model: DiT is sharded as one unit
        found = {type(m).__name__ for m in model.modules()}
        wanted: list[str] = [c for c in ("BasicTransformerBlock", "JointTransformerBlock", "ResnetBlock2D") if c in found]
        return wanted or list(getattr(model, "_no_split_modules", None) or [])

    # -- data (runtime/data_sources/ reads and batches it) ------------------------------
    def data_recipe(self) -> ImageData:
        """Each image at its own bucket (sides a multiple of `_multiple`); DiT unpatchifies
        to a square, so it gets the square only; captions tokenised when the model takes text."""
        square = kind_of(self.denoiser_config()["_class_name"]) == "dit"
        return ImageData(multiple=self._multiple(), square=square,
                         tokenize=self._tokenize if self.has_text() else None)

    def _tokenize(self, captions: list[str]) -> dict[str, Any]:
        cond = self.conditioner()
        return cond.tokenize(captions) if cond is not None else {}

    def prepare_examples(self, train, val) -> None:
        """Every image's latent and every caption's embedding into the cache (`cached`)."""
        if self.settings.data.cache_latents:
            from . import cached

            prompts = self.validation_prompts(val)[0] if self.has_text() and val is not None else []
            self.cache, self.encoded = cached.build(self, [train, val], prompts)

    def _multiple(self) -> int:
        cfg = self.denoiser_config()
        mult = cfg.get("patch_size", 1) or 1
        if "block_out_channels" in cfg:
            mult *= 2 ** (len(cfg["block_out_channels"]) - 1)
        if self._builtin() is None and (self._folder() / "vae").is_dir():
            mult *= 8
        return max(8, mult)

    def batch_units(self, batch) -> int:
        return int(batch["labels"].shape[0])

    # -- optimisation ---------------------------------------------------------------
    def _condition(self, batch) -> dict[str, Any]:
        cond: dict[str, Any] = {"labels": batch["labels"]}
        if "hidden" in batch:  # from the cache
            cond["hidden"], cond["pooled"] = batch["hidden"], batch["pooled"]
            return cond
        c = self.conditioner()
        if c is not None:
            cond["hidden"], cond["pooled"] = c.encode(batch["input_ids"], batch["attention_mask"])
        return cond

    def noisy_inputs(self, x0, generator=None):
        """(model input, timesteps, target, loss weights or None) for clean samples `x0`, as
        the scheduler and the objective settings (`objectives`) say."""
        patch = int(self.denoiser_config().get("patch_size") or 1)
        return noisy_inputs(self.scheduler(), x0, generator, Objective.from_settings(self.settings.training, patch))

    def loss(self, model, batch, generator=None):
        x0 = batch["latents"] if "latents" in batch else vae_latents(self.vae(), batch["pixel_values"])
        noisy, t, target, weights = self.noisy_inputs(x0, generator)
        kind = self.kind or kind_of(self.denoiser_config()["_class_name"])
        pred = denoise(model, kind, noisy, t, self._condition(batch))
        per_image = (pred.float() - target.float()).pow(2).flatten(1).mean(1)
        return (per_image * weights).mean() if weights is not None else per_image.mean()

    # -- hooks: EMA, checkpoints ------------------------------------------------------
    def on_prepared(self, model, accelerator) -> None:
        """After `accelerator.prepare`: create the EMA from this rank's (sharded) parameters."""
        t = self.settings.training
        if not t.ema:
            return
        device = "cpu" if t.ema_device == "cpu" else accelerator.device
        unwrapped = accelerator.unwrap_model(model)
        self.ema = EMA([(n, p) for n, p in unwrapped.named_parameters() if p.requires_grad], t.ema_decay, device)

    def on_optimizer_step(self, model, step: int) -> None:
        if self.ema is not None:
            self.ema.update()

    def save_state(self, folder: Path, accelerator) -> None:
        if self.ema is not None:
            self.ema.save(folder, accelerator.process_index, accelerator.num_processes)

    def load_state(self, folder: Path, accelerator) -> None:
        if self.ema is not None:
            self.ema.load(folder, accelerator.process_index, accelerator.num_processes)

    def on_train_end(self, model, accelerator) -> None:
        """Gather the EMA weights for export (collective, every rank)."""
        if self.ema is not None:
            self._ema_export = self.ema.full_state()

    # -- validation -------------------------------------------------------------------
    def validation_prompts(self, val_ds) -> tuple[list[str], list[int]]:
        return prompts_of(val_ds)

    def evaluate(self, model, batches, accelerator) -> dict[str, float]:
        """Validation loss at fixed noise, then images from the pipeline around the sharded model."""
        import torch

        # Validation must not move the training RNG (the DDPM sampler draws noise), or
        # turning it on would change the training run.
        with torch.random.fork_rng(devices=[]):
            return self._evaluate(model, batches, accelerator)

    def _evaluate(self, model, batches, accelerator) -> dict[str, float]:
        import torch

        self._evals += 1
        gen = torch.Generator("cpu").manual_seed(self.ctx.seed + 1)
        total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
        with torch.no_grad():
            for batch in batches:
                total[0] += self.loss(model, batch, generator=gen).detach().double()
                total[1] += 1
        total = accelerator.reduce(total, reduction="sum")
        metrics = {"val_loss": float(total[0] / total[1].clamp(min=1))}
        step = int(self.ctx.extra.get("step", self._evals))
        out_dir = Path(self.ctx.extra.get("output_dir") or self.ctx.resolve(self.settings.output.dir))
        val_ds = getattr(getattr(batches, "dataset", None), "rows", None)
        prompts, labels = self.validation_prompts(getattr(batches, "dataset", None) if val_ds else None)
        folder = out_dir / "validation" / f"step-{step}"
        self.generate(accelerator.unwrap_model(model), prompts, labels, folder,
                      write=accelerator.is_main_process)
        accelerator.wait_for_everyone()
        metrics["validation_images"] = float(len(prompts))
        return metrics

    def generate(self, denoiser, prompts: list[str], labels: list[int], folder: Path, write: bool = True,
                 steps: int = 12) -> list:
        """Sample one image per prompt with a diffusers pipeline; every rank must call it."""
        import copy

        res = self.settings.data.resolution
        kind = self.kind or kind_of(self.denoiser_config()["_class_name"])
        encode: Any = None
        if self.has_text():
            from .cached import CachedPrompts

            encode = CachedPrompts(self.cache) if self.cache is not None else self.conditioner()
        pipe = make_pipeline(denoiser, copy.deepcopy(self.scheduler()), encode, self.vae(), kind)
        was_training = denoiser.training
        denoiser.eval()
        images = pipe(prompts, labels=labels, height=res, width=res, num_inference_steps=steps, seed=self.ctx.seed)
        denoiser.train(was_training)
        if write:
            save_images(images, prompts, folder, scale=max(1, 128 // max(res, 1)))
        return images

    # -- export ---------------------------------------------------------------------
    def _fresh_denoiser(self):
        import diffusers

        cfg = self.denoiser_config()
        return getattr(diffusers, cfg["_class_name"]).from_config(cfg)

    def export(self, state_dict, out_dir: Path) -> None:
        """A diffusers pipeline folder (`family_export`)."""
        export(self, state_dict, Path(out_dir))

    def describe(self) -> str:
        cfg = self.denoiser_config()
        return f"diffusion {cfg['_class_name']} ({self.settings.model.path}), {type(self.scheduler()).__name__}"
