"""The `Plan`: what the settings resolve to (the strategy, the topology, the global batch),
written to the manifest for the runtime.

The rules stage makes it, once (`rules.check`); the later stages (the memory estimate, the
review, the artefacts) and the runtime read it. It has its own module so that none of them
imports the rules for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from .strategy import Strategy


@dataclass(frozen=True)
class Plan:
    """What the settings resolve to; written to the manifest for the runtime."""

    strategy: Strategy
    """single, ddp, fsdp1, fsdp2, zero0, zero1, zero2 or zero3 (written as that string)."""
    distributed_type: str
    """accelerate's DistributedType name."""
    platform: str
    world_size: int
    processes_per_machine: int
    data_parallel_size: int
    global_batch_size: int

    # The strategy is the one vocabulary: these two are read from it (the manifest still
    # writes them, for scripts that read it).
    @property
    def uses_deepspeed(self) -> bool:
        return self.strategy.is_deepspeed

    @property
    def uses_fsdp(self) -> bool:
        return self.strategy.is_fsdp

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``plan``: the fields, then ``uses_deepspeed`` and ``uses_fsdp``."""
        return {**asdict(self), "uses_deepspeed": self.uses_deepspeed, "uses_fsdp": self.uses_fsdp}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """The manifest's ``plan`` (checked by the runtime's `manifest_problem`) -> a `Plan`;
        the derived ``uses_*`` entries are not read."""
        values = {f.name: data[f.name] for f in fields(cls)}
        return cls(**{**values, "strategy": Strategy(values["strategy"])})
