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
import math
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from .base import Imported, ImportRefused

INSTALL = "pip install 'tuner-train[runtime]'"

#: TrainingArguments keys; two of them (one a distributed or batch key) mark the format.
TRAINER_KEYS = {"per_device_train_batch_size", "per_device_eval_batch_size", "lr_scheduler_type", "logging_steps",
                "save_strategy", "eval_strategy", "evaluation_strategy", "num_train_epochs", "optim", "fsdp",
                "fsdp_config", "deepspeed", "output_dir", "learning_rate", "gradient_accumulation_steps",
                "warmup_ratio", "bf16", "fp16", "report_to", "ddp_backend", "save_total_limit"}
STRONG = {"per_device_train_batch_size", "fsdp_config", "lr_scheduler_type", "optim", "save_strategy",
          "eval_strategy", "evaluation_strategy", "ddp_backend", "warmup_ratio"}
SWIFT_KEYS = {"train_type", "template", "swift_version", "sequence_parallel_size", "model_type"}
SIMPLE = {
    "per_device_train_batch_size": "training.micro_batch_size",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps",
    "learning_rate": "training.learning_rate",
    "weight_decay": "training.weight_decay",
    "max_grad_norm": "training.max_grad_norm",
    "warmup_steps": "training.warmup_steps",
    "warmup_ratio": "training.warmup_ratio",
    "lr_scheduler_type": "training.lr_scheduler",
    "optim": "training.optimizer",
    "seed": "training.seed",
    "gradient_checkpointing": "training.gradient_checkpointing",
    "logging_steps": "training.log_every",
    "output_dir": "output.dir",
}
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


def matches_swift(data: dict[str, Any]) -> bool:
    return matches(data) and len(set(data) & SWIFT_KEYS) >= 2


def read_swift(data: dict[str, Any], path: Path, out: Imported) -> None:
    src = path.name
    train_type = str(data.get("train_type", "")).lower()
    if train_type:
        out.set("model.type", "lora" if train_type in ("lora", "qlora", "longlora", "adalora", "dora") else "full", src)
    if isinstance(data.get("model"), str):
        out.set("model.path", data["model"], src)
    sp = data.get("sequence_parallel_size")
    if isinstance(sp, int) and sp > 1:
        out.unmodelled["sequence_parallel_size"] = sp
        out.remarks.append(f"{src}: sequence_parallel_size {sp} is ms-swift's own (Ulysses) sequence parallelism, "
                           "applied by ms-swift itself; tuner's artefacts do not carry it")
    handled = {"train_type", "model", "sequence_parallel_size", "torch_dtype"}
    rest = {k: v for k, v in data.items() if k not in handled}
    # ms-swift's ModelArguments._init_mixed_precision: torch_dtype fills the bf16/fp16 left unset
    dtype = str(data.get("torch_dtype") or "").lower().removeprefix("torch.")
    if dtype in ("bfloat16", "float16", "float32"):
        for key, on in (("bf16", dtype == "bfloat16"), ("fp16", dtype != "bfloat16")):
            if rest.get(key) is None:
                rest[key] = on
    elif dtype:
        out.not_distributed.setdefault(src, {})["torch_dtype"] = data["torch_dtype"]
    read(rest, path, out, swift=True)


@lru_cache(maxsize=32)
def _parse_upstream(text: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "tuner.runtime.hf_args"], input=text, capture_output=True,
                          text=True)
    try:
        answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = {"error": f"transformers' HfArgumentParser did not answer: {(proc.stderr or '').strip()[-500:]}"}
    return answer


def upstream(data: dict[str, Any], src: str, out: Imported) -> tuple[dict[str, Any], list[str]]:
    """The keys as transformers' HfArgumentParser(TrainingArguments) reads them, and those it
    does not know. Without transformers: the values as written, with a remark."""
    if importlib.util.find_spec("transformers") is None:
        out.remarks.append(f"{src}: transformers is not installed, so the values are taken as written and not "
                           f"checked by its HfArgumentParser; {INSTALL} to read them as the Trainer does")
        return data, []
    answer = _parse_upstream(json.dumps(data, sort_keys=True, default=str))
    if "error" in answer:
        raise ImportRefused(f"{src}: {answer['error']} (transformers' HfArgumentParser(TrainingArguments) refuses "
                            "it; correct the value)")
    values = {k: answer["values"][k] if k in answer["values"] else v for k, v in data.items()}
    return values, list(answer["unknown"])


