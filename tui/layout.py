"""The wizard's layout, from the schema: steps and their fields, the Advanced part of each
step (every other schema key, derived), labels, and text <-> value for the fields.

Plain Python, no Textual import.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tuner.compiler.schema import KeyInfo, index


#: The composite "strategy" choice on the Sharding step, mapped onto schema keys.
STRATEGIES: dict[str, str] = {
    "ddp": "DDP (every rank holds the whole model)",
    "fsdp2": "FSDP2 (default for full-model runs)",
    "fsdp1": "FSDP v1 (deprecated)",
    "deepspeed": "DeepSpeed ZeRO",
}


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    keys: tuple[str, ...]


STEPS: tuple[Step, ...] = (
    Step("model", "Model", (
        "model.family", "model.flavour", "model.path", "model.type",
        "model.lora_rank", "model.lora_alpha", "model.lora_dropout", "model.lora_target_modules",
        "model.pooling", "model.mrl_dims", "model.temperature",
        "data.path", "data.seq_len", "data.resolution", "output.dir",
    )),
    Step("hardware", "Hardware", (
        "hardware.platform", "hardware.num_processes", "hardware.num_machines", "hardware.machine_rank",
        "hardware.main_process_ip", "hardware.main_process_port", "hardware.rdzv_backend",
        "hardware.same_network", "hardware.gpu_memory_gib", "hardware.host_memory_gib",
    )),
    Step("sharding", "Sharding", (
        "fsdp.reshard_after_forward", "fsdp.offload_params", "fsdp.auto_wrap_policy",
        "fsdp.transformer_layer_cls_to_wrap", "fsdp.min_num_params", "fsdp.sharding_strategy",
        "fsdp.activation_checkpointing",
        "deepspeed.zero_stage", "deepspeed.offload_optimizer", "deepspeed.offload_param", "deepspeed.nvme_path",
        "context_parallel.size", "context_parallel.comm_strategy",
    )),
    Step("checkpoints", "Checkpoints", (
        "checkpoint.state_dict_type", "checkpoint.every_steps", "checkpoint.keep_last",
        "fsdp.cpu_ram_efficient_loading", "checkpoint.resume", "checkpoint.export",
    )),
    Step("precision", "Precision and batch", (
        "training.mixed_precision", "training.micro_batch_size", "training.gradient_accumulation_steps",
        "training.learning_rate", "training.max_steps", "training.warmup_steps", "training.optimizer",
        "training.lr_scheduler", "training.gradient_checkpointing",
    )),
    Step("review", "Review", ()),
)
STEP_IDS = tuple(s.id for s in STEPS)

#: Keys the Sharding step's strategy choice writes (they have no field of their own).
STRATEGY_KEYS: frozenset[str] = frozenset({"fsdp.enabled", "fsdp.version", "deepspeed.enabled"})

#: One concept, one field: FSDP's activation checkpointing is the same thing as training's
#: gradient checkpointing (which works under every strategy). The FSDP key shows only where a
#: file already sets it, and leaving FSDP carries it over to the training key.
MERGED: dict[str, str] = {"fsdp.activation_checkpointing": "training.gradient_checkpointing"}

#: Keys the DeepSpeed builder screen edits.
BUILDER_KEYS: tuple[str, ...] = (
    "deepspeed.zero_stage", "deepspeed.offload_optimizer", "deepspeed.offload_param", "deepspeed.nvme_path",
    "deepspeed.optimizer", "deepspeed.scheduler", "training.gradient_accumulation_steps",
    "deepspeed.gradient_clipping", "deepspeed.pin_memory", "deepspeed.zero3_init",
)

_SECTION_STEP = {"model": "model", "data": "model", "output": "model", "hardware": "hardware",
                 "fsdp": "sharding", "deepspeed": "sharding", "context_parallel": "sharding",
                 "checkpoint": "checkpoints", "training": "precision", "accelerate": "hardware",
                 # sections other changes may add: where their keys belong
                 "cluster": "hardware", "launch": "hardware", "slurm": "hardware", "scheduler": "precision"}


def section_step(section: str) -> str:
    """The step whose advanced part holds a section's other keys: the section's
    ``x-wizard-step`` in the schema, else the built-in map, else Precision and batch."""
    declared = index().sections.get(section, {}).get("x-wizard-step")
    if declared in STEP_IDS and declared != "review":
        return declared
    step = _SECTION_STEP.get(section, "precision")
    return "hardware" if step == "review" else step


def advanced_keys(step_id: str) -> tuple[str, ...]:
    """Schema keys with no main field anywhere, shown in this step's "Advanced" part.

    Derived from the schema, so a key added to it later gets a field without a code change."""
    main = {k for step in STEPS for k in step.keys} | STRATEGY_KEYS
    return tuple(k for k, info in index().keys.items() if k not in main and section_step(info.section) == step_id)


def step_of(key: str) -> str:
    """The step that shows a diagnostic's key (Review for file-level problems)."""
    for step in STEPS:
        for k in step.keys + advanced_keys(step.id):
            if key == k or key.startswith(k + "."):
                return step.id
    canonical = canonical_key(key)
    if canonical and canonical != key:
        return step_of(canonical)
    return _SECTION_STEP.get(key.split(".", 1)[0], "review") if key else "review"


