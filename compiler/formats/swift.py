"""ms-swift's training arguments (`swift sft --config args.yaml`, the `args.json` it saves):
ms-swift 3.x/4.x (`model`, `train_type` / `tuner_type`) and 1.x (`sft_type`, `template_type`,
`model_id_or_path`, `batch_size`...). Each is read as ms-swift reads it, its own defaults for the
keys the file leaves unset included, then its TrainingArguments part by transformers' parser
(`hf_trainer.read`).

Defaults, from ms-swift's code (modelscope/ms-swift):
* 3.x/4.x: swift/arguments/base_args/base_args.py (`tuner_type` 'lora'), tuner_args.py (LoRA rank 8,
  alpha 32, dropout 0.05, `target_modules` ['all-linear']), swift/trainers/arguments.py
  (`per_device_train_batch_size` 1, `gradient_checkpointing` True, `logging_steps` 5,
  `weight_decay` 0.1, `adam_beta2` 0.95, `lr_scheduler_type` 'cosine', accumulation
  ceil(16 / batch / world)), sft_args.py (`learning_rate` 1e-5 full, 1e-4 otherwise; the
  DeepSpeed names), data_args.py (`split_dataset_ratio` 0).
* 1.x: swift/llm/utils/argument.py `SftArguments` @ 32f0398b7 (lr_scheduler 'linear', warmup_ratio
  0.05, weight_decay 0.01, max_grad_norm 0.5, max_length 2048, save_total_limit 2, eval_steps 50 and
  save_steps = eval_steps, dataset_test_ratio 0.01, dataloader_num_workers 1).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..keys import paths as K
from . import swift_deepspeed
from .base import Imported, ImportRefused

#: Keys only ms-swift writes; one of them marks the format (with trainer or model keys beside it).
V3_MARKS = {"tuner_type", "train_type", "swift_version", "split_dataset_ratio", "dataset_num_proc", "model_author"}
V1_MARKS = {"sft_type", "template_type", "model_id_or_path", "train_dataset_sample", "lora_dropout_p",
            "deepspeed_config_path", "dataset_test_ratio"}
FOREIGN = {"model_family", "base_model", "finetuning_type", "stage", "distributed_type", "model_name_or_path"}

#: Keys that change what is trained and that tuner has no meaning for: refused, naming the key.
REFUSED = {
    "rlhf_type": "ms-swift's preference / RL training (DPO, GRPO, KTO...); tuner trains supervised fine-tuning only",
    "lorap_lr_ratio": "LoRA+ (a larger learning rate for the LoRA B matrices); tuner trains one learning rate",
    "use_dora": "DoRA adapters; tuner trains plain LoRA",
    "use_rslora": "rank-stabilised LoRA scaling (alpha / sqrt(r)); tuner's LoRA scales by alpha / r",
    "freeze_parameters": "partial freezing; tuner trains every weight (full) or LoRA",
    "freeze_parameters_ratio": "partial freezing; tuner trains every weight (full) or LoRA",
    "trainable_parameters": "partial unfreezing; tuner trains every weight (full) or LoRA",
    "use_galore": "the GaLore optimizer; tuner trains with AdamW, Adam or SGD",
    "neftune_noise_alpha": "NEFTune embedding noise; tuner trains without it",
}


#: The keys an ms-swift `args.json` shares with no TrainingArguments file; two of them beside trainer
#: arguments mark it too.
SWIFT_KEYS = {"train_type", "template", "swift_version", "sequence_parallel_size", "model_type"}


def matches(data: dict[str, Any]) -> bool:
    from . import hf_trainer

    keys = set(data)
    if keys & FOREIGN or any(k.startswith("--") for k in keys):
        return False
    if keys & V1_MARKS or (hf_trainer.matches(data) and len(keys & SWIFT_KEYS) >= 2):
        return True
    return bool(keys & V3_MARKS) and bool(keys & {"model", "per_device_train_batch_size", "learning_rate", "dataset",
                                                   "deepspeed", "output_dir", "template"})


def _refuse(src: str, key: str, value: Any, why: str) -> None:
    raise ImportRefused(f"{src}: {key} = {value!r} is {why}; the file cannot be trained as written by tuner, so "
                        "nothing was imported (remove the key to train without it)")


def _v1_to_v3(data: dict[str, Any], src: str, out: Imported) -> dict[str, Any]:
    """ms-swift 1.x's names and defaults -> the 3.x spelling read below."""
    d = dict(data)
    renames = {"sft_type": "tuner_type", "model_id_or_path": "model", "batch_size": "per_device_train_batch_size",
               "lora_dropout_p": "lora_dropout", "lora_target_modules": "target_modules",
               "dataset_test_ratio": "split_dataset_ratio"}
    for old, new in renames.items():
        if old in d:
            d[new] = d.pop(old)
    dtype = d.pop("dtype", "AUTO")
    if dtype != "AUTO":
        d["torch_dtype"] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(str(dtype), dtype)
    path = d.pop("deepspeed_config_path", None)
    if path:
        d["deepspeed"] = {"default-zero2": "zero2", "default-zero3": "zero3"}.get(str(path), path)
    targets = d.get("target_modules", ["DEFAULT"])
    targets = [targets] if isinstance(targets, str) else list(targets)
    if targets == ["ALL"]:
        d["target_modules"] = ["all-linear"]
    elif "DEFAULT" in targets:
        d.pop("target_modules", None)
        d["_targets_default"] = True
    if "save_steps" not in d:
        d["save_steps"] = d.get("eval_steps", 50)  # SftArguments: save_steps = eval_steps
    for key, value in (("lr_scheduler_type", "linear"), ("warmup_ratio", 0.05), ("weight_decay", 0.01),
                       ("max_grad_norm", 0.5), ("max_length", 2048), ("save_total_limit", 2), ("num_train_epochs", 1),
                       ("dataloader_num_workers", 1), ("split_dataset_ratio", 0.01), ("adam_beta2", 0.999)):
        d.setdefault(key, value)
    out.remarks.append(f"{src}: an ms-swift 1.x file (sft_type / template_type): read with 1.x's names and defaults")
    return d


