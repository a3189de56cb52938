"""Diffusion family: a diffusers denoiser (U-Net or transformer) trained on images.

* Model: ``model.path`` is a local diffusers folder (a pipeline folder with ``unet/`` or
  ``transformer/``, ``scheduler/`` and optionally ``text_encoder/``, ``tokenizer/``,
  ``vae/`` — what `export` writes and what Stable Diffusion folders hold), or a built-in
  tiny configuration (``builtin:tiny-unet``, ``builtin:tiny-dit``, ``builtin:tiny-sd3``;
  plain ``builtin`` picks by ``model.flavour``). Built-ins work in pixel space (3 channels,
  no VAE) with a tiny CLIP text encoder and a character-level tokenizer built locally.
* Only the denoiser is "the model": `build_model` returns it, so the trainer prepares,
  shards (FSDP) or partitions (ZeRO-3) nothing else. The text encoder and VAE are frozen
  attributes of the family, built outside DeepSpeed's ``zero.Init``, moved to the
  batch's device, never wrapped.
* Loss: the scheduler decides: noise (epsilon), v-prediction or sample targets for
  DDPM-style schedulers; the velocity ``noise - x0`` for flow matching.
* Data: an image folder (``*.png|jpg|jpeg|webp``), captions from ``captions.jsonl``
  (``{"file", "caption", "label"?}``) or a ``.txt`` beside each image; each image goes to
  the aspect bucket nearest its own, and a batch is resized to its majority bucket.
* EMA (`EMA`): shadows of the trainable parameters, kept on CPU by default, one per local
  shard (FSDP2 DTensor shard, ZeRO-3 partition) so it follows the sharding; saved with
  every checkpoint and restored on resume.
* Validation: images generated with `TunerDiffusionPipeline` (a diffusers
  ``DiffusionPipeline``) around the trained, still-sharded denoiser — every rank runs it
  (the sharded forward needs them all), rank 0 writes ``OUTPUT_DIR/validation/step-N/``.
"""

from __future__ import annotations

import json
import math
import random
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterable

from .base import Family, FamilyContext, FamilyError, read_jsonl

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "diffusion"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
#: Max caption tokens of the built-in text encoder.
TINY_TEXT_LEN = 64
#: Subfolder names a diffusers pipeline folder uses for the denoiser.
DENOISER_DIRS = ("unet", "transformer")
EXPORT_META = "tuner_diffusion.json"

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
            from .. import tiny_configs

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


# --- data ------------------------------------------------------------------------------

def bucket_sizes(resolution: int, multiple: int = 8) -> list[tuple[int, int]]:
    """(width, height) buckets of about resolution² pixels: portrait, square, landscape."""
    out = []
    for aspect in (4 / 3, 1.0, 3 / 4):  # height / width
        w = max(multiple, round(resolution / math.sqrt(aspect) / multiple) * multiple)
        h = max(multiple, round(resolution * math.sqrt(aspect) / multiple) * multiple)
        out.append((w, h))
    return out


def nearest_bucket(size: tuple[int, int], buckets: list[tuple[int, int]]) -> int:
    w, h = size
    return min(range(len(buckets)), key=lambda i: abs(math.log((h / w) / (buckets[i][1] / buckets[i][0]))))


