"""HF Trainer arguments saved as JSON (TrainingArguments, and so trl's configs), and
ms-swift's training-args JSON (TrainingArguments plus its own keys).

The distributed-training keys are ``fsdp`` (a string or list of options), ``fsdp_config``
(keys with or without the ``fsdp_`` prefix) and ``deepspeed`` (a path or an inline table),
plus the batch, precision and schedule keys. Unset FSDP keys import as transformers' own
defaults (version 1, use_orig_params and sync_module_states on, RAM-efficient loading off).

The values are first read by transformers' own ``HfArgumentParser(TrainingArguments)`` (in a
subprocess, `python -m tuner.runtime.hf_args`: the compiler imports no transformers), so that
``"bf16": "true"`` or ``"gradient_accumulation_steps": "4"`` mean what the Trainer makes of
them, a value the parser refuses is refused naming the key, and a key TrainingArguments does not
have is listed as not imported. ms-swift's ``torch_dtype`` sets bf16/fp16 where the file leaves
them unset, as ms-swift does.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..keys import paths as K
from .base import Imported, ImportRefused

INSTALL = "pip install 'tuner-train[runtime]'"

#: TrainingArguments keys; two of them (one a distributed or batch key) mark the format.
TRAINER_KEYS = {"per_device_train_batch_size", "per_device_eval_batch_size", "lr_scheduler_type", "logging_steps",
                "save_strategy", "eval_strategy", "evaluation_strategy", "num_train_epochs", "optim", "fsdp",
                "fsdp_config", "deepspeed", "output_dir", "learning_rate", "gradient_accumulation_steps",
                "warmup_ratio", "bf16", "fp16", "report_to", "ddp_backend", "save_total_limit"}
STRONG = {"per_device_train_batch_size", "fsdp_config", "lr_scheduler_type", "optim", "save_strategy",
          "eval_strategy", "evaluation_strategy", "ddp_backend", "warmup_ratio"}
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
}
#: Where `upstream` hands on the FSDP plugin arguments the Trainer builds from the file.
PLUGIN = "<the Trainer's FSDP plugin arguments>"
FSDP_OPTIONS = {"full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard", "offload", "auto_wrap"}


def _is_fsdp(value: Any) -> bool:
    words = value.split() if isinstance(value, str) else value if isinstance(value, list) else []
    return bool(words) and all(isinstance(w, str) and w in FSDP_OPTIONS for w in words)


#: axolotl's own config keys: its YAMLs resemble trainer arguments but are another format.
AXOLOTL = {"base_model", "datasets", "micro_batch_size", "sequence_len", "adapter"}


def matches(data: dict[str, Any]) -> bool:
    keys = set(data)
    return (len(keys & TRAINER_KEYS) >= 2 and bool(keys & STRONG or _is_fsdp(data.get("fsdp")))
            and not keys & AXOLOTL)


@lru_cache(maxsize=32)
def _parse_upstream(text: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "tuner.runtime.hf_args"], input=text, capture_output=True,
                          text=True)
    try:
        answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = {"error": f"transformers' HfArgumentParser did not answer: {(proc.stderr or '').strip()[-500:]}"}
    return answer


def upstream(data: dict[str, Any], src: str, out: Imported) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """The keys as transformers' HfArgumentParser(TrainingArguments) reads them, those it does not
    know, and its defaults for the training fields the file leaves unset. Without transformers: the
    values as written, with a remark."""
    if importlib.util.find_spec("transformers") is None:
        out.remarks.append(f"{src}: transformers is not installed, so the values are taken as written and not "
                           f"checked by its HfArgumentParser (nor its defaults carried); {INSTALL} to read them as "
                           "the Trainer does")
        return data, [], {}
    answer = _parse_upstream(json.dumps(data, sort_keys=True, default=str))
    if "error" in answer:
        raise ImportRefused(f"{src}: {answer['error']} (transformers' HfArgumentParser(TrainingArguments) refuses "
                            "it; correct the value)")
    values = {k: answer["values"][k] if k in answer["values"] else v for k, v in data.items()}
    if "fsdp_plugin_args" in answer:  # the plugin the Trainer builds (hf_args.fsdp_plugin_args)
        values[PLUGIN] = answer["fsdp_plugin_args"]
    return values, list(answer["unknown"]), dict(answer.get("defaults") or {})


def read(data: dict[str, Any], path: Path, out: Imported, swift: bool = False) -> None:
    from .hf_trainer_values import carry

    src = path.name
    data, unknown, defaults = upstream(data, src, out)
    data, unknown = _warmup(data, unknown, src, out)
    if unknown:
        whose = "ms-swift's own or unknown" if swift else "unknown to transformers' HfArgumentParser"
        out.remarks.append(f"{src}: {', '.join(sorted(unknown))}: not TrainingArguments fields ({whose}); "
                           "not imported")
    carry(data, defaults, path, out)


def _warmup(data: dict[str, Any], unknown: list[str], src: str, out: Imported) -> tuple[dict[str, Any], list[str]]:
    """transformers 5 folded `warmup_ratio` into `warmup_steps` (a float below 1 is a ratio of
    the total steps): a ratio written either way becomes training.warmup_ratio, and a file written
    for transformers 4 keeps its `warmup_ratio` under a transformers that no longer has it."""
    steps = data.get("warmup_steps")
    if isinstance(steps, float) and 0 < steps < 1:
        data = {k: v for k, v in data.items() if k != "warmup_steps"}
        out.set(K.TRAINING_WARMUP_RATIO, steps, src)
    elif isinstance(steps, float) and steps.is_integer():  # transformers 5 parses every warmup_steps as a float
        data = {**data, "warmup_steps": int(steps)}
    if "warmup_ratio" in unknown:
        unknown = [k for k in unknown if k != "warmup_ratio"]
        out.remarks.append(f"{src}: warmup_ratio is no TrainingArguments field in this transformers (5 reads a "
                           "ratio from warmup_steps below 1); imported as training.warmup_ratio, as transformers 4 "
                           "meant it")
    return data, unknown


def _fsdp(options: Any, config: dict[str, Any], src: str, out: Imported) -> None:
    """Without transformers: the file's fsdp options and fsdp_config as written (version 1 unless
    it says otherwise), transformers 4's defaults for the rest."""
    words = options.split() if isinstance(options, str) else list(options)
    cfg = {k.removeprefix("fsdp_"): v for k, v in config.items()} if isinstance(config, dict) else {}
    version = int(cfg.get("version", 1))
    strategy = next((w for w in words if w not in ("offload", "auto_wrap")), "full_shard")
    strategy = "hybrid_shard" if strategy == "hybrid_shard_zero2" else strategy
    classes = cfg.get("transformer_layer_cls_to_wrap")
    policy = ("TRANSFORMER_BASED_WRAP" if classes or "auto_wrap" in words else
              "SIZE_BASED_WRAP" if int(cfg.get("min_num_params", 0) or 0) > 0 else "NO_WRAP")
    plugin: dict[str, Any] = {"fsdp_version": version, "auto_wrap_policy": policy, "cpu_offload": "offload" in words,
                              "cpu_ram_efficient_loading": _bool(cfg.get("cpu_ram_efficient_loading", False)),
                              "state_dict_type": cfg.get("state_dict_type", "FULL_STATE_DICT")}
    if classes:
        plugin["transformer_cls_names_to_wrap"] = ",".join(classes) if isinstance(classes, list) else classes
    if policy == "SIZE_BASED_WRAP":
        plugin["min_num_params"] = int(cfg["min_num_params"])
    if "activation_checkpointing" in cfg:
        plugin["activation_checkpointing"] = _bool(cfg["activation_checkpointing"])
    if version == 1:
        plugin.update(reshard_after_forward=strategy, forward_prefetch=_bool(cfg.get("forward_prefetch", False)),
                      backward_prefetch=str(cfg.get("backward_prefetch", "NO_PREFETCH")).upper(),
                      use_orig_params=_bool(cfg.get("use_orig_params", True)),
                      sync_module_states=_bool(cfg.get("sync_module_states", True)))
    else:
        plugin["reshard_after_forward"] = _bool(cfg.get("reshard_after_forward", True))
    fsdp_from_plugin(plugin, cfg, src, out)


