"""Helpers of the data-layer tests: settings for a project folder, the family built in-process."""

from __future__ import annotations

from pathlib import Path


def settings(model: Path, **data):
    from tuner.compiler.keys.settings import Settings

    s = Settings()
    s.model.path = str(model)
    s.data.seq_len = data.pop("seq_len", 64)
    s.data.validation_split = data.pop("validation_split", 0.0)
    for k, v in data.items():
        setattr(s.data, k, v)
    return s


def family(project: Path, s, rank: int = 0, world: int = 1):
    from tuner.runtime.families.base import FamilyContext
    from tuner.runtime.families.causal_lm import CausalLMFamily

    return CausalLMFamily(FamilyContext(settings=s, base_dir=project, rank=rank, world_size=world))
