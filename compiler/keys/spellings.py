"""Forgiving spellings: what people write for a key -> tuner's canonical value.

Each normaliser here is named by the key that uses it in its declaration
(``spellings=...`` in `compiler/keys/sections/`), so a key's spellings are declared once, next to
the key. The ones built by `spelling_table` carry their table, from which the editor input
schema (`compiler/keys/schema_gen.py`) accepts the same spellings that `tuner compile` does.
The type-driven conversions every key gets ("2" -> 2, "yes" -> true, "A,B" -> a list) come
from its declared type (`compiler/keys/coercion.py`).
"""

from __future__ import annotations

from typing import Any

from .declare import spelling_table

#: Well-known model names -> (family, flavour). `--model_family=sdxl` is the seed's example.
FAMILY_ALIASES: dict[str, tuple[str, str]] = {
    **{n: ("diffusion", "unet") for n in ("sdxl", "sd15", "sd1x", "sd2x", "sd21", "kolors", "deepfloyd", "unet")},
    **{n: ("diffusion", "transformer") for n in (
        "sd3", "flux", "pixart", "pixart_sigma", "dit", "auraflow", "sana", "hidream", "chroma", "wan",
        "ltxvideo", "qwen_image", "transformer")},
    **{n: ("causal_lm", n) for n in ("llama", "mistral", "qwen", "qwen2", "qwen3", "gpt2", "gemma", "phi", "gpt_neox")},
    **{n: ("causal_lm", "") for n in ("causal", "causal-lm", "causallm", "lm", "llm", "clm")},
    **{n: ("embedding", n) for n in ("bert", "minilm", "e5", "bge")},
    **{n: ("embedding", "") for n in ("embed", "embeddings", "sentence-transformer", "sentence_transformers", "encoder")},
    **{n: ("diffusion", "") for n in ("diffusers",)},
}

#: model.family: a known name -> its family (normalise also sets the flavour from FAMILY_ALIASES).
family = spelling_table({name: fam for name, (fam, _) in FAMILY_ALIASES.items()})

STATE_DICT = spelling_table({"sharded": "sharded", "sharded_state_dict": "sharded",
                             "full": "full", "full_state_dict": "full"})
WRAP = {
    "transformer": "transformer", "transformer_based_wrap": "transformer", "transformer_based": "transformer",
    "size": "size", "size_based_wrap": "size", "size_based": "size",
    "none": "none", "no_wrap": "none", "nowrap": "none", "no": "none",
}
PRECISION = {"no": "no", "none": "no", "fp32": "no", "float32": "no", "false": "no",
             "fp16": "fp16", "float16": "fp16", "half": "fp16",
             "bf16": "bf16", "bfloat16": "bf16"}
COMM = spelling_table({"allgather": "allgather", "all_gather": "allgather", "all-gather": "allgather",
                       "alltoall": "alltoall", "all_to_all": "alltoall", "all-to-all": "alltoall"})
OFFLOAD = {"none": "none", "no": "none", "off": "none", "false": "none", "": "none", "cpu": "cpu", "nvme": "nvme"}
MODEL_TYPE = spelling_table({"peft": "lora", "lora": "lora", "full": "full", "full_finetune": "full"})
#: Other trainers' optimizer names (SimpleTuner, HF TrainingArguments) -> what tuner trains with.
#: The dtype/fused/8-bit variants change memory and speed, not the update rule tuner runs.
OPTIMIZER = {**{n: "adamw" for n in ("adamw_bf16", "adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused",
                                     "adamw_8bit", "adamw8bit", "bnb-adamw8bit", "ao-adamw8bit", "paged_adamw_8bit",
                                     "paged_adamw_32bit", "optimi-adamw", "adamw_schedulefree", "torch-adamw")},
             "adam_bf16": "adam", "sgd_torch": "sgd", "optimi-lion": "lion", "lion_8bit": "lion"}
TRUE = {"true", "yes", "on", "1"}
FALSE = {"false", "no", "off", "0"}


def fsdp_version(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().lower().lstrip("v")
        if text in ("1", "2"):
            return int(text)
    return value


fsdp_version.table = {"1": 1, "2": 2, "v1": 1, "v2": 2}  # type: ignore[attr-defined]


def wrap_policy(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    mapped = WRAP.get(value.strip().lower())
    if mapped:
        return mapped
    return value.strip()  # a dotted callable path, checked by the rules


wrap_policy.table = WRAP  # type: ignore[attr-defined]


#: training.mixed_precision: ``false`` is "no".
precision = spelling_table(PRECISION, off=(False,), off_value="no")
#: deepspeed.offload_*: ``false`` (or a null from an imported JSON) is "none".
offload = spelling_table(OFFLOAD, off=(False, None), off_value="none")


def optimizer(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().lower()
        return OPTIMIZER.get(text, text)
    return value


optimizer.table = {**OPTIMIZER, **{n: n for n in ("adamw", "adam", "sgd", "lion", "prodigy")}}  # type: ignore[attr-defined]


def gpu_ids(value: Any) -> Any:
    """accelerate writes a list, an int or "0,1"; tuner keeps accelerate's string form."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def lower(value: Any) -> Any:
    """Case and surrounding blanks do not matter (``hardware.platform = "CUDA "``)."""
    return value.strip().lower() if isinstance(value, str) else value