def fsdp_from_plugin(plugin: dict[str, Any], cfg: dict[str, Any], src: str, out: Imported) -> None:
    """The Trainer's FSDP plugin arguments (`TrainingArguments(...).fsdp_plugin_args`) -> tuner's
    FSDP settings; fsdp_config keys the plugin does not carry are listed as not imported."""
    out.set(K.FSDP_ENABLED, True, src)
    version = int(plugin.get("fsdp_version", 1))
    out.set(K.FSDP_VERSION, version, src)
    policy = plugin.get("auto_wrap_policy", "NO_WRAP")
    if policy == "TRANSFORMER_BASED_WRAP":
        out.set(K.FSDP_AUTO_WRAP_POLICY, "transformer", src)  # named classes, else the model's _no_split_modules
        if plugin.get("transformer_cls_names_to_wrap"):
            out.set(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP, str(plugin["transformer_cls_names_to_wrap"]).split(","), src)
    elif policy == "SIZE_BASED_WRAP":
        out.set(K.FSDP_AUTO_WRAP_POLICY, "size", src)
        out.set(K.FSDP_MIN_NUM_PARAMS, int(plugin.get("min_num_params", 0)), src)
    else:
        out.set(K.FSDP_AUTO_WRAP_POLICY, "none", src)
    out.set(K.FSDP_OFFLOAD_PARAMS, bool(plugin.get("cpu_offload", False)), src)
    out.set(K.FSDP_CPU_RAM_EFFICIENT_LOADING, bool(plugin.get("cpu_ram_efficient_loading", False)), src)
    out.set(K.FSDP_ACTIVATION_CHECKPOINTING, bool(plugin.get("activation_checkpointing", False)), src)
    out.set(K.CHECKPOINT_STATE_DICT_TYPE, str(plugin.get("state_dict_type", "FULL_STATE_DICT")), src)
    reshard = plugin.get("reshard_after_forward", True)
    if version == 1:
        strategy = str(reshard).lower()
        strategy = "hybrid_shard" if strategy == "hybrid_shard_zero2" else strategy
        out.set(K.FSDP_SHARDING_STRATEGY, strategy, src)
        out.set(K.FSDP_RESHARD_AFTER_FORWARD, strategy in ("full_shard", "hybrid_shard"), src)
        for key in ("use_orig_params", "sync_module_states", "forward_prefetch"):
            out.set(f"fsdp.{key}", bool(plugin.get(key, False)), src)
        out.set(K.FSDP_BACKWARD_PREFETCH, str(plugin.get("backward_prefetch", "NO_PREFETCH")).upper(), src)
    else:
        out.set(K.FSDP_RESHARD_AFTER_FORWARD, bool(reshard), src)
    done = {"version", "transformer_layer_cls_to_wrap", "min_num_params", "use_orig_params", "sync_module_states",
            "forward_prefetch", "cpu_ram_efficient_loading", "activation_checkpointing", "backward_prefetch",
            "reshard_after_forward", "state_dict_type", "auto_wrap_policy", "cpu_offload"}
    for key, value in cfg.items():
        if key not in done:
            out.unmodelled[f"fsdp_config.{key}"] = value
    if version == 2:
        ignored = sorted(k for k in ("use_orig_params", "sync_module_states", "forward_prefetch", "backward_prefetch")
                         if k in cfg)
        if ignored:
            out.remarks.append(f"{src}: fsdp_config {', '.join(ignored)}: FSDP1 options the Trainer does not pass to "
                               "FSDP2 (its fsdp_config version is 2): not imported")


def _bool(value: Any) -> Any:
    return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else value
