"""What axolotl, LLaMA-Factory and ms-swift would train for a config file: each tool's own reading,
its defaults for the keys the file leaves unset read from its code (file and line cited per value),
as tuner settings paths. Used by test_llm_fidelity.py; independent of tuner's readers.

Each entry is path -> (value, source key): a value tuner's import does not carry must be named in
one of the import's remarks by its source key, or the test counts a silent change.
"""

from __future__ import annotations

import math
from typing import Any

Expect = dict[str, tuple[Any, str]]


def trainer_defaults() -> dict[str, Any]:
    """The installed transformers' TrainingArguments defaults (its parser, as the Trainer reads a file)."""
    from transformers import HfArgumentParser, TrainingArguments

    return vars(HfArgumentParser(TrainingArguments).parse_args([]))


def _precision(cfg: dict[str, Any]) -> str:
    bf16 = cfg.get("bf16")
    return "bf16" if bf16 is True or str(bf16).lower() in ("auto", "true") else "fp16" if cfg.get("fp16") else "no"


def _num(value: Any) -> Any:
    """YAML 1.1 reads 2e-5 (no dot) as a string; the tools read it as a number."""
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def axolotl(cfg: dict[str, Any]) -> Expect:
    # axolotl-ai-cloud/axolotl @ 067b021c8b87
    lora = str(cfg.get("adapter") or "") in ("lora", "qlora")
    e: Expect = {
        "model.path": (cfg["base_model"], "base_model"),
        "model.type": ("lora" if lora else "full", "adapter"),
        # utils/schemas/training.py:71 and :77 (1 each), :116 (required), :119 (0.0), :144 ("cosine")
        "training.micro_batch_size": (cfg.get("micro_batch_size", 1), "micro_batch_size"),
        "training.gradient_accumulation_steps": (cfg.get("gradient_accumulation_steps", 1), "gradient_accumulation_steps"),
        "training.learning_rate": (_num(cfg["learning_rate"]), "learning_rate"),
        "training.weight_decay": (cfg.get("weight_decay", 0.0), "weight_decay"),
        "training.lr_scheduler": (cfg.get("lr_scheduler", "cosine"), "lr_scheduler"),
        # training.py:264 (None: the Trainer's 1.0)
        "training.max_grad_norm": (cfg.get("max_grad_norm") or 1.0, "max_grad_norm"),
        "training.gradient_checkpointing": (bool(cfg.get("gradient_checkpointing")), "gradient_checkpointing"),
        # utils/schemas/config.py:665 (512); validation.py:34 (seed 42)
        "data.seq_len": (cfg.get("sequence_len", 512), "sequence_len"),
        "training.seed": (cfg.get("seed", 42), "seed"),
        "training.mixed_precision": (_precision(cfg), "bf16"),
        # training.py:103 (train_on_inputs False: the loss on completions only)
        "data.completion_only_loss": (not cfg.get("train_on_inputs", False), "train_on_inputs"),
        # core/builders/base.py:510-511 (4 kept)
        "checkpoint.keep_last": (cfg.get("save_total_limit") or 4, "save_total_limit"),
    }
    # core/builders/base.py:238-250: warmup_steps, else warmup_ratio, else min(3 % of the steps, 100)
    if "warmup_steps" in cfg:
        e["training.warmup_steps"] = (cfg["warmup_steps"], "warmup_steps")
    else:
        e["training.warmup_ratio"] = (cfg.get("warmup_ratio", 0.03), "warmup")
    # base.py:259-265: logging_steps, else max(min(0.5 % of the steps, 10), 1): named
    e["training.log_every"] = (cfg.get("logging_steps", "0.5 % of the steps"), "logging_steps")
    # training.py:267 (1 epoch); builders/base.py:679 max_steps
    if cfg.get("max_steps"):
        e["training.max_steps"] = (cfg["max_steps"], "max_steps")
    else:
        e["training.max_steps"] = (0, "num_epochs")
        e["training.num_epochs"] = (math.ceil(float(cfg.get("num_epochs", 1))), "num_epochs")
    # builders/base.py:500-507: save_steps, else save_strategy, else a save per epoch; saves_per_epoch
    # (utils/config/__init__.py:242) is 1 / (saves × epochs) of the run
    if isinstance(cfg.get("save_steps"), int):
        e["checkpoint.every_steps"] = (cfg["save_steps"], "save_steps")
    elif cfg.get("saves_per_epoch") in (1, None) and cfg.get("save_strategy") in (None, "epoch"):
        e["checkpoint.every_epochs"] = (1, "saves_per_epoch")
    else:
        e["checkpoint.every_epochs"] = ("saves_per_epoch", "saves_per_epoch")
    if cfg.get("fsdp_config") or cfg.get("fsdp"):
        _axolotl_fsdp(cfg, e)
    if lora:
        # utils/schemas/peft.py:53-54 (no default), :80 (dropout 0.0), :58 (lora_target_linear)
        e["model.lora_dropout"] = (cfg.get("lora_dropout", 0.0), "lora_dropout")
        for key, path in (("lora_r", "model.lora_rank"), ("lora_alpha", "model.lora_alpha")):
            if key in cfg:
                e[path] = (cfg[key], key)
        if cfg.get("lora_target_linear"):
            e["model.lora_target_modules"] = (["all-linear"], "lora_target_linear")
        elif "lora_target_modules" in cfg:
            t = cfg["lora_target_modules"]
            e["model.lora_target_modules"] = ([t] if isinstance(t, str) else t, "lora_target_modules")
    return e