def canonical_key(key: str) -> str | None:
    """A diagnostic key (canonical, alias, or section.alias) -> canonical key."""
    idx = index()
    if key in idx.keys:
        return key
    if key in idx.aliases:
        return idx.aliases[key]
    section, _, name = key.partition(".")
    if name in idx.aliases and idx.aliases[name].startswith(section + "."):
        return idx.aliases[name]
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in idx.keys:
            return prefix
    return None


def label(key: str) -> str:
    """A field label from the schema key's name: ``reshard_after_forward`` -> ``Reshard after forward``.

    Names that several sections share (``path``, ``dir``, ``size``) get their section in front."""
    info = index().keys[key]
    name = info.name
    shared = sum(1 for k in index().keys.values() if k.name == name) > 1
    if shared or len(name) <= 4:
        name = f"{info.section}_{name}"
    text = name.replace("_", " ")
    text = re.sub(r"\b(gib|ip|cpu|gpu|lora|mrl|lr|nvme|ram|ema)\b", lambda m: m.group(1).upper(), text)
    text = text.replace("GIB", "GiB").replace("LORA", "LoRA").replace("NVME", "NVMe").replace(" cls ", " classes ")
    if key == "training.gradient_checkpointing":
        text = "activation (gradient) checkpointing"  # the one field for both names (see MERGED)
    return text[:1].upper() + text[1:]


def key_info(key: str) -> KeyInfo:
    return index().keys[key]


def render_value(value: Any) -> str:
    """A value as it goes into a text field (lists comma-separated)."""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):  # an inline object (deepspeed.config): empty shows as an empty field
        return json.dumps(value) if value else ""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_input(key: str, text: str) -> Any:
    """Text from a field -> a TOML value. What does not parse stays a string, so the
    compiler reports it (``must be an integer (got "abc")``) instead of the wizard."""
    types = key_info(key).prop.get("type")
    types = types if isinstance(types, list) else [types]
    text = text.strip()
    if "object" in types and (not text or text.startswith("{")):
        try:
            return json.loads(text) if text else {}
        except ValueError:
            return text  # the compiler says what is wrong with it
    if "array" in types:
        items = [p.strip() for p in text.split(",") if p.strip()]
        if key_info(key).prop.get("items", {}).get("type") == "integer":
            return [int(i) if re.fullmatch(r"[+-]?\d+", i) else i for i in items]
        return items
    if "integer" in types and re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if "number" in types:
        try:
            value = float(text)
        except ValueError:
            return text
        return int(value) if re.fullmatch(r"[+-]?\d+", text) else value
    return text
