"""The distributed strategy a build runs: one enum, read through its properties.

The manifest and the settings keep their strings (``"zero3"``, ``"fsdp2"``; `Strategy` is a
`StrEnum`, so it writes and compares as that string); code asks the enum instead of testing
the string (``strategy.is_deepspeed``, not ``strategy.startswith("zero")``), so that a type
checker follows every use and a rename is one edit here.
"""

from __future__ import annotations

import enum


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