def _axolotl_fsdp(cfg: dict[str, Any], e: Expect) -> None:
    # utils/schemas/validation.py:1086-1100: the fsdp_ prefix dropped inside fsdp_config (not fsdp_version)
    fc = {k.removeprefix("fsdp_") if k != "fsdp_version" else k: v for k, v in (cfg.get("fsdp_config") or {}).items()}
    # validation.py:1107-1123: no top-level fsdp_version -> fsdp_config.version, else fsdp_config.fsdp_version,
    # else 1; fsdp_config.fsdp_version is filled from the top level only when unset. core/builders/base.py:684-686
    # hands fsdp_config to TrainingArguments, whose _process_fsdp_args (transformers 5.23 training_args.py:2784-2786,
    # :2826) drops the prefix and builds the plugin with fsdp_config's version
    top = cfg.get("fsdp_version")
    inner = fc.get("version") or fc.get("fsdp_version")
    version = int(fc.get("fsdp_version") or top) if top else int(inner or 1)
    e["fsdp.enabled"] = (True, "fsdp_config")
    e["fsdp.version"] = (version, "fsdp_version")
    # (axolotl pins transformers 5.14.1 and accelerate 1.13.0, pyproject.toml:20-21; there the same code is
    # training_args.py:2702 (prefix), :2742 (version), :2768 (state dict), trainer.py:814, dataclasses.py:2008-2014)
    # training_args.py:2852: state_dict_type FULL_STATE_DICT unless fsdp_config sets it, FSDP2 included; the
    # Trainer passes it to FullyShardedDataParallelPlugin (trainer.py:855), so accelerate's environment default
    # (SHARDED for FSDP2, accelerate utils/dataclasses.py:2047-2051) is never reached; axolotl's final save
    # (train.py:319-325) re-applies final_state_dict_type or state_dict_type (None keeps the plugin's)
    sdt = str(fc.get("state_dict_type") or "FULL_STATE_DICT")
    e["checkpoint.state_dict_type"] = ({"FULL_STATE_DICT": "full", "SHARDED_STATE_DICT": "sharded"}.get(sdt, sdt),
                                       "fsdp_config.state_dict_type")


def _hf(cfg: dict[str, Any], d: dict[str, Any], e: Expect) -> None:
    """TrainingArguments keys, unset ones at the Trainer's own defaults `d`."""
    for key, path in (("per_device_train_batch_size", "training.micro_batch_size"),
                      ("gradient_accumulation_steps", "training.gradient_accumulation_steps"),
                      ("learning_rate", "training.learning_rate"), ("weight_decay", "training.weight_decay"),
                      ("lr_scheduler_type", "training.lr_scheduler"), ("max_grad_norm", "training.max_grad_norm"),
                      ("seed", "training.seed"), ("logging_steps", "training.log_every")):
        value = _num(cfg[key]) if key in cfg else d[key]
        e.setdefault(path, (int(value) if isinstance(value, float) and value.is_integer() and key != "learning_rate"
                            and key != "weight_decay" and key != "max_grad_norm" else value, key))
    if "warmup_ratio" in cfg:
        e["training.warmup_ratio"] = (cfg["warmup_ratio"], "warmup_ratio")
    else:
        e["training.warmup_steps"] = (cfg.get("warmup_steps", d["warmup_steps"]), "warmup_steps")
    if cfg.get("max_steps", -1) > 0:
        e["training.max_steps"] = (cfg["max_steps"], "max_steps")
    else:
        epochs = float(cfg.get("num_train_epochs", d["num_train_epochs"]))
        e["training.max_steps"] = (0, "num_train_epochs")
        e["training.num_epochs"] = (math.ceil(epochs), "num_train_epochs")
    strategy = cfg.get("save_strategy", str(d["save_strategy"]).split(".")[-1].lower())
    if strategy == "steps":
        e["checkpoint.every_steps"] = (int(cfg.get("save_steps", d["save_steps"])), "save_steps")
    e["checkpoint.keep_last"] = (cfg.get("save_total_limit") or "every checkpoint", "save_total_limit")
    e.setdefault("training.mixed_precision", (_precision(cfg), "bf16"))


