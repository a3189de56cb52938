"""A file for mypy, not for pytest: `tests/typing/test_settings_types.py` checks it with the
project's mypy configuration and expects exactly the errors marked on their lines (a comment
``E:`` followed by a part of mypy's message), and none elsewhere. It is never imported or run."""

from __future__ import annotations

from dataclasses import replace

from tuner.compiler.keys.choices import StateDictType
from tuner.compiler.keys.settings import Settings
from tuner.compiler.plan.plan import Plan
from tuner.compiler.plan.strategy import Strategy, StrategyChoice
from tuner.runtime.checkpoint import HeldState


def valid_values(s: Settings) -> list[bool]:
    return [s.checkpoint.state_dict_type == "full", s.fsdp.version == 2, s.deepspeed.zero_stage == 3,
            s.training.mixed_precision in ("bf16", "fp16"), s.fsdp.backward_prefetch is None,
            s.deepspeed.offload_optimizer != "none", s.model.type == "lora", s.data.format == "chat",
            s.model.trained_family == "embedding", s.model.family == "ltxvideo2"]


def out_of_choices(s: Settings) -> list[bool]:
    return [
        s.checkpoint.state_dict_type == "fulll",  # E: Non-overlapping equality check
        s.fsdp.version == 3,  # E: Non-overlapping equality check
        s.deepspeed.zero_stage == "3",  # E: Non-overlapping equality check
        s.training.mixed_precision == "bfloat16",  # E: Non-overlapping equality check
        s.model.type != "qlora",  # E: Non-overlapping equality check
        s.model.trained_family == "embeding",  # E: Non-overlapping equality check
    ]


def a_typed_variable(kind: StateDictType) -> bool:
    return kind == "shard"  # E: Non-overlapping equality check


def new_values(s: Settings) -> Settings:
    ok = replace(s.checkpoint, state_dict_type="full")
    bad = replace(s.checkpoint, state_dict_type="FULL_STATE_DICT")  # E: incompatible type
    return replace(s, checkpoint=ok if ok == bad else bad)



def frozen(s: Settings, p: Plan) -> None:
    s.checkpoint.state_dict_type = "full"  # E: is read-only
    s.training = s.training  # E: is read-only
    p.uses_fsdp = True  # E: Property "uses_fsdp" defined in "Plan" is read-only


def one_strategy_vocabulary(choice: StrategyChoice, held: HeldState, p: Plan) -> list[bool]:
    return [
        Strategy.chosen(choice).is_deepspeed, p.uses_deepspeed == p.strategy.is_deepspeed, choice == "deepspeed",
        choice == "zero3",  # E: Non-overlapping equality check
        held == "universal", held == "sharded",
        held == "SHARDED_STATE_DICT",  # E: Non-overlapping equality check
    ]
