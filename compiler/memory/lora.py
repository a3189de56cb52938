"""Trainable parameters of a LoRA run, as PEFT would create them on the model.

PEFT adds ``r·(in + out)`` parameters per targeted ``nn.Linear`` (matched by name: the
module's name equals the target or ends with ``.target``). transformers 5 stores routed
experts fused as 3-D parameters (``experts.gate_up_proj`` ``(E, 2I, h)``, ``experts.down_proj``
``(E, h, I)``), which are no ``nn.Linear``: PEFT reaches them only for the model types whose
transformers-4 names it translates (``peft.utils.transformers_weight_conversion``):

* Mixtral: ``w1``/``w3`` -> ``gate_up_proj`` (rank 2r), ``w2`` -> ``down_proj``;
  ``gate_proj``/``up_proj``/``down_proj`` match nothing in Mixtral's MoE layers;
* Qwen3-MoE, DeepSeek-V2/V3, OLMoE, Qwen3-Next, and from PEFT 0.22 Qwen2-MoE:
  ``gate_proj``+``up_proj`` -> ``gate_up_proj`` (rank 2r), ``down_proj`` -> ``down_proj``;
* PEFT 0.21 then drops the translated names from the module targets, so the dense and
  shared-expert MLPs of these models are *not* adapted (and Qwen2-MoE's experts are not,
  its shared expert is); PEFT 0.22 keeps a name that matches ``nn.Linear`` modules as a
  module target too, so they are (peft#3711, #3945).

A fused parameter ``(E, out, in)`` under rank r' gets ``r'·E·(in + out)`` parameters.
The rules are those of the PEFT installed here (the one the ranks will build the adapters
with; the newest modelled when there is none); pyproject.toml pins PEFT to the modelled
releases. `tests/services/test_estimate_arch.py` compares these counts with PEFT on meta models.
"""

from __future__ import annotations

from functools import lru_cache

from .shapes import Arch, _cfg, architecture

_TRANSLATED = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "down_proj": "down_proj"}
#: model type -> {transformers-4 name: fused parameter} (PEFT 0.21's own tables, see above).
PEFT_FUSED_NAMES = {
    "mixtral": {"w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"},
    **{mt: _TRANSLATED for mt in ("qwen3_moe", "deepseek_v2", "deepseek_v3", "olmoe", "qwen3_next")},
}
#: What PEFT 0.22 changed: one more model type, and translated names stay module targets.
PEFT_022_FUSED_NAMES = {**PEFT_FUSED_NAMES, "qwen2_moe": _TRANSLATED}


@lru_cache(maxsize=1)
def installed_peft() -> tuple[int, int]:
    """(major, minor) of the installed PEFT, read from its metadata (no import); the newest
    modelled release when PEFT is not installed here."""
    from importlib import metadata

    try:
        parts = metadata.version("peft").split(".")
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (metadata.PackageNotFoundError, ValueError, IndexError):
        return (0, 22)


def _attention_linears(a: Arch) -> dict[str, tuple[int, int]]:
    h = a.hidden
    if a.mla:
        out = {"kv_a_proj_with_mqa": (h, a.kv_lora + a.rope_dim),
               "kv_b_proj": (a.kv_lora, a.heads * (a.nope_dim + a.v_head_dim)),
               "o_proj": (a.heads * a.v_head_dim, h)}
        if a.q_lora:
            out.update(q_a_proj=(h, a.q_lora), q_b_proj=(a.q_lora, a.q_dim))
        else:
            out["q_proj"] = (h, a.q_dim)
        return out
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h)}


def _mlp_linears(h: int, inter: int) -> dict[str, tuple[int, int]]:
    return {"gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}


def decoder_lora(a: Arch, targets: list[str], r: int, peft: tuple[int, int] | None = None) -> int:
    """LoRA parameters PEFT (`peft` = (major, minor), else the installed one) adds to a
    decoder with architecture `a`."""
    keeps_modules = (peft or installed_peft()) >= (0, 22)
    fused = (PEFT_022_FUSED_NAMES if keeps_modules else PEFT_FUSED_NAMES).get(a.model_type, {})
    wanted = set(targets)
    to_params = {fused[t] for t in wanted if t in fused}
    # PEFT 0.21 moves the translated names to target_parameters; 0.22 also keeps them as modules
    modules = wanted if keeps_modules else wanted - set(fused)

    def linears(table: dict[str, tuple[int, int]]) -> int:
        return sum(r * (i + o) for name, (i, o) in table.items() if name in modules)

    total = 0
    for layer in range(a.layers):
        total += linears(_attention_linears(a))
        if not (a.experts and layer in a.moe_layers):
            total += linears(_mlp_linears(a.hidden, a.inter))
            continue
        if a.shared_inter:
            total += linears(_mlp_linears(a.hidden, a.shared_inter))
        e, h, i = a.experts, a.hidden, a.moe_inter
        gate_up_names = {k for k, v in fused.items() if v == "gate_up_proj"}
        if "gate_up_proj" in to_params and gate_up_names <= wanted:  # PEFT refuses half of it
            total += 2 * r * e * (h + 2 * i)
        if "down_proj" in to_params:
            total += r * e * (i + h)
    if "lm_head" in modules:
        total += r * (a.hidden + a.vocab)
    return total


def lora_trainable(s, m) -> int:
    """Trainable parameters of a LoRA run of settings `s` on model `m` (`ModelSize`)."""
    c = m.config
    r = s.model.lora_rank
    if m.kind == "decoder" and c.get("model_type") != "gpt2":
        a = architecture(c)
        if a is not None:
            return decoder_lora(a, list(s.model.lora_target_modules or ["q_proj", "v_proj"]), r)
    h = int(_cfg(c, "hidden_size", "n_embd", default=0) or 0)
    layers = int(_cfg(c, "num_hidden_layers", "n_layer", "num_layers", default=0) or 0)
    if not h or not layers:
        return max(1, m.parameters // 200)  # about 0.5% when the shape is unknown
    targets = s.model.lora_target_modules or ["q_proj", "v_proj"]
    inter = int(_cfg(c, "intermediate_size", default=4 * h) or 4 * h)
    dims = {"query": (h, h), "key": (h, h), "value": (h, h), "dense": (h, h),
            "q_proj": (h, h), "k_proj": (h, h), "v_proj": (h, h), "o_proj": (h, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}
    return layers * sum(r * (i + o) for t in targets for i, o in [dims.get(t, (h, h))])
