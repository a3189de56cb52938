"""Training YAMLs of axolotl and LLaMA-Factory: where most people's multi-GPU settings live.

Both launch one process per GPU (the count is the launcher's, not the file's) and hand the
rest to accelerate and the HF Trainer:

* axolotl (`axolotl train cfg.yaml`): `deepspeed:` is a DeepSpeed JSON's path (or an inline
  table) given to the Trainer; `fsdp_config` (keys with or without ``fsdp_``) with
  `fsdp_version` becomes accelerate's ``FSDP_*`` environment, and only the keys that are set
  and true are written there (axolotl `utils/trainer.py::setup_fsdp_envs`), so what the file
  leaves unset is `FullyShardedDataParallelPlugin`'s own default (v1: no orig params, no
  module-state sync, FULL state dict; v2: SHARDED).
* LLaMA-Factory (`llamafactory-cli train cfg.yaml`): TrainingArguments (read as the HF
  Trainer's, `hf_trainer.read`) plus its model, method and data keys; FSDP comes from an
  accelerate config given to `accelerate launch`, not from this file.

Paths inside the file (``deepspeed_configs/zero3.json``, ``examples/deepspeed/ds_z3.json``)
are relative to the directory the tool is started in, usually the repository root: they are
looked up next to the file and in its parent directories. Keys tuner has no place for are
listed as not imported; the data keys are read in trainer_data.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..keys import paths as K
from . import llm_meaning
from .base import Imported, ImportRefused
from .hf_trainer_values import SIMPLE
from .trainer_data import axolotl_data, llamafactory_data

AXOLOTL_MARKS = {"base_model", "micro_batch_size", "sequence_len", "datasets", "adapter"}
LLAMAFACTORY_MARKS = {"model_name_or_path", "finetuning_type", "stage", "template", "cutoff_len", "dataset"}

#: axolotl keys -> tuner's keys (values as written, numbers made numbers).
AXOLOTL = {
    "base_model": K.MODEL_PATH, "micro_batch_size": K.TRAINING_MICRO_BATCH_SIZE,
    "gradient_accumulation_steps": K.TRAINING_GRADIENT_ACCUMULATION_STEPS, "learning_rate": K.TRAINING_LEARNING_RATE,
    "weight_decay": K.TRAINING_WEIGHT_DECAY, "max_grad_norm": K.TRAINING_MAX_GRAD_NORM,
    "warmup_steps": K.TRAINING_WARMUP_STEPS, "warmup_ratio": K.TRAINING_WARMUP_RATIO, "lr_scheduler": K.TRAINING_LR_SCHEDULER,
    "seed": K.TRAINING_SEED, "gradient_checkpointing": K.TRAINING_GRADIENT_CHECKPOINTING,
    "logging_steps": K.TRAINING_LOG_EVERY, "output_dir": K.OUTPUT_DIR, "sequence_len": K.DATA_SEQ_LEN,
    "lora_r": K.MODEL_LORA_RANK, "lora_alpha": K.MODEL_LORA_ALPHA, "lora_dropout": K.MODEL_LORA_DROPOUT,
    "lora_target_modules": K.MODEL_LORA_TARGET_MODULES, "save_steps": K.CHECKPOINT_EVERY_STEPS,
    "save_total_limit": K.CHECKPOINT_KEEP_LAST, "dataloader_num_workers": K.DATA_NUM_WORKERS,
    "num_epochs": K.TRAINING_NUM_EPOCHS, "max_steps": K.TRAINING_MAX_STEPS,
}
#: LLaMA-Factory's own keys (the TrainingArguments ones go through hf_trainer.read).
LLAMAFACTORY = {
    "model_name_or_path": K.MODEL_PATH, "cutoff_len": K.DATA_SEQ_LEN, "lora_rank": K.MODEL_LORA_RANK,
    "lora_alpha": K.MODEL_LORA_ALPHA, "lora_dropout": K.MODEL_LORA_DROPOUT, "dataloader_num_workers": K.DATA_NUM_WORKERS,
}
#: axolotl's parallelism keys: distributed, but with no tuner equivalent (axolotl patches
#: accelerate for standalone CP, expert parallelism...): listed, not imported.
AXOLOTL_PARALLEL = {"context_parallel_size", "tensor_parallel_size", "dp_shard_size", "dp_replicate_size",
                    "expert_parallel_size", "sequence_parallel_degree", "heads_k_stride", "ring_attn_func"}

#: axolotl fsdp_config keys (prefix removed) -> tuner's FSDP keys; axolotl writes each to the
#: environment only when it is set and true.
AXOLOTL_FSDP_FLAGS = {"activation_checkpointing": K.FSDP_ACTIVATION_CHECKPOINTING, "offload_params": K.FSDP_OFFLOAD_PARAMS,
                      "sync_module_states": K.FSDP_SYNC_MODULE_STATES,
                      "cpu_ram_efficient_loading": K.FSDP_CPU_RAM_EFFICIENT_LOADING,
                      "use_orig_params": K.FSDP_USE_ORIG_PARAMS}


def matches_axolotl(data: dict[str, Any]) -> bool:
    return len(set(data) & AXOLOTL_MARKS) >= 2 and "distributed_type" not in data


def matches_llamafactory(data: dict[str, Any]) -> bool:
    keys = set(data)
    return (len(keys & LLAMAFACTORY_MARKS) >= 2 and bool(keys & {"finetuning_type", "stage", "template", "cutoff_len"})
            and "distributed_type" not in data)


def _number(value: Any) -> Any:
    """YAML 1.1 reads ``2e-5`` (no dot) as a string; axolotl and the Trainer read it as a number."""
    if isinstance(value, str):
        try:
            return int(value) if value.strip().lstrip("-").isdigit() else float(value)
        except ValueError:
            return value
    return value


def _model_path(data: dict[str, Any], key: str, src: str) -> None:
    """No model, no import: tuner would otherwise compile its built-in toy model in its place."""
    if not isinstance(data.get(key), str) or not data[key]:
        raise ImportRefused(f"{src}: no {key}: the file names no model to train; set {key} to the model's path or "
                            "hub id and import again")


def _truthy(value: Any) -> bool:
    return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else bool(value)


def _common_end(src: str, out: Imported) -> None:
    if K.HARDWARE_NUM_PROCESSES not in out.values:
        out.remarks.append(f"{src}: the launcher starts one process per GPU (the file does not say how many): "
                           "set hardware.num_processes to your GPU count (compiled for 1 process until then)")


def _deepspeed(value: Any, path: Path, src: str, out: Imported) -> None:
    from . import deepspeed
    from .accelerate import _find_relative

    if isinstance(value, dict) and value:
        deepspeed.read(value, path, out, world_known=True)
        return
    if not isinstance(value, str) or not value:
        return
    found = _find_relative(Path(value), path) or (Path.cwd() / value if (Path.cwd() / value).is_file() else None)
    if found is None:

        raise ImportRefused(f"{src}: deepspeed {value} not found next to {path.parent} or above it; pass the JSON "
                            f"as another source (tuner import {src} ZERO.json) or fix the path")
    from .base import load

    deepspeed.read(load(found), found, out, world_known=True)


def _precision(data: dict[str, Any], src: str, out: Imported) -> None:
    bf16, fp16 = data.get("bf16"), data.get("fp16")
    if bf16 is True or str(bf16).lower() == "true":
        out.set(K.TRAINING_MIXED_PRECISION, "bf16", src)
    elif str(bf16).lower() == "auto":
        out.set(K.TRAINING_MIXED_PRECISION, "bf16", src)
        out.remarks.append(f"{src}: bf16: auto means bf16 on a GPU that has it (axolotl's check); imported as bf16")
    elif fp16 is True:
        out.set(K.TRAINING_MIXED_PRECISION, "fp16", src)


def read_axolotl(data: dict[str, Any], path: Path, out: Imported) -> None:
    src = path.name
    out.set(K.HARDWARE_PLATFORM, "cuda", src)
    out.set(K.MODEL_FAMILY, "causal_lm", src)
    other: dict[str, Any] = {}
    for key, value in data.items():
        if key in AXOLOTL:
            if not (key == "lora_target_modules" and data.get("lora_target_linear") is True):
                out.set(AXOLOTL[key], _number(value), src)
        elif key in ("bf16", "fp16", "deepspeed", "fsdp", "fsdp_config", "fsdp_version", "adapter", "load_in_4bit",
                     "load_in_8bit", "lora_target_linear", "datasets", "optimizer"):
            continue  # below
        elif key in AXOLOTL_PARALLEL:
            if value not in (None, 1):
                out.unmodelled[key] = value
                out.remarks.append(f"{src}: {key} {value} is axolotl's own parallelism (it patches accelerate for it); "
                                   "tuner has no equivalent, so it is not imported")
        else:
            other[key] = value
    if "max_steps" not in data and "num_epochs" in data:
        out.set(K.TRAINING_MAX_STEPS, 0, src)  # epochs decide, as in axolotl
    _precision(data, src, out)
    _optimizer(data.get("optimizer"), src, out, other)
    _model_path(data, "base_model", src)
    llm_meaning.axolotl(data, src, out, other)
    adapter = str(data.get("adapter") or "").lower()
    out.set(K.MODEL_TYPE, "lora" if adapter in ("lora", "qlora") else "full", src)
    qlora = data.get("load_in_4bit") is True and adapter in ("lora", "qlora")
    if qlora:
        out.set(K.MODEL_BASE_PRECISION, "nf4-bnb", src)  # QLoRA: bitsandbytes 4-bit NF4, as axolotl loads it
    for key in ("load_in_4bit", "load_in_8bit"):
        if data.get(key) and not (key == "load_in_4bit" and qlora):
            other[key] = data[key]
    axolotl_data(data, src, out, other)
    if data.get("deepspeed"):
        _deepspeed(data["deepspeed"], path, src, out)
    elif data.get("fsdp") or data.get("fsdp_config"):
        _axolotl_fsdp(data, src, out)
    if other:
        out.not_distributed.setdefault(src, {}).update(other)
    _common_end(src, out)


def _optimizer(name: Any, src: str, out: Imported, other: dict[str, Any]) -> None:
    """The Trainer's AdamW variants (torch, fused, 8-bit, paged) are AdamW's update rule, its Lion
    variants Lion's; any other optimizer is refused naming it (it changes what is trained)."""
    if not isinstance(name, str) or not name:
        return
    low = name.lower()
    if low.replace("paged_", "").startswith("adamw"):
        out.set(K.TRAINING_OPTIMIZER, "adamw", src)
        if low != "adamw":
            out.remarks.append(f"{src}: optimizer {name} imported as adamw (the variant changes memory, not the update rule)")
    elif low in ("adam", "sgd"):
        out.set(K.TRAINING_OPTIMIZER, low, src)
    elif low.startswith("lion"):
        out.set(K.TRAINING_OPTIMIZER, "lion", src)  # lion_8bit / lion_32bit: Lion's update rule
        out.remarks.append(f"{src}: optimizer {name} imported as lion (the variant changes memory, not the update rule)")
    else:
        llm_meaning.refuse(src, "optimizer", name, "an optimizer tuner does not train with (it trains AdamW, Adam, "
                           "SGD, Lion or Prodigy)")


