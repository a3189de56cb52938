"""`python -m tuner.runtime.hf_args`: HF Trainer arguments read by transformers' own parser.

`tuner import` runs this in a subprocess (the compiler imports no transformers): a JSON object
of TrainingArguments keys comes in on stdin, and out goes ``{"values": {...}, "unknown":
[...]}`` or ``{"error": "..."}``. The values are what ``HfArgumentParser(TrainingArguments)``
makes of them on its own argparse path: each field's type, its choices (``lr_scheduler_type``,
``optim``...) and its boolean spelling (``"true"``, ``"yes"``, ``"1"``). The dataclass itself is
not built: its ``__post_init__`` checks the machine it runs on (bf16 or fp16 without a GPU is
refused), and a config written for GPUs must import on a CPU machine. Tables and lists
(``fsdp_config``, ``deepspeed``, ``report_to``...) cannot go through a command line; they are
kept as written, as ``HfArgumentParser.parse_dict`` hands them to the dataclass.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

#: The fields whose defaults `tuner import` carries for a file that leaves them unset.
DEFAULTED = ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "weight_decay",
             "max_grad_norm", "warmup_steps", "lr_scheduler_type", "optim", "seed", "gradient_checkpointing",
             "activation_checkpointing", "logging_steps", "num_train_epochs", "max_steps", "save_strategy",
             "save_steps", "save_total_limit")


class _Refused(Exception):
    pass


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def parse(data: dict[str, Any]) -> dict[str, Any]:
    from transformers import HfArgumentParser, TrainingArguments

    fields = {f.name: f for f in dataclasses.fields(TrainingArguments) if f.init}
    parser = HfArgumentParser(TrainingArguments)

    def error(message: str) -> None:
        raise _Refused(message)

    parser.error = error  # argparse would print and exit
    argv: list[str] = []
    kept: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            continue
        if value is None:
            kept[key] = None
        elif isinstance(value, (dict, list)):
            kept[key] = value  # no command line carries it; parse_dict passes it to the field as is
        else:
            argv.append(f"--{key}={_text(value)}")
    try:
        namespace = parser.parse_args(argv)
    except _Refused as exc:
        return {"error": str(exc)}
    values: dict[str, Any] = {}
    for key, raw in data.items():
        if key not in fields:
            continue
        value = kept[key] if key in kept else getattr(namespace, key)
        if (isinstance(value, float) and isinstance(raw, int) and not isinstance(raw, bool)
                and value == raw):
            value = raw  # 50 stays 50 where the field is a float (save_steps, num_train_epochs)
        values[key] = value
    # what the Trainer trains with where the file is silent (the parser's own defaults)
    defaults = {key: getattr(namespace, key) for key in DEFAULTED if key in fields and key not in data}
    answer = {"values": values, "unknown": [k for k in data if k not in fields], "defaults": defaults}
    if values.get("fsdp"):
        answer["fsdp_plugin_args"] = fsdp_plugin_args(values["fsdp"], values.get("fsdp_config"))
    return answer


def fsdp_plugin_args(fsdp: Any, fsdp_config: Any) -> dict[str, Any]:
    """The FSDP plugin arguments the Trainer builds from the file's `fsdp` and `fsdp_config`
    (`TrainingArguments(...).fsdp_plugin_args`, what it hands accelerate's
    FullyShardedDataParallelPlugin): its defaults for the keys the file leaves unset included. Only
    these two fields are given, so no GPU check of `__post_init__` is involved."""
    import os
    import tempfile
    import warnings

    from transformers import TrainingArguments

    environ = dict(os.environ)  # _process_fsdp_args writes FSDP_CPU_RAM_EFFICIENT_LOADING there
    try:
        with tempfile.TemporaryDirectory() as scratch, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args = TrainingArguments(output_dir=scratch, fsdp=fsdp, fsdp_config=fsdp_config)
        return dict(args.fsdp_plugin_args or {})
    finally:
        os.environ.clear()
        os.environ.update(environ)


def main() -> int:
    try:
        data = json.load(sys.stdin)
        print(json.dumps(parse(data), default=str))
    except Exception as exc:  # reported to tuner import, which names the file
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
