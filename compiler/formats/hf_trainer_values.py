"""TrainingArguments values (as transformers' parser read them) -> tuner's settings, with the
Trainer's own defaults for the training fields a file leaves unset (`hf_args.DEFAULTED`: batch 8,
lr 5e-5, linear schedule, 3 epochs, a checkpoint every 500 steps, every checkpoint kept...), so
that an HF Trainer, LLaMA-Factory or ms-swift file trains what the Trainer would train.

A value tuner has no setting for is named in a remark, never dropped in silence: a logging or save
interval given as a ratio of the run (a float below 1), a fractional epoch count, `save_strategy`
`best`, or no `save_total_limit` (the Trainer keeps every checkpoint).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..keys import paths as K
from .base import Imported, ImportRefused

#: TrainingArguments keys -> tuner's settings paths.
SIMPLE = {
    "per_device_train_batch_size": K.TRAINING_MICRO_BATCH_SIZE,
    "gradient_accumulation_steps": K.TRAINING_GRADIENT_ACCUMULATION_STEPS,
    "learning_rate": K.TRAINING_LEARNING_RATE,
    "weight_decay": K.TRAINING_WEIGHT_DECAY,
    "max_grad_norm": K.TRAINING_MAX_GRAD_NORM,
    "warmup_steps": K.TRAINING_WARMUP_STEPS,
    "warmup_ratio": K.TRAINING_WARMUP_RATIO,
    "lr_scheduler_type": K.TRAINING_LR_SCHEDULER,
    "optim": K.TRAINING_OPTIMIZER,
    "seed": K.TRAINING_SEED,
    "gradient_checkpointing": K.TRAINING_GRADIENT_CHECKPOINTING,
    "output_dir": K.OUTPUT_DIR,
    "dataloader_num_workers": K.DATA_NUM_WORKERS,
}


def _whole(value: Any) -> Any:
    """transformers 5 parses step counts (`logging_steps`, `save_steps`) as floats: 5.0 is 5."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _steps(key: str, value: Any, target: str, src: str, out: Imported) -> None:
    value = _whole(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        out.set(target, value, src)
    elif value not in (None, 0):
        out.remarks.append(f"{src}: {key} {value!r} is a ratio of the run's total steps (the Trainer reads a float "
                           f"below 1 so); {target} counts steps: not carried, set it to the step count you want")


def carry(data: dict[str, Any], defaults: dict[str, Any], path: Path, out: Imported) -> None:
    from . import deepspeed
    from .hf_trainer_fsdp import PLUGIN, _fsdp, _is_fsdp, fsdp_from_plugin

    src = path.name
    plugin = data.pop(PLUGIN, None) if PLUGIN in data else None
    # None is "unset" for the Trainer too (gradient_checkpointing: off), except save_total_limit's (keep all)
    filled = {k: v for k, v in defaults.items() if k not in data and (v is not None or k == "save_total_limit")}
    if "activation_checkpointing" in data:  # transformers 5's name; the deprecated one follows it
        filled.pop("gradient_checkpointing", None)
        data = {**data, "gradient_checkpointing": data["activation_checkpointing"]}
    unset = {key for key, path_ in SIMPLE.items() if key in filled and path_ in out.values}
    data = {**{k: v for k, v in filled.items() if k not in unset}, **data}
    if filled:
        out.remarks.append(f"{src}: unset, the Trainer's defaults are carried: "
                           + ", ".join(f"{k} {_whole(v)!r}" for k, v in sorted(filled.items()) if k not in unset))
    other: dict[str, Any] = {}
    for key, value in data.items():
        if key in SIMPLE:
            if key == "gradient_checkpointing" and value is None:
                value = False  # TrainingArguments.__post_init__: unset is off
            if value is not None:
                out.set(SIMPLE[key], _whole(value), src)
        elif key in ("fsdp", "fsdp_config", "deepspeed", "bf16", "fp16", "use_cpu", "no_cuda", "max_steps",
                     "num_train_epochs", "save_steps", "save_strategy", "save_total_limit", "local_rank",
                     "logging_steps", "activation_checkpointing"):
            continue  # below
        else:
            other[key] = value
    if other:
        out.not_distributed.setdefault(src, {}).update(other)
    if data.get("bf16") is True:
        out.set(K.TRAINING_MIXED_PRECISION, "bf16", src)
    elif data.get("fp16") is True:
        out.set(K.TRAINING_MIXED_PRECISION, "fp16", src)
    elif "bf16" in data or "fp16" in data:
        out.set(K.TRAINING_MIXED_PRECISION, "no", src)
    _schedule_length(data, src, out)
    _steps("logging_steps", data.get("logging_steps"), K.TRAINING_LOG_EVERY, src, out)
    _saving(data, src, out)
    cpu = data.get("use_cpu") is True or data.get("no_cuda") is True
    out.set(K.HARDWARE_PLATFORM, "cpu" if cpu else "cuda", src)
    if isinstance(plugin, dict):  # the plugin the Trainer itself builds from fsdp and fsdp_config
        raw = data.get("fsdp_config")
        config: dict[str, Any] = raw if isinstance(raw, dict) else {}
        fsdp_from_plugin(plugin, {k.removeprefix("fsdp_"): v for k, v in config.items()}, src, out)
    elif _is_fsdp(data.get("fsdp")):
        _fsdp(data["fsdp"], data.get("fsdp_config") or {}, src, out)
    ds = data.get("deepspeed")
    if isinstance(ds, dict) and ds:
        deepspeed.read(ds, path, out)
    elif isinstance(ds, str) and ds:
        from .base import ImportError_, load

        found = Path(ds) if Path(ds).is_absolute() else path.parent / ds
        try:
            loaded = load(found)
        except ImportError_:
            raise ImportRefused(f"{src}: deepspeed {ds} not found next to it; pass the JSON as another source "
                                f"(tuner import {src} ZERO.json) or fix the path") from None
        deepspeed.read(loaded, found, out)


def _schedule_length(data: dict[str, Any], src: str, out: Imported) -> None:
    max_steps = data.get("max_steps")
    epochs = data.get("num_train_epochs")
    if isinstance(max_steps, int) and max_steps > 0:
        out.set(K.TRAINING_MAX_STEPS, max_steps, src)
    elif isinstance(epochs, (int, float)):
        out.set(K.TRAINING_MAX_STEPS, 0, src)
        out.set(K.TRAINING_NUM_EPOCHS, max(1, math.ceil(epochs)), src)
        if not float(epochs).is_integer():
            out.remarks.append(f"{src}: num_train_epochs {epochs} stops the Trainer inside an epoch; tuner's "
                               f"training.num_epochs counts whole epochs ({max(1, math.ceil(epochs))}): set "
                               "training.max_steps for the exact length")


def _saving(data: dict[str, Any], src: str, out: Imported) -> None:
    strategy = str(data.get("save_strategy") or "steps").lower().split(".")[-1]
    if strategy == "steps":
        _steps("save_steps", data.get("save_steps"), K.CHECKPOINT_EVERY_STEPS, src, out)
    elif strategy == "no":
        out.set(K.CHECKPOINT_EVERY_STEPS, 0, src)
    elif strategy == "epoch":
        out.set(K.CHECKPOINT_EVERY_STEPS, 0, src)
        out.set(K.CHECKPOINT_EVERY_EPOCHS, 1, src)
    else:
        out.remarks.append(f"{src}: save_strategy {strategy!r} saves when the evaluation metric improves; tuner saves "
                           "every checkpoint.every_steps: not carried")
    limit = data.get("save_total_limit")
    if isinstance(limit, int) and limit > 0:
        out.set(K.CHECKPOINT_KEEP_LAST, limit, src)
    elif "save_total_limit" in data:
        out.remarks.append(f"{src}: save_total_limit unset: the Trainer keeps every checkpoint; tuner keeps "
                           "checkpoint.keep_last (3 unless set): set it to the number you want kept")
