"""The real models' pipelines: SDXL, Flux and SD3, their text side and VAE, as diffusers'
own pipeline classes build and call them.

A model is one of these when its built-in entry has a ``pipeline`` (``builtin:tiny-sdxl``,
``builtin:tiny-flux``, ``builtin:tiny-sd3``: every component built here from a seeded
config, tiny) or its folder's ``model_index.json`` names the pipeline class (a real
``stabilityai/stable-diffusion-xl-base-1.0`` / ``black-forest-labs/FLUX.1-dev`` /
``stabilityai/stable-diffusion-3-medium-diffusers`` download).

* Text: `PipelineText` calls the pipeline class's own ``encode_prompt`` on a pipeline that
  holds only the text encoders and tokenizers: SDXL's two CLIP hidden states (penultimate
  layer) concatenated and the second encoder's pooled projection; Flux's T5 hidden states
  and CLIP pooled output; SD3's CLIP-L and CLIP-G hidden states concatenated, padded to T5's
  width and joined with T5's, and the two pooled projections concatenated.
* SDXL's added time ids (`sdxl_time_ids`): original size, crop top-left and target size of
  each image as tuner crops it (``data_sources.image_sets.load_image``), as diffusers' SDXL training script
  computes them; cached with the image's latent.
* The call (`tuner_pipeline.denoise`): SDXL's ``added_cond_kwargs``; Flux's packed latents,
  image and text ids (``FluxPipeline``'s own ``_pack_latents`` / ``_prepare_latent_image_ids``),
  timestep in [0, 1] and the guidance embedding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ....compiler.read import builtin_models
from ...data_sources.image_sets import crop_box
from ..base import FamilyError
from .conditioning import zero3_init_disabled

#: Pipeline class -> the kind of call its denoiser takes (`tuner_pipeline.denoise`).
PIPELINES = {"StableDiffusionXLPipeline": "sdxl", "FluxPipeline": "flux", "StableDiffusion3Pipeline": "sd3"}
#: The denoiser's component name in each pipeline.
DENOISER = {"sdxl": "unet", "flux": "transformer", "sd3": "transformer"}
#: Text encoder / tokenizer component names, in the pipeline's order.
TEXT_NAMES = ("text_encoder", "text_encoder_2", "text_encoder_3")
TOKENIZER_NAMES = ("tokenizer", "tokenizer_2", "tokenizer_3")
#: Max tokens of the built-ins' CLIP tokenizers, and the T5 sequence length for every model.
TINY_CLIP_LEN = 48
T5_LEN = 32
#: Flux's guidance embedding value in training (SimpleTuner's flux_guidance_value default).
FLUX_TRAIN_GUIDANCE = 1.0
#: The schedulers of the real models (their scheduler_config.json values).
SCHEDULERS: dict[str, tuple[str, dict[str, Any]]] = {
    "sdxl": ("EulerDiscreteScheduler", {"num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
                                        "beta_schedule": "scaled_linear", "prediction_type": "epsilon",
                                        "timestep_spacing": "leading", "steps_offset": 1}),
    "flux": ("FlowMatchEulerDiscreteScheduler", {"num_train_timesteps": 1000, "shift": 3.0,
                                                 "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 1.15,
                                                 "base_image_seq_len": 256, "max_image_seq_len": 4096}),
    "sd3": ("FlowMatchEulerDiscreteScheduler", {"num_train_timesteps": 1000, "shift": 3.0}),
}


def builtin_pipeline(name: str | None) -> dict[str, Any] | None:
    entry = builtin_models.TINY_CONFIGS.get(name or "")
    return entry.get("pipeline") if entry else None


def folder_pipeline(folder: Path) -> str | None:
    """The pipeline class a model folder's ``model_index.json`` names, when it is one of `PIPELINES`."""
    index = folder / "model_index.json"
    if not index.is_file():
        return None
    try:
        name = json.loads(index.read_text()).get("_class_name")
    except (OSError, ValueError):
        return None
    return name if name in PIPELINES else None


def vae_factor(vae_config: dict[str, Any]) -> int:
    return 2 ** (len(vae_config.get("block_out_channels", [1, 1, 1, 1])) - 1)


# -- the built-ins' components -----------------------------------------------------------
def _seeded(build, seed: int):
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def tiny_tokenizer(max_length: int):
    from ..text import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    tok.model_max_length = max_length
    return tok


def tiny_text_encoder(spec: list, tok, seed: int):
    """One built-in text encoder: ``[class, width, projection]`` of the registry entry."""
    import transformers

    cls_name, width, projection = spec
    if cls_name == "T5EncoderModel":
        cfg: Any = transformers.T5Config(vocab_size=len(tok), d_model=width, d_kv=8, d_ff=2 * width, num_layers=1,
                                         num_heads=2, relative_attention_num_buckets=8, dropout_rate=0.0,
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id,
                                         decoder_start_token_id=tok.pad_token_id)
    else:
        cfg = transformers.CLIPTextConfig(vocab_size=len(tok), hidden_size=width, intermediate_size=2 * width,
                                          num_hidden_layers=2, num_attention_heads=2,
                                          max_position_embeddings=TINY_CLIP_LEN, projection_dim=projection or width,
                                          pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id,
                                          eos_token_id=tok.sep_token_id)
    return _seeded(lambda: getattr(transformers, cls_name)(cfg), seed).eval().requires_grad_(False)


