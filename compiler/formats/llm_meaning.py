"""Keys of axolotl and LLaMA-Factory training YAMLs that change *what is trained* (issue 34 item 3),
and each tool's own defaults for the training keys a file leaves unset (item 4).

A key tuner has the meaning of is mapped (LLaMA-Factory's ``lora_target: all`` and axolotl's
``lora_target_linear`` are ``"all-linear"``, ``disable_gradient_checkpointing`` is its negation,
``train_on_prompt`` / ``train_on_inputs`` are ``data.completion_only_loss`` negated, axolotl's
``saves_per_epoch: 1`` is ``checkpoint.every_epochs = 1``). A key that changes the training and that
tuner cannot train (preference stages, reward models, partial freezing, LoRA+, BAdam, GaLore, DoRA,
LoRA on an 8-bit base, fp8...) is refused naming the key: the file cannot be trained as written.

Defaults, read from each tool's code:
* LLaMA-Factory (hiyouga/LLaMA-Factory @ ff6d4d12): `finetuning_type` 'lora', `lora_target` 'all',
  `lora_alpha` = rank × 2, `lora_rank` 8, `lora_dropout` 0 (hparams/finetuning_args.py lines 69-90,
  464, 587), `cutoff_len` 2048 (hparams/data_args.py line 46), gradient checkpointing on unless
  `disable_gradient_checkpointing` (model/model_utils/checkpointing.py line 184); the rest are the HF
  Trainer's (hf_trainer_values.py).
* axolotl (axolotl-ai-cloud/axolotl @ 067b021c): `lr_scheduler` 'cosine' (utils/schemas/training.py
  line 144), `optimizer` 'adamw_torch_fused' (line 122), `num_epochs` 1 (line 267), `sequence_len`
  512 (utils/schemas/config.py line 665), warmup min(3 % of the steps, 100) and logging every
  max(min(0.5 % of the steps, 10), 1) (core/builders/base.py lines 238-265), a save per epoch and 4
  kept (lines 500-511).
"""

from __future__ import annotations

from typing import Any

from ..keys import paths as K
from .base import Imported, ImportRefused

_NOT_SFT = "tuner trains supervised fine-tuning (next-token loss) only"
LLAMAFACTORY_REFUSED = {
    "loraplus_lr_ratio": "LoRA+ (a larger learning rate for the LoRA B matrices); tuner trains one learning rate",
    "use_badam": "BAdam (block-coordinate Adam, one block of layers trained at a time); tuner trains every block",
    "use_galore": "the GaLore optimizer; tuner trains with AdamW, Adam or SGD",
    "use_apollo": "the APOLLO optimizer; tuner trains with AdamW, Adam or SGD",
    "use_adam_mini": "the Adam-mini optimizer; tuner trains with AdamW, Adam or SGD",
    "use_muon": "the Muon optimizer; tuner trains with AdamW, Adam or SGD",
    "use_dora": "DoRA adapters; tuner trains plain LoRA",
    "use_rslora": "rank-stabilised LoRA scaling; tuner's LoRA scales by alpha / r",
    "pissa_init": "PiSSA-initialised LoRA; tuner initialises LoRA as PEFT's default",
    "use_llama_pro": "LLaMA Pro block expansion; tuner trains the model as it is",
    "fp8": "fp8 training; tuner trains in bf16, fp16 or fp32",
    "pure_bf16": "pure bf16 training (no fp32 master weights); tuner's bf16 is mixed precision",
    "additional_target": "extra fully trained modules beside LoRA; tuner's LoRA trains the adapters only",
}
AXOLOTL_REFUSED = {
    "rl": f"axolotl's preference / RL training; {_NOT_SFT}",
    "reward_model": f"a reward model (a scalar head trained on preference pairs); {_NOT_SFT}",
    "process_reward_model": f"a process reward model; {_NOT_SFT}",
    "unfrozen_parameters": "partial unfreezing (only the listed parameters train); tuner trains every weight or LoRA",
    "loraplus_lr_ratio": "LoRA+ (a larger learning rate for the LoRA B matrices); tuner trains one learning rate",
    "peft_use_dora": "DoRA adapters; tuner trains plain LoRA",
    "peft_use_rslora": "rank-stabilised LoRA scaling; tuner's LoRA scales by alpha / r",
    "fp8": "fp8 training; tuner trains in bf16, fp16 or fp32",
    "cosine_min_lr_ratio": "a cosine schedule that ends above 0; tuner's cosine decays to 0",
    "relora_steps": "ReLoRA (LoRA merged and restarted); tuner trains one LoRA",
}


