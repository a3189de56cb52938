"""Parameter shapes of a transformers model read from its ``config.json``, without torch.

`architecture(config)` turns a config into an `Arch` (the dimensions the memory estimate
needs); `analytic_count(config)` lists the parameter tensors' sizes from it. Exact for the
architectures in `KNOWN` (each is checked against a meta-device build of transformers' own
class in tests/services/test_estimate_arch.py); any other decoder with Llama-style fields is
counted as a Llama and *flagged* uncertain, naming `tuner blocks` (the meta build) as the fix.

Published configs omit fields whose class default applies: Gemma's ``tie_word_embeddings``
(tied) and ``head_dim`` (256) are the usual trap. `CLASS_DEFAULTS` holds those defaults; a
test compares them with transformers' configuration classes.

transformers 5 stores the routed experts of a MoE layer fused: one ``gate_up_proj`` tensor
``(E, 2·I, h)`` and one ``down_proj`` ``(E, h, I)`` per layer, which the size histogram
(ZeRO-3's persistence threshold) reflects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Decoder families counted exactly (checked against meta builds).
DENSE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
ENCODERS = ("bert", "roberta", "xlm-roberta", "camembert")
#: Encoders with BERT's fields but other tensors (relative position buckets, a projected
#: embedding): counted as BERT, flagged.
ENCODERS_UNCERTAIN = ("electra", "mpnet")
KNOWN = DENSE + MOE + ENCODERS + ("gpt2",)

#: Class defaults that matter when config.json leaves a field out (transformers 5; the
#: test compares every entry with the configuration class).
_DEEPSEEK_MLA = {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                 "v_head_dim": 128}
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"tie_word_embeddings": True, "head_dim": 256},
    "gemma2": {"tie_word_embeddings": True, "head_dim": 256},
    "gemma3_text": {"tie_word_embeddings": True, "head_dim": 256},
    "qwen3": {"head_dim": 128},
    "mixtral": {"num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1, "qkv_bias": True},
    "qwen3_moe": {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "decoder_sparse_step": 1},
    "deepseek_v2": {"n_routed_experts": 64, "moe_intermediate_size": 1407, "n_shared_experts": 2,
                    "first_k_dense_replace": 0, **_DEEPSEEK_MLA},
    "deepseek_v3": {"n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
                    "n_shared_experts": 1, "first_k_dense_replace": 3, **_DEEPSEEK_MLA},
}


def _cfg(config: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if config.get(n) is not None:
            return config[n]
    return default


def _field(config: dict[str, Any], defaults: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The first of `names` the config has (an explicit null counts: DeepSeek-V2-Lite's
    ``q_lora_rank``), else the class default, else `default`."""
    for n in names:
        if n in config:
            return config[n]
    for n in names:
        if n in defaults:
            return defaults[n]
    return default


