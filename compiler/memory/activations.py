"""Activation bytes of one micro batch on one rank (the formulas of docs/services.md).

Transformer layers (selective formula after Korthikanti et al. 2022, SDPA/flash attention
so no score matrix is kept), values per token and layer, stored in the compute dtype:

* attention: ``5h + 2q + 2kv`` (q, kv: query and key/value widths; MLA adds its latents
  ``q_lora + kv_lora + rope``);
* dense MLP: ``4I`` gated (``2I`` plain);
* MoE MLP: ``k·(4·I_e + 2h) + 4·I_s + 2E``: each token's k routed experts keep their gated
  MLP values plus the dispatched input and weighted output copies, the shared expert keeps a
  gated MLP of width ``I_s`` and the router its logits and probabilities over E experts.

Gradient checkpointing keeps each layer's input (``h``) plus one layer recomputed. Context
parallelism divides the sequence. Causal LMs add the logits (compute dtype, plus fp32 for
the loss and its gradient).

Diffusion denoisers see ``data.resolution``: a latent model (``in_channels`` != 3) works on
``resolution/8`` latents, a pixel model (tuner's built-ins) on the pixels. A DiT's image
tokens are ``(side/patch)²``; Flux packs 2x2 latents (``patch = 2``) and attends over 512 text
tokens besides, SD3 over 333 (77 CLIP + 256 T5); every block (Flux: its double- *and*
single-stream blocks) keeps ``5h + 4h + 8h`` values per token. A UNet keeps about 20 feature
maps per layer at each level (4 under checkpointing), on the down and up paths.
"""

from __future__ import annotations

from ..keys.settings import Settings
from .model import ModelSize, transformer_blocks
from .shapes import _cfg, architecture

#: Text tokens in the joint attention of a diffusion transformer (not in its config).
TEXT_TOKENS = {"FluxTransformer2DModel": 512, "SD3Transformer2DModel": 333}
VAE_FACTOR = 8


def decoder_layer_values(c: dict, kind: str) -> list[int]:
    """Values kept per token by each layer (its own list: MoE and dense layers differ)."""
    a = architecture(c) if kind == "decoder" and c.get("model_type") != "gpt2" else None
    if a is None:  # GPT-2, encoders, shapes without an architecture
        h = int(_cfg(c, "hidden_size", "n_embd", "d_model", default=0) or 0)
        layers = int(_cfg(c, "num_hidden_layers", "n_layer", default=0) or 0)
        if not h or not layers:
            return []
        heads = int(_cfg(c, "num_attention_heads", "n_head", default=1) or 1)
        hd = int(_cfg(c, "head_dim", default=h // heads) or h // heads)
        kv = int(_cfg(c, "num_key_value_heads", default=heads) or heads) * hd
        inter = int(_cfg(c, "intermediate_size", "n_inner", default=4 * h) or 4 * h)
        gated = kind == "decoder" and c.get("model_type") != "gpt2"
        return [5 * h + 2 * heads * hd + 2 * kv + (4 if gated else 2) * inter] * layers
    h = a.hidden
    attention = 5 * h + 2 * a.q_dim + 2 * a.kv_dim
    if a.mla:
        attention += a.q_lora + a.kv_lora + a.rope_dim
    out = []
    for layer in range(a.layers):
        if a.experts and layer in a.moe_layers:
            mlp = a.top_k * (4 * a.moe_inter + 2 * h) + 4 * a.shared_inter + 2 * a.experts
        else:
            mlp = 4 * a.inter
        out.append(attention + mlp)
    return out


def image_tokens(c: dict, resolution: int) -> int:
    """Image tokens a diffusion transformer attends over at `resolution` pixels."""
    vae = 1 if int(c.get("in_channels", 4) or 4) == 3 else VAE_FACTOR
    cls = str(c.get("_class_name", ""))
    patch = 2 if cls == "FluxTransformer2DModel" else max(1, int(c.get("patch_size", 2) or 2))
    side = max(1, resolution // vae // patch)
    return side * side


def activation_table(s: Settings, m: ModelSize, splits: set[int]) -> dict[tuple[int, bool], int]:
    """`activation_bytes` for each sequence split and with and without checkpointing, in one
    call: the compared strategies' rows look theirs up (`per_rank.compare`)."""
    return {(n, ck): activation_bytes(s, m, n, ck) for n in sorted(splits) for ck in (False, True)}


def activation_bytes(s: Settings, m: ModelSize, cp: int, checkpointing: bool) -> int:
    """Activation bytes of one micro batch on one rank (see the module docstring)."""
    a = 2 if s.training.mixed_precision in ("bf16", "fp16") else 4
    b = s.training.micro_batch_size
    c = m.config
    if m.kind in ("decoder", "encoder"):
        per_layer = decoder_layer_values(c, m.kind)
        if not per_layer:
            return 0
        h = int(_cfg(c, "hidden_size", "n_embd", "d_model", default=0) or 0)
        seq = max(1, s.data.seq_len // max(1, cp))
        tokens = b * seq * (2 if s.model.trained_family == "embedding" else 1)  # query + document
        if checkpointing:
            body = tokens * a * (len(per_layer) * h + max(per_layer))
        else:
            body = tokens * a * sum(per_layer)
        extra = tokens * a * h * 2  # embedding output, final norm
        if s.model.trained_family == "causal_lm":
            vocab = int(_cfg(c, "vocab_size", default=0) or 0)
            extra += tokens * vocab * (a + 4 + 4)  # logits, fp32 upcast for the loss, its gradient
        return int(body + extra)
    res = s.data.resolution
    if m.kind == "dit":
        heads = int(c.get("num_attention_heads", 16))
        h = heads * int(c.get("attention_head_dim", 72))
        blocks = transformer_blocks(c) or 28
        tokens = b * (image_tokens(c, res) + TEXT_TOKENS.get(str(c.get("_class_name", "")), 0))
        per = a * (5 * h + 4 * h + 2 * 4 * h)
        return int(tokens * (blocks * a * h + per if checkpointing else blocks * per))
    if m.kind == "unet":
        vae = 1 if int(c.get("in_channels", 4) or 4) == 3 else VAE_FACTOR
        side = max(1, res // vae)
        chans = c.get("block_out_channels") or [320, 640, 1280, 1280]
        lpb = int(c.get("layers_per_block", 2) or 2)
        total = sum(ch * (side // (2 ** i)) ** 2 for i, ch in enumerate(chans))
        factor = 4 if checkpointing else 20 * lpb
        return int(b * a * total * factor * 2)  # down and up paths
    return 0