def _axolotl_fsdp(data: dict[str, Any], src: str, out: Imported) -> None:
    cfg = {k.removeprefix("fsdp_") if k != "fsdp_version" else k: v for k, v in (data.get("fsdp_config") or {}).items()}
    version = _axolotl_fsdp_version(data, cfg, src, out)
    out.set(K.FSDP_ENABLED, True, src)
    out.set(K.FSDP_VERSION, version, src)
    for key, target in AXOLOTL_FSDP_FLAGS.items():
        if version == 2 and key in ("sync_module_states", "use_orig_params"):
            continue  # FSDP2 has none of these
        if version == 1 and key in ("sync_module_states", "use_orig_params"):
            # axolotl also hands fsdp_config to the HF Trainer, whose plugin arguments win over the
            # environment: unset is "true" there (TrainingArguments._process_fsdp_args, FSDP1 branch)
            out.set(target, _truthy(cfg.get(key, True)), src)
            continue
        out.set(target, bool(cfg.get(key)), src)  # unset or false: not in the environment, the plugin's false
    if version == 1:
        # axolotl sets no FSDP_SHARDING_STRATEGY; the Trainer's FSDP1 reshard_after_forward is "full_shard"
        out.set(K.FSDP_SHARDING_STRATEGY, "full_shard", src)
        out.set(K.FSDP_RESHARD_AFTER_FORWARD, True, src)  # full_shard reshards after forward: no contradiction
        out.set(K.FSDP_FORWARD_PREFETCH, False, src)
        out.set(K.FSDP_BACKWARD_PREFETCH, "NO_PREFETCH", src)
    else:
        out.set(K.FSDP_RESHARD_AFTER_FORWARD, _truthy(cfg.get("reshard_after_forward", True)), src)
    # axolotl hands fsdp_config to the Trainer (core/builders/base.py:684-686), whose plugin arguments
    # carry state_dict_type FULL_STATE_DICT when unset, for FSDP v1 and FSDP2 alike (transformers
    # training_args.py:2852; :2768 in 5.14.1, which axolotl pins); accelerate's environment default
    # (SHARDED for FSDP2) never applies
    out.set(K.CHECKPOINT_STATE_DICT_TYPE, str(cfg.get("state_dict_type") or "FULL_STATE_DICT"), src)
    final = cfg.get("final_state_dict_type")
    if final and final != (cfg.get("state_dict_type") or "FULL_STATE_DICT"):
        out.remarks.append(f"{src}: fsdp_config.final_state_dict_type {final}: axolotl saves the final model with "
                           "it (train.py:319-325) and checkpoints with state_dict_type; tuner saves both the "
                           "same way, so the imported state_dict_type is used for the final model too")
    policy = str(cfg.get("auto_wrap_policy") or "")
    if cfg.get("transformer_layer_cls_to_wrap") and policy in ("", "TRANSFORMER_BASED_WRAP"):
        out.set(K.FSDP_AUTO_WRAP_POLICY, "transformer", src)
        out.set(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP, cfg["transformer_layer_cls_to_wrap"], src)
    elif policy == "SIZE_BASED_WRAP":
        out.set(K.FSDP_AUTO_WRAP_POLICY, "size", src)
        if cfg.get("min_num_params"):
            out.set(K.FSDP_MIN_NUM_PARAMS, int(cfg["min_num_params"]), src)
    elif policy == "TRANSFORMER_BASED_WRAP":
        out.set(K.FSDP_AUTO_WRAP_POLICY, "transformer", src)  # the model's _no_split_modules
    else:
        out.set(K.FSDP_AUTO_WRAP_POLICY, "none", src)
    done = {*AXOLOTL_FSDP_FLAGS, "reshard_after_forward", "state_dict_type", "auto_wrap_policy",
            "transformer_layer_cls_to_wrap", "min_num_params", "fsdp_version", "version"}
    for key, value in cfg.items():
        if key not in done:
            out.unmodelled[f"fsdp_config.{key}"] = value
    if cfg.get("sharding_strategy") not in (None, "FULL_SHARD", "full_shard"):
        out.remarks.append(f"{src}: fsdp_config.sharding_strategy {cfg['sharding_strategy']} is not passed on by "
                           "axolotl (it sets no FSDP_SHARDING_STRATEGY); accelerate's FULL_SHARD is imported")