def read(data: dict[str, Any], path: Path, out: Imported) -> None:
    from . import hf_trainer

    src = path.name
    d = _v1_to_v3(data, src, out) if set(data) & V1_MARKS else dict(data)
    for key, why in REFUSED.items():
        if d.get(key) not in (None, False, 0, "", [], 0.0):
            _refuse(src, key, d[key], why)
    tuner = str(d.pop("tuner_type", d.pop("train_type", "lora"))).lower()
    d.pop("train_type", None)
    if tuner not in ("lora", "full"):
        _refuse(src, "tuner_type", tuner, f"ms-swift's {tuner} tuner; tuner trains full fine-tuning or LoRA")
    out.set(K.MODEL_TYPE, tuner, src)
    out.set(K.MODEL_FAMILY, "causal_lm", src)
    model = d.pop("model", None)
    if not isinstance(model, str) or not model:
        named = f" (model_type {d['model_type']!r} names a model in ms-swift's registry, not a path)" \
            if d.get("model_type") else ""
        raise ImportRefused(f"{src}: no model path{named}; set `model` (ms-swift 3.x/4.x) or `model_id_or_path` "
                            "(1.x) to the model's path or hub id and import again")
    out.set(K.MODEL_PATH, model, src)
    _quantisation(d, tuner, src, out)
    if tuner == "lora":
        out.set(K.MODEL_LORA_RANK, int(d.pop("lora_rank", 8)), src)
        out.set(K.MODEL_LORA_ALPHA, int(d.pop("lora_alpha", 32)), src)
        out.set(K.MODEL_LORA_DROPOUT, float(d.pop("lora_dropout", 0.05)), src)
        targets = d.pop("target_modules", ["all-linear"])
        targets = [targets] if isinstance(targets, str) else list(targets)
        if d.pop("_targets_default", False):
            out.remarks.append(f"{src}: lora_target_modules DEFAULT is the model type's own list in ms-swift 1.x's "
                               "registry; tuner's default targets are used: set model.lora_target_modules")
        else:
            out.set(K.MODEL_LORA_TARGET_MODULES, ["all-linear"] if targets == ["all-linear"] else targets, src)
    for key in ("lora_rank", "lora_alpha", "lora_dropout", "target_modules", "_targets_default"):
        d.pop(key, None)
    _lengths(d, src, out)
    sp = d.pop("sequence_parallel_size", None)
    if isinstance(sp, int) and sp > 1:
        out.unmodelled["sequence_parallel_size"] = sp
        out.remarks.append(f"{src}: sequence_parallel_size {sp} is ms-swift's own (Ulysses) sequence parallelism, "
                           "applied by ms-swift itself; tuner's artefacts do not carry it")
    defaults = {"per_device_train_batch_size": 1, "gradient_checkpointing": True, "logging_steps": 5,
                "weight_decay": 0.1, "lr_scheduler_type": "cosine",
                "learning_rate": 1e-5 if tuner == "full" else 1e-4}
    for key, value in defaults.items():
        d.setdefault(key, value)
    if d.get("gradient_accumulation_steps") is None:
        micro = int(d["per_device_train_batch_size"])
        d["gradient_accumulation_steps"] = max(1, math.ceil(16 / micro))
        out.remarks.append(f"{src}: gradient_accumulation_steps unset: ms-swift uses ceil(16 / batch / world size); "
                           f"imported as {d['gradient_accumulation_steps']} for one process: divide it by "
                           "hardware.num_processes when you set that")
    unset = "adam_beta2" not in d
    beta2 = d.pop("adam_beta2", 0.95)
    if float(beta2) != 0.999:
        whose = " (unset: ms-swift's default)" if unset else ""
        out.remarks.append(f"{src}: adam_beta2 {beta2}{whose}: tuner's AdamW uses torch's beta2 0.999; not carried")
    ds = d.get("deepspeed")
    if isinstance(ds, str) and ds in swift_deepspeed.NAMES:
        d["deepspeed"] = swift_deepspeed.config(ds)
        out.remarks.append(f"{src}: deepspeed {ds} is ms-swift's built-in swift/config/{ds}.json, imported as its values")
    dtype = str(d.pop("torch_dtype", "") or "").lower().removeprefix("torch.")
    if dtype in ("bfloat16", "float16", "float32"):  # ModelArguments._init_mixed_precision
        for key, on in (("bf16", dtype == "bfloat16"), ("fp16", dtype != "bfloat16")):
            if d.get(key) is None:
                d[key] = on
    elif dtype:
        out.not_distributed.setdefault(src, {})["torch_dtype"] = dtype
    elif d.get("bf16") is None and d.get("fp16") is None:
        out.remarks.append(f"{src}: torch_dtype unset: ms-swift trains in the model config's dtype (bf16 for most "
                           "current models); set training.mixed_precision to it")
    hf_trainer.read(d, path, out, swift=True)


