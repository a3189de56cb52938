"""Typed settings: the one declaration of every key, and the resolved settings' type.

Each section is a dataclass in `compiler/keys/sections/`; each of its fields declares one key
with `setting(...)` (`compiler/keys/declare.py`): the annotation is the key's type, the rest
(default, help, aliases, choices, bounds, spellings, accelerate's name, wizard step) its
metadata. From this declaration come the JSON Schema (`tuner schema --write` regenerates
`schemas/settings.schema.json`; `compiler/keys/schema_gen.py`), the schema index the compiler
uses (`compiler/keys/schema.py`), normalise's spellings, the accelerate names of emit and the
importer, and the wizard's steps. `Settings.from_dict(manifest["settings"])` gives the rest of
tuner typed access to resolved settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import FrozenInstanceError, asdict, dataclass, field, fields
from typing import Any, TypeVar, cast

from .sections.loop import CheckpointSettings, TrainingSettings
from .sections.parallel import ContextParallelSettings, DeepspeedSettings, FsdpSettings
from .sections.tracking import LoggingSettings
from .sections.what import DataSettings, ModelSettings, OutputSettings
from .sections.where import AccelerateSettings, ClusterSettings, HardwareSettings

__all__ = ["AccelerateSettings", "CheckpointSettings", "ClusterSettings", "ContextParallelSettings", "DataSettings",
           "DeepspeedSettings", "FsdpSettings", "HardwareSettings", "LoggingSettings", "ModelSettings", "OutputSettings",
           "Settings", "TrainingSettings",
           "global_batch"]


@dataclass
class Settings:
    """All sections; build one with `Settings.from_dict` from resolved settings."""

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


# --- the compile's frozen settings (the rules stage hands these on) ---------------------

_T = TypeVar("_T")
_FROZEN: dict[type, type] = {}


def _refuse(self: Any, name: str, value: Any = None) -> None:
    if "_sealed" in self.__dict__:
        raise FrozenInstanceError(f"cannot assign to field {name!r}: the compile's settings are frozen after the "
                                  "rules stage (make a new value with dataclasses.replace)")
    object.__setattr__(self, name, value)


def _frozen_class(cls: type) -> type:
    """`cls` (a settings dataclass) whose instances refuse assignment once built; equal to
    the plain class's instances with the same values."""
    if cls not in _FROZEN:
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            cls.__init__(self, *args, **kwargs)  # type: ignore[misc]
            object.__setattr__(self, "_sealed", True)

        def eq(self: Any, other: Any) -> bool:
            if not isinstance(other, cls):
                return NotImplemented
            return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(cls))

        def delete(self: Any, name: str) -> None:
            raise FrozenInstanceError(f"cannot delete field {name!r}: the compile's settings are frozen")

        _FROZEN[cls] = type(cls.__name__, (cls,), {"__init__": init, "__setattr__": _refuse, "__delattr__": delete,
                                                  "__eq__": eq, "__hash__": None, "__module__": cls.__module__})
    return _FROZEN[cls]


def freeze(s: Settings) -> Settings:
    """`s` as a value nobody changes: each section (and the whole) refuses assignment."""
    sections = {f.name: _freeze_one(getattr(s, f.name)) for f in fields(Settings)}
    frozen: Settings = _frozen_class(Settings)(**sections)
    return frozen


def _freeze_one(section: _T) -> _T:
    cls = type(section)
    if cls in _FROZEN.values():
        return section
    out: _T = _frozen_class(cls)(**{f.name: getattr(section, f.name) for f in fields(cls)})  # type: ignore[arg-type]
    return out