def _axolotl_fsdp_version(data: dict[str, Any], cfg: dict[str, Any], src: str, out: Imported) -> int:
    """The FSDP version the HF Trainer builds axolotl's plugin with: axolotl's validator
    (utils/schemas/validation.py:1107-1123) takes the top-level fsdp_version, else fsdp_config.version,
    else fsdp_config.fsdp_version, else 1, and writes it into fsdp_config.fsdp_version unless that is
    set already; the Trainer reads fsdp_config's (training_args.py: fsdp_ prefix dropped, then
    `version`). axolotl's own FSDP2 patches read the top-level key, so a disagreement is named."""
    top, inner = data.get("fsdp_version"), cfg.get("version") or cfg.get("fsdp_version")
    trainer = int(cfg.get("fsdp_version") or top or 1) if top else int(inner or 1)
    if top and cfg.get("fsdp_version") and int(top) != int(cfg["fsdp_version"]):
        out.remarks.append(f"{src}: fsdp_version {top} and fsdp_config.fsdp_version {cfg['fsdp_version']} disagree: "
                           f"the HF Trainer builds the FSDP plugin from fsdp_config's (version {trainer} imported) "
                           "while axolotl applies its FSDP2 patches by the top-level fsdp_version; set one value")
    return trainer


def read_llamafactory(data: dict[str, Any], path: Path, out: Imported) -> None:
    from . import hf_trainer

    src = path.name
    out.set(K.MODEL_FAMILY, "causal_lm", src)
    rest: dict[str, Any] = {}
    other: dict[str, Any] = {}
    for key, value in data.items():
        if key in LLAMAFACTORY:
            out.set(LLAMAFACTORY[key], _number(value), src)
        elif key == "deepspeed":
            continue  # below, found the way LLaMA-Factory finds it (from the repository root)
        elif key in SIMPLE or key in ("bf16", "fp16", "max_steps", "num_train_epochs", "save_steps",
                                                  "save_strategy", "save_total_limit", "output_dir", "fsdp",
                                                  "fsdp_config", "logging_steps", "activation_checkpointing"):
            rest[key] = _number(value)  # TrainingArguments, the Trainer's FSDP list and fsdp_config among them
        else:
            other[key] = value
    _model_path(data, "model_name_or_path", src)
    llm_meaning.llamafactory(data, src, out, other)
    gc = out.values[K.TRAINING_GRADIENT_CHECKPOINTING]
    hf_trainer.read(rest, path, out)
    out.set(K.TRAINING_GRADIENT_CHECKPOINTING, gc, src)  # LLaMA-Factory's own switch, not the Trainer's
    llamafactory_data(data, src, out, other)
    if data.get("deepspeed"):
        _deepspeed(data["deepspeed"], path, src, out)
    if other:
        out.not_distributed.setdefault(src, {}).update(other)
    _common_end(src, out)
