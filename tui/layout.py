"""The wizard's layout, from the declaration: steps and their fields (each key's ``step=``
and ``order=``), the Advanced part of each step (keys with a step but no order), labels,
and text <-> value for the fields (through the compiler's own coercer).

Plain Python, no Textual import.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..compiler.canonical.normalise import coerce
from ..compiler.keys import paths as K
from ..compiler.keys.declare import type_parts
from ..compiler.keys.schema import KeyInfo, SchemaIndex, index
from ..compiler.plan.strategy import StrategyChoice

#: The composite "strategy" choice on the Sharding step (`StrategyChoice`, which
#: `Strategy.chosen` maps onto the compiler's strategies), mapped onto schema keys.
STRATEGIES: dict[StrategyChoice, str] = {
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


#: The wizard's steps, in order. Which keys each shows, and in what order, is declared with
#: the keys (``step=``, ``order=`` in compiler/keys/sections/); keys with a step but no order are
#: that step's "Advanced" part.
_STEP_TITLES: tuple[tuple[str, str], ...] = (
    ("model", "Model"), ("hardware", "Hardware"), ("sharding", "Sharding"), ("checkpoints", "Checkpoints"),
    ("precision", "Precision and batch"), ("review", "Review"),
)


def _main_keys(step_id: str, idx: SchemaIndex | None = None) -> tuple[str, ...]:
    """The step's main fields, in their declared order (`idx`: tuner's declaration, or a test's)."""
    placed = [(info.setting.order, path) for path, info in (idx or index()).keys.items()
              if info.step == step_id and info.setting.order is not None]
    return tuple(path for _, path in sorted(placed))


STEPS: tuple[Step, ...] = tuple(Step(sid, title, _main_keys(sid)) for sid, title in _STEP_TITLES)
STEP_IDS = tuple(s.id for s in STEPS)

#: Keys the Sharding step's strategy choice writes (they have no field of their own).
STRATEGY_KEYS: frozenset[str] = frozenset({K.FSDP_ENABLED, K.FSDP_VERSION, K.DEEPSPEED_ENABLED})

#: One concept, one field: FSDP's activation checkpointing is the same thing as training's
#: gradient checkpointing (which works under every strategy). The FSDP key shows only where a
#: file already sets it, and leaving FSDP carries it over to the training key.
MERGED: dict[str, str] = {K.FSDP_ACTIVATION_CHECKPOINTING: K.TRAINING_GRADIENT_CHECKPOINTING}

#: Keys the DeepSpeed builder screen edits.
BUILDER_KEYS: tuple[str, ...] = (
    K.DEEPSPEED_ZERO_STAGE, K.DEEPSPEED_OFFLOAD_OPTIMIZER, K.DEEPSPEED_OFFLOAD_PARAM, K.DEEPSPEED_NVME_PATH,
    K.DEEPSPEED_OPTIMIZER, K.DEEPSPEED_SCHEDULER, K.TRAINING_GRADIENT_ACCUMULATION_STEPS,
    K.DEEPSPEED_GRADIENT_CLIPPING, K.DEEPSPEED_PIN_MEMORY, K.DEEPSPEED_ZERO3_INIT,
)

#: Where a key with no declared step goes: its section's usual step.
_SECTION_STEP = {"model": "model", "data": "model", "output": "model", "hardware": "hardware",
                 "fsdp": "sharding", "deepspeed": "sharding", "context_parallel": "sharding",
                 "checkpoint": "checkpoints", "training": "precision", "accelerate": "hardware",
                 # sections other changes may add: where their keys belong
                 "cluster": "hardware", "launch": "hardware", "slurm": "hardware", "scheduler": "precision"}


def section_step(section: str) -> str:
    """The step for a section's keys that declare none: the built-in map, else Precision and batch."""
    step = _SECTION_STEP.get(section, "precision")
    return "hardware" if step == "review" else step


def key_step(key: str) -> str:
    """The step that shows `key`: its declared ``step``, else its section's."""
    info = index().keys[key]
    step = info.step
    return step if step in STEP_IDS and step != "review" else section_step(info.section)


def advanced_keys(step_id: str) -> tuple[str, ...]:
    """Keys of this step with no main field (no declared ``order``), shown in its "Advanced"
    part; a key added to the declaration gets a field without a code change here."""
    main = {k for step in STEPS for k in step.keys} | STRATEGY_KEYS
    return tuple(k for k in index().keys if k not in main and key_step(k) == step_id)


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
    if key == K.TRAINING_GRADIENT_CHECKPOINTING:
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
    """Text from a field -> a TOML value, by the key's typed declaration and the compiler's own
    coercer (`normalise.coerce`: the key's declared spellings, "4" -> 4, "A, B" -> a list,
    any-case choices). What does not convert stays a string, so the compiler reports it (``must be an integer (got
    "abc")``) instead of the wizard."""
    kinds, _ = type_parts(key_info(key).type)
    text = text.strip()
    if dict in kinds and (not text or text.startswith("{")):
        # the field shows an inline table as JSON text (render_value): its own format
        try:
            return json.loads(text) if text else {}
        except ValueError:
            return text  # the compiler says what is wrong with it
    if int in kinds and re.fullmatch(r"[+-]?\d{20,4000}", text):
        return int(text)  # beyond the coercer's 19 digits: a number, so the compiler says "out of range"
    value = coerce(key, text)
    if isinstance(value, float) and re.fullmatch(r"[+-]?\d+", text):
        return int(value)  # a whole number typed as one stays one in the file (4, not 4.0)
    return value
