"""SimpleTuner's configs: the flat file (JSON or TOML, keys with or without ``--``) and the
WebUI's saved file (``{"_metadata": {...}, "config": {"--key": value}}``).

Keys that match a tuner setting (the seeds' flag names are tuner's aliases) are imported;
the rest (data backends, captions, validation, hub, trackers...) are not about distributed
training and are listed in one note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..keys import paths as K
from ..keys.schema import index
from .base import Imported

#: SimpleTuner names that are not aliases of a key (the declared aliases, compiler/keys/sections/,
#: are read as they are).
NAMES = {
    "checkpoint_step_interval": K.CHECKPOINT_EVERY_STEPS,
}
#: Keys that only a SimpleTuner config has: with one of them, a flat file is SimpleTuner's.
HALLMARKS = {"model_family", "data_backend_config", "pretrained_model_name_or_path", "lora_type",
             "resolution_type", "validation_prompt", "model_flavour", "fsdp_enable", "base_model_precision"}


def is_webui(data: dict[str, Any]) -> bool:
    return isinstance(data.get("_metadata"), dict) and isinstance(data.get("config"), dict)


def matches(data: dict[str, Any]) -> bool:
    keys = {k.lstrip("-").strip() for k in data}
    idx = index()
    # tuner's own sectioned layout, or flat seed flags, read the same way
    from .hf_trainer import AXOLOTL

    if keys & AXOLOTL:
        return False
    sections = {k for k in keys & set(idx.sections) if isinstance(data.get(k), dict)}
    return bool(keys) and (all(k.startswith("--") for k in data) or bool(keys & HALLMARKS) or bool(sections))


def read_webui(data: dict[str, Any], path: Path, out: Imported) -> None:
    out.remarks.append(f"{path.name}: a SimpleTuner WebUI file; its 'config' table is imported")
    read(data["config"], path, out)


def read(data: dict[str, Any], path: Path, out: Imported) -> None:
    idx = index()
    src = path.name
    other: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = raw_key.lstrip("-").strip()
        if key in NAMES:
            out.set(NAMES[key], value, src)
        elif key in idx.aliases:
            out.set(idx.aliases[key], value, src)
        elif key in idx.keys:
            out.set(key, value, src)
        elif key in idx.sections and isinstance(value, dict):
            for sub, subvalue in value.items():
                if f"{key}.{sub}" in idx.keys:
                    out.set(f"{key}.{sub}", subvalue, src)
                else:
                    other[f"{key}.{sub}"] = subvalue
        else:
            other[key] = value
    if other:
        out.not_distributed.setdefault(src, {}).update(other)
    out.default(K.HARDWARE_PLATFORM, "cuda", src, "target platform cuda (a SimpleTuner GPU config); "
                "set hardware.platform for another")
    ds = str(out.values.get(K.DEEPSPEED_ENABLED, "")).lower() in ("true", "1") or K.DEEPSPEED_CONFIG in out.values
    if not ds:  # SimpleTuner's own clipping defaults (its parser): each value, at 2.0; DeepSpeed clips itself
        out.default(K.TRAINING_MAX_GRAD_NORM, 2.0, src, "no max_grad_norm: SimpleTuner's default 2.0 imported")
        out.default(K.TRAINING_CLIP_METHOD, "value", src,
                    "no grad_clip_method: SimpleTuner clips each gradient value by default; imported as 'value'")
    _context_parallel(out, src)


def _context_parallel(out: Imported, src: str) -> None:
    """SimpleTuner runs CP without FSDP ("standalone"); accelerate 1.15 cannot, so the
    settings say so (see docs/interop.md), and the process count, which a SimpleTuner file
    leaves to its launcher, is at least the CP size."""
    try:
        size = int(out.values.get(K.CONTEXT_PARALLEL_SIZE, 1))
    except (TypeError, ValueError):
        return  # the compile reports the bad value
    if size <= 1:
        return
    fsdp_on = str(out.values.get(K.FSDP_ENABLED, False)).lower() in ("true", "1")
    if not fsdp_on and K.DEEPSPEED_CONFIG not in out.values:
        out.set(K.CONTEXT_PARALLEL_STANDALONE, True, src)
        out.remarks.append(f"{src}: context_parallel_size {size} without FSDP: SimpleTuner's standalone context "
                           "parallelism, imported as context_parallel.standalone = true")
    out.default(K.HARDWARE_NUM_PROCESSES, size, src,
                f"the file does not say how many processes run it; imported as {size} (the context-parallel size); "
                "set hardware.num_processes to your GPU count (a multiple of it)")