@dataclass
class Arch:
    """The dimensions of a decoder (or encoder) that the estimate reads."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    inter: int
    """Dense MLP width (``intermediate_size``)."""
    tied: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    norms_per_layer: int = 2
    # Multi-head latent attention (DeepSeek): 0 = ordinary attention
    kv_lora: int = 0
    q_lora: int = 0
    rope_dim: int = 0
    nope_dim: int = 0
    v_head_dim: int = 0
    # Mixture of experts: 0 experts = dense
    experts: int = 0
    top_k: int = 0
    moe_inter: int = 0
    shared_inter: int = 0
    shared_gate: bool = False
    moe_layers: list[int] = field(default_factory=list)
    uncertain: str = ""
    """Why the count may be wrong (empty: exact)."""

    @property
    def mla(self) -> bool:
        return self.kv_lora > 0

    @property
    def q_dim(self) -> int:
        """Width of the queries (and keys under MLA)."""
        return self.heads * (self.nope_dim + self.rope_dim if self.mla else self.head_dim)

    @property
    def kv_dim(self) -> int:
        """Average width of keys and values (under MLA keys and values differ)."""
        if self.mla:
            return (self.q_dim + self.heads * self.v_head_dim) // 2
        return self.kv_heads * self.head_dim


def architecture(config: dict[str, Any]) -> Arch | None:
    """The `Arch` of a Llama-style decoder config (None when its basic fields are missing)."""
    c = config
    mt = str(c.get("model_type", ""))
    defaults = CLASS_DEFAULTS.get(mt, {})
    try:
        h, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
        heads, vocab = int(c["num_attention_heads"]), int(c["vocab_size"])
        kv = int(_cfg(c, "num_key_value_heads", default=heads))
        hd = int(_cfg(c, "head_dim", default=defaults.get("head_dim", h // heads)))
        inter = int(_cfg(c, "intermediate_size", default=4 * h))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    tied = bool(_cfg(c, "tie_word_embeddings", default=defaults.get("tie_word_embeddings", False)))
    a = Arch(mt, h, layers, heads, kv, hd, vocab, inter, tied=tied)
    attention_bias = bool(c.get("attention_bias", False))
    a.qkv_bias = attention_bias or mt == "qwen2" or (mt == "qwen2_moe" and bool(_field(c, defaults, "qkv_bias")))
    a.o_bias = attention_bias and mt not in ("qwen2", "qwen2_moe", "mistral", "mixtral")
    a.qkv_bias = a.qkv_bias and mt not in ("mistral", "mixtral")
    a.mlp_bias = bool(c.get("mlp_bias", False)) and mt in ("llama", "deepseek_v2")
    a.qk_norm = mt in ("qwen3", "qwen3_moe", "gemma3_text")
    a.norms_per_layer = 4 if mt in ("gemma2", "gemma3_text") else 2
    if _field(c, defaults, "kv_lora_rank"):  # DeepSeek's multi-head latent attention
        a.kv_lora = int(_field(c, defaults, "kv_lora_rank"))
        a.q_lora = int(_field(c, defaults, "q_lora_rank") or 0)
        a.rope_dim = int(_field(c, defaults, "qk_rope_head_dim", default=64))
        a.nope_dim = int(_field(c, defaults, "qk_nope_head_dim", default=128))
        a.v_head_dim = int(_field(c, defaults, "v_head_dim", default=128))
    experts = int(_field(c, defaults, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0)
    if experts:
        a.experts = experts
        a.top_k = int(_field(c, defaults, "num_experts_per_tok", "num_experts_per_token", default=2) or 2)
        a.moe_inter = int(_field(c, defaults, "moe_intermediate_size", default=inter))
        if mt.startswith("deepseek"):
            a.shared_inter = a.moe_inter * int(_field(c, defaults, "n_shared_experts") or 0)
            first = int(_field(c, defaults, "first_k_dense_replace") or 0)
            a.moe_layers = list(range(first, layers))
        else:
            if mt == "qwen2_moe":
                a.shared_inter = int(_field(c, defaults, "shared_expert_intermediate_size") or 0)
                a.shared_gate = True
            step = int(_field(c, defaults, "decoder_sparse_step", default=1) or 1)
            dense_only = set(c.get("mlp_only_layers") or [])
            a.moe_layers = [i for i in range(layers) if i not in dense_only and (i + 1) % step == 0]
    if mt not in DENSE + MOE:
        a.uncertain = (f"architecture {mt or 'unknown'!r} is not one tuner counts exactly; counted as a "
                       "Llama-style decoder")
    elif c.get("moe_layer_freq") not in (None, 1):
        a.uncertain = f"{mt} with moe_layer_freq = {c['moe_layer_freq']} (tuner counts every layer past "\
                      "first_k_dense_replace as MoE)"
    return a


def decoder_shapes(a: Arch) -> list[int]:
    """Sizes (elements) of every parameter tensor of a causal LM with architecture `a`."""
    h = a.hidden
    sizes = [a.vocab * h]
    for i in range(a.layers):
        sizes += _attention(a) + [h] * a.norms_per_layer
        if a.experts and i in a.moe_layers:
            sizes += [a.experts * h, a.experts * 2 * a.moe_inter * h, a.experts * h * a.moe_inter]
            if a.shared_inter:
                sizes += _mlp(h, a.shared_inter, a.mlp_bias)
            if a.shared_gate:
                sizes.append(h)
        else:
            sizes += _mlp(h, a.inter, a.mlp_bias)
    sizes.append(h)  # final norm
    if not a.tied:
        sizes.append(a.vocab * h)
    return sizes


def _mlp(h: int, inter: int, bias: bool) -> list[int]:
    return [h * inter, h * inter, inter * h] + ([inter, inter, h] if bias else [])


def _attention(a: Arch) -> list[int]:
    h = a.hidden
    if a.mla:
        out: list[int] = []
        if a.q_lora:
            out += [h * a.q_lora] + ([a.q_lora] if a.o_bias else []) + [a.q_lora, a.q_lora * a.q_dim]
        else:
            out.append(h * a.q_dim)
        out += [h * (a.kv_lora + a.rope_dim)] + ([a.kv_lora + a.rope_dim] if a.o_bias else [])
        out += [a.kv_lora, a.kv_lora * a.heads * (a.nope_dim + a.v_head_dim)]
        out += [a.heads * a.v_head_dim * h] + ([h] if a.o_bias else [])
        return out
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    out = [h * q, h * kv, h * kv, q * h]
    if a.qkv_bias:
        out += [q, kv, kv]
    if a.o_bias:
        out.append(h)
    if a.qk_norm:
        out += [a.head_dim, a.head_dim]
    return out


def gpt2_shapes(c: dict[str, Any]) -> list[int]:
    h, layers = int(c["n_embd"]), int(c["n_layer"])
    inter = int(c.get("n_inner") or 4 * h)
    vocab, pos = int(c["vocab_size"]), int(c.get("n_positions", 1024))
    sizes = [vocab * h, pos * h]
    for _ in range(layers):
        sizes += [h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * inter, inter, inter * h, h]
    sizes += [h, h]  # final LayerNorm; lm_head is tied
    return sizes


def encoder_shapes(c: dict[str, Any]) -> list[int]:
    """BERT-style encoder with pooler (what AutoModel builds for BERT/RoBERTa/MiniLM)."""
    h, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    inter = int(_cfg(c, "intermediate_size", default=4 * h))
    vocab = int(c["vocab_size"])
    sizes = [vocab * h, int(c.get("max_position_embeddings", 512)) * h]
    if int(c.get("type_vocab_size", 2) or 0):
        sizes.append(int(c.get("type_vocab_size", 2)) * h)
    sizes += [h, h]
    for _ in range(layers):
        sizes += [h * h, h] * 4 + [h, h] + [h * inter, inter, inter * h, h] + [h, h]
    sizes += [h * h, h]
    return sizes


@dataclass
class Counted:
    """An analytic parameter count."""

    sizes: list[int]
    kind: str
    """``decoder`` or ``encoder``."""
    uncertain: str = ""


#: More parameter tensors than this are not listed one by one (real models have thousands;
#: a hand-made config.json with millions of layers once took half a minute to compile).
MAX_LISTED_TENSORS = 1_000_000


def _too_many_parameters_to_list(config: dict[str, Any]) -> bool:
    """True when the config's layer and expert counts are not plausible small integers."""
    total = 1
    for key in ("num_hidden_layers", "n_layer", "num_local_experts", "num_experts", "n_routed_experts"):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LISTED_TENSORS:
            return True
        total *= max(1, value)
    return total * 16 > MAX_LISTED_TENSORS


