"""Foreign config formats `tuner import` reads, each recognised by its structure.

`detect` names the format of a parsed file; each reader module maps that format's
distributed-training keys onto canonical settings paths:

* `accelerate` — an accelerate config (YAML, or the same keys written as JSON)
* `deepspeed` — a DeepSpeed JSON config
* `simpletuner` — SimpleTuner's flat config (JSON/TOML, keys with or without ``--``) and its
  WebUI file (``{"_metadata": ..., "config": {"--key": ...}}``)
* `hf_trainer` — HF Trainer / TrainingArguments JSON
* `swift` — ms-swift's training arguments (1.x, 3.x, 4.x)
* `trainers` — axolotl's and LLaMA-Factory's training YAMLs
"""

from __future__ import annotations

from typing import Any

from . import accelerate, deepspeed, hf_trainer, simpletuner, swift, trainers
from .base import Imported, ImportError_, ImportRefused

__all__ = ["FORMATS", "Imported", "ImportError_", "ImportRefused", "detect", "READERS"]

#: Format name -> what a person would call it (used in the "unrecognised" message).
FORMATS = {
    "accelerate": "accelerate config (YAML, or JSON with the same keys)",
    "deepspeed": "DeepSpeed JSON",
    "simpletuner": "SimpleTuner config (flat JSON/TOML, with or without -- prefixes)",
    "simpletuner-webui": "SimpleTuner WebUI file ({\"_metadata\": ..., \"config\": {...}})",
    "hf-trainer": "HF Trainer / TrainingArguments JSON (fsdp, fsdp_config, deepspeed)",
    "ms-swift": "ms-swift training arguments (3.x/4.x model + tuner_type/train_type, 1.x sft_type; JSON or YAML)",
    "axolotl": "axolotl training YAML (base_model, micro_batch_size, deepspeed / fsdp_config...)",
    "llamafactory": "LLaMA-Factory training YAML (model_name_or_path, finetuning_type, deepspeed...)",
}

READERS = {
    "accelerate": accelerate.read,
    "deepspeed": deepspeed.read,
    "simpletuner": simpletuner.read,
    "simpletuner-webui": simpletuner.read_webui,
    "hf-trainer": hf_trainer.read,
    "ms-swift": swift.read,
    "axolotl": trainers.read_axolotl,
    "llamafactory": trainers.read_llamafactory,
}


def detect(data: dict[str, Any]) -> str | None:
    """The format of a parsed file, from its structure; None when it is none of them.

    Order matters only where formats share keys: a WebUI wrapper before anything else,
    accelerate's launch keys before DeepSpeed's (its ``deepspeed_config`` is a table of
    accelerate's own), trainer arguments before DeepSpeed (both may say
    ``gradient_accumulation_steps``), and SimpleTuner's flat keys last.
    """
    if simpletuner.is_webui(data):
        return "simpletuner-webui"
    if accelerate.matches(data):
        return "accelerate"
    if swift.matches(data):
        return "ms-swift"
    if trainers.matches_axolotl(data):
        return "axolotl"
    if trainers.matches_llamafactory(data):
        return "llamafactory"
    if hf_trainer.matches(data):
        return "hf-trainer"
    if deepspeed.matches(data):
        return "deepspeed"
    if simpletuner.matches(data):
        return "simpletuner"
    return None


def unrecognised_message(name: str) -> str:
    known = "; ".join(FORMATS.values())
    return (f"{name}: not a format tuner knows, so nothing was imported (tuner never guesses a default run). "
            f"Known formats: {known}")