def read_image_folder(folder: Path) -> list[dict[str, Any]]:
    """Rows ``{"path", "caption", "label"}`` from captions.jsonl, .txt side files, or none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FamilyError(f"data.path {folder} is not an image folder")
    rows: list[dict[str, Any]] = []
    index = folder / "captions.jsonl"
    if index.is_file():
        for n, item in read_jsonl(index):
            name = item.get("file") or item.get("image") or item.get("file_name")
            if not isinstance(name, str):
                raise FamilyError(f"{index}:{n}: each line needs a 'file' naming an image")
            rows.append({"path": folder / name, "caption": str(item.get("caption", item.get("text", ""))),
                         "label": int(item.get("label", 0))})
    else:
        for p in sorted(folder.rglob("*")):
            if p.suffix.lower() in IMAGE_SUFFIXES:
                txt = p.with_suffix(".txt")
                rows.append({"path": p, "caption": txt.read_text().strip() if txt.is_file() else "", "label": 0})
    missing = [str(r["path"]) for r in rows if not Path(r["path"]).is_file()]
    if missing:
        raise FamilyError(f"{len(missing)} image(s) listed but not found, e.g. {missing[0]}")
    if not rows:
        raise FamilyError(f"no images in {folder} ({', '.join(IMAGE_SUFFIXES)})")
    return rows


class ImageDataset:
    """Images with captions; each item keeps its native size (collate buckets and resizes)."""

    def __init__(self, rows: list[dict[str, Any]], buckets: list[tuple[int, int]]) -> None:
        from PIL import Image

        self.rows = rows
        self.buckets = buckets
        self.bucket_of = []
        for r in rows:
            with Image.open(r["path"]) as im:
                self.bucket_of.append(nearest_bucket(im.size, buckets))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        r = self.rows[i]
        return {"path": str(r["path"]), "caption": r["caption"], "label": r["label"], "bucket": self.bucket_of[i]}


def load_image(path: str, size: tuple[int, int]):
    """RGB tensor in [-1, 1], shape [3, h, w]: scaled to cover `size`, centre-cropped."""
    import numpy as np
    import torch
    from PIL import Image

    w, h = size
    with Image.open(path) as im:
        im = im.convert("RGB")
        scale = max(w / im.width, h / im.height)
        nw, nh = max(w, round(im.width * scale)), max(h, round(im.height * scale))
        im = im.resize((nw, nh), Image.BICUBIC)
        left, top = (nw - w) // 2, (nh - h) // 2
        im = im.crop((left, top, left + w, top + h))
        arr = np.asarray(im, dtype=np.float32) / 127.5 - 1.0
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()


# --- EMA -------------------------------------------------------------------------------

def local_shard(p):
    """The part of a parameter this rank holds: FSDP2 DTensor shard, ZeRO-3 partition, or all."""
    if hasattr(p, "ds_tensor") and getattr(p, "ds_tensor", None) is not None and hasattr(p, "ds_numel"):
        return p.ds_tensor
    if hasattr(p, "to_local"):
        return p.to_local()
    return p.data


def is_sharded(p) -> bool:
    return hasattr(p, "to_local") or (getattr(p, "ds_tensor", None) is not None and hasattr(p, "ds_numel"))


class EMA:
    """Exponential moving average of parameters, one shadow per LOCAL shard.

    The seed keeps EMA off the Accelerator (so ZeRO does not touch it) and on the CPU by
    default. Shadows are fp32 copies of what this rank holds, so under FSDP2 / ZeRO-3 the
    EMA is sharded exactly like the model and costs 1/world of the full copy per rank.
    Decay warms up as diffusers' EMAModel does: ``min(decay, (1 + n) / (10 + n))``.
    """

    def __init__(self, named_params: Iterable[tuple[str, Any]], decay: float = 0.999, device: str = "cpu") -> None:
        import torch

        self.decay = float(decay)
        self.device = torch.device(device)
        self.names: list[str] = []
        self.params: list[Any] = []
        self.shadows: list[Any] = []
        for name, p in named_params:
            self.names.append(name)
            self.params.append(p)
            self.shadows.append(local_shard(p).detach().to(self.device, torch.float32, copy=True))
        self.num_updates = 0
        self.sharded = any(is_sharded(p) for p in self.params)

    def current_decay(self) -> float:
        n = self.num_updates
        return min(self.decay, (1 + n) / (10 + n))

    def update(self) -> None:
        import torch

        d = self.current_decay()
        with torch.no_grad():
            for p, s in zip(self.params, self.shadows):
                s.mul_(d).add_(local_shard(p).detach().to(s.device, torch.float32), alpha=1.0 - d)
        self.num_updates += 1

    # -- persistence -------------------------------------------------------------------
    def save(self, folder: Path, rank: int, world_size: int) -> None:
        """Write this rank's shadows (all ranks when sharded; rank 0 otherwise) + ema.json."""
        from safetensors.torch import save_file

        folder = Path(folder) / "ema"
        folder.mkdir(parents=True, exist_ok=True)
        if self.sharded or rank == 0:
            tensors = {n: s.contiguous() for n, s in zip(self.names, self.shadows)}
            save_file(tensors, str(folder / f"rank{rank if self.sharded else 0}.safetensors"))
        if rank == 0:
            meta = {"decay": self.decay, "num_updates": self.num_updates, "sharded": self.sharded,
                    "world_size": world_size, "parameters": len(self.names)}
            (folder / "ema.json").write_text(json.dumps(meta, indent=2) + "\n")

    def load(self, folder: Path, rank: int, world_size: int) -> None:
        from safetensors.torch import load_file

        folder = Path(folder) / "ema"
        meta_file = folder / "ema.json"
        if not meta_file.is_file():
            raise FamilyError(f"checkpoint {folder.parent} has no EMA state (training.ema was off when it was "
                              "written); turn training.ema off to resume it, or start a new run")
        meta = json.loads(meta_file.read_text())
        if meta["sharded"] != self.sharded or (self.sharded and meta["world_size"] != world_size):
            raise FamilyError(f"the EMA in {folder.parent} was saved {'sharded' if meta['sharded'] else 'whole'} "
                              f"over {meta['world_size']} rank(s); this run holds it "
                              f"{'sharded' if self.sharded else 'whole'} over {world_size}")
        tensors = load_file(str(folder / f"rank{rank if self.sharded else 0}.safetensors"))
        for i, name in enumerate(self.names):
            if name not in tensors or tensors[name].shape != self.shadows[i].shape:
                raise FamilyError(f"EMA state in {folder} does not match the model at {name!r}")
            self.shadows[i] = tensors[name].to(self.device)
        self.decay = float(meta["decay"])
        self.num_updates = int(meta["num_updates"])

    def full_state(self) -> dict[str, Any]:
        """Full (unsharded) CPU tensors, gathered across ranks. Collective: call on every rank."""
        import torch

        out = {}
        for name, p, s in zip(self.names, self.params, self.shadows):
            if hasattr(p, "to_local"):
                from torch.distributed.tensor import DTensor

                local = s.to(p.to_local().device, p.dtype)
                dt = DTensor.from_local(local, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                out[name] = dt.full_tensor().detach().cpu().float()
            elif getattr(p, "ds_tensor", None) is not None and hasattr(p, "ds_numel"):
                import torch.distributed as dist

                part = s.to(p.ds_tensor.device)
                parts = [torch.empty_like(part) for _ in range(dist.get_world_size())]
                dist.all_gather(parts, part.contiguous())
                out[name] = torch.cat(parts)[: p.ds_numel].view(p.ds_shape).cpu().float()
            else:
                out[name] = s.detach().cpu().float()
        return out


# --- text conditioning -------------------------------------------------------------------

@contextmanager
def zero3_init_disabled():
    """Build frozen modules outside DeepSpeed's ``zero.Init`` (the diffusers recipe), so a
    ZeRO-3 run never partitions the text encoder or the VAE."""
    ctx = nullcontext()
    try:
        from accelerate.state import AcceleratorState

        state = AcceleratorState() if AcceleratorState._shared_state else None
        plugin = getattr(state, "deepspeed_plugin", None) if state is not None else None
        if plugin is not None:
            ctx = plugin.zero3_init_context_manager(enable=False)
    except Exception:
        ctx = nullcontext()
    with ctx:
        yield


def tiny_text_encoder(tokenizer, hidden: int, pooled: int):
    """A two-layer CLIP text encoder with a projection head, seeded, built from a config."""
    import torch
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=TINY_TEXT_LEN,
                         projection_dim=pooled, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(1234)
        return CLIPTextModelWithProjection(cfg)


class TextConditioner:
    """Frozen tokenizer + text encoder: captions -> (hidden states, pooled embedding)."""

    def __init__(self, tokenizer, encoder, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.encoder = encoder.eval().requires_grad_(False)
        self.max_length = max_length

    def __call__(self, captions: list[str], device) -> tuple[Any, Any]:
        import torch

        enc = self.tokenizer(list(captions), padding="max_length", truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        if next(self.encoder.parameters()).device != torch.device(device):
            self.encoder.to(device)
        with torch.no_grad():
            out = self.encoder(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device))
        pooled = getattr(out, "text_embeds", None)
        if pooled is None:
            pooled = getattr(out, "pooler_output", out.last_hidden_state[:, 0])
        return out.last_hidden_state, pooled


# --- pipeline ----------------------------------------------------------------------------

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


def make_pipeline(denoiser, scheduler, conditioner=None, vae=None, kind: str = "unet"):
    return _pipeline_class()(denoiser, scheduler, conditioner, vae, kind)


# --- the family ----------------------------------------------------------------------------

class DiffusionFamily(Family):
    name = "diffusion"
    unit = "img"

    def __init__(self, ctx: FamilyContext) -> None:
        super().__init__(ctx)
        self._cond: TextConditioner | None = None
        self._vae = None
        self._scheduler = None
        self.ema: EMA | None = None
        self._ema_export: dict[str, Any] | None = None
        self._evals = 0
        self._denoiser_class = ""
        self.kind = ""

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
            with zero3_init_disabled():
                if self._builtin() is not None or not (self._folder() / "text_encoder").is_dir():
                    from .embedding import build_tiny_tokenizer

                    tok = build_tiny_tokenizer()
                    enc = tiny_text_encoder(tok, int(hidden), int(pooled))
                    max_len = TINY_TEXT_LEN
                else:
                    from transformers import AutoTokenizer, CLIPTextModel, CLIPTextModelWithProjection

                    d = self._folder()
                    tok = AutoTokenizer.from_pretrained(str(d / "tokenizer"))
                    te_cfg = json.loads((d / "text_encoder" / "config.json").read_text())
                    cls = (CLIPTextModelWithProjection if "WithProjection" in str(te_cfg.get("architectures"))
                           else CLIPTextModel)
                    enc = cls.from_pretrained(str(d / "text_encoder"))
                    max_len = min(int(getattr(tok, "model_max_length", 77) or 77), 77)
            self._cond = TextConditioner(tok, enc, max_len)
        return self._cond

    def vae(self):
        if self._vae is None and self._builtin() is None and (self._folder() / "vae").is_dir():
            from diffusers import AutoencoderKL

            with zero3_init_disabled():
                self._vae = AutoencoderKL.from_pretrained(str(self._folder() / "vae")).eval().requires_grad_(False)
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
        if meta:
            with torch.device("meta"):
                return cls.from_config(cfg)
        if self._builtin() is not None:
            return cls.from_config(cfg).to(torch.float32)
        return cls.from_pretrained(str(self._denoiser_dir()), torch_dtype=torch.float32)

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
        from peft import LoraConfig, get_peft_model

        m = self.settings.model
        targets = m.lora_target_modules or ["to_q", "to_k", "to_v", "to_out.0"]
        cfg = LoraConfig(r=m.lora_rank, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout, target_modules=targets)
        return get_peft_model(model, cfg)

    def wrap_classes(self, model) -> list[str]:
        if self.kind == "dit":
            return []  # see prepare_model: DiT is sharded as one unit
        found = {type(m).__name__ for m in model.modules()}
        wanted = [c for c in ("BasicTransformerBlock", "JointTransformerBlock", "ResnetBlock2D") if c in found]
        return wanted or list(getattr(model, "_no_split_modules", None) or [])

    def frozen_modules(self, model) -> list:
        out = []
        cond = self.conditioner()
        if cond is not None:
            out.append(cond.encoder)
        if self.vae() is not None:
            out.append(self.vae())
        return out

    # -- data -----------------------------------------------------------------------
    def build_datasets(self):
        d = self.settings.data
        folder = DATA_DIR if d.path == "builtin" else self.ctx.resolve(d.path)
        rows = read_image_folder(folder)
        buckets = self._buckets()
        if d.validation_path:
            val_rows = read_image_folder(self.ctx.resolve(d.validation_path))
            train_rows = rows
        else:
            order = list(range(len(rows)))
            random.Random(self.ctx.seed).shuffle(order)
            n_val = max(1, int(len(rows) * d.validation_split)) if d.validation_split > 0 else 0
            val_rows = [rows[i] for i in sorted(order[:n_val])]
            train_rows = [rows[i] for i in sorted(order[n_val:])]
        return ImageDataset(train_rows, buckets), (ImageDataset(val_rows, buckets) if val_rows else None)

    def _buckets(self) -> list[tuple[int, int]]:
        """Aspect buckets; DiT unpatchifies to a square, so it gets the square bucket only."""
        res = self.settings.data.resolution
        if kind_of(self.denoiser_config()["_class_name"]) == "dit":
            return [(res, res)]
        return bucket_sizes(res, self._multiple())

    def _multiple(self) -> int:
        cfg = self.denoiser_config()
        mult = cfg.get("patch_size", 1) or 1
        if "block_out_channels" in cfg:
            mult *= 2 ** (len(cfg["block_out_channels"]) - 1)
        if self._builtin() is None and (self._folder() / "vae").is_dir():
            mult *= 8
        return max(8, mult)

    def collate(self, samples):
        """Resize the batch to its majority bucket; tokenise captions to fixed-length ids."""
        import torch

        from collections import Counter

        buckets = self._buckets()
        bucket = Counter(s["bucket"] for s in samples).most_common(1)[0][0]
        pixels = torch.stack([load_image(s["path"], buckets[bucket]) for s in samples])
        batch = {"pixel_values": pixels, "labels": torch.tensor([int(s["label"]) for s in samples])}
        cond = self.conditioner()
        if cond is not None:
            enc = cond.tokenizer([s["caption"] for s in samples], padding="max_length", truncation=True,
                                 max_length=cond.max_length, return_tensors="pt")
            batch["input_ids"], batch["attention_mask"] = enc["input_ids"], enc["attention_mask"]
        return batch

    def batch_units(self, batch) -> int:
        return int(batch["pixel_values"].shape[0])

    # -- optimisation ---------------------------------------------------------------
    def _condition(self, batch) -> dict[str, Any]:
        import torch

        cond: dict[str, Any] = {"labels": batch["labels"]}
        c = self.conditioner()
        if c is not None:
            ids = batch["input_ids"]
            if next(c.encoder.parameters()).device != ids.device:
                c.encoder.to(ids.device)
            with torch.no_grad():
                out = c.encoder(input_ids=ids, attention_mask=batch["attention_mask"])
            cond["hidden"] = out.last_hidden_state
            cond["pooled"] = getattr(out, "text_embeds", None)
            if cond["pooled"] is None:
                cond["pooled"] = out.pooler_output
        return cond

    def _latents(self, pixels):
        import torch

        vae = self.vae()
        if vae is None:
            return pixels
        if next(vae.parameters()).device != pixels.device:
            vae.to(pixels.device)
        with torch.no_grad():
            return vae.encode(pixels.to(vae.dtype)).latent_dist.sample() * vae.config.scaling_factor

    def noisy_inputs(self, x0, generator=None):
        """(model input, timesteps, target) for clean samples `x0`, as the scheduler says."""
        import torch

        sched = self.scheduler()
        n = x0.shape[0]
        noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
        if is_flow_matching(sched):
            sigma = torch.rand(n, generator=generator).to(x0.device, x0.dtype)
            s = sigma.view(-1, *([1] * (x0.dim() - 1)))
            noisy = (1.0 - s) * x0 + s * noise
            return noisy, sigma * sched.config.num_train_timesteps, noise - x0
        t = torch.randint(0, sched.config.num_train_timesteps, (n,), generator=generator).to(x0.device)
        noisy = sched.add_noise(x0, noise, t)
        pred = sched.config.prediction_type
        if pred == "epsilon":
            target = noise
        elif pred == "v_prediction":
            target = sched.get_velocity(x0, noise, t)
        elif pred == "sample":
            target = x0
        else:
            raise FamilyError(f"unsupported prediction_type {pred!r} in the scheduler config")
        return noisy, t, target

    def loss(self, model, batch, generator=None):
        import torch.nn.functional as F

        x0 = self._latents(batch["pixel_values"])
        noisy, t, target = self.noisy_inputs(x0, generator)
        kind = self.kind or kind_of(self.denoiser_config()["_class_name"])
        pred = denoise(model, kind, noisy, t, self._condition(batch))
        return F.mse_loss(pred.float(), target.float())

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
        rows = val_ds.rows if val_ds is not None else read_image_folder(DATA_DIR)
        seen, prompts, labels = set(), [], []
        for r in rows:
            if r["caption"] not in seen:
                seen.add(r["caption"])
                prompts.append(r["caption"])
                labels.append(int(r["label"]))
            if len(prompts) == 4:
                break
        return prompts, labels

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
        pipe = make_pipeline(denoiser, copy.deepcopy(self.scheduler()), self.conditioner(), self.vae(), kind)
        was_training = denoiser.training
        denoiser.eval()
        images = pipe(prompts, labels=labels, height=res, width=res, num_inference_steps=steps, seed=self.ctx.seed)
        denoiser.train(was_training)
        if write:
            folder.mkdir(parents=True, exist_ok=True)
            for i, (img, prompt) in enumerate(zip(images, prompts)):
                safe = "".join(c if c.isalnum() else "_" for c in prompt)[:48]
                img.save(folder / f"{i:02d}_{safe}.png")
            (folder / "prompts.json").write_text(json.dumps(prompts, indent=2) + "\n")
            grid_image(images, scale=max(1, 128 // max(res, 1))).save(folder / "grid.png")
        return images

    # -- export ---------------------------------------------------------------------
    def _fresh_denoiser(self):
        import diffusers

        cfg = self.denoiser_config()
        return getattr(diffusers, cfg["_class_name"]).from_config(cfg)

    def export(self, state_dict, out_dir: Path) -> None:
        """A diffusers folder: ``unet/`` or ``transformer/``, ``scheduler/``, the text side,
        ``vae/`` when there is one, and ``ema_<denoiser>/`` when EMA was on."""
        import torch

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.denoiser_config()
        sub = "unet" if kind_of(cfg["_class_name"]) == "unet" else "transformer"
        model = self._fresh_denoiser()
        if self.settings.model.type == "lora":
            model = self._lora(model)
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state_dict.items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise FamilyError(f"checkpoint does not match the denoiser: missing {list(missing)[:5]}, "
                              f"unexpected {list(unexpected)[:5]}")
        if self.settings.model.type == "lora":
            model.save_pretrained(str(out_dir / f"{sub}_lora"))
            model = model.merge_and_unload()
        model.save_pretrained(str(out_dir / sub), safe_serialization=True)
        if self._ema_export:
            ema_model = self._fresh_denoiser()
            base = model.state_dict()
            ema_state = {k: v for k, v in self._ema_export.items() if k in base}
            if len(ema_state) == len(base):
                ema_model.load_state_dict(ema_state)
                ema_model.save_pretrained(str(out_dir / f"ema_{sub}"), safe_serialization=True)
        self.scheduler().save_pretrained(str(out_dir / "scheduler"))
        cond = self.conditioner()
        if cond is not None:
            cond.encoder.save_pretrained(str(out_dir / "text_encoder"), safe_serialization=True)
            cond.tokenizer.save_pretrained(str(out_dir / "tokenizer"))
        if self.vae() is not None:
            self.vae().save_pretrained(str(out_dir / "vae"))
        meta = {"denoiser": sub, "class_name": cfg["_class_name"], "kind": kind_of(cfg["_class_name"]),
                "resolution": self.settings.data.resolution, "ema": bool(self._ema_export)}
        (out_dir / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n")

    def describe(self) -> str:
        cfg = self.denoiser_config()
        return f"diffusion {cfg['_class_name']} ({self.settings.model.path}), {type(self.scheduler()).__name__}"