#: More parameters than any model trains (a quadrillion): a config.json saying so is not a
#: model's, and its byte counts would overflow the float arithmetic of the report.
MAX_PARAMETERS = 10**15


def analytic_count(config: dict[str, Any]) -> Counted | None:
    """The parameter tensors of a transformers config, or None when its shape is unknown."""
    counted = _count(config)
    return counted if counted is None or 0 <= sum(counted.sizes) <= MAX_PARAMETERS else None


def _count(config: dict[str, Any]) -> Counted | None:
    mt = str(config.get("model_type", ""))
    if _too_many_parameters_to_list(config):
        return None
    try:
        if mt == "gpt2":
            return Counted(gpt2_shapes(config), "decoder")
        if mt in ENCODERS + ENCODERS_UNCERTAIN:
            why = f"{mt} counted as BERT (its own embeddings differ)" if mt in ENCODERS_UNCERTAIN else ""
            return Counted(encoder_shapes(config), "encoder", why)
        a = architecture(config)
        if a is None:
            return None
        return Counted(decoder_shapes(a), "decoder", a.uncertain)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None


def analytic_shapes(config: dict[str, Any]) -> tuple[list[int], str] | None:
    """(parameter sizes, kind) for a transformers config, or None; see `analytic_count`
    for whether the count is exact."""
    counted = analytic_count(config)
    return None if counted is None else (counted.sizes, counted.kind)
