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
from .hf_trainer_fsdp import PLUGIN, _is_fsdp

INSTALL = "pip install 'tuner-train[runtime]'"

#: TrainingArguments keys; two of them (one a distributed or batch key) mark the format.
TRAINER_KEYS = {"per_device_train_batch_size", "per_device_eval_batch_size", "lr_scheduler_type", "logging_steps",
                "save_strategy", "eval_strategy", "evaluation_strategy", "num_train_epochs", "optim", "fsdp",
                "fsdp_config", "deepspeed", "output_dir", "learning_rate", "gradient_accumulation_steps",
                "warmup_ratio", "bf16", "fp16", "report_to", "ddp_backend", "save_total_limit"}
STRONG = {"per_device_train_batch_size", "fsdp_config", "lr_scheduler_type", "optim", "save_strategy",
          "eval_strategy", "evaluation_strategy", "ddp_backend", "warmup_ratio"}
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
    if not swift:  # the Trainer's arguments never name the model: the person's script loads it
        out.finish.append(lambda imported: _no_model(imported, src))


def _no_model(out: Imported, src: str) -> None:
    """Named, never silent: without a model path the build trains tuner's built-in tiny model."""
    if K.MODEL_PATH not in out.values:
        out.remarks.append(f"{src}: TrainingArguments name no model (your script loads it): set model.path "
                           "before `tuner run` (without it the build trains tuner's built-in tiny model); "
                           "`tuner launch BUILD your_script.py` trains your script's model")


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