def refuse(src: str, key: str, value: Any, why: str) -> None:
    raise ImportRefused(f"{src}: {key} = {value!r} is {why}; the file cannot be trained as written by tuner, so "
                        "nothing was imported (remove the key to train without it)")


def _set_in(table: dict[str, str], data: dict[str, Any], src: str) -> None:
    for key, why in table.items():
        if data.get(key) not in (None, False, 0, "", [], 0.0):
            refuse(src, key, data[key], why)


def llamafactory(data: dict[str, Any], src: str, out: Imported, other: dict[str, Any]) -> None:
    """LLaMA-Factory's method keys, mapped or refused, and its defaults for them."""
    _set_in(LLAMAFACTORY_REFUSED, data, src)
    stage = str(data.get("stage", "sft"))
    if stage not in ("sft", "pt"):
        refuse(src, "stage", stage, f"LLaMA-Factory's {stage} stage (reward modelling, PPO, DPO or KTO); {_NOT_SFT}")
    kind = str(data.get("finetuning_type", "lora"))
    if kind not in ("lora", "full"):
        why = ("partial freezing (only the last freeze_trainable_layers layers train)" if kind == "freeze"
               else f"{kind} adapters")
        refuse(src, "finetuning_type", kind, f"{why}; tuner trains every weight (full) or LoRA")
    out.set(K.MODEL_TYPE, kind, src)
    bits = data.get("quantization_bit")
    if bits not in (None, 0):
        method = str(data.get("quantization_method", "bnb"))
        if int(bits) == 4 and kind == "lora" and method == "bnb" and data.get("quantization_type", "nf4") == "nf4":
            out.set(K.MODEL_BASE_PRECISION, "nf4-bnb", src)
            for key in ("quantization_bit", "quantization_method", "quantization_type"):
                other.pop(key, None)
        else:
            refuse(src, "quantization_bit", bits, f"LoRA on a {bits}-bit {method} base; tuner trains LoRA on a 4-bit "
                   "NF4 (bitsandbytes) base or an unquantised one")
    if kind == "lora":
        rank = int(data.get("lora_rank", 8))
        out.set(K.MODEL_LORA_RANK, rank, src)
        out.set(K.MODEL_LORA_ALPHA, int(data.get("lora_alpha") or rank * 2), src)
        out.set(K.MODEL_LORA_DROPOUT, float(data.get("lora_dropout", 0.0)), src)
        targets = [t.strip() for t in str(data.get("lora_target", "all")).split(",") if t.strip()]
        out.set(K.MODEL_LORA_TARGET_MODULES, ["all-linear"] if targets == ["all"] else targets, src)
    out.set(K.TRAINING_GRADIENT_CHECKPOINTING, not bool(data.get("disable_gradient_checkpointing", False)), src)
    out.set(K.DATA_COMPLETION_ONLY_LOSS, not bool(data.get("train_on_prompt", False)), src)
    if "cutoff_len" not in data:
        out.set(K.DATA_SEQ_LEN, 2048, src)
    for key in ("stage", "finetuning_type", "lora_target", "disable_gradient_checkpointing", "train_on_prompt",
                *LLAMAFACTORY_REFUSED):
        other.pop(key, None)


