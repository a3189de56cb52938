"""The `Plan`: what the settings resolve to (the strategy, the topology, the global batch),
written to the manifest for the runtime.

The rules stage makes it, once (`rules.check`); the later stages (the memory estimate, the
review, the artefacts) and the runtime read it. It has its own module so that none of them
imports the rules for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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
    uses_deepspeed: bool
    uses_fsdp: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
