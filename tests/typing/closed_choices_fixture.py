"""A file for mypy, not for pytest: `tests/typing/test_settings_types.py` checks it with the
project's mypy configuration and expects exactly the errors marked on their lines (a comment
``E:`` followed by a part of mypy's message), and none elsewhere. It is never imported or run."""

from __future__ import annotations

from dataclasses import replace

from tuner.compiler.keys.choices import StateDictType
from tuner.compiler.keys.settings import Settings


def valid_values(s: Settings) -> list[bool]:
    return [s.checkpoint.state_dict_type == "full", s.fsdp.version == 2, s.deepspeed.zero_stage == 3,
            s.training.mixed_precision in ("bf16", "fp16"), s.fsdp.backward_prefetch is None,
            s.deepspeed.offload_optimizer != "none", s.model.type == "lora", s.data.format == "chat"]


def out_of_choices(s: Settings) -> list[bool]:
    return [
        s.checkpoint.state_dict_type == "fulll",  # E: Non-overlapping equality check
        s.fsdp.version == 3,  # E: Non-overlapping equality check
        s.deepspeed.zero_stage == "3",  # E: Non-overlapping equality check
        s.training.mixed_precision == "bfloat16",  # E: Non-overlapping equality check
        s.model.type != "qlora",  # E: Non-overlapping equality check
    ]


def a_typed_variable(kind: StateDictType) -> bool:
    return kind == "shard"  # E: Non-overlapping equality check


def new_values(s: Settings) -> Settings:
    ok = replace(s.checkpoint, state_dict_type="full")
    bad = replace(s.checkpoint, state_dict_type="FULL_STATE_DICT")  # E: incompatible type
    return replace(s, checkpoint=ok if ok == bad else bad)

