"""SimpleTuner's configs: the flat file (JSON or TOML, keys with or without ``--``) and the
WebUI's saved file (``{"_metadata": {...}, "config": {"--key": value}}``).

Keys that match a tuner setting (the seeds' flag names are tuner's aliases) are imported; what
the file leaves unset is SimpleTuner's own default, and keys that change what SimpleTuner trains
are each mapped, named in their own note, or refused (`simpletuner_meaning.py`). The rest (data
backends' details, captions, validation, hub, trackers...) are listed in one note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..keys import paths as K
from ..keys.schema import index
from . import simpletuner_meaning
from .base import Imported

#: SimpleTuner names that are not aliases of a key (the declared aliases, compiler/keys/sections/,
#: are read as they are).
NAMES = {
    "checkpoint_step_interval": K.CHECKPOINT_EVERY_STEPS,
    "fsdp_cpu_offload": K.FSDP_OFFLOAD_PARAMS,  # field_registry/sections/advanced.py:1799: FSDP's CPU offload
    # saves at the end of every N epochs, beside the step interval (simpletuner/helpers/training/trainer.py:5611-5615)
    "checkpoint_epoch_interval": K.CHECKPOINT_EVERY_EPOCHS,
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


def _simpletuner_dialect(data: dict[str, Any]) -> bool:
    """SimpleTuner's own file (its defaults apply), not tuner's sectioned layout read here too."""
    keys = {k.lstrip("-").strip() for k in data}
    return any(k.startswith("--") for k in data) or bool(keys & HALLMARKS)


def read_webui(data: dict[str, Any], path: Path, out: Imported) -> None:
    out.remarks.append(f"{path.name}: a SimpleTuner WebUI file; its 'config' table is imported")
    read(data["config"], path, out, webui=True)


def read(data: dict[str, Any], path: Path, out: Imported, webui: bool = False) -> None:
    idx = index()
    src = path.name
    dialect = webui or _simpletuner_dialect(data)
    raw = {k.lstrip("-").strip(): v for k, v in data.items()}
    other: dict[str, Any] = {}
    for key, value in raw.items():
        if dialect and key in simpletuner_meaning.OWN_MEANING:
            continue  # SimpleTuner means something else than tuner's alias: simpletuner_meaning decides
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
    if dialect:
        simpletuner_meaning.apply(raw, path, out, other)  # raises ImportRefused where tuner cannot train it
    if other:
        out.not_distributed.setdefault(src, {}).update(other)
    out.default(K.HARDWARE_PLATFORM, "cuda", src, "target platform cuda (a SimpleTuner GPU config); "
                "set hardware.platform for another")
    if dialect:  # once every file is read: an accelerate YAML beside it may turn FSDP or DeepSpeed on
        out.finish.append(lambda imported: simpletuner_meaning.finish(raw, src, imported))
        out.finish.append(lambda imported: _context_parallel(imported, src))
    else:
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