def _quantisation(d: dict[str, Any], tuner: str, src: str, out: Imported) -> None:
    bits = d.pop("quant_bits", d.pop("quantization_bit", None))
    method = str(d.pop("quant_method", "bnb") or "bnb")
    if bits in (None, 0):
        return
    if int(bits) == 4 and method == "bnb" and tuner == "lora" and d.get("bnb_4bit_quant_type", "nf4") == "nf4":
        out.set(K.MODEL_BASE_PRECISION, "nf4-bnb", src)  # QLoRA, as ms-swift loads it
        d.pop("bnb_4bit_quant_type", None)
        return
    _refuse(src, "quant_bits", bits, f"a {bits}-bit {method} base; tuner trains LoRA on a 4-bit NF4 "
            "(bitsandbytes) base or an unquantised one")


def _lengths(d: dict[str, Any], src: str, out: Imported) -> None:
    length = d.pop("max_length", None)
    if isinstance(length, int) and length > 0:
        out.set(K.DATA_SEQ_LEN, length, src)
    else:
        out.remarks.append(f"{src}: max_length unset: ms-swift uses the model's max_model_len; set data.seq_len to it")
    ratio = d.pop("split_dataset_ratio", 0.0)
    if isinstance(ratio, (int, float)) and 0 <= ratio <= 0.5:
        out.set(K.DATA_VALIDATION_SPLIT, float(ratio), src)
    else:
        out.not_distributed.setdefault(src, {})["split_dataset_ratio"] = ratio
        out.remarks.append(f"{src}: split_dataset_ratio {ratio!r} is not a fraction up to 0.5: not imported")