def tiny_text(pipe: dict[str, Any]) -> dict[str, Any]:
    """The built-in's tokenizers and text encoders, by component name."""
    out: dict[str, Any] = {}
    with zero3_init_disabled():
        for i, spec in enumerate(pipe["text"]):
            tok = tiny_tokenizer(T5_LEN if spec[0] == "T5EncoderModel" else TINY_CLIP_LEN)
            out[TOKENIZER_NAMES[i]] = tok
            out[TEXT_NAMES[i]] = tiny_text_encoder(spec, tok, 1234 + i)
    return out


def tiny_vae(pipe: dict[str, Any]):
    """A two-level AutoencoderKL (a latent side is half the image's: 32 px -> 16) with the
    real model's latent scaling (and shift, for Flux and SD3)."""
    from diffusers import AutoencoderKL

    v = pipe["vae"]
    with zero3_init_disabled():
        vae = _seeded(lambda: AutoencoderKL(
            in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
            up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[8, 16], layers_per_block=1,
            latent_channels=v["latent_channels"], norm_num_groups=8, sample_size=32,
            scaling_factor=v["scaling_factor"], shift_factor=v.get("shift_factor")), 4321)
    return vae.eval().requires_grad_(False)


def tiny_scheduler(pipe: dict[str, Any]):
    import diffusers

    cls_name, cfg = SCHEDULERS[pipe["scheduler"]]
    return getattr(diffusers, cls_name)(**cfg)


# -- a folder's components ---------------------------------------------------------------
def folder_text(folder: Path) -> dict[str, Any]:
    """The folder's tokenizers and text encoders (the classes its model_index.json names)."""
    import transformers

    index = json.loads((folder / "model_index.json").read_text())
    out: dict[str, Any] = {}
    with zero3_init_disabled():
        for name in (*TEXT_NAMES, *TOKENIZER_NAMES):
            entry = index.get(name)
            if not entry or entry[1] is None or not (folder / name).is_dir():
                continue
            cls = getattr(transformers, entry[1], None)
            if cls is None:
                raise FamilyError(f"{folder / 'model_index.json'}: {name} is a {entry[1]}, which transformers lacks")
            obj = cls.from_pretrained(str(folder / name))
            out[name] = obj.eval().requires_grad_(False) if name.startswith("text_encoder") else obj
    return out


# -- the text side -------------------------------------------------------------------------
class PipelineText:
    """Captions -> (hidden states, pooled embedding) by the pipeline class's ``encode_prompt``."""

    def __init__(self, kind: str, components: dict[str, Any]) -> None:
        import diffusers

        self.kind = kind
        self.components = components
        cls = getattr(diffusers, next(k for k, v in PIPELINES.items() if v == kind))
        parts = {n: components.get(n) for n in (*TEXT_NAMES, *TOKENIZER_NAMES)}
        if kind != "sd3":
            parts.pop("text_encoder_3"), parts.pop("tokenizer_3")
        denoiser = {DENOISER[kind]: None}
        extra = {"add_watermarker": False} if kind == "sdxl" else {}
        self.pipe = cls(vae=None, scheduler=None, **denoiser, **parts, **extra)

    @property
    def encoder(self):
        """The first text encoder (what exports and fingerprints name)."""
        return self.components["text_encoder"]

    def _to(self, device) -> None:
        for name in TEXT_NAMES:
            enc = self.components.get(name)
            if enc is not None and next(enc.parameters()).device != device:
                enc.to(device)

    def __call__(self, captions: list[str], device) -> tuple[Any, Any]:
        import torch

        self._to(device)
        prompts = list(captions)
        with torch.no_grad():
            if self.kind == "sdxl":
                hidden, _, pooled, _ = self.pipe.encode_prompt(prompts, device=device, do_classifier_free_guidance=False)
            elif self.kind == "flux":
                hidden, pooled, _ = self.pipe.encode_prompt(prompts, prompt_2=None, device=device,
                                                            max_sequence_length=T5_LEN)
            else:
                hidden, _, pooled, _ = self.pipe.encode_prompt(prompts, None, None, device=device,
                                                               do_classifier_free_guidance=False,
                                                               max_sequence_length=T5_LEN)
        return hidden.float(), pooled.float()

    def tokenize(self, captions: list[str]) -> dict[str, Any]:
        """The captions themselves: encoding tokenises them per encoder (the uncached path)."""
        return {"captions": list(captions)}

    def encode_batch(self, batch: dict[str, Any], device) -> tuple[Any, Any]:
        return self(batch["captions"], device)


def sdxl_time_ids(image_size: tuple[int, int], size: tuple[int, int]):
    """SDXL's added time ids of one image: (original height, width, crop top, left, target
    height, width), as diffusers' ``train_text_to_image_sdxl.py`` builds them."""
    import torch

    _, _, left, top = crop_box(image_size, size)
    return torch.tensor([image_size[1], image_size[0], top, left, size[1], size[0]], dtype=torch.float32)
