"""The distributed strategy a build runs: one enum, read through its properties.

The manifest and the settings keep their strings (``"zero3"``, ``"fsdp2"``; `Strategy` is a
`StrEnum`, so it writes and compares as that string); code asks the enum instead of testing
the string (``strategy.is_deepspeed``, not ``strategy.startswith("zero")``), so that a type
checker follows every use and a rename is one edit here.

What a person chooses is coarser (`StrategyChoice`, the wizard's Sharding step): DeepSpeed is
one choice whose ZeRO stage is a setting of its own, and one process or several is
``hardware.num_processes``. `Strategy.choice` and `Strategy.chosen` map one onto the other.
"""

from __future__ import annotations

import enum
import typing
from typing import Literal

#: A person's choice of strategy (the wizard's Sharding step), in the wizard's order.
StrategyChoice = Literal["ddp", "fsdp2", "fsdp1", "deepspeed"]


def strategy_choice(text: str) -> StrategyChoice:
    """`text` as a `StrategyChoice` (ValueError when it is none)."""
    for choice in typing.get_args(StrategyChoice):
        if choice == text:
            return typing.cast(StrategyChoice, choice)
    raise ValueError(f"{text!r} is not a strategy choice ({', '.join(typing.get_args(StrategyChoice))})")


class Strategy(enum.StrEnum):
    SINGLE = "single"
    DDP = "ddp"
    FSDP1 = "fsdp1"
    FSDP2 = "fsdp2"
    ZERO0 = "zero0"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"

    @classmethod
    def zero(cls, stage: int) -> Strategy:
        """DeepSpeed ZeRO at `stage` (0-3)."""
        return cls(f"zero{stage}")

    @classmethod
    def fsdp(cls, version: int) -> Strategy:
        """FSDP `version` (1 or 2)."""
        return cls(f"fsdp{version}")

    @classmethod
    def chosen(cls, choice: StrategyChoice, zero_stage: int = 2) -> Strategy:
        """The strategy a person's choice names: ``deepspeed`` at `zero_stage`; ``ddp`` stands
        for a single process too (the plan says ``single`` when there is one)."""
        return cls.zero(zero_stage) if choice == "deepspeed" else cls(choice)

    @property
    def choice(self) -> StrategyChoice:
        """The choice that names this strategy (``zero3`` -> ``deepspeed``, ``single`` -> ``ddp``)."""
        if self.is_deepspeed:
            return "deepspeed"
        if self is Strategy.FSDP1:
            return "fsdp1"
        return "fsdp2" if self is Strategy.FSDP2 else "ddp"

    @property
    def is_deepspeed(self) -> bool:
        return self.zero_stage is not None

    @property
    def zero_stage(self) -> int | None:
        """The ZeRO stage under DeepSpeed, else None."""
        return int(self.value[4:]) if self.value.startswith("zero") else None

    @property
    def is_fsdp(self) -> bool:
        return self.fsdp_version is not None

    @property
    def fsdp_version(self) -> int | None:
        """1 or 2 under FSDP, else None."""
        return int(self.value[4:]) if self.value.startswith("fsdp") else None

    @property
    def is_sharded(self) -> bool:
        """Whether each rank holds only a shard of the parameters (FSDP, ZeRO-3)."""
        return self.is_fsdp or self is Strategy.ZERO3

    @property
    def is_distributed(self) -> bool:
        """Whether ranks take part in a process group (every strategy but a single process)."""
        return self is not Strategy.SINGLE