def read(data: dict[str, Any], path: Path, out: Imported, swift: bool = False) -> None:
    from . import deepspeed

    src = path.name
    data, unknown = upstream(data, src, out)
    if unknown:
        whose = "ms-swift's own or unknown" if swift else "unknown to transformers' HfArgumentParser"
        out.remarks.append(f"{src}: {', '.join(sorted(unknown))}: not TrainingArguments fields ({whose}); "
                           "not imported")
    other: dict[str, Any] = {}
    for key, value in data.items():
        if key in SIMPLE and value is not None:
            out.set(SIMPLE[key], value, src)
        elif key in ("fsdp", "fsdp_config", "deepspeed", "bf16", "fp16", "use_cpu", "no_cuda", "max_steps",
                     "num_train_epochs", "save_steps", "save_strategy", "save_total_limit", "local_rank"):
            continue  # below
        else:
            other[key] = value
    if other:
        out.not_distributed.setdefault(src, {}).update(other)
    if data.get("bf16") is True:
        out.set("training.mixed_precision", "bf16", src)
    elif data.get("fp16") is True:
        out.set("training.mixed_precision", "fp16", src)
    max_steps = data.get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0:
        out.set("training.max_steps", max_steps, src)
    elif isinstance(data.get("num_train_epochs"), (int, float)):
        out.set("training.max_steps", 0, src)
        out.set("training.num_epochs", max(1, math.ceil(data["num_train_epochs"])), src)
    if data.get("save_strategy") in ("steps", None) and isinstance(data.get("save_steps"), int):
        out.set("checkpoint.every_steps", data["save_steps"], src)
    if isinstance(data.get("save_total_limit"), int) and data["save_total_limit"] > 0:
        out.set("checkpoint.keep_last", data["save_total_limit"], src)
    cpu = data.get("use_cpu") is True or data.get("no_cuda") is True
    out.set("hardware.platform", "cpu" if cpu else "cuda", src)
    if _is_fsdp(data.get("fsdp")):
        _fsdp(data["fsdp"], data.get("fsdp_config") or {}, src, out)
    ds = data.get("deepspeed")
    if isinstance(ds, dict) and ds:
        deepspeed.read(ds, path, out)
    elif isinstance(ds, str) and ds:
        from .base import ImportError_, load

        found = Path(ds) if Path(ds).is_absolute() else path.parent / ds
        try:
            deepspeed.read(load(found), found, out)
        except ImportError_:
            out.remarks.append(f"{src}: deepspeed {ds} not found next to it; pass it as another source")
            out.set("deepspeed.enabled", True, src)


def _fsdp(options: Any, config: dict[str, Any], src: str, out: Imported) -> None:
    words = options.split() if isinstance(options, str) else list(options)
    cfg = {k.removeprefix("fsdp_"): v for k, v in config.items()} if isinstance(config, dict) else {}
    out.set("fsdp.enabled", True, src)
    version = int(cfg.get("version", 1))
    out.set("fsdp.version", version, src)
    strategy = next((w for w in words if w not in ("offload", "auto_wrap")), "full_shard")
    strategy = "hybrid_shard" if strategy == "hybrid_shard_zero2" else strategy
    if version == 1:
        out.set("fsdp.sharding_strategy", strategy, src)
    out.set("fsdp.reshard_after_forward", bool(cfg.get("reshard_after_forward", strategy in ("full_shard", "hybrid_shard"))), src)
    out.set("fsdp.offload_params", "offload" in words, src)
    classes = cfg.get("transformer_layer_cls_to_wrap")
    if classes:
        out.set("fsdp.auto_wrap_policy", "transformer", src)
        out.set("fsdp.transformer_layer_cls_to_wrap", classes, src)
    elif int(cfg.get("min_num_params", 0) or 0) > 0:
        out.set("fsdp.auto_wrap_policy", "size", src)
        out.set("fsdp.min_num_params", int(cfg["min_num_params"]), src)
    elif "auto_wrap" in words:
        out.set("fsdp.auto_wrap_policy", "transformer", src)  # the model's _no_split_modules, as transformers does
    else:
        out.set("fsdp.auto_wrap_policy", "none", src)
    # transformers' own defaults for what fsdp_config leaves unset.
    for key, default in (("use_orig_params", True), ("sync_module_states", True), ("forward_prefetch", False),
                         ("cpu_ram_efficient_loading", False), ("activation_checkpointing", False)):
        out.set(f"fsdp.{key}", _bool(cfg.get(key, default)), src)
    if cfg.get("backward_prefetch"):
        out.set("fsdp.backward_prefetch", str(cfg["backward_prefetch"]).upper(), src)
    if version == 2:
        for key in ("use_orig_params", "sync_module_states", "forward_prefetch"):
            out.values.pop(f"fsdp.{key}", None)  # FSDP2 has none of these
    done = {"version", "transformer_layer_cls_to_wrap", "min_num_params", "use_orig_params", "sync_module_states",
            "forward_prefetch", "cpu_ram_efficient_loading", "activation_checkpointing", "backward_prefetch",
            "reshard_after_forward"}
    for key, value in cfg.items():
        if key not in done:
            out.unmodelled[f"fsdp_config.{key}"] = value


def _bool(value: Any) -> Any:
    return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else value
