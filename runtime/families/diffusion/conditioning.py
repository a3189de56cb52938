"""The frozen modules around the denoiser: the text encoder (captions -> conditioning) and
the VAE. Both are built outside DeepSpeed's ``zero.Init`` and never prepared or wrapped."""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from ..text import build_tiny_tokenizer

#: Max caption tokens of the built-in text encoder.
TINY_TEXT_LEN = 64


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
    """Frozen tokenizer + text encoder: captions -> (hidden states, pooled embedding).

    Training tokenises in the data loader's collate (`tokenize`) and encodes on the batch's
    device (`encode`); sampling does both at once (calling the conditioner).
    """

    def __init__(self, tokenizer, encoder, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.encoder = encoder.eval().requires_grad_(False)
        self.max_length = max_length

    def tokenize(self, captions: list[str]) -> dict[str, Any]:
        """Fixed-length ``input_ids`` and ``attention_mask`` tensors for the captions."""
        enc = self.tokenizer(list(captions), padding="max_length", truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def encode(self, input_ids, attention_mask) -> tuple[Any, Any]:
        """(hidden states, pooled embedding), without gradients, on the ids' device."""
        import torch

        if next(self.encoder.parameters()).device != input_ids.device:
            self.encoder.to(input_ids.device)
        with torch.no_grad():
            out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        pooled = getattr(out, "text_embeds", None)
        if pooled is None:
            pooled = getattr(out, "pooler_output", out.last_hidden_state[:, 0])
        return out.last_hidden_state, pooled

    def __call__(self, captions: list[str], device) -> tuple[Any, Any]:
        enc = self.tokenize(captions)
        return self.encode(enc["input_ids"].to(device), enc["attention_mask"].to(device))


def load_text_conditioner(folder: Path | None, hidden: int, pooled: int) -> TextConditioner:
    """The pipeline folder's ``tokenizer/`` + ``text_encoder/`` (CLIP), or, with `folder`
    None, the built-in tiny encoder of width `hidden` (projection `pooled`)."""
    with zero3_init_disabled():
        if folder is None:
            tok = build_tiny_tokenizer()
            return TextConditioner(tok, tiny_text_encoder(tok, int(hidden), int(pooled)), TINY_TEXT_LEN)
        from transformers import AutoTokenizer, CLIPTextModel, CLIPTextModelWithProjection

        tok = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
        te_cfg = json.loads((folder / "text_encoder" / "config.json").read_text())
        cls = CLIPTextModelWithProjection if "WithProjection" in str(te_cfg.get("architectures")) else CLIPTextModel
        enc = cls.from_pretrained(str(folder / "text_encoder"))
        max_len = min(int(getattr(tok, "model_max_length", 77) or 77), 77)
        return TextConditioner(tok, enc, max_len)


def load_vae(folder: Path):
    """The frozen ``AutoencoderKL`` of a pipeline folder's ``vae/``."""
    from diffusers import AutoencoderKL

    with zero3_init_disabled():
        return AutoencoderKL.from_pretrained(str(folder / "vae")).eval().requires_grad_(False)


def vae_latents(vae, pixels):
    """Scaled latents of `pixels`, ``(z - shift_factor) * scaling_factor`` as the pipelines
    undo it (no gradients); `pixels` themselves without a VAE (pixel space)."""
    import torch

    if vae is None:
        return pixels
    if next(vae.parameters()).device != pixels.device:
        vae.to(pixels.device)
    with torch.no_grad():
        z = vae.encode(pixels.to(vae.dtype)).latent_dist.sample()
    return (z - (getattr(vae.config, "shift_factor", None) or 0.0)) * vae.config.scaling_factor