def llamafactory(cfg: dict[str, Any], d: dict[str, Any]) -> Expect:
    # hiyouga/LLaMA-Factory @ ff6d4d12eeb0, src/llamafactory/hparams/
    kind = cfg.get("finetuning_type", "lora")  # finetuning_args.py:464
    e: Expect = {
        "model.path": (cfg["model_name_or_path"], "model_name_or_path"),
        "model.type": (kind, "finetuning_type"),
        "data.seq_len": (cfg.get("cutoff_len", 2048), "cutoff_len"),  # data_args.py:46
        # model/model_utils/checkpointing.py:184: on unless disable_gradient_checkpointing
        "training.gradient_checkpointing": (not cfg.get("disable_gradient_checkpointing", False),
                                            "disable_gradient_checkpointing"),
        "data.completion_only_loss": (not cfg.get("train_on_prompt", False), "train_on_prompt"),  # data_args.py
    }
    if kind == "lora":  # finetuning_args.py:69-90, :587 (alpha = rank * 2)
        rank = cfg.get("lora_rank", 8)
        e["model.lora_rank"] = (rank, "lora_rank")
        e["model.lora_alpha"] = (cfg.get("lora_alpha") or rank * 2, "lora_alpha")
        e["model.lora_dropout"] = (cfg.get("lora_dropout", 0.0), "lora_dropout")
        targets = [t.strip() for t in str(cfg.get("lora_target", "all")).split(",")]
        e["model.lora_target_modules"] = (["all-linear"] if targets == ["all"] else targets, "lora_target")
    _hf(cfg, d, e)
    return e


def swift(cfg: dict[str, Any], d: dict[str, Any]) -> Expect:
    # modelscope/ms-swift @ 3602360a5623 (4.x; 3.x @ 21209f9a9 has the same values under train_type)
    kind = cfg.get("tuner_type", cfg.get("train_type", "lora"))  # arguments/base_args/base_args.py:93
    micro = cfg.get("per_device_train_batch_size", 1)  # trainers/arguments.py:129
    e: Expect = {
        "model.path": (cfg["model"], "model"),
        "model.type": (kind, "tuner_type"),
        "training.micro_batch_size": (micro, "per_device_train_batch_size"),
        # trainers/arguments.py:283-285: ceil(16 / batch / world), named for the world size
        "training.gradient_accumulation_steps": (cfg.get("gradient_accumulation_steps", math.ceil(16 / micro)),
                                                 "gradient_accumulation_steps"),
        # sft_args.py:244-248
        "training.learning_rate": (_num(cfg.get("learning_rate", 1e-5 if kind == "full" else 1e-4)), "learning_rate"),
        "training.gradient_checkpointing": (cfg.get("gradient_checkpointing", True), "gradient_checkpointing"),  # :134
        "training.log_every": (cfg.get("logging_steps", 5), "logging_steps"),  # :138
        "training.weight_decay": (cfg.get("weight_decay", 0.1), "weight_decay"),  # :145
        "training.lr_scheduler": (cfg.get("lr_scheduler_type", "cosine"), "lr_scheduler_type"),  # :147
        "data.validation_split": (cfg.get("split_dataset_ratio", 0.0), "split_dataset_ratio"),  # data_args.py:79
        # template_args.py:130 (None: the model's max_model_len, base_args.py:196): named
        "data.seq_len": (cfg.get("max_length", "max_model_len"), "max_length"),
        # model_args.py:132-142: torch_dtype sets bf16/fp16
        "training.mixed_precision": ({"bfloat16": "bf16", "float16": "fp16", "float32": "fp16"}.get(
            str(cfg.get("torch_dtype")), "the model's dtype"), "torch_dtype"),
    }
    if kind == "lora":  # tuner_args.py:126-135
        e["model.lora_rank"] = (cfg.get("lora_rank", 8), "lora_rank")
        e["model.lora_alpha"] = (cfg.get("lora_alpha", 32), "lora_alpha")
        e["model.lora_dropout"] = (cfg.get("lora_dropout", 0.05), "lora_dropout")
        t = cfg.get("target_modules", ["all-linear"])
        e["model.lora_target_modules"] = ([t] if isinstance(t, str) else t, "target_modules")
    _hf({k: v for k, v in cfg.items() if k != "bf16"}, d, e)
    return e


def trainer(cfg: dict[str, Any], d: dict[str, Any]) -> Expect:
    """A TrainingArguments file: the Trainer's reading, its defaults for the rest (transformers'
    training_args.py; `d` read from the installed parser)."""
    e: Expect = {"training.gradient_checkpointing": (bool(cfg.get("gradient_checkpointing")), "gradient_checkpointing")}
    _hf(cfg, d, e)
    return e


def trainer_fsdp_plugin(output_dir: str, fsdp: Any, fsdp_config: Any = None) -> dict[str, Any]:
    """`TrainingArguments(...).fsdp_plugin_args`, the Trainer's own plugin arguments, built without
    leaking the environment variable `_process_fsdp_args` sets (FSDP_CPU_RAM_EFFICIENT_LOADING)."""
    import os

    from transformers import TrainingArguments

    environ = dict(os.environ)
    try:
        return dict(TrainingArguments(output_dir=output_dir, fsdp=fsdp, fsdp_config=fsdp_config).fsdp_plugin_args)
    finally:
        os.environ.clear()
        os.environ.update(environ)