def axolotl(data: dict[str, Any], src: str, out: Imported, other: dict[str, Any]) -> None:
    """axolotl's method keys, mapped or refused, and its defaults for the training keys left unset."""
    _set_in(AXOLOTL_REFUSED, data, src)
    adapter = str(data.get("adapter") or "").lower()
    if adapter and adapter not in ("lora", "qlora"):
        refuse(src, "adapter", adapter, "an adapter type tuner does not train (tuner trains LoRA or QLoRA)")
    if data.get("load_in_8bit") and adapter:
        refuse(src, "load_in_8bit", True, "LoRA on an 8-bit base; tuner trains LoRA on a 4-bit NF4 base "
               "(load_in_4bit) or an unquantised one")
    if adapter and data.get("lora_target_linear") is True:
        # every linear layer, the listed modules among them (axolotl adds them to the linear ones)
        out.set(K.MODEL_LORA_TARGET_MODULES, ["all-linear"], src)
    gc = data.get("gradient_checkpointing")
    out.set(K.TRAINING_GRADIENT_CHECKPOINTING, bool(gc), src)
    if isinstance(gc, str):
        out.remarks.append(f"{src}: gradient_checkpointing {gc!r} also moves the checkpoints off the GPU (axolotl's "
                           "own); imported as gradient checkpointing on")
    out.set(K.DATA_COMPLETION_ONLY_LOSS, not bool(data.get("train_on_inputs", False)), src)
    out.default(K.TRAINING_LR_SCHEDULER, "cosine", src, "no lr_scheduler: axolotl's default cosine is imported")
    if "sequence_len" not in data:
        out.set(K.DATA_SEQ_LEN, 512, src)
    if "optimizer" not in data:
        out.set(K.TRAINING_OPTIMIZER, "adamw", src)  # adamw_torch_fused: AdamW's update rule
    if "num_epochs" not in data and "max_steps" not in data:
        out.set(K.TRAINING_MAX_STEPS, 0, src)
        out.set(K.TRAINING_NUM_EPOCHS, 1, src)
    if "warmup_steps" not in data and "warmup_ratio" not in data:
        out.set(K.TRAINING_WARMUP_RATIO, 0.03, src)
        out.remarks.append(f"{src}: no warmup: axolotl warms up for 3 % of the steps, at most 100 steps; imported as "
                           "training.warmup_ratio = 0.03 (no 100-step cap: set training.warmup_steps on a long run)")
    if "logging_steps" not in data:
        out.remarks.append(f"{src}: no logging_steps: axolotl logs every max(min(0.5 % of the steps, 10), 1) steps; "
                           "tuner logs every training.log_every (1): not carried")
    _axolotl_saves(data, src, out, other)
    for key in ("lora_target_linear", "gradient_checkpointing", "train_on_inputs", "saves_per_epoch", "save_strategy"):
        other.pop(key, None)


def _axolotl_saves(data: dict[str, Any], src: str, out: Imported, other: dict[str, Any]) -> None:
    saves = data.get("saves_per_epoch")
    steps = data.get("save_steps")
    if isinstance(steps, float) and steps < 1:
        out.values.pop(K.CHECKPOINT_EVERY_STEPS, None)
        out.remarks.append(f"{src}: save_steps {steps} is a fraction of the run; tuner counts steps: not carried")
    if saves == 1 or (not steps and not saves and data.get("save_strategy") in (None, "epoch")):
        out.set(K.CHECKPOINT_EVERY_EPOCHS, 1, src)  # axolotl's default: a save per epoch
    elif saves:
        out.remarks.append(f"{src}: saves_per_epoch {saves} saves {saves} times an epoch; tuner saves per epoch or "
                           "every checkpoint.every_steps: set every_steps to steps-per-epoch / saves_per_epoch")
    elif data.get("save_strategy") == "no":
        out.set(K.CHECKPOINT_EVERY_STEPS, 0, src)
    if "save_total_limit" not in data:
        out.set(K.CHECKPOINT_KEEP_LAST, 4, src)
