"""Typed settings: the one declaration of every key, and the resolved settings' type.

Each section is a dataclass in `compiler/keys/sections/`; each of its fields declares one key
with `setting(...)` (`compiler/keys/declare.py`): the annotation is the key's type, the rest
(default, help, aliases, choices, bounds, spellings, accelerate's name, wizard step) its
metadata. From this declaration come the JSON Schema (`tuner schema --write` regenerates
`schemas/settings.schema.json`; `compiler/keys/schema_gen.py`), the schema index the compiler
uses (`compiler/keys/schema.py`), normalise's spellings, the accelerate names of emit and the
importer, and the wizard's steps. `Settings.from_dict(manifest["settings"])` gives the rest of
tuner typed access to resolved settings, built frozen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, cast

from .sections.loop import CheckpointSettings, TrainingSettings
from .sections.parallel import ContextParallelSettings, DeepspeedSettings, FsdpSettings
from .sections.tracking import LoggingSettings
from .sections.what import DataSettings, ModelSettings, OutputSettings
from .sections.where import AccelerateSettings, ClusterSettings, HardwareSettings

__all__ = ["AccelerateSettings", "CheckpointSettings", "ClusterSettings", "ContextParallelSettings", "DataSettings",
           "DeepspeedSettings", "FsdpSettings", "HardwareSettings", "LoggingSettings", "ModelSettings", "OutputSettings",
           "Settings", "TrainingSettings",
           "global_batch"]


@dataclass(frozen=True)
class Settings:
    """All sections; build one with `Settings.from_dict` from resolved settings.

    Frozen, as is each section: a value nobody changes once built (the compile, the runtime and
    the wizard read the same one); a new value is made with `dataclasses.replace`. A list or
    table value is the settings' own copy; it is not to be changed either."""

    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)
    fsdp: FsdpSettings = field(default_factory=FsdpSettings)
    deepspeed: DeepspeedSettings = field(default_factory=DeepspeedSettings)
    context_parallel: ContextParallelSettings = field(default_factory=ContextParallelSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    output: OutputSettings = field(default_factory=OutputSettings)
    accelerate: AccelerateSettings = field(default_factory=AccelerateSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, Any]]) -> Settings:
        kwargs = {}
        for f in fields(cls):
            section_cls = cast(Callable[..., Any], f.default_factory)  # each section's class
            kwargs[f.name] = section_cls(**data.get(f.name, {}))
        return cls(**kwargs)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return asdict(self)


def global_batch(micro_batch_size: int, gradient_accumulation_steps: int, data_parallel_size: int) -> int:
    """The samples one optimizer step sees, the one formula (the plan, DeepSpeed's
    train_batch_size, the wizard): micro batch x accumulation steps x data-parallel ranks."""
    return micro_batch_size * gradient_accumulation_steps * data_parallel_size
